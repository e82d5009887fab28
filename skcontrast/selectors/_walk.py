"""ProSampler / BatchSampler (Yang et al., KDD 2023): batches collected by random walks
with restart on a proximity graph."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from joblib import Parallel, delayed

from .._validation import check_int, check_real, store_params
from ._base import (
    BatchSelector,
    batch_sizes,
    check_batch_size,
    n_partition_batches,
    partition,
)
from ._graph import candidate_graph, shard_rows, unit_rows

#: A walk that claims no new sample in this many steps jumps to a random unclaimed one.
PATIENCE = 16


def _check_probability(value: Any, name: str) -> float:
    return check_real(value, name, low=0, high=1, high_open=True)


def _shard_walks(Z: np.ndarray, n_candidates: int, n_neighbours: int, batch_size: int,
                 restart: float, seed: int) -> list[np.ndarray]:
    """The walks of one shard (a job of its own): its proximity graph and batches of
    ``batch_size`` and a short last one, as positions in the shard."""
    rng = np.random.default_rng(seed)
    graph = candidate_graph(torch.from_numpy(Z), min(n_candidates, len(Z) - 1),
                            min(n_neighbours, len(Z) - 1), rng)
    return walk_batches(graph, batch_sizes(len(Z), batch_size, False), restart, rng)


def walk_batches(graph: np.ndarray, sizes: np.ndarray, restart: float,
                 rng: np.random.Generator) -> list[np.ndarray]:
    """Collect one batch per walker by random walks with restart, all walks side by side.

    Walker ``w`` starts at a distinct random sample and collects ``sizes[w]`` samples.
    At every step each unfinished walker returns to its start with probability
    ``restart`` or moves to a uniformly chosen neighbour in ``graph``; the sample it lands
    on joins its batch if no walker has claimed it yet (when several land on the same
    unclaimed sample in one step, the lowest-numbered walker gets it). A walker that has
    claimed nothing for ``PATIENCE`` steps (its neighbourhood is used up) restarts from a
    random unclaimed sample. The batches are therefore disjoint and of the given sizes.

    Random numbers are drawn in a fixed order (per step: one uniform and one neighbour
    slot per unfinished walker, in walker order; per jump: the new starts), so a plain
    loop over the walkers reproduces it.
    """
    n, k = graph.shape
    walkers = len(sizes)
    owner = np.full(n, -1, dtype=np.int64)
    members = np.full((walkers, int(sizes.max(initial=0))), -1, dtype=np.int64)
    starts = rng.permutation(n)[:walkers]
    owner[starts] = np.arange(walkers)
    members[:, 0] = starts
    filled = np.ones(walkers, dtype=np.int64)
    current, stall = starts.copy(), np.zeros(walkers, dtype=np.int64)
    while True:
        active = np.flatnonzero(filled < sizes)
        if not len(active):
            break
        back = rng.random(len(active)) < restart
        slot = rng.integers(k, size=len(active))
        nxt = np.where(back, starts[active], graph[current[active], slot])
        current[active] = nxt
        free = owner[nxt] == -1
        landed, first = np.unique(nxt[free], return_index=True)
        winners = active[free][first]
        owner[landed] = winners
        members[winners, filled[winners]] = landed
        filled[winners] += 1
        stall[active] += 1
        stall[winners] = 0
        stuck = active[(stall[active] >= PATIENCE) & (filled[active] < sizes[active])]
        if len(stuck):
            unclaimed = np.flatnonzero(owner == -1)
            stuck = stuck[:len(unclaimed)]
            jump = rng.choice(unclaimed, size=len(stuck), replace=False)
            owner[jump] = stuck
            members[stuck, filled[stuck]] = jump
            filled[stuck] += 1
            starts[stuck] = current[stuck] = jump
            stall[stuck] = 0
    return [members[w, :sizes[w]].copy() for w in range(walkers)]


class RandomWalkBatchSelector(BatchSelector):
    """Batches collected by random walks with restart on a proximity graph.

    ProSampler / BatchSampler (Yang et al., *BatchSampler: Sampling Mini-Batches for
    Contrastive Learning in Vision, Language, and Graphs*, KDD 2023, Sec. 3; ICLR 2023
    submission "ProSampler"). Each epoch:

    1. **Proximity graph** (their Sec. 3.2): every sample draws ``n_candidates`` others at
       random and is joined to the ``n_neighbours`` most similar of them (cosine
       similarity of the current, or a teacher's, embeddings). Drawing candidates at
       random instead of searching all samples keeps near-duplicates, the likely false
       negatives, from crowding a neighbourhood; the graph costs ``O(n m d)``.
    2. **Random walk with restart** (their Sec. 3.3): a walk from a random start moves to
       a random neighbour, or back to the start with probability ``restart``, and its
       batch is the first ``batch_size`` distinct samples it visits. A high ``restart``
       keeps the walk close to its start (harder batches); ``restart=0`` lets it wander
       (closer to random batches).

    The paper draws each batch independently; here the batches of an epoch are an
    equal-size **partition**: all walks run side by side and a sample joins the first
    walk that reaches it, and a walk whose neighbourhood is used up (16 steps without a
    new sample) jumps to a random unclaimed sample. Every sample is in exactly one batch
    per epoch (the last holds the remainder ``n mod batch_size``, a remainder of one
    joining the batch before it, or is left out with ``drop_last=True``).

    Parameters
    ----------
    batch_size : int, default=32
    n_candidates : int, default=1000
        Candidates drawn per sample (the paper's ``M``); all other samples when ``n``
        is smaller.
    n_neighbours : int, default=100
        Neighbours kept per sample (the paper's ``K``).
    restart : float in [0, 1), default=0.2
        Probability of returning to the start at each step (the paper's ``alpha``).
    shard_size : int or None, default=None
        Above this many samples, the graph and the walks are made shard by shard (equal
        shards of neighbouring samples, by recursive balanced bisection), each shard's
        short last batch pooled with the others' at the end of the epoch; ``None``: one
        graph of all samples.
    n_jobs : int or None, default=None
        Shards processed in parallel (joblib; a Dask backend spreads them over a
        cluster). Each shard is seeded from the epoch's draws in shard order, so the
        batches do not depend on ``n_jobs``.
    drop_last : bool, default=False
    random_state : int, numpy Generator or None, default=None

    Examples
    --------
    >>> import numpy as np
    >>> from skcontrast.selectors import RandomWalkBatchSelector
    >>> X = np.random.default_rng(0).normal(size=(100, 2, 8))
    >>> sel = RandomWalkBatchSelector(batch_size=25, n_candidates=50, n_neighbours=10,
    ...                               random_state=0)
    >>> batches = list(sel.split(X))
    >>> [len(b) for b in batches], len(np.unique(np.concatenate(batches)))
    ([25, 25, 25, 25], 100)
    """

    @property
    def needs_embeddings(self) -> bool:
        return True

    def __init__(self, batch_size: int = 32, *, n_candidates: int = 1000,
                 n_neighbours: int = 100, restart: float = 0.2,
                 shard_size: int | None = None, n_jobs: int | None = None,
                 drop_last: bool = False, random_state: Any = None) -> None:
        store_params(self, locals())

    def graph(self, X: Any, random_state: Any = None) -> np.ndarray:
        """The proximity graph of embeddings ``X`` as an ``(n, k)`` neighbour array."""
        from ._base import check_embeddings

        X = check_embeddings(X)
        m, k = self._check_graph(len(X))
        return candidate_graph(unit_rows(X), m, k, np.random.default_rng(random_state))

    def _check_graph(self, n: int) -> tuple[int, int]:
        if n < 2:
            raise ValueError(f"{type(self).__name__} needs at least 2 samples; got n={n}")
        m = check_int(self.n_candidates, "n_candidates", minimum=1)
        k = check_int(self.n_neighbours, "n_neighbours", minimum=1, maximum=m)
        return m, k

    def _select(self, X, y, groups, rng, loss=None):
        n = len(X)
        b = check_batch_size(self.batch_size, n)
        m, k = self._check_graph(n)
        restart = _check_probability(self.restart, "restart")
        shard_size = None if self.shard_size is None else check_int(
            self.shard_size, "shard_size", minimum=b)
        Z = unit_rows(X)
        shards = shard_rows(Z, shard_size, rng, minimum=b, need=f"the batch size {b}")
        if len(shards) == 1:
            return walk_batches(candidate_graph(Z, m, k, rng), batch_sizes(n, b, self.drop_last),
                                restart, rng)
        seeds = rng.integers(2**63, size=len(shards))
        jobs = (delayed(_shard_walks)(Z[torch.from_numpy(rows)].numpy(), m, k, b, restart,
                                      int(seed)) for rows, seed in zip(shards, seeds, strict=True))
        full, rest = [], []
        for rows, batches in zip(shards, Parallel(n_jobs=self.n_jobs)(jobs), strict=True):
            for batch in batches:  # shard positions -> sample indices
                (full if len(batch) == b else rest).append(rows[batch])
        # each shard's short last batch: pooled, shuffled and cut like a partition's end
        tail = partition(rng.permutation(np.concatenate(rest)), b, self.drop_last) \
            if rest else []
        return [full[i] for i in rng.permutation(len(full))] + tail

    def _n_batches(self, n, y):
        return n_partition_batches(n, check_batch_size(self.batch_size, n), self.drop_last)
