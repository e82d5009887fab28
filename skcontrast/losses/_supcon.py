"""Label-driven losses: supervised contrastive (Kini et al. 2023, arXiv:2306.07960) and contrastive
margin (Sors et al. 2021, arXiv:2112.11743).
"""

from __future__ import annotations

from typing import Any

import torch

from .._validation import check_choice, check_positive
from ._core import (
    LossTerms,
    check_labelled,
    check_loss_options,
    class_codes,
    class_sums,
    estimate_entropy,
    eye_mask,
    finish,
    reduce_terms,
    scale_terms,
)
from ._negatives import self_logsumexp
from ._references import AVERAGING_MODES, average_margin_terms, margin_pair_terms

NO_POSITIVE_CONVENTIONS = ("exclude", "zero")
DISTANCES = ("euclidean", "cosine")


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


def contrastive_margin(z: Any, y: Any, *, margin: float = 0.5, temperature: Any = 1.0,
                       lambda_pos: float = 1.0, lambda_ent: float = 1.0,
                       averaging: str = "separate", distance: str = "euclidean",
                       power: int = 1, normalize: bool = True,
                       return_terms: bool = False) -> torch.Tensor | LossTerms:
    r"""Contrastive margin loss with its positive/entropy split (Sors et al. 2021, Sec. 3.2.1 and
    4.1).

    Over the ordered pairs :math:`i \ne j` of a batch, positive pairs (same label,
    set :math:`\mathcal{P}`) pay :math:`\ell_p = d_{ij}^q` and negative pairs (set
    :math:`\mathcal{E}`) pay :math:`\ell_e = \max(0, m - d_{ij})^q` (Eq. 1-2). The batch
    loss is :math:`\lambda_p \bar\ell_p + \lambda_e \bar\ell_e` (Eq. 5) with the averages
    chosen by ``averaging``.

    Parameters
    ----------
    z : array-like of shape (..., B, d)
        Embeddings.
    y : array-like of shape (..., B)
        Labels; for paired data use ``y = [0..B-1, 0..B-1]`` over the stacked views.
    margin : float, default=0.5
        :math:`m > 0`.
    temperature : float, default=1.0
        Distances and margin are divided by it, i.e. the loss is scaled by
        :math:`\tau^{-q}` — a convenience that makes every loss accept ``temperature``.
    lambda_pos, lambda_ent : float, default=1.0
        Balance weights (Sors et al. 2021, Eq. 5).
    averaging : {'separate', 'global', 'anchor'}, default='separate'
        ``'separate'``: :math:`\bar\ell_p` is the mean over :math:`\mathcal{P}` and
        :math:`\bar\ell_e` the mean over :math:`\mathcal{E}` (Eq. 7), so the balance does
        not depend on the batch size. ``'global'``: one mean over
        :math:`\mathcal{P} \cup \mathcal{E}`, i.e. the terms are weighted by
        :math:`|\mathcal{P}|/(|\mathcal{P}|+|\mathcal{E}|)` and
        :math:`|\mathcal{E}|/(|\mathcal{P}|+|\mathcal{E}|)` — with two instances per class
        exactly :math:`\lambda_p = 1/(b-1)`, :math:`\lambda_e = 1 - 1/(b-1)` (Sec. 4.1),
        which then multiply ``lambda_pos`` and ``lambda_ent``. ``'anchor'``: the sums
        over :math:`\mathcal{P}` and :math:`\mathcal{E}` divided by the number of
        anchors ``b``, the convention of the cross-batch-memory authors' code (set-up S1
        of Sors et al. 2021, App. E), under which the entropy weight grows with the number of
        negatives.
    distance : {'euclidean', 'cosine'}, default='euclidean'
        :math:`d_{ij}`: Euclidean distance, or cosine distance :math:`1 - \cos`.
    power : int, default=1
        The exponent :math:`q` (1 in Sors et al. 2021; 2 is also common).
    normalize, return_terms
        As in :func:`info_nce`. ``positive`` and ``entropy`` are the plain means
        :math:`\bar\ell_p` and :math:`\bar\ell_e` (0 when a batch has no such pair).

    Returns
    -------
    torch.Tensor or LossTerms
        Shape ``(...)``: one value per batch.
    """
    check_loss_options(temperature, lambda_pos, lambda_ent)
    check_positive(margin, "margin")
    check_choice(averaging, "averaging", AVERAGING_MODES)
    check_choice(distance, "distance", DISTANCES)
    if isinstance(power, bool) or not isinstance(power, int) or power < 1:
        raise ValueError(f"power must be a positive integer; got {power!r}")
    z, y = check_labelled(z, y, normalize=normalize)
    self_mask = eye_mask(z.shape[-2], z.device)
    same_class = y[..., :, None] == y[..., None, :]
    sums = margin_pair_terms(z, z, same_class & ~self_mask, ~same_class, margin=margin,
                             temperature=temperature, distance=distance, power=power,
                             normalize=False)
    terms = LossTerms(*average_margin_terms(sums, z.shape[-2], averaging, lambda_pos,
                                            lambda_ent))
    return finish(terms, return_terms)
