"""Reliability: divergence, transactional fit, accelerator hygiene, labels, interrupts,
feature names, the command line, and the edges a new user hits (one test or more per
point of the reliability issue, each failing before its fix)."""

import signal
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.exceptions import NotFittedError
from skorch.callbacks import Callback
from torch import nn

from skcontrast import ContrastiveEmbedder, SupConEmbedder
from skcontrast.datasets import make_paired_gaussians
from skcontrast.exceptions import TrainingDivergedError, TrainingInterrupted
from skcontrast.losses import SymmetricInfoNCE
from skcontrast.metrics import get_scorer, knn_accuracy, ncc_accuracy
from skcontrast.selectors import OSGDSelector, PredefinedBatchSelector, ShuffledBatchSelector

SMALL = {"n_components": 4, "hidden_layer_sizes": (16,), "max_epochs": 2, "lr": 1e-2,
         "random_state": 0, "device": "cpu"}


@pytest.fixture(scope="module")
def pairs():
    return make_paired_gaussians(96, 8, n_clusters=3, random_state=0)


# 1. Divergence ------------------------------------------------------------------------

@pytest.mark.parametrize("params", [
    {"optimizer": "sgd", "lr": 1e8, "loss": SymmetricInfoNCE(normalize=False)},
    {"loss": SymmetricInfoNCE(1e-45)},
], ids=["learning rate", "temperature"])
def test_divergence_stops_fit_with_the_epoch_batch_and_advice(pairs, params):
    X, _ = pairs
    est = ContrastiveEmbedder(**{**SMALL, "max_epochs": 3, **params})
    with pytest.raises(TrainingDivergedError, match=r"at epoch \d+, batch \d+ .*Lower the "
                                                    r"learning rate .*raise the temperature"):
        est.fit(X)
    assert not hasattr(est, "net_")  # clearly unfitted, not a NaN model


class NaNModule(nn.Module):
    """A linear encoder that outputs NaN (always, or in eval mode only)."""

    def __init__(self, n_in=8, n_out=4, eval_only=False):
        super().__init__()
        self.linear = nn.Linear(n_in, n_out)
        self.eval_only = eval_only

    def forward(self, x):
        out = self.linear(x)
        return out * float("nan") if not (self.eval_only and self.training) else out


def test_a_module_emitting_nan_and_a_refit_keep_the_previous_model(pairs):
    X, _ = pairs
    est = ContrastiveEmbedder(**SMALL).fit(X)
    before = est.transform(X)
    with pytest.raises(TrainingDivergedError, match="training diverged"):
        est.set_params(module=NaNModule).fit(X)
    np.testing.assert_array_equal(est.transform(X), before)  # the old model is untouched


def test_adaptive_selectors_and_supcon_blame_the_training_not_the_data(pairs):
    X, y = pairs
    est = ContrastiveEmbedder(**{**SMALL, "module": lambda i, o: NaNModule(eval_only=True),
                                 "selector": OSGDSelector(16, k=3, q=2)})
    with pytest.raises(TrainingDivergedError, match="embeds 96 training sample"):
        est.fit(X)
    supcon = SupConEmbedder(**{**SMALL, "module": NaNModule})
    with pytest.raises(TrainingDivergedError):
        supcon.fit(X[:, 0], y)
    assert not hasattr(supcon, "net_") and not hasattr(supcon, "class_centres_")


# 2. A refused fit leaves a fitted estimator as it was -----------------------------------

def test_a_refused_warm_start_changes_nothing():
    rng = np.random.default_rng(0)
    X16, X10 = rng.normal(size=(64, 16)), rng.normal(size=(64, 10))
    est = ContrastiveEmbedder(**{**SMALL, "warm_start": True}).fit(X16)
    before = est.transform(X16)
    with pytest.raises(ValueError, match="warm_start continues the fitted network"):
        est.fit(X10)
    assert est.n_features_in_ == 16 and est.view_split_ == 8
    np.testing.assert_array_equal(est.transform(X16), before)
    with pytest.raises(ValueError, match="X has 10 features"):
        est.transform(X10)


