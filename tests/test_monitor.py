"""Held-out monitoring (skcontrast/_estimators/_monitor.py): the split of the held-out
rows."""


import warnings

import numpy as np
import pytest
from _helpers import paired_gaussians, small_mlp
from skorch.callbacks import Checkpoint, EarlyStopping, LRScheduler

from skcontrast import ContrastiveEmbedder, SupConEmbedder
from skcontrast._estimators._monitor import split_indices
from skcontrast.datasets import GaussianNoise, make_paired_gaussians
from skcontrast.memory import SogCLRMemory
from skcontrast.selectors import ShuffledBatchSelector


def test_a_single_member_class_keeps_the_split_stratified_and_every_class_trains():
    labels = np.repeat(np.arange(6), [1, 3, 10, 10, 10, 20])
    for seed in range(30):
        train, valid = split_indices(len(labels), 0.25, seed, labels)
        assert len(valid) == round(0.25 * len(labels))
        assert set(labels[train]) == set(labels)  # no class goes missing
        assert 0 not in labels[valid]  # the single member trains
        counts = np.bincount(labels[valid], minlength=6)
        share = 0.25 * np.bincount(labels)
        assert np.abs(counts - share).max() < 1  # stratified: each class its share
        assert np.intersect1d(train, valid).size == 0 and len(train) + len(valid) == 54


def test_supcon_keeps_every_class_with_a_held_out_fraction():
    rng = np.random.default_rng(0)
    y = np.repeat(["one", "three", "a", "b"], [1, 3, 20, 20])
    X = rng.normal(size=(len(y), 5)).astype(np.float32)
    for seed in range(3):
        with pytest.warns(UserWarning, match="single sample"):
            est = SupConEmbedder(n_components=3, hidden_layer_sizes=(8,), max_epochs=1,
                                 validation_fraction=0.2, random_state=seed,
                                 device="cpu").fit(X, y)
        assert set(est.classes_) == set(y)


def test_too_few_samples_to_hold_out_is_a_clear_error():
    with pytest.raises(ValueError, match="holds out 1 sample"):
        split_indices(6, 0.34, 0, np.array([0, 1, 2, 3, 4, 4]))


SMALL = small_mlp(batch_size=16)


def test_singleton_classes_give_their_held_out_places_to_the_others():
    import warnings

    from skcontrast import SupConEmbedder

    rng = np.random.default_rng(0)
    y = np.r_[np.arange(40), np.repeat([100, 101, 102], 8)]  # 40 singletons, 3 x 8
    X = rng.normal(size=(64, 6)).astype(np.float32)
    est = SupConEmbedder(**{**SMALL, "max_epochs": 1}, validation_fraction=0.2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # single-member classes
        est.fit(X, y)
        rows = est.net_.plan.held_out_rows
        assert len(rows) == 13 and set(y[rows]) <= {100, 101, 102}
        est.set_params(warm_start=True).fit(X, y)  # the identical warm start is accepted
    np.testing.assert_array_equal(est.net_.plan.held_out_rows, rows)


def test_held_out_counts_reach_the_fraction_whenever_the_classes_have_room():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from skcontrast._estimators._monitor import held_out_counts

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.integers(1, 30), min_size=1, max_size=25),
           st.floats(0.05, 0.6))
    def check(sizes, fraction):
        sizes = np.array(sizes)
        n = int(sizes.sum())
        want = round(n * fraction)
        if want < 2 or n - want < 2:
            return
        counts = held_out_counts(n, fraction, sizes)
        assert (counts <= sizes - 1).all() and (counts >= 0).all()
        assert counts.sum() == min(want, int((sizes - 1).sum()))

    check()


def test_classes_with_no_room_hold_out_fewer_and_say_so():
    from skcontrast._estimators._monitor import split_indices

    labels = np.r_[np.arange(30), [50, 50, 51, 51]]  # room for 2 of round(34 * .2) = 7
    with pytest.warns(UserWarning, match="holds out 2 of 34 samples, not 7"):
        train, valid = split_indices(34, 0.2, 0, labels)
    assert len(valid) == 2 and len(train) == 32


SMALL_FLOW = small_mlp(max_epochs=3)
pairs = paired_gaussians(120)


