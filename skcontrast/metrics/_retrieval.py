"""Retrieval by cosine similarity, exact and block by block: pair recall@k, and the
class-level pass (each query's relevant references among its nearest) that the ranking
metrics of :mod:`._ranking` score.

Every decision is taken on float64 similarities of the unit rows, with ties
(:func:`tie_tolerance`) counted against the query; candidates come from float32
products, or on CPUs that multiply bfloat16 faster from a bfloat16 screen
(:class:`_Screen`) that keeps every reference that can rank. Memory is O(block * n).
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import numpy as np
import torch

from .. import geometry
from .._validation import (
    check_choice,
    check_int,
    check_labels,
    check_matrix,
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
