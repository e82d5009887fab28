"""Batch supply of the net: which rows train, in which batches, from where.

:class:`BatchSupply` is the part of :class:`~._net.SelectorNet` that hands skorch its
batches. ``get_iterator`` returns, for training, a ``DataLoader`` whose ``batch_sampler``
asks the selector for the batches of each epoch (so skorch's ``batch_size`` is not
passed to it: a ``DataLoader`` refuses both), or, when the data is held whole on the
GPU, or in this process's memory for training on the CPU, an iterator that gathers the
selector's batches there without a ``DataLoader`` (whose per-batch machinery a small
model's step notices: it pays for a Dataset's worker processes, and for pinned host
memory when host data trains on a GPU). Adaptive selectors first
receive the current embeddings of the whole training set, from a no-grad pass made
batch by batch on the training device, and the loss being trained, as it is at that
epoch. The datasets (:mod:`._data`) fetch a whole batch with one ``__getitems__`` call.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from ..exceptions import TrainingDivergedError
from ..selectors import SelectorSampler
from ._data import Batch, ItemViews, Selection, TensorViews, ViewData
from ._step import plain_temperature, to_device

INFERENCE_BATCH = 1024


def _as_batch(batch: Any) -> Any:
    return batch


class WeakEmbed:
    """The net's :meth:`~BatchSupply.selection_embeddings`, held weakly by the sampler
    that lives on the net. A bound method would close a reference cycle (net, sampler,
    method, net) that keeps a fitted model's tensors, a text model's table and Adam's
    moments among them, until Python's next full garbage collection: a loop of text
    fits grew by 0.8 GB a fit until it ran out of memory."""

    def __init__(self, method: Any) -> None:
        self._method = weakref.WeakMethod(method)

    def __call__(self, indices: np.ndarray | None = None) -> np.ndarray:
        method = self._method()
        if method is None:
            raise RuntimeError("the net whose embeddings this sampler reads is gone")
        return method(indices)


class EpochSelections:
    """One epoch of the net's :class:`~skcontrast.selectors.SelectorSampler` as a
    ``DataLoader``'s ``batch_sampler``: each batch with the rows this process fetches
    (:class:`~._data.Selection`)."""

    def __init__(self, net: Any) -> None:
        self.net = net

    def __len__(self) -> int:
        return len(self.net.sampler_)

    def __iter__(self) -> Iterator[Selection]:
        # A generator: the selection runs at the first batch, not when ``iter`` is called
        # (a multi-worker DataLoader calls ``iter`` twice when it starts).
        for batch in self.net.epoch_batches():
            yield Selection(self.net.local_part(batch).tolist(), batch)


class DeviceBatches:
    """The selector's batches gathered from tensors held whole in memory: on the training
    device (the indices of a whole epoch are copied there at once, asynchronously, so a
    batch costs no host-device transfer at all) or in the host's memory."""

    def __init__(self, net: Any, data: TensorViews) -> None:
        self.net = net
        self.data = data

    def __len__(self) -> int:
        return self.net.selector.get_n_splits(len(self.data), self.net.labels)

    def __iter__(self) -> Iterator[Batch]:
        batches = self.net.epoch_batches()  # never empty: the sampler refuses that
        rows = [self.net.local_part(b) for b in batches]
        sliced = any(r is not b for r, b in zip(rows, batches, strict=True))
        flat = torch.from_numpy(np.concatenate(batches + rows if sliced else batches))
        device = self.data.device
        if device.type == "cuda":
            flat = flat.pin_memory()
        index = flat.to(device, non_blocking=True)
        total = sum(map(len, batches))
        whole = index[:total].split([len(b) for b in batches])
        parts = index[total:].split([len(r) for r in rows]) if sliced else whole
        for part, batch in zip(parts, whole, strict=True):
            yield self.data.gather(part, batch)


if TYPE_CHECKING:  # a mixin of skorch's NeuralNet, whose attributes it uses
    from skorch import NeuralNet as _Net
else:
    _Net = object


