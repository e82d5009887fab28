"""Hard-negative columns and false negatives left out, for the softmax-family losses.

A softmax loss's entropy term is a log-sum-exp over each anchor's candidates. Two things
change that set:

- **hard-negative columns** (mined negatives, sentence-transformers' ``(anchor,
  positive, negative_1 ... negative_k)`` rows): each anchor ``u_i`` also contrasts with
  its own ``k`` negatives ``n_i1 .. n_ik``, or, with ``share=True``, with every
  negative of the batch (sentence-transformers' ``MultipleNegativesRankingLoss``); they
  enter as ``logaddexp(lse_i, log sum_m e^{u_i . n_m / t})``;
- **false negatives left out** (``exclude``, a ``(B, B)`` mask whose row ``i`` marks the
  items that are not anchor ``i``'s negatives: the same content, the same group, or
  what a guide model ranks above anchor ``i``'s positive, GISTEmbed's rule): their
  logits are set to ``-inf`` *before* the log-sum-exp, in every path (dense, tiled, the
  Gram matrix of the two-view losses), so a left-out candidate never enters the sum.
  (Subtracting its term afterwards, ``lse + log(1 - e^{lse_out - lse})``, cancels
  catastrophically in float32 exactly when the left-out candidate dominates the sum: a
  duplicate of the positive.) A ``(2, B, B)`` mask gives the anchors of each view their
  own rows: ``[0]`` for the ``u_i``, ``[1]`` for the ``v_i`` (a symmetric loss's second
  direction, the second view of NT-Xent), for rules that depend on the anchor's side.

Only the ``u`` anchors (queries) get the hard negatives (they are documents, the ``v``
side); exclusions apply to every anchor, each by its own row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from .._validation import as_float_tensor, describe
from ._core import masked_logsumexp, maybe_normalize, resolve_chunk_size
from ._gram import gram_logsumexp
from ._tiled import tiled_logsumexp


class Extras(NamedTuple):
    """Checked hard negatives and exclusions of one batch of ``B`` pairs."""

    negatives: torch.Tensor | None  # (B, k, d), normalised as the views
    share: bool
    exclude: torch.Tensor | None  # (V, B, B) bool, V = 1 or 2 (per anchor view), no diagonal
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

    def left_out(self, view: int) -> torch.Tensor | int:
        """Items left out of each anchor's candidates, for the anchors of ``view``."""
        if self.exclude is None:
            return 0
        return self.exclude[min(view, len(self.exclude) - 1)].sum(-1)

    def mask(self, views: Sequence[int], candidate_blocks: int) -> CandidateMask | None:
        """The exclusions of one log-sum-exp whose anchor rows are ``B``-row blocks of the
        views ``views`` (``(0,)``: the ``u_i``; ``(1,)``: the ``v_i``; ``(0, 1)``:
        ``[u; v]``) and whose candidate columns are ``candidate_blocks`` blocks of the
        ``B`` items (``2``: ``[u; v]``); ``None`` when nothing is left out."""
        if self.exclude is None:
            return None
        n_views, b = self.exclude.shape[0], self.exclude.shape[-1]
        device = self.exclude.device
        items = torch.arange(b, device=device)
        row_view = torch.tensor([min(v, n_views - 1) for v in views],
                                device=device).repeat_interleave(b)
        return CandidateMask(self.exclude, row_view, items.repeat(len(views)),
                             items.repeat(candidate_blocks))


