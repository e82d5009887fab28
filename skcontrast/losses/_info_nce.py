"""The InfoNCE family: one-sided, symmetric (CLIP), NT-Xent (SimCLR), DCL and DHEL.

All five share the positive/entropy split of Sors et al. 2021, arXiv:2112.11743 (Eq. 3-5): for an
anchor with positive similarity ``s_pos`` and candidate similarities ``s_k``

    positive = -s_pos / temperature
    entropy  = log sum_k exp(s_k / temperature)

and ``loss = lambda_pos * positive + lambda_ent * entropy``. With the default
``lambda_pos = lambda_ent = 1`` this is exactly the standard loss. (Sors et al. 2021 writes the
terms with the cosine *distance* ``1 - s``; the two forms differ by the constant
``(lambda_pos - lambda_ent) / temperature``, which changes no gradient.)
The entropy is a log-sum-exp, so no raw exponential can overflow at small temperatures.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .._validation import check_choice
from ._core import (
    LossTerms,
    check_loss_options,
    check_views,
    combine_last,
    estimate_entropy,
    finish,
    masked_logsumexp,
    reduce_terms,
    similarity,
)
from ._negatives import (
    CandidateMask,
    Extras,
    candidate_logsumexp,
    check_extras,
    self_logsumexp,
    with_negatives,
)
from ._tiled import resolve_chunk_size

DIRECTION_MODES = ("sum", "mean")


def _one_sided_terms(u: torch.Tensor, v: torch.Tensor, temperature: Any,
                     chunk: int | None = None, mask: CandidateMask | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-anchor terms of L(U, V): anchor u_i, positive v_i, candidates v_1..v_B but
    those ``mask`` leaves out (``chunk`` anchor rows at a time when given)."""
    positive = -(u * v).sum(-1) / temperature
    return positive, candidate_logsumexp(u, v, temperature, chunk, mask=mask)


