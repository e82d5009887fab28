"""How a batch's rows meet a loss: the one step from a batch to the loss's terms.

Everything that computes a loss on a batch of embeddings goes through
:meth:`Loss.batch_terms <skcontrast.losses.Loss.batch_terms>` (the estimators'
criterion, the sentence-transformers loss, curation's row losses) or, for many index
subsets of one batch at once, :meth:`Loss.batch_inputs
<skcontrast.losses.Loss.batch_inputs>` (curation's sub-batch losses), and batch scoring
goes through :meth:`Loss.score_batches <skcontrast.losses.Loss.score_batches>`. So the
layout of a batch (pairs and their hard-negative columns, two crops, single views), its
labels, its rows of the training data, the content identity of its items and their
groups are read in one place, which also builds the false-negative guard's masks.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from .._validation import check_choice

#: How a batch's rows reach a loss: two views per item (and hard-negative columns),
#: one view per item (with labels), or two augmented crops of each labelled item.
STRUCTURES = ("pairs", "single", "crops")


class LossBatch(NamedTuple):
    """One batch as a loss sees it.

    Attributes
    ----------
    embeddings : torch.Tensor
        ``(B, 2 + k, d)`` for ``'pairs'`` (anchor, positive, ``k`` hard-negative
        columns), ``(B, d)`` for ``'single'``, ``(B, 2, d)`` for ``'crops'``.
    structure : {'pairs', 'single', 'crops'}, default='pairs'
    labels : torch.Tensor or None
        ``(B,)`` labels of a label loss's items.
    index : torch.Tensor or None
        ``(B,)`` the items' rows of the training data (a guide's embeddings are indexed by
        them; a memory remembers by them).
    content : torch.Tensor or None
        ``(B, 2 + k)`` content ids of each item's columns
        (:meth:`~skcontrast.losses.FalseNegativeGuard.content_ids`), for a
        ``same_content`` guard.
    groups : torch.Tensor or None
        ``(B,)`` each item's group, for a ``same_group`` guard.
    """

    embeddings: torch.Tensor
    structure: str = "pairs"
    labels: torch.Tensor | None = None
    index: torch.Tensor | None = None  # type: ignore[assignment]  # a field, not tuple.index
    content: torch.Tensor | None = None
    groups: torch.Tensor | None = None

    @classmethod
    def of(cls, embeddings: torch.Tensor, labels: torch.Tensor | None, labelled: bool,
           **fields: Any) -> LossBatch:
        """The batch whose structure its shape and labels tell: two crops or single views
        of labelled items for a label loss, else pairs (a single view is then its own
        positive)."""
        if labels is not None and labelled:
            structure = "crops" if embeddings.ndim == 3 else "single"
            return cls(embeddings, structure, labels, **fields)
        if embeddings.ndim == 2:
            embeddings = torch.stack([embeddings, embeddings], dim=1)
        return cls(embeddings, "pairs", None, **fields)


class LossInputs(NamedTuple):
    """What a loss function takes for a :class:`LossBatch`: ``(a, b)`` two views (``b``
    the labels of a label loss), hard negatives, and how many of its rows one item
    makes."""

    a: torch.Tensor
    b: torch.Tensor | None
    negatives: torch.Tensor | None
    rows_per_item: int


def loss_inputs(batch: LossBatch) -> LossInputs:
    """The inputs a loss function takes for ``batch``: single views with their labels,
    two crops of an item as two rows of its label, or the two views of pairs and their
    hard-negative columns (a label loss sees each pair as its own class)."""
    check_choice(batch.structure, "structure", STRUCTURES)
    z = batch.embeddings
    if batch.structure == "single":
        return LossInputs(z, batch.labels, None, 1)
    if batch.structure == "crops":
        assert batch.labels is not None  # crops are of labelled items
        return LossInputs(z.reshape(-1, z.shape[-1]), batch.labels.repeat_interleave(2),
                          None, 2)
    return LossInputs(z[:, 0], z[:, 1], z[:, 2:] if z.shape[1] > 2 else None, 1)