class CandidateMask(NamedTuple):
    """Which candidate columns leave which anchor rows' log-sum-exps: entry ``(r, c)`` of
    an ``n x m`` logits matrix is left out when ``exclude[row_view[r], row_item[r],
    col_item[c]]``. Built block by block of anchor rows (:meth:`block`), so a tiled
    log-sum-exp never holds more of it than its tile."""

    exclude: torch.Tensor  # (V, B, B)
    row_view: torch.Tensor  # (n,)
    row_item: torch.Tensor  # (n,)
    col_item: torch.Tensor  # (m,)

    def block(self, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """The ``(stop - start, m)`` mask of anchor rows ``start..stop``."""
        rows = self.exclude[self.row_view[start:stop], self.row_item[start:stop]]
        return rows[:, self.col_item]


def candidate_logsumexp(anchors: torch.Tensor, candidates: torch.Tensor, temperature: Any,
                        chunk: int | None, *, skip_self: bool = False,
                        partner: int | None = None,
                        mask: CandidateMask | None = None) -> torch.Tensor:
    """``log sum_j exp(a_i . c_j / temperature)`` for every anchor row over the candidates
    it keeps: ``j = i`` left out with ``skip_self`` (``candidates`` is ``anchors``),
    ``j = (i + partner) mod m`` with ``partner`` (DCL's positive), and the entries of
    ``mask`` (the excluded items). Everything left out is masked *before* the sum, dense
    (``chunk=None``) or ``chunk`` anchor rows at a time; an anchor left with no
    candidate reads ``-inf`` (with a zero gradient)."""
    if chunk is not None:
        return tiled_logsumexp(anchors, candidates, temperature, chunk, skip_self=skip_self,
                               partner=partner, mask=mask)
    n, m = anchors.shape[-2], candidates.shape[-2]
    left_out = None if mask is None else mask.block()
    if skip_self or partner is not None:
        rows = torch.arange(n, device=anchors.device)
        pairs = torch.zeros(n, m, dtype=torch.bool, device=anchors.device)
        if skip_self:
            pairs[rows, rows] = True
        if partner is not None:
            pairs[rows, (rows + partner) % m] = True
        left_out = pairs if left_out is None else left_out | pairs
    if skip_self and candidates is anchors:  # a Gram matrix, with its hand-written backward
        return gram_logsumexp(anchors, temperature, exclude=left_out)
    logits = torch.matmul(anchors / temperature, candidates.transpose(-1, -2))
    return masked_logsumexp(logits, left_out)


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
        if mask.dtype != torch.bool or tuple(mask.shape) not in ((b, b), (2, b, b)):
            raise ValueError(f"exclude must be a boolean (B, B) = ({b}, {b}) mask whose row "
                             f"i marks the items that are not anchor i's negatives (or "
                             f"(2, B, B): one for the u anchors, one for the v anchors); "
                             f"got {describe(exclude)}")
        mask = mask.reshape(-1, b, b) & ~torch.eye(b, dtype=torch.bool, device=u.device)
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
    return masked_logsumexp(logits, extras.exclude_negatives)


def add_negatives(lse: torch.Tensor, extra: torch.Tensor | None) -> torch.Tensor:
    """``logaddexp`` of the first ``len(extra)`` anchors' log-sum-exps with ``extra``."""
    if extra is None:
        return lse
    b = len(extra)
    return torch.cat([torch.logaddexp(lse[:b], extra), lse[b:]])


def self_logsumexp(z: torch.Tensor, temperature: Any, chunk_size: Any,
                   partner: int | None = None,
                   mask: CandidateMask | None = None) -> torch.Tensor:
    """Each row's log-sum-exp over the other rows of ``z`` (and not its ``partner``
    rows away, for DCL, nor what ``mask`` leaves out): dense through the Gram matrix,
    or tile by tile."""
    n = z.shape[-2]
    chunk = resolve_chunk_size(chunk_size, n, n)
    return candidate_logsumexp(z, z, temperature, chunk, skip_self=True, partner=partner,
                               mask=mask)


def with_negatives(lse: torch.Tensor, anchors: torch.Tensor, extras: Extras | None,
                   temperature: Any) -> torch.Tensor:
    """``lse`` (one per anchor row) with the first ``B`` rows' (the ``u`` anchors') hard
    negatives added."""
    if extras is None or extras.negatives is None:
        return lse
    b = extras.negatives.shape[0]
    return add_negatives(lse, negatives_logsumexp(anchors[:b], extras, temperature))
