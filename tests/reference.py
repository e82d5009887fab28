"""Brute-force, loop-by-loop reference implementations used to check the library.

Written for clarity over speed: plain Python floats and loops straight from the papers'
formulas, nothing vectorised and nothing shared with :mod:`skcontrast`.
"""

from __future__ import annotations

import math
import operator
from itertools import combinations

import numpy as np


def unit_rows(x):
    x = np.asarray(x, dtype=np.float64)
    return [row / math.sqrt(sum(t * t for t in row)) for row in x]


def dot(a, b):
    """The products of the entries as Python floats, summed left to right: the sum of
    ``float(s) * float(t)`` over the pairs, to the last bit (``tolist`` makes the floats
    at once: 4.6 against 11 µs for 64 entries)."""
    a, b = _floats(a), _floats(b)
    if len(a) != len(b):
        raise ValueError(f"dot of vectors of {len(a)} and {len(b)} entries")
    return sum(map(operator.mul, a, b))


def _floats(x):
    return x.tolist() if isinstance(x, np.ndarray) and x.ndim == 1 else [float(t) for t in x]


def sqdist(a, b):
    return sum((float(s) - float(t)) ** 2 for s, t in zip(a, b, strict=True))


def lse(values):
    m = max(values)
    return m + math.log(sum(math.exp(v - m) for v in values))


def info_nce(U, V, t):
    """Mean over anchors of (positive, entropy) for L(U, V), Sreenivasan et al. 2023, Eq. 3."""
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


# --------------------------------------------------------------------------------------
# Memories: re-derivations in float64 torch (autograd for the gradients), anchor by anchor
# --------------------------------------------------------------------------------------

class LibAUCGCLossV1:
    """LibAUC 2.0.1's ``GCLoss_v1`` (SogCLR, one process, no iSogCLR) re-derived in float64.

    Its update, read from ``libauc/losses/contrastive.py``: inputs are L2-normalised; for
    anchor ``a_i`` of view 1 (and likewise view 2) the negatives are the ``2(B-1)`` rows
    of both views other than ``i``; ``u_i`` (one per sample) is mixed with weight
    ``gamma`` (1 while the batch's ``u`` are all zero, until ``adjust_gamma`` runs with an
    epoch > 0) and the two views' values are averaged into the store; the loss is
    ``-s_pos + sum_j w_j s_j / (2(B-1))`` with detached ``w_j = exp(s_j/tau) / u_i``,
    summed over the two views and averaged over the ``B`` samples.
    """

    def __init__(self, n, tau, gamma=0.9, gamma_schedule="constant", gamma_decay_epochs=-1):
        self.u = [0.0] * n
        self.tau = tau
        self.gamma_min = gamma
        self.gamma = 1.0
        self.schedule = gamma_schedule
        self.decay_epochs = gamma_decay_epochs

    def adjust_gamma(self, epoch):
        if self.schedule == "constant":
            self.gamma = 1.0 if epoch == 0 else self.gamma_min
        elif epoch < self.decay_epochs:
            self.gamma = (1 - self.gamma_min) * 0.5 * (
                1 + math.cos(math.pi * epoch / self.decay_epochs)) + self.gamma_min
        else:
            self.gamma = self.gamma_min

    def __call__(self, h1, h2, index):
        import torch

        h1 = h1 / h1.norm(dim=1, keepdim=True)
        h2 = h2 / h2.norm(dim=1, keepdim=True)
        b = len(h1)
        index = [int(i) for i in index]
        if self.schedule == "constant" and self.gamma > self.gamma_min:
            gamma = 1.0 if sum(self.u[i] for i in index) == 0 else self.gamma_min
        else:
            gamma = self.gamma
        total = torch.zeros((), dtype=h1.dtype)
        mixed = [[0.0, 0.0] for _ in range(b)]
        for view, (a, other) in enumerate(((h1, h2), (h2, h1))):
            for i in range(b):
                negatives = [a[i] @ other[j] for j in range(b) if j != i]
                negatives += [a[i] @ a[j] for j in range(b) if j != i]
                g = sum(math.exp(float(s.detach()) / self.tau) for s in negatives) / (2 * (b - 1))
                u_i = (1 - gamma) * self.u[index[i]] + gamma * g
                mixed[i][view] = u_i
                weighted = sum((math.exp(float(s.detach()) / self.tau) / u_i) * s
                               for s in negatives)
                total = total - a[i] @ other[i] + weighted / (2 * (b - 1))
        for i in range(b):
            self.u[index[i]] = (mixed[i][0] + mixed[i][1]) / 2
        return total / b


