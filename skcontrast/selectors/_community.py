"""B3 (Thirukovalluru et al., NeurIPS 2025): batches from communities of a rank-window
neighbour graph."""

from __future__ import annotations

import random
import threading
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from joblib import Parallel, delayed

from .._validation import check_choice, check_int, check_positive, store_params
from ._base import BatchSelector, check_batch_size, check_embeddings, n_partition_batches, partition
from ._graph import SEARCHES, rank_window, shard_rows, unit_rows

#: igraph draws from one process-wide generator; seeding it is made atomic.
_IGRAPH_RNG = threading.Lock()


def _igraph() -> Any:
    try:
        import igraph
    except ImportError as exc:
        raise ImportError(
            "CommunityBatchSelector finds communities with igraph, an optional dependency: "
            "pip install 'skcontrast[graph]' (or pip install igraph)") from exc
    return igraph


def window_graph(neighbours: np.ndarray) -> sp.csr_matrix:
    """The undirected graph joining each sample to the samples in its rank window.

    ``neighbours`` is :func:`~skcontrast.selectors._graph.rank_window`'s ``(n, w)``
    array; ``i`` and ``j`` are adjacent when either is in the other's window (unit
    weights, no self-loops).
    """
    n, w = neighbours.shape
    rows = np.repeat(np.arange(n), w)
    cols = neighbours.ravel()
    graph = sp.coo_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)), shape=(n, n))
    graph = (graph + graph.T).tocsr()
    graph.data[:] = 1.0
    return graph


def communities(graph: sp.csr_matrix, *, resolution: float, seed: int) -> np.ndarray:
    """Leiden communities of ``graph`` maximising modularity at ``resolution`` (igraph,
    two Leiden iterations, its default: iterating to convergence can take hours on a
    graph without clear communities), reproducible from ``seed``; returns each vertex's
    community number."""
    igraph = _igraph()
    upper = sp.triu(graph, k=1).tocoo()
    edges = np.column_stack([upper.row, upper.col])
    del upper
    g = igraph.Graph(n=graph.shape[0], edges=edges)
    del edges
    with _IGRAPH_RNG:
        igraph.set_random_number_generator(random.Random(seed))
        try:
            found = g.community_leiden(objective_function="modularity",
                                       resolution=resolution, n_iterations=2)
        finally:
            igraph.set_random_number_generator(random)
    return np.asarray(found.membership, dtype=np.int64)


def _shard_communities(Z: np.ndarray, p: int, q: int, search: str, probes: int,
                       resolution: float, seed: int) -> np.ndarray:
    """Steps 1-3 on the unit rows of one shard (a job of its own: only this shard's
    window, graph and communities are in memory)."""
    rng = np.random.default_rng(seed)
    window = rank_window(torch.from_numpy(Z), p, q, search=search, probes=probes,
                         random_state=rng)
    graph = window_graph(window)
    del window, Z
    return communities(graph, resolution=resolution, seed=int(rng.integers(2**31)))


def community_order(labels: np.ndarray, batch_size: int, rng: np.random.Generator
                    ) -> np.ndarray:
    """An ordering of the samples whose consecutive runs of ``batch_size`` are pieces of
    one community: each community (in random order) is shuffled and cut into full
    batches; what is left of every community is pooled, shuffled and follows."""
    order = np.argsort(labels, kind="stable")
    bounds = np.searchsorted(labels[order], np.arange(labels.max() + 2))
    full: list[np.ndarray] = []
    rest: list[np.ndarray] = []
    for c in rng.permutation(labels.max() + 1):
        members = rng.permutation(order[bounds[c]:bounds[c + 1]])
        cut = len(members) - len(members) % batch_size
        full.extend(members[i:i + batch_size] for i in range(0, cut, batch_size))
        rest.append(members[cut:])
    full = [full[i] for i in rng.permutation(len(full))]
    leftovers = rng.permutation(np.concatenate(rest)) if rest else np.empty(0, np.int64)
    return np.concatenate([*full, leftovers]).astype(np.int64)


