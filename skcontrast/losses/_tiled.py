"""Row log-sum-exps of a similarity matrix built tile by tile, in O(n (d + chunk)) memory.

Every loss of the InfoNCE family and SupCon needs, for each anchor row ``a_i``,

    lse_i = log sum_{j kept} exp(a_i . b_j / t)

over the rows ``b_j`` of a candidate matrix (``b`` is ``a`` itself for the two-view
losses, with ``j = i`` and possibly the positive partner left out). A dense loss holds
the ``n x m`` logits (and autograd their exponentials) at once: 2B x 2B floats for
NT-Xent, 8.6 GB at B = 16,384. Here the rows are processed ``chunk_size`` at a time:
the forward keeps only ``lse`` (O(n)); the backward recomputes each tile of logits and
turns it into gradients straight away, with ``P = exp(logits - lse)`` and the incoming
gradient ``g``:

    grad_a = (g P / t) b,    grad_b = (g P / t)^T a,    grad_t = -sum(g P * logits) / t.

This is Inf-CL's idea (Cheng et al., 2024), in plain torch on any device and for the
within-view negatives, exclusions and SupCon that Inf-CL lacks. Each tile is a whole
block of rows against every candidate, so its log-sum-exp needs no running maximum
across tiles. Second derivatives are not supported (the dense path has them).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.function import once_differentiable
from torch.utils.checkpoint import checkpoint

from ._core import squared_distances


def _tile_logits(a: torch.Tensor, b: torch.Tensor, temperature: Any, start: int, stop: int,
                 skip_self: bool, partner: int | None, mask: Any) -> torch.Tensor:
    """Logits of anchor rows ``start..stop`` against every candidate, the entries left
    out set to -inf in place (self and partner by index; ``mask``, a
    :class:`~skcontrast.losses._negatives.CandidateMask`, by the tile's block of it)."""
    logits = torch.matmul(a[..., start:stop, :] / temperature, b.transpose(-1, -2))
    rows = torch.arange(stop - start, device=a.device)
    cols = rows + start
    if skip_self:
        logits[..., rows, cols] = float("-inf")
    if partner is not None:
        logits[..., rows, (cols + partner) % b.shape[-2]] = float("-inf")
    if mask is not None:
        logits.masked_fill_(mask.block(start, stop), float("-inf"))
    return logits


def _finite_peak(logits: torch.Tensor) -> torch.Tensor:
    """Each row's largest logit, 0 for a row with every entry left out (so that its
    exponentials are 0 rather than NaN)."""
    peak = logits.amax(-1, keepdim=True)
    return peak.masked_fill_(~torch.isfinite(peak), 0.0)


class _TiledLogSumExp(torch.autograd.Function):
    """Row-blocked log-sum-exp whose forward also makes the backward's work.

    Each tile holds whole rows, so a tile's softmax ``p`` is final in the forward.
    Where gradients will be wanted, the forward keeps, in O((n + m) d), what the
    backward needs for a unit upstream gradient: ``A_i = sum_j p_ij b_j / t``, ``B_j =
    sum_i p_ij a_i / t`` and ``e_i = entropy(p_i) - lse_i`` (for the temperature). The
    backward then scales them: ``grad_a = g_i A_i`` and ``grad_t = sum_i g_i e_i / t``
    for any ``g``, and ``grad_b = g B`` when ``g`` is the same for every row (a mean
    or sum of the log-sum-exps: the losses' case). Only an uneven ``g`` (per-anchor
    weights) makes the backward recompute the tiles for ``grad_b``. The logits and
    their exponentials are thus computed once per step instead of twice.
    """

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor, temperature: Any, chunk: int,
                skip_self: bool, partner: int | None, mask: Any, fuse: bool) -> torch.Tensor:
        wants_a, wants_b, wants_t = (fuse and w for w in ctx.needs_input_grad[:3])
        unit_a: Any = torch.zeros_like(a) if wants_a else None
        unit_b: Any = torch.zeros_like(b) if wants_b else None
        parts, excess = [], []
        for start in range(0, a.shape[-2], chunk):
            stop = min(start + chunk, a.shape[-2])
            logits = _tile_logits(a, b, temperature, start, stop, skip_self, partner, mask)
            peak = _finite_peak(logits)
            p = logits.sub_(peak).exp_()  # in place: one tile in memory
            total = p.sum(-1)
            lse = peak.squeeze(-1) + total.log()  # -inf for a row with no candidate
            parts.append(lse)
            if not (wants_a or wants_b or wants_t):
                continue
            p.div_(total.clamp_min(torch.finfo(p.dtype).tiny)[..., None])  # each row's softmax
            if wants_t:
                excess.append((torch.special.entr(p).sum(-1) - lse).nan_to_num_(posinf=0.0))
            p.div_(temperature)
            if wants_a:
                unit_a[..., start:stop, :] = torch.matmul(p, b)
            if wants_b:
                unit_b += torch.matmul(p.transpose(-1, -2), a[..., start:stop, :])
        lse = torch.cat(parts, dim=-1)
        t = temperature if isinstance(temperature, torch.Tensor) else None
        units = [torch.cat(excess, dim=-1) if wants_t else None, unit_a, unit_b]
        ctx.save_for_backward(a, b, lse, t, *units)
        ctx.temperature, ctx.chunk = temperature, chunk
        ctx.skip_self, ctx.partner, ctx.mask = skip_self, partner, mask
        return lse

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        a, b, lse, t, excess, unit_a, unit_b = ctx.saved_tensors
        temperature = ctx.temperature if t is None else t
        wants_a, wants_b, wants_t = ctx.needs_input_grad[:3]
        grad_a = grad_b = grad_t = None
        if wants_t and excess is not None:
            grad_t = (grad * excess).sum() / temperature
            wants_t = False
        if wants_a and unit_a is not None:
            grad_a = grad[..., None] * unit_a
            wants_a = False
        if wants_b and unit_b is not None and bool((grad == grad[..., :1]).all()):
            grad_b = grad[..., :1, None] * unit_b
            wants_b = False
        if wants_a or wants_b or wants_t:  # not made in the forward: recompute the tiles
            more = _recomputed(ctx, a, b, lse, temperature, grad, wants_a, wants_b, wants_t)
            grad_a = more[0] if wants_a else grad_a
            grad_b = more[1] if wants_b else grad_b
            grad_t = more[2] if wants_t else grad_t
        if grad_t is not None:
            grad_t = grad_t.reshape(t.shape).to(t.dtype)
        return grad_a, grad_b, grad_t, None, None, None, None, None