def test_supcon_classes_are_set_only_by_a_fit_that_succeeds(pairs):
    X, y = pairs
    est = SupConEmbedder(**SMALL).fit(X[:, 0], y)
    classes = est.classes_.copy()
    with pytest.raises(ValueError, match="at least 2 classes"):
        est.fit(X[:, 0], np.zeros(len(y)))
    np.testing.assert_array_equal(est.classes_, classes)


# 3. The user's Accelerator after a failed fit ------------------------------------------

class FailAt(Callback):
    def __init__(self, epoch):
        self.epoch = epoch

    def on_epoch_end(self, net, **kwargs):
        if len(net.history) == self.epoch:
            raise RuntimeError("injected failure")


@pytest.mark.slow
def test_a_failed_fit_hands_the_accelerator_back_and_resume_is_checked(pairs, tmp_path):
    pytest.importorskip("accelerate")
    from accelerate import Accelerator

    from skcontrast import AcceleratorCheckpoint
    from skcontrast._estimators._distributed import META

    X, _ = pairs
    accelerator = Accelerator(cpu=True)
    for _ in range(2):  # every failure used to leak one model
        with pytest.raises(RuntimeError, match="injected failure"):
            ContrastiveEmbedder(**{**SMALL, "accelerator": accelerator,
                                   "callbacks": [FailAt(1)]}).fit(X)
    assert accelerator._models == [] and accelerator._optimizers == []
    folder = tmp_path / "ckpt"
    good = ContrastiveEmbedder(**{**SMALL, "accelerator": accelerator,
                                  "callbacks": [AcceleratorCheckpoint(folder)]}).fit(X)
    resumed = ContrastiveEmbedder(**{**SMALL, "max_epochs": 1, "accelerator": accelerator,
                                     "callbacks": [AcceleratorCheckpoint(folder, resume=True)]}
                                  ).fit(X)
    assert len(resumed.history_) == 3 and len(good.history_) == 2
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        ContrastiveEmbedder(**{**SMALL, "accelerator": accelerator, "callbacks": [
            AcceleratorCheckpoint(tmp_path / "missing", resume=True)]}).fit(X)
    (folder / META).write_text('{"selector_epoch": "two"}')
    with pytest.raises(ValueError, match=r"ckpt/skcontrast_state.json is not a valid"):
        ContrastiveEmbedder(**{**SMALL, "accelerator": accelerator, "callbacks": [
            AcceleratorCheckpoint(folder, resume=True)]}).fit(X)
    (folder / META).write_text("{not json")
    with pytest.raises(ValueError, match="is not a valid checkpoint state"):
        ContrastiveEmbedder(**{**SMALL, "accelerator": accelerator, "callbacks": [
            AcceleratorCheckpoint(folder, resume=True)]}).fit(X)


def test_the_state_file_replaces_a_symlink_instead_of_following_it(tmp_path):
    from skcontrast._estimators._distributed import write_replacing

    target = tmp_path / "elsewhere.txt"
    target.write_text("precious")
    link = tmp_path / "state.json"
    link.symlink_to(target)
    write_replacing(link, b"{}")
    assert target.read_text() == "precious"
    assert not link.is_symlink() and link.read_text() == "{}"


# 4. Labels -----------------------------------------------------------------------------

@pytest.mark.parametrize("labels, message", [
    (np.array([0, 1, np.nan, 2] * 24, dtype=object), r"y\[2\] is nan"),
    (np.array([0, 1, None, 2] * 24, dtype=object), r"y\[2\] is None"),
    (np.array([0, "1", 2, "3"] * 24, dtype=object), "mixes labels of different types"),
    (np.arange(96)[:, None] % 3, r"y must be 1-D.*y.ravel\(\)"),
])
def test_bad_labels_are_refused_everywhere(pairs, labels, message):
    X, _ = pairs
    with pytest.raises(ValueError, match=message):
        SupConEmbedder(**SMALL).fit(X[:, 0], labels)
    with pytest.raises(ValueError, match=message):
        ncc_accuracy(X[:, 0], labels, X[:, 1], labels)


