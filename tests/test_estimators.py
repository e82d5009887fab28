"""ContrastiveEmbedder and SupConEmbedder as scikit-learn citizens, trained by skorch."""

import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from _helpers import (
    SMALL_IMAGES,
    Bag,
    RecordingSelector,
    paired_gaussians,
    requires_cuda,
    small_mlp,
    tiny_cnn,
)
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks
from skorch.callbacks import Callback
from torch import nn

from skcontrast import ContrastiveEmbedder, SupConEmbedder
from skcontrast.datasets import GaussianNoise, load_digit_views, make_paired_gaussians
from skcontrast.exceptions import TrainingDivergedError
from skcontrast.losses import ContrastiveMargin, SymmetricInfoNCE
from skcontrast.metrics import get_scorer, knn_accuracy, ncc_accuracy
from skcontrast.selectors import (
    BcSSelector,
    BindingSelector,
    ExhaustiveBatchSelector,
    FixedBatchSelector,
    FullBatchSelector,
    JESTSelector,
    OSGDSelector,
    PredefinedBatchSelector,
    RandomBatchSelector,
    RhoLossSelector,
    ScBSelector,
    ShuffledBatchSelector,
    SpectralBatchSelector,
)

SMALL = {"n_components": 4, "hidden_layer_sizes": (16,), "max_epochs": 2, "batch_size": 8,
         "random_state": 0}


@parametrize_with_checks([ContrastiveEmbedder(**SMALL), SupConEmbedder(**SMALL)])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


@pytest.fixture(scope="module")
def pairs():
    X, y = make_paired_gaussians(400, 8, n_clusters=8, noise=0.1, random_state=0)
    return X, y


def fitted(X, **params):
    settings = {"n_components": 8, "hidden_layer_sizes": (32,), "max_epochs": 15,
                "random_state": 0, "lr": 3e-3, **params}
    return ContrastiveEmbedder(**settings).fit(X)


# --------------------------------------------------------------------------------------
# It learns
# --------------------------------------------------------------------------------------

def test_training_learns_far_above_chance_and_an_untrained_net(pairs):
    X, _ = pairs
    trained = fitted(X, selector=ShuffledBatchSelector(32))
    untrained = fitted(X, max_epochs=1, lr=1e-12)
    chance = 1 / len(X)
    assert untrained.score(X) < 5 * chance
    assert trained.score(X) > 40 * chance  # 0.185 measured; linear CCA reaches 0.19 here
    assert trained.score(X) > untrained.score(X) + 0.1


@pytest.mark.parametrize("selector", [
    FixedBatchSelector(16), ShuffledBatchSelector(16), RandomBatchSelector(16),
    FullBatchSelector(), OSGDSelector(16, k=4, q=2), BcSSelector(16), ScBSelector(16),
    SpectralBatchSelector(16, chunk_size=64), BindingSelector(ShuffledBatchSelector(16)),
], ids=lambda s: type(s).__name__)
def test_every_selector_can_drive_a_fit(pairs, selector):
    X, y = pairs
    X, y = X[:96], y[:96]
    est = ContrastiveEmbedder(n_components=4, hidden_layer_sizes=(16,), max_epochs=2,
                              selector=selector, random_state=0).fit(X, y)
    history = est.history_
    assert len(history) == 2
    assert np.isfinite(history[-1, "train_loss"])
    assert history[-1, "n_batches"] == est.net_.selector.get_n_splits(96, y)
    assert history[-1, "select_time"] >= 0


def test_exhaustive_selector_on_a_tiny_problem():
    X, _ = make_paired_gaussians(8, 4, random_state=1)
    est = ContrastiveEmbedder(n_components=3, hidden_layer_sizes=(8,), max_epochs=1,
                              selector=ExhaustiveBatchSelector(2), random_state=0).fit(X)
    assert est.history_[-1, "n_batches"] == 28


class BatchRows(Callback):
    """Keeps the rows of every training batch the network receives."""

    def initialize(self):
        self.batches = []
        return self

    def on_batch_begin(self, net, batch=None, training=None, **kwargs):
        if training:  # the two views of the batch, side by side
            self.batches.append(torch.cat(batch[0], dim=1))


@pytest.mark.parametrize("inner", [ShuffledBatchSelector(8),
                                   OSGDSelector(8, k=3, q=2, loss=SymmetricInfoNCE(0.5))],
                         ids=["shuffled", "osgd"])
def test_the_selector_decides_the_batches_the_network_sees(inner):
    X, _ = make_paired_gaussians(40, 3, random_state=2)
    flat = X.reshape(40, -1)
    recorder = BatchRows()
    est = ContrastiveEmbedder(n_components=2, hidden_layer_sizes=(4,), max_epochs=3,
                              selector=RecordingSelector(inner), callbacks=[recorder],
                              random_state=0).fit(X)
    chosen = [batch for epoch in est.net_.selector.seen_ for batch in epoch]
    assert len(recorder.batches) == len(chosen)
    for rows, indices in zip(recorder.batches, chosen, strict=True):
        assert torch.equal(rows, torch.from_numpy(flat[indices]))


