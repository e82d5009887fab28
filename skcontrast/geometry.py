"""Reference geometries and distances to them (Sreenivasan et al. 2023,
openreview.net/forum?id=7n2dNATSHeQ, 002, 003; Wang & Isola 2020).

Embeddings are rows: ``U`` of shape ``(n, d)`` holds ``n`` vectors of dimension ``d``
(the papers write them as columns, so their ``U^T V`` is ``U @ V.T`` here). Every
function accepts NumPy arrays and torch tensors and returns NumPy arrays or floats.
"""

from __future__ import annotations

import itertools
import warnings
from functools import cache
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from ._validation import (
    check_choice,
    check_int,
    check_matrix,
    class_sums,
    unit_rows,
)

REFERENCES = ("auto", "etf", "cross_polytope")


#: Entries of one block of pairwise values (rows x all rows): memory is O(block * n),
#: about 64 MiB of float64 per block whatever n, never O(n^2).
BLOCK_ELEMENTS = 2**23


def block_rows(n_columns: int, elements: int = BLOCK_ELEMENTS) -> int:
    """Rows per block so that a block against ``n_columns`` holds ``elements``."""
    return max(1, min(4096, elements // max(n_columns, 1)))


def simplex_etf(n: int, d: int) -> np.ndarray:
    """``n`` unit vectors in R^d forming a simplex ETF (Sreenivasan et al. 2023, Def. 1; needs ``d
    >= n-1``).

    Every pair has inner product ``-1/(n-1)``: the minimiser of the contrastive loss of
    ``n`` pairs when ``n <= d + 1`` (Lemma 1 of Sreenivasan et al. 2023; Cho et al. 2023,
    arXiv:2307.05906).

    Returns
    -------
    ndarray of shape (n, d)

    Examples
    --------
    >>> from skcontrast.geometry import simplex_etf
    >>> g = simplex_etf(4, 3) @ simplex_etf(4, 3).T
    >>> round(float(g[0, 1]), 6)
    -0.333333
    """
    n = check_int(n, "n", minimum=2)
    d = check_int(d, "d", minimum=1)
    if d < n - 1:
        raise ValueError(f"a simplex ETF of n={n} vectors needs d >= n - 1 = {n - 1}; got d={d}")
    centred = np.eye(n) - 1.0 / n
    # orthonormal coordinates of the (n-1)-dimensional subspace orthogonal to (1, ..., 1)
    basis = np.linalg.svd(centred)[2][: n - 1]
    coords = unit_rows(centred @ basis.T)
    out = np.zeros((n, d))
    out[:, : n - 1] = coords
    return out


def cross_polytope(n: int, d: int) -> np.ndarray:
    """The simplex cross-polytope ``{+e_1, -e_1, ..., +e_d, -e_d}`` (Cho et al. 2023, Def. 3; ``n =
    2d``).

    Rows come in antipodal pairs (``2j`` and ``2j + 1``): each vector has one antipode
    (inner product -1) and is orthogonal to all the others. It minimises the contrastive
    loss among symmetric, antipodal configurations when ``n = 2d`` (Cho et al. 2023, Thm. 3).

    Returns
    -------
    ndarray of shape (n, d)
    """
    n = check_int(n, "n", minimum=2)
    d = check_int(d, "d", minimum=1)
    if n != 2 * d:
        raise ValueError(f"a cross-polytope has n = 2d vectors; got n={n}, d={d}")
    out = np.zeros((n, d))
    out[0::2] = np.eye(d)
    out[1::2] = -np.eye(d)
    return out


def orthogonal_frame(k: int, d: int) -> np.ndarray:
    """``k`` orthonormal, non-negative vectors in R^d (a k-OF of Kini et al. 2023, arXiv:2306.07960,
    Def. 2; ``d >= k``).

    Returns
    -------
    ndarray of shape (k, d)
        The first ``k`` standard basis vectors.
    """
    k = check_int(k, "k", minimum=1)
    d = check_int(d, "d", minimum=1)
    if d < k:
        raise ValueError(f"an orthogonal frame of k={k} vectors needs d >= k; got d={d}")
    return np.eye(k, d)


def reference_for(n: int, d: int) -> str:
    """The reference geometry of ``n`` points in R^d: ``'etf'`` or ``'cross_polytope'``."""
    if d >= n - 1:
        return "etf"
    if n == 2 * d:
        return "cross_polytope"
    raise ValueError(
        f"no reference geometry is known for n={n} points in d={d} dimensions: the simplex "
        f"ETF needs d >= n - 1 and the cross-polytope needs n = 2d (Cho et al. 2023 leaves other "
        f"cases open)")


def etf_gap(U: Any, V: Any = None, reference: str = "auto", *, normalize: bool = True) -> float:
    """Distance ``||U V^T - G_ref||_F`` to the optimal geometry (Cho et al. 2023, Sec. 6.1, Fig.
    4e).

    ``G_ref`` is the Gram matrix of the reference solution with ``u_i = v_i``: the simplex
    ETF (diagonal 1, off-diagonal ``-1/(n-1)``) when ``d >= n - 1``, the cross-polytope
    (diagonal 1, ``-1`` between antipodes, 0 elsewhere) when ``n = 2d``.

    The gap does not depend on how the points are labelled. The ETF Gram is the same
    under every permutation. For the cross-polytope, which points are antipodes is not
    fixed, so the pairing is chosen to minimise the gap: a minimum-weight perfect
    matching on the weights ``M_ij + M_ji`` of ``M = U V^T`` (solved exactly; see
    :func:`antipodal_pairing`).

    Parameters
    ----------
    U : array-like of shape (n, d)
    V : array-like of shape (n, d), optional
        Second view; ``None`` uses ``U``.
    reference : {'auto', 'etf', 'cross_polytope'}, default='auto'
    normalize : bool, default=True
        Compare unit vectors (the papers' constraint).

    Returns
    -------
    float

    Examples
    --------
    >>> from skcontrast.geometry import etf_gap, simplex_etf, cross_polytope
    >>> round(etf_gap(simplex_etf(8, 16)), 12), round(etf_gap(cross_polytope(8, 4)), 12)
    (0.0, 0.0)
    """
    U = check_matrix(U, "U", min_rows=2)
    V = U if V is None else check_matrix(V, "V", min_rows=2)
    if V.shape != U.shape:
        raise ValueError(f"U and V must have the same shape; got U.shape={U.shape} "
                         f"and V.shape={V.shape}")
    if normalize:
        U, V = unit_rows(U), unit_rows(V)
    n, d = U.shape
    kind = check_choice(reference, "reference", REFERENCES)
    if kind == "auto":
        kind = reference_for(n, d)
    elif kind == "etf" and d < n - 1:
        raise ValueError(f"reference='etf' needs d >= n - 1; got n={n}, d={d}")
    elif kind == "cross_polytope" and n % 2:
        raise ValueError(f"reference='cross_polytope' needs an even number of points; got n={n}")
    gram = U @ V.T
    if kind == "etf":
        target = np.full((n, n), -1.0 / (n - 1))
        np.fill_diagonal(target, 1.0)
    else:
        partner = antipodal_pairing(gram + gram.T)
        target = np.eye(n)
        target[np.arange(n), partner] = -1.0
    return float(np.linalg.norm(gram - target))


def antipodal_pairing(weights: Any) -> np.ndarray:
    """Minimum-weight perfect matching of ``n`` points (``n`` even) on symmetric weights.

    Returns ``partner`` with ``partner[partner[i]] == i != partner[i]`` minimising
    ``sum_i weights[i, partner[i]]``. The assignment relaxation (Hungarian method) is
    solved first; every even cycle of its optimal permutation splits into two perfect
    matchings, the cheaper of which costs no more than the cycle, so when all cycles are
    even this is an exact optimum. If an odd cycle appears (rare: it needs no nearly
    antipodal partner for some point) and ``n <= 16``, the matching is found exactly by
    dynamic programming over subsets; beyond that the odd-cycle vertices are re-paired
    among themselves and a warning says the result may not be optimal.
    """
    w = np.asarray(weights, dtype=np.float64)
    n = w.shape[0]
    if n % 2:
        raise ValueError(f"a perfect matching needs an even number of points; got {n}")
    big = np.abs(w).max() * 4 * n + 1.0
    cost = w + np.diag(np.full(n, big))
    perm = linear_sum_assignment(cost)[1]
    partner = np.full(n, -1)
    odd: list[int] = []
    seen = np.zeros(n, dtype=bool)
    for start in range(n):
        if seen[start]:
            continue
        cycle = [start]
        seen[start] = True
        while not seen[perm[cycle[-1]]]:
            cycle.append(int(perm[cycle[-1]]))
            seen[cycle[-1]] = True
        if len(cycle) % 2:
            odd.extend(cycle)
            continue
        first = sum(w[cycle[i], cycle[i + 1]] for i in range(0, len(cycle), 2))
        second = sum(w[cycle[i], cycle[(i + 1) % len(cycle)]] for i in range(1, len(cycle), 2))
        offset = 0 if first <= second else 1
        for i in range(offset, len(cycle) + offset, 2):
            a, b = cycle[i % len(cycle)], cycle[(i + 1) % len(cycle)]
            partner[a], partner[b] = b, a
    if odd and n <= 16:
        for a, b in _exact_pairs(tuple(range(n)), w):
            partner[a], partner[b] = b, a
    elif odd:
        warnings.warn(f"antipodal_pairing: {len(odd)} of {n} points lie on odd cycles of the "
                      "assignment relaxation; they are re-paired among themselves, so the "
                      "matching may not be optimal", stacklevel=2)
        if len(odd) <= 16:
            pairs = _exact_pairs(tuple(odd), w)
        else:
            pairs = _greedy_pairs(odd, w)
        for a, b in pairs:
            partner[a], partner[b] = b, a
    return partner


def _exact_pairs(vertices: tuple[int, ...], w: np.ndarray) -> list[tuple[int, int]]:
    @cache
    def best(remaining: frozenset) -> tuple[float, tuple]:
        if not remaining:
            return 0.0, ()
        first = min(remaining)
        rest = remaining - {first}
        options = []
        for other in rest:
            cost, pairs = best(rest - {other})
            options.append((cost + w[first, other], ((first, other), *pairs)))
        return min(options, key=lambda o: o[0])

    return list(best(frozenset(vertices))[1])


def _greedy_pairs(vertices: list[int], w: np.ndarray) -> list[tuple[int, int]]:
    left, pairs = set(vertices), []
    for a, b in sorted(itertools.combinations(vertices, 2), key=lambda p: w[p]):
        if a in left and b in left:
            pairs.append((a, b))
            left -= {a, b}
    return pairs


def _class_means(H: np.ndarray, y: Any) -> tuple[np.ndarray, np.ndarray]:
    _, codes, sums, counts = class_sums(H, y)
    return sums / counts[:, None], codes


def orthogonal_frame_gap(H: Any, y: Any, *, normalize: bool = True) -> float:
    """Distance of the class means to an orthogonal frame, Delta_GM of Kini et al. 2023 (Sec. 3).

    ``||G_M / ||G_M||_F - I_k / ||I_k||_F||_F`` with ``G_M = M M^T`` the Gram matrix of
    the *uncentred* class means: 0 exactly when the means are orthogonal with equal
    norms (a k-OF, Def. 2).

    Parameters
    ----------
    H : array-like of shape (n, d)
    y : array-like of shape (n,)
        Class labels (at least two classes).
    normalize : bool, default=True
        Normalise the embeddings before averaging (SupCon's unit-norm features).

    Returns
    -------
    float
    """
    H = check_matrix(H, "H")
    H = unit_rows(H) if normalize else H
    means, _ = _class_means(H, y)
    k = len(means)
    if k < 2:
        raise ValueError(f"orthogonal_frame_gap needs at least 2 classes; got {k}")
    gram = means @ means.T
    scale = np.linalg.norm(gram)
    if scale == 0:
        raise ValueError("all class means are zero; the orthogonal-frame gap is undefined")
    return float(np.linalg.norm(gram / scale - np.eye(k) / np.sqrt(k)))


def neural_collapse(H: Any, y: Any, *, normalize: bool = True) -> float:
    """Within-class variability relative to between-class, ``tr(S_W S_B^+) / k`` (NC1).

    The neural-collapse statistic of Papyan, Han & Donoho (2020), used in Kini et al. 2023
    (Fig. 10): 0 when every embedding equals its class mean (Def. 1).

    Parameters
    ----------
    H : array-like of shape (n, d)
    y : array-like of shape (n,)
    normalize : bool, default=True

    Returns
    -------
    float
    """
    H = check_matrix(H, "H", min_rows=2)
    H = unit_rows(H) if normalize else H
    means, codes = _class_means(H, y)
    k = len(means)
    if k < 2:
        raise ValueError(f"neural_collapse needs at least 2 classes; got {k}")
    within = H - means[codes]
    s_w = within.T @ within / len(H)
    centred = means - means.mean(0)
    s_b = centred.T @ centred / k
    return float(np.trace(s_w @ np.linalg.pinv(s_b)) / k)


def alignment(U: Any, V: Any, alpha: float = 2, *, normalize: bool = True) -> float:
    """Alignment ``mean_i ||u_i - v_i||^alpha`` of positive pairs (Wang & Isola, 2020).

    0 when the two views coincide; lower is better.

    Parameters
    ----------
    U, V : array-like of shape (n, d)
    alpha : float, default=2
    normalize : bool, default=True

    Returns
    -------
    float
    """
    U, V = check_matrix(U, "U"), check_matrix(V, "V")
    if U.shape != V.shape:
        raise ValueError(f"U and V must have the same shape; got U.shape={U.shape} "
                         f"and V.shape={V.shape}")
    if normalize:
        U, V = unit_rows(U), unit_rows(V)
    return float(np.mean(np.linalg.norm(U - V, axis=1) ** alpha))


def uniformity(Z: Any, t: float = 2, *, normalize: bool = True) -> float:
    """Uniformity ``log mean_{i<j} exp(-t ||z_i - z_j||^2)`` (Wang & Isola, 2020).

    More negative means more uniformly spread on the sphere; lower is better. Computed
    block by block (a running log-sum-exp): O(block * n) memory.

    Parameters
    ----------
    Z : array-like of shape (n, d), n >= 2
    t : float, default=2
    normalize : bool, default=True

    Returns
    -------
    float
    """
    Z = check_matrix(Z, "Z", min_rows=2)
    if normalize:
        Z = unit_rows(Z)
    n = len(Z)
    norms = (Z * Z).sum(1)
    top, total = -np.inf, 0.0
    step = block_rows(n)
    for start in range(0, n - 1, step):  # rows i of the block against the columns j > i
        stop = min(start + step, n - 1)
        values = Z[start:stop] @ Z[start + 1:].T  # becomes -t ||z_i - z_j||^2, in place
        values *= -2
        values += norms[start:stop, None]
        values += norms[None, start + 1:]
        np.maximum(values, 0, out=values)
        values *= -t
        rows = stop - start
        corner = values[:, :rows]
        corner[np.tril_indices(rows, -1)] = -np.inf  # j <= i
        peak = max(top, float(values.max()))
        values -= peak
        np.exp(values, out=values)
        total = total * np.exp(top - peak) + float(values.sum())
        top = peak
    return float(top + np.log(total / (n * (n - 1) / 2)))


def effective_rank(Z: Any) -> float:
    """Effective rank ``exp(H(p))``, ``p`` the normalised singular values (Roy & Vetterli 2007).

    About ``d`` for an isotropic cloud of ``n >> d`` points, 1 for points on a line
    (Koromilas et al. 2024, arXiv:2405.18045 uses it to measure dimensional collapse).

    Parameters
    ----------
    Z : array-like of shape (n, d)

    Returns
    -------
    float
    """
    Z = check_matrix(Z, "Z")
    singular = np.linalg.svd(Z, compute_uv=False)
    total = singular.sum()
    if total == 0:
        raise ValueError("Z is all zeros; its effective rank is undefined")
    p = singular[singular > 0] / total
    return float(np.exp(-(p * np.log(p)).sum()))