def test_scoring_checks_the_labels_shape_length_and_kind(pairs):
    X, y = pairs
    est = SupConEmbedder(**SMALL).fit(X[:, 0], y)
    for bad, message in ((y[:, None], "must be 1-D"), (y[:1], "has 1 labels but X has 96")):
        with pytest.raises(ValueError, match=message):
            est.score(X[:, 0], bad)
        with pytest.raises(ValueError, match=message):
            get_scorer("ncc_accuracy")(est, X[:, 0], bad)
    named = SupConEmbedder(**SMALL).fit(X[:, 0], y.astype(str))
    with pytest.raises(ValueError, match="holds number labels but the estimator was fitted "
                                         "on str labels"):
        named.score(X[:, 0], y)
    with pytest.raises(ValueError, match="y_test holds str labels"):
        knn_accuracy(X[:, 0], y, X[:, 1], y.astype(str))


# 6. Interrupts -------------------------------------------------------------------------

class InterruptAt(Callback):
    """Presses Ctrl-C (a real SIGINT) at a given batch of a given epoch."""

    def __init__(self, epoch, batch):
        self.epoch, self.batch = epoch, batch

    def on_batch_end(self, net, training=False, **kwargs):
        if training and len(net.history) == self.epoch and \
                len(net.history[-1]["batches"]) == self.batch:
            signal.raise_signal(signal.SIGINT)


def test_an_interrupt_keeps_the_model_and_goes_on_as_an_interrupt(pairs):
    X, _ = pairs
    est = ContrastiveEmbedder(**{**SMALL, "max_epochs": 5, "batch_size": 16,
                                 "callbacks": [InterruptAt(2, 3)]})
    with pytest.raises(TrainingInterrupted, match=r"fit stopped after 1 of 5 epochs.*"
                                                  r"weights of the 9 step\(s\) applied"):
        est.fit(X)
    partial = est.history_[-1]["batches"]
    assert [np.isfinite(b["train_loss"]) for b in partial] == [True] * 3
    assert est.transform(X).shape == (96, 4)  # the model is kept


# 7. Feature names ----------------------------------------------------------------------

def test_feature_names_need_a_fitted_estimator(pairs):
    X, _ = pairs
    with pytest.raises(NotFittedError):
        ContrastiveEmbedder().get_feature_names_out()
    names = ContrastiveEmbedder(**SMALL).fit(X).get_feature_names_out()
    assert list(names) == [f"contrastiveembedder{i}" for i in range(4)]


# 8. The command line -------------------------------------------------------------------

def test_cli_bench_default_version_and_foreign_benchmark_folders(monkeypatch, tmp_path,
                                                                 capsys):
    from skcontrast import __version__, _cli

    ran = []
    monkeypatch.setattr(_cli.runpy, "run_path", lambda path, run_name: ran.append(path))
    real = _cli._benchmark_dir
    # the repository's benchmarks (the package under test may be an installed wheel)
    monkeypatch.setattr(_cli, "_benchmark_dir",
                        lambda root=None: Path(__file__).resolve().parents[1] / "benchmarks")
    assert _cli.main(["bench"]) == 0
    assert ran and ran[0].endswith("bench_losses.py")
    assert _cli.main(["bench", "nonsense"]) == 2
    assert "unknown benchmark(s) nonsense" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _cli.main(["--version"])
    assert capsys.readouterr().out.strip() == f"skcontrast {__version__}"
    site = tmp_path / "site-packages"
    (site / "benchmarks").mkdir(parents=True)
    (site / "skcontrast").mkdir()
    assert real(site) is None  # another distribution's folder
    (site / "pyproject.toml").write_text('[project]\nname = "skcontrast"\n')
    assert real(site) == site / "benchmarks"
    monkeypatch.setattr(_cli, "_benchmark_dir", lambda root=None: None)  # a wheel install
    assert _cli.main(["bench"]) == 2
    assert "does not include" in capsys.readouterr().err


