"""What the two estimators share (skcontrast/_estimators/_base.py and _net.py): warm
starts, finiteness, held-out rows, threads, interrupts and the checks of their settings.
"""

import importlib.util
import pickle
import signal
import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from _helpers import (
    SMALL_IMAGES,
    RecordingSelector,
    image_pairs,
    paired_gaussians,
    requires_cuda,
    small_mlp,
    tiny_cnn,
)
from sklearn.model_selection import GridSearchCV
from skorch.callbacks import Callback, Checkpoint, EarlyStopping
from torch import nn

import skcontrast
from skcontrast import ContrastiveEmbedder, SupConEmbedder
from skcontrast._estimators import _base
from skcontrast.datasets import GaussianNoise, make_paired_gaussians
from skcontrast.exceptions import TrainingDivergedError, TrainingInterrupted
from skcontrast.losses import (
    SigLIP,
    SymmetricInfoNCE,
)
from skcontrast.memory import CrossBatchMemory, SogCLRMemory
from skcontrast.model_selection import BalanceSearchCV
from skcontrast.selectors import (
    OSGDSelector,
    PredefinedBatchSelector,
    ShuffledBatchSelector,
)

SMALL = {"n_components": 4, "hidden_layer_sizes": (8,), "max_epochs": 2, "lr": 1e-2,
         "random_state": 0, "device": "cpu", "selector": ShuffledBatchSelector(16)}


@pytest.fixture(scope="module")
def pairs():
    return make_paired_gaussians(64, 6, n_clusters=4, random_state=0)


# Divergence on the last step ---------------------------------------------------------

class PoisonLastStep(Callback):
    """Makes the very last update of a fit produce NaN weights (its loss was finite)."""

    def on_grad_computed(self, net, named_parameters, training=False, **kwargs):
        last_epoch = len(net.history) == net.max_epochs
        n_batches = len(net.sampler_)  # the selector's batches of the fit's rows
        if training and last_epoch and len(net.history[-1]["batches"]) == n_batches:
            next(iter(net.module_.parameters())).grad.fill_(float("nan"))


@pytest.mark.parametrize("kind, extra, message", [
    (ContrastiveEmbedder, {}, "in its last steps"),
    (ContrastiveEmbedder, {"validation_fraction": 0.25}, "held-out loss was nan"),
    (SupConEmbedder, {}, "in its last steps"),
])
def test_divergence_on_the_last_step_is_refused(pairs, kind, extra, message):
    X, y = pairs
    est = kind(**{**SMALL, **extra, "optimizer": "sgd", "callbacks": [PoisonLastStep()]})
    with pytest.raises(TrainingDivergedError, match=message):
        est.fit(X[:, 0] if kind is SupConEmbedder else X, y)
    assert not hasattr(est, "net_")


# warm_start follows set_params -------------------------------------------------------

def _warm(X, y=None, kind=ContrastiveEmbedder, **first):
    est = kind(**{**SMALL, **first, "warm_start": True})
    return est.fit(X, y)


@pytest.mark.parametrize("change, check", [
    ({"lr": 0.123}, lambda e: e.net_.optimizer_.param_groups[0]["lr"] == 0.123),
    ({"loss__temperature": 0.37}, lambda e: e.net_.criterion_.temperature == 0.37),
    ({"loss": "nt_xent"}, lambda e: type(e.net_.criterion_.loss).__name__ == "NTXent"),
    ({"loss__lambda_ent": 0.25}, lambda e: e.net_.criterion_.loss.lambda_ent == 0.25),
    ({"batch_size": 8}, lambda e: e.history_[-1, "n_batches"] == 8),
    ({"max_epochs": 3}, lambda e: len(e.history_) == 5),
    ({"optimizer": "sgd"}, lambda e: isinstance(e.net_.optimizer_, torch.optim.SGD)),
    ({"micro_batch_size": 4}, lambda e: e.net_.plan.micro_batch_size == 4),
    ({"selector": OSGDSelector(16, k=2, q=1)},
     lambda e: e.history_[-1, "n_batches"] == 2 and e.net_.selector.current_epoch == 4),
    ({"loss__learn_temperature": True},
     lambda e: e.net_.criterion_.learn_temperature and e.temperature_ != 0.1),
    ({"precision": "bfloat16"}, lambda e: e.net_.plan.precision == "bfloat16"),
])
def test_a_warm_start_applies_the_parameters_changed_since(pairs, change, check):
    X, _ = pairs
    est = _warm(X)
    est.set_params(**change).fit(X)
    assert check(est)


def test_a_warm_start_applies_freezing(pairs):
    X, _ = pairs
    est = _warm(X, projection_head=4)
    before = [p.detach().clone() for p in est.net_.module_.encoders.parameters()]
    est.set_params(freeze="backbone").fit(X)
    after = list(est.net_.module_.encoders.parameters())
    assert all(torch.equal(a, b) for a, b in zip(after, before, strict=True))


