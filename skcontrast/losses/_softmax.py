"""The base class of the softmax losses, whose entropy term is a log-sum-exp over each
anchor's candidates (InfoNCE, symmetric InfoNCE, NT-Xent, DCL, DHEL, SupCon, HCL and the
debiased loss): their form against a queue of stored embeddings, and their affinity (the
Jensen bound of Cho et al. 2023, arXiv:2307.05906, Eq. 5, generalised to the blocks each
contrasts).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from .._validation import as_float_tensor
from ._batched import pair_affinity
from ._core import LossTerms, maybe_normalize, reduce_terms
from ._objects import Loss
from ._references import reference_softmax_terms


class _SoftmaxLoss(Loss):
    """Shared by the losses whose entropy term is a log-sum-exp over candidates: their
    form against a queue and their affinity (Cho et al. 2023, Eq. 5, generalised)."""

    #: the (anchor view, candidate view) blocks of the similarity matrix it contrasts
    blocks: ClassVar[tuple[tuple[int, int], ...]] = ((0, 1), (1, 0))
    #: queue entries of the anchor's own view are not candidates
    cross_view: ClassVar[bool] = False
    #: positives are left out of the log-sum-exp
    decoupled: ClassVar[bool] = False

    def _negatives(self, batch_size: int) -> int:
        return batch_size - 1

    def affinity(self, u: Any, v: Any, batch_size: int, **overrides: Any) -> torch.Tensor:
        r"""The Jensen bound of Cho et al. 2023, Eq. 5 for this loss's candidates: with
        :math:`x = a_k^\top c_l / \tau` for every block (anchor view, candidate view) it
        contrasts and :math:`p_k = u_k^\top v_k / \tau`,
        :math:`w(k, l) = \sum_{blocks} f_{kl} + f_{lk}`,
        :math:`f_{kl} = \log(1 + N e^{x_{kl} - p_k})`, ``N`` its negatives per anchor.
        For :class:`SymmetricInfoNCE` this is :func:`pair_affinity`."""
        params = self.options(**overrides)
        if type(self).blocks == _SoftmaxLoss.blocks:  # SymmetricInfoNCE's
            return pair_affinity(u, v, batch_size, temperature=params["temperature"],
                                 normalize=params.get("normalize", True))
        t = params["temperature"]
        views = [maybe_normalize(as_float_tensor(x, name), params.get("normalize", True))
                 for x, name in ((u, "u"), (v, "v"))]
        positive = (views[0] * views[1]).sum(-1) / t
        shift = math.log(max(1, self._negatives(batch_size)))
        w: Any = 0
        for a, c in type(self).blocks:
            f = F.softplus(torch.matmul(views[a] / t, views[c].transpose(-1, -2))
                           - positive[..., :, None] + shift)
            w = w + f + f.transpose(-1, -2)
        w.diagonal(dim1=-2, dim2=-1).zero_()
        return w

    def queue_terms(self, rows: torch.Tensor, views: torch.Tensor, bank: torch.Tensor,
                    bank_views: torch.Tensor, candidates: torch.Tensor,
                    positives: torch.Tensor, **overrides: Any) -> LossTerms:
        o = self.options(**overrides)
        if self.cross_view:
            candidates = candidates & (bank_views[None, :] != views[:, None])
        positive, entropy, weight = reference_softmax_terms(
            rows, bank, candidates, candidates & positives, temperature=o["temperature"],
            decoupled=self.decoupled, normalize=o["normalize"])
        return self._reduce_queue(positive, entropy, weight, o)

    def _reduce_queue(self, positive: torch.Tensor, entropy: torch.Tensor,
                      weight: torch.Tensor, o: dict) -> LossTerms:
        return reduce_terms(positive, entropy, lambda_pos=o["lambda_pos"],
                            lambda_ent=o["lambda_ent"], reduction="mean", weight=weight)
