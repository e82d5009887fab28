"""What the two estimators share (skcontrast/_estimators/_base.py and _net.py): warm
starts, finiteness, held-out rows, threads, interrupts and the checks of their settings.

Numbered as the points of the trust issue (24) they cover.
"""

import pickle
import signal
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from sklearn.model_selection import GridSearchCV
from skorch.callbacks import Callback, Checkpoint, EarlyStopping
from torch import nn

import skcontrast
from skcontrast import ContrastiveEmbedder, SupConEmbedder
from skcontrast._estimators import _base
from skcontrast.datasets import make_paired_gaussians
from skcontrast.exceptions import TrainingDivergedError, TrainingInterrupted
from skcontrast.losses import SymmetricInfoNCE
from skcontrast.memory import CrossBatchMemory, SogCLRMemory
from skcontrast.model_selection import BalanceSearchCV
from skcontrast.selectors import OSGDSelector, PredefinedBatchSelector, ShuffledBatchSelector

SMALL = {"n_components": 4, "hidden_layer_sizes": (8,), "max_epochs": 2, "lr": 1e-2,
         "random_state": 0, "device": "cpu", "selector": ShuffledBatchSelector(16)}


@pytest.fixture(scope="module")
def pairs():
    return make_paired_gaussians(64, 6, n_clusters=4, random_state=0)


# 3. Divergence on the last step ---------------------------------------------------------

class PoisonLastStep(Callback):
    """Makes the very last update of a fit produce NaN weights (its loss was finite)."""

    def on_grad_computed(self, net, named_parameters, training=False, **kwargs):
        last_epoch = len(net.history) == net.max_epochs
        n_batches = net.selector.get_n_splits(len(net.training_data), net.labels)
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


# 4. warm_start follows set_params -------------------------------------------------------

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
    ({"micro_batch_size": 4}, lambda e: e.net_.micro_batch_size == 4),
    ({"selector": OSGDSelector(16, k=2, q=1)},
     lambda e: e.history_[-1, "n_batches"] == 2 and e.net_.selector.current_epoch == 4),
    ({"loss__learn_temperature": True},
     lambda e: e.net_.criterion_.learn_temperature and e.temperature_ != 0.1),
    ({"precision": "bfloat16"}, lambda e: e.net_.precision == "bfloat16"),
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


# 5. Warm starts keep the held-out rows ---------------------------------------------------

def test_warm_starts_hold_out_the_same_rows(pairs):
    X, _ = pairs
    est = _warm(X, validation_fraction=0.25, random_state=None, memory=SogCLRMemory(),
                loss="dcl")
    rows = est.net_.held_out_rows.copy()
    for _ in range(3):
        est.fit(X)
        np.testing.assert_array_equal(est.net_.held_out_rows, rows)
    assert est.net_.memory_state.n_samples == len(X) - len(rows)
    with pytest.raises(ValueError, match="keeps the same held-out rows"):
        est.set_params(validation_fraction=0.5).fit(X)
    with pytest.raises(ValueError, match="keeps the same held-out rows"):
        est.set_params(validation_fraction=None).fit(X)


# 6. module__* needs a module class --------------------------------------------------------

def test_module_parameters_with_the_default_mlp_are_refused(pairs):
    X, _ = pairs
    with pytest.raises(ValueError, match=r"module__\* parameters \(hidden\).*module=None"):
        ContrastiveEmbedder(**SMALL, module__hidden=32).fit(X)


# 8. Predefined batches name rows of X ---------------------------------------------------

def test_predefined_batches_keep_naming_rows_of_x_with_held_out_rows(pairs):
    X, _ = pairs
    batches = [np.arange(i, i + 8) for i in range(0, 64, 8)]
    est = ContrastiveEmbedder(**{**SMALL, "selector": PredefinedBatchSelector(batches),
                                 "validation_fraction": 0.25})
    with pytest.warns(UserWarning, match="16 entries of the PredefinedBatchSelector"):
        est.fit(X)
    held = set(est.net_.held_out_rows.tolist())
    kept = np.setdiff1d(np.arange(64), sorted(held))
    trained = [kept[b].tolist() for b in est.net_.selector.batches]
    assert trained == [[i for i in b.tolist() if i not in held] for b in batches]


# 12. Reproducible under threads; the caller's RNG untouched ------------------------------

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


# 17. Pickles ----------------------------------------------------------------------------

def test_pickles_hold_string_scorers_and_never_the_held_out_rows(pairs):
    X, y = pairs
    X = X.astype(np.float32)
    est = ContrastiveEmbedder(**{**SMALL, "validation_fraction": 0.25,
                                 "scoring": "map@r"}).fit(X, y)
    blob = pickle.dumps(est)
    for row in est.net_.held_out_rows:
        assert X[row].tobytes() not in blob
    again = pickle.loads(blob)
    np.testing.assert_array_equal(again.transform(X), est.transform(X))
    again.set_params(warm_start=True, max_epochs=1).fit(X, y)


# 18. Clear errors instead of raw ones -----------------------------------------------------

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


# 19. Parameter groups match, or say so ---------------------------------------------------

def test_parameter_groups_use_the_modules_own_names_and_must_match(pairs):
    X, _ = pairs
    est = ContrastiveEmbedder(**SMALL, optimizer__param_groups=[("0.*", {"lr": 0.5})]).fit(X)
    first = est.net_.optimizer_.param_groups[0]
    assert first["lr"] == 0.5 and len(first["params"]) == 2  # the first layer's two
    with pytest.raises(ValueError, match=r"pattern 'layer1\.\*' matches no parameter"):
        ContrastiveEmbedder(**SMALL, optimizer__param_groups=[("layer1.*", {"lr": 1})]).fit(X)


# The selection pass (speed issue, 27): embeddings the training steps computed -----------

def count_fresh_passes(monkeypatch):
    from skcontrast._estimators._supply import BatchSupply

    passes = []
    original = BatchSupply.selection_embeddings

    def counting(self, indices=None):
        out = original(self, indices)
        passes.append(len(self.training_data) if indices is None else len(indices))
        return out

    monkeypatch.setattr(BatchSupply, "selection_embeddings", counting)
    return passes


@pytest.mark.parametrize("kind, data, extra", [
    (ContrastiveEmbedder, "pairs", {}),
    (ContrastiveEmbedder, "single", {"augmentation": "noise"}),
    (SupConEmbedder, "single", {}),
    (SupConEmbedder, "single", {"augmentation": "noise"}),
])
def test_cached_selection_takes_no_pass_after_the_first_epoch(pairs, monkeypatch, kind, data,
                                                             extra):
    from conftest import RecordingSelector

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
    from conftest import RecordingSelector

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

    from skcontrast._estimators._data import TensorViews
    from skcontrast._estimators._supply import DeviceBatches

    X, _ = make_paired_gaussians(64, 4, random_state=0)
    net = ContrastiveEmbedder(**SMALL).fit(X).net_
    data = TensorViews((torch.zeros(64, 4), torch.zeros(64, 4)))
    assert isinstance(net.get_iterator(data, training=True), DeviceBatches)
    net._on_gpu = lambda: True
    loader = net.get_iterator(data, training=True)
    assert isinstance(loader, DataLoader) and loader.pin_memory
