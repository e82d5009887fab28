"""NT-Xent, SimCLR's ``2B``-way loss with within-view negatives (Chen et al., 2020;
Koromilas et al. 2024, arXiv:2405.18045); DCL (``_dcl``) is its decoupled variant.
"""

from __future__ import annotations

from typing import Any

import torch

from .._validation import store_params
from ._core import (
    LossTerms,
    check_loss_options,
    check_views,
    estimate_entropy,
    finish,
    reduce_terms,
)
from ._negatives import check_extras, self_logsumexp, with_negatives
from ._softmax import _SoftmaxLoss


def _two_view(u: torch.Tensor, v: torch.Tensor,
              temperature: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``2B`` anchors ``[u; v]`` and their positive terms ``-u_i.v_i / t`` (twice)."""
    positive = -(u * v).sum(-1) / temperature
    return torch.cat([u, v], dim=-2), torch.cat([positive, positive], dim=-1)


def nt_xent(u: Any, v: Any, *, temperature: Any = 0.1, lambda_pos: float = 1.0,
            lambda_ent: float = 1.0, normalize: bool = True, reduction: str = "mean",
            return_terms: bool = False, denominator: Any = None,
            chunk_size: Any = None, hard_negatives: Any = None, share_negatives: bool = True,
            exclude: Any = None, exclude_negatives: Any = None) -> torch.Tensor | LossTerms:
    r"""NT-Xent, the 2B-way loss of SimCLR (Chen et al., 2020; Koromilas et al. 2024,
    arXiv:2405.18045 "SimCLR").

    The ``2B`` rows of ``[u; v]`` are all anchors; an anchor's positive is its partner
    in the other view and its negatives are the ``2B - 2`` remaining rows of *both*
    views (within-view negatives included):

    .. math::

        \ell_a = -\log \frac{e^{z_a^\top z_{p(a)}/\tau}}{\sum_{b \ne a} e^{z_a^\top z_b/\tau}}

    Memory is O(B^2): one ``(2B, 2B)`` similarity matrix, where pytorch-metric-learning's
    ``NTXentLoss`` builds an O(B^3) pair table.

    Parameters
    ----------
    u, v : array-like of shape (..., B, d)
        The paired embeddings (see :func:`info_nce`).
    temperature, lambda_pos, lambda_ent, normalize, return_terms, denominator, chunk_size
        As in :func:`info_nce` (``lse`` has shape ``(..., 2B)``, over ``2B - 1``
        candidates; tiles are rows of the ``2B x 2B`` matrix).
    reduction : {'mean', 'sum', 'none'}, default='mean'
        Over the ``2B`` anchors; ``'none'`` returns shape ``(..., 2B)`` (the ``u``
        anchors first).
    hard_negatives, share_negatives, exclude, exclude_negatives
        As in :func:`info_nce`: the hard negatives are candidates of the ``u`` anchors;
        an excluded item leaves both its rows out of every anchor's sum.

    Returns
    -------
    torch.Tensor or LossTerms
    """
    return _two_view_loss(u, v, temperature, lambda_pos, lambda_ent, normalize, reduction,
                          return_terms, denominator, chunk_size, decoupled=False,
                          extras=(hard_negatives, share_negatives, exclude, exclude_negatives))


def _two_view_loss(u: Any, v: Any, temperature: Any, lambda_pos: float, lambda_ent: float,
                   normalize: bool, reduction: str, return_terms: bool, denominator: Any,
                   chunk_size: Any, decoupled: bool,
                   extras: tuple = (None, True, None, None)) -> torch.Tensor | LossTerms:
    """NT-Xent, or DCL (``decoupled``: the positive left out of the denominator)."""
    check_loss_options(temperature, lambda_pos, lambda_ent, reduction)
    u, v = check_views(u, v, normalize=normalize)
    checked = check_extras(u, extras[0], extras[1], extras[2], extras[3], normalize)
    z, positive = _two_view(u, v, temperature)
    b = u.shape[-2]
    lse = self_logsumexp(z, temperature, chunk_size, partner=b if decoupled else None,
                         mask=None if checked is None else checked.mask((0, 1), 2))
    lse = with_negatives(lse, z, checked, temperature)
    entropy = estimate_entropy(lse, 2 * b - 2 if decoupled else 2 * b - 1, denominator)
    terms = reduce_terms(positive, entropy,
                         lambda_pos=lambda_pos, lambda_ent=lambda_ent, reduction=reduction)
    return finish(terms, return_terms)


class NTXent(_SoftmaxLoss):
    r"""NT-Xent, SimCLR's ``2B``-way loss with within-view negatives: :func:`nt_xent`.

    Parameters as in :class:`InfoNCE`.
    """

    function = staticmethod(nt_xent)
    blocks = ((0, 1), (0, 0), (1, 0), (1, 1))

    def __init__(self, temperature: float = 0.1, *, learn_temperature: bool = False,
                 lambda_pos: float = 1.0, lambda_ent: float = 1.0, normalize: bool = True,
                 chunk_size: Any = "auto",
                 share_negatives: bool = True, false_negatives: Any = None) -> None:
        store_params(self, locals())

    def _negatives(self, batch_size: int) -> int:
        return 2 * batch_size - 2

    def lse_layout(self, structure: str) -> str | None:
        return "views"
