"""Step-level curation: selectors that choose which rows of a super-batch train.

A *curating* selector's epoch is a partition of the samples into super-batches; at each
training step it keeps ``batch_size`` rows of the super-batch (:meth:`curate`), judged by
the learner's no-grad embeddings of them and, optionally, a reference model's. The
estimators call that one hook (their training step never learns a selector's name); a
loop of one's own calls it too, with the batches of a
:class:`~skcontrast.selectors.SelectorSampler`.

Scores are summed losses of sub-batches, ``loss(sub-batch) x its size`` (what JEST sums
over pairs), computed with the loss being trained as it is at that step, on the one
:class:`~skcontrast.losses.LossBatch` of each model's embeddings of the super-batch
(:meth:`CurationBatch.loss_batch`), which alone says how its rows meet the loss.
"""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

import numpy as np
import torch
from sklearn.base import clone

from .._batch import take_rows
from .._validation import check_choice, check_real, describe
from ..losses import Loss, LossBatch
from ._base import (
    BatchSelector,
    FitSettings,
    batch_sizes,
    check_batch_size,
    n_partition_batches,
    partition,
    training_rows,
)
from ._sampler import SelectorSampler


class CurationBatch(NamedTuple):
    """What a curating selector sees at one training step, for a super-batch of ``S`` rows.

    Attributes
    ----------
    embeddings : torch.Tensor
        The learner's embeddings of the super-batch, without gradient: ``(S, 2, k)``
        for pairs (or two crops), ``(S, k)`` for single views.
    index : torch.Tensor of int64, shape (S,)
        The rows of the training data the super-batch holds (for fixed reference
        embeddings).
    labels : torch.Tensor or None
        The rows' labels, for a label loss.
    views : Any
        The super-batch as the network takes it, on its device: what a reference model
        embeds. ``None`` when the reference is fixed embeddings (or absent).
    loss : Loss or None
        The loss being trained, as it is now (learned temperature included); ``None``:
        the selector's own ``loss``, else :class:`~skcontrast.losses.SymmetricInfoNCE`.
    reference : torch.Tensor or None
        The reference model's embeddings of the super-batch, when the caller computed
        them (:meth:`CuratingSelector.embed_reference`, e.g. shard by shard across
        data-parallel processes); ``None``: the selector computes them from ``views``.
    sampler : SelectorSampler or None
        The sampler whose tables keep the rows' embeddings between steps
        (``selection_pass='cached'``: a reference model's, when the selector computes
        them); ``None``: a sampler of the selector's own (a loop without one).
    """

    embeddings: torch.Tensor
    index: torch.Tensor  # type: ignore[assignment]  # a field; tuple.index is not used
    labels: torch.Tensor | None = None
    views: Any = None
    loss: Loss | None = None
    reference: torch.Tensor | None = None
    sampler: SelectorSampler | None = None

    def loss_batch(self, embeddings: torch.Tensor, loss: Loss) -> LossBatch:
        """A model's ``embeddings`` of the super-batch (the learner's, or the
        reference's) as the :class:`~skcontrast.losses.LossBatch` that ``loss`` scores:
        two crops or single views of labelled rows for a label loss, else pairs
        (:meth:`~skcontrast.losses.LossBatch.of`)."""
        return LossBatch.of(embeddings, self.labels, loss.labelled)


SELECTION_PASSES = ("fresh", "cached")