# 9. Edges ------------------------------------------------------------------------------

def test_input_edges(pairs):
    X, _ = pairs
    with pytest.raises(ValueError, match="X holds 0 sample"):
        ContrastiveEmbedder(**SMALL).fit(np.zeros((0, 2, 4)))
    images = np.random.default_rng(0).random((40, 2, 1, 4, 4)).astype(np.float32)
    est = ContrastiveEmbedder(**SMALL).fit(images)
    with pytest.raises(ValueError, match=r"X holds 0 sample.*nothing to embed"):
        est.transform(images[:0])
    tensor = torch.tensor(X.reshape(96, -1), requires_grad=True)
    assert ContrastiveEmbedder(**SMALL).fit(tensor).transform(tensor).shape == (96, 4)
    readonly = X.reshape(96, -1).astype(np.float32)
    readonly.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ContrastiveEmbedder(**SMALL).fit(readonly)
    tokens = {"a": X[:, 0], "t": np.full((96, 3), 2**63 + 5, dtype=np.uint64)}
    with pytest.raises(ValueError, match="beyond the int64 range"):
        ContrastiveEmbedder(**{**SMALL, "module": {"a": nn.Linear(8, 4),
                                                   "t": nn.EmbeddingBag(10, 4)}}).fit(tokens)


def test_parameter_edges(pairs):
    X, _ = pairs
    with pytest.raises(ValueError, match="batches\\[0\\] must hold integer indices"):
        PredefinedBatchSelector([[0.0, 1.7]]).get_n_splits(4)
    with pytest.raises(ValueError, match="repeats sample"):
        PredefinedBatchSelector([[0, 1, 1]]).get_n_splits(4)
    with pytest.raises(ValueError, match="selector__batch_size sets a parameter of selector"):
        ContrastiveEmbedder().set_params(selector__batch_size=32)
    assert ContrastiveEmbedder().set_params(selector=ShuffledBatchSelector(8),
                                            selector__batch_size=32).selector.batch_size == 32
    with pytest.raises(ValueError, match="callbacks\\[0\\] must be a skorch callback"):
        ContrastiveEmbedder(**{**SMALL, "callbacks": ["x"]}).fit(X)
    widths = {"module": (nn.Linear(8, 4), nn.Linear(8, 3))}
    with pytest.raises(ValueError, match="encoders must embed into the same space"):
        ContrastiveEmbedder(**{**SMALL, **widths}).fit(X)


# 10. Defaults that surprise ------------------------------------------------------------

def test_osgd_covering_a_fraction_of_the_samples_is_said(pairs):
    X, _ = pairs
    with pytest.warns(UserWarning, match=r"cover \d+ of the 96 training samples.*keeps q=1 "
                                         r"of every k=8"):
        ContrastiveEmbedder(**{**SMALL, "selector": OSGDSelector(8, k=8, q=1)}).fit(X)


# 11 is tested where a GPU is (test_real_networks); 12 is the README (test_repository).

def test_the_readme_tells_a_cpu_only_user_where_the_cpu_build_is():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "download.pytorch.org/whl/cpu" in readme


def test_test_extra_has_pandas_so_set_output_runs():
    from pathlib import Path

    import tomllib

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml")
                              .read_text())
    test_extra = pyproject["project"]["optional-dependencies"]["test"]
    assert any(requirement.startswith("pandas") for requirement in test_extra)


# The companion issue: rough edges of a second new-user run ----------------------------