def test_a_warm_start_applies_memory_settings_and_keeps_the_memory(pairs):
    X, _ = pairs
    est = _warm(X, loss="dcl", memory=SogCLRMemory(0.9))
    visited = est.net_.memory_state.visited.clone()
    est.set_params(memory__gamma=0.3).fit(X)
    assert est.net_.memory_state.gamma == 0.3 and visited.all()


@pytest.mark.parametrize("change, named", [
    ({"n_components": 5}, "n_components"),
    ({"hidden_layer_sizes": (9,)}, "hidden_layer_sizes"),
    ({"projection_head": "mlp"}, "projection_head"),
    ({"module": nn.Linear(6, 4)}, "module"),
    ({"memory": CrossBatchMemory(64)}, "memory"),
])
def test_a_warm_start_refuses_what_changes_the_networks_structure(pairs, change, named):
    X, _ = pairs
    est = _warm(X)
    fitted = est.transform(X)
    with pytest.raises(ValueError, match=rf"change its structure: {named}"):
        est.set_params(**change).fit(X)
    np.testing.assert_array_equal(est.transform(X), fitted)  # the model is as it was


def test_a_warm_start_refuses_another_memory_size_or_a_loss_its_memory_was_not_built_for(
        pairs):
    X, _ = pairs
    est = _warm(X, memory=CrossBatchMemory(64), loss="supcon")
    with pytest.raises(ValueError, match="memory"):
        est.set_params(memory__size=128).fit(X)
    est = _warm(X, memory=SogCLRMemory(), loss="dcl")
    with pytest.raises(ValueError, match="memory state was built for 'dcl'"):
        est.set_params(loss="nt_xent").fit(X)


# Warm starts keep the held-out rows ---------------------------------------------------

def test_warm_starts_hold_out_the_same_rows(pairs):
    X, _ = pairs
    est = _warm(X, validation_fraction=0.25, random_state=None, memory=SogCLRMemory(),
                loss="dcl")
    rows = est.net_.plan.held_out_rows.copy()
    for _ in range(3):
        est.fit(X)
        np.testing.assert_array_equal(est.net_.plan.held_out_rows, rows)
    assert est.net_.memory_state.n_samples == len(X) - len(rows)
    with pytest.raises(ValueError, match="keeps the same held-out rows"):
        est.set_params(validation_fraction=0.5).fit(X)
    with pytest.raises(ValueError, match="keeps the same held-out rows"):
        est.set_params(validation_fraction=None).fit(X)


# module__* needs a module class --------------------------------------------------------

def test_module_parameters_with_the_default_mlp_are_refused(pairs):
    X, _ = pairs
    with pytest.raises(ValueError, match=r"module__\* parameters \(hidden\).*module=None"):
        ContrastiveEmbedder(**SMALL, module__hidden=32).fit(X)


# Predefined batches name rows of X ---------------------------------------------------

def test_predefined_batches_keep_naming_rows_of_x_with_held_out_rows(pairs):
    X, _ = pairs
    batches = [np.arange(i, i + 8) for i in range(0, 64, 8)]
    est = ContrastiveEmbedder(**{**SMALL, "selector": PredefinedBatchSelector(batches),
                                 "validation_fraction": 0.25})
    with pytest.warns(UserWarning, match="16 entries of the PredefinedBatchSelector"):
        est.fit(X)
    held = set(est.net_.plan.held_out_rows.tolist())
    kept = np.setdiff1d(np.arange(64), sorted(held))
    trained = [kept[b].tolist() for b in est.net_.selector.batches]
    assert trained == [[i for i in b.tolist() if i not in held] for b in batches]


# Reproducible under threads; the caller's RNG untouched ------------------------------

class Dropping(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_in, 16), nn.Dropout(0.5), nn.Linear(16, n_out))

    def forward(self, x):
        return self.body(x)


def test_fits_in_threads_give_the_sequential_results_and_say_so_once(pairs, monkeypatch):
    X, _ = pairs
    monkeypatch.setattr(_base, "_warned_turns", False)
    seeds = [0, 1, 2, 3]

    def fit(seed):
        return ContrastiveEmbedder(Dropping, **{**SMALL, "random_state": seed}).fit(X)

    alone = [fit(seed).transform(X) for seed in seeds]
    start = threading.Barrier(len(seeds))

    def together(seed):
        start.wait()
        return fit(seed).transform(X)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ThreadPoolExecutor(len(seeds)) as pool:
            results = list(pool.map(together, seeds))
    for a, b in zip(results, alone, strict=True):
        np.testing.assert_array_equal(a, b)
    said = [w for w in caught if "take turns" in str(w.message)]
    assert len(said) == 1


