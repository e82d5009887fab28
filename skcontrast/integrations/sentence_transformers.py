"""skcontrast selectors and losses inside sentence-transformers training.

- :func:`batch_sampler`: any selector as ``SentenceTransformerTrainingArguments(
  batch_sampler=...)``: the trainer's batches are the selector's (through
  :class:`~skcontrast.selectors.SelectorSampler`; with several data-parallel processes
  each process's batch is a whole selector batch); an adaptive selector sees the model
  being trained (its embeddings refreshed every ``refresh_every`` epochs) or a teacher;
- :class:`SkcontrastLoss`: any pair loss of :mod:`skcontrast.losses` as a
  sentence-transformers loss, with the dataset's hard-negative columns (``(anchor,
  positive, negative_1 ... negative_k)``) and the loss's false-negative guard.

Needs ``sentence-transformers`` (``pip install sentence-transformers``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch
from torch import nn

from .._validation import describe
from ..losses import LossBatch, make_loss
from ..selectors import BatchSelector, FitSettings, SelectorSampler

#: ``refresh_every`` not given (its deprecated alias of ``selection_pass``)
_UNSET: Any = object()


def batch_sampler(selector: BatchSelector, *, model: Any = None,
                  embed: Callable[[np.ndarray], Any] | None = None,
                  selection_pass: str | int = "fresh", refresh_every: Any = _UNSET
                  ) -> Callable[..., SelectorSampler]:
    """A ``batch_sampler`` for ``SentenceTransformerTrainingArguments``: the trainer
    calls it with the dataset and its settings, and gets a
    :class:`~skcontrast.selectors.SelectorSampler` over a clone of ``selector``.

    - ``batch_size`` (``per_device_train_batch_size``) sets the selector's batch size,
      ``drop_last`` its ``drop_last`` (where it has one); a selector without a seed is
      seeded from the trainer's ``seed`` (or its ``generator``);
    - with several data-parallel processes, every process draws the same sequence of
      selector batches and the trainer (Accelerate) deals them out whole, batch ``i`` to
      process ``i mod R``: each process trains on whole selector batches of
      ``per_device_train_batch_size`` (the batch its loss sees), and an epoch covers the
      data once across the processes. The model's embeddings are taken from process 0
      (broadcast), so that every process selects on the same numbers; a teacher's
      ``embed`` must return the same array on every process;
    - the first of the trainer's ``valid_label_columns`` the dataset holds gives the
      labels (``max_same_label`` guards, label losses);
    - an adaptive selector's embeddings come from ``embed(indices) -> (n, 2, d)`` (a
      teacher), or from ``model`` (the SentenceTransformer being trained: its
      embeddings of the first two text columns, when ``selection_pass`` asks for a
      pass).

    Parameters
    ----------
    selector : BatchSelector
    model : SentenceTransformer or None
    embed : callable or None
    selection_pass : {'fresh', 'cached'} or int, default='fresh'
        When the embeddings are taken anew (see
        :class:`~skcontrast.selectors.SelectorSampler`): every epoch, once, or every
        ``k`` epochs.
    refresh_every : int or None
        Deprecated alias of ``selection_pass`` (``1``: ``'fresh'``, ``None``:
        ``'cached'``, ``k``: ``k``).

    Examples
    --------
    >>> from skcontrast.integrations.sentence_transformers import batch_sampler
    >>> from skcontrast.selectors import TemperedSelector, ShuffledBatchSelector
    >>> sampler = batch_sampler(TemperedSelector(ShuffledBatchSelector(), max_same_label=1))
    >>> # SentenceTransformerTrainingArguments(..., batch_sampler=sampler)
    """
    if not isinstance(selector, BatchSelector):
        raise ValueError(f"selector must be a BatchSelector of skcontrast.selectors; got "
                         f"{describe(selector)}")
    if model is not None and embed is not None:
        raise ValueError("give model (the embeddings of the model being trained) or embed "
                         "(a teacher), not both")
    if refresh_every is not _UNSET:
        selection_pass = SelectorSampler.deprecated_refresh_every(refresh_every,
                                                                  "batch_sampler")
    SelectorSampler.pass_period(selection_pass)  # refused here, not when the trainer calls

    def make(dataset: Any, batch_size: int, drop_last: bool,
             valid_label_columns: list[str] | None = None,
             generator: torch.Generator | None = None, seed: int = 0) -> SelectorSampler:
        chosen = selector.for_fit(FitSettings(
            batch_size=batch_size, drop_last=bool(drop_last),
            random_state=int(generator.initial_seed()) % 2**32 if generator is not None
            else int(seed)))
        columns = list(getattr(dataset, "column_names", []))
        label = next((c for c in valid_label_columns or [] if c in columns), None)
        labels = None if label is None else np.asarray(dataset[label])
        texts = [c for c in columns if c != label]
        fn = embed
        if model is not None:
            if len(texts) < 2:
                raise ValueError(f"the dataset needs two text columns (anchor, positive) for "
                                 f"the model's embeddings; it has {texts}")
            fn = _model_embeddings(model, dataset, texts[:2])
        # one replica: Accelerate's BatchSamplerShard deals this sampler's whole batches
        # to the processes; slicing them here as well would lose rows
        return SelectorSampler(chosen, len(dataset), embed=fn, labels=labels,
                               selection_pass=selection_pass, drop_last=bool(drop_last),
                               num_replicas=1, rank=0)

    return make


def _model_embeddings(model: Any, dataset: Any, columns: list[str]
                      ) -> Callable[[np.ndarray], np.ndarray]:
    """``embed(indices)``: the model's current embeddings of two text columns, without
    leaving it in evaluation mode (``encode`` switches it)."""
    import torch.distributed as dist

    def embed(indices: np.ndarray) -> np.ndarray:
        shared = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        out: list[Any] = [None]
        if not shared or dist.get_rank() == 0:
            rows = [int(i) for i in indices]
            training = model.training
            try:
                parts = [np.asarray(model.encode([dataset[c][i] for i in rows],
                                                 convert_to_numpy=True,
                                                 show_progress_bar=False))
                         for c in columns]
            finally:
                model.train(training)
            out[0] = np.stack(parts, axis=1)
        if shared:  # process 0's numbers on every process: the same batches everywhere
            dist.broadcast_object_list(out, src=0)
        return out[0]
    return embed


class SkcontrastLoss(nn.Module):
    """Any pair loss of :mod:`skcontrast.losses` as a sentence-transformers loss.

    The first two columns of each batch are the anchors and positives; further columns
    are hard negatives (each anchor's own, and with the loss's ``share_negatives`` every
    anchor sees all of them, as ``MultipleNegativesRankingLoss`` does). The loss's
    ``false_negatives`` guard applies: ``same_content`` compares the texts' token ids,
    ``same_group`` the batch's label column, ``guide='self'`` the model's own
    similarities (a guide given as embeddings of dataset rows is refused: the trainer
    does not say which rows a batch holds).

    Parameters
    ----------
    model : SentenceTransformer
    loss : Loss or str, default='symmetric_info_nce'
        A pair loss object (or name); with hard-negative columns or a guard, one that takes
        them (InfoNCE, SymmetricInfoNCE, NTXent, DCL, HardNegativeNCE, DebiasedNCE). A
        learned temperature is not supported here (the trainer does not optimise the
        loss's parameters).
    """

    def __init__(self, model: Any, loss: Any = "symmetric_info_nce") -> None:
        super().__init__()
        self.model = model
        self.loss = make_loss(loss)
        if self.loss.labelled:
            raise ValueError(f"{type(self.loss).__name__} is a label loss; SkcontrastLoss takes "
                             "pair losses (anchor, positive[, negatives])")
        if getattr(self.loss, "learn_temperature", False):
            raise ValueError("learn_temperature=True is not supported in SkcontrastLoss: the "
                             "trainer does not optimise the loss's parameters")
        guard = getattr(self.loss, "false_negatives", None)
        if guard is not None:
            guard.check()
            if guard.guide is not None and not isinstance(guard.guide, str):
                raise ValueError("FalseNegativeGuard(guide=<embeddings of rows>) needs the "
                                 "rows of each batch, which the trainer does not give; use "
                                 "guide='self' or same_content/same_group")

    def forward(self, sentence_features: Iterable[dict[str, torch.Tensor]],
                labels: torch.Tensor | None = None) -> torch.Tensor:
        """The loss of a batch: the tokenized columns (anchors, positives, negatives...)
        embedded by the model, and the label column (the groups) if any."""
        features = list(sentence_features)
        reps = [self.model(f)["sentence_embedding"] for f in features]
        return self.loss_of(reps, features, labels)

    def loss_of(self, reps: list[torch.Tensor], features: list[dict] | None = None,
                labels: torch.Tensor | None = None) -> torch.Tensor:
        """The loss of a batch's column embeddings (anchors, positives, negatives...):
        one :class:`~skcontrast.losses.LossBatch` of pairs, its content ids read from the
        tokenized columns and its groups from the label column."""
        if len(reps) < 2:
            raise ValueError(f"SkcontrastLoss needs (anchor, positive) columns; got "
                             f"{len(reps)}")
        guard = getattr(self.loss, "false_negatives", None)
        content = groups = None
        if guard is not None:
            if guard.same_content and features is not None:
                content = guard.content_ids(features).to(reps[0].device)
            if guard.same_group:
                if labels is None:
                    raise ValueError("FalseNegativeGuard(same_group=True) needs a label "
                                     "column (the group of each row)")
                groups = torch.as_tensor(labels).reshape(-1)
        batch = LossBatch(torch.stack(reps, dim=1), "pairs", index=torch.arange(len(reps[0])),
                          content=content, groups=groups)
        return self.loss.batch_terms(batch).loss

    def get_config_dict(self) -> dict:
        return {"loss": repr(self.loss)}
