"""Adaptive selectors that look at the current embeddings: OSGD, BcS and ScB.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import torch

from .._validation import check_choice, check_int, check_real, store_params
from ..losses import GrowingBatches, Loss, LossBatch
from ._base import (
    BatchSelector,
    batch_sizes,
    check_batch_size,
    n_partition_batches,
    partition,
)


def _check_fraction(value: Any, name: str) -> float:
    return check_real(value, name, low=0, high=1)


class OSGDSelector(BatchSelector):
    """Ordered SGD: from each group of ``k`` candidate batches keep the ``q`` of largest loss.

    Cho et al. 2023, arXiv:2307.05906, Sec. 5.1-5.2 and Appendix C.3 (after Kawaguchi & Lu, 2020).

    - ``candidates='partition'`` (default, Alg. 7 "OSGD without replacement"): each epoch
      randomly partitions the samples into batches; from every run of ``k`` consecutive
      batches the ``q`` with the largest loss are yielded. An epoch thus yields about
      ``q/k`` of the partition (the last, shorter group keeps ``ceil(q * size / k)``).
    - ``candidates='random'`` (Alg. 6): each group is ``k`` batches drawn independently at
      random (all ``C(n, B)`` batches when ``k`` reaches that number); an epoch has
      ``n_groups`` groups (default: enough that ``q * n_groups * B >= n``).

    All candidates are scored in one vectorised :func:`~skcontrast.losses.batch_losses`
    call on the current embeddings. Each yielded batch is one training step; Alg. 7's
    averaging of the ``q`` selected gradients into a single step is the special case
    of the simulation with ``q = 1``.

    Parameters
    ----------
    batch_size : int, default=32
    k : int, default=1500
        Candidate batches per group (Cho et al. 2023, Appendix D.3 uses 1500).
    q : int, default=150
        Batches kept per group (150 in Appendix D.3); ``q <= k``.
    candidates : {'partition', 'random'}, default='partition'
    n_groups : int or None, default=None
        Groups per epoch with ``candidates='random'``.
    loss : Loss, str or None, default=None
        What a batch's loss is: an object of :mod:`skcontrast.losses` (or a name for
        its class with defaults). ``None``: inside an estimator, the loss being trained,
        as it is at each epoch (learned temperature, balance weights and options
        included); standalone, :class:`~skcontrast.losses.SymmetricInfoNCE` at
        temperature 0.1. Label losses need ``y`` for single-view embeddings.
    drop_last : bool, default=False
    random_state : int, numpy Generator or None, default=None

    Examples
    --------
    >>> import numpy as np
    >>> from skcontrast.selectors import OSGDSelector
    >>> X = np.random.default_rng(0).normal(size=(40, 2, 8))
    >>> sel = OSGDSelector(batch_size=4, k=5, q=2, random_state=0)
    >>> [len(b) for b in sel.split(X)]
    [4, 4, 4, 4]
    """

    def __init__(self, batch_size: int = 32, *, k: int = 1500, q: int = 150,
                 candidates: str = "partition", n_groups: int | None = None,
                 loss: Any = None, drop_last: bool = False, random_state: Any = None) -> None:
        store_params(self, locals())

    @property
    def needs_embeddings(self) -> bool:
        return True

    @property
    def partitions(self) -> bool:
        """With ``candidates='random'`` the kept batches are drawn independently."""
        return self.candidates != "random"

    def coverage(self) -> str | None:
        return f"it keeps q={self.q} of every k={self.k} candidate batches"

    def _check(self, n: int) -> tuple[int, int, int]:
        b = check_batch_size(self.batch_size, n)
        k = check_int(self.k, "k", minimum=1)
        q = check_int(self.q, "q", minimum=1, maximum=k)
        check_choice(self.candidates, "candidates", ("partition", "random"))
        return b, k, q

    def score(self, X: Any, batches: Any, y: Any = None, *,
              loss: Loss | None = None) -> np.ndarray:
        """Loss of each batch on embeddings ``X`` under the loss this selector scores with
        (:meth:`~skcontrast.selectors.BatchSelector.scoring_loss`)."""
        return self.scoring_loss(loss).score_batches(X, batches, y)

    def _select(self, X, y, groups, rng, loss=None):
        n = len(X)
        b, k, q = self._check(n)
        if self.candidates == "partition":
            pool = partition(rng.permutation(n), b, self.drop_last)
            groups_of_batches = [pool[i:i + k] for i in range(0, len(pool), k)]
        else:
            groups_of_batches = [self._random_group(n, b, k, rng) for _ in range(self._groups(n))]
        flat = [batch for group in groups_of_batches for batch in group]
        scores = loss.score_batches(X, flat, y)
        chosen, start = [], 0
        for group in groups_of_batches:
            group_scores = scores[start:start + len(group)]
            keep = self._kept(len(group), k, q)
            for j in np.argsort(-group_scores, kind="stable")[:keep]:
                chosen.append(group[j])
            start += len(group)
        return chosen

    @staticmethod
    def _kept(group_size: int, k: int, q: int) -> int:
        return q if group_size == k else max(1, math.ceil(q * group_size / k))

    def _groups(self, n: int) -> int:
        if self.n_groups is not None:
            return check_int(self.n_groups, "n_groups", minimum=1)
        return max(1, math.ceil(n / (self.q * check_batch_size(self.batch_size, n))))

    @staticmethod
    def _random_group(n: int, b: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
        if k >= math.comb(n, b):
            return [np.array(c, dtype=np.int64) for c in itertools.combinations(range(n), b)]
        return [np.sort(rng.choice(n, size=b, replace=False)).astype(np.int64)
                for _ in range(k)]

    def _n_batches(self, n, y):
        b, k, q = self._check(n)
        if self.candidates == "random":
            group = min(k, math.comb(n, b))
            return self._groups(n) * min(q, group)
        total = n_partition_batches(n, b, self.drop_last)
        full, rest = divmod(total, k)
        return full * q + (self._kept(rest, k, q) if rest else 0)


class _GreedySelector(BatchSelector):
    """Shared machinery of BcS and ScB: bins, capacities, +Rand pre-filling."""

    @property
    def needs_embeddings(self) -> bool:
        return True

    def __init__(self, batch_size: int = 32, *, random_fraction: float = 0.0,
                 loss: Any = None, random_state: Any = None) -> None:
        store_params(self, locals())

    def _setup(self, X: np.ndarray, loss: Loss) -> tuple[GrowingBatches, np.ndarray, int]:
        n = len(X)
        b = check_batch_size(self.batch_size, n)
        fraction = _check_fraction(self.random_fraction, "random_fraction")
        u, v = LossBatch.pair_views(X)
        capacity = batch_sizes(n, b, False)  # a remainder of one joins a batch
        n_bins = len(capacity)
        state = GrowingBatches(u, v, n_bins, int(capacity.max()), loss.temperature,
                               getattr(loss, "lambda_pos", 1.0), getattr(loss, "lambda_ent", 1.0))
        random_rounds = max(1, round(fraction * b))
        return state, capacity, random_rounds

    def _n_batches(self, n, y):
        return n_partition_batches(n, check_batch_size(self.batch_size, n), False)


class BcSSelector(_GreedySelector):
    """Batch-chooses-Sample greedy partition (Sreenivasan et al. 2023,
    openreview.net/forum?id=7n2dNATSHeQ, Sec. 4 and Algorithm 1).

    ``ceil(n/B)`` bins are filled in ``B`` rounds; in each round every bin in turn takes
    the remaining sample that maximises its loss :math:`\\mathcal{L}^{con}(B_j \\cup \\{i\\})`
    (the first member of each bin is random). The loss of a bin with each candidate is
    updated incrementally from per-member log-sum-exps (see
    ``skcontrast.losses._incremental``), so one choice costs ``O(|B_j| n_remaining)`` and
    the epoch O(n^2 B), as in the paper, with matrix products for the similarities.

    Parameters
    ----------
    batch_size : int, default=32
    random_fraction : float in [0, 1], default=0.0
        The "+Rand" variant: every bin is first filled with this share of random samples
        (``round(random_fraction * B)`` rounds), the rest greedily. 1.0 gives a random
        partition.
    loss : Loss, str or None, default=None
        Whose temperature and balance weights the grown batches' loss
        :math:`\\mathcal{L}^{con}` (Sreenivasan et al. 2023's objective, the one these greedy rules
        are defined for) takes. ``None``: inside an estimator, the loss being trained, as it
        is at each epoch; standalone, :class:`~skcontrast.losses.SymmetricInfoNCE`.
    random_state : int, numpy Generator or None, default=None

    Notes
    -----
    Every epoch is a partition: all batches have ``batch_size`` samples except the last,
    which holds the remainder ``n mod batch_size`` (a remainder of one joins a batch).
    """

    def _select(self, X, y, groups, rng, loss=None):
        state, capacity, random_rounds = self._setup(X, loss)
        remaining = torch.ones(len(X), dtype=torch.bool)
        for r in range(int(capacity.max())):  # rounds: each batch takes one sample
            candidates = torch.nonzero(remaining).squeeze(1)
            cand_u, cand_v = state.u[candidates], state.v[candidates]
            taken = torch.zeros(len(candidates), dtype=torch.bool)
            for j in range(len(capacity)):
                if state.sizes[j] >= capacity[j]:
                    continue
                members = state.members[j, :state.sizes[j]]
                if r < random_rounds:
                    free = torch.nonzero(~taken).squeeze(1)
                    pick = int(free[rng.integers(len(free))])
                    cross_uv, cross_vu = state.cross_from(cand_u[pick:pick + 1],
                                                          cand_v[pick:pick + 1], members)
                    cross_uv, cross_vu = cross_uv[0], cross_vu[0]
                else:
                    cross_uv, cross_vu = state.cross_from(cand_u, cand_v, members)
                    gains = state.grown_losses(j, cross_uv, cross_vu, candidates)
                    pick = int(torch.argmax(gains.masked_fill(taken, -torch.inf)))
                    cross_uv, cross_vu = cross_uv[pick], cross_vu[pick]
                i = int(candidates[pick])
                state.add(j, i, cross_uv, cross_vu)
                taken[pick] = True
                remaining[i] = False
        return state.batches()


class ScBSelector(_GreedySelector):
    """Sample-chooses-Batch greedy partition (Sreenivasan et al. 2023, Sec. 4 and Algorithm 2).

    Samples are visited in random order; each joins the bin, among those that have not
    yet received a sample in the current round, whose loss
    :math:`\\mathcal{L}^{con}(B_j \\cup \\{i\\})` it makes largest. Rounds keep the bins
    equal in size. The first member of each bin is random. Similarities of each block of
    256 visited samples to all samples come from one matrix product, and the loss of
    every bin with the new sample is updated incrementally, so the epoch costs
    O(n^2 d) flops in BLAS plus O(n^2) element operations (the paper's O(n^2)).

    Parameters
    ----------
    batch_size : int, default=32
    random_fraction : float in [0, 1], default=0.0
        The "+Rand" variant (see :class:`BcSSelector`).
    loss : Loss, str or None, default=None
        As in :class:`BcSSelector`.
    random_state : int, numpy Generator or None, default=None
    """

    _block = 256

    def _select(self, X, y, groups, rng, loss=None):
        state, capacity, random_rounds = self._setup(X, loss)
        n, n_bins = len(X), len(capacity)
        capacity = torch.as_tensor(capacity)
        order = torch.as_tensor(rng.permutation(n))
        open_in_round = torch.ones(n_bins, dtype=torch.bool)
        every = torch.arange(n)
        for start in range(0, n, self._block):
            block = order[start:start + self._block]
            cross_uv_all, cross_vu_all = state.cross(block, every)
            for t, i in enumerate(block.tolist()):
                has_room = state.sizes < capacity
                if not bool((open_in_round & has_room).any()):
                    open_in_round[:] = True
                available = torch.nonzero(open_in_round & has_room).squeeze(1)
                members = state.members[available]
                cross_uv = cross_uv_all[t][members]
                cross_vu = cross_vu_all[t][members]
                sizes = state.sizes[available]
                if int(sizes.min()) < random_rounds:
                    unfilled = torch.nonzero(sizes < random_rounds).squeeze(1)
                    row = int(unfilled[rng.integers(len(unfilled))])
                else:
                    gains = state.grown_losses(available, cross_uv, cross_vu, i)
                    row = int(torch.argmax(gains))
                j = int(available[row])
                state.add(j, i, cross_uv[row], cross_vu[row])
                open_in_round[j] = False
        return state.batches()
