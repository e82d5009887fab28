"""The pairwise sigmoid loss of SigLIP (Zhai et al., 2023), dense or tiled.

Every pair ``(i, j)`` of a batch is its own binary problem, "do ``u_i`` and ``v_j``
belong together?", with logit ``l_ij = u_i . v_j / t + b``:

    L = -1/B sum_i sum_j log sigmoid(z_ij l_ij),    z_ij = 1 if i = j else -1

(Zhai et al., Eq. 1 and Algorithm 1; their learned ``t'`` is our ``1 / temperature``).
Per anchor ``i`` this splits into the positive term ``softplus(-l_ii)`` and the entropy
term ``sum_{j != i} softplus(l_ij)``: no log-sum-exp couples the pairs, so a tile of
rows needs no statistic of the other tiles.

Tiled (``chunk_size``), the forward keeps only each anchor's sum (O(B)), and the
backward recomputes each tile's logits and turns them into gradients at once, with
``p = sigmoid(l)`` and the incoming gradient ``g``:

    grad_u = (g p / t) v,   grad_v = (g p / t)^T u,   grad_t = -sum(g p s) / t^2,
    grad_b = sum(g p),

``s = u . v`` the raw similarities. Memory is O(B (d + chunk_size)) *including the
backward*. open_clip's ``SigLipLoss`` chunks over devices, but each chunk's logits stay
in the autograd graph, so its saved activations are O(B^2) on one device.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from .._validation import as_float_tensor, check_real, store_params
from ._core import (
    LossTerms,
    check_loss_options,
    check_views,
    combine_last,
    finish,
    maybe_normalize,
    reduce_terms,
    resolve_chunk_size,
)
from ._objects import Loss


def _tile(a: torch.Tensor, b: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Raw similarities of anchor rows ``start..stop`` against every candidate."""
    return torch.matmul(a[..., start:stop, :], b.transpose(-1, -2))