def test_fit_and_transform_leave_the_callers_random_stream_alone(pairs):
    X, _ = pairs
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    est = ContrastiveEmbedder(**SMALL).fit(X)
    torch.testing.assert_close(torch.rand(3), expected)
    torch.manual_seed(5)
    est.transform(X)
    est.score(X)
    torch.testing.assert_close(torch.rand(3), expected)


# 14 and 20. Interrupts and normal stops -------------------------------------------------

class CtrlC(Callback):
    """A real SIGINT in the first batch of the second epoch of the ``at``-th fit."""

    fits = 0

    def __init__(self, at=1):
        self.at = at

    def on_train_begin(self, net, **kwargs):
        CtrlC.fits += 1

    def on_batch_end(self, net, training=False, **kwargs):
        if training and CtrlC.fits == self.at and len(net.history) == 2:
            signal.raise_signal(signal.SIGINT)


def test_ctrl_c_in_a_search_stops_the_search_instead_of_scoring_the_candidate(pairs):
    X, _ = pairs
    CtrlC.fits = 0
    search = GridSearchCV(ContrastiveEmbedder(**{**SMALL, "callbacks": [CtrlC(at=2)]}),
                          {"lr": [1e-2, 1e-3]}, cv=2, n_jobs=1, error_score="raise")
    with pytest.raises(TrainingInterrupted, match="fit stopped after 1 of 2 epochs"):
        search.fit(X)
    assert not hasattr(search, "cv_results_")


def test_early_stopping_and_load_best_are_not_called_interrupts(pairs, tmp_path,
                                                               monkeypatch):
    X, _ = pairs
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stopped = ContrastiveEmbedder(**{**SMALL, "max_epochs": 40, "lr": 0.5,
                                         "optimizer": "sgd", "validation_fraction": 0.25,
                                         "callbacks": [EarlyStopping(patience=1)]}).fit(X)
        ContrastiveEmbedder(**{**SMALL, "validation_fraction": 0.25,
                               "callbacks": [Checkpoint(load_best=True)]}).fit(X)
    assert len(stopped.history_) < 40


# Pickles ----------------------------------------------------------------------------

def test_pickles_hold_string_scorers_and_never_the_held_out_rows(pairs):
    X, y = pairs
    X = X.astype(np.float32)
    est = ContrastiveEmbedder(**{**SMALL, "validation_fraction": 0.25,
                                 "scoring": "map@r"}).fit(X, y)
    blob = pickle.dumps(est)
    for row in est.net_.plan.held_out_rows:
        assert X[row].tobytes() not in blob
    again = pickle.loads(blob)
    np.testing.assert_array_equal(again.transform(X), est.transform(X))
    again.set_params(warm_start=True, max_epochs=1).fit(X, y)


# Clear errors instead of raw ones -----------------------------------------------------

@pytest.mark.parametrize("params, fit, message", [
    ({"validation_fraction": 0.25, "callbacks": [EarlyStopping(monitor="valid_score",
                                                               lower_is_better=False)]},
     {}, "recorded only with a scoring"),
    ({"freeze": "backbone"}, {}, "without a projection_head nothing would train"),
    ({"loss": SymmetricInfoNCE(directions="both")}, {},
     "SymmetricInfoNCE: directions must be one of"),
    ({"temperature": 0.2}, {}, r"temperature is now a parameter .*loss__temperature"),
    ({}, {"X_val": "one"}, "X_val holds 1 sample"),
    ({"image_normalization": ((0.5, 0.5, 0.5), (0.2, 0.2, 0.2))}, {},
     "image_normalization has 3 values per channel"),
])
def test_settings_that_cannot_work_are_refused_by_name(pairs, params, fit, message):
    X, _ = pairs
    fit = {"X_val": X[:1]} if fit else {}
    with pytest.raises(ValueError, match=message):
        ContrastiveEmbedder(**{**SMALL, **params}).fit(X, **fit)


def test_balance_search_with_several_scorers_needs_the_one_to_follow(pairs):
    X, _ = pairs
    search = BalanceSearchCV(ContrastiveEmbedder(**SMALL), scoring=["recall@1", "map@r"],
                             refit=False, budget=2)
    with pytest.raises(ValueError, match="refit must name one of them"):
        search.fit(X)


def test_scoring_a_loaded_single_view_model_without_its_augmentation_says_what_to_pass(
        pairs, tmp_path):
    from skcontrast.datasets import GaussianNoise

    X, _ = pairs
    est = ContrastiveEmbedder(**SMALL, augmentation=GaussianNoise(0.1)).fit(X[:, 0])
    loaded = skcontrast.load(est.save(tmp_path / "m"))
    loaded.set_params(augmentation=None)
    with pytest.raises(ValueError, match=r"augmentation=\.\.\."):
        loaded.score(X[:, 0])


