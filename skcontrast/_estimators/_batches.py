"""The iterators of a fit, which skorch's own ``get_iterator`` builds: the net's
``iterator_train`` is :func:`selected_batches` and its ``iterator_valid`` (held-out
batches, and those of skorch's ``forward`` and ``predict``) is
:func:`consecutive_batches`; skorch hands each its ``iterator_*__`` parameters (the
fit's plan, the device the module computes on and, for training, the sampler the loss
module holds: :meth:`~._net.SelectorNet.get_params_for` adds them) and ``batch_size``.
The net's embedding passes take their batches from :func:`fixed_batches` too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from ._columns import ArrowColumns
from ._data import ItemViews, TensorViews, ViewData

#: rows per batch of an embedding pass (never the whole set on a GPU at once)
INFERENCE_BATCH = 1024


def loader(data: ViewData, batch_sampler: Any, plan: Any, device: torch.device,
           epoch: int) -> DataLoader:
    """A ``DataLoader`` of ``batch_sampler``'s batches of ``data``.

    Workers load a Dataset's items, each drawn from a stream of ``(seed, epoch, item)``
    alone (:meth:`~._data.ItemViews.seeded`), so a worker's order never matters; array
    rows are one index away, in this process. The loader has its own generator: a
    ``DataLoader`` draws its workers' base seed from torch's global one otherwise,
    which would advance the caller's random stream."""
    workers = plan.num_workers if isinstance(data, ItemViews) else 0
    if isinstance(data, ItemViews):
        data = data.seeded(plan.seed)
    generator = torch.Generator().manual_seed(plan.seed + epoch)
    return DataLoader(data, batch_sampler=batch_sampler, collate_fn=_as_batch,
                      num_workers=workers, pin_memory=device.type == "cuda",
                      persistent_workers=workers > 0, generator=generator)


def selected_batches(dataset: ViewData, batch_size: int, *, plan: Any, device: torch.device,
                     sampler: Any, embed: Any = None) -> Any:
    """The training batches (skorch's ``iterator_train``): those of the fit's
    :class:`~skcontrast.selectors.SelectorSampler` (the same one every epoch: each pass
    over it is the selector's next epoch), whose selector sets the batch size.

    Data held whole where the module computes, or in this process's memory for training
    on the CPU, is gathered batch by batch, without a DataLoader (whose per-batch
    machinery a small model's step notices); an Arrow dataset's rows are read one batch
    ahead, in a thread, for training on the CPU; a Dataset's items are loaded by workers,
    and host data for a GPU is pinned by the loader. A stream
    (:class:`~._stream.StreamViews`) is read a window at a time, the selector choosing
    each window's batches (an adaptive one from ``embed(indices, window)``, the net's
    embeddings of the window's rows), read as those of in-memory data are."""
    if dataset.streamed:
        return dataset.epoch_batches(  # type: ignore[attr-defined]
            sampler, embed, lambda window, rows: selected_batches(
                window, batch_size, plan=plan, device=device, sampler=rows), plan.seed)
    if sampler.n_samples != len(dataset):
        raise ValueError(f"this net selects batches of {sampler.n_samples} training "
                         f"rows; got {len(dataset)} (fit the estimator instead)")
    if isinstance(dataset, TensorViews) and (dataset.resident_device is not None
                                             or device.type != "cuda"):
        return dataset.batches(sampler)
    if isinstance(dataset, ArrowColumns) and device.type != "cuda":
        return dataset.batches(sampler)  # read one batch ahead, in a thread
    return loader(dataset, sampler, plan, device, sampler.selector.current_epoch)


def consecutive_batches(dataset: ViewData, batch_size: int, *, plan: Any,
                        device: torch.device) -> Any:
    """Batches of data that does not train (skorch's ``iterator_valid``), in its order,
    of ``batch_size`` (the training batch size; ``-1``, as skorch reads it: the whole
    set), a last batch of one sample joined to the one before: the held-out loss's,
    the same every epoch (the estimators hand the held-out data in a fixed random order,
    so a batch mixes classes however the data was sorted), and those of skorch's
    ``forward``/``predict``, whose outputs follow the data."""
    n = len(dataset)
    size = max(2, min(batch_size if batch_size > 0 else n, n))
    return fixed_batches(dataset, RowBatches(n, size, join_lone=True), plan, device)


class RowBatches:
    """Consecutive batches of ``size`` rows of ``indices`` (default: every row of ``n``,
    in order), each made when it is read: a pass over millions of rows holds no list of
    every batch (nor a Python int per row). ``join_lone``: a last batch of one row
    joins the one before."""

    def __init__(self, n: int, size: int, indices: np.ndarray | None = None,
                 join_lone: bool = False) -> None:
        self.n, self.size, self.indices = n, size, indices
        count = -(-n // size)
        self.length = count - 1 if join_lone and count > 1 and n % size == 1 else count

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> np.ndarray:
        if not 0 <= i < self.length:
            raise IndexError(i)
        start = i * self.size
        stop = self.n if i == self.length - 1 else start + self.size
        return np.arange(start, stop) if self.indices is None else self.indices[start:stop]

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[i] for i in range(self.length))


class _Lists:
    """A ``DataLoader``'s batch sampler of ``batches``, each as a list of ints, made
    when the loader asks for it."""

    def __init__(self, batches: Any) -> None:
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[list[int]]:
        return (b.tolist() for b in self.batches)


class _Gathered:
    """The ``batches`` of data held whole on ``device``, gathered as they are read."""

    def __init__(self, data: ViewData, batches: Any, device: torch.device) -> None:
        self.data, self.batches, self.device = data, batches, device

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[Any]:
        return (self.data.gather(torch.as_tensor(b, device=self.device))
                for b in self.batches)


def fixed_batches(data: ViewData, batches: Any, plan: Any,
                  device: torch.device) -> Any:
    """The given ``batches`` of rows of ``data`` (a sequence of index arrays, such as
    :class:`RowBatches`), read batch by batch: gathered where the data lives on the
    module's device, else through a loader."""
    resident = data.resident_device
    if resident is not None:
        return _Gathered(data, batches, resident)
    return loader(data, _Lists(batches), plan, device, 0)


def inference_batches(data: ViewData, plan: Any, device: torch.device,
                      indices: np.ndarray | None = None) -> Any:
    """Consecutive batches of ``data`` (or of its rows ``indices``), in order."""
    n = len(data) if indices is None else len(indices)
    return fixed_batches(data, RowBatches(n, INFERENCE_BATCH, indices), plan, device)


def _as_batch(batch: Any) -> Any:
    """The ``DataLoader``'s collate function: the dataset's ``__getitems__`` made the
    batch already."""
    return batch