class CuratingSelector(BatchSelector):
    """Base of the selectors that keep rows of each super-batch at each training step.

    An epoch shuffles the samples into super-batches of ``round(batch_size / (1 -
    filter_ratio))`` rows (``get_n_splits`` counts them: one per training step); each
    step keeps ``batch_size`` of them (a last, shorter super-batch keeps the same share,
    at least 2) through :meth:`curate`, the one hook the estimators call. A selector of
    one's own subclasses it, stores ``batch_size``, ``filter_ratio``, ``reference``,
    ``drop_last`` and ``random_state`` (and ``loss``, ``selection_pass``, if it has
    them), and implements ``_keep(batch, keep, loss) -> positions``;
    :meth:`reference_embeddings` gives the reference's embeddings of the batch.

    **The selection pass.** With ``selection_pass='fresh'`` every step embeds the whole
    super-batch (the learner, and a reference model). With ``'cached'`` a row's
    embeddings are taken from the tables of the
    :class:`~skcontrast.selectors.SelectorSampler` that iterates the selector (the one
    place every per-sample embedding is kept): the learner's from the row's last
    training step (pushed with ``sampler.update``, as the estimators do with each
    step's embeddings) or the pass that first met it, the reference model's from the
    first pass that met it (exact for fixed views; with augmentations, that first view
    stands for all). A step then embeds only the rows it has never met
    (``sampler.stale_rows``): after the first epoch, a curated step costs about a
    training step on ``batch_size`` rows plus the scoring. The learner's cached
    embeddings are up to a few epochs old (a row trains in about ``1 - filter_ratio`` of
    the epochs): cheaper, and staler. In a loop without a sampler, :meth:`stale_rows`,
    :meth:`complete` and :meth:`remember` keep them in a sampler of the selector's own.
    """

    curates = True

    def __sklearn_clone__(self) -> CuratingSelector:
        # the reference is a fitted model or fixed embeddings, shared, never refitted:
        # scikit-learn's clone would return an unfitted copy of a fitted estimator
        params = self.get_params(deep=False)
        reference = params.pop("reference")
        return type(self)(**{k: clone(v, safe=False) for k, v in params.items()},
                          reference=reference)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.pop("_reference_module", None)  # a device copy, made again when needed
        return state

    def _fit_params(self, settings: FitSettings) -> dict:
        """The fit's ``selection_pass`` where this selector has none, and fixed reference
        embeddings given per row of ``X`` restricted to the rows the fit trains on."""
        out = {**super()._fit_params(settings),
               "reference": training_rows(self.reference, settings)}
        if getattr(self, "selection_pass", "fresh") is None:
            out["selection_pass"] = settings.selection_pass
        return out

    def load_state_dict(self, state: dict) -> CuratingSelector:
        """As :meth:`BatchSelector.load_state_dict`. A state saved by skcontrast 0.2.0
        may hold the rows' embeddings under ``'cache'``: they are dropped, as when the
        training rows change (each row is embedded again when a step first meets it);
        the sampler's tables keep them now."""
        return super().load_state_dict({k: v for k, v in state.items() if k != "cache"}
                                       if isinstance(state, dict) else state)

    # -- the epoch: super-batches --------------------------------------------------------

    def super_batch_size(self, n: int) -> int:
        """Rows of a super-batch for ``n`` samples."""
        b = check_batch_size(self.batch_size, n)
        f = check_real(self.filter_ratio, "filter_ratio", low=0.0, high=1.0,
                       high_open=True)
        return min(n, max(b, round(b / (1.0 - f))))

    def kept_rows(self, size: int, n: int) -> int:
        """Rows a super-batch of ``size`` rows keeps."""
        b = check_batch_size(self.batch_size, n)
        return min(size, max(2, round(size * b / self.super_batch_size(n))))

    def _select(self, X, y, groups, rng):
        n = len(X)
        self._check_curation_params()
        self._check_fixed_reference(n)
        batches = partition(rng.permutation(n), self.super_batch_size(n), self.drop_last)
        # the step-level draws of this epoch: reproducible from (random_state, epoch)
        self._generator = torch.Generator().manual_seed(int(rng.integers(2**63)))
        self._n_samples = n
        return batches

    def _n_batches(self, n, y):
        return n_partition_batches(n, self.super_batch_size(n), self.drop_last)

    def nominal_batch_size(self, n: int) -> int | None:
        """The rows that train at a step (``batch_size``), not the super-batch."""
        return min(int(self.batch_size), n)

    def largest_batch_size(self, n: int, y: Any = None) -> int | None:
        """The most rows a step keeps: those of a super-batch that a one-sample
        remainder joined, kept in proportion."""
        return max(self.kept_rows(size, n) for size in set(
            batch_sizes(n, self.super_batch_size(n), self.drop_last).tolist()))

    def _check_fixed_reference(self, n: int) -> None:
        """Fixed reference embeddings hold one row per sample: ``(n, 2, k)`` for pairs
        (or two crops), ``(n, k)`` for single views."""
        if self._reference_kind() != "embeddings":
            return
        shape = tuple(self.reference.shape) if hasattr(self.reference, "shape") else \
            np.shape(self.reference)
        if len(shape) not in (2, 3) or shape[0] != n or (len(shape) == 3 and shape[1] != 2):
            raise ValueError(f"reference embeddings must hold one row per training sample, "
                             f"(n, 2, k) for pairs or (n, k) for single views with n = {n}; "
                             f"got shape {shape}")

    def _check_curation_params(self) -> None:
        if not isinstance(self.drop_last, bool):
            raise ValueError(f"drop_last must be True or False; got {describe(self.drop_last)}")
        self._reference_kind()
        chosen = getattr(self, "selection_pass", None)
        if chosen is not None:
            check_choice(chosen, "selection_pass", SELECTION_PASSES)

    # -- the selection pass in a loop without a SelectorSampler ---------------------------

    def stale_rows(self, index: torch.Tensor, model: str = "learner") -> torch.Tensor:
        """Positions (int64, on the CPU) of the super-batch's rows whose embeddings by
        ``model`` (``'learner'`` or ``'reference'``) this step must compute: all of them
        with ``selection_pass='fresh'``, those never embedded with ``'cached'``
        (:meth:`~skcontrast.selectors.SelectorSampler.stale_rows` of the selector's own
        sampler)."""
        return self._own_sampler().stale_rows(index, model)

    def complete(self, index: torch.Tensor, positions: torch.Tensor,
                 embeddings: torch.Tensor | None, model: str = "learner") -> torch.Tensor:
        """The super-batch's embeddings by ``model``: ``embeddings`` of the rows
        ``positions`` (:meth:`stale_rows`), just computed, and the others from the table
        (``selection_pass='cached'``, which keeps the new ones;
        :meth:`~skcontrast.selectors.SelectorSampler.complete` of the selector's own
        sampler)."""
        return self._own_sampler().complete(index, positions, embeddings, model)

    def remember(self, index: torch.Tensor, embeddings: torch.Tensor) -> None:
        """With ``selection_pass='cached'``: the learner's embeddings of the rows
        ``index`` that just trained (the training step's own, without gradient), for the
        next steps that meet them. Nothing otherwise."""
        sampler = self._own_sampler()
        if sampler.caches_rows:
            sampler.update(index, embeddings)

    def _own_sampler(self) -> SelectorSampler:
        """The tables of a loop that iterates this selector's ``split`` without a
        :class:`SelectorSampler`: a sampler of its own over the epoch's samples (made
        when first needed, and again when their number changes)."""
        n = getattr(self, "_n_samples", None)
        if n is None:
            raise ValueError(f"{type(self).__name__} keeps the embeddings of an epoch's "
                             "rows: call split (or iterate a SelectorSampler) first")
        sampler = self.__dict__.get("_sampler")
        if sampler is None or sampler.n_samples != n:
            sampler = self._sampler = SelectorSampler(self, n)
        return sampler

    # -- the step ------------------------------------------------------------------------

    def curate(self, batch: CurationBatch) -> torch.Tensor:
        """The positions (in the super-batch, int64 on its device) of the rows to train.

        Call it once per super-batch of the current epoch (after ``split``), as the
        estimators do at every training step.
        """
        if not isinstance(batch, CurationBatch):
            raise ValueError(f"curate takes a CurationBatch; got {describe(batch)}")
        z = batch.embeddings
        if not isinstance(z, torch.Tensor) or z.ndim not in (2, 3) or len(z) < 2:
            raise ValueError(f"CurationBatch.embeddings must be the learner's (S, 2, k) or "
                             f"(S, k) embeddings of S >= 2 rows; got {describe(z)}")
        if getattr(self, "_generator", None) is None:
            raise ValueError(f"{type(self).__name__}.curate is called on the super-batches "
                             "of an epoch: call split (or iterate a SelectorSampler) first")
        n = getattr(self, "_n_samples", len(z))
        keep = self.kept_rows(len(z), n)
        loss = self.scoring_loss(batch.loss)
        kept = self._keep(batch, keep, loss)
        return kept.to(z.device)

    @property
    def scores_with_model(self) -> bool:
        """Whether each step runs a reference model (a forward pass of the super-batch)."""
        return self._reference_kind() == "model"

    def _keep(self, batch: CurationBatch, keep: int, loss: Loss) -> torch.Tensor:
        raise NotImplementedError

    # -- the reference -------------------------------------------------------------------

    def _reference_kind(self) -> str | None:
        ref = self.reference
        if ref is None:
            return None
        if isinstance(ref, torch.nn.Module) or hasattr(ref, "net_"):
            return "model"
        if hasattr(ref, "fit") and hasattr(ref, "get_params"):
            raise ValueError(f"reference {type(ref).__name__} is not fitted: give a fitted "
                             "estimator, a torch module or fixed embeddings of the rows")
        if isinstance(ref, torch.Tensor | np.ndarray) or hasattr(ref, "__array__"):
            return "embeddings"
        raise ValueError(f"reference must be a fitted estimator, a torch module, fixed "
                         f"embeddings of the training rows (n, 2, k) or (n, k), or None; "
                         f"got {describe(ref)}")

    def reference_embeddings(self, batch: CurationBatch) -> torch.Tensor | None:
        """The reference's embeddings of the super-batch (no gradient), or ``None``."""
        kind = self._reference_kind()
        z = batch.embeddings
        if kind is None:
            return None
        if batch.reference is not None:
            if len(batch.reference) != len(z):
                raise ValueError(f"CurationBatch.reference holds {len(batch.reference)} "
                                 f"rows for a super-batch of {len(z)}")
            return batch.reference.to(z.device, torch.float32)
        if kind == "embeddings":
            table = self.reference if isinstance(self.reference, torch.Tensor) \
                else torch.as_tensor(np.asarray(self.reference))
            index = batch.index.to("cpu", torch.long)
            n = getattr(self, "_n_samples", None)
            if (n is not None and len(table) != n) or len(table) <= int(index.max()):
                raise ValueError(f"reference embeddings hold {len(table)} rows for "
                                 f"{n if n is not None else 'more'} training samples: give "
                                 "one embedding per training row")
            if table.ndim != z.ndim:
                layout = "(n, 2, k) pairs" if z.ndim == 3 else "(n, k) single views"
                raise ValueError(f"reference embeddings of shape {tuple(table.shape)} do not "
                                 f"match the learner's {layout}: give them in the layout "
                                 "of the training views")
            out = table.detach()[index.to(table.device)]
            return out.to(z.device, torch.float32)
        if batch.views is None:
            raise ValueError("a reference model embeds the super-batch's views; the "
                             "CurationBatch has none (views=None)")
        tables = self._own_sampler() if batch.sampler is None else batch.sampler
        stale = tables.stale_rows(batch.index, "reference")
        fresh = self.embed_reference(take_rows(batch.views, stale), z.device) \
            if len(stale) else None
        return tables.complete(batch.index, stale, fresh, "reference").to(z.device)

    def embed_reference(self, views: Any, device: torch.device | str) -> torch.Tensor:
        """The reference model's embeddings (float32, no gradient) of a batch's views, on
        ``device``: what the step computes for the rows ``sampler.stale_rows`` names
        (``'reference'``)."""
        if self._reference_kind() != "model":
            raise ValueError(f"embed_reference needs a reference model; this selector's "
                             f"reference is {describe(self.reference)}")
        module = self._device_reference(torch.device(device))
        with torch.no_grad():
            out = _embed_views(module, views, wrapped=hasattr(self.reference, "net_"))
        return out.float()

    def _device_reference(self, device: torch.device) -> torch.nn.Module:
        """A copy of the reference's network on ``device`` in inference mode (the user's
        own object is never moved nor switched to eval mode)."""
        cached = getattr(self, "_reference_module", None)
        if cached is not None and cached[0] == device:
            return cached[1]
        ref = self.reference
        module = ref.net_.module_ if hasattr(ref, "net_") else ref
        copied = copy.deepcopy(module).to(device).eval()
        for p in copied.parameters():
            p.requires_grad_(False)
        self._reference_module = (device, copied)
        return copied


def _embed_views(module: torch.nn.Module, views: Any, wrapped: bool) -> torch.Tensor:
    """A reference's embeddings of a batch: a fitted estimator's network takes the views
    as the learner's does; a plain encoder embeds each view, stacked on axis 1."""
    if wrapped or isinstance(views, torch.Tensor | dict):
        return module(views)
    return torch.stack([module(v) for v in views], dim=1)