# Parameter groups match, or say so ---------------------------------------------------

def test_parameter_groups_use_the_modules_own_names_and_must_match(pairs):
    X, _ = pairs
    est = ContrastiveEmbedder(**SMALL, optimizer__param_groups=[("0.*", {"lr": 0.5})]).fit(X)
    first = est.net_.optimizer_.param_groups[0]
    assert first["lr"] == 0.5 and len(first["params"]) == 2  # the first layer's two
    with pytest.raises(ValueError, match=r"pattern 'layer1\.\*' matches no parameter"):
        ContrastiveEmbedder(**SMALL, optimizer__param_groups=[("layer1.*", {"lr": 1})]).fit(X)


# The selection pass: embeddings the training steps computed -----------

def count_fresh_passes(monkeypatch):
    from skcontrast._estimators._net import SelectorNet

    passes = []
    original = SelectorNet.selection_embeddings

    def counting(self, indices=None):
        out = original(self, indices)
        passes.append(len(self.fit_.data) if indices is None else len(indices))
        return out

    monkeypatch.setattr(SelectorNet, "selection_embeddings", counting)
    return passes


@pytest.mark.parametrize("kind, data, extra", [
    (ContrastiveEmbedder, "pairs", {}),
    (ContrastiveEmbedder, "single", {"augmentation": "noise"}),
    (SupConEmbedder, "single", {}),
    (SupConEmbedder, "single", {"augmentation": "noise"}),
])
def test_cached_selection_takes_no_pass_after_the_first_epoch(pairs, monkeypatch, kind, data,
                                                             extra):

    from skcontrast.datasets import GaussianNoise
    from skcontrast.selectors import SpectralBatchSelector

    X, y = pairs
    if extra.get("augmentation") == "noise":
        extra = {"augmentation": GaussianNoise(0.1)}
    X = X if data == "pairs" else X[:, 0]
    shape = (64, 2, 4) if data == "pairs" and kind is ContrastiveEmbedder else (64, 4)
    runs = {}
    for mode in ("fresh", "cached"):
        passes = count_fresh_passes(monkeypatch)
        est = kind(**{**SMALL, "max_epochs": 3, **extra, "selection_pass": mode,
                      "selector": RecordingSelector(SpectralBatchSelector(16))})
        est.fit(X, y)
        assert est.net_.selector.shapes_ == [shape] * 3
        runs[mode] = list(passes)
        monkeypatch.undo()
    assert runs == {"fresh": [64, 64, 64], "cached": [64]}


def test_cached_selection_embeds_only_the_samples_no_step_trained(pairs, monkeypatch):
    """OSGD keeps 1 of every 4 candidate batches: the samples no step has embedded are
    completed by a pass over them alone."""
    X, _ = pairs
    passes = count_fresh_passes(monkeypatch)
    ContrastiveEmbedder(**{**SMALL, "max_epochs": 2, "selection_pass": "cached",
                           "selector": OSGDSelector(8, k=4, q=1)}).fit(X)
    assert passes[0] == 64 and 0 < passes[1] < 64


def test_cached_embeddings_are_those_the_training_step_computed(pairs):
    """With lr=0 the weights never change, so the cached embeddings equal a fresh
    pass's (a deterministic MLP in training mode equals itself in eval mode)."""

    from skcontrast.selectors import SpectralBatchSelector

    X, _ = pairs
    seen = {}
    for mode in ("fresh", "cached"):
        selector = RecordingSelector(SpectralBatchSelector(16, random_state=0))
        est = ContrastiveEmbedder(**{**SMALL, "lr": 1e-12, "max_epochs": 3,
                                     "selection_pass": mode, "selector": selector}).fit(X)
        seen[mode] = est.net_.selector.seen_
    assert seen["fresh"] == seen["cached"]


class _CountBatches(Callback):
    def __init__(self):
        self.batches = 0

    def on_batch_end(self, net, **kwargs):
        self.batches += 1


class _CountEpochs(Callback):
    def __init__(self):
        self.epochs = 0

    def on_epoch_end(self, net, **kwargs):
        self.epochs += 1


