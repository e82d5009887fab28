r"""Hard-negative contrastive loss, HCL: the loss-side answer to batch hardness (the debiased
loss, its :math:`\beta = 0` case, is ``_debiased_nce``).

Robinson et al. (ICLR 2021, "Contrastive learning with hard negative samples", Eq. 4
and their Algorithm) reweight each anchor's negatives by importance weights
:math:`\propto e^{\beta s/\tau}`, so that harder (more similar) negatives count more,
and debias the negative term with the class prior :math:`\tau^+` of Chuang et al.
(NeurIPS 2020, "Debiased contrastive learning", Eq. 9), which subtracts the expected
share of false negatives (same-class samples drawn as negatives):

.. math::

    R_i = \frac{\sum_{k} e^{(1+\beta) s_{ik}/\tau}}{\frac1N \sum_{k} e^{\beta s_{ik}/\tau}},
    \qquad
    N_g = \max\Big(\frac{R_i - \tau^+ N e^{s_{i+}/\tau}}{1 - \tau^+},\; N e^{-1/\tau}\Big),

    \ell_i = -\log \frac{e^{s_{i+}/\tau}}{e^{s_{i+}/\tau} + N_g}

over the ``N`` negatives ``k`` of anchor ``i``. At :math:`\beta = 0` the weights are
uniform (Chuang et al.'s debiased loss); at :math:`\beta = 0, \tau^+ = 0` it is exactly
NT-Xent (or InfoNCE, with the other view's rows as the only negatives). Everything is
computed in log space, from the same tiled log-sum-exps as those losses.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .._validation import check_choice, check_nonnegative, check_real, store_params
from ._core import (
    LossTerms,
    check_loss_options,
    check_views,
    finish,
    reduce_terms,
    resolve_chunk_size,
)
from ._negatives import (
    CandidateMask,
    candidate_logsumexp,
    check_extras,
    self_logsumexp,
    with_negatives,
)
from ._softmax import _SoftmaxLoss

NEGATIVES = ("both views", "other view")


def _negative_logsumexp(u: torch.Tensor, v: torch.Tensor, temperature: Any, chunk_size: Any,
                        negatives: str, mask: CandidateMask | None) -> torch.Tensor:
    """Each anchor's log-sum-exp of ``s / temperature`` over its negatives only (not
    those ``mask`` leaves out)."""
    if negatives == "both views":
        z = torch.cat([u, v], dim=-2)
        return self_logsumexp(z, temperature, chunk_size, partner=u.shape[-2], mask=mask)
    b = u.shape[-2]
    return candidate_logsumexp(u, v, temperature, resolve_chunk_size(chunk_size, b, b),
                               skip_self=True, mask=mask)


def hard_negative_nce(u: Any, v: Any, *, temperature: Any = 0.1, beta: float = 1.0,
                      tau_plus: float = 0.1, lambda_pos: float = 1.0,
                      lambda_ent: float = 1.0, normalize: bool = True,
                      reduction: str = "mean", negatives: str = "both views",
                      return_terms: bool = False,
                      chunk_size: Any = None, hard_negatives: Any = None,
                      share_negatives: bool = True, exclude: Any = None,
                      exclude_negatives: Any = None) -> torch.Tensor | LossTerms:
    r"""Hard-negative contrastive loss, HCL (Robinson et al., ICLR 2021; see above).

    Parameters
    ----------
    u, v : array-like of shape (..., B, d)
        The paired embeddings (see :func:`info_nce`).
    temperature : float or scalar tensor, default=0.1
    beta : float >= 0, default=1.0
        Hardness :math:`\beta`: 0 weighs every negative alike; larger values
        concentrate the negative term on the most similar negatives.
    tau_plus : float in [0, 1), default=0.1
        Class prior :math:`\tau^+`, the probability that a negative shares the anchor's
        class (Chuang et al.); 0 applies no debiasing (and no floor).
    lambda_pos, lambda_ent, normalize, return_terms
        As in :func:`info_nce`; ``positive`` is :math:`-s_{i+}/\tau` and ``entropy``
        :math:`\log(e^{s_{i+}/\tau} + N_g)`.
    reduction : {'mean', 'sum', 'none'}, default='mean'
    negatives : {'both views', 'other view'}, default='both views'
        ``'both views'``: the ``2B`` rows of ``[u; v]`` are anchors and each has the
        ``N = 2B - 2`` others but its partner as negatives, as in the authors' code
        (NT-Xent's form; ``'none'`` gives ``(..., 2B)``). ``'other view'``: anchors
        ``u_i``, negatives ``v_j, j != i`` (``N = B - 1``; InfoNCE's form).
    chunk_size : int, 'auto' or None, default=None
        Tiled log-sum-exps (see :func:`info_nce`): O(B (d + chunk_size)) memory.
    hard_negatives, share_negatives, exclude, exclude_negatives
        As in :func:`~skcontrast.losses.info_nce`: the hard negatives join the ``u``
        anchors' negatives (reweighted like the others), the excluded items leave every
        anchor's, and ``N`` counts each anchor's negatives accordingly.

    Returns
    -------
    torch.Tensor or LossTerms
    """
    check_loss_options(temperature, lambda_pos, lambda_ent, reduction)
    check_nonnegative(beta, "beta")
    check_real(tau_plus, "tau_plus", low=0, high=1, high_open=True)
    check_choice(negatives, "negatives", NEGATIVES)
    u, v = check_views(u, v, normalize=normalize)
    extras = check_extras(u, hard_negatives, share_negatives, exclude, exclude_negatives,
                          normalize)
    b = u.shape[-2]
    pair = (u * v).sum(-1) / temperature
    both = negatives == "both views"
    if both:
        pair = torch.cat([pair, pair], dim=-1)
        n: Any = 2 * b - 2
    else:
        n = b - 1
    mask = None if extras is None else extras.mask((0, 1) if both else (0,), 2 if both else 1)

    def negative_lse(t: Any) -> torch.Tensor:
        lse = _negative_logsumexp(u, v, t, chunk_size, negatives, mask)
        return with_negatives(lse, torch.cat([u, v], dim=-2) if both else u, extras, t)

    if extras is not None:  # each anchor's own count of negatives
        zero = torch.zeros(b, dtype=u.dtype, device=u.device)
        left_out = zero + extras.left_out(0)
        if both:
            left_out = torch.cat([2 * left_out, 2 * (zero + extras.left_out(1))])
        added = torch.as_tensor(extras.added, dtype=u.dtype, device=u.device).expand(b)
        added = torch.cat([added, torch.zeros_like(added)]) if both else added
        n = (n - left_out + added).clamp_min(1.0)
    log_n = torch.log(n) if isinstance(n, torch.Tensor) else math.log(n)
    log_r = negative_lse(temperature / (1 + beta))
    if beta:  # minus the log of the importance weights' mean (none: an anchor with no
        # negative left keeps log_r = -inf)
        log_w = negative_lse(temperature / beta)
        log_r = log_r - (log_w.masked_fill(~torch.isfinite(log_w), 0.0) - log_n)
    log_ng = log_r
    if tau_plus:
        log_c = math.log(tau_plus) + log_n + pair
        inside = log_c < log_r
        gap = torch.where(inside, log_c - log_r, torch.full_like(log_r, -1.0))
        log_debiased = torch.where(inside, log_r + torch.log(-torch.expm1(gap)),
                                   torch.full_like(log_r, float("-inf")))
        floor = log_n - 1 / temperature + math.log1p(-tau_plus)
        log_ng = torch.maximum(log_debiased, torch.as_tensor(floor, dtype=log_r.dtype,
                                                             device=log_r.device)) \
            - math.log1p(-tau_plus)
    entropy = torch.logaddexp(pair, log_ng)
    terms = reduce_terms(-pair, entropy, lambda_pos=lambda_pos, lambda_ent=lambda_ent,
                         reduction=reduction)
    return finish(terms, return_terms)


class HardNegativeNCE(_SoftmaxLoss):
    r"""Hard-negative contrastive loss, HCL (Robinson et al., 2021): :func:`hard_negative_nce`.

    The loss-side way to make negatives hard, beside the batch selectors: each negative
    is weighted by :math:`e^{\beta s/\tau}` and the false negatives expected under the
    class prior :math:`\tau^+` are subtracted. ``beta=0, tau_plus=0`` is NT-Xent
    (``negatives='other view'``: InfoNCE).

    Parameters
    ----------
    temperature, learn_temperature, lambda_pos, lambda_ent, normalize, chunk_size
        As in :class:`InfoNCE`.
    share_negatives, false_negatives
        As in :class:`InfoNCE` (hard negatives are reweighted like the others).
    beta : float >= 0, default=1.0
        Hardness.
    tau_plus : float in [0, 1), default=0.1
        Class prior of false negatives.
    negatives : {'both views', 'other view'}, default='both views'
    """

    function = staticmethod(hard_negative_nce)
    blocks = ((0, 1), (0, 0), (1, 0), (1, 1))

    def __init__(self, temperature: float = 0.1, *, beta: float = 1.0,
                 tau_plus: float = 0.1, learn_temperature: bool = False,
                 lambda_pos: float = 1.0, lambda_ent: float = 1.0, normalize: bool = True,
                 negatives: str = "both views", chunk_size: Any = "auto",
                 share_negatives: bool = True, false_negatives: Any = None) -> None:
        store_params(self, locals())

    def _negatives(self, batch_size: int) -> int:
        return 2 * batch_size - 2 if self.negatives == NEGATIVES[0] else batch_size - 1

    queue_terms = None  # type: ignore[assignment]  # no form against a queue
