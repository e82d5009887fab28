"""Scores of rankings: class-level retrieval metrics of embeddings (mAP@R, R-mAP,
R-precision, precision@1, from one blocked pass of :mod:`._retrieval`) and search
quality of ranked results (recall, nDCG and MRR at ``k``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import check_int, describe
from ._retrieval import _class_retrieval, _Retrieval


def _with_relevant(result: _Retrieval, metric: str) -> _Retrieval:
    keep = result.r >= 1
    if not keep.any():
        raise ValueError(f"no query has a reference of its class; {metric} is undefined")
    return _Retrieval(*(field[keep] for field in result))


REFERENCE_DOC = """reference : array-like of shape (m, d), optional
        The items to retrieve from (a gallery). Default: for each query, the other
        rows of ``H``.
    reference_labels : array-like of shape (m,), optional
        Their labels; required with ``reference``.
    device : {'cpu', 'cuda', 'cuda:N', 'auto'}, default='cpu'
        Where the similarities are computed (``'auto'``: a CUDA GPU when one is usable);
        the same values either way."""


def map_at_r(H: Any, y: Any, reference: Any = None, reference_labels: Any = None, *,
             device: Any = "cpu") -> float:
    """mAP@R (Musgrave et al., 2020), as defined in Sors et al. 2021, arXiv:2112.11743, supplement
    C, Eq. 15.

    Each item queries the references (by default, all the others) by cosine similarity;
    with ``R`` the number of references of its class,
    ``AP@R = (1/R) sum_{k<=R} P(k) rel(k)``. Queries with no reference of their class
    are left out. Computed block by block: O(block * n) memory.

    Parameters
    ----------
    H : array-like of shape (n, d)
    y : array-like of shape (n,)
    {reference}

    Returns
    -------
    float in [0, 1]
    """
    result = _with_relevant(_class_retrieval(H, y, reference, reference_labels, device),
                            "mAP@R")
    return float(np.mean(result.precision_sums / result.r))


def r_map(H: Any, y: Any, reference: Any = None, reference_labels: Any = None, *,
          device: Any = "cpu") -> float:
    """R-mAP of Sors et al. 2021 (supplement C, Eq. 13-14): average precision within the top R.

    Like :func:`map_at_r`, but the average is over the relevant items that made it into
    the top ``R`` (``AP(x_q, D[1:R])``), not over all ``R``; a query with none scores 0.

    Parameters
    ----------
    H : array-like of shape (n, d)
    y : array-like of shape (n,)
    {reference}

    Returns
    -------
    float in [0, 1]
    """
    result = _with_relevant(_class_retrieval(H, y, reference, reference_labels, device),
                            "R-mAP")
    sums, hits = result.precision_sums, result.hits
    return float(np.mean(np.divide(sums, hits, out=np.zeros_like(sums), where=hits > 0)))


def r_precision(H: Any, y: Any, reference: Any = None, reference_labels: Any = None, *,
                device: Any = "cpu") -> float:
    """R-precision: the share of a query's ``R`` nearest references that are of its class.

    ``R`` is the number of references of the query's class (Musgrave et al., 2020; as
    pytorch-metric-learning's ``AccuracyCalculator``). Queries with none are left out.

    Parameters
    ----------
    H : array-like of shape (n, d)
    y : array-like of shape (n,)
    {reference}

    Returns
    -------
    float in [0, 1]
    """
    result = _with_relevant(_class_retrieval(H, y, reference, reference_labels, device),
                            "R-precision")
    return float(np.mean(result.hits / result.r))


def precision_at_1(H: Any, y: Any, reference: Any = None, reference_labels: Any = None, *,
                   device: Any = "cpu") -> float:
    """Class-level precision@1: how often a query's nearest reference is of its class.

    Queries whose class has no reference are left out (as pytorch-metric-learning's
    ``AccuracyCalculator`` leaves out lone queries). Ties count against the query.

    Parameters
    ----------
    H : array-like of shape (n, d)
    y : array-like of shape (n,)
    {reference}

    Returns
    -------
    float in [0, 1]
    """
    result = _with_relevant(_class_retrieval(H, y, reference, reference_labels, device),
                            "precision@1")
    return float(np.mean(result.first))


def class_retrieval(H: Any, y: Any, reference: Any = None, reference_labels: Any = None, *,
                    device: Any = "cpu") -> dict[str, float]:
    """:func:`map_at_r`, :func:`r_map`, :func:`r_precision` and :func:`precision_at_1`
    from one blocked pass over the similarities (what pytorch-metric-learning's
    ``AccuracyCalculator`` reports, in O(block * n) memory).

    Parameters
    ----------
    H : array-like of shape (n, d)
    y : array-like of shape (n,)
    {reference}

    Returns
    -------
    dict
        ``{'map_at_r', 'r_map', 'r_precision', 'precision_at_1'}``.
    """
    result = _with_relevant(_class_retrieval(H, y, reference, reference_labels, device),
                            "class retrieval")
    sums, hits, r = result.precision_sums, result.hits, result.r
    return {"map_at_r": float(np.mean(sums / r)),
            "r_map": float(np.mean(np.divide(sums, hits, out=np.zeros_like(sums),
                                             where=hits > 0))),
            "r_precision": float(np.mean(hits / r)),
            "precision_at_1": float(np.mean(result.first))}


for _metric in (map_at_r, r_map, r_precision, precision_at_1, class_retrieval):
    _metric.__doc__ = (_metric.__doc__ or "").replace("{reference}", REFERENCE_DOC)


def ranking_scores(ranked: Any, query_groups: Any, document_groups: Any, k: int = 10
                   ) -> dict[str, float]:
    """Search quality from ranked results: recall@1, recall@k, nDCG@k and MRR@k.

    Document ``j`` is relevant to query ``i`` when ``document_groups[j] ==
    query_groups[i]`` (binary relevance: the same concept, every duplicate of it
    included). nDCG@k divides the discounted gain of the top ``k`` by that of a ranking
    with all of the query's relevant documents first (Järvelin & Kekäläinen, 2002).

    Parameters
    ----------
    ranked : array-like of int, shape (n_queries, K)
        Document indices per query, best first (``K >= k``; ``-1`` marks no result), as
        :meth:`skcontrast.text.HybridRetriever.search` returns; each document at most
        once per query (a repeat is refused: it would count its gain twice).
    query_groups : array-like of shape (n_queries,)
    document_groups : array-like of shape (n_documents,)
    k : int, default=10

    Returns
    -------
    dict with ``'recall@1'``, ``'recall@k'``, ``'ndcg@k'`` and ``'mrr@k'`` (``k``
    spelled out), each a mean over queries in [0, 1].

    Examples
    --------
    >>> from skcontrast.metrics import ranking_scores
    >>> ranking_scores([[1, 0], [1, 0]], [0, 1], [0, 1], k=2)["recall@1"]
    0.5
    """
    k = check_int(k, "k", minimum=1)
    ranked = np.asarray(ranked)
    if ranked.ndim != 2 or ranked.dtype.kind not in "iu":
        raise ValueError(f"ranked must be integer document indices of shape (n_queries, K); "
                         f"got {describe(ranked)}")
    if ranked.shape[1] < k:
        raise ValueError(f"ranked holds {ranked.shape[1]} results per query; k={k} needs "
                         f"at least {k}")
    queries = np.asarray(query_groups)
    documents = np.asarray(document_groups)
    if len(queries) != len(ranked):
        raise ValueError(f"query_groups has {len(queries)} entries for {len(ranked)} queries")
    if len(ranked) and (ranked.max() >= len(documents) or ranked.min() < -1):
        raise ValueError(f"ranked names documents outside 0..{len(documents) - 1}")
    ordered = np.sort(ranked, axis=1)
    repeated = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)
    if repeated.any():
        query, at = np.argwhere(repeated)[0]
        raise ValueError(f"ranked lists document {int(ordered[query, at + 1])} more than once "
                         f"for query {int(query)} ({int(repeated.any(1).sum())} quer(y/ies) "
                         "with repeats): a ranked list holds each document once")
    top = ranked[:, :k]
    found = np.where(top >= 0, documents[np.clip(top, 0, None)] == queries[:, None], False)
    values, counts = np.unique(documents, return_counts=True)
    where = np.searchsorted(values, queries).clip(0, max(len(values) - 1, 0))
    relevant = np.where(values[where] == queries, counts[where], 0) if len(values) else \
        np.zeros(len(queries), dtype=np.int64)
    if (relevant == 0).any():
        raise ValueError(f"{int((relevant == 0).sum())} quer(y/ies) have no relevant document "
                         "(no document of their group): leave them out, they cannot be found")
    discount = 1.0 / np.log2(np.arange(2, k + 2))
    ideal = np.cumsum(discount)[np.minimum(relevant, k) - 1]
    first = np.where(found.any(1), found.argmax(1), k)
    return {"recall@1": float(found[:, 0].mean()),
            f"recall@{k}": float(found.any(1).mean()),
            f"ndcg@{k}": float(((found * discount).sum(1) / ideal).mean()),
            f"mrr@{k}": float(np.where(first < k, 1.0 / (first + 1), 0.0).mean())}