def test_per_batch_hooks_reach_every_callback_that_overrides_them_across_refits():
    """Callbacks that only act per epoch are skipped in the per-batch loop: one that
    overrides ``on_batch_end`` (on its class or on the instance) still sees every batch,
    and new callbacks set between fits are the ones called."""
    X, _ = make_paired_gaussians(96, 4, random_state=0)
    first, per_epoch = _CountBatches(), _CountEpochs()
    est = ContrastiveEmbedder(hidden_layer_sizes=(8,), n_components=4, max_epochs=2,
                              selector=ShuffledBatchSelector(32), random_state=0,
                              callbacks=[("b", first), ("e", per_epoch)]).fit(X)
    assert (first.batches, per_epoch.epochs) == (6, 2)
    second, seen = _CountBatches(), []
    patched = _CountEpochs()
    patched.on_batch_end = lambda net, **kwargs: seen.append(1)
    est.set_params(callbacks=[("b", second), ("p", patched)]).fit(X)
    assert (first.batches, second.batches, len(seen)) == (6, 6, 6)
    est.set_params(callbacks=[("b", _CountBatches())]).fit(X)
    again = pickle.loads(pickle.dumps(est))  # the cache is not pickled with the net
    assert "_listeners" not in vars(again.net_)
    counter = again.callbacks[0][1]
    before = counter.batches
    assert again.fit(X).callbacks[0][1] is counter and counter.batches == before + 6


class _EvalAfterEachBatch(Callback):
    """Puts the encoder's dropout in eval mode after every batch, and records the mode
    each forward pass of a training step saw."""

    def __init__(self):
        self.modes, self.stepping = [], False

    def on_train_begin(self, net, **kwargs):
        self.dropout = next(m for m in net.module_.modules() if isinstance(m, nn.Dropout))
        self.dropout.register_forward_hook(self.record)

    def record(self, module, inputs, output):
        if self.stepping:
            self.modes.append(module.training)

    def on_batch_begin(self, net, training=False, **kwargs):
        self.stepping = training

    def on_batch_end(self, net, training=False, **kwargs):
        self.stepping = False
        self.dropout.eval()


def test_every_training_step_puts_every_module_in_training_mode():
    """The step skips skorch's walk of the module tree while nothing has changed a
    module's mode; a module switched to eval between steps, or a new module after a
    warm start's rebuild, is still in training mode at the next step's forward."""
    X, _ = make_paired_gaussians(96, 4, random_state=0)
    watch = _EvalAfterEachBatch()
    module = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.1), nn.ReLU(), nn.Linear(8, 4))
    est = ContrastiveEmbedder(**{**SMALL, "module": module, "callbacks": [watch],
                                 "warm_start": True}).fit(X)
    assert len(watch.modes) == 2 * 6 and all(watch.modes)
    watch.modes.clear()
    est.set_params(lr=1e-3).fit(X)  # a warm start rebuilds the net: new module objects
    assert len(watch.modes) == 2 * 6 and all(watch.modes)


def test_data_in_memory_is_batched_without_a_dataloader_unless_a_gpu_needs_it_pinned():
    """Training on the CPU from tensors in memory gathers the batches directly (no
    DataLoader machinery per step); host data for a GPU still goes through the
    DataLoader, which pins it for asynchronous copies."""
    from torch.utils.data import DataLoader

    from skcontrast._estimators._data import GatheredBatches as DeviceBatches
    from skcontrast._estimators._data import TensorViews

    X, _ = make_paired_gaussians(64, 4, random_state=0)
    net = ContrastiveEmbedder(**SMALL).fit(X).net_
    data = TensorViews((torch.zeros(64, 4), torch.zeros(64, 4)))
    assert isinstance(net.get_iterator(data, training=True), DeviceBatches)
    from skcontrast._estimators._batches import selected_batches

    loader = selected_batches(data, -1, plan=net.plan, device=torch.device("cuda"),
                              sampler=net.sampler_)
    assert isinstance(loader, DataLoader) and loader.pin_memory


SMALL_FIT = small_mlp(batch_size=16)
pairs_fit = paired_gaussians(64)


class _Dropout(torch.nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(n_in, 32), torch.nn.Dropout(0.3),
                                       torch.nn.Linear(32, n_out))

    def forward(self, x):
        return self.net(x)


def _noise_with_generator(x, generator):
    return x + 0.1 * torch.randn(x.shape, generator=generator, device=x.device)


def _noise_from_torch(x):
    return x + 0.1 * torch.randn_like(x)