def test_reproducible_for_a_fixed_random_state(pairs):
    X, _ = pairs
    params = {"max_epochs": 3, "selector": SpectralBatchSelector(32, chunk_size=128)}
    a, b = fitted(X, **params), fitted(X, **params)
    np.testing.assert_array_equal(a.transform(X), b.transform(X))
    assert a.history_[:, "train_loss"] == b.history_[:, "train_loss"]


# --------------------------------------------------------------------------------------
# Input forms
# --------------------------------------------------------------------------------------

def test_pairs_and_side_by_side_forms_agree(pairs):
    X, _ = pairs
    a = fitted(X, max_epochs=2)
    b = fitted(X.reshape(len(X), -1), max_epochs=2)
    np.testing.assert_allclose(a.transform(X), b.transform(X.reshape(len(X), -1)), atol=1e-6)
    assert a.n_features_in_ == 16 and a.view_split_ == 8


def test_two_modalities_of_different_widths(pairs):
    X, _ = pairs
    wide = np.hstack([X[:, 0], np.repeat(X[:, 1], 2, axis=1)])  # widths 8 and 16
    est = fitted(wide, view_split=8, max_epochs=3)
    assert len(est.net_.module_.encoders) == 2
    U, V = est.transform_pairs(wide)
    assert U.shape == V.shape == (400, 8)
    np.testing.assert_allclose(est.transform_view(wide[:, 8:], view=1), V)
    np.testing.assert_allclose(est.transform_view(wide[:, :8], view=0), U)
    np.testing.assert_allclose(np.linalg.norm(U, axis=1), 1, rtol=1e-5)
    with pytest.raises(ValueError, match=r"X_view for view 1 must have shape \(n, 16\)"):
        est.transform_view(wide[:, :8], view=1)


def test_single_views_with_an_augmentation_simclr(pairs):
    X, _ = pairs
    single = X[:, 0]
    est = fitted(single, augmentation=GaussianNoise(0.1), max_epochs=5)
    assert est.view_split_ is None
    assert est.transform(single).shape == (400, 8)
    assert est.score(single) > 0.5  # two noisy copies of a row find each other


def test_learned_temperature_moves():
    X, _ = make_paired_gaussians(200, 6, random_state=3)
    est = fitted(X, loss=SymmetricInfoNCE(0.5, learn_temperature=True), max_epochs=5, lr=1e-2)
    assert est.temperature_ != pytest.approx(0.5)
    assert est.temperature_ >= 0.01


@pytest.mark.parametrize("loss", ["nt_xent", "dcl", "dhel", "kcl", "info_nce", "siglip",
                                  "hard_negative_nce", "debiased_nce", "supcon",
                                  ContrastiveMargin(margin=1.0)])
def test_losses_by_name_or_object(loss):
    X, _ = make_paired_gaussians(64, 4, random_state=0)
    est = ContrastiveEmbedder(n_components=3, hidden_layer_sizes=(8,), max_epochs=2,
                              loss=loss, random_state=0).fit(X)
    assert np.isfinite(est.history_[-1, "train_loss"])
    assert np.isfinite(est.history_[-1, "train_positive"])


def test_balance_weights_reach_the_loss():
    X, _ = make_paired_gaussians(64, 4, random_state=0)
    base = {"n_components": 3, "hidden_layer_sizes": (8,), "max_epochs": 1,
            "random_state": 0, "lr": 1e-12}
    plain = ContrastiveEmbedder(**base).fit(X).history_[-1]
    heavy = ContrastiveEmbedder(loss=SymmetricInfoNCE(lambda_ent=2.0), **base).fit(X).history_[-1]
    assert heavy["train_loss"] == pytest.approx(
        plain["train_positive"] + 2 * plain["train_entropy"], rel=1e-4)


def test_estimator_batch_size_overrides_the_selector_without_mutating_it():
    X, _ = make_paired_gaussians(64, 4, random_state=0)
    selector = ShuffledBatchSelector(32)
    est = ContrastiveEmbedder(n_components=3, hidden_layer_sizes=(8,), max_epochs=1,
                              selector=selector, batch_size=8, random_state=0).fit(X)
    assert selector.batch_size == 32 and selector.current_epoch == 0
    assert est.net_.selector.batch_size == 8
    assert est.history_[-1, "n_batches"] == 8


class CriterionAtEpochStart(Callback):
    """The training criterion's loss as it is when each epoch starts (its selection)."""

    def on_epoch_begin(self, net, **kwargs):
        self.seen_ = [*getattr(self, "seen_", []), net.criterion_.live_loss()]


@pytest.mark.parametrize("inner", [OSGDSelector(8, k=3, q=2), SpectralBatchSelector(8)],
                         ids=["osgd", "spectral"])