def _recomputed(ctx: Any, a: torch.Tensor, b: torch.Tensor, lse: torch.Tensor,
                temperature: Any, grad: torch.Tensor, wants_a: bool, wants_b: bool,
                wants_t: bool) -> tuple[Any, Any, Any]:
    """The gradients of :class:`_TiledLogSumExp` from tiles recomputed one at a time."""
    grad_a: Any = torch.zeros_like(a) if wants_a else None
    grad_b: Any = torch.zeros_like(b) if wants_b else None
    grad_t: Any = torch.zeros((), dtype=a.dtype, device=a.device) if wants_t else None
    for start in range(0, a.shape[-2], ctx.chunk):
        stop = min(start + ctx.chunk, a.shape[-2])
        g = grad[..., start:stop]
        p = _tile_logits(a, b, temperature, start, stop, ctx.skip_self, ctx.partner, ctx.mask)
        tile_lse = lse[..., start:stop, None]
        # softmax probabilities, in place (0 in a row with no candidate)
        p.sub_(tile_lse.masked_fill(~torch.isfinite(tile_lse), 0.0)).exp_()
        if wants_t:
            # sum_j p_j logit_j = lse - entropy(p), so d lse / d t = (entropy - lse) / t
            entropy = torch.special.entr(p).sum(-1)
            excess = (entropy - lse[..., start:stop]).nan_to_num_(posinf=0.0)
            grad_t += (g * excess).sum() / temperature
        weights = p.mul_((g / temperature)[..., None])
        if wants_a:
            grad_a[..., start:stop, :] = torch.matmul(weights, b)
        if wants_b:
            grad_b += torch.matmul(weights.transpose(-1, -2), a[..., start:stop, :])
    return grad_a, grad_b, grad_t


def tiled_logsumexp(a: torch.Tensor, b: torch.Tensor, temperature: Any, chunk_size: int, *,
                    skip_self: bool = False, partner: int | None = None,
                    mask: Any = None) -> torch.Tensor:
    """``log sum_j exp(a_i . b_j / temperature)`` for every row of ``a``, ``chunk_size``
    rows at a time; shape ``(..., n)``.

    Parameters
    ----------
    a : torch.Tensor of shape (..., n, d)
        Anchors.
    b : torch.Tensor of shape (..., m, d)
        Candidates (may be ``a`` itself; its gradient then sums both roles).
    temperature : float or scalar tensor
    chunk_size : int
        Anchor rows per tile: memory is O(chunk_size * m) for the tile plus O(n d).
    skip_self : bool, default=False
        Leave out ``j = i`` (``b`` is ``a``).
    partner : int or None, default=None
        Also leave out ``j = (i + partner) mod m`` (DCL's positive).
    mask : CandidateMask or None, default=None
        Further entries left out (excluded items), masked in each tile before its sum.
    """
    return _TiledLogSumExp.apply(a, b, temperature, chunk_size, skip_self, partner, mask,
                                 torch.is_grad_enabled())


def tiled_kernel_row_sums(x: torch.Tensor, kernel: Any, temperature: Any,
                          chunk_size: int) -> torch.Tensor:
    """``sum_{j != i} K(x_i, x_j)`` for every row of ``x``, ``chunk_size`` rows at a time;
    shape ``(..., n)``.

    The kernel losses (KCL) have no log-sum-exp to take apart: each row's energy is a
    plain sum of kernel values, and ``kernel`` may be any callable of the squared
    distances. Each block of rows is therefore run under activation checkpointing: the
    forward keeps only the block's sums, and the backward recomputes the block's
    ``chunk_size x n`` kernel values, so memory is O(chunk_size * n) plus O(n d) instead
    of O(n^2), for any kernel, with the gradient autograd gives the dense loss.

    Parameters
    ----------
    x : torch.Tensor of shape (..., n, d)
    kernel : callable
        ``kernel(squared_distances, temperature)``, elementwise.
    temperature : float or scalar tensor
    chunk_size : int
        Rows per block.
    """
    n = x.shape[-2]

    def block(rows: torch.Tensor, everyone: torch.Tensor, t: Any, start: int) -> torch.Tensor:
        values = kernel(squared_distances(rows, everyone), t)
        index = torch.arange(rows.shape[-2], device=rows.device)
        own = torch.zeros(values.shape[-2:], dtype=torch.bool, device=rows.device)
        own[index, index + start] = True  # the block's self-pairs
        return values.masked_fill(own, 0.0).sum(-1)

    sums = [checkpoint(block, x[..., start:start + chunk_size, :], x, temperature, start,
                       use_reentrant=False)
            for start in range(0, n, chunk_size)]
    return torch.cat(sums, dim=-1)
