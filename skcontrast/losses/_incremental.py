"""Symmetric InfoNCE of batches grown one sample at a time (greedy selectors of Sreenivasan et al.
2023).

The greedy selectors BcS and ScB (Sreenivasan et al. 2023, openreview.net/forum?id=7n2dNATSHeQ, Alg.
1-2) repeatedly ask "what would the loss
:math:`\\mathcal{L}^{con}` of batch j be if sample i joined it?" for many (i, j).
Recomputing the batch loss from scratch costs O(|B_j|^2) per question. This module keeps,
for every member ``a`` of every batch, the log-sum-exps of its two anchor terms

    row_u[a] = log sum_{b in B_j} exp(u_a . v_b / t)       (anchor u_a, Eq. 3 of Sreenivasan et al.
    2023) row_v[a] = log sum_{b in B_j} exp(v_a . u_b / t)       (anchor v_a)

With ``c_a = u_a . v_i / t`` and ``c'_a = v_a . u_i / t`` for a candidate ``i`` and
``p_a = u_a . v_a / t``, the grown batch's loss is

    [ sum_a (row_u[a] + row_v[a] - 2 p_a)                   (current numerator)
      + sum_a softplus(c_a - row_u[a]) + softplus(c'_a - row_v[a])
      + softplus(LSE_a c'_a - p_i) + softplus(LSE_a c_a - p_i) ] / (|B_j| + 1)

(with balance weights, the log-sum-exps weigh ``lambda_ent`` and the ``p``'s
``lambda_pos``)

because ``logaddexp(r, c) = r + softplus(c - r)``: one question costs O(|B_j|), in
log-space, so no exponential can overflow. The value is exactly
:func:`~skcontrast.losses.symmetric_info_nce` (``directions='sum'``) of the grown batch;
the tests check this identity.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F


class GrowingBatches:
    """State of ``n_batches`` batches (each of at most ``capacity`` members) being filled.

    Parameters
    ----------
    u, v : array-like of shape (n, d)
        The paired embeddings (rows are L2-normalised here).
    n_batches, capacity : int
        How many batches, and the largest size any may reach.
    temperature : float
        Temperature of :math:`\\mathcal{L}^{con}`.
    lambda_pos, lambda_ent : float, default=1.0
        Balance weights of its positive and entropy terms (Sors et al. 2021, arXiv:2112.11743, Eq.
        5).
    """

    def __init__(self, u: Any, v: Any, n_batches: int, capacity: int,
                 temperature: float, lambda_pos: float = 1.0, lambda_ent: float = 1.0) -> None:
        u = torch.as_tensor(np.asarray(u))
        v = torch.as_tensor(np.asarray(v))
        dtype = torch.promote_types(torch.promote_types(u.dtype, v.dtype), torch.float32)
        self.u = F.normalize(u.to(dtype), dim=1)
        self.v = F.normalize(v.to(dtype), dim=1)
        self.temperature = float(temperature)
        self.lambda_pos, self.lambda_ent = float(lambda_pos), float(lambda_ent)
        self.positive = (self.u * self.v).sum(1) / self.temperature
        self.members = torch.full((n_batches, capacity), -1, dtype=torch.long)
        self.sizes = torch.zeros(n_batches, dtype=torch.long)
        self.row_u = torch.full((n_batches, capacity), -torch.inf, dtype=dtype)
        self.row_v = torch.full((n_batches, capacity), -torch.inf, dtype=dtype)
        self.numerator = torch.zeros(n_batches, dtype=dtype)

    def cross(self, candidates: Any, members: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``(u_a . v_i / t, v_a . u_i / t)`` for candidates i (rows) and members a (columns)."""
        cand_u, cand_v = self.u[candidates], self.v[candidates]
        return self.cross_from(cand_u, cand_v, members)

    def cross_from(self, cand_u: torch.Tensor, cand_v: torch.Tensor,
                   members: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`cross` for candidate embeddings already gathered."""
        scale = 1.0 / self.temperature
        cross_uv = torch.matmul(cand_v, self.u[members].T) * scale
        cross_vu = torch.matmul(cand_u, self.v[members].T) * scale
        return cross_uv, cross_vu

    def grown_losses(self, batch: Any, cross_uv: torch.Tensor, cross_vu: torch.Tensor,
                     candidates: Any) -> torch.Tensor:
        """:math:`\\mathcal{L}^{con}(B_j \\cup \\{i\\})` for each (batch, candidate) pair.

        Parameters
        ----------
        batch : int or int tensor
            Batch index ``j``, broadcast against ``candidates``.
        cross_uv, cross_vu : tensor of shape (..., L)
            From :meth:`cross`: the candidate against the first ``L`` member slots of
            its batch (entries past the batch's size are ignored).
        candidates : int or int tensor of shape (...)
        """
        width = cross_uv.shape[-1]
        batch = torch.as_tensor(batch)
        size = self.sizes[batch]
        row_u = self.row_u[batch, :width]
        row_v = self.row_v[batch, :width]
        members = self.lambda_ent * (F.softplus(cross_uv - row_u)
                                     + F.softplus(cross_vu - row_v))
        if bool((size < width).any()):
            valid = torch.arange(width) < size[..., None]
            members = torch.where(valid, members, 0.0)
            cross_uv = cross_uv.masked_fill(~valid, -torch.inf)
            cross_vu = cross_vu.masked_fill(~valid, -torch.inf)
        cand_pos = self.positive[candidates]
        candidate = self.lambda_ent * (
            torch.logaddexp(torch.logsumexp(cross_vu, -1), cand_pos)
            + torch.logaddexp(torch.logsumexp(cross_uv, -1), cand_pos)
        ) - 2 * self.lambda_pos * cand_pos
        return (self.numerator[batch] + members.sum(-1) + candidate) / (size + 1)

    def add(self, batch: int, i: int, cross_uv: torch.Tensor, cross_vu: torch.Tensor) -> None:
        """Put sample ``i`` into ``batch``; ``cross_*`` are its rows from :meth:`cross`."""
        s = int(self.sizes[batch])
        cross_uv, cross_vu = cross_uv[:s], cross_vu[:s]
        pos = self.positive[i]
        self.row_u[batch, :s] = torch.logaddexp(self.row_u[batch, :s], cross_uv)
        self.row_v[batch, :s] = torch.logaddexp(self.row_v[batch, :s], cross_vu)
        self.row_u[batch, s] = torch.logaddexp(torch.logsumexp(cross_vu, 0), pos)
        self.row_v[batch, s] = torch.logaddexp(torch.logsumexp(cross_uv, 0), pos)
        self.members[batch, s] = i
        self.sizes[batch] = s + 1
        member_pos = self.positive[self.members[batch, :s + 1]]
        self.numerator[batch] = (self.lambda_ent * (self.row_u[batch, :s + 1]
                                                    + self.row_v[batch, :s + 1])
                                 - 2 * self.lambda_pos * member_pos).sum()

    def losses(self) -> torch.Tensor:
        """Current :math:`\\mathcal{L}^{con}` of every batch (0 for an empty one)."""
        return self.numerator / self.sizes.clamp_min(1)

    def batches(self) -> list[np.ndarray]:
        """The member indices of every batch, in order of arrival."""
        return [self.members[j, :s].numpy().copy() for j, s in enumerate(self.sizes.tolist())]
