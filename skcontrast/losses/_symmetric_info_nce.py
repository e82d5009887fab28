r"""Symmetric InfoNCE, :math:`\mathcal{L}^{con} = \mathcal{L}(U,V) + \mathcal{L}(V,U)`, the loss
of CLIP (Sreenivasan et al. 2023, openreview.net/forum?id=7n2dNATSHeQ, Eq. 1-2; Cho et al.
2023, arXiv:2307.05906, Eq. 2): each direction an InfoNCE (``_info_nce``).
"""

from __future__ import annotations

from typing import Any

import torch

from .._validation import check_choice, store_params
from ._core import (
    LossTerms,
    check_loss_options,
    check_views,
    combine_last,
    estimate_entropy,
    finish,
    masked_logsumexp,
    reduce_terms,
    resolve_chunk_size,
    similarity,
)
from ._info_nce import _cross_entropy_terms, _extras, _one_sided_terms, _same_view_lse
from ._negatives import with_negatives
from ._softmax import _SoftmaxLoss

DIRECTION_MODES = ("sum", "mean")


def symmetric_info_nce(u: Any, v: Any, *, temperature: Any = 0.1, lambda_pos: float = 1.0,
                       lambda_ent: float = 1.0, normalize: bool = True,
                       reduction: str = "mean", directions: str = "sum",
                       return_terms: bool = False, denominator: Any = None,
                       chunk_size: Any = None, hard_negatives: Any = None,
                       share_negatives: bool = True, exclude: Any = None,
                       exclude_negatives: Any = None,
                       same_view_negatives: bool = False) -> torch.Tensor | LossTerms:
    r"""Symmetric contrastive loss :math:`\mathcal{L}^{con} = \mathcal{L}(U,V) + \mathcal{L}(V,U)`.

    Sreenivasan et al. 2023, Eq. 1-2 and Eq. 4 (Cho et al. 2023, arXiv:2307.05906, Eq. 2): the loss
    of CLIP, each direction an
    :func:`info_nce`. At temperature 1 and a simplex ETF with :math:`u_i = v_i`, its
    value for ``N`` pairs is :math:`2\log(1 + (N-1)e^{-N/(N-1)})` (2.3465 for N=8).

    Parameters
    ----------
    u, v : array-like of shape (..., B, d)
        The paired embeddings (see :func:`info_nce`).
    temperature, lambda_pos, lambda_ent, normalize, return_terms, chunk_size
        As in :func:`info_nce` (tiles cover the rows and the columns of ``U V^T``).
    denominator : callable or None, default=None
        As in :func:`info_nce`; ``lse`` has shape ``(..., 2, B)`` (the directions first).
    reduction : {'mean', 'sum', 'none'}, default='mean'
        Over the ``B`` anchors *within* each direction. ``'none'`` returns per-anchor
        losses of shape ``(..., 2, B)``: index 0 holds the anchors ``u_i`` of
        :math:`\mathcal{L}(U,V)`, index 1 the anchors ``v_i`` of :math:`\mathcal{L}(V,U)`.
    directions : {'sum', 'mean'}, default='sum'
        How the two directions are combined. ``'sum'`` is :math:`\mathcal{L}^{con}` of
        the papers (Sreenivasan et al. 2023; Cho et al. 2023); ``'mean'`` is the convention of CLIP
        / open_clip, ``(L_i2t + L_t2i) / 2``, exactly half of it.
    hard_negatives, share_negatives, exclude, exclude_negatives, same_view_negatives
        As in :func:`info_nce`; the hard negatives join the ``U -> V`` direction (they
        are candidates for the ``u`` anchors), the exclusions both, the same-view
        negatives each its own view (GTE's query-query and document-document terms).

    Returns
    -------
    torch.Tensor or LossTerms
        Shape ``(...)``, or ``(..., 2, B)`` with ``reduction='none'``.
    """
    check_loss_options(temperature, lambda_pos, lambda_ent, reduction)
    if directions not in DIRECTION_MODES:  # refused, naming the choices
        check_choice(directions, "directions", DIRECTION_MODES)
    u, v = check_views(u, v, normalize=normalize)
    extras = _extras(u, hard_negatives, share_negatives, exclude, exclude_negatives,
                     normalize)
    chunk = resolve_chunk_size(chunk_size, u.shape[-2], v.shape[-2])
    if chunk is None and denominator is None and reduction != "none" and extras is None \
            and not same_view_negatives:
        return _cross_entropy_terms(similarity(u, v, temperature), lambda_pos, lambda_ent,
                                    reduction, directions, return_terms)
    masks = (None, None) if extras is None else (extras.mask((0,), 1), extras.mask((1,), 1))
    if chunk is None:  # one logits matrix for both directions: its rows, then its columns
        logits = similarity(u, v, temperature)
        pos = -torch.diagonal(logits, dim1=-2, dim2=-1)
        positive = torch.stack([pos, pos], dim=-2)
        lse = torch.stack([masked_logsumexp(matrix, None if mask is None else mask.block())
                           for matrix, mask in zip((logits, logits.transpose(-1, -2)), masks,
                                                   strict=True)], dim=-2)
    else:
        pos_uv, ent_uv = _one_sided_terms(u, v, temperature, chunk, masks[0])
        pos_vu, ent_vu = _one_sided_terms(v, u, temperature, chunk, masks[1])
        positive, lse = torch.stack([pos_uv, pos_vu], dim=-2), torch.stack([ent_uv, ent_vu],
                                                                            dim=-2)
    if extras is not None and extras.negatives is not None:
        lse = torch.stack([with_negatives(lse[0], u, extras, temperature), lse[1]])
    if same_view_negatives:
        lse = torch.logaddexp(lse, torch.stack([
            _same_view_lse(u, 0, extras, temperature, chunk_size),
            _same_view_lse(v, 1, extras, temperature, chunk_size)]))
    entropy = estimate_entropy(lse, u.shape[-2], denominator)
    terms = reduce_terms(positive, entropy, lambda_pos=lambda_pos, lambda_ent=lambda_ent,
                         reduction=reduction)
    if reduction != "none":
        terms = combine_last(terms, directions)
    return finish(terms, return_terms)