class _Norm(torch.nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.linear, self.norm = torch.nn.Linear(n_in, n_out), torch.nn.BatchNorm1d(n_out)

    def forward(self, x):
        return self.norm(self.linear(x))


class _PoisonAfter:
    """A skorch callback that makes a buffer or a weight NaN after the last step of an
    epoch (the loss of every step stays finite), optionally then pressing Ctrl-C."""

    def __new__(cls, what, epoch, interrupt=False):
        from skorch.callbacks import Callback

        class Poison(Callback):
            def on_batch_end(self, net, training=False, **kwargs):
                batches = net.history[-1]["batches"]
                if not training or len(net.history) != epoch or len(batches) != 2:
                    return
                module = net.module_.encoders[0]
                target = module.norm.running_var if what == "buffer" else module.linear.weight
                with torch.no_grad():
                    target.view(-1)[0] = float("nan")
                if interrupt:
                    import signal

                    signal.raise_signal(signal.SIGINT)

        return Poison()


@pytest.mark.parametrize("change", [False, True])
def test_a_warm_start_applies_a_changed_siglip_bias(pairs_fit, change):
    est = ContrastiveEmbedder(**{**SMALL_FIT, "lr": 0.5}, optimizer="sgd",
                              loss=SigLIP(bias=-10.0, learn_bias=True)).fit(pairs_fit[0])
    learned = float(est.net_.criterion_.learned_bias)
    assert abs(learned + 10) > 1e-3  # it learned
    est.set_params(warm_start=True, lr=1e-9, max_epochs=1)
    if change:
        est.set_params(loss__bias=-5.0)
    est.fit(pairs_fit[0])
    expected = -5.0 if change else learned
    assert float(est.net_.criterion_.learned_bias) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("augmentation", [None, _noise_with_generator, _noise_from_torch],
                         ids=["dropout", "f(x, generator)", "f(x)"])
@pytest.mark.parametrize("resume", ["warm start", "save and load"])
def test_two_plus_two_warm_epochs_are_four_epochs(augmentation, resume, tmp_path):
    import skcontrast

    rng = np.random.default_rng(0)
    X = rng.normal(size=(96, 2, 8)).astype(np.float32)
    if augmentation is not None:
        X = X[:, 0]
    kw = {**SMALL_FIT, "augmentation": augmentation}
    whole = ContrastiveEmbedder(_Dropout, **{**kw, "max_epochs": 4}).fit(X)
    half = ContrastiveEmbedder(_Dropout, **kw).fit(X)
    if resume == "save and load":
        half.save(tmp_path / "half")
        half = skcontrast.load(tmp_path / "half", module=_Dropout,
                               augmentation=augmentation)
    half.set_params(warm_start=True).fit(X)
    np.testing.assert_allclose(half.transform(X), whole.transform(X), atol=1e-6)


@pytest.mark.parametrize("what", ["buffer", "weight"])
@pytest.mark.parametrize("estimator", ["contrastive", "supcon"])
def test_a_non_finite_model_at_the_end_of_fit_is_refused_and_not_kept(pairs_fit, what,
                                                                       estimator):
    from skcontrast import SupConEmbedder
    from skcontrast.exceptions import TrainingDivergedError

    X, y = pairs_fit
    kw = {**SMALL_FIT, "batch_size": 32, "callbacks": [_PoisonAfter(what, 2)]}
    est = ContrastiveEmbedder(_Norm, **kw) if estimator == "contrastive" else\
        SupConEmbedder(_Norm, **kw)
    data = (X,) if estimator == "contrastive" else (X[:, 0], y)
    with pytest.raises(TrainingDivergedError, match=r"'module\.encoders\.0\.(norm\.running_var|"
                                                    r"linear\.weight)' holds NaN"):
        est.fit(*data)
    assert not hasattr(est, "net_")


def test_an_interrupt_after_a_nan_does_not_keep_the_nan_model(pairs_fit):
    from skcontrast.exceptions import TrainingInterrupted

    X, _ = pairs_fit
    est = ContrastiveEmbedder(_Norm, **{**SMALL_FIT, "max_epochs": 5, "batch_size": 16}).fit(X)
    before = est.transform(X)
    est.set_params(warm_start=True, callbacks=[_PoisonAfter("buffer", 7, interrupt=True)])
    with pytest.raises(TrainingInterrupted, match=r"running_var' holds NaN.*not kept"):
        est.fit(X)
    np.testing.assert_array_equal(est.transform(X), before)  # the model before this fit


SMALL_EDGES = small_mlp()
pairs_edges = paired_gaussians(96)


class NaNModule(nn.Module):
    """A linear encoder that outputs NaN (always, or in eval mode only)."""

    def __init__(self, n_in=8, n_out=4, eval_only=False):
        super().__init__()
        self.linear = nn.Linear(n_in, n_out)
        self.eval_only = eval_only

    def forward(self, x):
        out = self.linear(x)
        return out * float("nan") if not (self.eval_only and self.training) else out


class InterruptAt(Callback):
    """Presses Ctrl-C (a real SIGINT) at a given batch of a given epoch."""

    def __init__(self, epoch, batch):
        self.epoch, self.batch = epoch, batch

    def on_batch_end(self, net, training=False, **kwargs):
        if training and len(net.history) == self.epoch and\
                len(net.history[-1]["batches"]) == self.batch:
            signal.raise_signal(signal.SIGINT)


@pytest.mark.parametrize("params", [
    {"optimizer": "sgd", "lr": 1e8, "loss": SymmetricInfoNCE(normalize=False)},
    {"loss": SymmetricInfoNCE(1e-45)},
], ids=["learning rate", "temperature"])
def test_divergence_stops_fit_with_the_epoch_batch_and_advice(pairs_edges, params):
    X, _ = pairs_edges
    est = ContrastiveEmbedder(**{**SMALL_EDGES, "max_epochs": 3, **params})
    with pytest.raises(TrainingDivergedError, match=r"at epoch \d+, batch \d+ .*Lower the "
                                                    r"learning rate .*raise the temperature"):
        est.fit(X)
    assert not hasattr(est, "net_")  # clearly unfitted, not a NaN model


def test_a_module_emitting_nan_and_a_refit_keep_the_previous_model(pairs_edges):
    X, _ = pairs_edges
    est = ContrastiveEmbedder(**SMALL_EDGES).fit(X)
    before = est.transform(X)
    with pytest.raises(TrainingDivergedError, match="training diverged"):
        est.set_params(module=NaNModule).fit(X)
    np.testing.assert_array_equal(est.transform(X), before)  # the old model is untouched


def test_adaptive_selectors_and_supcon_blame_the_training_not_the_data(pairs_edges):
    X, y = pairs_edges
    est = ContrastiveEmbedder(**{**SMALL_EDGES, "module": lambda i, o: NaNModule(eval_only=True),
                                 "selector": OSGDSelector(16, k=3, q=2)})
    with pytest.raises(TrainingDivergedError, match="embeds 96 training sample"):
        est.fit(X)
    supcon = SupConEmbedder(**{**SMALL_EDGES, "module": NaNModule})
    with pytest.raises(TrainingDivergedError):
        supcon.fit(X[:, 0], y)
    assert not hasattr(supcon, "net_") and not hasattr(supcon, "class_centres_")


def test_a_refused_warm_start_changes_nothing():
    rng = np.random.default_rng(0)
    X16, X10 = rng.normal(size=(64, 16)), rng.normal(size=(64, 10))
    est = ContrastiveEmbedder(**{**SMALL_EDGES, "warm_start": True}).fit(X16)
    before = est.transform(X16)
    with pytest.raises(ValueError, match="warm_start continues the fitted network"):
        est.fit(X10)
    assert est.n_features_in_ == 16 and est.view_split_ == 8
    np.testing.assert_array_equal(est.transform(X16), before)
    with pytest.raises(ValueError, match="X has 10 features"):
        est.transform(X10)


def test_an_interrupt_keeps_the_model_and_goes_on_as_an_interrupt(pairs_edges):
    X, _ = pairs_edges
    est = ContrastiveEmbedder(**{**SMALL_EDGES, "max_epochs": 5, "batch_size": 16,
                                 "callbacks": [InterruptAt(2, 3)]})
    with pytest.raises(TrainingInterrupted, match=r"fit stopped after 1 of 5 epochs.*"
                                                  r"weights of the 9 step\(s\) applied"):
        est.fit(X)
    partial = est.history_[-1]["batches"]
    assert [np.isfinite(b["train_loss"]) for b in partial] == [True] * 3
    assert est.transform(X).shape == (96, 4)  # the model is kept


def test_osgd_covering_a_fraction_of_the_samples_is_said(pairs_edges):
    X, _ = pairs_edges
    with pytest.warns(UserWarning, match=r"cover \d+ of the 96 training samples.*keeps q=1 "
                                         r"of every k=8"):
        ContrastiveEmbedder(**{**SMALL_EDGES, "selector": OSGDSelector(8, k=8, q=1)}).fit(X)


def test_the_epoch_table_has_no_colour_codes_off_a_terminal(pairs_edges, capsys):
    X, _ = pairs_edges
    ContrastiveEmbedder(**{**SMALL_EDGES, "verbose": 1}).fit(X)
    out = capsys.readouterr().out
    assert "train_loss" in out and "\x1b[" not in out


def test_batch_values_are_read_once_per_epoch(digit_images, monkeypatch):
    """Reading a value off the device (``item``, ``tolist``) stalls the GPU queue: the
    training loop reads the batch losses once per epoch. Reads made inside torch itself
    (Adam's CPU step counter) are not counted."""
    images, _, _ = digit_images
    X = image_pairs(images)
    reads = []

    def counting(method):
        def read(t):
            if "/torch/" not in sys._getframe(1).f_code.co_filename:
                reads.append(method.__name__)
            return method(t)
        return read

    monkeypatch.setattr(torch.Tensor, "item", counting(torch.Tensor.item))
    monkeypatch.setattr(torch.Tensor, "tolist", counting(torch.Tensor.tolist))

    def count(batch_size):
        reads.clear()
        est = ContrastiveEmbedder(module=tiny_cnn(), n_components=4, max_epochs=2,
                                  batch_size=batch_size, random_state=0).fit(X)
        return len(reads), est.history_

    few, _ = count(48)               # 2 batches per epoch
    many, history_many = count(8)    # 12 batches per epoch
    assert few == many == 2          # once per epoch
    assert len(history_many[-1, "batches"]) == 12
    assert all(np.isfinite(b["train_loss"]) and b["train_batch_size"] == 8
               for b in history_many[-1, "batches"])
    mean = np.mean([b["train_loss"] for b in history_many[-1, "batches"]])
    assert history_many[-1, "train_loss"] == pytest.approx(mean)


def test_warm_start_needs_the_same_views(digit_images):
    images, _, _ = digit_images
    est = ContrastiveEmbedder(module=tiny_cnn(), warm_start=True, **SMALL_IMAGES)
    est.fit(image_pairs(images))
    est.fit(image_pairs(images))
    assert len(est.history_) == 4
    with pytest.raises(ValueError, match="warm_start continues the fitted network"):
        est.fit(np.zeros((10, 2, 1, 4, 4), dtype=np.float32))


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("data_on_device", [False, True])
def test_cuda_training_with_and_without_resident_data(digit_images, data_on_device):
    images, _, _ = digit_images
    X = image_pairs(images)
    est = ContrastiveEmbedder(module=tiny_cnn(), device="cuda", data_on_device=data_on_device,
                              augmentation=None, precision="bfloat16", **SMALL_IMAGES).fit(X)
    assert np.isfinite(est.history_[:, "train_loss"]).all()
    single = ContrastiveEmbedder(module=tiny_cnn(), device="cuda",
                                 data_on_device=data_on_device,
                                 augmentation=GaussianNoise(0.05), **SMALL_IMAGES).fit(images)
    assert single.net_.plan.augmentation.generator.device.type == "cuda"
    assert single.transform(images).shape == (96, 4)


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None,
                    reason="needs tensorboard (pip install tensorboard)")
