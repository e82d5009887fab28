"""The net that owns training (skcontrast/_estimators/_net.py): skorch extended through
its public hooks, the fit iterating the public sampler, the step returning its terms."""

import numpy as np
import pytest
import torch
from _helpers import peak_anonymous_memory
from torch.utils.data import DataLoader

from skcontrast import ContrastiveEmbedder
from skcontrast._estimators._data import GatheredBatches, ItemViews, TensorViews
from skcontrast._estimators._net import SelectorNet
from skcontrast.datasets import make_paired_gaussians
from skcontrast.losses import LossTerms
from skcontrast.selectors import SampledBatch, SelectorSampler

SMALL = {"n_components": 4, "hidden_layer_sizes": (8,), "max_epochs": 1, "random_state": 0,
         "batch_size": 16}


def test_data_parallel_training_is_an_object_of_the_plan_not_a_subclass_of_the_net():
    import skcontrast._estimators as package
    from skcontrast._estimators._replicas import AcceleratedReplicas, Replicas

    subclasses = [c for c in SelectorNet.__subclasses__()
                  if c.__module__.startswith(package.__name__)]
    assert not subclasses
    own = {n for n in vars(Replicas) if not n.startswith("_")}
    assert {n for n in vars(AcceleratedReplicas) if not n.startswith("_")} <= own


def test_the_fit_iterates_the_public_sampler():
    X, _ = make_paired_gaussians(40, 4, random_state=0)
    net = ContrastiveEmbedder(**SMALL).fit(X).net_
    assert isinstance(net.sampler_, SelectorSampler) and net.sampler_.selector is net.selector
    data = TensorViews((torch.zeros(40, 4), torch.zeros(40, 4)))
    gathered = net.get_iterator(data, training=True)
    assert isinstance(gathered, GatheredBatches) and gathered.sampler is net.sampler_
    pairs = [(np.zeros(4, np.float32), np.ones(4, np.float32)) for _ in range(40)]
    dataset = ItemViews(pairs, _spec_of_pairs(4))
    loader = net.get_iterator(dataset, training=True)
    assert isinstance(loader, DataLoader) and loader.batch_sampler is net.sampler_
    batch = next(iter(net.sampler_))
    assert isinstance(batch, SampledBatch) and list(batch) == batch.batch.tolist()
    assert sum(len(b.index) for b in loader) == 40  # one epoch, every row once


def _spec_of_pairs(d):
    from skcontrast._estimators._data import InputSpec, View

    return InputSpec("dataset", (View(0, (d,), False), View(1, (d,), False)),
                     items_paired=True)


def test_the_step_returns_its_loss_terms():
    """The terms reached the epoch loop through an attribute the loss left on the net."""
    X, _ = make_paired_gaussians(32, 4, random_state=0)
    net = ContrastiveEmbedder(**SMALL).fit(X).net_
    data = TensorViews((torch.from_numpy(X[:, 0]), torch.from_numpy(X[:, 1])))
    batch = data.gather(torch.arange(16))
    step = net.train_step(batch)
    terms = step["terms"]
    assert isinstance(terms, LossTerms) and step["loss"] is terms.loss
    assert np.isfinite(float(terms.positive)) and np.isfinite(float(terms.entropy))
    held = net.validation_step(batch)
    assert isinstance(held["terms"], LossTerms)
    assert "_batch_terms" not in vars(net)


def test_callbacks_after_each_batch_read_its_values_at_every_verbose():
    """A callback acting on ``on_batch_end`` reads the batch's ``train_loss`` from the
    history, at ``verbose=0`` too (it was ``None`` there: the values were recorded
    after the epoch), so ``LRScheduler(ReduceLROnPlateau, step_every='batch')``, which
    reads it, runs."""
    from skorch.callbacks import Callback, LRScheduler

    class Seen(Callback):
        def initialize(self):
            self.values = []
            return self

        def on_batch_end(self, net, training=True, **kwargs):
            self.values.append(net.history[-1, "batches", -1].get("train_loss"))

    X, _ = make_paired_gaussians(64, 4, random_state=0)
    for verbose in (0, 1):
        seen = Seen()
        est = ContrastiveEmbedder(**{**SMALL, "verbose": verbose, "callbacks": [seen]}).fit(X)
        assert seen.values == [b["train_loss"] for b in est.history_[-1, "batches"]]
        assert len(seen.values) == 4 and None not in seen.values
    plateau = LRScheduler(torch.optim.lr_scheduler.ReduceLROnPlateau, step_every="batch",
                          patience=0, factor=0.5)
    est = ContrastiveEmbedder(**{**SMALL, "max_epochs": 3, "lr": 1.0, "optimizer": "sgd",
                                 "callbacks": [plateau]}).fit(X)
    assert est.net_.optimizer_.param_groups[0]["lr"] < 1.0  # it stepped on plateaus


