"""Hard-negative mining: the hardest negatives of each pair in a corpus, with
false-negative filters, chunked to a million rows."""

from __future__ import annotations

import numbers
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import numpy as np
import torch

from .._tables import holds_text, text_column
from .._validation import check_int, describe
from ._search import _check_blocks, _device, _top_k_blocks, top_k_search


def _embed_texts(embedding: Any, texts: Any, view: int, name: str) -> np.ndarray:
    """Embeddings of ``texts`` (strings) by a fitted estimator (its ``view``), a callable
    ``f(texts) -> array``, or the rows themselves when they are already embeddings."""
    if not holds_text(texts):
        if embedding is not None:
            raise ValueError(f"{name} are embeddings already; embedding= is for texts")
        return _float_rows(texts, name)
    if embedding is None:
        raise ValueError(f"{name} are texts: give embedding= (a fitted estimator, or a "
                         "callable texts -> array) to embed them")
    texts = text_column(texts, name)
    if hasattr(embedding, "transform_view") and len(embedding.input_spec_.views) > 1:
        out = embedding.transform_view(texts, view=view)
    elif hasattr(embedding, "transform"):
        out = embedding.transform(texts)
    elif callable(embedding):
        out = embedding(texts)
    else:
        raise ValueError(f"embedding must be a fitted estimator, a callable texts -> array, or "
                         f"None; got {describe(embedding)}")
    return _float_rows(out, f"the embeddings of {name}")


def _float_rows(x: Any, name: str) -> np.ndarray:
    rows = np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x, dtype=np.float32)
    if rows.ndim != 2 or not len(rows):
        raise ValueError(f"{name} must be a non-empty 2-D array of embeddings; got "
                         f"{describe(x)}")
    if not np.isfinite(rows).all():
        raise ValueError(f"{name} contain NaN or infinite values")
    return rows


def _row_ids(arrays: list[np.ndarray], chunk: int = 65536) -> np.ndarray:
    """Ids of the rows of float32 arrays of one width, taken as one stack: equal rows
    (by value) get equal ids. A 64-bit hash per row, grouped, then every row checked
    against its group's first row, so the ids are exact; memory stays ``O(n)`` beyond
    the rows (``np.unique(axis=0)`` on the stack sorts copies of all of them: 550 MB
    for three arrays of 200,000 x 64, against 100 MB here). A collision, which the check
    would catch, falls back to that sort."""
    width = arrays[0].shape[1]
    offsets = np.cumsum([0] + [len(a) for a in arrays])
    weights = np.random.default_rng(0).integers(1, 2**63, size=width, dtype=np.uint64) | 1

    def hashes(a: np.ndarray) -> np.ndarray:
        out = np.empty(len(a), np.uint64)
        for i in range(0, len(a), chunk):
            bits = (a[i:i + chunk] + np.float32(0)).view(np.uint32)  # -0.0 as 0.0
            out[i:i + chunk] = (bits.astype(np.uint64) * weights).sum(1)  # mod 2**64
        return out

    def rows(index: np.ndarray) -> np.ndarray:
        part = np.searchsorted(offsets, index, side="right") - 1
        out = np.empty((len(index), width), np.float32)
        for k, a in enumerate(arrays):
            at = part == k
            out[at] = a[index[at] - offsets[k]]
        return out

    _, first, ids = np.unique(np.concatenate([hashes(a) for a in arrays]),
                              return_index=True, return_inverse=True)
    ids = ids.reshape(-1)
    for i in range(0, len(ids), chunk):
        index = np.arange(i, min(len(ids), i + chunk))
        if not np.array_equal(rows(index), rows(first[ids[index]])):
            return np.unique(np.concatenate(arrays), axis=0, return_inverse=True)[1].reshape(-1)
    return ids


