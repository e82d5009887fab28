"""Pieces shared by every loss: input checks, similarities and the balanced reduction.

Every loss in :mod:`skcontrast.losses` is written for inputs with arbitrary leading
dimensions, ``(..., B, d)``: a single batch is ``(B, d)`` and ``m`` independent batches
of equal size are ``(m, B, d)``. This is what lets :func:`~skcontrast.losses.batch_losses`
score thousands of candidate batches in one vectorised call with the very same code
that trains the network.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from .._validation import (
    as_float_tensor,
    check_choice,
    check_positive,
    check_real,
    describe,
    torch_viewable,
)

REDUCTIONS = ("mean", "sum", "none")

#: ``chunk_size='auto'`` tiles once one dense ``rows x cols`` float32 matrix would take
#: more than this many bytes (a dense loss holds a few such matrices), and then uses
#: tiles of about this size.
AUTO_TILE_BYTES = 256 * 2**20


class LossTerms(NamedTuple):
    """A loss together with its two parts (Sors et al. 2021, arXiv:2112.11743, Eq. 5).

    ``loss == lambda_pos * positive + lambda_ent * entropy`` (for ``reduction`` other
    than ``'none'``, after reduction). ``positive`` is the alignment part (how far
    positives are), ``entropy`` the uniformity part (how close negatives are).
    """

    loss: torch.Tensor
    positive: torch.Tensor
    entropy: torch.Tensor


def check_loss_options(temperature: Any, lambda_pos: Any, lambda_ent: Any,
                       reduction: str | None = None) -> None:
    """Validate the arguments every loss shares.

    What a training step passes (:func:`_plain_options`) is accepted at once; anything
    else goes through the full checks of :mod:`skcontrast._validation`, which accept
    every real type and name what they refuse.
    """
    if _plain_options(temperature, lambda_pos, lambda_ent, reduction):
        return
    check_positive(temperature, "temperature", allow_tensor=True)
    for name, value in (("lambda_pos", lambda_pos), ("lambda_ent", lambda_ent)):
        if not isinstance(value, torch.Tensor):
            check_real(value, name)
    if reduction is not None:
        check_choice(reduction, "reduction", REDUCTIONS)


def _plain_options(temperature: Any, lambda_pos: Any, lambda_ent: Any,
                   reduction: str | None) -> bool:
    """Whether the options are valid as they stand: a positive finite float or a scalar
    tensor temperature, finite float (or tensor) weights, a known reduction."""
    if isinstance(temperature, torch.Tensor):
        if temperature.numel() != 1:
            return False
    elif not (type(temperature) is float and 0.0 < temperature < math.inf):
        return False
    for weight in (lambda_pos, lambda_ent):
        if not (isinstance(weight, torch.Tensor) or
                (type(weight) is float and math.isfinite(weight))):
            return False
    return reduction is None or reduction in REDUCTIONS


def check_views(u: Any, v: Any, *, normalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Return two views as tensors of one dtype, shape ``(..., B, d)`` with ``B >= 2``."""
    u, v = float_tensor(u, "u"), float_tensor(v, "v")
    if u.ndim < 2:
        raise ValueError(f"u must have shape (..., B, d); got {describe(u)}")
    if u.shape != v.shape:
        raise ValueError(
            f"u and v must have the same shape (row i of v is the positive of row i of u); "
            f"got u.shape={tuple(u.shape)} and v.shape={tuple(v.shape)}"
        )
    _check_batch_rows(u, "u")
    dtype = torch.promote_types(u.dtype, v.dtype)
    u, v = u.to(dtype), v.to(dtype)
    return maybe_normalize(u, normalize), maybe_normalize(v, normalize)