class _TwoNoisyCrops(torch.utils.data.Dataset):
    """Items drawn at random as users write them: two noisy copies from torch's global
    generator."""

    def __init__(self, x):
        self.x = x

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i] + 0.3 * torch.randn(self.x.shape[1]), \
            self.x[i] + 0.3 * torch.randn(self.x.shape[1])


@pytest.mark.slow  # DataLoader workers are processes
def test_random_items_give_one_model_whatever_the_workers_and_two_plus_two_is_four():
    """Each item's random views are of (seed, epoch, item): one model for 0, 1 or 2
    workers, and 2 + 2 epochs are 4 (with workers the fit's streams reseeded only the
    main process: up to 0.058 apart)."""
    x = torch.randn(48, 6, generator=torch.Generator().manual_seed(0))
    data = _TwoNoisyCrops(x)
    params = {**SMALL, "batch_size": 16}
    expected = ContrastiveEmbedder(**{**params, "max_epochs": 4}).fit(data).transform(
        x.numpy())
    for workers in (0, 1, 2):
        four = ContrastiveEmbedder(**{**params, "max_epochs": 4, "num_workers": workers}
                                   ).fit(data)
        np.testing.assert_array_equal(four.transform(x.numpy()), expected)
        two = ContrastiveEmbedder(**{**params, "max_epochs": 2, "num_workers": workers}
                                  ).fit(data)
        two.set_params(warm_start=True).fit(data)
        np.testing.assert_array_equal(two.transform(x.numpy()), expected)


@pytest.mark.parametrize("settings", [
    {"selector": "spectral"},
    {"selector": "spectral", "selection_pass": "cached"},
    {"selector": "tempered"},
    {"selector": "jest"},
    {"memory": "sogclr"},
], ids=["spectral", "cached", "tempered", "curation", "memory"])
def test_checkpoint_and_load_init_state_resume_to_the_uninterrupted_fit(tmp_path, settings):
    """skorch's workflow: ``Checkpoint`` every epoch, then a new fit with
    ``LoadInitState`` of that checkpoint trains 2 more epochs; it equals 4 uninterrupted
    epochs (the selector's epoch and state, the sampler's tables, a curating selector's
    tables and a memory travel in the loss module's state, which the checkpoint saves).
    It resumed at the selector's epoch 0: 0.02 apart."""
    from skorch.callbacks import Checkpoint, LoadInitState

    from skcontrast.losses import DCL
    from skcontrast.memory import SogCLRMemory
    from skcontrast.selectors import JESTSelector, SpectralBatchSelector, TemperedSelector

    X, _ = make_paired_gaussians(64, 6, random_state=0)
    reference = np.random.default_rng(1).normal(size=(64, 2, 4)).astype(np.float32)
    selectors = {"spectral": lambda: SpectralBatchSelector(16, random_state=0),
                 "tempered": lambda: TemperedSelector(SpectralBatchSelector(16),
                                                      refresh_every=3, random_state=0),
                 "jest": lambda: JESTSelector(16, n_chunks=2, reference=reference,
                                              random_state=0)}
    params = {**SMALL, "batch_size": None}
    if "selector" in settings:
        params["selector"] = selectors[settings["selector"]]()
    if "selection_pass" in settings:
        params["selection_pass"] = settings["selection_pass"]
    if "memory" in settings:
        params.update(memory=SogCLRMemory(0.5), loss=DCL(), batch_size=16)
    whole = ContrastiveEmbedder(**{**params, "max_epochs": 4}).fit(X)
    folder = str(tmp_path)
    ContrastiveEmbedder(**{**params, "max_epochs": 2, "callbacks": [
        Checkpoint(dirname=folder, monitor=None)]}).fit(X)
    resumed = ContrastiveEmbedder(**{**params, "max_epochs": 2, "callbacks": [
        Checkpoint(dirname=folder, monitor=None),
        LoadInitState(Checkpoint(dirname=folder, monitor=None))]}).fit(X)
    assert len(resumed.history_) == 4 and resumed.net_.selector.current_epoch == 4
    np.testing.assert_allclose(resumed.transform(X), whole.transform(X), atol=1e-6)


# Every callback skorch exports, as a skorch user writes it ---------------------------

_OPTIONAL = {"MlflowLogger": "mlflow", "NeptuneLogger": "neptune", "SacredLogger": "sacred",
             "WandbLogger": "wandb"}


