"""False-negative guards and random mixing: edits of an epoch's batches that keep its
batch sizes and its coverage.

- :func:`mix_random`: a share of every batch is replaced by samples drawn at random
  from the whole epoch (the hardness dial);
- :func:`guard_batches`: samples are moved until no batch holds more than ``cap + 1``
  samples of one label, and no sample shares its batch with one of its top-``m``
  neighbours (B3's rank window). Only offending samples move, into the places the moved
  samples left, so the selector's batches are kept wherever they already comply.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def mix_random(batches: list[np.ndarray], share: float,
               rng: np.random.Generator) -> list[np.ndarray]:
    """Replace about ``share`` of each batch by samples drawn at random from the epoch.

    From each batch of size ``s`` a random ``floor(share * s + U)`` of its members
    (``U`` uniform on [0, 1), so the expected number is ``share * s``) leave; the samples
    that left are shuffled together and fill the places. Sizes, and the set of samples of
    the epoch, are unchanged; ``share=1`` gives a random partition of the same sizes.
    """
    if share <= 0 or not batches:
        return batches
    out = [b.copy() for b in batches]
    places: list[tuple[int, int]] = []
    for i, b in enumerate(out):
        count = min(len(b), int(np.floor(share * len(b) + rng.random())))
        places.extend((i, j) for j in rng.choice(len(b), size=count, replace=False))
    if not places:
        return out
    pool = np.array([out[i][j] for i, j in places])
    pool = pool[rng.permutation(len(pool))]
    for (i, j), sample in zip(places, pool, strict=True):
        out[i][j] = sample
    return out


def neighbour_pairs(neighbours: np.ndarray, n: int) -> sp.csr_matrix:
    """Symmetric adjacency of "``j`` is among ``i``'s top-m neighbours or ``i`` among ``j``'s"."""
    rows = np.repeat(np.arange(len(neighbours)), neighbours.shape[1])
    graph = sp.coo_matrix((np.ones(len(rows), dtype=bool), (rows, neighbours.ravel())),
                          shape=(n, n)).tocsr()
    graph = (graph + graph.T).tocsr()
    graph.setdiag(False)
    graph.eliminate_zeros()
    return graph


class GuardError(ValueError):
    """The guards cannot all hold for these batches (the message says which and why)."""


def guard_batches(batches: list[np.ndarray], n: int, *, codes: np.ndarray | None = None,
                  cap: int | None = None, conflicts: sp.csr_matrix | None = None,
                  rng: np.random.Generator) -> list[np.ndarray]:
    """Move samples until every batch meets the guards; sizes and coverage are kept.

    Parameters
    ----------
    batches : list of 1-D int arrays
        Disjoint batches (a partition of all or some of the ``n`` samples).
    codes, cap : label codes of the ``n`` samples and the most *other* samples of its own
        label a sample may have in its batch (``None``: no label guard).
    conflicts : symmetric boolean ``(n, n)`` sparse matrix, optional
        Pairs that must not share a batch (``neighbour_pairs``).

    Samples that break a guard leave their batch (for labels, those beyond the first
    ``cap + 1`` of their label in random order; for neighbours, one end of every
    conflicting pair, the one with more conflicts); each then goes, in random order, to
    a free place whose batch it can join, or, when there is none, swaps with a sample
    of an admissible batch that can move to a free place. Raises :class:`GuardError`
    when neither is possible.
    """
    batch_of = np.full(n, -1, dtype=np.int64)
    for i, b in enumerate(batches):
        batch_of[b] = i
    placed = batch_of >= 0
    evicted = np.zeros(n, dtype=bool)
    if codes is not None and cap is not None:
        idx = np.flatnonzero(placed)
        idx = idx[rng.permutation(len(idx))]
        key = batch_of[idx] * (int(codes.max()) + 1) + codes[idx]
        order = np.argsort(key, kind="stable")
        sorted_key = key[order]
        first = np.r_[0, np.flatnonzero(np.diff(sorted_key)) + 1]
        rank = np.arange(len(order)) - np.repeat(first, np.diff(np.r_[first, len(order)]))
        evicted[idx[order[rank > cap]]] = True
    if conflicts is not None:
        coo = sp.triu(conflicts, k=1).tocoo()
        while True:
            keep = (~evicted[coo.row]) & (~evicted[coo.col]) & \
                   (batch_of[coo.row] == batch_of[coo.col]) & placed[coo.row]
            if not keep.any():
                break
            a, b = coo.row[keep], coo.col[keep]
            degree = np.bincount(np.r_[a, b], minlength=n)
            tie = rng.random(len(a)) < 0.5
            out = np.where((degree[a] > degree[b]) | ((degree[a] == degree[b]) & tie), a, b)
            evicted[out] = True
    if not evicted.any():
        return batches
    return _Placement(batches, batch_of, evicted, codes, cap, conflicts, rng).run()


class _Placement:
    """Puts evicted samples back, one at a time, where the guards allow."""

    def __init__(self, batches, batch_of, evicted, codes, cap, conflicts, rng):
        self.rng = rng
        self.codes, self.cap, self.conflicts = codes, cap, conflicts
        self.members = [list(b[~evicted[b]]) for b in batches]
        self.sizes = [len(b) for b in batches]
        self.batch_of = batch_of.copy()
        self.batch_of[evicted] = -1
        self.waiting = np.flatnonzero(evicted)[rng.permutation(int(evicted.sum()))]
        self.counts: dict[tuple[int, int], int] = {}
        if codes is not None and cap is not None:
            for i, members in enumerate(self.members):
                for c in codes[members].tolist():
                    self.counts[i, c] = self.counts.get((i, c), 0) + 1
        self.open = [i for i in range(len(batches)) if len(self.members[i]) < self.sizes[i]]

    def allowed(self, sample: int, batch: int) -> bool:
        if self.cap is not None and self.codes is not None and \
                self.counts.get((batch, int(self.codes[sample])), 0) > self.cap:
            return False
        if self.conflicts is not None:
            row = self.conflicts.indices[self.conflicts.indptr[sample]:
                                         self.conflicts.indptr[sample + 1]]
            if (self.batch_of[row] == batch).any():
                return False
        return True

    def put(self, sample: int, batch: int) -> None:
        self.members[batch].append(sample)
        self.batch_of[sample] = batch
        if self.cap is not None and self.codes is not None:
            key = (batch, int(self.codes[sample]))
            self.counts[key] = self.counts.get(key, 0) + 1

    def take(self, sample: int) -> None:
        batch = int(self.batch_of[sample])
        self.members[batch].remove(sample)
        self.batch_of[sample] = -1
        if self.cap is not None and self.codes is not None:
            self.counts[batch, int(self.codes[sample])] -= 1

    def run(self) -> list[np.ndarray]:
        for sample in self.waiting.tolist():
            self.open = [i for i in self.open if len(self.members[i]) < self.sizes[i]]
            target = self._free_place(sample)
            if target is None:
                target = self._swap(sample)
            if target is None:
                raise GuardError(
                    f"the guards cannot all hold: sample {sample} has no batch it may join "
                    f"({len(self.sizes)} batches; a label cap or a neighbour count too "
                    "large for this many batches). Lower the guard, or use smaller batches")
            self.put(sample, target)
        return [np.asarray(m, dtype=np.int64) for m in self.members]

    def _free_place(self, sample: int) -> int | None:
        for i in self.rng.permutation(len(self.open)).tolist():
            if self.allowed(sample, self.open[i]):
                return self.open[i]
        return None

    def _swap(self, sample: int) -> int | None:
        """A full batch ``b`` the sample may join, and a member of ``b`` that may move to
        a free place: move that member, return ``b``."""
        for b in self.rng.permutation(len(self.sizes)).tolist():
            if len(self.members[b]) < self.sizes[b]:
                continue
            for other in list(self.members[b]):
                self.take(other)
                if self.allowed(sample, b):
                    place = next((h for h in self.open if h != b and self.allowed(other, h)),
                                 None)
                    if place is not None:
                        self.put(other, place)
                        return b
                self.put(other, b)
        return None
