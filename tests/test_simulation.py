"""The unconstrained-features simulation: fast versions of the papers' synthetic results."""

import itertools
import math

import numpy as np
import pytest

from skcontrast import geometry
from skcontrast.selectors import (
    BindingSelector,
    ExhaustiveBatchSelector,
    FixedBatchSelector,
    FullBatchSelector,
    OSGDSelector,
    PredefinedBatchSelector,
    RandomBatchSelector,
    ShuffledBatchSelector,
    SpectralBatchSelector,
)
from skcontrast.simulation import (
    initial_embeddings,
    optimize_embeddings,
    step_imbalanced_labels,
)


def test_full_batch_reaches_the_simplex_etf():
    result = optimize_embeddings(4, 8, FullBatchSelector(), steps=200, random_state=0)
    assert result.final_gap < 1e-2
    etf = 2 * math.log(1 + 3 * math.exp(-4 / 3))
    assert result.losses[-1] == pytest.approx(etf, abs=1e-6)


def test_a_fixed_partition_with_b2_stays_away():
    result = optimize_embeddings(4, 8, FixedBatchSelector(2), steps=300, update="epoch",
                                 random_state=0)
    assert result.final_gap > 1.0


@pytest.mark.slow
def test_theorem2_strict_subset_of_pairs_ends_away_and_all_pairs_reach_etf():
    pairs = [list(p) for p in itertools.combinations(range(5), 2)]
    subset = optimize_embeddings(5, 10, PredefinedBatchSelector(pairs[1:]), steps=800,
                                 update="epoch", random_state=0)
    everything = optimize_embeddings(5, 10, ExhaustiveBatchSelector(2), steps=800,
                                     update="epoch", random_state=0)
    assert everything.final_gap < 1e-2
    assert subset.final_gap > 1.0
    # the pair never seen together collapses, as in the proof of Theorem 2
    assert subset.U[0] @ subset.U[1] > 0.99


def test_osgd_beats_sgd_on_the_cho_2023_toy():
    eps = 0.05
    u = np.array([[np.cos(eps), np.sin(eps)], [np.cos(eps), -np.sin(eps)],
                  [-np.cos(eps), -np.sin(eps)], [-np.cos(eps), np.sin(eps)]])
    optimum = 2 * math.log(1 + 2 / math.e + math.e**-2)
    assert round(optimum, 3) == 1.253
    osgd = optimize_embeddings(4, 2, OSGDSelector(2, k=6, q=1, candidates="random",
                                                  n_groups=1), steps=150, lr=0.1, init=(u, u))
    sgd = optimize_embeddings(4, 2, RandomBatchSelector(2, n_batches=1), steps=150, lr=0.1,
                              init=(u, u), random_state=0)
    assert osgd.losses[-1] == pytest.approx(optimum, abs=2e-3)
    assert sgd.losses[-1] > osgd.losses[-1] + 0.05


def test_same_initial_embeddings_for_every_selector():
    starts = [optimize_embeddings(6, 4, s, steps=1, random_state=3).initial
              for s in (FullBatchSelector(), ShuffledBatchSelector(2),
                        SpectralBatchSelector(2))]
    for other in starts[1:]:
        for a, b in zip(starts[0], other, strict=True):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(starts[0][0], initial_embeddings(6, 4, random_state=3)[0])


def test_nonnegative_supcon_keeps_unit_nonnegative_features_and_binding_helps():
    y = step_imbalanced_labels(4, 12, 3)
    kwargs = {"loss": "supcon", "labels": y, "nonnegative": True, "steps": 300, "lr": 5.0,
              "d": 6, "n": len(y), "random_state": 0}
    bound = optimize_embeddings(selector=BindingSelector(FixedBatchSelector(6)), **kwargs)
    fixed = optimize_embeddings(selector=FixedBatchSelector(6), **kwargs)
    assert (bound.U >= 0).all()
    np.testing.assert_allclose(np.linalg.norm(bound.U, axis=1), 1, rtol=1e-12)
    assert bound.V is None
    assert bound.final_gap < fixed.final_gap
    assert bound.final_gap == pytest.approx(geometry.orthogonal_frame_gap(bound.U, y))


def test_history_records_full_batch_loss_gap_and_batches():
    result = optimize_embeddings(6, 3, ShuffledBatchSelector(3), steps=10, record_every=5,
                                 random_state=0)
    assert [h["step"] for h in result.history] == [5, 10]
    assert all(len(b) == 3 for h in result.history for b in h["batches"])
    assert np.isfinite(result.gaps).all()  # n = 2d: the cross-polytope reference


def test_step_imbalanced_labels():
    y = step_imbalanced_labels(4, 100, 10)
    assert np.bincount(y).tolist() == [100, 100, 10, 10]
    assert np.bincount(step_imbalanced_labels(2, 10, 100)).tolist() == [10, 2]


def test_bad_input():
    with pytest.raises(ValueError, match="steps must be >= 1"):
        optimize_embeddings(4, 8, steps=0)
    with pytest.raises(ValueError, match="lr must be a positive"):
        optimize_embeddings(4, 8, lr=0)
    with pytest.raises(ValueError, match=r"reference='etf' needs d >= n - 1 = 7; got d=4"):
        optimize_embeddings(8, 4, reference="etf")
    with pytest.raises(ValueError, match=r"labels must have shape \(4,\)"):
        optimize_embeddings(4, 8, labels=[0, 1])
    with pytest.raises(ValueError, match="init arrays must have shape"):
        optimize_embeddings(4, 8, init=(np.ones((4, 3)), np.ones((4, 3))))
    with pytest.raises(ValueError, match="update"):
        optimize_embeddings(4, 8, update="step")