class BatchSupply(_Net):
    """The batches of training, held-out and inference passes (mixed into the net)."""

    # state of one fit (set when it begins and by its steps)
    training_data: Any
    sampler_: Any  # the fit's SelectorSampler
    _pending_selection: Any  # embeddings a previous fit left, for the next sampler

    def _on_gpu(self) -> bool:
        return self.compute_device.type == "cuda"

    def replicas(self) -> tuple[int, int]:
        """The data-parallel processes and this one's rank (one process here)."""
        return 1, 0

    def local_part(self, batch: np.ndarray) -> np.ndarray:
        """The rows of a selected batch this process trains on: the sampler's slice of it
        (all of it with one process; a curating selector's super-batch is curated whole
        on every process)."""
        return batch if self.selector.curates else self.sampler_.rank_slice(batch)

    def start_sampler(self, n: int) -> SelectorSampler:
        """The sampler of this fit's ``n`` training rows: the net's selector, with the
        network's embeddings for an adaptive one (:meth:`selection_embeddings`, every
        epoch, or with ``selection_pass='cached'`` once and then those the training
        steps push), sliced over the processes without padding (the step gathers rows
        of any count). The embeddings a previous fit on the same rows left (a warm
        start, a saved model) are taken over."""
        world, rank = self.replicas()
        sampler = SelectorSampler(self.selector, n, embed=WeakEmbed(self.selection_embeddings),
                                  labels=self.labels,
                                  refresh_every=1 if self.selection_pass == "fresh" else None,
                                  num_replicas=world, rank=rank, even=False)
        pending = getattr(self, "_pending_selection", None)
        if pending and pending.get("embeddings") is not None and \
                len(pending["embeddings"]) == n:
            sampler.load_embedding_state(pending)
        self._pending_selection = None
        return sampler

    def _loader(self, data: ViewData, batch_sampler: Any) -> DataLoader:
        # Workers load a Dataset's items; array rows are one index away, in this process.
        # Its own generator: a DataLoader draws its workers' base seed from torch's
        # global one otherwise, which would advance the caller's random stream.
        workers = self.num_workers if isinstance(data, ItemViews) else 0
        generator = torch.Generator().manual_seed(self.seed + len(self.history or ()))
        return DataLoader(data, batch_sampler=batch_sampler, collate_fn=_as_batch,
                          num_workers=workers, pin_memory=self._on_gpu(),
                          persistent_workers=workers > 0, generator=generator)

    def get_iterator(self, dataset: Any, training: bool = False) -> Any:
        if not training:  # skorch asks for it only for the held-out data
            return self.held_out_batches(dataset)
        self.training_data = dataset  # for the adaptive selectors' embedding pass
        if getattr(self, "sampler_", None) is None or self.sampler_.n_samples != len(dataset) \
                or self.sampler_.selector is not self.selector:
            self.sampler_ = self.start_sampler(len(dataset))
        # A Dataset's items are loaded by workers, and host data for a GPU is pinned by
        # the loader; tensors already where the module computes are gathered directly.
        if isinstance(dataset, TensorViews) and (dataset.resident_device is not None
                                                 or not self._on_gpu()):
            return DeviceBatches(self, dataset)
        return self._loader(dataset, EpochSelections(self))

    def held_out_batches(self, data: ViewData) -> Any:
        """The same batches of the held-out data every epoch, of the training batch size
        (a last batch of one sample joins the one before)."""
        order = np.random.default_rng([self.seed, 4]).permutation(len(data))
        size = max(2, min(self.valid_batch_size or len(data), len(data)))
        batches = [order[i:i + size] for i in range(0, len(data), size)]
        if len(batches) > 1 and len(batches[-1]) == 1:
            batches[-2:] = [np.concatenate(batches[-2:])]
        device = data.resident_device
        if device is not None:
            return [data.gather(torch.as_tensor(b, device=device)) for b in batches]
        return self._loader(data, [b.tolist() for b in batches])

    def inference_batches(self, data: ViewData, indices: np.ndarray | None = None) -> Any:
        """Consecutive batches of ``data`` (or of its rows ``indices``), in order; never the
        whole set on the GPU at once."""
        indices = np.arange(len(data)) if indices is None else indices
        parts = [indices[s:s + INFERENCE_BATCH] for s in range(0, len(indices), INFERENCE_BATCH)]
        device = data.resident_device
        if device is not None:
            return (data.gather(torch.as_tensor(part, device=device)) for part in parts)
        return self._loader(data, [part.tolist() for part in parts])

    def epoch_batches(self) -> list[np.ndarray]:
        """The sampler's batches of the next epoch (checked, lone batches skipped, a low
        coverage said: :meth:`SelectorSampler.epoch_batches`); records the time spent
        choosing."""
        start = time.perf_counter()
        if self.selector.needs_embeddings:
            # the training loss as it is now: its learned temperature, weights, options
            self.sampler_.loss = self.criterion_.live_loss()
        batches = self.sampler_.epoch_batches()
        if self.history:
            self.history.record("select_time", time.perf_counter() - start)
            self.history.record("n_batches", len(batches))
        return batches

    @torch.no_grad()
    def embed(self, data: ViewData, view: int | None = None, augment: Any = None,
              indices: np.ndarray | None = None, head: bool = True) -> torch.Tensor:
        """Embeddings of ``data`` in inference mode, batch by batch, on the net's device.

        ``view=None`` runs the module's own ``forward`` (both views of pairs); an int
        embeds single-view data with that view's encoder, through its projection head or
        (``head=False``) not. ``augment`` is applied to each batch on the device first;
        ``indices`` restricts the pass to those rows. Returns float32 on the CPU.
        """
        module: Any = self.inference_module()
        was_training = module.training
        module.eval()
        out = []
        try:
            for batch in self.inference_batches(data, indices):
                xb = to_device(batch.views, self.compute_device, self.image_normalization)
                if augment is not None:
                    xb = augment(xb)
                with self.autocast():
                    z = module(xb) if view is None else module.encode(xb, view, head=head)
                out.append(z.float())
        finally:
            module.train(was_training)
        if not out:
            return torch.empty(0)
        return torch.cat(out).cpu()

    def inference_module(self) -> torch.nn.Module:
        return self.module_

    def remember_embeddings(self, embeddings: torch.Tensor, index: torch.Tensor) -> None:
        """Push a training batch's embeddings (detached, on the device) to the sampler,
        by dataset index, for the next epoch's selection (``selection_pass='cached'``),
        in the form a fresh pass gives: both views of pairs, the first view (or crop) of
        single views."""
        if self.selection_pass != "cached" or not self.selector.needs_embeddings:
            return
        if self.labelled or self.augmentation is not None:
            embeddings = embeddings[:, 0] if embeddings.ndim == 3 else embeddings
        elif embeddings.ndim == 3:
            embeddings = embeddings[:, :2]  # not the hard negatives
        self.sampler_.update(index, embeddings.detach())

    def selection_state(self) -> dict:
        """What ``selection_pass='cached'`` carries to the next fit on the same rows: the
        sampler's embeddings of them (a copy), with the rows' digest."""
        sampler = getattr(self, "sampler_", None)
        state = sampler.embedding_state() if sampler is not None else \
            (getattr(self, "_pending_selection", None) or {})
        return {**state, "rows": self.data_fingerprint}

    def load_selection_state(self, state: dict | None) -> None:
        """Continue from :meth:`selection_state`: the next fit's sampler starts from it
        (the caller drops it when the rows differ)."""
        self._pending_selection = state or None
        self.data_fingerprint = (state or {}).get("rows")
        self.sampler_ = None

    def selection_embeddings(self, indices: np.ndarray | None = None) -> np.ndarray:
        """What adaptive selectors look at: current embeddings of the training set (or of
        its rows ``indices``).

        Paired data gives ``(n, 2, k)``; single views (augmented, or SupCon's) ``(n, k)``,
        from the first view of SupCon's two-crop items.
        """
        data = self.training_data
        if self.labelled:
            out = self.embed(data.select(0), view=0, indices=indices).numpy()
        else:
            out = self.embed(data, indices=indices).numpy()
            out = out[:, :2] if out.ndim == 3 else out  # not the hard negatives
        return self.checked_selection(out)

    def checked_selection(self, X: np.ndarray) -> np.ndarray:
        """Embeddings to select on, refused when training has diverged."""
        if not np.isfinite(X).all():
            bad = int((~np.isfinite(X)).reshape(len(X), -1).any(1).sum())
            raise TrainingDivergedError(
                f"training diverged: at the start of epoch {len(self.history)} the "
                f"network embeds {bad} training sample(s) as NaN or inf, so "
                f"{type(self.selector).__name__} has nothing to select on. Lower the "
                f"learning rate (lr={self.lr}) or raise the temperature "
                f"(temperature={plain_temperature(self.criterion_)})")
        return X