def test_adaptive_selectors_score_with_the_live_training_loss(inner):
    """With a learned temperature and balance weights, what the selector scores with at
    each epoch is the training criterion's loss at that epoch, not a copy of its start."""
    X, _ = make_paired_gaussians(64, 4, random_state=0)
    watch = CriterionAtEpochStart()
    loss = SymmetricInfoNCE(0.1, learn_temperature=True, lambda_ent=0.5, directions="mean")
    est = ContrastiveEmbedder(n_components=3, hidden_layer_sizes=(8,), max_epochs=4, lr=0.05,
                              loss=loss, selector=RecordingSelector(inner), callbacks=[watch],
                              random_state=0, device="cpu").fit(X)
    scored = est.net_.selector.losses_  # the estimator's clone of the recorder
    temperatures = [s.temperature for s in watch.seen_]
    assert len(set(temperatures)) == 4 and temperatures[0] == pytest.approx(0.1)  # learns
    assert len(scored) == 4
    for at_start, got in zip(watch.seen_, scored, strict=True):
        assert got.get_params() == at_start.get_params()
        assert got.lambda_ent == 0.5 and got.directions == "mean"
    assert loss.temperature == 0.1  # the user's object is never changed


def test_warm_start_continues_training_as_one_fit():
    X, _ = make_paired_gaussians(64, 4, random_state=0)
    params = {"n_components": 3, "hidden_layer_sizes": (8,), "random_state": 0,
              "selector": ShuffledBatchSelector(16), "device": "cpu"}
    whole = ContrastiveEmbedder(**params, max_epochs=4).fit(X)
    est = ContrastiveEmbedder(**params, max_epochs=2, warm_start=True)
    est.fit(X)
    est.fit(X)  # the optimizer's moments, the selector's epoch and the seed go on
    assert len(est.history_) == 4
    np.testing.assert_allclose(est.transform(X), whole.transform(X), atol=1e-6)


def test_verbose_shows_progress_and_selection_time(capsys):
    X, _ = make_paired_gaussians(64, 4, random_state=0)
    est = ContrastiveEmbedder(n_components=3, hidden_layer_sizes=(8,), max_epochs=2,
                              verbose=1, selector=OSGDSelector(8, k=3, q=2),
                              random_state=0).fit(X)
    out = capsys.readouterr()
    assert "select_time" in out.out and "train_loss" in out.out
    progress = dict(est.net_.callbacks_)["progress"]
    # the bar's total is the selector's count (6 of 8 batches), not len(X) / batch_size
    assert progress.batches_per_epoch == est.history_[-1, "n_batches"] == 6


# --------------------------------------------------------------------------------------
# SupConEmbedder
# --------------------------------------------------------------------------------------

def test_supcon_learns_classes_with_string_labels():
    X, y = load_digit_views()
    X = X.reshape(len(X), -1)[:600]
    labels = np.array([f"digit {d}" for d in y[:600]])
    est = SupConEmbedder(n_components=16, max_epochs=8, random_state=0).fit(X, labels)
    assert est.classes_.tolist() == sorted(set(labels))
    assert est.score(X, labels) > 0.9
    assert get_scorer("ncc_accuracy")(est, X, labels) == est.score(X, labels)


def test_supcon_with_binding_and_augmentation():
    X, y = make_paired_gaussians(120, 6, n_clusters=4, random_state=0)
    X = X[:, 0]
    est = SupConEmbedder(n_components=4, hidden_layer_sizes=(16,), max_epochs=2,
                         selector=BindingSelector(FixedBatchSelector(16)),
                         augmentation=GaussianNoise(0.05), random_state=0).fit(X, y)
    assert np.isfinite(est.history_[-1, "train_loss"])


def test_supcon_warns_on_single_member_classes():
    X = np.random.default_rng(0).normal(size=(20, 4))
    y = np.array([0] * 10 + [1] * 9 + [2])
    with pytest.warns(UserWarning, match=r"1 class\(es\) have a single sample \(2\)"):
        SupConEmbedder(n_components=2, hidden_layer_sizes=(4,), max_epochs=1,
                       random_state=0).fit(X, y)


def test_supcon_margin_loss():
    X, y = make_paired_gaussians(80, 5, n_clusters=4, random_state=1)
    est = SupConEmbedder(n_components=3, hidden_layer_sizes=(8,), max_epochs=2,
                         loss=ContrastiveMargin(averaging="global"),
                         random_state=0).fit(X[:, 0], y)
    assert np.isfinite(est.history_[-1, "train_loss"])


# --------------------------------------------------------------------------------------
# scikit-learn integration
# --------------------------------------------------------------------------------------

def test_pipeline_with_scaler_and_classifier():
    X, y = load_digit_views()
    flat = X.reshape(len(X), -1)
    pipe = Pipeline([("scale", StandardScaler()),
                     ("embed", ContrastiveEmbedder(n_components=16, max_epochs=5,
                                                   random_state=0)),
                     ("clf", LogisticRegression(max_iter=500))])
    pipe.fit(flat[:1200], y[:1200])
    assert pipe.score(flat[1200:], y[1200:]) > 0.5
    # the scorer reaches the embedder through the pipeline: 10 x chance after 5 epochs
    assert get_scorer("recall@1")(pipe[:-1], flat[1200:]) > 10 / len(flat[1200:])


