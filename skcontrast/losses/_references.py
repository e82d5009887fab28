"""Losses of anchors against reference embeddings held outside the batch.

A cross-batch memory (XBM, Wang et al. 2020; Sors et al. 2021, arXiv:2112.11743, App. E) keeps
detached embeddings of earlier batches; the loss of a batch's anchors is then taken against those
*references* instead of against the batch itself. Which references are an anchor's
candidates, and which of them are its positives, is given as two boolean masks of shape
``(A, M)`` (anchors x references), so one function serves every loss:

- :func:`reference_softmax_terms`: the InfoNCE family and SupCon. For anchor ``a`` with
  candidates ``C(a)`` and positives ``P(a)`` (a subset of ``C(a)``)

      positive_a = -mean_{r in P(a)} s_ar / t
      entropy_a  = log sum_{r in C(a)} exp(s_ar / t)         (DCL: over C(a) \\ P(a))

  which is SupCon's anchor loss (Kini et al. 2023, arXiv:2306.07960, Eq. 3) with the references as
  the batch; with one positive per anchor it is the InfoNCE anchor loss (Sors et al. 2021, Eq. 3-4).
- :func:`margin_pair_terms`: the contrastive margin loss (Sors et al. 2021, Eq. 1-2) over the
  pairs of the masks, with its three averaging conventions.
"""

from __future__ import annotations

from typing import Any

import torch

from ._core import maybe_normalize, safe_sqrt, similarity, squared_distances

#: How the contrastive margin loss averages its pair terms (see :func:`contrastive_margin`).
AVERAGING_MODES = ("separate", "global", "anchor")


def reference_softmax_terms(anchors: torch.Tensor, references: torch.Tensor,
                            candidates: torch.Tensor, positives: torch.Tensor, *,
                            temperature: Any, decoupled: bool = False,
                            normalize: bool = True) -> tuple[torch.Tensor, ...]:
    """Per-anchor positive and entropy terms of anchors against references.

    Parameters
    ----------
    anchors : torch.Tensor of shape (A, d)
    references : torch.Tensor of shape (M, d)
        Usually detached (a memory); gradients flow to whatever requires them.
    candidates, positives : bool tensors of shape (A, M)
        ``C(a)`` and ``P(a)``; ``positives`` should lie inside ``candidates``.
    temperature : float or scalar tensor
    decoupled : bool, default=False
        Leave the positives out of the entropy's sum (DCL).
    normalize : bool, default=True
        L2-normalise anchors and references first.

    Returns
    -------
    positive, entropy : torch.Tensor of shape (A,)
        Zero for an anchor without positives (or without candidates).
    has_positive : torch.Tensor of shape (A,)
        1.0 where the anchor has a positive and a non-empty entropy sum, else 0.0.
    """
    anchors = maybe_normalize(anchors, normalize)
    references = maybe_normalize(references.to(anchors.dtype), normalize)
    logits = similarity(anchors, references, temperature)
    n_positive = positives.sum(-1)
    summed = candidates & ~positives if decoupled else candidates
    usable = (n_positive > 0) & summed.any(-1)
    positive = -(logits * positives).sum(-1) / n_positive.clamp_min(1)
    masked = logits.masked_fill(~summed, float("-inf"))
    # rows left without any term read 0 before the log-sum-exp, so no gradient is NaN
    entropy = torch.logsumexp(torch.where(usable[:, None], masked, 0.0), dim=-1)
    weight = usable.to(anchors.dtype)
    return positive * weight, torch.where(usable, entropy, 0.0), weight


def margin_pair_terms(anchors: torch.Tensor, references: torch.Tensor,
                      positives: torch.Tensor, negatives: torch.Tensor, *, margin: float,
                      temperature: Any, distance: str, power: int,
                      normalize: bool) -> tuple[torch.Tensor, ...]:
    r"""Sums of the contrastive margin loss's pair terms (Sors et al. 2021, Eq. 1-2).

    Over the pairs ``(a, r)`` of ``positives`` it sums :math:`d_{ar}^q`, over those of
    ``negatives`` :math:`\max(0, m - d_{ar})^q`, with distances and margin divided by
    ``temperature``. Works on ``(..., A, d)`` anchors and ``(..., M, d)`` references.

    Returns
    -------
    positive_sum, entropy_sum, n_positive, n_negative : torch.Tensor of shape (...)
    """
    anchors = maybe_normalize(anchors, normalize)
    references = maybe_normalize(references.to(anchors.dtype), normalize)
    if distance == "euclidean":
        dist = safe_sqrt(squared_distances(anchors, references))
    else:
        dist = 1 - similarity(maybe_normalize(anchors, True),
                              maybe_normalize(references, True), 1.0)
    dist = dist / temperature
    pos_terms = dist.pow(power) * positives
    neg_terms = torch.relu(margin / temperature - dist).pow(power) * negatives
    return (pos_terms.sum((-1, -2)), neg_terms.sum((-1, -2)),
            positives.sum((-1, -2)).to(anchors.dtype), negatives.sum((-1, -2)).to(anchors.dtype))


def average_margin_terms(sums: tuple[torch.Tensor, ...], n_anchors: int, averaging: str,
                         lambda_pos: Any, lambda_ent: Any) -> tuple[torch.Tensor, ...]:
    """``(loss, positive, entropy)`` from the sums of :func:`margin_pair_terms`.

    ``'separate'`` averages each part over its own pairs (Sors et al. 2021, Eq. 7); ``'global'``
    averages both over all pairs; ``'anchor'`` divides the sums by the number of
    anchors, the convention of the XBM authors' code, under which the weight of the
    entropy part grows with the number of negatives (set-up S1 of Sors et al. 2021, App. E).
    ``positive`` and ``entropy`` are the plain means over their pairs in every mode.
    """
    pos_sum, neg_sum, n_pos, n_neg = sums
    positive = pos_sum / n_pos.clamp_min(1)
    entropy = neg_sum / n_neg.clamp_min(1)
    if averaging == "separate":
        weight_pos, weight_ent = lambda_pos, lambda_ent
    elif averaging == "global":
        total = (n_pos + n_neg).clamp_min(1)
        weight_pos, weight_ent = lambda_pos * n_pos / total, lambda_ent * n_neg / total
    else:
        weight_pos, weight_ent = lambda_pos * n_pos / n_anchors, lambda_ent * n_neg / n_anchors
    return weight_pos * positive + weight_ent * entropy, positive, entropy
