"""One-sided InfoNCE, the root of the InfoNCE family: symmetric InfoNCE (CLIP), NT-Xent
(SimCLR), DCL and DHEL, each in a module of its own, build on it.

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

from .._validation import store_params
from ._core import (
    LossTerms,
    check_loss_options,
    check_views,
    estimate_entropy,
    finish,
    reduce_terms,
    resolve_chunk_size,
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
from ._softmax import _SoftmaxLoss


def _extras(u: torch.Tensor, hard_negatives: Any, share_negatives: Any, exclude: Any,
            exclude_negatives: Any, normalize: bool) -> Extras | None:
    """The batch's checked hard negatives and exclusions (:func:`check_extras`), or
    ``None`` at once when none are given (a training step on plain pairs)."""
    if hard_negatives is None and exclude is None and exclude_negatives is None:
        return None
    return check_extras(u, hard_negatives, share_negatives, exclude, exclude_negatives,
                        normalize)


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
    extras = _extras(u, hard_negatives, share_negatives, exclude, exclude_negatives,
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


class InfoNCE(_SoftmaxLoss):
    r"""One-sided InfoNCE :math:`\mathcal{L}(U, V)` (Sreenivasan et al. 2023,
    openreview.net/forum?id=7n2dNATSHeQ, Eq. 3):
    :func:`info_nce`.

    Parameters
    ----------
    temperature : float, default=0.1
        :math:`\tau`; the starting value when ``learn_temperature``.
    learn_temperature : bool, default=False
        Learn the temperature (kept above 0.01, smoothly) when an estimator trains with
        this loss, as CLIP does.
    lambda_pos, lambda_ent : float, default=1.0
        Balance of the positive and entropy terms (Sors et al. 2021, Eq. 5).
    normalize : bool, default=True
        L2-normalise the embeddings first.
    chunk_size : int, 'auto' or None, default='auto'
        Tiled log-sum-exps (O(B) memory); ``'auto'`` tiles only when one dense ``B x B``
        float32 matrix would exceed 256 MiB; ``None`` keeps it dense.
    share_negatives : bool, default=True
        With hard-negative columns (``(anchor, positive, negative_1 ... negative_k)``
        rows): every anchor contrasts with all the batch's hard negatives
        (sentence-transformers' convention); ``False``: with its own.
    false_negatives : FalseNegativeGuard or None, default=None
        Candidates left out of every anchor's sum: the same content, the same group, or
        what a guide ranks above the positive (:class:`FalseNegativeGuard`).
    same_view_negatives : bool, default=False
        The batch's other anchors are candidates too (GTE's query-query negatives; with
        :class:`SymmetricInfoNCE`, document-document too).

    Examples
    --------
    >>> import torch
    >>> from skcontrast.losses import InfoNCE
    >>> round(float(InfoNCE(temperature=1.0)(torch.eye(3), torch.eye(3))), 4)
    0.5514
    """

    function = staticmethod(info_nce)
    blocks = ((0, 1),)
    cross_view = True

    def __init__(self, temperature: float = 0.1, *, learn_temperature: bool = False,
                 lambda_pos: float = 1.0, lambda_ent: float = 1.0, normalize: bool = True,
                 chunk_size: Any = "auto",
                 share_negatives: bool = True, false_negatives: Any = None,
                 same_view_negatives: bool = False) -> None:
        store_params(self, locals())

    def lse_layout(self, structure: str) -> str | None:
        return "anchors"

    def queue_terms(self, rows: torch.Tensor, views: torch.Tensor, bank: torch.Tensor,
                    bank_views: torch.Tensor, candidates: torch.Tensor,
                    positives: torch.Tensor, **overrides: Any) -> LossTerms:
        anchors = views == 0  # one-sided: the anchors of view 0 only
        return super().queue_terms(rows[anchors], views[anchors], bank, bank_views,
                                   candidates[anchors], positives[anchors], **overrides)