def xbm_queue(batches_of_rows, size):
    """The contents of a FIFO of ``size`` slots after enqueuing each batch of rows in turn:
    a list of (slot, row) with the slot a row was written to, oldest writes overwritten."""
    slots = {}
    pointer = 0
    for rows in batches_of_rows:
        for row in rows:
            slots[pointer] = row
            pointer = (pointer + 1) % size
    return slots


def memory_supcon(anchors, keys, self_slots, bank, bank_keys, t, decoupled=False):
    """Mean over anchors with a positive of SupCon's anchor loss against a memory bank
    (dict slot -> (embedding, key)), the anchor's own slot left out; float64 torch."""
    import torch

    total, counted = torch.zeros((), dtype=anchors.dtype), 0
    for a in range(len(anchors)):
        z = anchors[a] / anchors[a].norm()
        others = [s for s in bank if s != self_slots[a]]
        positives = [s for s in others if bank_keys[s] == keys[a]]
        if not positives:
            continue
        unit = {s: bank[s] / bank[s].norm() for s in others}
        logits = {s: z @ unit[s] / t for s in others}
        summed = [s for s in others if not (decoupled and s in positives)]
        lse_a = torch.logsumexp(torch.stack([logits[s] for s in summed]), 0)
        total = total + lse_a - sum(logits[s] for s in positives) / len(positives)
        counted += 1
    return total / max(counted, 1)


def memory_margin(anchors, keys, self_slots, bank, bank_keys, m, averaging="separate"):
    """Contrastive margin loss (Euclidean, q=1) of anchors against a memory bank."""
    import torch

    pos, neg = [], []
    for a in range(len(anchors)):
        z = anchors[a] / anchors[a].norm()
        for s in bank:
            if s == self_slots[a]:
                continue
            d = (z - bank[s] / bank[s].norm()).norm()
            if bank_keys[s] == keys[a]:
                pos.append(d)
            else:
                neg.append(torch.relu(m - d))
    zero = torch.zeros((), dtype=anchors.dtype)
    if averaging == "anchor":
        return (sum(pos, zero) + sum(neg, zero)) / len(anchors)
    return sum(pos, zero) / max(len(pos), 1) + sum(neg, zero) / max(len(neg), 1)


def retrieval(H, y, G=None, g=None):
    """Per query with a relevant reference: (AP@R, R-mAP term, R-precision, P@1), ranking
    the references (default: the other rows of H) by cosine similarity, pessimistic on
    ties: a relevant item's position is its rank among the relevant ones plus every
    irrelevant item whose similarity is at least its own less 4 (d + 2) 2^-53 (the
    documented tie tolerance of skcontrast.metrics)."""
    Q = unit_rows(H)
    tie = 4 * (len(Q[0]) + 2) * 2.0**-53
    same = G is None
    G, g = (Q, y) if same else (unit_rows(G), g)
    out = []
    for i, q in enumerate(Q):
        others = [j for j in range(len(G)) if not (same and j == i)]
        sims = {j: dot(q, G[j]) for j in others}
        relevant = sorted((j for j in others if g[j] == y[i]), key=lambda j: -sims[j])
        irrelevant = [sims[j] for j in others if g[j] != y[i]]
        r = len(relevant)
        if r == 0:
            continue
        positions = [rank + 1 + sum(s >= sims[j] - tie for s in irrelevant)
                     for rank, j in enumerate(relevant)]
        total = sum((rank + 1) / p for rank, p in enumerate(positions) if p <= r)
        hits = sum(p <= r for p in positions)
        out.append((total / r, total / hits if hits else 0.0, hits / r,
                    float(positions[0] == 1)))
    return [sum(column) / len(out) for column in zip(*out, strict=True)]


# --------------------------------------------------------------------------------------
# SigLIP, HCL and the debiased loss: loops in float64 torch scalars (for gradients too)
# --------------------------------------------------------------------------------------

def _unit_torch(X):
    return [row / row.norm() for row in X]


def siglip(U, V, t, b, lambda_pos=1.0, lambda_ent=1.0):
    """Zhai et al. 2023 Eq. 1: -1/B sum_i sum_j log sigmoid(z_ij (u_i.v_j / t + b)),
    z_ij = +1 on the diagonal, -1 elsewhere; the diagonal terms weigh lambda_pos and the
    others lambda_ent."""
    import torch

    U, V = _unit_torch(U), _unit_torch(V)
    total = 0.0
    for i in range(len(U)):
        for j in range(len(V)):
            z = 1.0 if i == j else -1.0
            term = -torch.nn.functional.logsigmoid(z * ((U[i] * V[j]).sum() / t + b))
            total = total + (lambda_pos if i == j else lambda_ent) * term
    return total / len(U)