def _own(stop: int, start: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    rows = torch.arange(stop - start, device=device)
    return rows, rows + start


class _TiledNegativeSums(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor, temperature: Any, bias: Any,
                chunk: int) -> torch.Tensor:
        parts = []
        for start in range(0, a.shape[-2], chunk):
            stop = min(start + chunk, a.shape[-2])
            logits = _tile(a, b, start, stop).div_(temperature).add_(bias)
            rows, cols = _own(stop, start, a.device)
            logits[..., rows, cols] = float("-inf")  # the positive is not a negative
            parts.append(F.softplus(logits).sum(-1))
        tensors = [t if isinstance(t, torch.Tensor) else None for t in (temperature, bias)]
        ctx.save_for_backward(a, b, *tensors)
        ctx.values, ctx.chunk = (temperature, bias), chunk
        return torch.cat(parts, dim=-1)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        a, b, t_tensor, b_tensor = ctx.saved_tensors
        temperature = ctx.values[0] if t_tensor is None else t_tensor
        bias = ctx.values[1] if b_tensor is None else b_tensor
        wants_a, wants_b, wants_t, wants_bias = ctx.needs_input_grad[:4]
        grad_a: Any = torch.zeros_like(a) if wants_a else None
        grad_b: Any = torch.zeros_like(b) if wants_b else None
        grad_t: Any = torch.zeros((), dtype=a.dtype, device=a.device) if wants_t else None
        grad_bias: Any = torch.zeros((), dtype=a.dtype, device=a.device) if wants_bias else None
        for start in range(0, a.shape[-2], ctx.chunk):
            stop = min(start + ctx.chunk, a.shape[-2])
            similarity = _tile(a, b, start, stop)
            weights = torch.sigmoid(similarity / temperature + bias)
            rows, cols = _own(stop, start, a.device)
            weights[..., rows, cols] = 0.0
            weights.mul_(grad[..., start:stop, None])  # g p
            if wants_bias:
                grad_bias += weights.sum()
            if wants_t:
                grad_t -= (weights * similarity).sum() / temperature**2
            weights.div_(temperature)
            if wants_a:
                grad_a[..., start:stop, :] = torch.matmul(weights, b)
            if wants_b:
                grad_b += torch.matmul(weights.transpose(-1, -2), a[..., start:stop, :])
        if wants_t:
            grad_t = grad_t.reshape(t_tensor.shape).to(t_tensor.dtype)
        if wants_bias:
            grad_bias = grad_bias.reshape(b_tensor.shape).to(b_tensor.dtype)
        return grad_a, grad_b, grad_t, grad_bias, None


def sigmoid_negative_sums(a: torch.Tensor, b: torch.Tensor, temperature: Any, bias: Any,
                          chunk_size: int | None) -> torch.Tensor:
    """``sum_{j != i} softplus(a_i . b_j / temperature + bias)`` for every row of ``a``,
    dense or ``chunk_size`` rows at a time (then O(n (d + chunk)) memory, backward
    included); shape ``(..., n)``."""
    if chunk_size is not None:
        return _TiledNegativeSums.apply(a, b, temperature, bias, chunk_size)
    logits = torch.matmul(a / temperature, b.transpose(-1, -2)) + bias
    own = torch.eye(a.shape[-2], b.shape[-2], dtype=torch.bool, device=a.device)
    return F.softplus(logits).masked_fill(own, 0.0).sum(-1)


def sigmoid_pair_losses(logits: torch.Tensor) -> torch.Tensor:
    """The term of every pair in SigLIP's sum (Zhai et al., Eq. 1), before the ``1/B``:
    ``softplus(-l_ii)`` for the positives on the diagonal, ``softplus(l_ij)`` for the
    negatives; shape of ``logits`` (``(..., B, B)``). A sub-batch's summed loss is the
    sum of its block, which is what JEST samples over
    (:func:`~skcontrast.selectors.jest_select`)."""
    own = torch.eye(logits.shape[-2], logits.shape[-1], dtype=torch.bool,
                    device=logits.device)
    return F.softplus(torch.where(own, -logits, logits))


def _dense_terms(logits: torch.Tensor, lambda_pos: Any, lambda_ent: Any, reduction: str,
                 return_terms: bool) -> torch.Tensor | LossTerms:
    """SigLIP's reduced loss from one logits matrix, as a hand-written loop computes it:
    ``softplus(l_ij)`` summed over each row, less ``l_ii`` (``softplus(-x) =
    softplus(x) - x``), so the positive's term is in the row sum; the balance weights
    and the separate terms are added only when they change something or are asked for."""
    rows = F.softplus(logits).sum(-1)
    diagonal = torch.diagonal(logits, dim1=-2, dim2=-1)
    reduce = torch.mean if reduction == "mean" else torch.sum
    balanced = isinstance(lambda_pos, int | float) and isinstance(lambda_ent, int | float) \
        and lambda_pos == lambda_ent
    if balanced and not return_terms:
        loss = reduce(rows - diagonal, dim=-1)
        return loss if lambda_ent == 1 else loss * lambda_ent
    positive_rows = F.softplus(-diagonal)
    positive = reduce(positive_rows, dim=-1)
    entropy = reduce(rows - diagonal, dim=-1) - positive
    loss = lambda_pos * positive + lambda_ent * entropy
    return LossTerms(loss, positive, entropy) if return_terms else loss


def siglip(u: Any, v: Any, *, temperature: Any = 0.1, bias: Any = -10.0,
           lambda_pos: float = 1.0, lambda_ent: float = 1.0, normalize: bool = True,
           reduction: str = "mean", symmetric: bool = False, return_terms: bool = False,
           chunk_size: Any = None) -> torch.Tensor | LossTerms:
    r"""The pairwise sigmoid loss of SigLIP (Zhai et al., ICCV 2023, Eq. 1).

    .. math::

        \mathcal{L} = -\frac{1}{B} \sum_{i=1}^{B} \sum_{j=1}^{B}
            \log \sigma\big(z_{ij} (u_i^\top v_j / \tau + b)\big), \qquad
            z_{ij} = \begin{cases} 1 & i = j \\ -1 & i \ne j \end{cases}

    Per anchor ``u_i``: positive term :math:`-\log\sigma(l_{ii})` and entropy term
    :math:`\sum_{j \ne i} -\log\sigma(-l_{ij})` (Sors et al. 2021, arXiv:2112.11743, Eq. 5's split),
    so ``lambda_pos`` and ``lambda_ent`` weigh them. The paper learns :math:`t' = \log(1/\tau)`
    from :math:`\tau = 0.1` and :math:`b` from :math:`-10`: the loss objects'
    :class:`~skcontrast.losses.SigLIP` does so with ``learn_temperature`` and ``learn_bias``.

    Parameters
    ----------
    u, v : array-like of shape (..., B, d)
        The paired embeddings (see :func:`info_nce`).
    temperature : float or scalar tensor, default=0.1
        :math:`\tau` (SigLIP's logit scale is :math:`1/\tau`).
    bias : float or scalar tensor, default=-10.0
        :math:`b`, which offsets the prior of ``B - 1`` negatives per positive.
    lambda_pos, lambda_ent, normalize, return_terms
        As in :func:`info_nce`.
    reduction : {'mean', 'sum', 'none'}, default='mean'
        Over the anchors; ``'none'`` returns ``(..., B)`` (``(..., 2, B)`` with
        ``symmetric``).
    symmetric : bool, default=False
        Anchors of both views: the per-anchor terms of the rows (anchors ``u_i``) and of
        the columns (anchors ``v_j``), averaged over the two directions. Every pair
        term is counted once either way, so the mean loss and its gradient are those of
        the one-sided form; the per-anchor terms differ.
    chunk_size : int, 'auto' or None, default=None
        Sum the negatives ``chunk_size`` anchor rows at a time, recomputing them in the
        backward: memory O(B (d + chunk_size)) for the forward *and* the backward, with
        the dense loss's values and gradients (no second derivatives). ``'auto'`` tiles
        once one dense ``B x B`` float32 matrix would exceed 256 MiB.

    Returns
    -------
    torch.Tensor or LossTerms

    Examples
    --------
    >>> import torch
    >>> from skcontrast.losses import siglip
    >>> u = torch.eye(3)
    >>> round(float(siglip(u, u, temperature=1.0, bias=0.0)), 4)
    1.6996
    """
    check_loss_options(temperature, lambda_pos, lambda_ent, reduction)
    if not isinstance(bias, torch.Tensor):
        check_real(bias, "bias")
    u, v = check_views(u, v, normalize=normalize)
    b = u.shape[-2]
    chunk = resolve_chunk_size(chunk_size, b, b)
    if chunk is None and not symmetric and reduction != "none":
        return _dense_terms(torch.matmul(u / temperature, v.transpose(-1, -2)) + bias,
                            lambda_pos, lambda_ent, reduction, return_terms)
    positive = F.softplus(-((u * v).sum(-1) / temperature + bias))
    entropy = sigmoid_negative_sums(u, v, temperature, bias, chunk)
    if symmetric:
        positive = torch.stack([positive, positive], dim=-2)
        entropy = torch.stack([entropy, sigmoid_negative_sums(v, u, temperature, bias,
                                                              chunk)], dim=-2)
    terms = reduce_terms(positive, entropy, lambda_pos=lambda_pos, lambda_ent=lambda_ent,
                         reduction=reduction)
    if symmetric and reduction != "none":
        terms = combine_last(terms, "mean")
    return finish(terms, return_terms)


class SigLIP(Loss):
    r"""The pairwise sigmoid loss of SigLIP (Zhai et al., 2023, Eq. 1): :func:`siglip`.

    Parameters
    ----------
    temperature : float, default=0.1
        :math:`\tau`: the paper's logit scale :math:`t = 1/\tau` starts at 10.
    bias : float, default=-10.0
        :math:`b`, the paper's starting value.
    learn_temperature, learn_bias : bool, default=False
        Learn :math:`\tau` (as a log) and :math:`b` during a fit, as SigLIP does.
    lambda_pos, lambda_ent, normalize
        As in :class:`InfoNCE`.
    symmetric : bool, default=False
        Anchors of both views (see :func:`siglip`).
    chunk_size : int, 'auto' or None, default='auto'
        Tiled, forward *and* backward in O(B (d + chunk_size)) memory.
    """

    function = staticmethod(siglip)
    learnable = ("temperature", "bias")

    def __init__(self, temperature: float = 0.1, *, bias: float = -10.0,
                 learn_temperature: bool = False, learn_bias: bool = False,
                 lambda_pos: float = 1.0, lambda_ent: float = 1.0, normalize: bool = True,
                 symmetric: bool = False, chunk_size: Any = "auto") -> None:
        store_params(self, locals())

    def pair_losses(self, u: Any, v: Any, **overrides: Any) -> torch.Tensor:
        """The ``(..., B, B)`` matrix of each pair's term in the loss as it is trained:
        ``lambda_pos * softplus(-l_ii)`` on the diagonal, ``lambda_ent *
        softplus(l_ij)`` off it (Zhai et al. 2023, Eq. 1, with the balance of Sors et al.
        2021, Eq. 5). The sum of its block over any sub-batch is the sub-batch's summed
        loss (mean x size; the same with ``symmetric``): what JEST samples over (Evans
        et al. 2024, Sec. 2)."""
        o = self.options(**overrides)
        u, v = (maybe_normalize(as_float_tensor(x, n), o["normalize"])
                for x, n in ((u, "u"), (v, "v")))
        logits = torch.matmul(u / o["temperature"], v.transpose(-1, -2)) + o["bias"]
        terms = sigmoid_pair_losses(logits)
        own = torch.eye(terms.shape[-2], terms.shape[-1], dtype=torch.bool,
                        device=terms.device)
        return terms * torch.where(own, torch.as_tensor(float(o["lambda_pos"])),
                                   torch.as_tensor(float(o["lambda_ent"]))).to(terms)

    def affinity(self, u: Any, v: Any, batch_size: int, **overrides: Any) -> torch.Tensor:
        """Exactly what two pairs add to the loss when they share a batch: the negative
        terms :math:`-\\log\\sigma(-l_{kl}) - \\log\\sigma(-l_{lk})` (SigLIP's loss is a
        sum of pair terms, so this is no bound)."""
        o = self.options(**overrides)
        u, v = (maybe_normalize(as_float_tensor(x, n), o["normalize"])
                for x, n in ((u, "u"), (v, "v")))
        f = F.softplus(torch.matmul(u / o["temperature"], v.transpose(-1, -2)) + o["bias"])
        w = f + f.transpose(-1, -2)
        w.diagonal(dim1=-2, dim2=-1).zero_()
        return w

    def queue_terms(self, rows: torch.Tensor, views: torch.Tensor, bank: torch.Tensor,
                    bank_views: torch.Tensor, candidates: torch.Tensor,
                    positives: torch.Tensor, **overrides: Any) -> LossTerms:
        """Each anchor against the other view's entries of the queue: the sigmoid terms
        of its positives (their mean) and of its negatives (their sum)."""
        o = self.options(**overrides)
        candidates = candidates & (bank_views[None, :] != views[:, None])
        a = maybe_normalize(rows, o["normalize"])
        m = maybe_normalize(bank.to(a.dtype), o["normalize"])
        logits = torch.matmul(a / o["temperature"], m.T) + o["bias"]
        pos_mask, neg_mask = candidates & positives, candidates & ~positives
        n_pos = pos_mask.sum(-1)
        positive = (F.softplus(-logits) * pos_mask).sum(-1) / n_pos.clamp_min(1)
        entropy = (F.softplus(logits) * neg_mask).sum(-1)
        weight = (n_pos > 0).to(a.dtype)
        return reduce_terms(positive * weight, entropy * weight, lambda_pos=o["lambda_pos"],
                            lambda_ent=o["lambda_ent"], reduction="mean", weight=weight)