class _Units(NamedTuple):
    """Corpus rows grouped into units of identical rows: each unit is searched once (by
    its first row) and stands for all its rows, in index order."""

    first: np.ndarray  # (u,) each unit's smallest row index, ascending
    members: np.ndarray  # the rows, unit by unit, each unit's in ascending order
    starts: np.ndarray  # (u,) where each unit's rows begin in ``members``
    sizes: np.ndarray  # (u,)

    @property
    def merged(self) -> bool:
        """Whether some unit holds more than one row."""
        return len(self.first) < len(self.members)

    @classmethod
    def of(cls, keys: np.ndarray) -> _Units:
        """Units of the rows with equal ``keys``."""
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        position = np.empty_like(order)
        position[order] = np.arange(len(order))
        unit = position[inverse.reshape(-1)]
        members = np.argsort(unit, kind="stable")
        sizes = np.bincount(unit, minlength=len(order))
        return cls(first[order], members, np.cumsum(sizes) - sizes, sizes)

    def expand(self, values: np.ndarray, ranked: np.ndarray, width: int, slack: int,
               allowed: Any) -> tuple[np.ndarray, np.ndarray]:
        """Ranked units (``-inf``/``-1`` where none) as ranked rows: every row of a unit
        takes its score; the rows ``allowed(queries, rows)`` keeps (at most ``slack`` of
        a query's first ``width + slack`` rows are not), ordered by score (descending)
        then row index, the first ``width`` per query (``-inf``/``-1`` padding).

        Exact for identical rows, which share their unit's one score: a unit left out
        of a query's top units scores at most the last one kept and its rows have larger
        indices than the first rows of the kept units of that score."""
        valid = np.isfinite(values) & (ranked >= 0)
        need = width + max(0, slack)
        counts = np.where(valid, np.minimum(self.sizes[np.clip(ranked, 0, None)], need), 0)
        # the units that can reach a query's first ``need`` rows: those before the one
        # where the count reaches ``need``, and any of its score
        reach = np.cumsum(counts, axis=1) - counts < need
        boundary = np.where(reach, values, np.inf).min(1, keepdims=True)
        counts = np.where(reach | (values == boundary), counts, 0)
        flat = counts.reshape(-1)
        entry = np.repeat(np.arange(flat.size), flat)
        offset = np.arange(entry.size) - np.repeat(np.cumsum(flat) - flat, flat)
        rows = self.members[self.starts[ranked.reshape(-1)[entry]] + offset]
        scores = values.reshape(-1)[entry]
        query = entry // values.shape[1]
        keep = allowed(query, rows)
        query, rows, scores = query[keep], rows[keep], scores[keep]
        order = np.lexsort((rows, -scores, query))
        query, rows, scores = query[order], rows[order], scores[order]
        place = np.arange(len(query)) - np.searchsorted(query, query)
        kept = place < width
        out_values = np.full((len(values), width), -np.inf, dtype=values.dtype)
        out_rows = np.full((len(values), width), -1, dtype=np.int64)
        out_values[query[kept], place[kept]] = scores[kept]
        out_rows[query[kept], place[kept]] = rows[kept]
        return out_values, out_rows


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)