def hard_negative(U, V, t, beta, tau_plus, negatives="both views"):
    """Robinson et al. 2021's published estimator, anchor by anchor: importance weights
    neg**beta, reweighted negative sum, debiasing with tau_plus and its floor
    N e^{-1/t}; the mean of -log(pos / (pos + Ng)) over the anchors."""
    import torch

    U, V = _unit_torch(U), _unit_torch(V)
    b = len(U)
    if negatives == "both views":
        Z = U + V
        anchors = [(Z[a], Z[(a + b) % (2 * b)], [Z[c] for c in range(2 * b)
                                                if c not in (a, (a + b) % (2 * b))])
                   for a in range(2 * b)]
    else:
        anchors = [(U[i], V[i], [V[j] for j in range(b) if j != i]) for i in range(b)]
    total = 0.0
    for anchor, positive, others in anchors:
        pos = torch.exp((anchor * positive).sum() / t)
        neg = [torch.exp((anchor * c).sum() / t) for c in others]
        n = len(neg)
        imp = [x ** beta for x in neg]
        reweighted = sum(i * x for i, x in zip(imp, neg, strict=True)) / (sum(imp) / n)
        ng = (-tau_plus * n * pos + reweighted) / (1 - tau_plus)
        floor = n * torch.exp(-1 / torch.as_tensor(t, dtype=torch.float64))
        ng = torch.maximum(ng, floor)
        total = total - torch.log(pos / (pos + ng))
    return total / len(anchors)


def jest_brute_force(learner, reference, t, b, keep, chunk_sizes, uniforms):
    """JEST's chunked sampler (Evans et al. 2024, Sec. 2.2, Algorithm 1) by brute force.

    ``learner`` and ``reference`` are ``(U, V)`` embedding pairs of one super-batch. The
    learnability of a set of rows is the learner's summed SigLIP loss on it minus the
    reference's, each computed from scratch; each chunk keeps the rows with the largest
    "learnability the row adds to the rows chosen so far + Gumbel noise" (Gumbel top-k,
    with the given uniforms, one list per chunk).
    """
    def summed_loss(pair, rows):
        U, V = pair
        if not rows:
            return 0.0
        return float(siglip(U[rows], V[rows], t, b)) * len(rows)

    def learnability(rows):
        return summed_loss(learner, rows) - summed_loss(reference, rows)

    n = len(learner[0])
    chosen = []
    for size, draws in zip(chunk_sizes, uniforms, strict=True):
        base = learnability(chosen)
        keys = {k: learnability(sorted([*chosen, k])) - base - math.log(-math.log(float(u)))
                for k, u in enumerate(draws) if k not in chosen}
        new = sorted(keys, key=keys.get, reverse=True)[:size]
        assert len(new) == size and n >= len(chosen) + size
        chosen += new
    return chosen


def summed_pair_loss(loss, U, V, rows):
    """A loss object's mean loss on the pairs ``rows`` times their number, in float64
    (0 for fewer than two pairs: nothing to contrast)."""
    if len(rows) < 2:
        return 0.0
    return float(loss(U[list(rows)], V[list(rows)])) * len(rows)


def jest_generic_brute_force(loss, learner, reference, keep, chunk_sizes, uniforms):
    """JEST's sampler with symmetric InfoNCE, scoring sub-batches directly: the first chunk
    by each row's loss in the super-batch (its two anchors' terms), later chunks by the
    summed loss of the chosen rows plus the candidate less that of the chosen rows;
    learner minus reference. Gumbel top-k with the given uniforms."""
    n = len(learner[0])

    def score(rows):
        out = summed_pair_loss(loss, *learner, rows)
        return out - (summed_pair_loss(loss, *reference, rows) if reference else 0.0)

    def row_loss(pair, k):  # symmetric InfoNCE: -2 l_kk + LSE_j l_kj + LSE_j l_jk
        U, V = pair
        t = loss.temperature
        U, V = unit_rows(U), unit_rows(V)
        logits = [[dot(U[i], V[j]) / t for j in range(n)] for i in range(n)]
        return -2 * logits[k][k] + lse(logits[k]) + lse([logits[j][k] for j in range(n)])

    everyone = list(range(n))
    chosen = []
    for c, (size, draws) in enumerate(zip(chunk_sizes, uniforms, strict=True)):
        if c == 0:
            gains = {k: row_loss(learner, k) - (row_loss(reference, k) if reference else 0.0)
                     for k in everyone}
        else:
            base = score(chosen)
            gains = {k: score(sorted([*chosen, k])) - base
                     for k in everyone if k not in chosen}
        keys = {k: g - math.log(-math.log(float(draws[k]))) for k, g in gains.items()}
        chosen += sorted(keys, key=keys.get, reverse=True)[:size]
    return chosen


