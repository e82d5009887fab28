"""The curating selectors: JEST's learnability of a sub-batch (Evans et al., NeurIPS
2024; :class:`JESTSelector`) and RHO-LOSS's reducible loss of each row (Mindermann et
al., ICML 2022; :class:`RhoLossSelector`), with the per-row and per-subset losses they
score by. What every curating selector shares is :mod:`._curation`."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._validation import check_choice, check_int, store_params
from ..losses import Loss, LossBatch, loss_inputs
from ._curation import CuratingSelector, CurationBatch
from ._jest import SCORES, block_sample, chunk_sizes, gumbel_chunks, score_matrix


def subset_losses(batch: LossBatch, loss: Loss, subsets: np.ndarray) -> torch.Tensor:
    """Summed loss (mean x size) of each row subset ``subsets`` (``(m, T)`` positions in
    the batch) of ``batch``, in vectorised calls
    (:meth:`~skcontrast.losses.Loss.sub_batch_losses`), without gradients. A subset of
    one row has nothing to contrast: it scores 0."""
    z = batch.embeddings
    if subsets.shape[1] < 2:
        return torch.zeros(len(subsets), dtype=z.dtype, device=z.device)
    with torch.no_grad():
        values = loss.sub_batch_losses(batch, subsets)
    return values * subsets.shape[1]



def row_losses(batch: LossBatch, loss: Loss) -> torch.Tensor:
    """Each row's loss in ``batch``, shape ``(S,)``: the terms of its anchors (both views,
    or both crops) from one call of the loss with ``reduction='none'``, scaled so that
    they add up to the batch's summed loss (mean x size, as :func:`subset_losses`). A
    loss without per-anchor terms (a margin loss) gives each row its
    :func:`leave_one_out` share."""
    size = len(batch.embeddings)
    with torch.no_grad():
        terms = loss.batch_terms(batch, reduction="none").loss
    if terms.shape == (size,):
        return terms
    if terms.shape == (2, size):  # the two directions of a symmetric loss
        return terms.sum(0)
    if terms.shape == (2 * size,):  # crops 2i and 2i + 1, or [u; v] stacked; a mean
        # over 2S anchors, so S x mean is half their sum
        pairs = terms.view(size, 2) if batch.structure == "crops" else terms.view(2, size).T
        return pairs.sum(1) / 2
    return leave_one_out(batch, loss)



def leave_one_out(batch: LossBatch, loss: Loss) -> torch.Tensor:
    """Each row's share of ``batch``'s summed loss: the summed loss of the batch less
    that of the batch without the row (its loss as an anchor and as everyone's
    negative), shape ``(S,)``."""
    size = len(batch.embeddings)
    everyone = np.arange(size)
    whole = subset_losses(batch, loss, everyone[None])
    without = np.stack([np.delete(everyone, i) for i in range(size)])
    return whole - subset_losses(batch, loss, without)



class JESTSelector(CuratingSelector):
    r"""JEST: keep the jointly most learnable sub-batch of each super-batch.

    Evans et al., *Data curation via joint example selection further accelerates
    multimodal learning* (NeurIPS 2024), Sec. 2 and Algorithm 1. Each training step
    embeds a super-batch of ``batch_size / (1 - filter_ratio)`` rows without gradient
    and keeps ``batch_size`` of them, drawn in ``n_chunks`` chunks from the softmax of
    the score each row adds to the rows already drawn, where the score of a sub-batch
    is

    - ``'learnability'``: the learner's summed loss on it minus the reference's (hard
      for the learner, easy for the reference);
    - ``'hard'``: the learner's summed loss alone (no reference);
    - ``'easy_reference'``: minus the reference's (what the reference finds easy).

    The loss is the one being trained, as it is at that step (``loss=None``), or this
    selector's own. A loss that is a sum of pair terms (:class:`~skcontrast.losses.SigLIP`,
    whose ``pair_losses`` give them with its balance weights and learned temperature and
    bias) is scored by the paper's sampler on the two models' pair-loss matrices (as
    :func:`jest_select` on their logits). Any other
    loss is scored on sub-batches directly: the first chunk by each row's loss in the
    super-batch (the terms of its anchors), each later chunk by the summed loss of the
    chosen rows plus the candidate, less that of the chosen rows: exact, at
    ``O(n_chunks x S x keep^2 x d)`` per step against SigLIP's ``O(S^2 d)``.

    Parameters
    ----------
    batch_size : int, default=32
        Rows that train at each step.
    filter_ratio : float, default=0.5
        ``f`` in [0, 1): the share of each super-batch left out (0.5: a super-batch of
        twice the batch size).
    n_chunks : int, default=16
        Chunks of the sampler (at most the rows kept; fewer are used when fewer rows are
        kept).
    score : {'learnability', 'hard', 'easy_reference'}, default='learnability'
    reference : fitted estimator, torch module, array or None, default=None
        The reference model: a fitted skcontrast estimator (its network embeds the
        super-batch as the learner's does), a torch module (an encoder applied to each
        view, on the training device), or fixed embeddings of the training rows
        (``(n, 2, k)`` pairs, ``(n, k)`` single views), e.g. a pre-trained model's,
        which cost no forward pass. Kept as it is by :func:`sklearn.base.clone`.
    loss : Loss, str or None, default=None
        What to score with; ``None``: the loss being trained.
    selection_pass : {'fresh', 'cached'} or None, default=None
        ``'fresh'``: each step embeds its whole super-batch (learner and reference
        model); ``'cached'``: rows are scored with the learner's embeddings from their
        last training step and the reference's from the first pass that met them, so a
        step embeds only rows never met before (see :class:`CuratingSelector`).
        ``None``: the estimator's ``selection_pass`` (``'fresh'`` outside an estimator).
    drop_last : bool, default=False
        Leave out the last, shorter super-batch.
    random_state : int, numpy Generator or None, default=None

    Examples
    --------
    >>> import torch
    >>> from skcontrast.selectors import CurationBatch, JESTSelector
    >>> sel = JESTSelector(batch_size=4, filter_ratio=0.5, score="hard", random_state=0)
    >>> super_batches = list(sel.split(torch.zeros(16, 1)))
    >>> [len(b) for b in super_batches]
    [8, 8]
    >>> z = torch.nn.functional.normalize(torch.randn(8, 2, 3), dim=-1)
    >>> kept = sel.curate(CurationBatch(z, torch.as_tensor(super_batches[0])))
    >>> len(kept)
    4
    """

    def __init__(self, batch_size: int = 32, filter_ratio: float = 0.5, *,
                 n_chunks: int = 16, score: str = "learnability", reference: Any = None,
                 loss: Any = None, selection_pass: str | None = None, drop_last: bool = False,
                 random_state: Any = None) -> None:
        store_params(self, locals())

    def _check_curation_params(self) -> None:
        super()._check_curation_params()
        check_int(self.n_chunks, "n_chunks", minimum=1)
        check_choice(self.score, "score", SCORES)
        if self.score != "hard" and self.reference is None:
            raise ValueError(f"score={self.score!r} needs a reference (a fitted estimator, "
                             "a torch module or fixed embeddings); score='hard' uses the "
                             "learner alone")

    @property
    def scores_with_model(self) -> bool:
        return self.score != "hard" and super().scores_with_model

    def _keep(self, batch: CurationBatch, keep: int, loss: Loss) -> torch.Tensor:
        n_chunks = min(int(self.n_chunks), keep)
        learner = batch.embeddings.float() if self.score != "easy_reference" else None
        reference = self.reference_embeddings(batch) if self.score != "hard" else None
        batches = [None if z is None else batch.loss_batch(z, loss)
                   for z in (learner, reference)]
        if loss.pair_losses is not None:  # the loss is a sum of pair terms (SigLIP)
            pairs = [None if b is None else loss.pair_losses(*loss_inputs(b)[:2]).detach()
                     for b in batches]
            return block_sample(score_matrix(*pairs), keep, n_chunks, self._generator)
        models = [(b, sign) for b, sign in zip(batches, (1.0, -1.0), strict=True)
                  if b is not None]

        def first() -> torch.Tensor:
            return sum((sign * row_losses(b, loss) for b, sign in models),
                       torch.zeros(len(batch.embeddings), device=batch.embeddings.device))

        def summed(rows: np.ndarray) -> torch.Tensor:
            return sum((sign * subset_losses(b, loss, rows) for b, sign in models),
                       torch.zeros(len(rows), device=batch.embeddings.device))

        def update(gains: torch.Tensor, chosen: torch.Tensor, new: torch.Tensor
                   ) -> torch.Tensor:
            picked = np.flatnonzero(chosen.cpu().numpy())
            others = np.flatnonzero(~chosen.cpu().numpy())
            grown = np.concatenate([np.broadcast_to(picked, (len(others), len(picked))),
                                    others[:, None]], axis=1)
            out = torch.full_like(gains, float("-inf"))
            out[torch.as_tensor(others, device=gains.device)] = \
                summed(grown) - summed(picked[None])
            return out

        return gumbel_chunks(first(), update, chunk_sizes(keep, n_chunks), self._generator)



class RhoLossSelector(CuratingSelector):
    r"""RHO-LOSS: keep the rows of each super-batch with the largest reducible loss.

    Mindermann et al., *Prioritized training on points that are learnable, worth
    learning, and not yet learnt* (ICML 2022), Sec. 3 and Algorithm 1: the reducible
    loss of a point is its training loss less its *irreducible* loss, the loss of a
    model trained on holdout data (here: the ``reference``); each step keeps the
    ``batch_size`` points of largest reducible loss. A row's loss is the terms of its
    anchors (both views) in the super-batch, one call of the loss (a margin loss, which
    has no per-anchor terms: its share of the super-batch's loss), so RHO-LOSS is the
    per-row case of :class:`JESTSelector`'s learnability, the baseline JEST compares
    with.

    Parameters
    ----------
    batch_size : int, default=32
    filter_ratio : float, default=0.5
        As in :class:`JESTSelector` (the paper keeps 10%: ``filter_ratio=0.9``).
    reference : fitted estimator, torch module, array or None, default=None
        The irreducible-loss model (as in :class:`JESTSelector`); ``None`` ranks by the
        learner's loss alone (the paper's "loss" baseline).
    loss : Loss, str or None, default=None
    selection_pass : {'fresh', 'cached'} or None, default=None
        As in :class:`JESTSelector`.
    drop_last : bool, default=False
    random_state : int, numpy Generator or None, default=None
        Shuffles the super-batches (the ranking itself is deterministic).
    """

    def __init__(self, batch_size: int = 32, filter_ratio: float = 0.5, *,
                 reference: Any = None, loss: Any = None, selection_pass: str | None = None,
                 drop_last: bool = False, random_state: Any = None) -> None:
        store_params(self, locals())

    def _keep(self, batch: CurationBatch, keep: int, loss: Loss) -> torch.Tensor:
        score = row_losses(batch.loss_batch(batch.embeddings.float(), loss), loss)
        reference = self.reference_embeddings(batch)
        if reference is not None:
            score = score - row_losses(batch.loss_batch(reference, loss), loss)
        return torch.topk(score, keep).indices

