"""Class-balanced batches: P classes with K samples each (label losses want them)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import check_choice, check_int, describe, encode_labels, store_params
from ._base import (
    BatchSelector,
    batch_sizes,
    check_batch_size,
    join_lone,
    n_partition_batches,
    partition,
)
from ._graph import unit_rows

#: What a class with fewer than ``samples_per_class`` samples does in an epoch.
SMALL_CLASSES = ("pool", "repeat")


class ClassBalancedSelector(BatchSelector):
    """Batches of ``P = batch_size / K`` classes with ``K = samples_per_class`` samples each.

    What pytorch-metric-learning's ``MPerClassSampler`` and sentence-transformers'
    ``GroupByLabelBatchSampler`` give a label loss (SupCon, a margin loss): every batch
    holds several positives of each of a few classes. Here an epoch is still a
    **partition** of the samples, so no sample is left out or seen twice in an epoch
    (unlike ``MPerClassSampler``, which draws with replacement for a fixed number of
    samples), and the selector can be tempered (:class:`TemperedSelector`) and used in
    :class:`SelectorSampler` like any other.

    An epoch: each class's samples are shuffled and cut into groups of ``K``; batches
    take ``P`` groups of ``P`` different classes, the classes with the most groups left
    first (ties in random order), as long as ``P`` classes have a group left. What is
    left (each class's last ``n_c mod K`` samples, and the groups of the last classes
    standing) is pooled, shuffled and cut into batches of ``batch_size`` at the end of
    the epoch (the last one shorter, or left out with ``drop_last=True``): those batches
    are not balanced, and ``n_balanced_`` says how many are.

    Classes with fewer than ``K`` samples: ``small_classes='pool'`` (default) puts their
    samples in the pooled batches at the end; ``'repeat'`` fills their group to ``K`` by
    drawing their samples again, as ``MPerClassSampler`` does (a sample then meets itself
    as a positive; say so with this choice only).

    With ``hard_classes=True`` the ``P`` classes of a batch are the class with the most
    groups left (ties at random) and the ``P - 1`` classes whose centroids (in the
    embeddings the selector is given, e.g. the network's current ones inside an
    estimator) are nearest to its own, among those with groups left: batches of
    confusable classes. The number of batches of an epoch is that of a partition either
    way (``ceil(n / batch_size)``); fewer of them may be balanced.

    Parameters
    ----------
    batch_size : int, default=32
        ``P * K``: a multiple of ``samples_per_class``.
    samples_per_class : int, default=4
        ``K``, at least 2 (a sample needs a positive in its batch).
    small_classes : {'pool', 'repeat'}, default='pool'
    hard_classes : bool, default=False
    drop_last : bool, default=False
        Leave out the pooled batch shorter than ``batch_size``.
    random_state : int, numpy Generator or None, default=None

    Attributes
    ----------
    n_balanced_ : int
        Balanced batches of the last epoch (they come first).

    Examples
    --------
    >>> import numpy as np
    >>> from skcontrast.selectors import ClassBalancedSelector
    >>> y = np.repeat(np.arange(6), 8)
    >>> sel = ClassBalancedSelector(batch_size=8, samples_per_class=4, random_state=0)
    >>> batches = list(sel.split(np.zeros((48, 3)), y))
    >>> [sorted(np.bincount(y[b]).tolist(), reverse=True)[:2] for b in batches[:3]]
    [[4, 4], [4, 4], [4, 4]]
    """

    def __init__(self, batch_size: int = 32, samples_per_class: int = 4, *,
                 small_classes: str = "pool", hard_classes: bool = False,
                 drop_last: bool = False, random_state: Any = None) -> None:
        store_params(self, locals())

    @property
    def needs_embeddings(self) -> bool:
        """Only hard classes look at the embeddings."""
        return bool(self.hard_classes)

    @property
    def partitions(self) -> bool:
        """Disjoint batches, unless small classes repeat samples."""
        return self.small_classes != "repeat"

    def _check(self, n: int, y: Any) -> tuple[int, int, np.ndarray]:
        if y is None:
            raise ValueError("ClassBalancedSelector needs the labels y (fit(X, y), "
                             "split(X, y), or SelectorSampler(labels=...))")
        b = check_batch_size(self.batch_size, n)
        k = check_int(self.samples_per_class, "samples_per_class", minimum=2)
        if b % k:
            raise ValueError(f"batch_size={b} must be a multiple of samples_per_class={k} "
                             "(P classes of K samples each)")
        check_choice(self.small_classes, "small_classes", SMALL_CLASSES)
        if not isinstance(self.hard_classes, bool):
            raise ValueError(f"hard_classes must be True or False; got "
                             f"{describe(self.hard_classes)}")
        _, codes = encode_labels(y)
        if len(codes) != n:
            raise ValueError(f"y has {len(codes)} labels but X has {n} samples")
        return b, k, codes

    def _select(self, X, y, groups, rng, loss=None):
        b, k, codes = self._check(len(X), y)
        groups_of, pooled = self._groups(codes, k, rng)
        centroids = _centroids(unit_rows(X), codes) if self.hard_classes else None
        p = b // k
        balanced = []
        left = np.array([len(g) for g in groups_of])
        while np.count_nonzero(left) >= p:
            chosen = _pick_classes(left, p, centroids, rng)
            balanced.append(np.concatenate([groups_of[c][len(groups_of[c]) - left[c]]
                                            for c in chosen]))
            left[chosen] -= 1
        rest = [g for c, gs in enumerate(groups_of) for g in gs[len(gs) - left[c]:]]
        pool = np.concatenate([*pooled, *rest]) if pooled or rest else np.empty(0, np.int64)
        order = rng.permutation(len(balanced))
        pooled_batches = partition(rng.permutation(pool), b, self.drop_last)
        batches = join_lone([balanced[i].astype(np.int64) for i in order] + pooled_batches,
                            self.drop_last)
        # a lone pooled sample that joined the last balanced batch leaves it P x K + 1
        lone_joined = len(pooled_batches) == 1 and len(batches) == len(balanced)
        self.n_balanced_ = len(balanced) - (1 if lone_joined else 0)
        return batches

    def _groups(self, codes: np.ndarray, k: int, rng: np.random.Generator
                ) -> tuple[list[list[np.ndarray]], list[np.ndarray]]:
        """Each class's shuffled samples in groups of ``k``, and what goes to the pool."""
        groups_of, pooled = [], []
        for c in range(int(codes.max()) + 1):
            members = rng.permutation(np.flatnonzero(codes == c))
            if len(members) < k and self.small_classes == "repeat" and len(members):
                members = np.concatenate([members, rng.choice(members, k - len(members))])
            full = len(members) - len(members) % k
            groups_of.append([members[i:i + k] for i in range(0, full, k)])
            pooled.append(members[full:])
        return groups_of, pooled

    def largest_batch_size(self, n: int, y: Any = None) -> int | None:
        """``batch_size``, plus one where a lone pooled sample joins a batch: the
        partition rule over the epoch's samples, which the samples that
        ``small_classes='repeat'`` draws again add to (only the labels ``y`` tell how
        many; without them, ``batch_size + 1`` bounds every epoch)."""
        if y is None:
            b = check_batch_size(self.batch_size, n)
            if self.small_classes == "repeat":
                return b if self.drop_last else b + 1
            return int(batch_sizes(n, b, self.drop_last).max())
        b, _, codes = self._check(n, y)
        return int(batch_sizes(self._epoch_samples(codes), b, self.drop_last).max())

    def _epoch_samples(self, codes: np.ndarray) -> int:
        """The samples of an epoch: all of them, and with ``small_classes='repeat'`` the
        draws that fill each class under ``samples_per_class`` up to it."""
        if self.small_classes != "repeat":
            return len(codes)
        counts = np.bincount(codes)
        k = check_int(self.samples_per_class, "samples_per_class", minimum=2)
        return len(codes) + int(np.clip(k - counts, 0, None)[counts > 0].sum())

    def _n_batches(self, n, y):
        if y is None:
            # pooled leftovers make every epoch a partition of the n samples; only
            # repeated samples of small classes, which the labels tell, add batches
            if self.small_classes == "repeat":
                raise ValueError("ClassBalancedSelector(small_classes='repeat') needs the "
                                 "labels y to count its batches")
            return n_partition_batches(n, check_batch_size(self.batch_size, n),
                                       self.drop_last)
        b, _, codes = self._check(n, y)
        # balanced batches hold b samples each, so the pooled ones make up the rest
        return n_partition_batches(self._epoch_samples(codes), b, self.drop_last)


def _centroids(Z: Any, codes: np.ndarray) -> np.ndarray:
    """Unit centroid of each class of the unit rows ``Z``."""
    z = np.asarray(Z)
    sums = np.zeros((int(codes.max()) + 1, z.shape[1]))
    np.add.at(sums, codes, z)
    return sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)


def _pick_classes(left: np.ndarray, p: int, centroids: np.ndarray | None,
                  rng: np.random.Generator) -> np.ndarray:
    """``p`` classes with groups left: the ones with the most (ties at random), or, with
    centroids, the most-stocked class and its nearest classes among those left."""
    available = np.flatnonzero(left)
    tie_break = rng.random(len(available))
    ranked = available[np.lexsort((tie_break, -left[available]))]
    if centroids is None:
        return ranked[:p]
    first = ranked[0]
    others = ranked[1:]
    nearest = others[np.argsort(-(centroids[others] @ centroids[first]), kind="stable")]
    return np.concatenate([[first], nearest[:p - 1]])