class SymmetricInfoNCE(_SoftmaxLoss):
    r"""The symmetric loss :math:`\mathcal{L}^{con} = \mathcal{L}(U,V) + \mathcal{L}(V,U)`
    of Sreenivasan et al. 2023 (Eq. 1-2) and CLIP: :func:`symmetric_info_nce`.

    Parameters
    ----------
    temperature, learn_temperature, lambda_pos, lambda_ent, normalize, chunk_size
        As in :class:`InfoNCE`.
    share_negatives, false_negatives, same_view_negatives
        As in :class:`InfoNCE`.
    directions : {'sum', 'mean'}, default='sum'
        ``'sum'``: :math:`\mathcal{L}^{con}` of the papers; ``'mean'``: CLIP's convention,
        half of it.
    """

    function = staticmethod(symmetric_info_nce)
    cross_view = True

    def __init__(self, temperature: float = 0.1, *, learn_temperature: bool = False,
                 lambda_pos: float = 1.0, lambda_ent: float = 1.0, normalize: bool = True,
                 directions: str = "sum", chunk_size: Any = "auto",
                 share_negatives: bool = True, false_negatives: Any = None,
                 same_view_negatives: bool = False) -> None:
        store_params(self, locals())

    def lse_layout(self, structure: str) -> str | None:
        return "directions"

    def _reduce_queue(self, positive: torch.Tensor, entropy: torch.Tensor,
                      weight: torch.Tensor, o: dict) -> LossTerms:
        check_choice(o["directions"], "directions", DIRECTION_MODES)
        positive, entropy, weight = (t.reshape(2, -1) for t in (positive, entropy, weight))
        return combine_last(super()._reduce_queue(positive, entropy, weight, o),
                            o["directions"])
