"""Neighbour graphs over embeddings, shared by the graph selectors and the guards.

- :func:`rank_window`: each sample's neighbours ranked ``start + 1 .. stop`` by cosine
  similarity (B3's rank window; ``start=0`` gives the plain top-``stop``), exact in
  row blocks, or for large ``n`` searched among the samples of nearby cells
  (an inverted-file search: spherical k-means cells, the ``probes`` cells nearest to a
  sample's own cell);
- :func:`candidate_graph`: ProSampler's proximity graph, each sample joined to the
  ``k`` most similar of ``m`` candidates drawn at random.

Everything runs in row blocks of bounded size, so ``n = 1,000,000`` never holds an
``n x n`` matrix.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from .._validation import check_choice, check_int

#: Similarities held at once (floats); bounds the memory of every search.
BLOCK_ELEMENTS = 1 << 24
#: Above this many samples ``search='auto'`` searches by cells instead of exactly.
EXACT_LIMIT = 50_000
SEARCHES = ("auto", "exact", "cells")


def unit_rows(X: np.ndarray) -> torch.Tensor:
    """The first view of checked embeddings, L2-normalised, as float32 (zero rows stay 0),
    written block by block into one array (no full-size intermediate copy)."""
    u = X[:, 0] if X.ndim == 3 else X
    out = torch.empty(u.shape, dtype=torch.float32)
    step = _rows_per_block(u.shape[1])
    for s in range(0, len(u), step):
        block = torch.as_tensor(np.ascontiguousarray(u[s:s + step]), dtype=torch.float32)
        out[s:s + step] = torch.nn.functional.normalize(block, dim=1)
    return out


def _rows_per_block(width: int) -> int:
    return max(1, BLOCK_ELEMENTS // max(1, width))


def rank_window(Z: torch.Tensor, start: int, stop: int, *, search: str = "auto",
                probes: int = 8, random_state: Any = None) -> np.ndarray:
    """Indices of each row's neighbours of rank ``start + 1`` to ``stop`` (best first).

    Ranks are by cosine similarity of the unit rows ``Z`` (``unit_rows``), the sample
    itself excluded. ``search='exact'`` compares every pair, a block of rows at a time;
    ``'cells'`` compares each sample with those in the ``probes`` cells nearest its own
    (approximate; about ``probes * sqrt(n)`` candidates per sample); ``'auto'`` is exact
    up to 50,000 samples.

    Returns
    -------
    ndarray of shape (n, stop - start), int64
    """
    n = len(Z)
    start = check_int(start, "start", minimum=0)
    stop = check_int(stop, "stop", minimum=start + 1)
    if stop > n - 1:
        raise ValueError(f"a rank window up to rank {stop} needs at least {stop + 1} "
                         f"samples; got n={n}")
    check_choice(search, "search", SEARCHES)
    if search == "exact" or (search == "auto" and n <= EXACT_LIMIT):
        return _exact_window(Z, start, stop)
    return _cell_window(Z, start, stop, probes=check_int(probes, "probes", minimum=1),
                        rng=np.random.default_rng(random_state))


def _exact_window(Z: torch.Tensor, start: int, stop: int) -> np.ndarray:
    n = len(Z)
    out = np.empty((n, stop - start), dtype=np.int64)
    step = _rows_per_block(n)
    for s in range(0, n, step):
        e = min(n, s + step)
        sims = Z[s:e] @ Z.T
        sims[torch.arange(e - s), torch.arange(s, e)] = -math.inf
        top = torch.topk(sims, stop, dim=1).indices
        out[s:e] = top[:, start:].numpy()
    return out


def spherical_cells(Z: torch.Tensor, n_cells: int, rng: np.random.Generator, *,
                    iterations: int = 10) -> tuple[torch.Tensor, np.ndarray]:
    """Spherical k-means on a sample of the rows; returns unit centres and every row's cell."""
    n = len(Z)
    sample = Z[torch.from_numpy(rng.choice(n, size=min(n, 40 * n_cells), replace=False))]
    centres = sample[torch.from_numpy(rng.choice(len(sample), size=n_cells, replace=False))]
    for _ in range(iterations):
        assign = (sample @ centres.T).argmax(1)
        sums = torch.zeros_like(centres).index_add_(0, assign, sample)
        empty = torch.linalg.vector_norm(sums, dim=1) == 0
        if empty.any():  # re-seed empty cells at random sample rows
            pick = rng.choice(len(sample), size=int(empty.sum()), replace=False)
            sums[empty] = sample[torch.from_numpy(pick)]
        centres = torch.nn.functional.normalize(sums, dim=1)
    cells = np.empty(n, dtype=np.int64)
    step = _rows_per_block(n_cells)
    for s in range(0, n, step):
        cells[s:s + step] = (Z[s:s + step] @ centres.T).argmax(1).numpy()
    return centres, cells