def test_valid_loss_is_the_same_loss_on_fixed_held_out_batches(pairs):
    """With nothing learned (lr tiny), the held-out loss is the same every epoch, also
    with random augmentations: the batches and their random views are fixed."""
    X, _ = pairs
    for extra, data in (({}, X), ({"augmentation": GaussianNoise(0.3)}, X[:, 0])):
        est = ContrastiveEmbedder(**{**SMALL_FLOW, "lr": 1e-12, "validation_fraction": 0.25,
                                     **extra}).fit(data)
        losses = est.history_[:, "valid_loss"]
        assert len(losses) == 3 and np.allclose(losses, losses[0], rtol=1e-6)
        assert {b["valid_batch_size"] for b in est.history_[-1, "batches"]
                if "valid_batch_size" in b} <= {30, 32}
    trained = ContrastiveEmbedder(**{**SMALL_FLOW, "validation_fraction": 0.25}).fit(X)
    assert trained.history_[-1, "valid_loss"] < trained.history_[0, "valid_loss"]


def test_held_out_rows_never_reach_the_selector_or_the_memory(pairs):
    from _helpers import RecordingSelector

    X, _ = pairs
    est = ContrastiveEmbedder(**{**SMALL_FLOW, "loss": "dcl", "memory": SogCLRMemory(),
                                 "selector": RecordingSelector(ShuffledBatchSelector(16)),
                                 "validation_fraction": 0.25}).fit(X)
    assert est.net_.memory_state.n_samples == 90 == est.n_samples_
    seen = {i for epoch in est.net_.selector.seen_ for batch in epoch for i in batch}
    assert seen == set(range(90))  # indices of the 90 training rows only


