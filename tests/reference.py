"""Brute-force, loop-by-loop reference implementations used to check the library.

Written for clarity over speed: plain Python floats and loops straight from the papers'
formulas, nothing vectorised and nothing shared with :mod:`skcontrast`.
"""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np


def unit_rows(x):
    x = np.asarray(x, dtype=np.float64)
    return [row / math.sqrt(sum(t * t for t in row)) for row in x]


def dot(a, b):
    return sum(float(s) * float(t) for s, t in zip(a, b, strict=True))


def sqdist(a, b):
    return sum((float(s) - float(t)) ** 2 for s, t in zip(a, b, strict=True))


def lse(values):
    m = max(values)
    return m + math.log(sum(math.exp(v - m) for v in values))


def info_nce(U, V, t):
    """Mean over anchors of (positive, entropy) for L(U, V), seed 000 Eq. 3."""
    U, V = unit_rows(U), unit_rows(V)
    pos = ent = 0.0
    for i in range(len(U)):
        logits = [dot(U[i], V[j]) / t for j in range(len(V))]
        pos += -logits[i]
        ent += lse(logits)
    return pos / len(U), ent / len(U)


def symmetric_info_nce(U, V, t):
    p1, e1 = info_nce(U, V, t)
    p2, e2 = info_nce(V, U, t)
    return p1 + p2, e1 + e2


def _two_view(U, V, t, drop_partner):
    Z = unit_rows(U) + unit_rows(V)
    b = len(U)
    pos = ent = 0.0
    for a in range(2 * b):
        partner = (a + b) % (2 * b)
        pos += -dot(Z[a], Z[partner]) / t
        others = [c for c in range(2 * b) if c != a and not (drop_partner and c == partner)]
        ent += lse([dot(Z[a], Z[c]) / t for c in others])
    return pos / (2 * b), ent / (2 * b)


def nt_xent(U, V, t):
    return _two_view(U, V, t, drop_partner=False)


def dcl(U, V, t):
    return _two_view(U, V, t, drop_partner=True)


def dhel(U, V, t, include_positive_view=True):
    U, V = unit_rows(U), unit_rows(V)
    b = len(U)
    pos = ent = 0.0
    for i in range(b):
        pos += -dot(U[i], V[i]) / t
        ent += lse([dot(U[i], U[j]) / t for j in range(b) if j != i])
        if include_positive_view:
            ent += lse([dot(V[i], V[j]) / t for j in range(b) if j != i])
    return pos / b, ent / b


def kcl(U, V, t):
    """Gaussian KCL terms in the authors' scaling: -2 mean K(u_i, v_i), E_u + E_v."""
    U, V = unit_rows(U), unit_rows(V)
    b = len(U)
    align = sum(math.exp(-sqdist(U[i], V[i]) / t) for i in range(b)) / b
    energy = 0.0
    for X in (U, V):
        pairs = list(combinations(range(b), 2))
        energy += sum(math.exp(-sqdist(X[i], X[j]) / t) for i, j in pairs) / len(pairs)
    return -2 * align, energy


def supcon(Z, y, t, convention="exclude", normalize=True):
    """Seed 003 Eq. 3 per anchor; returns mean (positive, entropy) under the convention."""
    Z = unit_rows(Z) if normalize else [np.asarray(z, dtype=float) for z in Z]
    n = len(Z)
    pos = ent = 0.0
    counted = 0
    for i in range(n):
        P = [j for j in range(n) if j != i and y[j] == y[i]]
        if not P:
            counted += convention == "zero"
            continue
        counted += 1
        denominator = lse([dot(Z[i], Z[k]) / t for k in range(n) if k != i])
        pos += sum(-dot(Z[i], Z[j]) / t for j in P) / len(P)
        ent += denominator
    counted = max(counted, 1)
    return pos / counted, ent / counted


def supcon_sum(Z, y, t=1.0, normalize=True):
    """Seed 003 Eq. 3 exactly: the sum over anchors of the averaged log terms."""
    Z = unit_rows(Z) if normalize else [np.asarray(z, dtype=float) for z in Z]
    n = len(Z)
    total = 0.0
    for i in range(n):
        P = [j for j in range(n) if j != i and y[j] == y[i]]
        for j in P:
            others = [k for k in range(n) if k not in (i, j)]
            inner = sum(math.exp((dot(Z[i], Z[k]) - dot(Z[i], Z[j])) / t) for k in others)
            total += math.log(1 + inner) / len(P)
    return total


def contrastive_margin(Z, y, m, averaging="separate", q=1, distance="euclidean", t=1.0):
    Z = unit_rows(Z)
    n = len(Z)
    pos, neg = [], []
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            if distance == "euclidean":
                d = math.sqrt(sqdist(Z[i], Z[j]))
            else:
                d = 1 - dot(Z[i], Z[j])
            d /= t
            if y[i] == y[j]:
                pos.append(d**q)
            else:
                neg.append(max(0.0, m / t - d) ** q)
    mean_pos = sum(pos) / len(pos) if pos else 0.0
    mean_neg = sum(neg) / len(neg) if neg else 0.0
    if averaging == "separate":
        return mean_pos, mean_neg, 1.0, 1.0
    total = len(pos) + len(neg)
    return mean_pos, mean_neg, len(pos) / total, len(neg) / total


def lower_bound(U, V, t, B):
    """Seed 002 Eq. 5 with the sums written out."""
    U, V = unit_rows(U), unit_rows(V)
    n = len(U)
    total = 0.0
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            a_ij = (dot(U[i], V[j]) - dot(U[i], V[i])) / t
            b_ij = (dot(V[i], U[j]) - dot(V[i], U[i])) / t
            total += math.log(1 + (B - 1) * math.exp(a_ij))
            total += math.log(1 + (B - 1) * math.exp(b_ij))
    return total / (B * (B - 1))
