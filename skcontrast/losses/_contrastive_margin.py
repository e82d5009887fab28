"""Contrastive margin loss with its positive/entropy split (Sors et al. 2021,
arXiv:2112.11743).
"""

from __future__ import annotations

from typing import Any

import torch

from .._validation import check_choice, check_positive, store_params
from ._core import LossTerms, check_labelled, check_loss_options, eye_mask, finish
from ._objects import Loss
from ._references import AVERAGING_MODES, average_margin_terms, margin_pair_terms

DISTANCES = ("euclidean", "cosine")


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


class ContrastiveMargin(Loss):
    r"""Contrastive margin loss with global/separate averaging (Sors et al. 2021, Sec. 3.2.1 and
    4.1): :func:`contrastive_margin`.

    Parameters
    ----------
    margin : float, default=0.5
    temperature : float, default=1.0
        Distances and margin are divided by it.
    learn_temperature : bool, default=False
    lambda_pos, lambda_ent : float, default=1.0
    averaging : {'separate', 'global', 'anchor'}, default='separate'
    distance : {'euclidean', 'cosine'}, default='euclidean'
    power : int, default=1
    normalize : bool, default=True
    """

    function = staticmethod(contrastive_margin)
    labelled = True

    def __init__(self, margin: float = 0.5, *, temperature: float = 1.0,
                 learn_temperature: bool = False, lambda_pos: float = 1.0,
                 lambda_ent: float = 1.0, averaging: str = "separate",
                 distance: str = "euclidean", power: int = 1,
                 normalize: bool = True) -> None:
        store_params(self, locals())

    def __call__(self, a: Any, b: Any, **overrides: Any) -> Any:
        overrides.pop("reduction", None)  # one value per batch, whatever the reduction
        return super().__call__(a, b, **overrides)

    def queue_terms(self, rows: torch.Tensor, views: torch.Tensor, bank: torch.Tensor,
                    bank_views: torch.Tensor, candidates: torch.Tensor,
                    positives: torch.Tensor, **overrides: Any) -> LossTerms:
        o = self.options(**overrides)
        check_choice(o["averaging"], "averaging", AVERAGING_MODES)
        check_choice(o["distance"], "distance", DISTANCES)
        sums = margin_pair_terms(rows, bank, candidates & positives, candidates & ~positives,
                                 margin=o["margin"], temperature=o["temperature"],
                                 distance=o["distance"], power=o["power"],
                                 normalize=o["normalize"])
        return LossTerms(*average_margin_terms(sums, len(rows), o["averaging"],
                                               o["lambda_pos"], o["lambda_ent"]))