def _cell_window(Z: torch.Tensor, start: int, stop: int, *, probes: int,
                 rng: np.random.Generator) -> np.ndarray:
    n = len(Z)
    n_cells = max(1, round(math.sqrt(n)))
    centres, cells = spherical_cells(Z, n_cells, rng)
    order = np.argsort(cells, kind="stable")
    bounds = np.searchsorted(cells[order], np.arange(n_cells + 1))
    members = [order[bounds[c]:bounds[c + 1]] for c in range(n_cells)]
    nearest = torch.argsort(centres @ centres.T, dim=1, descending=True).numpy()
    out = np.empty((n, stop - start), dtype=np.int64)
    for c in range(n_cells):
        rows = members[c]
        if not len(rows):
            continue
        chosen, size, j = [], 0, 0
        while j < n_cells and (j < probes or size <= stop):  # enough candidates for stop
            chosen.append(members[nearest[c, j]])
            size += len(members[nearest[c, j]])
            j += 1
        cand = np.concatenate(chosen)
        cand_t = torch.from_numpy(cand)
        z_cand = Z[cand_t]
        step = _rows_per_block(len(cand))
        for s in range(0, len(rows), step):
            part = rows[s:s + step]
            sims = Z[torch.from_numpy(part)] @ z_cand.T
            sims[torch.from_numpy(part)[:, None] == cand_t[None, :]] = -math.inf
            top = torch.topk(sims, stop, dim=1).indices[:, start:]
            out[part] = cand[top.numpy()]
    return out


def _balanced_axis(sample: torch.Tensor, rng: np.random.Generator,
                   iterations: int = 10) -> torch.Tensor:
    """The axis of a balanced spherical 2-means of ``sample``: from a 2-means, each step
    splits the sample at the median of its projection and moves the two centres to the
    halves' means, so that the halves, not the nearest centres, decide them (a cluster
    that the plain 2-means leaves alone with one centre is not cut by the median)."""
    centres, _ = spherical_cells(sample, 2, rng)
    for _ in range(iterations):
        side = sample @ (centres[0] - centres[1])
        first = side >= side.median()
        centres = torch.nn.functional.normalize(
            torch.stack([sample[first].mean(0), sample[~first].mean(0)]), dim=1)
    return centres[0] - centres[1]


