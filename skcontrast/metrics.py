"""Retrieval metrics and scikit-learn compatible scorers for embeddings.

Metrics take embeddings (NumPy arrays or torch tensors, rows are items) and return
floats. Scorers are plain callables ``scorer(estimator, X, y=None)`` — what
:class:`~sklearn.model_selection.GridSearchCV` accepts for ``scoring`` — because
:func:`sklearn.metrics.make_scorer` can only call ``predict``, not ``transform``.
They follow scikit-learn's sign convention: greater is better, so gaps and distances
are negated.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from . import geometry
from ._validation import (
    check_choice,
    check_int,
    check_labels,
    check_matrix,
    class_sums,
    describe,
    unit_rows,
)


def _rows(x: Any, name: str) -> np.ndarray:
    """Checked float64 rows of ``x``, unit-normalised (zero rows stay zero)."""
    return unit_rows(check_matrix(x, name))


def _pair(U: Any, V: Any) -> tuple[np.ndarray, np.ndarray]:
    U, V = _rows(U, "U"), _rows(V, "V")
    if U.shape != V.shape:
        raise ValueError(f"U and V must have the same shape (row i of V is the match of row i "
                         f"of U); got U.shape={U.shape} and V.shape={V.shape}")
    return U, V


def tie_tolerance(d: int) -> float:
    """How close two cosine similarities of ``d``-dimensional rows must be to tie.

    Every retrieval metric here decides on float64 similarities of the unit rows, and
    two that differ by at most ``4 (d + 2) 2^-53`` (about 2e-14 at ``d = 32``) are a tie,
    counted against the query. That is the float64 rounding of a dot product of unit
    vectors, both ways, with the normalisation's: so equal similarities computed in
    different orders (a duplicate, or a rescaled copy, of an item at another place) are
    ties wherever they stand, and results do not depend on the order of the data.
    """
    return 4 * (d + 2) * 2.0**-53


def _matching_ranks(queries: np.ndarray, gallery: np.ndarray) -> np.ndarray:
    """Rank of gallery[i] among all gallery items for query i (0 = first).

    Ties (:func:`tie_tolerance`) count against the query (pessimistic), so collapsed
    embeddings score 0, not 1.
    """
    ranks = np.empty(len(queries), dtype=np.int64)
    step = geometry.block_rows(len(gallery))
    tie = tie_tolerance(queries.shape[1])
    for start in range(0, len(queries), step):
        block = queries[start:start + step] @ gallery.T
        rows = np.arange(len(block))
        correct = block[rows, start + rows]
        ranks[start:start + len(block)] = (block >= correct[:, None] - tie).sum(1) - 1
    return ranks


def recall_at_k(U: Any, V: Any, k: int = 1, direction: str = "both") -> float:
    """Pair-retrieval recall@k: how often the true partner is among the ``k`` nearest.

    Query ``u_i`` searches the gallery ``V`` by cosine similarity and succeeds if
    ``v_i`` ranks in the top ``k`` (and the other way round for ``v_i``). Ties
    (:func:`tie_tolerance`) are counted against the query. Memory is O(block * n).

    Parameters
    ----------
    U, V : array-like of shape (n, d)
        Embeddings of the two views; row ``i`` of ``V`` is the match of row ``i`` of ``U``.
    k : int, default=1
    direction : {'both', 'u2v', 'v2u'}, default='both'
        ``'both'`` averages the two directions (image-to-text and text-to-image).

    Returns
    -------
    float in [0, 1]

    Examples
    --------
    >>> import numpy as np
    >>> from skcontrast.metrics import recall_at_k
    >>> X = np.random.default_rng(0).normal(size=(50, 8))
    >>> recall_at_k(X, X)
    1.0
    """
    U, V = _pair(U, V)
    k = check_int(k, "k", minimum=1)
    check_choice(direction, "direction", ("both", "u2v", "v2u"))
    found = {name: float(np.mean(_matching_ranks(a, b) < k))
             for name, a, b in (("u2v", U, V), ("v2u", V, U)) if direction in (name, "both")}
    return float(np.mean(list(found.values())))


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


class _Retrieval(NamedTuple):
    """Per query: relevant references ``R``, ``sum_{k<=R} P(k) rel(k)``, relevant items
    in the top ``R``, and whether the nearest reference is relevant."""

    r: np.ndarray
    precision_sums: np.ndarray
    hits: np.ndarray
    first: np.ndarray


def _top(x: torch.Tensor, width: int, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``x.topk(width, dim=1)`` in cheaper passes on wide rows whose length is a
    multiple of ``group``. The columns fall into groups of ``group`` (column ``j`` with
    ``j + m``, ``j + 2m``, ...: strided, so that their maxima are an elementwise maximum
    of contiguous slices). A row's ``width`` largest entries lie in its ``width`` groups
    with the largest maxima (a group left out has ``width`` groups whose maxima are at
    least its own, so none of its entries can rank higher): the top-k runs on the group
    maxima (by the same rule, while they are still wide), then on those groups' entries.
    Equal values may come from other columns than ``topk``'s; the values are the same."""
    rows, n = x.shape
    if n < 64 * width or n % group:
        return x.topk(width, dim=1)
    m = n // group
    grouped = x.view(rows, group, m)
    _, groups = _top(grouped.amax(1), width, group)
    members = grouped.gather(2, groups[:, None, :].expand(-1, group, -1))
    values, where = members.reshape(rows, group * width).topk(width, dim=1)
    return values, (where // width) * m + groups.gather(1, where % width)


class _Screen:
    """Exact top-k candidates from a bfloat16 product (on CPUs that multiply bfloat16
    faster than float32, e.g. with AVX-512 BF16).

    The product of the bfloat16-rounded rows, accumulated in float32, is within ``a`` of
    the float64 similarity: by Cauchy-Schwarz ``|q.g - q'.g'| <= |q - q'| |g| +
    |q'| |g - g'|`` for the rounded ``q'``, ``g'``, plus the float32 sums' error, bounded
    by ``|q'| |g'|`` times ``d`` unit roundoffs. Its rounding to bfloat16 is monotone, so
    every reference whose true similarity reaches the ``k``-th largest has a rounded one
    of at least the ``k``-th largest rounded one, less ``2a`` and one bfloat16 rounding
    of that value. Those candidates (a few times ``k`` on real data) are ranked by their
    float32 similarity, as the dense path ranks all references. A block that
    needs more candidates than a few thousand (collapsed embeddings) takes the dense
    float32 product instead.
    """

    MIN_COLUMNS = 20_000  # measured: 1.35 s against 1.5 s at 20k; slower at 10k
    WIDTH = 64  # candidates per query tried first (grown by half while too few)
    SHARE = 8  # at most 1/SHARE of the references (and 4,096) as candidates per query
    GROUP = 8  # references per group of the top-k's first pass (see _top)
    _faster: bool | None = None

    def __init__(self, Q: np.ndarray, G: np.ndarray, Qt: torch.Tensor,
                 Gt: torch.Tensor) -> None:
        """``Q``, ``G``: the float64 unit rows; ``Qt``, ``Gt``: the dense path's float32
        copies, which rank the candidates."""
        q, g = torch.from_numpy(Q), torch.from_numpy(G)
        pad = torch.zeros((-len(G) % self.GROUP**2, G.shape[1]), dtype=torch.bfloat16)
        self.Q16, self.G16 = q.bfloat16(), torch.cat([g.bfloat16(), pad])
        self.Q, self.G = Qt, Gt
        q16, g16 = self.Q16.double(), self.G16[:len(G)].double()
        q16_norm = q16.norm(dim=1)
        self.a = 1.01 * ((q - q16).norm(dim=1) * g.norm(dim=1).max()
                         + q16_norm * (g - g16).norm(dim=1).max()
                         + q16_norm * g16.norm(dim=1).max() * Q.shape[1] * 2.0**-23) + 1e-7
        self.width = self.WIDTH

    @classmethod
    def worth_it(cls, columns: int) -> bool:
        """Large enough, and bfloat16 products are faster here (measured once)."""
        if columns < cls.MIN_COLUMNS:
            return False
        if cls._faster is None:
            a, b = torch.full((512, 128), 0.5), torch.full((128, 8192), 0.25)

            def best(x: torch.Tensor, y: torch.Tensor) -> float:
                times = []
                for _ in range(4):
                    start = time.perf_counter()
                    x @ y
                    times.append(time.perf_counter() - start)
                return min(times[1:])

            cls._faster = 1.5 * best(a.bfloat16(), b.bfloat16()) < best(a, b)
        return cls._faster

    def candidates(self, start: int, stop: int, kept: int, same: bool, slack: float
                   ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Similarities (float32, ``-inf`` where no candidate) and columns of the
        candidates of the queries ``start:stop`` (every reference within ``slack`` of
        the ``kept``-th largest similarity), or None when the dense product is the
        cheaper way."""
        n = len(self.G)
        approx = self.Q16[start:stop] @ self.G16.T
        approx[:, n:] = -torch.inf  # the padding of the references to whole groups
        if same:
            rows = torch.arange(stop - start)
            approx[rows, rows + start] = -torch.inf
        limit = min(n // self.SHARE, 4096)
        width = max(self.width, kept)
        while True:
            width = min(width, n)
            values, columns = _top(approx, width, self.GROUP)
            kth = values[:, kept - 1].double()
            floor = kth - 2.0**-8 * kth.abs() * (1 + 2.0**-7) - 2 * self.a[start:stop] - slack
            if width == n or bool((values[:, -1].double() < floor).all()):
                break  # every row's candidates are inside its top ``width``
            if width >= limit:
                return None
            width = width * 3 // 2
        outside = values.double() < floor[:, None]
        # the next block starts from what this one needed, with a margin
        self.width = max(self.WIDTH, (5 * int((~outside).sum(1).max())) // 4)
        columns.clamp_(max=n - 1)  # a padding column is never a candidate (-inf)
        rows = self.G.index_select(0, columns.view(-1)).view(*columns.shape, -1)
        exact = torch.einsum("bd,bkd->bk", self.Q[start:stop], rows)
        exact[outside] = -torch.inf  # and the query itself
        return exact, columns


def _class_retrieval(H: Any, y: Any, reference: Any = None, reference_labels: Any = None,
                     device: Any = "cpu") -> _Retrieval:
    """Class-level retrieval of every query among the references, block by block.

    Queries are the rows of ``H``; references are ``reference`` (default: the other
    rows of ``H``). Ranking is by cosine similarity, ties (:func:`tie_tolerance`)
    counted against the query (irrelevant items first among equals, also across the cut
    of the top ``R``). Candidates come from float32 products (or the bfloat16 screen);
    their order is decided in float64.
    """
    Q = _rows(H, "H")
    q_labels = check_labels(y, "y", n_samples=len(Q), rows_of="H")
    if (reference is None) != (reference_labels is None):
        raise ValueError("reference and reference_labels go together: pass both or neither")
    same = reference is None
    G = Q if same else _rows(reference, "reference")
    g_labels = q_labels if same else check_labels(reference_labels, "reference_labels",
                                                  n_samples=len(G), like=q_labels,
                                                  rows_of="reference")
    if G.shape[1] != Q.shape[1]:
        raise ValueError(f"H and reference must have the same width; got {Q.shape[1]} and "
                         f"{G.shape[1]}")
    device = _metric_device(device)
    _, codes = np.unique(np.concatenate([q_labels, g_labels]), return_inverse=True)
    q_codes = torch.from_numpy(codes[:len(Q)]).to(device)
    g_codes = torch.from_numpy(codes[len(Q):]).to(device) if not same else q_codes
    # R: references of the query's class (itself excluded)
    r_all = torch.bincount(g_codes, minlength=int(codes.max()) + 1)[q_codes] - int(same)
    out = [r_all.cpu().numpy().astype(float)] + [np.zeros(len(Q)) for _ in range(2)] + \
        [np.zeros(len(Q), dtype=bool)]
    # similarities in float32 (BLAS's fast path, half the memory of float64); the float64
    # rows decide what float32 rounding could order wrongly
    Q64, G64 = torch.from_numpy(Q).to(device), torch.from_numpy(G).to(device)
    Qt, Gt = Q64.float(), G64.float()
    screen = _Screen(Q, G, Qt, Gt) if device.type == "cpu" and _Screen.worth_it(len(G)) \
        else None
    step = geometry.block_rows(len(G), 2 * geometry.BLOCK_ELEMENTS)  # float32: same bytes
    if screen is not None:
        step = geometry.block_rows(len(G), 4 * geometry.BLOCK_ELEMENTS)  # bfloat16
    tie = tie_tolerance(Q.shape[1])
    # float32 similarities are within (d + 2) 2^-24 of the float64 ones: the candidates
    # kept are every reference that can be within a tie of the k-th largest in float64
    slack = 2 * (Q.shape[1] + 2) * 2.0**-24 + tie
    for start in range(0, len(Q), step):
        stop = min(start + step, len(Q))
        r = r_all[start:stop]
        k = max(1, int(r.max()))
        kept = min(k + 1, len(G) - int(same))
        found = None if screen is None else screen.candidates(start, stop, kept, same, slack)
        if found is None:
            sims, columns = Qt[start:stop] @ Gt.T, None
            if same:
                rows = torch.arange(stop - start, device=device)
                sims[rows, rows + start] = -torch.inf
        else:
            sims, columns = found
        values, index = _within(sims, min(k, sims.shape[1]), slack)
        if columns is not None:
            index = columns.gather(1, index)
        is_relevant = (q_codes[start:stop, None] == g_codes[index]) & (values > -torch.inf)
        # float32 rounding could only decide the order of a relevant and an irrelevant
        # item within its error of each other: those similarities are taken again in
        # float64, and every order is decided with the tie tolerance
        values = values.double()
        near = _near_other_kind(values, is_relevant, slack).nonzero()
        if len(near):
            q_rows = Q64.index_select(0, near[:, 0] + start)
            g_rows = G64.index_select(0, index[near[:, 0], near[:, 1]])
            values[near[:, 0], near[:, 1]] = (q_rows * g_rows).sum(1)
            values, order = values.sort(dim=1, descending=True, stable=True)
            is_relevant = is_relevant.gather(1, order)
        position = _positions(values, is_relevant, tie)
        counted = is_relevant & (position <= r[:, None])
        precision = is_relevant.cumsum(1).to(torch.float64) / position
        out[1][start:stop] = (precision * counted).sum(1).cpu().numpy()
        out[2][start:stop] = counted.sum(1).cpu().numpy()
        out[3][start:stop] = (is_relevant & (position == 1)).any(1).cpu().numpy()
    return _Retrieval(*out)


def _within(sims: torch.Tensor, k: int, slack: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The top ``k`` of each row and every entry within ``slack`` of its ``k``-th
    largest (values and columns, decreasing), widening the top-k while a row's last
    kept value is still that close."""
    n = sims.shape[1]
    width = min(k + 9, n)  # a few spare entries: a tie at the cut rarely needs more
    while True:
        values, index = sims.topk(width, dim=1)
        if width == n or not bool((values[:, -1] >= values[:, k - 1] - slack).any()):
            return values, index
        width = min(n, 2 * width)


def _positions(values: torch.Tensor, is_relevant: torch.Tensor, tie: float) -> torch.Tensor:
    """1-based rank of each relevant item among rows of decreasing ``values``, ties
    against the query: its rank among the relevant items, plus every irrelevant item
    whose value is at least its own less ``tie``."""
    irrelevant = (~is_relevant & (values > -torch.inf)).cumsum(1)
    ascending = (-values).contiguous()
    reach = torch.searchsorted(ascending, (tie - values).contiguous(), right=True)
    before = irrelevant.gather(1, (reach - 1).clamp_min(0))
    return is_relevant.cumsum(1) + before


def _near_other_kind(values: torch.Tensor, is_relevant: torch.Tensor,
                     slack: float) -> torch.Tensor:
    """Entries of rows of decreasing ``values`` within ``slack`` of an entry of the other
    kind (relevant or not; ``-inf`` entries are neither)."""
    valid = values > -torch.inf
    relevant, irrelevant = is_relevant & valid, ~is_relevant & valid
    ascending = (-values).contiguous()
    lo = torch.searchsorted(ascending, (-values - slack).contiguous())
    hi = torch.searchsorted(ascending, (slack - values).contiguous(), right=True)
    near = torch.zeros_like(valid)
    for kind, other in ((relevant, irrelevant), (irrelevant, relevant)):
        counts = torch.nn.functional.pad(kind.cumsum(1), (1, 0))
        near |= other & ((counts.gather(1, hi) - counts.gather(1, lo)) > 0)
    return near


def _metric_device(device: Any) -> torch.device:
    """Where the similarities are computed: ``'cpu'``, ``'cuda[:N]'`` or ``'auto'`` (a
    CUDA GPU when one is usable)."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        chosen = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be 'cpu', 'cuda[:N]' or 'auto'; got "
                         f"{describe(device)}") from None
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} was requested but no CUDA GPU is usable here; "
                         "use device='cpu' or 'auto'")
    if chosen.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu', 'cuda[:N]' or 'auto'; got {device!r}")
    return chosen


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


def _class_sums(H: Any, y: Any) -> tuple[np.ndarray, ...]:
    """Unit rows ``H``, ``(classes, codes)`` of ``y``, and each class's row sum and size."""
    H = _rows(H, "H")
    return (H, *class_sums(H, y))


def class_centres(H: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    """Classes and the mean of the unit-normalised embeddings of each: ``(classes, centres)``."""
    _, classes, _, sums, counts = _class_sums(H, y)
    return classes, sums / counts[:, None]


def nearest_centre(H: Any, classes: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """Label of the nearest class centre (Euclidean) of each unit-normalised row of ``H``."""
    H = _rows(H, "H")
    scores = 2 * H @ centres.T - (centres * centres).sum(1)[None, :]
    return classes[scores.argmax(1)]


def ncc_accuracy(H_train: Any, y_train: Any, H_test: Any, y_test: Any) -> float:
    """Nearest-class-centre accuracy: classify test rows by the closest training class mean.

    Embeddings are unit-normalised; centres are the class means of the training rows
    (the classifier that neural collapse makes optimal, Kini et al. 2023, arXiv:2306.07960).

    Returns
    -------
    float in [0, 1]
    """
    classes, centres = class_centres(H_train, y_train)
    y_test = check_labels(y_test, "y_test", like=classes)
    predicted = nearest_centre(H_test, classes, centres)
    if len(predicted) != len(y_test):
        raise ValueError(f"y_test has {len(y_test)} labels but H_test has {len(predicted)} rows")
    return float(np.mean(predicted == y_test))


def _probe_data(H_train: Any, y_train: Any, H_test: Any, y_test: Any) -> tuple[np.ndarray, ...]:
    H_train = check_matrix(H_train, "H_train")
    H_test = check_matrix(H_test, "H_test")
    y_train = check_labels(y_train, "y_train")
    y_test = check_labels(y_test, "y_test", like=y_train)
    for H, y, name in ((H_train, y_train, "train"), (H_test, y_test, "test")):
        if len(H) != len(y):
            raise ValueError(f"y_{name} has {len(y)} labels but H_{name} has {len(H)} rows")
    if H_train.shape[1] != H_test.shape[1]:
        raise ValueError(f"H_train and H_test must have the same width; got "
                         f"{H_train.shape[1]} and {H_test.shape[1]}")
    return H_train, y_train, H_test, y_test


def knn_accuracy(H_train: Any, y_train: Any, H_test: Any, y_test: Any, k: int = 5) -> float:
    """Accuracy of a k-nearest-neighbour classifier (Euclidean) fitted on the training rows.

    The usual evaluation of a self-supervised embedding (e.g. SimCLR, Chen et al. 2020)
    alongside :func:`linear_probe_accuracy`; rows are used as given, so raw features and
    PCA scores can be compared with embeddings.

    Returns
    -------
    float in [0, 1]
    """
    from sklearn.neighbors import KNeighborsClassifier

    H_train, y_train, H_test, y_test = _probe_data(H_train, y_train, H_test, y_test)
    k = check_int(k, "k", minimum=1, maximum=len(H_train))
    return float(KNeighborsClassifier(k).fit(H_train, y_train).score(H_test, y_test))


def linear_probe_accuracy(H_train: Any, y_train: Any, H_test: Any, y_test: Any) -> float:
    """Accuracy of a linear classifier trained on frozen features (the *linear probe*).

    Standardised features, multinomial logistic regression (scikit-learn's defaults,
    ``C=1``), fitted on the training rows and scored on the test rows.

    Returns
    -------
    float in [0, 1]
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    H_train, y_train, H_test, y_test = _probe_data(H_train, y_train, H_test, y_test)
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    return float(probe.fit(H_train, y_train).score(H_test, y_test))


def leave_one_out_ncc(H: Any, y: Any) -> float:
    """NCC accuracy on one labelled set, each row scored against centres without itself."""
    H, _, codes, sums, counts = _class_sums(H, y)
    centres = sums / counts[:, None]
    scores = 2 * H @ centres.T - (centres * centres).sum(1)[None, :]
    rows = np.arange(len(H))
    own = np.maximum(counts[codes] - 1, 1)
    own_centre = (sums[codes] - H) / own[:, None]
    own_score = 2 * (H * own_centre).sum(1) - (own_centre * own_centre).sum(1)
    scores[rows, codes] = np.where(counts[codes] > 1, own_score, -np.inf)
    return float(np.mean(scores.argmax(1) == codes))


# --------------------------------------------------------------------------------------
# Scorers
# --------------------------------------------------------------------------------------

def _final_step(estimator: Any, X: Any) -> tuple[Any, Any]:
    """Walk through (nested) pipelines: the last estimator and X transformed up to it."""
    from sklearn.pipeline import Pipeline

    while isinstance(estimator, Pipeline):
        if len(estimator) > 1:
            X = estimator[:-1].transform(X)
        estimator = estimator[-1]
    return estimator, X


def pair_embeddings(estimator: Any, X: Any) -> tuple[np.ndarray, np.ndarray]:
    """Embeddings ``(U, V)`` of both views of paired ``X`` from a fitted estimator.

    Works for estimators with a ``transform_pairs`` method (``ContrastiveEmbedder``)
    and pipelines ending in one.
    """
    final, Xt = _final_step(estimator, X)
    if not hasattr(final, "transform_pairs"):
        raise TypeError(f"this scorer needs paired embeddings: the estimator must have a "
                        f"transform_pairs method (e.g. ContrastiveEmbedder); got "
                        f"{type(final).__name__}")
    U, V = final.transform_pairs(Xt)
    return np.asarray(U), np.asarray(V)


def _needs_y(name: str, y: Any) -> None:
    if y is None:
        raise ValueError(f"the {name!r} scorer needs labels y")


class EmbeddingScorer:
    """A scorer ``scorer(estimator, X, y=None) -> float`` (greater is better).

    Parameters
    ----------
    name : str
    metric : callable
        ``metric(estimator, X, y) -> float`` in the metric's own sign.
    greater_is_better : bool
        ``False`` negates the metric so that scikit-learn can maximise it.
    needs : {'pairs', 'labels', 'pairs or labels'} or None, default=None
        The scorer's precondition: an estimator that embeds both views of a pair
        (``transform_pairs``, i.e. :class:`~skcontrast.ContrastiveEmbedder`), labels
        ``y``, or either. :meth:`check` tests it before any fitting.
    """

    def __init__(self, name: str, metric: Callable[[Any, Any, Any], float],
                 greater_is_better: bool = True, needs: str | None = None) -> None:
        self.name = name
        self.metric = metric
        self.greater_is_better = greater_is_better
        self.needs = needs

    def __call__(self, estimator: Any, X: Any, y: Any = None) -> float:
        value = float(self.metric(estimator, X, y))
        return value if self.greater_is_better else -value

    def check(self, estimator: Any, y: Any = None, *, labels_known: bool = False) -> None:
        """Raise when this scorer cannot score ``estimator`` (before fitting it).

        ``labels_known``: whether ``y`` is the data the search will score with (so a
        ``None`` means no labels); otherwise only the estimator is checked.
        """
        final = estimator
        from sklearn.pipeline import Pipeline

        while isinstance(final, Pipeline):
            final = final[-1]
        pairs = hasattr(final, "transform_pairs")
        has_labels = y is not None or not labels_known
        if self.needs == "pairs" and not pairs:
            raise ValueError(f"the {self.name!r} scorer compares the two views of pairs, which "
                             f"{type(final).__name__} does not embed; use it with "
                             "ContrastiveEmbedder, or choose 'ncc_accuracy', 'map@r' or "
                             "'r_map' for labelled data")
        if self.needs == "labels" and not has_labels:
            raise ValueError(f"the {self.name!r} scorer needs labels y; pass y to fit (or "
                             "choose 'recall@1' for pairs)")
        if self.needs == "pairs or labels" and not (pairs or has_labels):
            raise ValueError(f"the {self.name!r} scorer needs labels y for "
                             f"{type(final).__name__}; pass y to fit")

    def __repr__(self) -> str:
        sign = "" if self.greater_is_better else ", negated"
        return f"EmbeddingScorer({self.name!r}{sign})"

    def __reduce__(self) -> Any:
        # the named scorers hold local functions: they pickle by name (so does an
        # estimator fitted with scoring='map@r')
        if SCORERS.get(self.name) is self or re.fullmatch(r"recall@\d+", self.name):
            return (get_scorer, (self.name,))
        return super().__reduce__()


def _recall(k: int) -> Callable[[Any, Any, Any], float]:
    def metric(estimator: Any, X: Any, y: Any) -> float:
        return recall_at_k(*pair_embeddings(estimator, X), k=k)

    return metric


def _retrieval(fn: Callable[[Any, Any], float], name: str) -> Callable[[Any, Any, Any], float]:
    def metric(estimator: Any, X: Any, y: Any) -> float:
        final, _ = _final_step(estimator, X)
        if y is None and hasattr(final, "transform_pairs"):
            U, V = pair_embeddings(estimator, X)
            ids = np.arange(len(U))
            return fn(np.vstack([U, V]), np.concatenate([ids, ids]))
        _needs_y(name, y)
        return fn(estimator.transform(X), y)

    return metric


def _ncc(estimator: Any, X: Any, y: Any) -> float:
    _needs_y("ncc_accuracy", y)
    final, _ = _final_step(estimator, X)
    H = estimator.transform(X)
    if hasattr(final, "class_centres_"):
        predicted = nearest_centre(H, final.classes_, final.class_centres_)
        return float(np.mean(predicted == check_labels(y, "y", n_samples=len(H),
                                                         like=final.classes_)))
    return leave_one_out_ncc(H, y)


def _of_gap(estimator: Any, X: Any, y: Any) -> float:
    _needs_y("orthogonal_frame_gap", y)
    return geometry.orthogonal_frame_gap(estimator.transform(X), y)


SCORERS: dict[str, EmbeddingScorer] = {
    "recall@1": EmbeddingScorer("recall@1", _recall(1), needs="pairs"),
    "recall@5": EmbeddingScorer("recall@5", _recall(5), needs="pairs"),
    "etf_gap": EmbeddingScorer(
        "etf_gap", lambda e, X, y: geometry.etf_gap(*pair_embeddings(e, X)), False,
        needs="pairs"),
    "alignment": EmbeddingScorer(
        "alignment", lambda e, X, y: geometry.alignment(*pair_embeddings(e, X)), False,
        needs="pairs"),
    "uniformity": EmbeddingScorer(
        "uniformity", lambda e, X, y: geometry.uniformity(e.transform(X)), False),
    "orthogonal_frame_gap": EmbeddingScorer("orthogonal_frame_gap", _of_gap, False,
                                            needs="labels"),
    "ncc_accuracy": EmbeddingScorer("ncc_accuracy", _ncc, needs="labels"),
    "map@r": EmbeddingScorer("map@r", _retrieval(map_at_r, "map@r"), needs="pairs or labels"),
    "r_map": EmbeddingScorer("r_map", _retrieval(r_map, "r_map"), needs="pairs or labels"),
    "precision@1": EmbeddingScorer("precision@1", _retrieval(precision_at_1, "precision@1"),
                                   needs="pairs or labels"),
    "r_precision": EmbeddingScorer("r_precision", _retrieval(r_precision, "r_precision"),
                                   needs="pairs or labels"),
}


def get_scorer(name: str | Callable, estimator: Any = None
               ) -> Callable[[Any, Any, Any], float]:
    """A scorer by name, for ``GridSearchCV(scoring=...)`` (greater is better).

    Each scorer has preconditions; inside a search a scorer that cannot score becomes
    NaN with a warning per fold, so pass the ``estimator`` to check them up front:

    - ``'recall@K'``, ``'alignment'``: pairs, i.e. an estimator with
      ``transform_pairs`` (ContrastiveEmbedder);
    - ``'etf_gap'``: pairs, and ``d >= n - 1`` or ``n = 2d`` (``n`` scored pairs, ``d``
      the embedding width; see :func:`~skcontrast.geometry.etf_gap`);
    - ``'ncc_accuracy'``, ``'orthogonal_frame_gap'``: labels ``y``;
    - ``'map@r'``, ``'r_map'``, ``'precision@1'``, ``'r_precision'``: labels ``y``, or
      pairs (each pair its own class);
    - ``'uniformity'``: nothing.

    Parameters
    ----------
    name : str or callable
        ``'recall@1'``, ``'recall@5'`` (any ``'recall@K'``), ``'etf_gap'``,
        ``'alignment'``, ``'uniformity'``, ``'orthogonal_frame_gap'``,
        ``'ncc_accuracy'``, ``'map@r'``, ``'r_map'``, ``'precision@1'`` or
        ``'r_precision'``. Gaps, alignment and uniformity are negated. A callable is
        returned unchanged.
    estimator : estimator or pipeline, optional
        Check that the scorer can score it (e.g. ``'recall@1'`` refuses a
        SupConEmbedder, which embeds no pairs).

    Returns
    -------
    callable ``scorer(estimator, X, y=None) -> float``

    Examples
    --------
    >>> from skcontrast.metrics import get_scorer
    >>> get_scorer("etf_gap")
    EmbeddingScorer('etf_gap', negated)
    """
    scorer = _named_scorer(name)
    if estimator is not None and isinstance(scorer, EmbeddingScorer):
        scorer.check(estimator)
    return scorer


def is_scorer_name(name: Any) -> bool:
    """Whether ``name`` is one of skcontrast's scorer names (``'map@r'``, ``'recall@5'``)."""
    return isinstance(name, str) and (name in SCORERS or
                                      re.fullmatch(r"recall@(\d+)", name) is not None)


def resolve_scoring(scoring: Any) -> Any:
    """``scoring`` with skcontrast's scorer names replaced by their scorers: a name, a
    list or tuple of names (as scikit-learn's multi-metric form, a dict by name), or a
    dict of them; other values (scikit-learn's names, callables) are kept."""
    if is_scorer_name(scoring):
        return get_scorer(scoring)
    if isinstance(scoring, list | tuple | set) and any(map(is_scorer_name, scoring)):
        return {name: get_scorer(name) if is_scorer_name(name) else name for name in scoring}
    if isinstance(scoring, dict):
        return {key: get_scorer(value) if is_scorer_name(value) else value
                for key, value in scoring.items()}
    return scoring


def _named_scorer(name: str | Callable) -> Callable[[Any, Any, Any], float]:
    if callable(name):
        return name
    if isinstance(name, str):
        match = re.fullmatch(r"recall@(\d+)", name)
        if match and name not in SCORERS:
            k = int(match.group(1))
            return EmbeddingScorer(name, _recall(k), needs="pairs")
        if name in SCORERS:
            return SCORERS[name]
    options = ", ".join(repr(s) for s in SCORERS)
    raise ValueError(f"unknown scorer {describe(name)}; expected one of {options} "
                     f"(or 'recall@K')")