def test_grid_search_over_loss_balance_and_selector_batch_size():
    X, _ = make_paired_gaussians(240, 6, random_state=0)
    flat = X.reshape(len(X), -1)
    est = ContrastiveEmbedder(n_components=4, hidden_layer_sizes=(16,), max_epochs=2,
                              selector=ShuffledBatchSelector(16), random_state=0)
    grid = {"loss__temperature": [0.1, 0.5], "loss__lambda_ent": [0.5, 1.0],
            "selector__batch_size": [8, 32]}
    # one process: a search in worker processes runs in docs/balance.rst (n_jobs=2) and
    # on a dask cluster (test_distributed.py)
    search = GridSearchCV(est, grid, cv=2).fit(flat)
    assert len(search.cv_results_["params"]) == 8
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    assert search.best_estimator_.transform(flat).shape == (240, 4)


def test_clone_and_pickle_round_trip(pairs):
    X, _ = pairs
    est = fitted(X, max_epochs=2)
    twin = clone(est)
    assert not hasattr(twin, "net_") and twin.get_params()["max_epochs"] == 2
    restored = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(restored.transform(X), est.transform(X))


def test_feature_names_and_set_output(pairs):
    X, _ = pairs
    est = fitted(X, max_epochs=1)
    names = est.get_feature_names_out()
    assert names.tolist() == [f"contrastiveembedder{i}" for i in range(8)]
    pd = pytest.importorskip("pandas")
    frame = est.set_output(transform="pandas").transform(X.reshape(len(X), -1))
    assert isinstance(frame, pd.DataFrame) and list(frame.columns) == names.tolist()


# --------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------

def test_bad_input_messages():
    X, _ = make_paired_gaussians(32, 4, random_state=0)
    small = {"n_components": 2, "hidden_layer_sizes": (4,), "max_epochs": 1}
    bad = X.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ContrastiveEmbedder(**small).fit(bad)
    bad[0, 0, 0] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        ContrastiveEmbedder(**small).fit(bad)
    with pytest.raises(ValueError, match=r"paired X must have shape \(n, 2, d\)"):
        ContrastiveEmbedder(**small).fit(np.zeros((10, 1, 4)))  # (n, 3, d): a negative
    with pytest.raises(ValueError, match="1 sample"):
        ContrastiveEmbedder(**small).fit(X[:1])
    with pytest.raises(ValueError, match=r"batch_size=1 is too small"):
        ContrastiveEmbedder(batch_size=1, **small).fit(X)
    with pytest.raises(ValueError, match=r"needs two views, but X has 1 feature\(s\)"):
        ContrastiveEmbedder(**small).fit(np.zeros((10, 1)))
    with pytest.raises(NotFittedError):
        ContrastiveEmbedder(**small).transform(X)
    est = ContrastiveEmbedder(**small).fit(X)
    with pytest.raises(ValueError, match="X has 6 features, but ContrastiveEmbedder is "
                                         "expecting 8 features"):
        est.transform(np.zeros((4, 6)))
    with pytest.raises(ValueError, match="n_components"):
        ContrastiveEmbedder(n_components=0).fit(X)
    with pytest.raises(ValueError, match="selector must be a BatchSelector"):
        ContrastiveEmbedder(selector="shuffled", **small).fit(X)
    with pytest.raises(ValueError, match="optimizer"):
        ContrastiveEmbedder(optimizer="lbfgs", **small).fit(X)
    with pytest.raises(ValueError, match="batch_size=8 cannot be applied"):
        ContrastiveEmbedder(selector=FullBatchSelector(), batch_size=8, **small).fit(X)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without a GPU")
def test_cuda_without_a_gpu_is_a_clear_error():
    X, _ = make_paired_gaussians(16, 4, random_state=0)
    with pytest.raises(ValueError, match="device='cuda' was requested but no CUDA GPU"):
        ContrastiveEmbedder(device="cuda", max_epochs=1).fit(X)


