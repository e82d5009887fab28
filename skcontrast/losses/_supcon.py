"""Supervised contrastive loss, SupCon (Khosla et al., 2020), as the batch loss of Kini et
al. 2023, arXiv:2306.07960.
"""

from __future__ import annotations

from typing import Any

import torch

from .._validation import check_choice, check_positive, store_params
from ._core import (
    LossTerms,
    check_labelled,
    check_loss_options,
    class_codes,
    class_sums,
    estimate_entropy,
    finish,
    reduce_terms,
    scale_terms,
)
from ._negatives import self_logsumexp
from ._softmax import _SoftmaxLoss

NO_POSITIVE_CONVENTIONS = ("exclude", "zero")


def supcon(z: Any, y: Any, *, temperature: Any = 0.1, lambda_pos: float = 1.0,
           lambda_ent: float = 1.0, normalize: bool = True, reduction: str = "mean",
           base_temperature: float | None = None, anchors_without_positives: str = "exclude",
           return_terms: bool = False, denominator: Any = None,
           chunk_size: Any = None) -> torch.Tensor | LossTerms:
    r"""Supervised contrastive loss (Khosla et al., 2020), as the batch loss of Kini et al. 2023,
    Eq. 3.

    For anchor :math:`i` with :math:`P(i)` the other rows of its class,

    .. math::

        \ell_i = \frac{1}{|P(i)|} \sum_{j \in P(i)}
                 -\log \frac{e^{h_i^\top h_j/\tau}}{\sum_{\ell \ne i} e^{h_i^\top h_\ell/\tau}}

    (the ":math:`\mathcal{L}_{out}`" form, where the denominator runs over every other
    row of the batch). Kini et al. 2023, Eq. 3 and Eq. 10 are the *sum* over anchors
    (``reduction='sum'``); Khosla et al. average (``reduction='mean'``, the default).

    Parameters
    ----------
    z : array-like of shape (..., B, d)
        Embeddings; with several views, stack them as extra rows and repeat the labels.
    y : array-like of shape (..., B)
        Class labels (integers; other types are encoded).
    temperature, lambda_pos, lambda_ent, normalize, return_terms
        As in :func:`info_nce`; ``positive`` is the mean of :math:`-h_i^\top h_j/\tau`
        over :math:`P(i)`, ``entropy`` the log-sum-exp of the denominator.
    reduction : {'mean', 'sum', 'none'}, default='mean'
        Over the anchors counted by ``anchors_without_positives``; ``'none'`` returns
        shape ``(..., B)``.
    base_temperature : float or None, default=None
        ``None`` (the default) applies no factor, as Kini et al. 2023 writes the loss. A number
        multiplies the loss by ``temperature / base_temperature``, the convention of
        Khosla et al.'s reference implementation, which uses ``0.07``.
    anchors_without_positives : {'exclude', 'zero'}, default='exclude'
        An anchor whose class has no other member in the batch has no defined loss.
        ``'exclude'`` (default) leaves it out of the mean, as pytorch-metric-learning
        does; ``'zero'`` counts it as a zero in the mean, as the reference
        implementation of Khosla et al. does. The two agree for ``reduction='sum'``.
        If no anchor of a batch has a positive, its loss is 0.
    denominator : callable or None, default=None
        ``f(lse, count)``: replaces each anchor's log-sum-exp over its ``B - 1``
        candidates (shape ``(..., B)``) by another estimate, e.g. the moving average of
        :class:`skcontrast.memory.SogCLRMemory`.
    chunk_size : int, 'auto' or None, default=None
        Build the denominators ``chunk_size`` anchors at a time: memory O(B (d +
        chunk_size)) instead of O(B^2), with the dense loss's values and gradients, and
        ``'auto'`` as in :func:`info_nce`.

    Returns
    -------
    torch.Tensor or LossTerms
    """
    check_loss_options(temperature, lambda_pos, lambda_ent, reduction)
    check_choice(anchors_without_positives, "anchors_without_positives",
                 NO_POSITIVE_CONVENTIONS)
    if base_temperature is not None:
        check_positive(base_temperature, "base_temperature")
    z, y = check_labelled(z, y, normalize=normalize)
    scaled = z / temperature
    class_sum, class_size = class_sums(z, class_codes(y))
    n_positives = class_size - 1
    has_positive = (n_positives > 0).to(z.dtype)
    # sum_{j in P(i)} h_i.h_j / tau from the class sums: no B x B label mask is needed
    positive = -(scaled * (class_sum - z)).sum(-1) / n_positives.clamp_min(1)
    entropy = estimate_entropy(self_logsumexp(z, temperature, chunk_size), z.shape[-2] - 1,
                               denominator)
    exclude = anchors_without_positives == "exclude"
    terms = reduce_terms(positive * has_positive, entropy * has_positive,
                         lambda_pos=lambda_pos, lambda_ent=lambda_ent, reduction=reduction,
                         weight=has_positive if exclude else None)
    if base_temperature is not None:
        terms = scale_terms(terms, temperature / base_temperature)
    return finish(terms, return_terms)


class SupCon(_SoftmaxLoss):
    r"""Supervised contrastive loss (Khosla et al., 2020; Kini et al. 2023, arXiv:2306.07960, Eq.
    3): :func:`supcon`.

    Parameters
    ----------
    temperature, learn_temperature, lambda_pos, lambda_ent, normalize, chunk_size
        As in :class:`InfoNCE`.
    base_temperature : float or None, default=None
        ``None``: no factor (Kini et al. 2023); a number multiplies the loss by
        ``temperature / base_temperature`` (Khosla et al.'s code, 0.07).
    anchors_without_positives : {'exclude', 'zero'}, default='exclude'
        How an anchor whose class has no other member in the batch counts.
    """

    function = staticmethod(supcon)
    labelled = True
    blocks = ((0, 1), (0, 0), (1, 0), (1, 1))

    def __init__(self, temperature: float = 0.1, *, learn_temperature: bool = False,
                 lambda_pos: float = 1.0, lambda_ent: float = 1.0, normalize: bool = True,
                 base_temperature: float | None = None,
                 anchors_without_positives: str = "exclude",
                 chunk_size: Any = "auto") -> None:
        store_params(self, locals())

    def _negatives(self, batch_size: int) -> int:
        return 2 * batch_size - 2

    def lse_layout(self, structure: str) -> str | None:
        return {"pairs": "views", "single": "anchors", "crops": "crops"}[structure]

    def _reduce_queue(self, positive: torch.Tensor, entropy: torch.Tensor,
                      weight: torch.Tensor, o: dict) -> LossTerms:
        check_choice(o["anchors_without_positives"], "anchors_without_positives",
                     NO_POSITIVE_CONVENTIONS)
        if o["anchors_without_positives"] == "zero":
            weight = torch.ones_like(weight)
        terms = super()._reduce_queue(positive, entropy, weight, o)
        if o["base_temperature"] is not None:
            terms = scale_terms(terms, o["temperature"] / o["base_temperature"])
        return terms
