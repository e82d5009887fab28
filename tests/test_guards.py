"""Tests of ``skcontrast.selectors._guards``: the label and neighbour guards hold on every
selector, keep compliant batches and refuse what they cannot guard, by name."""

import numpy as np
import pytest
from _helpers import brute_top, clustered_data, random_data
from sklearn.base import clone

from skcontrast.selectors import (
    BcSSelector,
    CommunityBatchSelector,
    OSGDSelector,
    RandomWalkBatchSelector,
    ScBSelector,
    ShuffledBatchSelector,
    SpectralBatchSelector,
    TemperedSelector,
)
from skcontrast.selectors._guards import GuardError

B = 16


DATA = {"random": random_data, "clustered": clustered_data}


def adaptive_selectors():
    return {
        "shuffled": ShuffledBatchSelector(batch_size=B, random_state=0),
        "osgd": OSGDSelector(batch_size=B, k=4, q=2, random_state=0),
        "bcs": BcSSelector(batch_size=B, random_state=0),
        "scb": ScBSelector(batch_size=B, random_state=0),
        "spectral": SpectralBatchSelector(batch_size=B, random_state=0),
        "community": CommunityBatchSelector(batch_size=B, p=2, q=10, random_state=0),
        "walk": RandomWalkBatchSelector(batch_size=B, n_candidates=60, n_neighbours=10,
                                        random_state=0),
    }


@pytest.mark.parametrize("data", DATA)
@pytest.mark.parametrize("name", list(adaptive_selectors()))
def test_label_guard_holds_on_every_selector(name, data):
    X, y = DATA[data]()
    cap = 3
    sel = TemperedSelector(adaptive_selectors()[name], max_same_label=cap, random_state=0)
    plain = clone(adaptive_selectors()[name])
    for _ in range(2):
        base = plain.epoch_batches(X, y)
        batches = sel.epoch_batches(X, y)
        assert sorted(map(len, batches)) == sorted(map(len, base))
        assert np.array_equal(np.sort(np.concatenate(batches)), np.sort(np.concatenate(base)))
        for b in batches:
            assert np.bincount(y[b]).max() <= cap + 1


@pytest.mark.parametrize("data", DATA)
@pytest.mark.parametrize("name", list(adaptive_selectors()))
def test_neighbour_guard_holds_on_every_selector(name, data):
    X, _ = DATA[data]()
    m = 3
    top = brute_top(X, m)
    sel = TemperedSelector(adaptive_selectors()[name], exclude_neighbours=m, random_state=0)
    for _ in range(2):
        batches = sel.epoch_batches(X)
        where = np.full(len(X), -1)
        for i, b in enumerate(batches):
            where[b] = i
        assert all(where[i] < 0 or where[j] != where[i] for i in range(len(X)) for j in top[i])


def test_both_guards_hold_together_and_keep_compliant_batches():
    X, y = clustered_data(384)
    base = SpectralBatchSelector(batch_size=B, random_state=0)
    sel = TemperedSelector(clone(base), max_same_label=4, exclude_neighbours=2,
                           random_state=0)
    batches, plain = sel.epoch_batches(X, y), base.epoch_batches(X, y)
    top = brute_top(X, 2)
    where = np.empty(len(X), int)
    for i, b in enumerate(batches):
        where[b] = i
        assert np.bincount(y[b]).max() <= 5
    assert all(where[j] != where[i] for i in range(len(X)) for j in top[i])
    # only offending samples move: most samples keep their spectral batch
    kept = np.mean([len(np.intersect1d(p, q)) / len(p)
                    for p, q in zip(plain, batches, strict=True)])
    assert kept > 0.3


def test_an_impossible_label_cap_says_why():
    X, _ = random_data(64)
    y = np.zeros(64, int)  # one class of 64, four batches: at most 4 * 2 fit
    sel = TemperedSelector(ShuffledBatchSelector(batch_size=B), max_same_label=1)
    with pytest.raises(GuardError, match="cannot all hold"):
        sel.epoch_batches(X, y)


def test_label_guard_needs_labels():
    X, _ = random_data(64)
    with pytest.raises(ValueError, match="max_same_label=2 needs the labels y"):
        TemperedSelector(ShuffledBatchSelector(batch_size=B), max_same_label=2).epoch_batches(X)


def _selectors():
    from skcontrast import selectors

    return selectors


class _ClaimsToPartition(_selectors().BatchSelector):
    """A custom selector that says its batches are disjoint, and they are not."""

    def __init__(self):
        pass

    def _select(self, X, y, groups, rng):
        return [np.arange(4), np.arange(2, 6)]

    def _n_batches(self, n, y):
        return 2


@pytest.mark.parametrize("make_base", [
    lambda s: s.RandomBatchSelector(4, random_state=0),
    lambda s: s.ExhaustiveBatchSelector(4),
    lambda s: s.BindingSelector(s.ShuffledBatchSelector(4, random_state=0), random_state=0),
    lambda s: s.PredefinedBatchSelector([[0, 1, 2, 3], [2, 3, 4, 5]]),
    lambda s: s.OSGDSelector(4, k=4, q=2, candidates="random", random_state=0),
], ids=["random", "exhaustive", "binding", "overlapping predefined", "osgd random"])
@pytest.mark.parametrize("guard", [{"max_same_label": 1}, {"exclude_neighbours": 1},
                                   {"random_share": 0.5}])
def test_guards_refuse_a_base_that_is_not_a_partition_naming_it(make_base, guard):
    s = _selectors()
    base = make_base(s)
    X = np.random.default_rng(0).normal(size=(12, 2, 3))
    y = np.repeat([0, 1, 2], 4)
    selector = s.TemperedSelector(base, random_state=0, **guard)
    assert not base.partitions and not selector.partitions
    with pytest.raises(ValueError, match=rf"{type(base).__name__}'s batches are not one"):
        list(selector.split(X, y))
    list(s.TemperedSelector(base, refresh_every=2, random_state=0).split(X, y))  # no edits


def test_guards_check_the_batches_of_a_base_that_claims_to_partition():
    s = _selectors()
    selector = s.TemperedSelector(_ClaimsToPartition(), max_same_label=1, random_state=0)
    with pytest.raises(ValueError, match=r"sample 2 is in 2 places"):
        list(selector.split(np.zeros((6, 2)), np.array([0, 0, 1, 1, 2, 2])))


def test_disjoint_predefined_batches_and_osgd_partitions_keep_their_guards():
    s = _selectors()
    y = np.repeat([0, 1], 6)
    X = np.random.default_rng(0).normal(size=(12, 2, 3))
    for base in (s.PredefinedBatchSelector([[0, 1, 2, 6], [3, 4, 5, 7], [8, 9, 10, 11]]),
                 s.OSGDSelector(4, k=3, q=2, random_state=0)):
        batches = list(s.TemperedSelector(base, max_same_label=1, random_state=0).split(X, y))
        assert all(len(set(b.tolist())) == len(b) for b in batches)
        assert max(np.bincount(y[b]).max() for b in batches) <= 2
