"""Exact equal-size assignment of points to cluster centres (the last step of seed 002 Alg. 3).

Seed 002 Alg. 3 assigns each of ``m`` points to one of ``k`` centres so that every
centre receives exactly its capacity, at minimum total distance. The published code
solves it as a dense Hungarian problem on an ``m x m`` matrix (``B`` copies of each
centre): O(m^3) time and O(m^2) memory, though the matrix has only ``k`` distinct
columns.

Here it is solved as the min-cost flow it is (points -> centres -> sink, with centre
capacities), by successive shortest paths on the *compressed* residual graph whose nodes
are the ``k`` centres. Moving one point from centre ``a`` to ``b`` costs
``C[p, b] - C[p, a]``; the cheapest such move, ``hop[a, b]``, is the weight of edge
``a -> b``. Any assignment of the form ``argmin_j (C[p, j] - price[j])`` is optimal if
capacities are ignored (a pseudo-flow whose residual graph has no negative cycle, since
the prices telescope around any cycle). A few dual (price) ascent steps first bring the
centre sizes close to the capacities, a cheap warm start; then one unit of excess at a
time moves along a shortest path from an over-full centre to an under-full one
(Bellman-Ford on ``k`` nodes) until every size is exact. Shortest augmenting paths from
an optimal pseudo-flow keep it optimal (Ahuja, Magnanti & Orlin, *Network Flows*,
Sec. 9.7), so the result is an exact optimum of the transportation problem. Each
augmentation costs O(k^2) for the paths plus O(B k) to refresh the hop rows of the
centres it touched; the number of augmentations is the total excess left by the warm
start (at most ``m``, typically a handful). For ``m = 1280, k = 40`` this takes
milliseconds where the dense Hungarian takes seconds.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch


def balanced_assignment(cost: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Minimum-cost assignment of rows to columns with exact column sizes.

    Parameters
    ----------
    cost : ndarray of shape (m, k)
        ``cost[p, j]``: cost of giving point ``p`` to centre ``j``.
    capacity : int ndarray of shape (k,)
        How many points each centre must receive; must sum to ``m``.

    Returns
    -------
    ndarray of shape (m,)
        The centre of every point; ``bincount(labels) == capacity`` and the total cost
        is minimal.
    """
    cost = np.asarray(cost, dtype=np.float64)
    capacity = np.asarray(capacity, dtype=np.int64)
    m, k = cost.shape
    if capacity.shape != (k,) or capacity.sum() != m or (capacity < 0).any():
        raise ValueError(f"capacity must be {k} non-negative integers summing to {m}; "
                         f"got {capacity.tolist()}")
    labels = (cost - _warm_start_prices(cost, capacity)).argmin(1)
    excess = np.bincount(labels, minlength=k) - capacity
    hop = np.empty((k, k))
    mover = np.zeros((k, k), dtype=np.int64)
    for a in range(k):
        _refresh(a, cost, labels, hop, mover)
    tolerance = 1e-12 * max(1.0, float(np.abs(cost).max()))
    columns = np.arange(k)
    while (excess > 0).any():
        dist = np.where(excess > 0, 0.0, np.inf)
        pred = np.full(k, -1)
        for _ in range(k):
            via = dist[:, None] + hop
            best_from = via.argmin(0)
            best = via[best_from, columns]
            better = best < dist - tolerance
            if not better.any():
                break
            dist[better] = best[better]
            pred[better] = best_from[better]
        target = int(np.argmin(np.where(excess < 0, dist, np.inf)))
        path = [target]
        while pred[path[-1]] != -1 and len(path) <= k:
            path.append(int(pred[path[-1]]))
        path.reverse()
        moves = [(mover[a, b], b) for a, b in itertools.pairwise(path)]
        for point, destination in moves:
            labels[point] = destination
        excess[path[0]] -= 1
        excess[path[-1]] += 1
        for a in path:
            _refresh(a, cost, labels, hop, mover)
    return labels


def _warm_start_prices(cost: np.ndarray, capacity: np.ndarray, max_iter: int = 40,
                       damping: float = 0.5, good_enough: int = 8) -> np.ndarray:
    """Prices from damped Jacobi coordinate ascent on the transportation dual.

    Given the other prices, the best price of centre ``j`` lets exactly ``capacity[j]``
    points prefer ``j``: point ``p`` prefers ``j`` when ``C[p, j] - price[j]`` beats its
    best alternative, so that price lies between the ``capacity[j]``-th and the next
    smallest of ``C[p, j] - best_alternative[p]``. All centres move part of the way
    towards that target at once; the prices that left the least excess are kept. Only a
    warm start: the result's optimality never depends on it.
    """
    m, k = cost.shape
    prices = np.zeros(k)
    if k < 2:
        return prices
    rows = np.arange(m)
    cost_by_centre = torch.from_numpy(np.ascontiguousarray(cost.T))
    best_excess, best_prices = np.inf, prices
    for _ in range(max_iter):
        reduced = cost - prices
        nearest = reduced.argmin(1)
        excess = np.maximum(np.bincount(nearest, minlength=k) - capacity, 0).sum()
        if excess < best_excess:
            best_excess, best_prices = excess, prices
        if excess <= good_enough:
            break
        first = reduced[rows, nearest]
        reduced[rows, nearest] = np.inf
        alternative = np.broadcast_to(first, (k, m)).copy()
        alternative[nearest, rows] = reduced.min(1)
        thresholds = cost_by_centre - torch.from_numpy(alternative)
        prices = prices + damping * (_kth_midpoints(thresholds, capacity) - prices)
    return best_prices


def _kth_midpoints(values: torch.Tensor, counts: np.ndarray) -> np.ndarray:
    """Per row ``j``: a value with exactly ``counts[j]`` entries of the row below it."""
    m = values.shape[1]
    out = np.empty(values.shape[0])
    for c in np.unique(counts):
        rows = np.flatnonzero(counts == c)
        block = values[torch.from_numpy(rows)]
        if c == 0:
            out[rows] = block.min(1).values.numpy() - 1.0
        elif c >= m:
            out[rows] = block.max(1).values.numpy() + 1.0
        else:
            smallest = torch.topk(block, int(c) + 1, dim=1, largest=False).values
            out[rows] = (0.5 * (smallest[:, -2] + smallest[:, -1])).numpy()
    return out


def _refresh(a: int, cost: np.ndarray, labels: np.ndarray, hop: np.ndarray,
             mover: np.ndarray) -> None:
    """Recompute the cheapest move out of centre ``a`` towards every other centre."""
    members = np.flatnonzero(labels == a)
    if members.size == 0:
        hop[a] = np.inf
        return
    delta = cost[members] - cost[members, a][:, None]
    best = delta.argmin(0)
    hop[a] = delta[best, np.arange(cost.shape[1])]
    mover[a] = members[best]
    hop[a, a] = np.inf