class _Cosines:
    """Float64 cosines between rows of two float32 arrays (the rows as given), by index:
    what the search's candidates are rescored by. The rows' norms are computed once."""

    def __init__(self, queries: np.ndarray, documents: np.ndarray) -> None:
        self.queries, self.documents = queries, documents
        self.query_norms, self.document_norms = _norms(queries), _norms(documents)

    def __call__(self, rows: np.ndarray, columns: np.ndarray,
                 chunk: int = 2**22) -> np.ndarray:
        """Cosines of ``queries[rows[i]]`` with ``documents[columns[i, j]]``, ``-inf``
        where ``columns`` is -1; a slice of queries at a time, gathering at most
        ``chunk`` numbers."""
        out = np.full(columns.shape, -np.inf)
        step = max(1, chunk // max(1, columns.shape[1] * self.queries.shape[1]))
        for i in range(0, len(rows), step):
            at, row = np.clip(columns[i:i + step], 0, None), rows[i:i + step]
            dots = np.einsum("qw,qkw->qk", self.queries[row], self.documents[at],
                             dtype=np.float64)  # exact products, float64 sums
            cosines = dots / (self.query_norms[row, None] * self.document_norms[at])
            out[i:i + step] = np.where(columns[i:i + step] >= 0, cosines, -np.inf)
        return out


def _norms(rows: np.ndarray, chunk: int = 65536) -> np.ndarray:
    """Float64 norms of float32 rows (at least 1e-12, as :func:`_unit` divides), a
    slice at a time."""
    out = np.empty(len(rows))
    for i in range(0, len(rows), chunk):
        part = rows[i:i + chunk]
        out[i:i + chunk] = np.sqrt(np.einsum("qw,qw->q", part, part, dtype=np.float64))
    return np.maximum(out, 1e-12)


def _float32_error(width: int) -> float:
    """A bound on the difference between the search's float32 score of two rows of
    ``width`` numbers (each normalised in float32, then their dot product) and their
    exact cosine, in any block: the product's rounding, at most gamma_w = w u / (1 - w u)
    of the sum of ``|a_i c_i|`` (Higham 2002, Eq. 3.5; u = 2**-24, any order of the
    sums), on top of the normalisation's, at most ``gamma_w / 2 + 2u`` relative per
    number, twice; padded by 1e-12 for the float64 rescoring."""
    u = 2.0**-24
    gamma = width * u / (1 - width * u)
    eta = gamma / 2 + 2 * u
    return 2 * eta + eta**2 + gamma * (1 + eta) ** 2 + 1e-12


@contextmanager
def _full_float32_products() -> Iterator[None]:
    """The search's float32 matrix products at full precision (torch's ``'highest'``):
    TF32 or bfloat16 products (``'high'``, ``'medium'``) round far beyond
    :func:`_float32_error`. The setting is the process's; it is restored after."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def _exact_top_blocks(scores: Any, cosines: Any, n_queries: int, n_documents: int,
                      width: int, query_chunk: int, document_chunk: int, tolerance: float
                      ) -> Iterator[tuple[slice, np.ndarray, np.ndarray]]:
    """:func:`_top_k_blocks` by exact scores: each query's ``width`` best documents by
    ``cosines(queries, documents)`` (float64), ties to the smaller index, whatever the
    block sizes. The float32 search keeps a wider list, which is rescored exactly; a
    document left out of it scores at most its last float32 score plus ``tolerance``
    (:func:`_float32_error`), so a query whose ``width``-th exact score does not clear
    that is searched again with a list twice as wide (near-ties at the cut, rare)."""
    wide = min(n_documents, width + max(4, width // 8))
    for rows, values, ranked in _top_k_blocks(scores, n_queries, n_documents, wide,
                                              query_chunk, document_chunk):
        queries = np.arange(rows.start, rows.stop)
        best = np.full((len(queries), width), -np.inf)
        index = np.full((len(queries), width), -1, dtype=np.int64)
        todo, k = np.arange(len(queries)), wide
        while len(todo):
            exact = cosines(queries[todo], ranked)
            order = np.lexsort((ranked, -exact), axis=1)[:, :width]
            exact, found = (np.take_along_axis(x, order, 1) for x in (exact, ranked))
            cut = values[:, -1].astype(np.float64)  # the float32 list's last score
            sure = (k >= n_documents) | np.isneginf(cut) | (exact[:, -1] > cut + tolerance)
            best[todo[sure]], index[todo[sure]] = exact[sure], found[sure]
            todo, k = todo[~sure], min(n_documents, 2 * k)
            if len(todo):
                again = torch.from_numpy(queries[todo])
                values, ranked = top_k_search(
                    lambda qi, dj, again=again: scores(again[qi], dj), len(todo),
                    n_documents, k, query_chunk=query_chunk, document_chunk=document_chunk)
        yield rows, best, index


def mine_hard_negatives(anchors: Any, positives: Any, corpus: Any = None, *,
                        embedding: Any = None, n_negatives: int = 4,
                        rank_window: tuple[int, int] = (0, 50),
                        relative_margin: float | None = None,
                        groups: Any = None, corpus_groups: Any = None,
                        query_chunk: int = 1024, document_chunk: int = 65536,
                        device: Any = "auto") -> Any:
    r"""The hardest negatives of each (anchor, positive) pair in a corpus, by cosine
    similarity of an embedding, with false-negative filters.

    For anchor :math:`a_i` with positive :math:`p_i`, the corpus is ranked by
    :math:`\cos(a_i, c_j)`; candidates that are the positive's duplicates (the same
    text, or the same embedding row when no texts are given), the anchor's duplicates,
    and members of the pair's group are never negatives. Of the rest, ranks
    :math:`p+1 .. q` form the window (``rank_window=(p, q)``: skipping the ``p`` most
    similar, as B3 does, Thirukovalluru et al. 2025, Sec. 3); with
    ``relative_margin=m`` only candidates with :math:`\cos(a_i, c_j) < m \cos(a_i, p_i)`
    stay (NV-Retriever's "TopK-PercPos",
    Moreira et al. 2024, Sec. 4.1, ``m = 0.95``); the ``n_negatives`` most similar of
    those are the negatives, hardest first.

    The search is chunked (:func:`top_k_search`): memory is ``O(query_chunk x
    document_chunk)`` whatever the corpus (``benchmarks/bench_text.py`` mines a
    1,000,000 x 1,000,000 search). Its float32 scores round differently in blocks of
    other shapes, so each query's short list (its candidates and every one within
    float32's rounding error of the cut) is rescored exactly, float64 cosines of the rows
    as given: the result, scores included, does not depend on ``query_chunk``,
    ``document_chunk`` or the device (ties go to the smaller corpus index). The float32
    products run at full precision (``torch.get_float32_matmul_precision()`` is
    ``'highest'`` during the search, restored after).

    Parameters
    ----------
    anchors, positives : list of str, or array-like of shape (n, d)
        The pairs: texts (embedded by ``embedding``), or embeddings.
    corpus : list of str, array-like of shape (m, d), or None
        Where negatives come from; ``None``: the positives themselves (in-corpus
        mining).
    embedding : fitted estimator, callable or None
        What embeds texts: a fitted skcontrast estimator (anchors by view 0, positives
        and corpus by view 1 when it has two), a teacher ``f(texts) -> (n, d)``, or
        ``None`` when embeddings are given.
    n_negatives : int, default=4
    rank_window : (int, int), default=(0, 50)
        ``(p, q)``: candidate ranks ``p + 1 .. q`` (after the duplicates and the group's
        members are left out).
    relative_margin : float in (0, 1] or None, default=None
        Keep candidates scoring below ``relative_margin`` x the positive's score.
    groups, corpus_groups : array-like or None
        Group ids of the pairs and of the corpus items (e.g. the concept an item names):
        a candidate of the pair's group is never its negative. ``corpus_groups``
        defaults to ``groups`` when the corpus is the positives.
    query_chunk, document_chunk : int
        Block sizes of the search.
    device : str or torch.device, default='auto'
        Where the similarities are computed (``'auto'``: CUDA if available).

    Returns
    -------
    sklearn.utils.Bunch
        ``indices`` ``(n, n_negatives)`` corpus indices, ``-1`` where fewer were found;
        ``scores`` their similarities; ``positive_scores`` ``(n,)``; ``complete`` (the
        pairs with all their negatives); and, for texts, ``table``: an object array
        ``(n_complete, 2 + n_negatives)`` of (anchor, positive, negatives...) rows of the
        complete pairs, ready for the estimators' hard-negative columns. Pairs that found
        fewer negatives are left out of ``table`` with a warning saying how many.

    Examples
    --------
    >>> import numpy as np
    >>> from skcontrast.text import mine_hard_negatives
    >>> Z = np.eye(4)[[0, 1, 2, 3]] + 0.1
    >>> mined = mine_hard_negatives(Z, Z, n_negatives=2, rank_window=(0, 3), device="cpu")
    >>> mined.indices.shape
    (4, 2)
    """
    import warnings

    from sklearn.utils import Bunch

    from .._validation import check_real

    n_negatives = check_int(n_negatives, "n_negatives", minimum=1)
    window = rank_window
    if not (isinstance(window, tuple | list) and len(window) == 2
            and all(isinstance(w, numbers.Integral) and not isinstance(w, bool)
                    for w in window) and window[0] >= 0
            and window[0] + n_negatives <= window[1]):
        raise ValueError(f"rank_window must be (p, q) with 0 <= p and p + n_negatives <= q "
                         f"(n_negatives={n_negatives}); got {describe(rank_window)}")
    p, q = int(window[0]), int(window[1])
    if relative_margin is not None:
        relative_margin = check_real(relative_margin, "relative_margin", low=0.0, high=1.0,
                                     low_open=True)
    texts = holds_text(anchors)
    if texts != holds_text(positives) or (corpus is not None and holds_text(corpus) != texts):
        raise ValueError("anchors, positives and corpus must all be texts or all embeddings")
    if texts:
        anchor_texts = np.array(text_column(anchors, "anchors"), dtype=object)
        positive_texts = np.array(text_column(positives, "positives"), dtype=object)
        corpus_texts = positive_texts if corpus is None else \
            np.array(text_column(corpus, "corpus"), dtype=object)
    A = _embed_texts(embedding, anchors, 0, "anchors")
    P = _embed_texts(embedding, positives, 1, "positives")
    C = P if corpus is None else _embed_texts(embedding, corpus, 1, "corpus")
    if len(A) != len(P):
        raise ValueError(f"anchors ({len(A)}) and positives ({len(P)}) must pair up")
    if A.shape[1] != C.shape[1]:
        raise ValueError(f"anchors have {A.shape[1]} dimensions, the corpus {C.shape[1]}")
    group_of = None if groups is None else np.asarray(groups)
    corpus_group = np.asarray(corpus_groups) if corpus_groups is not None else (
        group_of if corpus is None else None)
    if (group_of is None) != (corpus_group is None):
        raise ValueError("give groups and corpus_groups together (corpus_groups may be left "
                         "out when the corpus is the positives)")
    if group_of is not None and corpus_group is not None and (
            len(group_of) != len(A) or len(corpus_group) != len(C)):
        raise ValueError(f"groups needs one id per pair ({len(A)}) and corpus_groups one per "
                         f"corpus item ({len(C)})")
    where = _device(device)
    a = _unit(torch.from_numpy(A)).to(where)
    c = _unit(torch.from_numpy(C)).to(where)
    positive_np = _Cosines(A, P)(np.arange(len(A)), np.arange(len(A))[:, None])[:, 0]
    # duplicates of the positive (or of the anchor) in the corpus: the same text, or the
    # same embedding row
    if texts:
        keys = np.unique(np.concatenate([positive_texts, anchor_texts, corpus_texts]),
                         return_inverse=True)[1]
    else:
        keys = _row_ids([P, A, C])
    keys = keys.reshape(-1)
    positive_key, anchor_key, corpus_key = keys[:len(A)], keys[len(A):2 * len(A)], \
        keys[2 * len(A):]
    # the most any pair loses to duplicates and its group, so that the window stays full
    blocked = np.bincount(corpus_key, minlength=int(keys.max()) + 1)
    lost = blocked[positive_key] + blocked[anchor_key]
    if corpus_group is not None and group_of is not None:
        ids, counts = np.unique(corpus_group, return_counts=True)
        at = np.searchsorted(ids, group_of).clip(0, len(ids) - 1)
        lost = lost + np.where(ids[at] == group_of, counts[at], 0)
    depth = min(len(C), q + int(lost.max(initial=0)))
    n = len(A)
    group_key = None if group_of is None else np.unique(
        np.concatenate([group_of, corpus_group]), return_inverse=True)[1].reshape(-1)
    # identical corpus rows are one unit, scored once: a matrix product can give two
    # copies of a row different last bits in different blocks, and then the larger
    # index could rank first
    units = _Units.of(corpus_key)
    rep = units.first  # each unit's smallest corpus index, ascending
    n_units = len(rep)
    # a unit's group, or -1 when its rows are in several groups (never left out whole)
    unit_group = None
    if group_key is not None:
        rows_group = group_key[n:][units.members]
        low = np.minimum.reduceat(rows_group, units.starts)
        high = np.maximum.reduceat(rows_group, units.starts)
        unit_group = np.where(low == high, low, -1)
    # few exclusions per anchor: search the top ``depth`` and filter after; many (large
    # groups): mask them inside each block instead
    in_block = depth - q > 256
    pk, ak, ck = (torch.from_numpy(k).to(where) for k in (positive_key, anchor_key,
                                                           corpus_key[rep]))
    qg = None if group_key is None else torch.from_numpy(group_key[:n]).to(where)
    ug = None if unit_group is None else torch.from_numpy(unit_group).to(where)
    c_rep = c[torch.from_numpy(rep).to(where)] if units.merged else c

    def scores(qi: torch.Tensor, dj: torch.Tensor) -> torch.Tensor:
        qi, dj = qi.to(where), dj.to(where)
        block = a[qi] @ c_rep[dj].T  # each unit once, whatever the block
        if not in_block:
            return block
        out = (pk[qi][:, None] == ck[dj][None, :]) | (ak[qi][:, None] == ck[dj][None, :])
        if qg is not None and ug is not None:
            out |= qg[qi][:, None] == ug[dj][None, :]
        return block.masked_fill(out, float("-inf"))

    def allowed(queries: np.ndarray, corpus_rows: np.ndarray) -> np.ndarray:
        """Rows not of the pair's group (a unit may span groups)."""
        if group_key is None:
            return np.ones(len(corpus_rows), dtype=bool)
        return group_key[n + corpus_rows] != group_key[queries]

    cosines = _Cosines(A, C)

    def exact(queries: np.ndarray, ranked_units: np.ndarray) -> np.ndarray:
        return cosines(queries, np.where(ranked_units >= 0,
                                         rep[np.clip(ranked_units, 0, None)], -1))

    _, query_chunk, document_chunk = _check_blocks(1, query_chunk, document_chunk)
    indices = np.full((n, n_negatives), -1, dtype=np.int64)
    found = np.full((n, n_negatives), np.nan, dtype=np.float32)
    with _full_float32_products():
        for rows, values, ranked in _exact_top_blocks(
                scores, exact, n, n_units, min(n_units, max(1, q if in_block else depth)),
                query_chunk, document_chunk, _float32_error(A.shape[1])):
            if not in_block:  # leave out the units that repeat the positive or the anchor
                at = rep[np.clip(ranked, 0, None)]
                out = (corpus_key[at] == positive_key[rows, None]) | \
                    (corpus_key[at] == anchor_key[rows, None])
                values = np.where(out, -np.inf, values)
            if units.merged or group_key is not None:  # else the ranked units are the rows
                values, ranked = units.expand(values, ranked, q, depth - q,
                                              lambda i, j, first=rows.start: allowed(i + first, j))
            valid = np.isfinite(values)
            rank = np.cumsum(valid, axis=1)  # 1-based rank among the allowed candidates
            keep = valid & (rank > p) & (rank <= q)
            if relative_margin is not None:
                keep &= values < relative_margin * positive_np[rows, None]
            width = min(n_negatives, keep.shape[1])  # a corpus smaller than n_negatives
            order = np.argsort(~keep, axis=1, kind="stable")[:, :width]
            picked = np.take_along_axis(keep, order, 1)
            indices[rows, :width] = np.where(picked, np.take_along_axis(ranked, order, 1), -1)
            found[rows, :width] = np.where(picked, np.take_along_axis(values, order, 1), np.nan)
    chosen = indices >= 0
    complete = chosen.all(1)
    out = Bunch(indices=indices, scores=found,
                positive_scores=positive_np.astype(np.float32), complete=complete)
    if not complete.all():
        warnings.warn(f"{int((~complete).sum())} of {n} pairs found fewer than {n_negatives} "
                      f"negatives in rank_window={tuple(rank_window)}"
                      + (f" below relative_margin={relative_margin}" if relative_margin
                         is not None else "")
                      + "; they are left out of the table (widen the window, lower "
                      "n_negatives or relax the margin)", UserWarning, stacklevel=2)
    if texts:
        kept = np.flatnonzero(complete)
        table = np.empty((len(kept), 2 + n_negatives), dtype=object)
        table[:, 0], table[:, 1] = anchor_texts[kept], positive_texts[kept]
        table[:, 2:] = corpus_texts[indices[kept]] if len(kept) else table[:, 2:]
        out.table = table
    return out
