"""The net that owns training (skcontrast/_estimators/_net.py): skorch extended through
its public hooks, the fit iterating the public sampler, the step returning its terms."""

import numpy as np
import pytest
import torch
from skorch import NeuralNet
from torch.utils.data import DataLoader

from skcontrast import ContrastiveEmbedder
from skcontrast._estimators._data import GatheredBatches, ItemViews, TensorViews
from skcontrast._estimators._distributed import DistributedSelectorNet
from skcontrast._estimators._net import SelectorNet
from skcontrast.datasets import make_paired_gaussians
from skcontrast.losses import LossTerms
from skcontrast.selectors import SampledBatch, SelectorSampler

SMALL = {"n_components": 4, "hidden_layer_sizes": (8,), "max_epochs": 1, "random_state": 0,
         "batch_size": 16}


def overridden(cls):
    """The methods of skorch's ``NeuralNet`` (and its bases) that ``cls`` overrides."""
    own = {name for base in cls.__mro__[:cls.__mro__.index(NeuralNet)] for name in vars(base)
           if callable(vars(base)[name]) or isinstance(vars(base)[name], property)}
    skorch = {name for base in NeuralNet.__mro__[:-1] for name in vars(base)}
    return sorted(own & skorch)


def replaced(cls):
    """The overrides of skorch's methods in ``cls`` that do not call skorch's own."""
    import inspect

    return [name for name in overridden(cls)
            if "super()" not in inspect.getsource(getattr(cls, name))]


@pytest.mark.parametrize("cls", [SelectorNet, DistributedSelectorNet])
def test_the_net_extends_skorch_and_replaces_at_most_six_of_its_methods_none_private(cls):
    """It overrode 19 (the epoch loop, partial_fit, notify, two private ones); now at
    most six overrides replace skorch's method instead of extending it (``super()``),
    and none is private. (Issue: three.)"""
    names = overridden(cls)
    assert len(replaced(cls)) <= 6, replaced(cls)
    assert not [n for n in names if n.startswith("_") and not n.endswith("__")], names


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