def check_labelled(z: Any, y: Any, *, normalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Return embeddings ``(..., B, d)`` and integer labels ``(..., B)`` as tensors."""
    z = float_tensor(z, "z")
    if z.ndim < 2:
        raise ValueError(f"z must have shape (..., B, d); got {describe(z)}")
    _check_batch_rows(z, "z")
    y = as_label_tensor(y, device=z.device)
    if y.shape != z.shape[:-1]:
        raise ValueError(
            f"y must hold one label per row of z, shape {tuple(z.shape[:-1])}; "
            f"got {describe(y)}"
        )
    return maybe_normalize(z, normalize), y


def float_tensor(x: Any, name: str) -> torch.Tensor:
    """``x`` itself when it is a floating-point tensor already (what a training step
    passes), else :func:`~skcontrast._validation.as_float_tensor`'s conversion."""
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x
    return as_float_tensor(x, name)


def resolve_chunk_size(chunk_size: Any, rows: int, cols: int) -> int | None:
    """``None`` (dense), or the number of anchor rows per tile.

    ``'auto'``: dense while one ``rows x cols`` float32 matrix takes at most
    :data:`AUTO_TILE_BYTES` (256 MiB: B = 4,096 pairs for NT-Xent's 2B x 2B logits),
    else tiles of as many rows as fit in that size.
    """
    if chunk_size is None:
        return None
    if chunk_size == "auto":
        if rows * cols * 4 <= AUTO_TILE_BYTES:
            return None
        return max(1, AUTO_TILE_BYTES // (4 * cols))
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be None, 'auto' or a positive integer; got "
                         f"{chunk_size!r}")
    return chunk_size


def as_label_tensor(y: Any, device: torch.device | None = None) -> torch.Tensor:
    """Integer label tensor; labels of any other type are encoded to ``0..k-1``."""
    if isinstance(y, torch.Tensor):
        if y.is_floating_point() or y.is_complex():
            raise ValueError(f"y must hold integer class labels; got {describe(y)}")
        return y.to(device=device, dtype=torch.long)
    array = torch_viewable(np.asarray(y))
    if array.dtype.kind not in "biu":
        _, codes = np.unique(array.reshape(-1), return_inverse=True)
        array = codes.reshape(array.shape)
    return torch.as_tensor(array, dtype=torch.long, device=device)


def _check_batch_rows(x: torch.Tensor, name: str) -> None:
    if x.shape[-2] < 2:
        raise ValueError(
            f"{name} must hold a batch of at least 2 rows (B >= 2) to contrast; "
            f"got {describe(x)}"
        )


def maybe_normalize(x: torch.Tensor, normalize: bool) -> torch.Tensor:
    """L2-normalise rows when ``normalize`` is true (zero rows stay zero)."""
    return F.normalize(x, dim=-1) if normalize else x


def similarity(a: torch.Tensor, b: torch.Tensor, temperature: Any) -> torch.Tensor:
    """Inner products ``a @ b.T / temperature`` over the last two dimensions.

    The temperature scales ``a`` (O(Bd)) rather than the product (O(B^2)).
    """
    return torch.matmul(a / temperature, b.transpose(-1, -2))


def masked_logsumexp(logits: torch.Tensor, left_out: torch.Tensor | None) -> torch.Tensor:
    """Row log-sum-exps of ``logits`` without the entries ``left_out``; a row with none
    left reads ``-inf`` and passes no gradient (``torch.logsumexp`` would pass NaN)."""
    if left_out is None:
        return torch.logsumexp(logits, dim=-1)
    logits = logits.masked_fill(left_out, float("-inf"))
    empty = left_out.all(-1)
    if not bool(empty.any()):
        return torch.logsumexp(logits, dim=-1)
    lse = torch.logsumexp(logits.masked_fill(empty[..., None], 0.0), dim=-1)
    return lse.masked_fill(empty, float("-inf"))


def class_codes(y: torch.Tensor) -> torch.Tensor:
    """Relabel each batch (last dimension) to ``0..k-1`` by sorting, in O(B log B)."""
    ordered, order = y.sort(dim=-1)
    new_class = torch.ones_like(ordered, dtype=torch.bool)
    new_class[..., 1:] = ordered[..., 1:] != ordered[..., :-1]
    return torch.empty_like(order).scatter_(-1, order, new_class.cumsum(-1) - 1)


def class_sums(z: torch.Tensor, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: the sum of the rows of its class and the size of its class, in O(Bd).

    ``codes`` come from :func:`class_codes`; nothing of size ``B x B`` is formed.
    """
    index = codes[..., None].expand_as(z)
    sums = torch.zeros_like(z).scatter_add(-2, index, z).gather(-2, index)
    ones = torch.ones(codes.shape, dtype=z.dtype, device=z.device)
    counts = torch.zeros_like(ones).scatter_add(-1, codes, ones).gather(-1, codes)
    return sums, counts


def pair_labels(batch_size: int, leading: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """Labels ``[0..B-1, 0..B-1]`` for the stacked views ``[u; v]``, broadcast to ``leading``."""
    labels = torch.arange(batch_size, device=device).repeat(2)
    return labels.expand(*leading, 2 * batch_size)


def eye_mask(n: int, device: torch.device) -> torch.Tensor:
    """Boolean identity matrix, used to drop self-similarities."""
    return torch.eye(n, dtype=torch.bool, device=device)


def squared_distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Pairwise squared Euclidean distances, O(B^2) memory (no ``(B, B, d)`` tensor)."""
    sq = (a * a).sum(-1)[..., :, None] + (b * b).sum(-1)[..., None, :]
    sq = sq - 2 * torch.matmul(a, b.transpose(-1, -2))
    return sq.clamp_min(0)


def safe_sqrt(x: torch.Tensor) -> torch.Tensor:
    """Square root with a zero (not NaN) gradient at exactly zero."""
    positive = x > 0
    return torch.where(positive, x.clamp_min(torch.finfo(x.dtype).tiny).sqrt(), 0.0)


def reduce_terms(positive: torch.Tensor, entropy: torch.Tensor, *, lambda_pos: Any,
                 lambda_ent: Any, reduction: str,
                 weight: torch.Tensor | None = None) -> LossTerms:
    """Weight and reduce per-anchor terms over the last dimension.

    ``weight`` (0/1 per anchor) removes anchors from the average; ``None`` counts every
    anchor. With ``reduction='none'`` excluded anchors read as zero.
    """
    if weight is not None:
        positive, entropy = positive * weight, entropy * weight
    if reduction == "mean":
        if weight is None:
            positive, entropy = positive.mean(-1), entropy.mean(-1)
        else:
            count = weight.sum(-1).clamp_min(1)
            positive, entropy = positive.sum(-1) / count, entropy.sum(-1) / count
    elif reduction == "sum":
        positive, entropy = positive.sum(-1), entropy.sum(-1)
    return LossTerms(lambda_pos * positive + lambda_ent * entropy, positive, entropy)


def combine_last(terms: LossTerms, how: str) -> LossTerms:
    """Sum or average each field of ``terms`` over its last dimension."""
    op = torch.sum if how == "sum" else torch.mean
    return LossTerms(*(op(t, dim=-1) for t in terms))


def scale_terms(terms: LossTerms, factor: Any) -> LossTerms:
    """Multiply each field of ``terms`` by ``factor``."""
    return LossTerms(*(t * factor for t in terms))


def estimate_entropy(lse: torch.Tensor, count: int, denominator: Any) -> torch.Tensor:
    """Each anchor's entropy term: the mini-batch log-sum-exp ``lse`` over its ``count``
    candidates, or what ``denominator(lse, count)`` makes of it.

    ``denominator`` is the hook through which an estimator that looks beyond the batch
    (:class:`skcontrast.memory.SogCLRMemory`) replaces the mini-batch estimate; it
    receives ``lse`` in the loss's own anchor order and returns a tensor of its shape.
    """
    if denominator is None:
        return lse
    if not callable(denominator):
        raise ValueError(f"denominator must be None or a callable f(lse, count); got "
                         f"{describe(denominator)}")
    out = denominator(lse, count)
    if not isinstance(out, torch.Tensor) or out.shape != lse.shape:
        raise ValueError(f"denominator must return a tensor of shape {tuple(lse.shape)}; "
                         f"got {describe(out)}")
    return out


def finish(terms: LossTerms, return_terms: bool) -> torch.Tensor | LossTerms:
    """What a public loss returns: the loss alone, or the full :class:`LossTerms`."""
    return terms if return_terms else terms.loss
