"""The data the estimators work on: the spec of the input and the datasets it is read into.

The table of input forms (:mod:`._forms`) reads every accepted form into a
:class:`ViewData` (a torch ``Dataset`` fetched a whole batch at a time) and an
:class:`InputSpec` (what the views look like, learned in ``fit`` and enforced on later
input); the rest iterates over a :class:`ViewData`, never branching on the form. Its
batch is a :class:`Batch` ``(views, labels, index)``, whose ``index`` (the selected
rows' dataset indices) travels with its rows, through DataLoader workers, to whatever
keeps per-sample state (:mod:`skcontrast.memory`), not through a side channel.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import Dataset

from .._pixels import pixel_floats
from .._validation import plain_label
from ._checks import FINITE_CHUNK
from ._items import item_views, stack, unwrap
from ._spec import InputSpec, View, array_view
from ._step import item_streams

__all__ = ["Batch", "InputSpec", "ItemViews", "TensorViews", "View", "ViewData", "array_view",
           "batch_length", "index_rows", "side_by_side", "to_device", "with_labels"]


# A view is a tensor, or for a view of several tensors a dict of them (row-aligned):
def index_rows(view: Any, rows: torch.Tensor) -> Any:
    """The ``rows`` of a view (``index_select``, not ``view[rows]``: a few times faster
    on the CPU for a batch of rows, which a small model's training step notices)."""
    if isinstance(view, Mapping):
        return {k: v.index_select(0, rows.to(v.device)) for k, v in view.items()}
    return view.index_select(0, rows.to(view.device))


def _device(view: Any) -> torch.device:
    return next(iter(view.values())).device if isinstance(view, Mapping) else view.device


def _moved(view: Any, device: Any) -> Any:
    if isinstance(view, Mapping):
        return {k: v.to(device) for k, v in view.items()}
    return view.to(device)


def _nbytes(view: Any) -> int:
    tensors = view.values() if isinstance(view, Mapping) else [view]
    return sum(t.element_size() * t.nelement() for t in tensors)


def side_by_side(columns: list[Any]) -> Any:
    """Hard-negative columns, each ``(n, ...)`` (or a dict of such tensors), as one
    ``(n, k, ...)`` tensor (or dict): each row's negatives side by side."""
    if isinstance(columns[0], Mapping):
        return {k: torch.stack([c[k] for c in columns], dim=1) for k in columns[0]}
    return torch.stack(columns, dim=1)


# --------------------------------------------------------------------------------------
# Datasets
# --------------------------------------------------------------------------------------

class RowTargets(NamedTuple):
    """A held-out batch's target as the net's ``get_loss`` reads it: the labels
    (``None`` for unlabelled pairs) and the ``rows``' dataset index, which the loss's
    false-negative guard reads (skorch's ``validation_step`` hands ``get_loss`` the
    batch's target alone); ``terms`` receives the loss's
    :class:`~skcontrast.losses.LossTerms`, for the step's result."""

    labels: torch.Tensor | None
    rows: torch.Tensor | None
    terms: list


class Batch(tuple):
    """One training or inference batch: skorch's ``(X, y)``, ``(views, labels)``, which
    its callbacks unpack (``EpochScoring``'s cache, ``BatchScoring``), with ``index``.

    ``views`` and ``labels`` hold the rows this process works on; ``index`` holds the
    dataset indices of the whole selected batch, in the selector's order. In
    data-parallel training every process trains on a slice of the batch, and the
    embeddings gathered from all processes come back in that same order, so ``index``
    describes the gathered batch on every process. It travels with the batch (through
    DataLoader workers too) to whatever keeps per-sample state.
    """

    index: torch.Tensor  # type: ignore[assignment]  # the rows; tuple.index is not used

    def __new__(cls, views: Any, labels: Any, index: torch.Tensor) -> Batch:
        batch = super().__new__(cls, (views, labels))
        batch.index = index
        return batch

    def __getnewargs__(self) -> tuple:  # a pickle (a worker's batch) keeps the index
        return (self[0], self[1], self.index)

    @property
    def views(self) -> Any:
        return self[0]

    @property
    def labels(self) -> torch.Tensor | None:
        return self[1]


def _rows_and_batch(indices: Any) -> tuple[np.ndarray, np.ndarray]:
    """The rows to fetch and the selected batch they belong to, as int64 arrays (no
    Python int per sample: this runs once per training step): a
    :class:`~skcontrast.selectors.SampledBatch` carries its whole ``batch``; for other
    index lists the rows are the batch (the same array)."""
    rows = np.asarray(indices, dtype=np.int64)
    batch = getattr(indices, "batch", None)
    if batch is None or len(batch) == len(rows):  # a process's slice of it is all of it
        return rows, rows
    return rows, np.asarray(batch, dtype=np.int64)


class ViewData(Dataset):
    """Items of one or two views (and optional labels), fetched a batch at a time."""

    labels: torch.Tensor | None
    #: whether it is a stream read a window at a time (:class:`~._stream.StreamViews`),
    #: whose rows are not at hand by index
    streamed = False

    def __getitems__(self, indices: Sequence[int]) -> Batch:
        raise NotImplementedError

    def sample(self) -> ViewData:
        """Rows at hand by index, for what looks at the training rows before or after
        training (an encoder's prior, the end of fit's check, the output's width): the
        data itself, or a stream's first window."""
        return self

    def __len__(self) -> int:
        raise NotImplementedError

    def gather(self, index: torch.Tensor) -> Batch:
        """The batch of rows ``index`` of data held whole on a device
        (:attr:`resident_device`); only such data can."""
        raise NotImplementedError

    def __getitem__(self, i: int) -> tuple[Any, Any]:
        views, labels = self.__getitems__([i])
        views = tuple(v[0] for v in views) if isinstance(views, tuple) else views[0]
        return views, None if labels is None else labels[0]

    def select(self, view: int) -> ViewData:
        """The same items restricted to one view."""
        raise NotImplementedError

    def subset(self, indices: np.ndarray) -> ViewData:
        """The items at ``indices`` (e.g. the training or the held-out part)."""
        raise NotImplementedError

    def labelled(self, labels: torch.Tensor | None) -> ViewData:
        """The same items carrying per-item ``labels`` (for the loss), or none."""
        raise NotImplementedError

    @property
    def resident_device(self) -> torch.device | None:
        """The device the data lives on, when it is held there whole; else ``None``."""
        return None

    def fingerprint(self) -> str | None:
        """A digest of the rows that tells one training set from another, or ``None``
        when reading rows costs a pass over a Dataset: what a warm start compares
        before it reuses embeddings of the training rows (``selection_pass='cached'``)."""
        return None


class TensorViews(ViewData):
    """Views held as tensors of ``n`` rows each; a batch is one index per view.

    A view given as ``None`` is absent (a dict passed to ``transform`` with the first
    modality only); selecting it is an error.
    """

    def __init__(self, views: tuple[torch.Tensor | None, ...],
                 labels: torch.Tensor | None = None, names: tuple = ()) -> None:
        self.views = views
        self.labels = labels
        self.names = names

    def __len__(self) -> int:
        return batch_length(next(v for v in self.views if v is not None))

    def __getitems__(self, indices: Any) -> Batch:
        rows, batch = _rows_and_batch(indices)
        device = _device(self.views[0])
        whole = batch is rows  # gather's default: the rows are the whole batch
        return self.gather(torch.from_numpy(rows).to(device),
                           None if whole else torch.from_numpy(batch).to(device))

    def gather(self, rows: torch.Tensor, batch: torch.Tensor | None = None) -> Batch:
        """The ``rows`` (a long tensor on the data's device) of the selected ``batch``
        (default: the rows are the whole batch)."""
        xs = tuple(index_rows(v, rows) for v in self.views)
        labels = None if self.labels is None else self.labels[rows]
        return Batch(xs if len(xs) > 1 else xs[0], labels, rows if batch is None else batch)

    def batches(self, sampler: Any) -> Iterable[Batch]:
        """The batches ``sampler`` (a :class:`~skcontrast.selectors.SelectorSampler`)
        yields, gathered from these tensors, an epoch per pass. The indices of a whole
        epoch are copied to the data's device at once, asynchronously, so a batch
        costs no transfer at all."""
        return GatheredBatches(self, sampler)

    def select(self, view: int) -> TensorViews:
        if self.views[view] is None:
            raise ValueError(f"X lacks the view {self.names[view]!r}, which is needed here")
        return TensorViews((self.views[view],), self.labels)

    def subset(self, indices: np.ndarray) -> TensorViews:
        index = torch.as_tensor(indices, dtype=torch.long)
        labels = None if self.labels is None else self.labels[index]
        return TensorViews(tuple(None if v is None else index_rows(v, index)
                                 for v in self.views), labels, self.names)

    def labelled(self, labels: torch.Tensor | None) -> TensorViews:
        return TensorViews(self.views, labels)

    def nbytes(self) -> int:
        return sum(_nbytes(v) for v in self.views)

    def fingerprint(self) -> str | None:
        """A SHA-256 digest of every row of every view, with the views' shapes and
        dtypes: another training set differs here whatever rows changed. Read a chunk at
        a time (a memory-mapped array, or data on a GPU, is never copied whole); hashing
        runs at several hundred MB/s (SHA-256 has CPU instructions), a fraction of one
        epoch over the same rows."""
        import hashlib

        digest = hashlib.sha256(str(len(self)).encode())
        for view in self.views:
            parts = [] if view is None else sorted(view.items()) if isinstance(view, dict) \
                else [("", view)]
            for name, tensor in parts:
                digest.update(f"{name}{tuple(tensor.shape)}{tensor.dtype}".encode())
                flat = tensor.detach().reshape(len(tensor), -1)
                rows = max(1, FINITE_CHUNK // max(1, flat.shape[1]))
                for start in range(0, len(flat), rows):
                    chunk = flat[start:start + rows].cpu().contiguous()
                    if chunk.numel():
                        digest.update(chunk.view(torch.uint8).numpy().data)
        return digest.hexdigest()

    def to(self, device: Any) -> TensorViews:
        """A copy held whole on ``device``."""
        labels = None if self.labels is None else self.labels.to(device)
        return TensorViews(tuple(_moved(v, device) for v in self.views), labels)

    @property
    def device(self) -> torch.device:
        """Where the tensors are (host memory included)."""
        return _device(next(v for v in self.views if v is not None))

    @property
    def resident_device(self) -> torch.device | None:
        return self.device if self.device.type != "cpu" else None


class SamplerEpochs:
    """Batches of ``data`` that a sampler (a
    :class:`~skcontrast.selectors.SelectorSampler`) selects, read without a
    ``DataLoader``: re-iterable, each pass the sampler's next epoch (how a batch is read
    is the subclass's ``__iter__``)."""

    def __init__(self, data: Any, sampler: Any) -> None:
        self.data = data
        self.sampler = sampler

    def __len__(self) -> int:
        return len(self.sampler)


class GatheredBatches(SamplerEpochs):
    """The batches of :meth:`TensorViews.batches`, gathered from its tensors."""

    data: TensorViews

    def __iter__(self) -> Iterator[Batch]:
        selections = self.sampler.selections()
        if not selections:
            return
        rows = [r for r, _ in selections]
        batches = [b for _, b in selections]
        sliced = any(r is not b for r, b in selections)
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


class ItemViews(ViewData):
    """A user's map-style Dataset; each batch is fetched, checked and stacked here.

    Items are ``(x0, x1)`` pairs or single views (``spec.items_paired``), each view an
    array or tensor of the shape and kind recorded in ``spec``; ``pick`` keeps one view
    of paired items. Checks run in the DataLoader's workers, on the CPU. With a
    ``seed`` (:meth:`seeded`: the net's, for its loaders), each item is loaded with
    torch's, NumPy's and Python's generators started from ``(seed, epoch, index)`` (the
    epoch of a sampler's batch; none for held-out and inference batches), so random
    views (two crops) are the same whichever worker loads them
    (:func:`~._step.item_streams`); a Dataset that loads a batch at once
    (``__getitems__``) is seeded per batch, by its first item.
    """

    def __init__(self, dataset: Any, spec: InputSpec, labels: torch.Tensor | None = None,
                 pick: int | None = None, seed: int | None = None) -> None:
        self.dataset = dataset
        self.spec = spec
        self.labels = labels
        self.pick = pick
        self.seed = seed

    def seeded(self, seed: int) -> ItemViews:
        """The same items, each loaded from streams of ``seed``, the epoch and itself."""
        return ItemViews(self.dataset, self.spec, self.labels, self.pick, seed)

    def labelled(self, labels: torch.Tensor | None) -> ItemViews:
        return ItemViews(self.dataset, self.spec, labels, self.pick, self.seed)

    def _items(self, indices: list[int], epoch: int | None) -> list:
        fetch = getattr(self.dataset, "__getitems__", None)
        if self.seed is None:
            return fetch(indices) if fetch is not None else [self.dataset[i] for i in indices]
        with item_streams(self.seed, epoch) as reseed:
            if fetch is not None:
                reseed(indices[0] if indices else 0)
                return fetch(indices)
            items = []
            for i in indices:
                reseed(i)
                items.append(self.dataset[i])
            return items

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitems__(self, indices: Any) -> Batch:
        rows, batch = _rows_and_batch(indices)
        epoch = getattr(indices, "epoch", None)
        indices = rows.tolist()  # a user's Dataset is indexed with plain ints
        items = self._items(indices, epoch)
        columns: list[list[Any]] = [[] for _ in range(2 if self.spec.items_paired else 1)]
        for i, item in zip(indices, items, strict=True):
            parts = unwrap(item, self.spec.item_labels)[0]
            for column, x in zip(columns, item_views(parts, i, self.spec.items_paired),
                                 strict=True):
                column.append(x)
        views = self.spec.views
        if self.spec.items_paired and len(views) == 1:  # two crops of one view
            views = views * 2
        xs = tuple(stack(column, indices, view)
                   for column, view in zip(columns, views, strict=True))
        if self.pick is not None:
            xs = (xs[self.pick],)
        labels = None if self.labels is None else self.labels[torch.as_tensor(indices)]
        return Batch(xs if len(xs) > 1 else xs[0], labels, torch.from_numpy(batch))

    def select(self, view: int) -> ItemViews:
        if not self.spec.items_paired:
            return self
        return ItemViews(self.dataset, self.spec, self.labels, view, self.seed)

    def item_labels(self) -> np.ndarray:
        """The labels the items carry (``(x, label)`` items): a ``targets`` attribute
        (torchvision's datasets have one) if there is one, else read item by item."""
        if not self.spec.item_labels:
            raise ValueError("the Dataset's items carry no labels (items (x, label) do); "
                             "pass y")
        targets = getattr(self.dataset, "targets", None)
        if targets is not None and len(targets) == len(self.dataset):
            return np.asarray(targets.cpu() if isinstance(targets, torch.Tensor) else targets)
        return np.asarray([plain_label(unwrap(self.dataset[i], True)[1])
                           for i in range(len(self.dataset))])

    def subset(self, indices: np.ndarray) -> ItemViews:
        from torch.utils.data import Subset

        labels = None if self.labels is None else self.labels[torch.as_tensor(indices)]
        return ItemViews(Subset(self.dataset, [int(i) for i in indices]), self.spec, labels,
                         self.pick, self.seed)


def to_device(x: Any, device: Any, normalization: Any = None) -> Any:
    """A batch (a tensor, or a tuple of one per view) on ``device``, ready for the module.

    Copies from pinned memory overlap. On the device, floats become float32 and pixels
    (bytes and 16-bit images) floats in [0, 1] (:func:`~skcontrast.images.pixel_floats`);
    then, with ``normalization=(mean, std)``,
    every float view becomes ``(x - mean) / std`` per channel (axis 1), so the host keeps
    the data as it was given. Integer views (token ids) stay as they are.
    """
    if isinstance(x, tuple | list):
        return tuple(to_device(t, device, normalization) for t in x)
    if isinstance(x, Mapping):  # a view of several tensors (keyword arguments)
        return {k: to_device(t, device, normalization) for k, t in x.items()}
    x = pixel_floats(x.to(device, non_blocking=True))
    if normalization is not None and x.is_floating_point():
        mean, std = (torch.as_tensor(v, dtype=torch.float32, device=x.device)
                     .reshape(1, -1, *([1] * (x.ndim - 2))) for v in normalization)
        x = (x - mean) / std
    return x


def batch_length(x: Any) -> int:
    """Items in a batch (a tensor, a dict of them, or a tuple of one per view)."""
    if isinstance(x, tuple | list):
        return batch_length(x[0])
    return len(next(iter(x.values()))) if isinstance(x, Mapping) else len(x)


def with_labels(data: ViewData, labels: np.ndarray | None) -> ViewData:
    """The same data carrying per-item labels (for the loss), or none."""
    return data.labelled(None if labels is None else torch.as_tensor(labels))