def info_nce(u: Any, v: Any, *, temperature: Any = 0.1, lambda_pos: float = 1.0,
             lambda_ent: float = 1.0, normalize: bool = True, reduction: str = "mean",
             return_terms: bool = False, denominator: Any = None,
             chunk_size: Any = None, hard_negatives: Any = None, share_negatives: bool = True,
             exclude: Any = None, exclude_negatives: Any = None,
             same_view_negatives: bool = False) -> torch.Tensor | LossTerms:
    r"""One-sided InfoNCE loss :math:`\mathcal{L}(U, V)` (Sreenivasan et al. 2023,
    openreview.net/forum?id=7n2dNATSHeQ, Eq. 3).

    For anchor :math:`u_i` the positive is :math:`v_i` and the negatives are the other
    rows of ``v``:

    .. math::

        \ell_i = -\log \frac{e^{u_i^\top v_i/\tau}}{\sum_{j=1}^{B} e^{u_i^\top v_j/\tau}}

    Parameters
    ----------
    u, v : array-like of shape (..., B, d)
        Embeddings of the two views; row ``i`` of ``v`` is the positive of row ``i`` of
        ``u``. Leading dimensions index independent batches. NumPy arrays and torch
        tensors are accepted (any device, float32 or float64).
    temperature : float or scalar tensor, default=0.1
        :math:`\tau > 0`; a tensor may be learnable.
    lambda_pos, lambda_ent : float, default=1.0
        Balance weights of the positive and entropy terms (Sors et al. 2021, Eq. 5).
    normalize : bool, default=True
        L2-normalise the rows of ``u`` and ``v`` first (inner products become cosines).
    reduction : {'mean', 'sum', 'none'}, default='mean'
        Over the ``B`` anchors of each batch; ``'none'`` returns shape ``(..., B)``.
    return_terms : bool, default=False
        Return a :class:`LossTerms` ``(loss, positive, entropy)`` instead of the loss.
    denominator : callable or None, default=None
        ``f(lse, count)``: replaces each anchor's mini-batch log-sum-exp ``lse`` (over
        its ``count`` candidates) by another estimate of the log-denominator, e.g. the
        moving average of :class:`skcontrast.memory.SogCLRMemory`.
    chunk_size : int, 'auto' or None, default=None
        Build the log-sum-exps ``chunk_size`` anchor rows at a time (Inf-CL's tiling;
        the forward keeps what the backward needs in O(B d)): memory O(B (d +
        chunk_size)) instead of O(B^2), with the dense loss's values and gradients (no
        second derivatives). ``'auto'`` tiles only when one dense similarity matrix
        would exceed 256 MiB.
    hard_negatives : array-like of shape (B, k, d) or None, default=None
        Each ``u`` anchor's own hard negatives (mined, or a dataset's negative columns):
        candidates besides the batch, added to its log-sum-exp.
    share_negatives : bool, default=True
        Every ``u`` anchor contrasts with all ``B k`` hard negatives of the batch
        (sentence-transformers' convention); ``False``: with its own ``k``.
    exclude : bool array-like of shape (B, B) or (2, B, B), or None, default=None
        Row ``i`` marks the items that are not anchor ``i``'s negatives (the same
        content or group, or what a guide ranks above its positive): they are masked
        out of its log-sum-exp before the sum (never subtracted afterwards, which
        loses float32 precision). The mask is used as given, not made symmetric; a
        ``(2, B, B)`` mask holds one for the ``u`` anchors and one for the ``v``
        anchors (a symmetric loss's second direction, NT-Xent's second view).
    exclude_negatives : bool array-like of shape (B, B k) (or (B, k)) or None
        Hard negatives left out for an anchor (e.g. a duplicate of its positive).
    same_view_negatives : bool, default=False
        The other anchors of the batch are candidates too (query-query negatives; with
        :func:`symmetric_info_nce` also document-document): GTE's improved contrastive
        loss (Li et al., 2023, Eq. 2).

    Returns
    -------
    torch.Tensor or LossTerms
        Shape ``(...)`` (``(..., B)`` with ``reduction='none'``).

    Examples
    --------
    >>> import torch
    >>> from skcontrast.losses import info_nce
    >>> u = torch.eye(3)
    >>> round(float(info_nce(u, u, temperature=1.0)), 4)
    0.5514
    """
    check_loss_options(temperature, lambda_pos, lambda_ent, reduction)
    u, v = check_views(u, v, normalize=normalize)
    extras = check_extras(u, hard_negatives, share_negatives, exclude, exclude_negatives,
                          normalize)
    chunk = resolve_chunk_size(chunk_size, u.shape[-2], v.shape[-2])
    if chunk is None and denominator is None and reduction != "none" and extras is None \
            and not same_view_negatives:
        return _cross_entropy_terms(similarity(u, v, temperature), lambda_pos, lambda_ent,
                                    reduction, None, return_terms)
    positive, entropy = _one_sided_terms(u, v, temperature, chunk,
                                         None if extras is None else extras.mask((0,), 1))
    entropy = with_negatives(entropy, u, extras, temperature)
    if same_view_negatives:
        entropy = torch.logaddexp(entropy, _same_view_lse(u, 0, extras, temperature,
                                                          chunk_size))
    entropy = estimate_entropy(entropy, u.shape[-2], denominator)
    terms = reduce_terms(positive, entropy, lambda_pos=lambda_pos, lambda_ent=lambda_ent,
                         reduction=reduction)
    return finish(terms, return_terms)


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
    check_choice(directions, "directions", DIRECTION_MODES)
    u, v = check_views(u, v, normalize=normalize)
    extras = check_extras(u, hard_negatives, share_negatives, exclude, exclude_negatives,
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


def _cross_entropy_terms(logits: torch.Tensor, lambda_pos: Any, lambda_ent: Any,
                         reduction: str, directions: str | None,
                         return_terms: bool) -> torch.Tensor | LossTerms:
    """The reduced terms of InfoNCE from one logits matrix ``(..., B, B)``, through
    ``F.cross_entropy``: what a hand-written loop computes, with no more autograd nodes.
    ``directions=None``: its rows (:func:`info_nce`); ``'sum'`` or ``'mean'``: its rows
    and its columns, combined so (:func:`symmetric_info_nce`). Per direction the
    cross-entropy is ``positive + entropy`` with ``positive = -mean(diag)`` for both, so
    the loss is ``lambda_ent * cross + (lambda_pos - lambda_ent) * positive``; the
    ``positive`` and ``entropy`` fields are computed beside it when asked for
    (``return_terms``): with equal weights they are values without a graph of their own
    (the loss carries the gradient), else ``positive`` is on the loss's graph."""
    b = logits.shape[-1]
    labels = torch.arange(b, device=logits.device)
    matrices = (logits,) if directions is None else (logits, logits.transpose(-1, -2))
    cross: Any = 0
    for matrix in matrices:
        if matrix.ndim == 2:
            cross = cross + F.cross_entropy(matrix, labels, reduction=reduction)
        else:  # stacked batches: one call on all their rows
            rows = matrix.reshape(-1, b)
            ce = F.cross_entropy(rows, labels.repeat(len(rows) // b), reduction="none")
            ce = ce.reshape(matrix.shape[:-1])
            cross = cross + (ce.mean(-1) if reduction == "mean" else ce.sum(-1))
    scale = 0.5 if directions == "mean" else 1.0
    loss = cross if scale == 1 else cross * scale
    if not (isinstance(lambda_ent, int | float) and lambda_ent == 1):
        loss = loss * lambda_ent
    balanced = isinstance(lambda_pos, int | float) and isinstance(lambda_ent, int | float) \
        and lambda_pos == lambda_ent
    if balanced and not return_terms:
        return loss
    with torch.set_grad_enabled(torch.is_grad_enabled() and not balanced):
        # off the loss's graph when the weights are equal: values to report, not to train
        diagonal = torch.diagonal(logits, dim1=-2, dim2=-1)
        positive = (diagonal.mean(-1) if reduction == "mean" else diagonal.sum(-1)) \
            * (-scale * len(matrices))
        if not balanced:
            loss = loss + (lambda_pos - lambda_ent) * positive
        if not return_terms:
            return loss
        return LossTerms(loss, positive, (cross if scale == 1 else scale * cross) - positive)


def _same_view_lse(z: torch.Tensor, view: int, extras: Extras | None, temperature: Any,
                   chunk_size: Any) -> torch.Tensor:
    """Each row's log-sum-exp over the other rows of its own view ``view`` (GTE's
    same-view negatives), without the items its anchor leaves out."""
    return self_logsumexp(z, temperature, chunk_size,
                          mask=None if extras is None else extras.mask((view,), 1))


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


def dcl(u: Any, v: Any, *, temperature: Any = 0.1, lambda_pos: float = 1.0,
        lambda_ent: float = 1.0, normalize: bool = True, reduction: str = "mean",
        return_terms: bool = False, denominator: Any = None,
        chunk_size: Any = None, hard_negatives: Any = None, share_negatives: bool = True,
        exclude: Any = None, exclude_negatives: Any = None) -> torch.Tensor | LossTerms:
    r"""Decoupled contrastive loss (Yeh et al., 2022; Koromilas et al. 2024 "DCL").

    :func:`nt_xent` with the positive removed from the denominator, which removes the
    coupling between the positive and negative gradients:

    .. math::

        \ell_a = -z_a^\top z_{p(a)}/\tau
                 + \log \sum_{b \ne a,\, b \ne p(a)} e^{z_a^\top z_b/\tau}

    Parameters and returns are those of :func:`nt_xent` (each anchor has ``2B - 2``
    candidates). With :class:`skcontrast.memory.SogCLRMemory` this is SogCLR's global
    contrastive loss (LibAUC's ``GCLoss_v1``).
    """
    return _two_view_loss(u, v, temperature, lambda_pos, lambda_ent, normalize, reduction,
                          return_terms, denominator, chunk_size, decoupled=True,
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


def dhel(u: Any, v: Any, *, temperature: Any = 0.1, lambda_pos: float = 1.0,
         lambda_ent: float = 1.0, normalize: bool = True, reduction: str = "mean",
         include_positive_view: bool = True, return_terms: bool = False,
         chunk_size: Any = None) -> torch.Tensor | LossTerms:
    r"""Decoupled hyperspherical energy loss (Koromilas et al., 2024; Koromilas et al. 2024).

    The uniformity (entropy) part contrasts an anchor only with the *other anchors of
    its own view*, so it no longer involves the positive at all — alignment and
    uniformity are fully decoupled:

    .. math::

        \ell_i = -u_i^\top v_i/\tau + \log \sum_{j \ne i} e^{u_i^\top u_j/\tau}
                 \;\big[+ \log \sum_{j \ne i} e^{v_i^\top v_j/\tau}\big]

    Parameters
    ----------
    u, v : array-like of shape (..., B, d)
        The paired embeddings; ``u`` are the anchors.
    temperature, lambda_pos, lambda_ent, normalize, return_terms
        As in :func:`info_nce`.
    reduction : {'mean', 'sum', 'none'}, default='mean'
        Over the ``B`` anchors; ``'none'`` returns shape ``(..., B)``.
    include_positive_view : bool, default=True
        Add the bracketed energy of the positives' view, as the authors' reference
        code does by default (``include_augs=True``).
    chunk_size : int, 'auto' or None, default=None
        As in :func:`info_nce`.

    Returns
    -------
    torch.Tensor or LossTerms
    """
    check_loss_options(temperature, lambda_pos, lambda_ent, reduction)
    u, v = check_views(u, v, normalize=normalize)
    positive = -(u * v).sum(-1) / temperature
    entropy = self_logsumexp(u, temperature, chunk_size)
    if include_positive_view:
        entropy = entropy + self_logsumexp(v, temperature, chunk_size)
    terms = reduce_terms(positive, entropy, lambda_pos=lambda_pos, lambda_ent=lambda_ent,
                         reduction=reduction)
    return finish(terms, return_terms)
