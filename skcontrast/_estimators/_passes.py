"""The passes of a fit that embed without a training step, a part of
:class:`~._net.SelectorNet` (a mixin of it, in a module of its own): what an adaptive
selector looks at before an epoch (:meth:`SelectionPasses.prepare_selection`), the
embeddings a step leaves for the selections between passes, a curating selector's
choice within a super-batch, and the inference passes of ``transform``."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .._batch import take_rows
from ..exceptions import TrainingDivergedError
from ..selectors import CurationBatch
from ._batches import inference_batches
from ._data import ViewData, to_device
from ._step import seed_torch


class SelectionPasses:
    """The embedding passes of :class:`~._net.SelectorNet` (which they are a part of:
    they read its plan, its modules and its sampler)."""

    # what they read of the net (its attributes, properties and methods)
    plan: Any
    module_: Any
    history: Any
    fit_: Any
    lr: Any
    autocast: Callable[[], Any]
    infer: Callable[..., torch.Tensor]
    inference_module: Callable[[], torch.nn.Module]
    loss_module: Callable[[], Any]
    plain_temperature: Callable[[], str]
    if TYPE_CHECKING:  # the net's properties
        @property
        def compute_device(self) -> torch.device: ...
        @property
        def structure(self) -> str: ...
        @property
        def sampler_(self) -> Any: ...

    def prepare_selection(self) -> float:
        """Before an epoch: the sampler's adaptive selector gets the network's
        embeddings of the training rows its selection needs anew
        (:meth:`SelectorSampler.due`: all of them when a pass is due by
        ``selection_pass``); it reads the loss as it is now, its learned temperature
        included, from the loss module. Returns the seconds spent."""
        start = time.perf_counter()
        sampler = self.sampler_
        assert sampler is not None  # made by get_iterator
        if self.plan.selector.needs_embeddings and not self.fit_.data.streamed:
            # (a stream's windows are embedded as they are read)
            due = sampler.due()
            if len(due):
                sampler.update(due, self.selection_embeddings(due), pushed=False)
        return time.perf_counter() - start

    def remember_embeddings(self, embeddings: torch.Tensor, index: torch.Tensor) -> None:
        """Push a training batch's embeddings (detached, on the device) to the sampler,
        by dataset index: a curating selector's kept rows, for the next steps that meet
        them (:attr:`~skcontrast.selectors.SelectorSampler.caches_rows`), as the step
        computed them; else, for the selections between passes (``selection_pass``
        other than ``'fresh'``), in the form a pass gives: both views of pairs, the
        first view (or crop) of single views."""
        sampler = self.sampler_
        if sampler is None:
            return
        if self.plan.selector.curates:
            if sampler.caches_rows:
                sampler.update(index, self.plan.replicas.gather(embeddings.detach()))
            return
        if sampler.pass_every == 1 or not self.plan.selector.needs_embeddings:
            return
        embeddings = self.plan.replicas.gather(embeddings.detach())
        if self.structure != "pairs" or self.plan.augmentation is not None:
            embeddings = embeddings[:, 0] if embeddings.ndim == 3 else embeddings
        elif embeddings.ndim == 3:
            embeddings = embeddings[:, :2]  # not the hard negatives
        sampler.update(index, embeddings)

    # -- curation ----------------------------------------------------------------------

    def curate(self, Xi: Any, yi: Any, index: torch.Tensor
               ) -> tuple[Any, Any, torch.Tensor, int]:
        """The rows of a super-batch a curating selector keeps (``selector.curate``),
        judged by the learner's embeddings of it, computed without gradient in inference
        mode, and a reference model's: the rows this process trains on, the dataset
        indices of all kept rows, and how many rows were embedded to choose them.

        The embeddings are the sampler's tables: only the rows it names are embedded
        (:meth:`~skcontrast.selectors.SelectorSampler.stale_rows`: all with a fresh
        selection pass), the others read from them; in data-parallel training each
        process embeds a slice of them and the slices are gathered, so every process
        chooses from the same embeddings and keeps the same rows.
        """
        selector, sampler = self.plan.selector, self.sampler_
        assert sampler is not None  # made by get_iterator
        stale = sampler.stale_rows(index)
        embedded = len(stale)
        fresh = self.plan.replicas.embed_shared(self.selection_forward, take_rows(Xi, stale))
        embeddings = sampler.complete(index, stale, fresh)
        reference = None
        if selector.scores_with_model:
            stale = sampler.stale_rows(index, "reference")
            embedded += len(stale)
            fresh = self.plan.replicas.embed_shared(
                lambda views: selector.embed_reference(views, self.compute_device),
                take_rows(Xi, stale))
            reference = sampler.complete(index, stale, fresh, "reference")
        labels = None if yi is None else yi.to(embeddings.device, non_blocking=True)
        positions = selector.curate(CurationBatch(
            embeddings, index, labels, None, self.loss_module().live_loss(), reference,
            sampler))
        own = self.plan.replicas.own_positions(positions, sampler, self.compute_device)
        rows = own.to(index.device)
        return take_rows(Xi, own), None if yi is None else yi[rows.to(yi.device)], \
            index[positions.to(index.device)], embedded

    def selection_forward(self, Xi: Any) -> torch.Tensor:
        """The learner's embeddings of a batch for a selection: no gradient, inference
        mode (dropout off, batch-norm statistics untouched)."""
        module = self.module_
        was_training = module.training
        module.eval()
        try:
            with torch.no_grad(), self.autocast():
                return self.infer(Xi).float()
        finally:
            module.train(was_training)

    # -- embedding passes ---------------------------------------------------------------

    @contextlib.contextmanager
    def fixed_randomness(self) -> Iterator[None]:
        """The same random views of the held-out data every epoch, leaving the training
        stream of random numbers where it was."""
        device = self.compute_device
        generator = getattr(self.plan.augmentation, "generator", None)
        saved = None if generator is None else generator.get_state()
        with torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda"
                                   else []):
            seed_torch(self.plan.seed + 3)
            if generator is not None:
                generator.manual_seed(self.plan.seed + 3)
            try:
                yield
            finally:
                if generator is not None:
                    generator.set_state(saved)

    @torch.no_grad()
    def embed(self, data: ViewData, view: int | None = None, augment: Any = None,
              indices: np.ndarray | None = None, head: bool = True,
              normalize: bool = False, out: torch.Tensor | None = None) -> torch.Tensor:
        """Embeddings of ``data`` in inference mode, batch by batch, on the net's device.

        ``view=None`` runs the module's own ``forward`` (both views of pairs); an int
        embeds single-view data with that view's encoder, through its projection head or
        (``head=False``) not, each batch unit-normalised with ``normalize``. ``augment``
        is applied to each batch on the device first; ``indices`` restricts the pass to
        those rows. Returns float32 on the CPU, written batch by batch into one tensor
        (the output and a batch: never a list of the batches and their concatenation):
        ``out`` when given (checked by the caller to be of the right shape).
        """
        if data.streamed:
            return self._embed_stream(data, view, augment, head, normalize, out)
        module: Any = self.inference_module()
        was_training = module.training
        module.eval()
        n = len(data) if indices is None else len(indices)
        start = 0
        try:
            for batch in inference_batches(data, self.plan, self.compute_device, indices):
                xb = to_device(batch.views, self.compute_device, self.plan.image_normalization)
                if augment is not None:
                    xb = augment(xb)
                with self.autocast():
                    z = module(xb) if view is None else module.encode(xb, view, head=head)
                z = z.float()
                if normalize:
                    z = torch.nn.functional.normalize(z, dim=-1)
                if out is None:
                    out = torch.empty((n, *z.shape[1:]), dtype=torch.float32)
                elif tuple(out.shape[1:]) != tuple(z.shape[1:]):
                    raise ValueError(f"out has shape {tuple(out.shape)}; the embeddings "
                                     f"have shape ({n}, {', '.join(map(str, z.shape[1:]))})")
                out[start:start + len(z)] = z
                start += len(z)
        finally:
            module.train(was_training)
        return torch.empty(0) if out is None else out

    def _embed_stream(self, data: Any, view: int | None, augment: Any, head: bool,
                      normalize: bool, out: torch.Tensor | None) -> torch.Tensor:
        """:meth:`embed` of a stream, a window at a time, into ``out`` (its rows must be
        the stream's) or, without one, the windows' embeddings joined at the end."""
        parts, start = [], 0
        for window in data.windows():
            stop = start + len(window)
            if out is not None and stop > len(out):
                raise ValueError(f"out has {len(out)} rows; the stream holds more")
            part = self.embed(window, view, augment, head=head, normalize=normalize,
                              out=None if out is None else out[start:stop])
            if out is None:
                parts.append(part)
            start = stop
        if out is not None and start != len(out):
            raise ValueError(f"out has {len(out)} rows; the stream holds {start}")
        return out if out is not None else torch.cat(parts)

    def selection_embeddings(self, indices: np.ndarray | None = None,
                             data: ViewData | None = None) -> np.ndarray:
        """What adaptive selectors look at: current embeddings of the training set (or of
        its rows ``indices``; ``data``: of a stream's window, the rows a selection round
        chooses among), refused when training has diverged.

        Paired data gives ``(n, 2, k)``; single views (augmented, or SupCon's) ``(n, k)``,
        from the first view of SupCon's two-crop items.
        """
        assert self.fit_ is not None  # only while a fit runs
        data = self.fit_.data if data is None else data
        replicas = self.plan.replicas
        rows = np.arange(len(data)) if indices is None else np.asarray(indices)
        own = replicas.share(rows)  # each process embeds its shard; they are gathered
        if self.structure != "pairs":
            out = self.embed(data.select(0), view=0, indices=own)
        else:
            out = self.embed(data, indices=own)
            out = out[:, :2] if out.ndim == 3 else out  # not the hard negatives
        if len(own) != len(rows):
            out = replicas.gather(out.to(self.compute_device)).cpu()
        embeddings = out.numpy()
        if not np.isfinite(embeddings).all():
            bad = int((~np.isfinite(embeddings)).reshape(len(embeddings), -1).any(1).sum())
            raise TrainingDivergedError(
                f"training diverged: at the start of epoch {len(self.history)} the "
                f"network embeds {bad} training sample(s) as NaN or inf, so "
                f"{type(self.plan.selector).__name__} has nothing to select on. Lower the "
                f"learning rate (lr={self.lr}) or raise the temperature "
                f"(temperature={self.plain_temperature()})")
        return embeddings