def _fit(callbacks, X, **extra):
    params = {**SMALL, "max_epochs": 3, "validation_fraction": 0.25, **extra}
    return ContrastiveEmbedder(**params, callbacks=callbacks).fit(X)


def _first_weight(est):
    return est.net_.module_.encoders[0][0].weight.detach().clone()


class _Snapshots:
    """A callback class recording the first layer's weight after each epoch."""

    @staticmethod
    def make():
        from skorch.callbacks import Callback

        class Snapshots(Callback):
            def initialize(self):
                self.weights = []
                return self

            def on_epoch_end(self, net, **kwargs):
                self.weights.append(net.module_.encoders[0][0].weight.detach().clone())

        return Snapshots()


def _check_callback(name, X, tmp_path, capsys):
    """What callback ``name`` does in a fit: one case per callback."""
    import skorch.callbacks as C

    if name == "BatchScoring":
        est = _fit([C.BatchScoring("recall@1", on_train=True, lower_is_better=False)], X)
        batches = [b["recall@1"] for b in est.history_[-1, "batches"] if "recall@1" in b]
        assert batches and est.history_[-1, "recall@1"] == pytest.approx(np.mean(batches))
    elif name == "EpochScoring":
        est = _fit([C.EpochScoring("recall@1", lower_is_better=False)], X, scoring="recall@1")
        assert est.history_[:, "recall@1"] == est.history_[:, "valid_score"]
    elif name == "Callback":
        assert len(_fit([C.Callback()], X).history_) == 3
    elif name == "Checkpoint":
        _fit([C.Checkpoint(dirname=str(tmp_path))], X)
        assert (tmp_path / "params.pt").exists() and (tmp_path / "criterion.pt").exists()
    elif name == "LoadInitState":
        checkpoint = C.Checkpoint(dirname=str(tmp_path), monitor=None)
        _fit([checkpoint], X)
        resumed = _fit([C.Checkpoint(dirname=str(tmp_path), monitor=None),
                        C.LoadInitState(checkpoint)], X)
        assert len(resumed.history_) == 6 and resumed.net_.selector.current_epoch == 6
    elif name == "EarlyStopping":
        est = _fit([C.EarlyStopping(patience=1)], X, max_epochs=10, lr=1e-12)
        assert len(est.history_) < 10
    elif name == "EpochTimer":
        assert all(d > 0 for d in _fit([C.EpochTimer()], X).history_[:, "dur"])
    elif name == "Freezer":
        frozen = _fit([C.Freezer("encoders.0.0.weight")], X)
        start = ContrastiveEmbedder(**{**SMALL, "max_epochs": 1, "lr": 1e-30}).fit(X)
        torch.testing.assert_close(_first_weight(frozen), _first_weight(start))
    elif name == "Unfreezer":
        snapshots = _Snapshots.make()
        _fit([C.Freezer("encoders.0.0.weight"), C.Unfreezer("encoders.0.0.weight", at=2),
              snapshots], X)
        first, second, _ = snapshots.weights
        start = _first_weight(ContrastiveEmbedder(**{**SMALL, "max_epochs": 1,
                                                     "lr": 1e-30}).fit(X))
        torch.testing.assert_close(first, start)  # frozen in epoch 1
        assert not torch.equal(second, first)  # trained from epoch 2
    elif name == "GradientNormClipping":
        est = _fit([C.GradientNormClipping(1e-4)], X, optimizer="sgd", lr=1.0,
                   validation_fraction=None, max_epochs=1)
        start = _first_weight(ContrastiveEmbedder(**{**SMALL, "max_epochs": 1,
                                                     "lr": 1e-30}).fit(X))
        steps = len(est.history_[-1, "batches"])
        assert float((_first_weight(est) - start).norm()) <= steps * 1e-4 * 1.0001
    elif name in ("Initializer", "ParamMapper"):
        calls = []

        def fill(parameter):
            calls.append(tuple(parameter.shape))
            with torch.no_grad():
                parameter.fill_(0.5)

        est = _fit([getattr(C, name)("encoders.0.0.bias", fn=fill, at=1)], X, lr=1e-30)
        assert len(calls) == 1  # at epoch 1 only
        assert torch.allclose(est.net_.module_.encoders[0][0].bias, torch.tensor(0.5))
    elif name == "InputShapeSetter":
        with pytest.raises(ValueError, match=r"InputShapeSetter, which has nothing to act on "
                                             r"here: .*n_components, hidden_layer_sizes"):
            _fit([C.InputShapeSetter()], X)
    elif name == "LRScheduler":
        est = _fit([C.LRScheduler(torch.optim.lr_scheduler.StepLR, step_size=1, gamma=0.5)],
                   X, lr=0.01)
        assert est.history_[:, "event_lr"] == pytest.approx([0.01, 0.005, 0.0025])
        per_batch = _fit([C.LRScheduler(torch.optim.lr_scheduler.ReduceLROnPlateau,
                                        step_every="batch", patience=0)], X)
        assert per_batch.net_.optimizer_.param_groups[0]["lr"] < per_batch.lr
    elif name == "WarmRestartLR":
        est = _fit([C.LRScheduler(C.WarmRestartLR, min_lr=1e-4, max_lr=0.01,
                                  base_period=1)], X)
        assert len(set(est.history_[:, "event_lr"])) > 1
    elif name == "PassthroughScoring":
        est = _fit([C.PassthroughScoring("train_batch_size", on_train=True)], X)
        sizes = [b["train_batch_size"] for b in est.history_[-1, "batches"]
                 if "train_batch_size" in b]
        assert est.history_[-1, "train_batch_size"] == pytest.approx(np.mean(sizes))
    elif name == "PrintLog":  # printed with verbose, or to a sink of the user's
        lines = []
        _fit([C.PrintLog(sink=lines.append)], X)
        assert "train_loss" in lines[0] and len(lines) == 2 + 3
        _fit([C.PrintLog()], X, verbose=1)
        assert "train_loss" in capsys.readouterr().out
    elif name == "ProgressBar":
        assert len(_fit([C.ProgressBar()], X).history_) == 3
    elif name == "TensorBoard":
        pytest.importorskip("tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        _fit([C.TensorBoard(SummaryWriter(str(tmp_path)))], X)
        assert list(tmp_path.glob("events.out.tfevents.*"))
    elif name == "TrainEndCheckpoint":
        _fit([C.TrainEndCheckpoint(dirname=str(tmp_path))], X)
        assert (tmp_path / "train_end_params.pt").exists()
    else:
        raise AssertionError(f"skorch exports a callback {name} this test has no case for: "
                             "add what it does with the estimators (or refuse it in fit)")


@pytest.mark.parametrize("name", __import__("skorch.callbacks").callbacks.__all__)
def test_every_callback_skorch_exports_acts_as_on_a_neural_net(name, tmp_path, capsys):
    """Each of ``skorch.callbacks.__all__``, as a skorch user writes it, has its effect
    (or is refused when fit starts, naming what to use); a callback a later skorch adds
    fails here until it has a case. The loggers of services this machine lacks skip."""
    if name in _OPTIONAL:
        pytest.importorskip(_OPTIONAL[name], reason=f"{name} needs {_OPTIONAL[name]}")
    X, _ = make_paired_gaussians(64, 4, random_state=0)
    _check_callback(name, X, tmp_path, capsys)



@pytest.mark.slow
def test_an_epochs_memory_does_not_grow_with_its_steps():
    """The batch values are read from the device once per epoch. The epoch kept each
    step's own scalars, allocated among the step's large temporaries, which then could
    not be given back: anonymous memory grew by about 1.5 MB a step (+448 MiB over the
    245 steps of 250,000 pairs at B=1024, +2.1 GiB over 977 steps); a small tensor per
    step still pinned 50 kB a step. The values now go into one buffer."""
    rng = np.random.default_rng(0)
    z = rng.normal(size=(250_000, 32)).astype(np.float32)
    X = np.stack([z, z + np.float32(0.1) * rng.normal(size=z.shape).astype(np.float32)], 1)
    est = ContrastiveEmbedder(max_epochs=1, batch_size=1024, hidden_layer_sizes=(64,),
                              n_components=16, random_state=0)
    grown, _ = peak_anonymous_memory(lambda: est.fit(X))
    assert grown < 250 * 2**20, grown / 2**20


@pytest.mark.slow
def test_transform_holds_the_output_and_a_batch():
    """The embedding pass kept every batch's embeddings, concatenated them and then
    normalised a copy: three times the output (+535 MiB for 244 MiB of embeddings of 4M
    pairs); it now writes each batch into the one output."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1_000_000, 2, 8)).astype(np.float32)
    est = ContrastiveEmbedder(max_epochs=1, hidden_layer_sizes=(16,), n_components=32,
                              random_state=0).fit(X[:512])
    grown, out = peak_anonymous_memory(lambda: est.transform(X))
    assert out.shape == (1_000_000, 32)
    assert grown < out.nbytes + 64 * 2**20, (grown / 2**20, out.nbytes / 2**20)