def test_tensorboard_logs_the_losses_the_held_out_values_and_the_selection_time(tmp_path):
    from skorch.callbacks import TensorBoard
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    X, y = make_paired_gaussians(64, 6, n_clusters=4, random_state=0)
    ContrastiveEmbedder(n_components=4, hidden_layer_sizes=(8,), max_epochs=3,
                        validation_fraction=0.25, scoring="map@r", device="cpu",
                        selector=OSGDSelector(8, k=2, q=2), random_state=0,
                        callbacks=[TensorBoard(SummaryWriter(str(tmp_path)))]).fit(X, y)
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for key in ("train_loss", "train_positive", "train_entropy", "valid_loss", "valid_score",
                "select_time", "n_batches"):
        assert any(tag.endswith(key) for tag in tags), (key, tags)
    steps = [e.step for e in events.Scalars(next(t for t in tags if t.endswith("train_loss")))]
    assert len(steps) == 3


def test_transform_writes_into_a_callers_memory_mapped_out(pairs, tmp_path):
    """``transform(X, out=...)`` embeds batch by batch into the caller's array (a
    memory-mapped file: an output bigger than memory), returning it; a wrong ``out`` is
    refused naming it."""
    X, y = pairs
    est = ContrastiveEmbedder(**SMALL).fit(X)
    out = np.lib.format.open_memmap(tmp_path / "z.npy", "w+", np.float32, (len(X), 4))
    assert est.transform(X, out=out) is out
    np.testing.assert_array_equal(np.load(tmp_path / "z.npy"), est.transform(X))
    both = ContrastiveEmbedder(**SMALL, transform_views="concat").fit(X)
    wide = np.zeros((len(X), 8), np.float32)
    np.testing.assert_array_equal(both.transform(X, out=wide), both.transform(X))
    labelled = SupConEmbedder(**SMALL).fit(X[:, 0], y)
    single = np.zeros((len(X), 4), np.float32)
    np.testing.assert_array_equal(labelled.transform(X[:, 0], out=single),
                                  labelled.transform(X[:, 0]))
    backbone = ContrastiveEmbedder(**SMALL, transform_from="backbone").fit(X)
    with pytest.raises(ValueError, match=r"out has shape \(64, 3\); the embeddings have "
                                         r"shape \(64, 4\)"):
        backbone.transform(X, out=np.zeros((len(X), 3), np.float32))
    for bad, match in ((np.zeros((len(X), 4)), "float32 array"),
                       (np.zeros((len(X), 4), np.float32).T.copy().T, "C-ordered"),
                       (np.zeros((len(X) - 1, 4), np.float32), r"out has shape \(63, 4\)")):
        with pytest.raises(ValueError, match=match):
            est.transform(X, out=bad)