def test_skorch_callbacks_work_with_their_default_monitors(pairs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    X, y = pairs
    est = SupConEmbedder(**{**SMALL_FLOW, "max_epochs": 30, "lr": 0.5, "optimizer": "sgd",
                            "validation_fraction": 0.2, "scoring": "ncc_accuracy",
                            "callbacks": [EarlyStopping(patience=2), Checkpoint(),
                                          LRScheduler("ReduceLROnPlateau")]})
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*(stopped|interrupt)")  # a normal stop
        est.fit(X[:, 0], y)
    history = est.history_
    assert len(history) < 30  # EarlyStopping stopped it
    assert all(np.isfinite(history[:, "valid_loss"]))
    assert all(0 <= s <= 1 for s in history[:, "valid_score"])
    assert (tmp_path / "params.pt").exists()  # Checkpoint saved on valid_loss_best


def test_x_val_and_the_errors_of_held_out_settings(pairs):
    X, y = pairs
    est = SupConEmbedder(**{**SMALL_FLOW, "scoring": "ncc_accuracy"}).fit(
        X[:90, 0], y[:90], X_val=X[90:, 0], y_val=y[90:])
    assert len(est.history_[:, "valid_score"]) == 3
    with pytest.raises(ValueError, match="EarlyStopping watches 'valid_loss', which needs "
                                         "held-out data"):
        ContrastiveEmbedder(**{**SMALL_FLOW, "callbacks": [EarlyStopping()]}).fit(X)
    with pytest.raises(ValueError, match="scoring records a score of held-out data"):
        ContrastiveEmbedder(**{**SMALL_FLOW, "scoring": "recall@1"}).fit(X)
    with pytest.raises(ValueError, match="either X_val or validation_fraction"):
        ContrastiveEmbedder(**{**SMALL_FLOW, "validation_fraction": 0.2}).fit(X, X_val=X)
    with pytest.raises(ValueError, match="needs y_val with X_val"):
        SupConEmbedder(**SMALL_FLOW).fit(X[:, 0], y, X_val=X[:, 0])
    with pytest.raises(ValueError, match="validation_fraction must be None or a number"):
        ContrastiveEmbedder(**{**SMALL_FLOW, "validation_fraction": 1.5}).fit(X)
    with pytest.raises(ValueError, match="compares the two views of pairs"):
        SupConEmbedder(**{**SMALL_FLOW, "scoring": "recall@1", "validation_fraction": 0.2}).fit(
            X[:, 0], y)


def _guarded_symmetric_info_nce(U, V, same, t):
    """Float64 loops: the symmetric InfoNCE of a batch (both directions, each a mean
    over anchors), a candidate of the same content as the anchor's pair left out."""
    total = 0.0
    for A, P in ((U, V), (V, U)):
        terms = []
        for i in range(len(A)):
            kept = [j for j in range(len(A)) if j == i or not same[i][j]]
            logits = [float(A[i] @ P[j]) / t for j in kept]
            top = max(logits)
            terms.append(-float(A[i] @ P[i]) / t + top
                         + np.log(sum(np.exp(v - top) for v in logits)))
        total += np.mean(terms)
    return total


def test_the_held_out_loss_applies_the_false_negative_guard():
    """``valid_loss`` with ``FalseNegativeGuard(same_content=True)``: a held-out pair that
    repeats another is not its negative, as a float64 loop over the held-out batches
    (the held-out data in the fit's fixed order, consecutive batches) computes it with
    the final model."""
    from skcontrast.losses import FalseNegativeGuard, SymmetricInfoNCE

    X, _ = make_paired_gaussians(80, 8, n_clusters=3, random_state=0)
    X_val = np.concatenate([X[:12], X[:12]])  # every held-out pair twice
    t = 0.2
    est = ContrastiveEmbedder(**{**SMALL_FLOW, "max_epochs": 1, "batch_size": 8,
                                 "loss": SymmetricInfoNCE(t, false_negatives=FalseNegativeGuard())}
                              ).fit(X[12:], X_val=X_val)
    U, V = (np.asarray(z, dtype=np.float64) for z in est.transform_pairs(X_val))
    order = np.random.default_rng([est.net_.plan.seed, 4]).permutation(len(X_val))
    losses, sizes = [], []
    for start in range(0, len(order), 8):
        rows = order[start:start + 8]
        same = [[np.array_equal(X_val[a], X_val[b]) for b in rows] for a in rows]
        losses.append(_guarded_symmetric_info_nce(U[rows], V[rows], same, t))
        sizes.append(len(rows))
    expected = np.average(losses, weights=sizes)
    assert est.history_[-1, "valid_loss"] == pytest.approx(expected, rel=1e-5)
    unguarded = np.average([_guarded_symmetric_info_nce(
        U[order[s:s + 8]], V[order[s:s + 8]], np.zeros((8, 8), bool), t)
        for s in range(0, len(order), 8)], weights=sizes)
    assert abs(unguarded - expected) > 1e-3  # the guard matters here


def test_skorchs_epoch_and_batch_scoring_score_with_skcontrast_scorers():
    """``EpochScoring`` with a skcontrast scorer's name records what ``scoring=`` does;
    ``BatchScoring`` scores each batch; a callable gets the net, whose ``predict`` gives
    the embeddings in the data's order, cached or not; a name only scikit-learn knows is
    refused when fit starts."""
    from skorch.callbacks import BatchScoring, EpochScoring

    X, _ = make_paired_gaussians(64, 8, n_clusters=3, random_state=0)

    def mean_embedding(net, X, y=None):
        return float(np.asarray(net.predict(X)).mean())

    est = ContrastiveEmbedder(**{**SMALL_FLOW, "validation_fraction": 0.25,
                                 "scoring": "recall@1", "callbacks": [
                                     EpochScoring("recall@1", lower_is_better=False,
                                                  name="r1"),
                                     EpochScoring("map@r", on_train=True,
                                                  lower_is_better=False),
                                     EpochScoring(mean_embedding, use_caching=False),
                                     EpochScoring(mean_embedding, name="cached")]}).fit(X)
    history = est.history_
    assert history[:, "r1"] == history[:, "valid_score"]
    assert history[:, "cached"] == pytest.approx(history[:, "mean_embedding"], rel=1e-5)
    assert all(0 <= v <= 1 for v in history[:, "map@r"])
    est = ContrastiveEmbedder(**{**SMALL_FLOW, "batch_size": 16, "callbacks": [
        BatchScoring("recall@1", on_train=True, lower_is_better=False)]}).fit(X)
    per_batch = [b["recall@1"] for b in est.history_[-1, "batches"]]
    assert len(per_batch) == 4 and all(0 <= v <= 1 for v in per_batch)
    assert est.history_[-1, "recall@1"] == pytest.approx(np.mean(per_batch))
    with pytest.raises(ValueError, match=r"EpochScoring\(scoring='accuracy'\): the "
                                         r"estimators embed"):
        ContrastiveEmbedder(**{**SMALL_FLOW, "validation_fraction": 0.25,
                               "callbacks": [EpochScoring("accuracy")]}).fit(X)