def mine_brute_force(anchors, positives, corpus, n_negatives, p, q, margin=None,
                     anchor_keys=None, positive_keys=None, corpus_keys=None,
                     groups=None, corpus_groups=None):
    """Hard negatives, one anchor at a time: rank the corpus by float64 cosine (ties by
    index), leave out the positive's and the anchor's duplicates (equal keys) and the
    pair's group, take ranks p+1..q, keep those below margin x the positive's score, and
    the first n_negatives of them (-1 where fewer)."""
    A, P, C = unit_rows(anchors), unit_rows(positives), unit_rows(corpus)
    out = []
    for i, a in enumerate(A):
        allowed = [j for j in range(len(C))
                   if corpus_keys[j] != positive_keys[i] and corpus_keys[j] != anchor_keys[i]
                   and (groups is None or corpus_groups[j] != groups[i])]
        ranked = sorted(allowed, key=lambda j, a=a: (-dot(a, C[j]), j))[p:q]
        if margin is not None:
            positive = dot(a, P[i])
            ranked = [j for j in ranked if dot(a, C[j]) < margin * positive]
        chosen = ranked[:n_negatives]
        out.append(chosen + [-1] * (n_negatives - len(chosen)))
    return out


def hybrid_scores(Q, D, q_lexical, d_lexical, weight):
    """(1 - w) cos(q, d) + w lexical(q, d), every pair in a loop."""
    Q, D = unit_rows(Q), unit_rows(D)
    return [[(1 - weight) * dot(q, d) + weight * float(lex)
             for d, lex in zip(D, row, strict=True)]
            for q, row in zip(Q, np.asarray(q_lexical @ d_lexical.T.toarray()), strict=True)]


def softmax_with_extras(kind, U, V, t, negatives=None, share=True, exclude=None,
                        exclude_negatives=None, beta=1.0, tau_plus=0.1, hcl_negatives="both views",
                        same_view=False):
    """InfoNCE ('info_nce'), symmetric InfoNCE ('symmetric'), NT-Xent, DCL or HCL ('hcl') of
    one batch, anchor by anchor, with each u anchor's hard negatives (its own, or all of
    the batch's with share) and the excluded items left out of every sum: exclude[i][j]
    says item j is not anchor i's negative (for anchors of either view), or, given as
    [for_u, for_v], each view's anchors read their own mask."""
    U, V = unit_rows(U), unit_rows(V)
    b = len(U)
    N = [] if negatives is None else [unit_rows(row) for row in negatives]
    k = len(N[0]) if N else 0
    per_view = exclude is not None and np.asarray(exclude).ndim == 3

    def out(i, j, view=0):
        if exclude is None or i == j:
            return False
        return bool(exclude[view][i][j] if per_view else exclude[i][j])

    def extra(i):
        if not N:
            return []
        pool = [N[m][c] for m in range(b) for c in range(k)] if share else \
            [N[i][c] for c in range(k)]
        return [vec for col, vec in enumerate(pool)
                if exclude_negatives is None or not exclude_negatives[i][col]]

    def anchor_loss(a, positive, candidates):
        pos = dot(a, positive) / t
        return -pos + lse([dot(a, c) / t for c in candidates])

    def own_view(Z, i, view):  # GTE: the other anchors of the same view
        return [Z[j] for j in range(b) if same_view and j != i and not out(i, j, view)]

    if kind in ("info_nce", "symmetric"):
        forward = [anchor_loss(U[i], V[i], [V[j] for j in range(b) if not out(i, j)]
                               + extra(i) + own_view(U, i, 0)) for i in range(b)]
        total = sum(forward) / b
        if kind == "symmetric":
            total += sum(anchor_loss(V[i], U[i], [U[j] for j in range(b) if not out(i, j, 1)]
                                     + own_view(V, i, 1)) for i in range(b)) / b
        return total
    Z = U + V
    losses = []
    for a in range(2 * b):
        item, partner, view = a % b, (a + b) % (2 * b), a // b
        others = [c for c in range(2 * b) if c != a and not out(item, c % b, view)]
        if kind == "hcl" and hcl_negatives == "other view":
            if a >= b:
                continue
            negs = [V[j] for j in range(b) if j != item and not out(item, j)] + extra(item)
        else:
            negs = [Z[c] for c in others if c != partner] + (extra(item) if a < b else [])
        if kind in ("nt_xent", "dcl"):
            cands = negs if kind == "dcl" else [*negs, Z[partner]]
            losses.append(anchor_loss(Z[a], Z[partner], cands))
            continue
        pos = dot(Z[a], Z[partner]) / t
        n = len(negs)
        r = sum(math.exp((1 + beta) * dot(Z[a], c) / t) for c in negs) / \
            (sum(math.exp(beta * dot(Z[a], c) / t) for c in negs) / n)
        ng = max((r - tau_plus * n * math.exp(pos)) / (1 - tau_plus), n * math.exp(-1 / t))
        losses.append(-pos + math.log(math.exp(pos) + ng))
    return sum(losses) / len(losses)