class CommunityBatchSelector(BatchSelector):
    """Batches cut from communities of a rank-window neighbour graph (B3).

    *Breaking the Batch Barrier* (Thirukovalluru et al., NeurIPS 2025, Sec. 3):

    1. **Rank window.** Each sample's neighbours are ranked by cosine similarity of the
       embeddings (the current network's, or a fixed teacher's given to
       :class:`TemperedSelector`); the top ``p`` are skipped as likely positives (false
       negatives) and ranks ``p + 1`` to ``q`` kept.
    2. **Graph.** Each sample is joined to the samples in its window (undirected, unit
       weights).
    3. **Communities.** Leiden community detection maximising modularity (igraph;
       ``resolution`` above 1 gives smaller communities). Members of a community are
       strong negatives for one another.
    4. **Batches.** Every community is shuffled and cut into batches of ``batch_size``;
       the leftovers of all communities are pooled and cut into batches at random.

    An epoch is an equal-size partition: every sample is in exactly one batch (the last
    holds ``n mod batch_size``, or is left out with ``drop_last=True``). The neighbour
    search is exact up to 50,000 samples and by cells above (``search``), in row blocks
    either way. Above ``shard_size`` samples the graph is built and split into
    communities **shard by shard** (equal shards of neighbouring samples, by recursive
    balanced bisection), so an epoch's memory is that of one shard: ``n = 1,000,000`` at
    ``d = 128`` in about 1.3 GB (6 GB as one graph). Shards run through joblib
    (``n_jobs``), so a Dask joblib backend spreads them over a cluster; each is seeded
    from the epoch's draws in shard order, so the batches do not depend on ``n_jobs`` or
    the backend.

    Parameters
    ----------
    batch_size : int, default=32
    p : int, default=10
        Top-ranked neighbours left out of the window (0 keeps the nearest ones).
    q : int, default=40
        Last rank in the window; ``q > p``.
    resolution : float, default=1.0
        Modularity resolution of the community detection.
    search : {'auto', 'exact', 'cells'}, default='auto'
        Neighbour search: every pair, or the samples of the nearest cells of a spherical
        k-means (``probes`` of about ``sqrt(n)`` cells); 'auto' is exact up to 50,000.
    probes : int, default=8
    shard_size : int or None, default=125_000
        Most samples per shard (``None``: the whole data set as one graph).
    n_jobs : int or None, default=None
        Shards processed in parallel (joblib).
    drop_last : bool, default=False
    random_state : int, numpy Generator or None, default=None

    Notes
    -----
    Needs igraph (``pip install 'skcontrast[graph]'``). The defaults for ``p`` and ``q``
    are ours, for batches of about 32; the paper tunes them per data set.

    Examples
    --------
    >>> import numpy as np
    >>> from skcontrast.selectors import CommunityBatchSelector
    >>> X = np.random.default_rng(0).normal(size=(120, 2, 8))
    >>> sel = CommunityBatchSelector(batch_size=30, p=2, q=8, random_state=0)
    >>> batches = list(sel.split(X))
    >>> [len(b) for b in batches], len(np.unique(np.concatenate(batches)))
    ([30, 30, 30, 30], 120)
    """

    @property
    def needs_embeddings(self) -> bool:
        return True

    def __init__(self, batch_size: int = 32, *, p: int = 10, q: int = 40,
                 resolution: float = 1.0, search: str = "auto", probes: int = 8,
                 shard_size: int | None = 125_000, n_jobs: int | None = None,
                 drop_last: bool = False, random_state: Any = None) -> None:
        store_params(self, locals())

    def _check_window(self, n: int) -> tuple[int, int]:
        p = check_int(self.p, "p", minimum=0)
        q = check_int(self.q, "q", minimum=p + 1)
        if q > n - 1:
            raise ValueError(f"q={q} is a rank beyond the n - 1 = {n - 1} other samples; "
                             "choose q < n")
        check_choice(self.search, "search", SEARCHES)
        check_positive(self.resolution, "resolution")
        return p, q

    def neighbours(self, X: Any, random_state: Any = None) -> np.ndarray:
        """Each sample's rank window ``p + 1 .. q`` on embeddings ``X``, best first."""
        X = check_embeddings(X)
        p, q = self._check_window(len(X))
        return rank_window(unit_rows(X), p, q, search=self.search, probes=self.probes,
                           random_state=random_state)

    def communities(self, X: Any, random_state: Any = None) -> np.ndarray:
        """The community of every sample of ``X`` (the selector's steps 1-3), shard by
        shard above ``shard_size`` samples (communities numbered across shards)."""
        rng = np.random.default_rng(random_state)
        X = check_embeddings(X)
        p, q = self._check_window(len(X))
        shard_size = None if self.shard_size is None else check_int(
            self.shard_size, "shard_size", minimum=q + 1)
        Z = unit_rows(X)
        shards = shard_rows(Z, shard_size, rng, minimum=q + 1,
                            need=f"the rank window (p, q) = ({p}, {q})")
        seeds = rng.integers(2**63, size=len(shards))
        jobs = (delayed(_shard_communities)(Z[torch.from_numpy(rows)].numpy(), p, q,
                                            self.search, self.probes,
                                            float(self.resolution), int(seed))
                for rows, seed in zip(shards, seeds, strict=True))
        labels = np.empty(len(Z), dtype=np.int64)
        offset = 0
        for rows, found in zip(shards, Parallel(n_jobs=self.n_jobs)(jobs), strict=True):
            labels[rows] = found + offset
            offset += int(found.max()) + 1
        return labels

    def _select(self, X, y, groups, rng, loss=None):
        b = check_batch_size(self.batch_size, len(X))
        labels = self.communities(X, random_state=rng)
        return partition(community_order(labels, b, rng), b, self.drop_last)

    def _n_batches(self, n, y):
        return n_partition_batches(n, check_batch_size(self.batch_size, n), self.drop_last)
