"""Hard-negative columns and false negatives left out, for the softmax-family losses.

A softmax loss's entropy term is a log-sum-exp over each anchor's candidates. Two things
change that set:

- **hard-negative columns** (mined negatives, sentence-transformers' ``(anchor,
  positive, negative_1 ... negative_k)`` rows): each anchor ``u_i`` also contrasts with
  its own ``k`` negatives ``n_i1 .. n_ik``, or, with ``share=True``, with every
  negative of the batch (sentence-transformers' ``MultipleNegativesRankingLoss``); they
  enter as ``logaddexp(lse_i, log sum_m e^{u_i . n_m / t})``;
- **false negatives left out** (``exclude``, a symmetric ``(B, B)`` mask of items that
  must not be each other's negatives: the same content, the same group, or what a guide
  model ranks above the positive, GISTEmbed's rule): their terms are removed from the
  log-sum-exp, ``lse + log(1 - e^{lse_excluded - lse})``, which works on the dense and on
  the tiled log-sum-exps alike (the excluded terms are computed explicitly, one per
  excluded pair) and has the gradient of the masked sum.

Only the ``u`` anchors (queries) get the hard negatives (they are documents, the ``v``
side); exclusions apply to every anchor.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from .._validation import as_float_tensor, describe
from ._core import maybe_normalize


class Extras(NamedTuple):
    """Checked hard negatives and exclusions of one batch of ``B`` pairs."""

    negatives: torch.Tensor | None  # (B, k, d), normalised as the views
    share: bool
    exclude: torch.Tensor | None  # (B, B) bool, symmetric, False on the diagonal
    exclude_negatives: torch.Tensor | None  # (B, B*k) with share, else (B, k)

    @property
    def added(self) -> torch.Tensor | int:
        """Hard negatives each ``u`` anchor contrasts with (a tensor when some are left
        out), for losses that count their negatives."""
        if self.negatives is None:
            return 0
        b, k = self.negatives.shape[:2]
        total = b * k if self.share else k
        if self.exclude_negatives is None:
            return total
        return total - self.exclude_negatives.sum(-1)


def check_extras(u: torch.Tensor, hard_negatives: Any, share: Any, exclude: Any,
                 exclude_negatives: Any, normalize: bool) -> Extras | None:
    """``None`` when there is nothing to add or leave out; else the checked pieces."""
    if hard_negatives is None and exclude is None:
        if exclude_negatives is not None:
            raise ValueError("exclude_negatives applies to hard_negatives, which are None")
        return None
    if u.ndim != 2:
        raise ValueError(f"hard_negatives and exclude take one batch of pairs (B, d); got "
                         f"views of shape {tuple(u.shape)}")
    b = u.shape[0]
    if not isinstance(share, bool):
        raise ValueError(f"share_negatives must be True or False; got {describe(share)}")
    negatives = None
    if hard_negatives is not None:
        negatives = as_float_tensor(hard_negatives, "hard_negatives").to(u.device, u.dtype)
        if negatives.ndim != 3 or negatives.shape[0] != b or negatives.shape[2] != u.shape[1]:
            raise ValueError(f"hard_negatives must have shape (B, k, d) = ({b}, k, "
                             f"{u.shape[1]}): k negatives per anchor; got {describe(negatives)}")
        negatives = maybe_normalize(negatives, normalize)
    mask = None
    if exclude is not None:
        mask = torch.as_tensor(exclude, device=u.device)
        if mask.dtype != torch.bool or tuple(mask.shape) != (b, b):
            raise ValueError(f"exclude must be a boolean (B, B) = ({b}, {b}) mask of items "
                             f"that are not each other's negatives; got {describe(exclude)}")
        mask = (mask | mask.T) & ~torch.eye(b, dtype=torch.bool, device=u.device)
    excluded_negatives = None
    if exclude_negatives is not None:
        assert negatives is not None
        k = negatives.shape[1]
        width = b * k if share else k
        excluded_negatives = torch.as_tensor(exclude_negatives, device=u.device)
        if excluded_negatives.dtype != torch.bool or \
                tuple(excluded_negatives.shape) != (b, width):
            raise ValueError(f"exclude_negatives must be a boolean (B, {'B*k' if share else 'k'})"
                             f" = ({b}, {width}) mask; got {describe(exclude_negatives)}")
    return Extras(negatives, share, mask, excluded_negatives)


def negatives_logsumexp(anchors: torch.Tensor, extras: Extras,
                        temperature: Any) -> torch.Tensor | None:
    """Each ``u`` anchor's log-sum-exp over its hard negatives (``-inf`` where all are
    left out), or ``None`` without hard negatives."""
    negatives = extras.negatives
    if negatives is None:
        return None
    if extras.share:
        logits = anchors @ negatives.reshape(-1, negatives.shape[-1]).T / temperature
    else:
        logits = torch.einsum("bd,bkd->bk", anchors, negatives) / temperature
    if extras.exclude_negatives is not None:
        logits = logits.masked_fill(extras.exclude_negatives, float("-inf"))
    return torch.logsumexp(logits, dim=-1)


def add_negatives(lse: torch.Tensor, extra: torch.Tensor | None) -> torch.Tensor:
    """``logaddexp`` of the first ``len(extra)`` anchors' log-sum-exps with ``extra``."""
    if extra is None:
        return lse
    b = len(extra)
    return torch.cat([torch.logaddexp(lse[:b], extra), lse[b:]])


def drop_pairs(lse: torch.Tensor, anchors: torch.Tensor, candidates: torch.Tensor,
               rows: torch.Tensor, cols: torch.Tensor, temperature: Any) -> torch.Tensor:
    """``lse`` (one per anchor row) without the terms ``e^{a_r . c_c / t}`` of the pairs
    ``(rows, cols)``: ``lse + log(1 - e^{lse_dropped - lse})``."""
    if not len(rows):
        return lse
    logits = (anchors[rows] * candidates[cols]).sum(-1) / temperature
    n = len(lse)
    top = torch.full((n,), float("-inf"), dtype=logits.dtype, device=logits.device)
    top = top.scatter_reduce(0, rows, logits.detach(), reduce="amax")
    has = torch.isfinite(top)
    shift = torch.where(has, top, torch.zeros_like(top))
    summed = torch.zeros(n, dtype=logits.dtype, device=logits.device).index_add(
        0, rows, torch.exp(logits - shift[rows]))
    dropped = torch.where(has, torch.log(summed.clamp_min(torch.finfo(summed.dtype).tiny))
                          + shift, torch.full_like(shift, float("-inf")))
    # at most everything: a set left empty reads -inf (its anchor has no candidate left)
    gap = torch.where(has, (dropped - lse).clamp(max=-1e-7), torch.full_like(lse, -1.0))
    kept = lse + torch.log(-torch.expm1(gap))
    return torch.where(has, kept, lse)


def excluded_pairs(extras: Extras, offsets: tuple[tuple[int, int], ...]
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows and columns of every excluded pair ``(i, j)`` of ``extras.exclude``, once per
    ``(row offset, column offset)``: e.g. ``((0, 0), (0, B), (B, 0), (B, B))`` for the
    ``2B`` rows ``[u; v]`` of NT-Xent."""
    assert extras.exclude is not None
    i, j = torch.nonzero(extras.exclude, as_tuple=True)
    rows = torch.cat([i + r for r, _ in offsets])
    cols = torch.cat([j + c for _, c in offsets])
    return rows, cols