def test_nested_lists_of_pairs_are_the_array_they_spell():
    from skcontrast.datasets import load_digit_views

    X, _ = load_digit_views()
    X = X[:64]
    as_lists = ContrastiveEmbedder(**SMALL).fit(X.tolist())
    as_array = ContrastiveEmbedder(**SMALL).fit(X)
    np.testing.assert_allclose(as_lists.transform(X.tolist()), as_array.transform(X),
                               atol=1e-6)


def test_an_augmentation_that_changes_the_batch_shape_is_explained():
    images = np.random.default_rng(0).random((64, 8, 8)).astype(np.float32)

    def adds_an_axis(x):  # what kornia does to a batch of (n, 8, 8) images
        return x[None]

    with pytest.raises(ValueError, match=r"got \(\d+, 8, 8\) and returned \(1, \d+, 8, 8\).*"
                                         r"give single-channel images a channel axis"):
        ContrastiveEmbedder(augmentation=adds_an_axis, **SMALL).fit(images)


def test_scorer_preconditions_are_checked_before_fitting(pairs):
    from skorch.helper import SliceDict

    from skcontrast.model_selection import BalanceSearchCV, check_search_input

    X, _ = pairs
    with pytest.raises(ValueError, match="'recall@1' scorer compares the two views"):
        get_scorer("recall@1", SupConEmbedder())
    with pytest.raises(ValueError, match="'ncc_accuracy' scorer needs labels y"):
        BalanceSearchCV(ContrastiveEmbedder(**SMALL),
                        param_names=("loss__lambda_pos", "loss__lambda_ent"),
                        scoring=get_scorer("ncc_accuracy"), budget=2, cv=2).fit(X)
    views = {"a": X[:, 0], "b": X[:, 1]}
    with pytest.raises(ValueError, match=r"wrap it: skorch\.helper\.SliceDict"):
        check_search_input(ContrastiveEmbedder(), views, None, None)
    check_search_input(ContrastiveEmbedder(), SliceDict(**views), None,
                       {"r1": get_scorer("recall@1")})


def test_an_odd_width_is_split_with_a_warning():
    X = np.random.default_rng(0).normal(size=(64, 63))
    with pytest.warns(UserWarning, match=r"odd number of columns \(63\).*view 0 gets columns "
                                         r"\[:31\] and view 1 the other 32.*view_split"):
        ContrastiveEmbedder(**SMALL).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ContrastiveEmbedder(view_split=31, **SMALL).fit(X)


def test_set_output_reaches_transform_pairs_and_transform_view(pairs):
    pd = pytest.importorskip("pandas")
    X, _ = pairs
    est = ContrastiveEmbedder(**SMALL).fit(X).set_output(transform="pandas")
    U, V = est.transform_pairs(X)
    view = est.transform_view(X[:, 1], view=1)
    for frame in (U, V, view):
        assert isinstance(frame, pd.DataFrame)
        assert list(frame.columns) == list(est.get_feature_names_out())


def test_the_epoch_table_has_no_colour_codes_off_a_terminal(pairs, capsys):
    X, _ = pairs
    ContrastiveEmbedder(**{**SMALL, "verbose": 1}).fit(X)
    out = capsys.readouterr().out
    assert "train_loss" in out and "\x1b[" not in out


def test_batch_loss_histograms_are_outlines_in_distinct_colours(pairs):
    import matplotlib

    matplotlib.use("Agg")
    from skcontrast.plotting import plot_batch_losses
    from skcontrast.selectors import FixedBatchSelector

    X, _ = pairs
    ax = plot_batch_losses(X, {"shuffled": ShuffledBatchSelector(16, random_state=0),
                               "fixed": FixedBatchSelector(16, random_state=0)})
    patches = [p for p in ax.patches if p.get_label() and not p.get_label().startswith("_")]
    assert len(patches) == 2
    assert not any(p.get_fill() for p in patches)
    assert patches[0].get_edgecolor() != patches[1].get_edgecolor()