def shard_sizes(n: int, shard_size: int | None, minimum: int = 1,
                need: str = "") -> list[int]:
    """The sizes of the shards of ``n`` rows: ``c = ceil(n / shard_size)`` shards equal
    to within one (one shard of all rows when ``shard_size`` is ``None`` or at least
    ``n``). A ``shard_size`` whose shards would hold fewer than ``minimum`` rows (``need``
    says what needs them) is refused, naming it."""
    if shard_size is None or shard_size >= n:
        return [n]
    count = -(-n // shard_size)
    base, extra = divmod(n, count)
    if base < minimum:
        smallest = next(s for s in range(shard_size, n + 1)
                        if n // -(-n // s) >= minimum)
        raise ValueError(f"shard_size={shard_size} splits the {n} samples into {count} "
                         f"shards of {base}{'-' + str(base + 1) if extra else ''}, fewer "
                         f"than the {minimum} that {need} needs; use shard_size >= {smallest} "
                         "(or None: one graph)")
    return [base + (1 if i < extra else 0) for i in range(count)]


def shard_rows(Z: torch.Tensor, shard_size: int | None, rng: np.random.Generator,
               minimum: int = 1, need: str = "") -> list[np.ndarray]:
    """The rows of ``Z`` in shards of at most ``shard_size`` (sorted indices), shards of
    neighbouring rows, by recursive balanced bisection: each group of rows that is to
    make ``c > 1`` shards is split along the axis joining the centres of a spherical
    2-means (of a sample of the group), the rows nearest the first centre to the part
    that makes ``c // 2`` of them, so that all shards have the same size to within one
    (:func:`shard_sizes`, which refuses a size leaving shards under ``minimum``) and
    every step costs O(n) memory.

    Nearest neighbours mostly fall in the same shard, so a graph built within shards
    keeps most of the graph of the whole; each shard costs the memory of its own graph.
    """
    n = len(Z)
    sizes = shard_sizes(n, shard_size, minimum, need)
    done, todo = [], [(np.arange(n), sizes)]
    while todo:
        rows, parts = todo.pop(0)
        if len(parts) == 1:
            done.append(np.sort(rows))
            continue
        axis = _balanced_axis(Z[torch.from_numpy(rng.choice(
            rows, size=min(len(rows), 4096), replace=False))], rng)
        step = _rows_per_block(Z.shape[1])
        side = torch.cat([Z[torch.from_numpy(rows[s:s + step])] @ axis
                          for s in range(0, len(rows), step)])
        order = torch.argsort(side, descending=True, stable=True).numpy()
        first = parts[:len(parts) // 2]
        cut = sum(first)
        todo += [(rows[order[:cut]], first), (rows[order[cut:]], parts[len(parts) // 2:])]
    return done


#: Most rows of candidate_graph that share one draw of candidates (one matrix product).
CANDIDATE_BLOCK = 1024


def rows_per_draw(n: int) -> int:
    """Rows sharing a draw: at most ``CANDIDATE_BLOCK``, and at least 64 draws per graph,
    so that the edges of a small graph do not all point into a few candidates."""
    return max(1, min(CANDIDATE_BLOCK, n // 64))


def draw_candidates(n: int, n_candidates: int, rng: np.random.Generator) -> np.ndarray:
    """``n_candidates`` distinct samples drawn uniformly (all ``n`` when that is no more)."""
    if n_candidates >= n:
        return np.arange(n)
    return np.sort(rng.choice(n, size=n_candidates, replace=False))


def candidate_graph(Z: torch.Tensor, n_candidates: int, n_neighbours: int,
                    rng: np.random.Generator) -> np.ndarray:
    """ProSampler's proximity graph (Yang et al. 2023, Sec. 3.2).

    Each sample is joined to the ``n_neighbours`` most similar (cosine similarity) of
    ``n_candidates`` samples drawn at random (itself excluded). Candidates drawn at
    random instead of searched over all samples are what keeps near-duplicates (likely
    false negatives) from dominating the graph, and the cost is ``O(n m d)``. The rows of
    a block of 1024 consecutive samples share one draw, so the block is one matrix
    product (1024 rows, fewer below n = 65,536, so that a graph has at least 64 draws);
    each row's candidates are still uniform over the samples.

    Returns
    -------
    ndarray of shape (n, n_neighbours), int64
        Neighbours of each sample, most similar first.
    """
    n = len(Z)
    m = min(n_candidates, n - 1)
    k = min(n_neighbours, m)
    out = np.empty((n, k), dtype=np.int64)
    step = rows_per_draw(n)
    for s in range(0, n, step):
        rows = np.arange(s, min(n, s + step))
        cand = draw_candidates(n, m + 1, rng)  # one spare: a row may be a candidate
        sims = Z[s:s + len(rows)] @ Z[torch.from_numpy(cand)].T
        sims[torch.from_numpy(rows[:, None] == cand[None, :])] = -math.inf
        top = torch.topk(sims, k, dim=1).indices.numpy()
        out[rows] = cand[top]
    return out
