"""Top-k search in bounded memory: blocks of queries against blocks of documents."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from .._validation import check_int


def top_k_search(scores: Any, n_queries: int, n_documents: int, k: int, *,
                 query_chunk: int = 4096, document_chunk: int = 65536
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best documents per query, in bounded memory.

    ``scores(queries, documents) -> Tensor (len(queries), len(documents))`` scores a
    block of query indices against a block of document indices (both int64 tensors); the
    blocks are at most ``query_chunk x document_chunk``, and each query keeps a running
    top ``k``, so memory is ``O(query_chunk x (document_chunk + k))`` whatever the
    corpus. Ties are broken by the smaller document index, so the result does not depend
    on the chunking as long as ``scores`` gives a document the same score in any block
    (a matrix product may not, in its last bits: :func:`mine_hard_negatives` scores
    identical rows once and rescores each query's short list in float64 for that
    reason).

    A NaN or ``+inf`` score is refused, naming its query (``-inf`` excludes a
    document).

    Returns
    -------
    values : ndarray of shape (n_queries, k), float32
        Best first; ``-inf`` where the corpus holds fewer than ``k`` documents (a
        document scored ``-inf`` is excluded).
    indices : ndarray of shape (n_queries, k), int64
        ``-1`` where there is no (or only an excluded) document.
    """
    k, query_chunk, document_chunk = _check_blocks(k, query_chunk, document_chunk)
    values = np.full((n_queries, k), -np.inf, dtype=np.float32)
    indices = np.full((n_queries, k), -1, dtype=np.int64)
    for rows, v, i in _top_k_blocks(scores, n_queries, n_documents, k, query_chunk,
                                    document_chunk):
        values[rows], indices[rows] = v, i
    return values, indices


def _top_k_blocks(scores: Any, n_queries: int, n_documents: int, k: int, query_chunk: int,
                  document_chunk: int) -> Iterator[tuple[slice, np.ndarray, np.ndarray]]:
    """:func:`top_k_search` one block of queries at a time: ``(rows, values, indices)``
    of the queries ``rows``, so that a caller can reduce each block before the next
    (memory ``O(query_chunk x (document_chunk + k))``, nothing of size ``n_queries x
    k`` unless the caller keeps it)."""
    for q0 in range(0, n_queries, query_chunk):
        queries = torch.arange(q0, min(n_queries, q0 + query_chunk))
        values = np.full((len(queries), k), -np.inf, dtype=np.float32)
        indices = np.full((len(queries), k), -1, dtype=np.int64)
        best_v: torch.Tensor | None = None
        best_i: torch.Tensor | None = None
        for d0 in range(0, n_documents, document_chunk):
            docs = torch.arange(d0, min(n_documents, d0 + document_chunk))
            block = scores(queries, docs).float()
            v, i = _chunk_top(block, min(k, block.shape[1]))
            del block  # before the next block is made: one block alive at a time
            _check_scores(v[:, 0], queries)  # NaN and +inf rank first: each row's top
            i = i + d0
            if best_v is None or best_i is None:  # ordered already: value, then index
                best_v, best_i = v, i
            else:
                best_v, best_i = _merged(best_v, best_i, v, i.to(best_i.device), k)
        if best_v is not None and best_i is not None:
            values[:, :best_v.shape[1]] = best_v.cpu().numpy()
            indices[:, :best_i.shape[1]] = best_i.cpu().numpy()
        indices[np.isneginf(values)] = -1  # excluded (scored -inf), or no document
        yield slice(q0, q0 + len(queries)), values, indices


def _check_scores(best: torch.Tensor, queries: torch.Tensor) -> None:
    """Refuse NaN or ``+inf`` among a block's scores, naming the first query that has
    one (a row's best value shows it: ``topk`` ranks NaN above every number)."""
    bad = torch.isnan(best) | torch.isposinf(best)
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise ValueError(f"the scores of query {int(queries[row])} hold "
                         f"{float(best[row])}: scores must be finite, or -inf for an "
                         f"excluded document ({int(bad.sum())} quer(y/ies) of this block "
                         "affected)")


def _check_blocks(k: Any, query_chunk: Any, document_chunk: Any) -> tuple[int, int, int]:
    return (check_int(k, "k", minimum=1), check_int(query_chunk, "query_chunk", minimum=1),
            check_int(document_chunk, "document_chunk", minimum=1))


def _chunk_top(block: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``width`` best of each row of a block, by value (descending) then column
    (ascending): ``topk`` orders tied values arbitrarily. A row tied at the boundary
    (its ``width + 1``-th best equals its ``width``-th, so one ``topk`` one wider finds
    them; a pass counting ``block >= boundary`` cost more than the ``topk`` itself) may
    hold the wrong columns and is sorted stably whole; a row tied inside its best only
    has them in the wrong order, which :func:`_ordered` mends."""
    wide = min(width + 1, block.shape[1])
    v, i = torch.topk(block, wide, dim=1)
    if wide > width:
        tied = (v[:, 1:] == v[:, :-1]).any(1)  # inside the best or at the boundary
        boundary = v[:, width] == v[:, width - 1]
        v, i = v[:, :width], i[:, :width]
        if bool(tied.any()):
            rows = (tied & boundary).nonzero().flatten()
            sv, si = torch.sort(block[rows], dim=1, descending=True, stable=True)
            v[rows], i[rows] = sv[:, :width], si[:, :width]
            rows = (tied & ~boundary).nonzero().flatten()
            v[rows], i[rows] = _ordered(v[rows], i[rows])
    else:  # the whole row: order it stably
        v, i = torch.sort(block, dim=1, descending=True, stable=True)
    return v, i.long()


def _ordered(values: torch.Tensor, indices: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row by value (descending) then index (ascending)."""
    order = torch.argsort(indices, dim=1, stable=True)
    values, indices = values.gather(1, order), indices.gather(1, order)
    order = torch.argsort(values, dim=1, descending=True, stable=True)
    return values.gather(1, order), indices.gather(1, order)


def _merged(best_v: torch.Tensor, best_i: torch.Tensor, values: torch.Tensor,
            indices: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` best of each row of a running top and a later block's top, both ordered
    by value (descending) then index (ascending), in that order. The block's documents
    come after the running top's, so one stable sort by value keeps tied values in index
    order (sorting by index first, as :func:`_ordered` must, cost as much again: torch
    sorts rows wider than 32 numbers many times slower than narrower ones)."""
    values, indices = torch.cat([best_v, values], 1), torch.cat([best_i, indices], 1)
    order = torch.argsort(values, dim=1, descending=True, stable=True)[:, :k]
    return values.gather(1, order), indices.gather(1, order)


def _device(device: Any) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)