def test_y_is_ignored_by_contrastive_embedder():
    X, y = make_paired_gaussians(32, 4, random_state=0)
    params = {"n_components": 2, "hidden_layer_sizes": (4,), "max_epochs": 1,
              "random_state": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = ContrastiveEmbedder(**params).fit(X, y).transform(X)
    b = ContrastiveEmbedder(**params).fit(X).transform(X)
    np.testing.assert_array_equal(a, b)


def test_supcon_requires_y():
    with pytest.raises(ValueError, match="requires y"):
        SupConEmbedder(max_epochs=1).fit(np.zeros((10, 3)), None)


class _LoneBatch(ShuffledBatchSelector):
    """A selector of one's own whose epoch ends with a batch of one sample."""

    def _select(self, X, y, groups, rng, loss=None):
        order = rng.permutation(len(X))
        return [order[:-1].astype(np.int64), order[-1:].astype(np.int64)]

    def _n_batches(self, n, y):
        return 2


def test_a_remainder_of_one_sample_joins_a_batch_and_a_lone_batch_is_skipped():
    # one rule: a built-in selector's remainder of one joins the batch before it, so
    # every sample trains every epoch; a batch of one from a selector of one's own has
    # nothing to contrast and is skipped, with a warning
    X, _ = make_paired_gaussians(17, 4, random_state=0)  # 17 = 2 x 8 + 1
    small = {"n_components": 2, "hidden_layer_sizes": (4,), "max_epochs": 3,
             "random_state": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = ContrastiveEmbedder(**small, batch_size=8).fit(X)
    assert est.history_[:, "n_batches"] == [2, 2, 2]
    assert sorted(len(b) for b in ShuffledBatchSelector(8).split(X)) == [8, 9]
    with pytest.warns(UserWarning, match=r"1 batch\(es\) of a single sample .*n=17") as seen:
        est = ContrastiveEmbedder(**small, selector=_LoneBatch(16)).fit(X)
    assert len([w for w in seen if "single sample" in str(w.message)]) == 1  # once per fit
    assert est.history_[:, "n_batches"] == [1, 1, 1]
    assert np.isfinite(est.history_[:, "train_loss"]).all()


def test_a_super_batch_remainder_of_one_row_is_curated_with_the_others():
    # 9 rows and super-batches of 8: the ninth row was never embedded or trained
    seen = []

    class Recording(JESTSelector):
        def curate(self, batch):
            seen.append(batch.index.tolist())
            return super().curate(batch)

    X, _ = make_paired_gaussians(9, 4, random_state=0)
    ContrastiveEmbedder(n_components=2, hidden_layer_sizes=(4,), max_epochs=2,
                        random_state=0, selector=Recording(4, 0.5, score="hard")).fit(X)
    assert [sorted(rows) for rows in seen] == [list(range(9))] * 2


@pytest.mark.parametrize("views, width", [("first", 3), ("concat", 6), ("mean", 3)])
def test_transform_views_gives_a_pipeline_one_view_both_or_their_mean(views, width):
    X, _ = make_paired_gaussians(64, 4, random_state=0)
    flat = X.reshape(len(X), -1)
    pipe = Pipeline([("scale", StandardScaler()),
                     ("embed", ContrastiveEmbedder(n_components=3, hidden_layer_sizes=(8,),
                                                   max_epochs=1, transform_views=views,
                                                   random_state=0))]).fit(flat)
    out = pipe.transform(flat)
    est = pipe[-1]
    assert out.shape == (64, width) and len(est.get_feature_names_out()) == width
    U, V = est.transform_pairs(pipe[0].transform(flat))
    expected = {"first": U, "concat": np.hstack([U, V]),
                "mean": (U + V) / np.linalg.norm(U + V, axis=1, keepdims=True)}[views]
    np.testing.assert_allclose(out, expected, atol=1e-6)
    with pytest.raises(ValueError, match="transform_views='concat' combines the two views"):
        ContrastiveEmbedder(transform_views="concat", augmentation=GaussianNoise(0.1),
                            max_epochs=1).fit(X[:, 0])


# --------------------------------------------------------------------------------------
# Step-level curation (JEST, RHO-LOSS)
# --------------------------------------------------------------------------------------

def test_a_curating_selector_trains_on_the_rows_it_keeps(pairs):
    X, _ = pairs
    class TrainedRows(Callback):  # what reached the loss at each step
        def initialize(self):
            self.rows = []
            return self

        def on_batch_end(self, net, batch=None, training=None, **step):
            if training:
                self.rows.append(step["y_pred"].shape[0])

    sel, trained = JESTSelector(16, 0.75, score="hard", random_state=0), TrainedRows()
    est = ContrastiveEmbedder(**{**SMALL, "batch_size": None}, selector=sel,
                              callbacks=[trained]).fit(X)
    steps = est.history_[-1]["batches"]
    assert trained.rows[-7:] == [len(s["kept"]) for s in steps]
    assert len(steps) == sel.get_n_splits(len(X)) == 7  # super-batches: 6 x 64 + 16
    for step in steps:
        assert step["train_batch_size"] == len(step["kept"]) == len(set(step["kept"]))
    # the learner embeds each super-batch; 16 of 64 train, 4 of the last 16
    assert [s["selection_rows"] for s in steps] == [64] * 6 + [16]
    assert [s["train_batch_size"] for s in steps] == [16] * 6 + [4]
    assert est.history_[-1]["selection_rows"] == 400


@pytest.mark.parametrize("kind", ["jest", "rho"])
def test_a_cached_selection_pass_embeds_rows_once_and_remembers_the_trained_ones(pairs, kind):
    X, _ = pairs
    reference = ContrastiveEmbedder(**SMALL).fit(X[:100])
    make = (lambda **kw: JESTSelector(16, 0.75, n_chunks=2, **kw)) if kind == "jest" \
        else (lambda **kw: RhoLossSelector(16, 0.75, **kw))
    class LastStep(Callback):  # the embeddings the last training step computed
        def on_batch_end(self, net, batch=None, training=None, **step):
            if training:
                self.kept, self.y_pred = step["kept"], step["y_pred"].detach()

    last = LastStep()
    # the estimator's selection_pass reaches a curating selector that leaves it None
    est = ContrastiveEmbedder(**{**SMALL, "batch_size": None, "max_epochs": 3},
                              selection_pass="cached", callbacks=[last],
                              selector=make(reference=reference, random_state=0)).fit(X)
    assert est.selector.selection_pass is None  # the user's selector is not changed
    rows = [epoch["selection_rows"] for epoch in est.history_]
    assert rows == [2 * len(X), 0, 0]  # learner and reference embed every row once
    # the rows that trained last hold that step's embeddings, for the next epoch
    table = est.net_.sampler_.embedding_state()["embeddings"]
    torch.testing.assert_close(table[last.kept], last.y_pred)
    steps = est.history_[-1]["batches"]
    assert all(s["train_batch_size"] == len(set(s["kept"])) for s in steps)


def test_curation_keeps_what_the_reference_finds_easy(pairs):
    # half of the rows have reference views pointing apart (a high reference loss):
    # 'easy_reference' keeps the other half
    X, _ = pairs
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(len(X), 1, 6)).repeat(2, axis=1)
    bad = np.zeros(len(X), dtype=bool)
    bad[rng.permutation(len(X))[:len(X) // 2]] = True
    ref[bad, 1] *= -1
    sel = JESTSelector(8, 0.5, n_chunks=2, score="easy_reference", reference=ref,
                       random_state=0)
    est = ContrastiveEmbedder(**{**SMALL, "batch_size": None}, selector=sel).fit(X)
    kept = np.concatenate([s["kept"] for s in est.history_[-1]["batches"]])
    assert bad[kept].mean() < 0.1  # shuffled batches: 0.5
    assert est.history_[-1]["selection_rows"] == sum(
        len(b) for b in sel.split(np.zeros((len(X), 1))))  # no reference forward pass


def test_jest_with_a_fitted_reference_in_a_grid_search(pairs):
    X, _ = pairs
    reference = ContrastiveEmbedder(**SMALL).fit(X[:100])
    est = ContrastiveEmbedder(**{**SMALL, "batch_size": None},
                              selector=JESTSelector(8, reference=reference, random_state=0))
    search = GridSearchCV(est, {"selector__filter_ratio": [0.5, 0.75]}, cv=2).fit(X)
    assert search.best_estimator_.selector.reference is reference
    steps = search.best_estimator_.history_[-1]["batches"]
    ratio = search.best_params_["selector__filter_ratio"]
    assert steps[0]["selection_rows"] == 2 * round(8 / (1 - ratio))  # learner + reference


def test_rho_loss_with_a_label_loss_and_two_crops():
    X, y = make_paired_gaussians(120, 6, n_clusters=4, random_state=1)
    single = X[:, 0]
    reference = SupConEmbedder(**SMALL).fit(single, y)
    sel = RhoLossSelector(8, 0.5, reference=reference, random_state=0)
    for augmentation in (None, GaussianNoise(0.1)):
        est = SupConEmbedder(**{**SMALL, "batch_size": None}, selector=sel,
                             augmentation=augmentation).fit(single, y)
        steps = est.history_[-1]["batches"]
        assert all(s["train_batch_size"] == len(s["kept"]) for s in steps)
        assert steps[0]["train_batch_size"] == 8 and steps[0]["selection_rows"] == 32


def test_a_model_trained_with_fixed_reference_embeddings_saves_and_continues(pairs, tmp_path):
    import skcontrast

    X, _ = pairs
    ref = np.random.default_rng(1).normal(size=(len(X), 2, 4))
    params = {**SMALL, "batch_size": None,
              "selector": JESTSelector(8, 0.5, reference=ref, random_state=0),
              "validation_fraction": 0.25}
    first = ContrastiveEmbedder(**params).fit(X)  # held-out rows: the reference follows
    again = skcontrast.load(first.save(tmp_path / "m"))
    np.testing.assert_array_equal(again.selector.reference, ref)
    # loaded on the CPU: equal to a GPU fit's transform up to float rounding
    np.testing.assert_allclose(again.transform(X), first.transform(X), atol=1e-6)
    again.set_params(warm_start=True).fit(X)
    assert len(again.history_) == 4


@requires_cuda
@pytest.mark.parametrize("data_on_device", [False, True])
def test_curation_on_the_gpu(pairs, data_on_device):
    X, _ = pairs
    reference = ContrastiveEmbedder(**SMALL, device="cuda").fit(X[:100])
    for sel, loss in ((JESTSelector(16, 0.75, reference=reference, random_state=0), "siglip"),
                      (JESTSelector(16, 0.5, n_chunks=4, reference=X[:, :, :4].copy(),
                                    random_state=0), "symmetric_info_nce"),
                      (RhoLossSelector(16, 0.5, reference=reference, random_state=0),
                       "nt_xent")):
        est = ContrastiveEmbedder(**{**SMALL, "batch_size": None}, selector=sel, loss=loss,
                                  device="cuda", data_on_device=data_on_device).fit(X)
        steps = est.history_[-1]["batches"]
        assert steps[0]["train_batch_size"] == len(set(steps[0]["kept"])) == 16
        assert np.isfinite(est.transform(X)).all()


@pytest.mark.parametrize("kind", [ContrastiveEmbedder, SupConEmbedder])
def test_a_last_update_that_overflows_the_activations_is_refused(kind):
    # sgd at lr=1e30: the step's loss and the weights (about 1e30) stayed finite, and
    # transform returned NaN (SupCon failed on NaN in H, saying nothing of divergence)

    X, y = make_paired_gaussians(16, 4, n_clusters=2, random_state=0)
    data = (X,) if kind is ContrastiveEmbedder else (X[:, 0], y)
    est = kind(**{**SMALL, "max_epochs": 1, "batch_size": 16}, optimizer="sgd")
    with pytest.raises(TrainingDivergedError, match="embeds training rows as NaN or "
                                                    "infinite values"):
        clone(est).set_params(lr=1e30).fit(*data)
    est.fit(*data)
    before = est.transform(data[0])
    with pytest.raises(TrainingDivergedError, match="the estimator is as it was"):
        est.set_params(warm_start=True, lr=1e30).fit(*data)
    np.testing.assert_array_equal(est.transform(data[0]), before)


SMALL_EDGES = small_mlp()
pairs_edges = paired_gaussians(96)


def test_supcon_classes_are_set_only_by_a_fit_that_succeeds(pairs_edges):
    X, y = pairs_edges
    est = SupConEmbedder(**SMALL_EDGES).fit(X[:, 0], y)
    classes = est.classes_.copy()
    with pytest.raises(ValueError, match="at least 2 classes"):
        est.fit(X[:, 0], np.zeros(len(y)))
    np.testing.assert_array_equal(est.classes_, classes)


@pytest.mark.parametrize("labels, message", [
    (np.array([0, 1, np.nan, 2] * 24, dtype=object), r"y\[2\] is nan"),
    (np.array([0, 1, None, 2] * 24, dtype=object), r"y\[2\] is None"),
    (np.array([0, "1", 2, "3"] * 24, dtype=object), "mixes labels of different types"),
    (np.arange(96)[:, None] % 3, r"y must be 1-D.*y.ravel\(\)"),
])
def test_bad_labels_are_refused_everywhere(pairs_edges, labels, message):
    X, _ = pairs_edges
    with pytest.raises(ValueError, match=message):
        SupConEmbedder(**SMALL_EDGES).fit(X[:, 0], labels)
    with pytest.raises(ValueError, match=message):
        ncc_accuracy(X[:, 0], labels, X[:, 1], labels)


def test_scoring_checks_the_labels_shape_length_and_kind(pairs_edges):
    X, y = pairs_edges
    est = SupConEmbedder(**SMALL_EDGES).fit(X[:, 0], y)
    for bad, message in ((y[:, None], "must be 1-D"), (y[:1], "has 1 labels but X has 96")):
        with pytest.raises(ValueError, match=message):
            est.score(X[:, 0], bad)
        with pytest.raises(ValueError, match=message):
            get_scorer("ncc_accuracy")(est, X[:, 0], bad)
    named = SupConEmbedder(**SMALL_EDGES).fit(X[:, 0], y.astype(str))
    with pytest.raises(ValueError, match="holds number labels but the estimator was fitted "
                                         "on str labels"):
        named.score(X[:, 0], y)
    with pytest.raises(ValueError, match="y_test holds str labels"):
        knn_accuracy(X[:, 0], y, X[:, 1], y.astype(str))


def test_feature_names_need_a_fitted_estimator(pairs_edges):
    X, _ = pairs_edges
    with pytest.raises(NotFittedError):
        ContrastiveEmbedder().get_feature_names_out()
    names = ContrastiveEmbedder(**SMALL_EDGES).fit(X).get_feature_names_out()
    assert list(names) == [f"contrastiveembedder{i}" for i in range(4)]


def test_input_edges(pairs_edges):
    X, _ = pairs_edges
    with pytest.raises(ValueError, match="X holds 0 sample"):
        ContrastiveEmbedder(**SMALL_EDGES).fit(np.zeros((0, 2, 4)))
    images = np.random.default_rng(0).random((40, 2, 1, 4, 4)).astype(np.float32)
    est = ContrastiveEmbedder(**SMALL_EDGES).fit(images)
    with pytest.raises(ValueError, match=r"X holds 0 sample.*nothing to embed"):
        est.transform(images[:0])
    tensor = torch.tensor(X.reshape(96, -1), requires_grad=True)
    assert ContrastiveEmbedder(**SMALL_EDGES).fit(tensor).transform(tensor).shape == (96, 4)
    readonly = X.reshape(96, -1).astype(np.float32)
    readonly.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ContrastiveEmbedder(**SMALL_EDGES).fit(readonly)
    tokens = {"a": X[:, 0], "t": np.full((96, 3), 2**63 + 5, dtype=np.uint64)}
    with pytest.raises(ValueError, match="beyond the int64 range"):
        ContrastiveEmbedder(**{**SMALL_EDGES, "module": {"a": nn.Linear(8, 4),
                                                   "t": nn.EmbeddingBag(10, 4)}}).fit(tokens)


def test_parameter_edges(pairs_edges):
    X, _ = pairs_edges
    with pytest.raises(ValueError, match="batches\\[0\\] must hold integer indices"):
        PredefinedBatchSelector([[0.0, 1.7]]).get_n_splits(4)
    with pytest.raises(ValueError, match="repeats sample"):
        PredefinedBatchSelector([[0, 1, 1]]).get_n_splits(4)
    with pytest.raises(ValueError, match="selector__batch_size sets a parameter of selector"):
        ContrastiveEmbedder().set_params(selector__batch_size=32)
    assert ContrastiveEmbedder().set_params(selector=ShuffledBatchSelector(8),
                                            selector__batch_size=32).selector.batch_size == 32
    with pytest.raises(ValueError, match="callbacks\\[0\\] must be a skorch callback"):
        ContrastiveEmbedder(**{**SMALL_EDGES, "callbacks": ["x"]}).fit(X)
    widths = {"module": (nn.Linear(8, 4), nn.Linear(8, 3))}
    with pytest.raises(ValueError, match="encoders must embed into the same space"):
        ContrastiveEmbedder(**{**SMALL_EDGES, **widths}).fit(X)


def test_test_extra_has_pandas_so_set_output_runs():

    import tomllib

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml")
                              .read_text())
    test_extra = pyproject["project"]["optional-dependencies"]["test"]
    assert any(requirement.startswith("pandas") for requirement in test_extra)


def test_set_output_reaches_transform_pairs_and_transform_view(pairs_edges):
    pd = pytest.importorskip("pandas")
    X, _ = pairs_edges
    est = ContrastiveEmbedder(**SMALL_EDGES).fit(X).set_output(transform="pandas")
    U, V = est.transform_pairs(X)
    view = est.transform_view(X[:, 1], view=1)
    for frame in (U, V, view):
        assert isinstance(frame, pd.DataFrame)
        assert list(frame.columns) == list(est.get_feature_names_out())


def test_set_output_of_every_transform_method_survives_clone_and_follows_the_global(
        pairs_edges):
    """The container of the methods scikit-learn does not wrap was read from its private
    ``_set_output``; now from ``set_output`` itself, so a clone keeps it, and without a
    choice of the estimator's own, scikit-learn's global ``transform_output`` holds."""
    import sklearn

    pd = pytest.importorskip("pandas")
    X, _ = pairs_edges
    flat = X.reshape(len(X), -1)
    X_frame = pd.DataFrame(flat, index=np.arange(len(X)) + 100,
                           columns=[f"c{i}" for i in range(flat.shape[1])])
    est = ContrastiveEmbedder(**SMALL_EDGES).set_output(transform="pandas")
    twin = clone(est).fit(X_frame)
    U, _ = twin.transform_pairs(X_frame)
    assert isinstance(U, pd.DataFrame) and list(U.index) == list(X_frame.index)
    assert isinstance(twin.transform_head(X_frame), pd.DataFrame)
    assert not hasattr(clone(ContrastiveEmbedder()), "_output_container")
    fitted = ContrastiveEmbedder(**SMALL_EDGES).fit(X)
    assert isinstance(fitted.transform_head(X), np.ndarray)
    with sklearn.config_context(transform_output="pandas"):
        head = fitted.transform_head(X)
        assert isinstance(head, pd.DataFrame)
        assert list(head.columns) == list(fitted.get_feature_names_out())
        assert isinstance(fitted.set_output(transform="default").transform_head(X),
                          np.ndarray)


def test_clone_and_pickle_image_models(digit_images):
    images, _, tokens = digit_images
    X = {"image": images.astype(np.float32), "text": tokens}
    est = ContrastiveEmbedder(module={"image": tiny_cnn(), "text": Bag()},
                              augmentation=None, **SMALL_IMAGES).fit(X)
    twin = clone(est)
    assert not hasattr(twin, "net_") and set(twin.module) == {"image", "text"}
    restored = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(restored.transform(X), est.transform(X))
    np.testing.assert_array_equal(restored.transform_view(tokens, view="text"),
                                  est.transform_view(tokens, view="text"))


@pytest.mark.parametrize("make", [
    lambda: ContrastiveEmbedder(max_epochs=2, batch_size=8, random_state=0).fit(
        [("red heart", "rotes herz"), ("thumbs up", "daumen hoch"), ("dog", "hund"),
         ("cat", "katze"), ("sun", "sonne"), ("moon", "mond"), ("tree", "baum"),
         ("car", "auto")] * 2),
    lambda: ContrastiveEmbedder(max_epochs=2, batch_size=16, random_state=0,
                                selector=SpectralBatchSelector(16, random_state=0)).fit(
        np.random.default_rng(0).normal(size=(64, 2, 6)).astype(np.float32)),
    lambda: SupConEmbedder(max_epochs=2, batch_size=16, random_state=0).fit(
        np.random.default_rng(0).normal(size=(64, 6)).astype(np.float32), np.arange(64) % 4),
], ids=["text", "adaptive selector", "supcon"])
def test_a_dropped_estimator_frees_its_network_without_a_garbage_collection(make):
    """No reference cycle holds a fitted model: a loop of text fits (0.8 GB of table and
    Adam moments each) ran out of memory before Python's full collection came."""
    import gc
    import weakref

    est = make()
    gc.collect()
    gc.disable()
    try:
        module = weakref.ref(est.net_.module_)
        del est
        assert module() is None
    finally:
        gc.enable()
