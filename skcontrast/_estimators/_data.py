"""What ``X`` is: every input form the estimators accept, turned into one kind of dataset.

The estimators take flat feature arrays (scikit-learn's 2-D form, and ``(n, 2, d)``
pairs), N-D arrays or tensors (image pairs ``(n, 2, C, H, W)``, single images with an
augmentation), a dict of two modalities of any shapes and dtypes, and map-style
``torch.utils.data.Dataset`` objects. The readers of each form are here; the table of
forms (:mod:`._forms`, which recognises them and picks the reader) turns any of them into
a :class:`ViewData` (a torch ``Dataset`` fetched a whole batch at a time) and an
:class:`InputSpec` (what the views look like), and checks later input (``transform``,
``score``) against that spec. Training, inference and the adaptive selectors' embedding
pass all iterate over a :class:`ViewData`, so they never branch on the form.

A batch of a :class:`ViewData` is a :class:`Batch` ``(views, labels, index)``: ``views``
is a tensor (one view) or a tuple of two tensors (two views), ``labels`` a tensor or
``None``, and ``index`` the dataset indices of the selected batch, so that whatever keeps
per-sample state across batches (:mod:`skcontrast.memory`) knows which samples it sees.
The indices travel with the rows they describe, through DataLoader workers and
prefetching, instead of through a side channel that could fall out of step.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from sklearn.utils.validation import validate_data
from torch.utils.data import Dataset, IterableDataset

from .._tables import text_table
from .._validation import describe, is_view_dict


@dataclass(frozen=True)
class View:
    """One view (modality) of the data: its name, per-item shape and kind of values.

    A view made of several tensors (a text's ``input_ids`` and ``attention_mask``, given
    to its encoder as keyword arguments) has ``parts``: one :class:`View` per tensor.
    """

    name: Any
    shape: tuple[int, ...]
    integer: bool
    parts: tuple[View, ...] = ()
    #: a text view's number of token ids (its tokenizer's vocabulary), else ``None``;
    #: its length (``shape``) is the longest text's and may differ after fit
    vocabulary: int | None = None

    @property
    def text(self) -> bool:
        return self.vocabulary is not None

    @property
    def size(self) -> int:
        """Number of values per item (the width a flat encoder sees)."""
        return math.prod(self.shape)

    def describe(self) -> str:
        if self.text:
            return f"text view {self.name!r} ({self.vocabulary} token ids)"
        if self.parts:
            inner = ", ".join(p.describe().removeprefix("view ") for p in self.parts)
            return f"view {self.name!r} made of {inner}"
        kind = "integer" if self.integer else "float"
        return f"view {self.name!r} ({kind}, shape {self.shape})"


# A view is a tensor, or for a view of several tensors a dict of them (row-aligned):
def _rows(view: Any) -> int:
    return len(next(iter(view.values()))) if isinstance(view, Mapping) else len(view)


def _index(view: Any, rows: torch.Tensor) -> Any:
    # index_select, not view[rows]: a few times faster on the CPU for a batch of rows,
    # which a small model's training step notices
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


@dataclass(frozen=True)
class InputSpec:
    """How the training input was given, learned in ``fit`` and enforced afterwards.

    ``form`` is ``'flat'`` (scikit-learn's 2-D form, also reached from ``(n, 2, d)``
    pairs), ``'array'`` (an N-D array or tensor), ``'dict'``, ``'dataset'`` or
    ``'text'`` (strings, tokenized by the estimator's ``tokenizer_``).
    ``views`` holds two views for paired data and one for single views (augmented or
    labelled). ``split`` is, for flat paired data, the column where view 1 starts.
    ``items_paired`` says whether each item (row, Dataset item) carries two views, which
    can differ from ``len(views)`` only for SupCon's two-crop Datasets. ``item_labels``:
    a Dataset's items are ``(x, label)`` (torchvision's ``ImageFolder``), ``x`` being a
    view or a pair of them.
    """

    form: str
    views: tuple[View, ...]
    split: int | None = None
    items_paired: bool = False
    item_labels: bool = False
    #: hard-negative columns of each item (text rows (anchor, positive, negatives...)),
    #: embedded by view 1's encoder
    negatives: int = 0
    #: the dict form's keys of those columns
    negative_names: tuple = ()

    @property
    def paired(self) -> bool:
        return len(self.views) == 2

    def view_index(self, view: Any) -> int:
        """Position of ``view`` given as an index (0 or 1) or a view name."""
        names = [v.name for v in self.views]
        if isinstance(view, str):
            if view in names:
                return names.index(view)
        elif isinstance(view, int | np.integer) and not isinstance(view, bool) and view in (0, 1):
            return min(int(view), len(self.views) - 1)
        expected = "0 or 1" + "".join(f" or {n!r}" for n in names if isinstance(n, str))
        raise ValueError(f"view must be {expected}; got {describe(view)}")


# --------------------------------------------------------------------------------------
# Datasets
# --------------------------------------------------------------------------------------

class Batch(NamedTuple):
    """One training or inference batch.

    ``views`` and ``labels`` hold the rows this process works on; ``index`` holds the
    dataset indices of the whole selected batch, in the selector's order. In
    data-parallel training every process trains on a slice of the batch, and the
    embeddings gathered from all processes come back in that same order, so ``index``
    describes the gathered batch on every process.
    """

    views: Any
    labels: torch.Tensor | None
    index: torch.Tensor  # type: ignore[assignment]  # a field; tuple.index is not used


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

    def __getitems__(self, indices: Sequence[int]) -> Batch:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def gather(self, index: torch.Tensor) -> Batch:
        """The batch of rows ``index`` of data held whole on a device
        (:attr:`resident_device`); only such data can."""
        raise NotImplementedError

    def __getitem__(self, i: int) -> tuple[Any, Any]:
        views, labels, _ = self.__getitems__([i])
        views = tuple(v[0] for v in views) if isinstance(views, tuple) else views[0]
        return views, None if labels is None else labels[0]

    def select(self, view: int) -> ViewData:
        """The same items restricted to one view."""
        raise NotImplementedError

    def subset(self, indices: np.ndarray) -> ViewData:
        """The items at ``indices`` (e.g. the training or the held-out part)."""
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
        return _rows(next(v for v in self.views if v is not None))

    def __getitems__(self, indices: Any) -> Batch:
        rows, batch = _rows_and_batch(indices)
        device = _device(self.views[0])
        whole = batch is rows  # gather's default: the rows are the whole batch
        return self.gather(torch.from_numpy(rows).to(device),
                           None if whole else torch.from_numpy(batch).to(device))

    def gather(self, rows: torch.Tensor, batch: torch.Tensor | None = None) -> Batch:
        """The ``rows`` (a long tensor on the data's device) of the selected ``batch``
        (default: the rows are the whole batch)."""
        xs = tuple(_index(v, rows) for v in self.views)
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
        return TensorViews(tuple(None if v is None else _index(v, index)
                                 for v in self.views), labels, self.names)

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


class GatheredBatches:
    """The batches of :meth:`TensorViews.batches`, gathered without a ``DataLoader``:
    re-iterable, each pass the sampler's next epoch."""

    def __init__(self, data: TensorViews, sampler: Any) -> None:
        self.data = data
        self.sampler = sampler

    def __len__(self) -> int:
        return len(self.sampler)

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
    of paired items. Checks run in the DataLoader's workers, on the CPU.
    """

    def __init__(self, dataset: Any, spec: InputSpec, labels: torch.Tensor | None = None,
                 pick: int | None = None) -> None:
        self.dataset = dataset
        self.spec = spec
        self.labels = labels
        self.pick = pick

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitems__(self, indices: Any) -> Batch:
        rows, batch = _rows_and_batch(indices)
        indices = rows.tolist()  # a user's Dataset is indexed with plain ints
        fetch = getattr(self.dataset, "__getitems__", None)
        items = fetch(indices) if fetch is not None else [self.dataset[i] for i in indices]
        columns: list[list[Any]] = [[] for _ in range(2 if self.spec.items_paired else 1)]
        for i, item in zip(indices, items, strict=True):
            parts = _unwrap(item, self.spec.item_labels)[0]
            for column, x in zip(columns, _item_views(parts, i, self.spec.items_paired),
                                 strict=True):
                column.append(x)
        views = self.spec.views
        if self.spec.items_paired and len(views) == 1:  # two crops of one view
            views = views * 2
        xs = tuple(_stack(column, indices, view) for column, view in zip(columns, views,
                                                                         strict=True))
        if self.pick is not None:
            xs = (xs[self.pick],)
        labels = None if self.labels is None else self.labels[torch.as_tensor(indices)]
        return Batch(xs if len(xs) > 1 else xs[0], labels, torch.from_numpy(batch))

    def select(self, view: int) -> ItemViews:
        if not self.spec.items_paired:
            return self
        return ItemViews(self.dataset, self.spec, self.labels, pick=view)

    def item_labels(self) -> np.ndarray:
        """The labels the items carry (``(x, label)`` items): a ``targets`` attribute
        (torchvision's datasets have one) if there is one, else read item by item."""
        if not self.spec.item_labels:
            raise ValueError("the Dataset's items carry no labels (items (x, label) do); "
                             "pass y")
        targets = getattr(self.dataset, "targets", None)
        if targets is not None and len(targets) == len(self.dataset):
            return np.asarray(targets.cpu() if isinstance(targets, torch.Tensor) else targets)
        return np.asarray([_plain(_unwrap(self.dataset[i], True)[1])
                           for i in range(len(self.dataset))])

    def subset(self, indices: np.ndarray) -> ItemViews:
        from torch.utils.data import Subset

        labels = None if self.labels is None else self.labels[torch.as_tensor(indices)]
        return ItemViews(Subset(self.dataset, [int(i) for i in indices]), self.spec, labels,
                         self.pick)


def _is_label(x: Any) -> bool:
    """A class label: a Python or NumPy scalar, or a 0-d tensor (not a view)."""
    if isinstance(x, str | int | np.integer | np.str_):
        return not isinstance(x, bool)
    return isinstance(x, torch.Tensor | np.ndarray) and x.ndim == 0 and \
        not (x.dtype.is_floating_point if isinstance(x, torch.Tensor) else x.dtype.kind == "f")


def _plain(label: Any) -> Any:
    return label.item() if isinstance(label, torch.Tensor | np.ndarray | np.generic) else label


LABEL_KEYS = ("label", "labels")


def _unwrap(item: Any, labelled: bool | None = None) -> tuple[Any, Any]:
    """``(views part, label)`` of a Dataset item: a 1-tuple (a one-tensor
    ``TensorDataset``) is its tensor; ``(x, label)`` carries a label when ``labelled``
    (``None``: when its second part looks like one). A dict item (a HuggingFace
    ``datasets.Dataset`` in torch format) holds one or two views by name, and its label
    under ``'label'`` or ``'labels'``."""
    if isinstance(item, Mapping):
        label = next((item[k] for k in LABEL_KEYS if k in item), None)
        views = [v for k, v in item.items() if k not in LABEL_KEYS]
        if len(views) not in (1, 2):
            raise ValueError(f"a dict item must hold one or two views besides its label; got "
                             f"keys {list(item)} (group the tensors of a view in a dict, "
                             "e.g. {'image': ..., 'text': {'input_ids': ..., "
                             "'attention_mask': ...}, 'label': ...})")
        return (tuple(views) if len(views) == 2 else views[0]), label
    if isinstance(item, tuple | list):
        if len(item) == 1:
            return item[0], None
        if len(item) == 2 and (labelled or (labelled is None and _is_label(item[1]))):
            return item[0], item[1]
    return item, None


def _item_views(item: Any, i: int, paired: bool) -> tuple[Any, ...]:
    if paired:
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise ValueError(f"X[{i}] must be a pair (x0, x1) of the two views of item {i}; "
                             f"got {_describe_item(item)}")
        return tuple(item)
    if isinstance(item, tuple | list):
        raise ValueError(f"X[{i}] must be a single view (an array or tensor), or (x, label); "
                         f"got {_describe_item(item)}")
    return (item,)


def _describe_item(item: Any) -> str:
    if isinstance(item, tuple | list):
        inner = ", ".join(describe(x) if hasattr(x, "shape") else type(x).__name__
                          for x in item[:3])
        return f"a {type(item).__name__} of {len(item)} ({inner})"
    return describe(item)


def _stack(column: list, indices: list[int], view: View) -> Any:
    if view.parts:  # a view of several tensors: stack each
        return {p.name: _stack([x[p.name] for x in column], indices, p) for p in view.parts}
    tensors = []
    for i, x in zip(indices, column, strict=True):
        t = _as_tensor(x, f"view {view.name!r} of X[{i}]")
        if tuple(t.shape) != view.shape:
            raise ValueError(f"view {view.name!r} of X[{i}] has shape {tuple(t.shape)}; every "
                             f"item must match the first item's shape {view.shape}")
        tensors.append(t)
    batch = torch.stack(tensors)
    return _conform(batch, view, f"view {view.name!r} of X[{indices}]",
                    lambda row, at: f"X[{indices[row]}] (value {at} of the item)")


# --------------------------------------------------------------------------------------
# Reading the input
# --------------------------------------------------------------------------------------

def _names(spec: InputSpec) -> list:
    return [v.name for v in spec.views]


def _read_flat(estimator: Any, X: Any, *, reset: bool, single: bool,
               view_split: Any, negatives_fitted: int = 0) -> tuple[TensorViews, InputSpec]:
    """scikit-learn's 2-D form (``(n, 2, d)`` pairs are flattened to it), floats only.
    After fit (``reset=False``), ``(n, 2 + k, d)`` rows are read only when ``k`` is
    the ``negatives_fitted`` columns of training, which are left out."""
    pair_split = None
    negatives = None
    if isinstance(X, torch.Tensor):  # with or without autograd history
        X = X.detach().cpu().numpy()
    if hasattr(X, "ndim") and X.ndim == 3 and X.shape[1] > 2 and not single and (
            reset or X.shape[1] == 2 + negatives_fitted):
        # (anchor, positive, negative_1 ... negative_k) rows: the negatives train only
        if reset:
            negatives = np.asarray(X[:, 2:])
            if negatives.dtype.kind != "f":
                negatives = negatives.astype(np.float32)
            check_values(negatives, "the hard-negative columns of X (X[:, 2:])",
                         lambda row, at: f"X[{row}, {2 + at // X.shape[2]}, "
                         f"{at % X.shape[2]}] (a hard-negative column)")
            negatives = negatives.astype(np.float32, copy=False)
        X = X[:, :2]
    if hasattr(X, "ndim") and X.ndim == 3:
        if X.shape[1] != 2:
            raise ValueError(f"paired X must have shape (n, 2, d) (or (n, 2 + k, d) with k "
                             f"hard-negative columns); got {describe(X)}")
        _check_length(len(X), "X", minimum=2 if reset else 1)
        pair_split = X.shape[2]
        X = np.asarray(X).reshape(len(X), -1)
    X = validate_data(estimator, X, reset=reset, dtype=[np.float32, np.float64],
                      ensure_min_samples=2 if reset else 1)
    names = getattr(estimator, "feature_names_in_", None)
    if X.dtype == np.float64:  # validate_data checked finiteness; check the range
            check_values(X, "X", lambda row, at: (
            f"X[{row}, {at // pair_split}, {at % pair_split}]" if pair_split else
            f"X[{row}, {at}]" + (f" (column {names[at]!r})" if names is not None else "")))
    X = from_numpy(X.astype(np.float32, copy=False))
    width = X.shape[1]
    if single:
        return TensorViews((X,)), InputSpec("flat", (View(0, (width,), False),))
    split = pair_split if pair_split is not None else _flat_split(estimator, width, view_split)
    views = (View(0, (split,), False), View(1, (width - split,), False))
    if negatives is not None:
        return (TensorViews((X[:, :split], X[:, split:], from_numpy(negatives))),
                InputSpec("flat", views, split, True, negatives=negatives.shape[1]))
    return TensorViews((X[:, :split], X[:, split:])), InputSpec("flat", views, split, True)


def _flat_split(estimator: Any, width: int, view_split: Any) -> int:
    from .._validation import check_int

    if width < 2:
        raise ValueError(
            f"{type(estimator).__name__} needs two views, but X has {width} feature(s): "
            "pass pairs (n, 2, d), two views side by side (n, d0 + d1), or single "
            "views with an augmentation")
    if view_split is None:
        if width % 2:
            warnings.warn(
                f"X has an odd number of columns ({width}): read as two views side by side, "
                f"view 0 gets columns [:{width // 2}] and view 1 the other {width - width // 2}"
                f". Pass view_split to say where view 1 starts, or pairs of shape (n, 2, d)",
                UserWarning, stacklevel=4)
        return width // 2
    return check_int(view_split, "view_split", minimum=1, maximum=width - 1)


def _read_array(X: Any, spec: InputSpec | None, *, single: bool) -> tuple[TensorViews,
                                                                          InputSpec]:
    """N-D arrays: ``(n, 2, *view_shape)`` pairs or ``(n, *shape)`` single views."""
    x = _as_tensor(X, "X")
    if single:
        expected = None if spec is None else spec.views[0]
        view = _array_view(x, 0, expected, "X")
        return TensorViews((_conform(x, view, "X", _entry("X")),)), InputSpec("array", (view,))
    negatives = 0 if x.ndim < 3 else x.shape[1] - 2
    if spec is not None and negatives and negatives == spec.negatives:
        x, negatives = x[:, :2], 0  # hard negatives are for training
    elif spec is not None and negatives:
        negatives = -1
    if x.ndim < 3 or negatives < 0:
        raise ValueError(f"paired X must have shape (n, 2, *view_shape), the two views of "
                         f"each item on axis 1 (in fit, (n, 2 + k, *view_shape) with k "
                         f"hard-negative columns); got {describe(x)}")
    views = []
    for i in (0, 1):
        expected = None if spec is None else spec.views[i]
        views.append(_array_view(x[:, i], i, expected, "X"))
    x = _conform(x, views[0], "X", _entry("X"))
    if negatives:  # (anchor, positive, negative_1 ... negative_k): view 1's form
        return (TensorViews((x[:, 0], x[:, 1], x[:, 2:])),
                InputSpec("array", tuple(views), items_paired=True, negatives=negatives))
    return (TensorViews((x[:, 0], x[:, 1])),
            InputSpec("array", tuple(views), items_paired=True))


def _read_dict(X: Mapping, spec: InputSpec | None) -> tuple[TensorViews, InputSpec]:
    """Two modalities as ``{name: array}``; after ``fit`` only the named views are needed.

    Keys after the first two are hard-negative columns (sentence-transformers' ``anchor,
    positive, negative_1 ... negative_k`` columns): items of the second view's form,
    embedded by its encoder, used in training only (accepted and left out afterwards).
    """
    negative_names: tuple = ()
    if spec is None:
        names = list(X.keys())  # len() of skorch's SliceDict counts items, not keys
        if len(names) < 2:
            raise ValueError(f"a dict X must hold two views (e.g. {{'image': ..., 'text': "
                             f"...}}), then optionally hard-negative columns of the second "
                             f"view's form; got {len(names)} key(s): {names}")
        names, negative_names = names[:2], tuple(names[2:])
    else:
        names = _names(spec)
        known = [*names, *spec.negative_names]
        if not X or any(k not in known for k in X) or not any(k in names for k in X):
            raise ValueError(f"X must have the keys seen in fit, {names} (or some of them)"
                             + (f", hard-negative columns {list(spec.negative_names)} "
                                "optional" if spec.negative_names else "")
                             + f"; got {list(X)}")
    tensors: list[Any] = []
    views: list[Any] = []
    for i, key in enumerate(names):
        if key not in X:  # only after fit: the names then come from the spec
            assert spec is not None
            tensors.append(None)
            views.append(spec.views[i])
            continue
        expected = None if spec is None else spec.views[i]
        tensor, view = _read_view_value(X[key], key, expected, f"X[{key!r}]")
        tensors.append(tensor)
        views.append(view)
    lengths = {key: _rows(t) for key, t in zip(names, tensors, strict=True) if t is not None}
    columns = [_read_view_value(X[key], names[1], views[1], f"X[{key!r}] (a hard-negative "
                                f"column: items like X[{names[1]!r}])")[0]
               for key in negative_names]
    lengths.update({key: _rows(t) for key, t in zip(negative_names, columns, strict=True)})
    if len(set(lengths.values())) != 1:
        raise ValueError(f"the views of X must hold equally many items; got {lengths}")
    if columns:
        tensors.append(_side_by_side(columns))
    return (TensorViews(tuple(tensors), names=tuple(names)),
            InputSpec("dict", tuple(views), items_paired=True, negatives=len(columns),
                      negative_names=negative_names))


def _side_by_side(columns: list[Any]) -> Any:
    """Hard-negative columns, each ``(n, ...)`` (or a dict of such tensors), as one
    ``(n, k, ...)`` tensor (or dict): each row's negatives side by side."""
    if isinstance(columns[0], Mapping):
        return {k: torch.stack([c[k] for c in columns], dim=1) for k in columns[0]}
    return torch.stack(columns, dim=1)


def _read_view_value(value: Any, name: Any, expected: View | None, label: str
                     ) -> tuple[Any, View]:
    """One modality: an array or tensor, or a dict of them (one view of several tensors,
    passed to its encoder as keyword arguments, e.g. ``input_ids`` and
    ``attention_mask``)."""
    if not is_view_dict(value):
        if expected is not None and expected.parts:
            raise ValueError(f"{label} must be a dict with the keys "
                             f"{[p.name for p in expected.parts]}, as in fit")
        x = _as_tensor(value, label)
        view = _array_view(x, name, expected, label)
        return _conform(x, view, label, _entry(label)), view
    keys = list(value)
    if expected is not None and [p.name for p in expected.parts] != keys:
        raise ValueError(f"{label} must have the keys {[p.name for p in expected.parts]} seen "
                         f"in fit; got {keys}")
    if not keys:
        raise ValueError(f"{label} is an empty dict; a view needs at least one tensor")
    tensors, parts = {}, []
    for j, key in enumerate(keys):
        inner = None if expected is None else expected.parts[j]
        tensors[key], part = _read_view_value(value[key], key, inner, f"{label}[{key!r}]")
        parts.append(part)
    lengths = {key: len(t) for key, t in tensors.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"the tensors of {label} must hold equally many items; got {lengths}")
    return tensors, View(name, (), False, tuple(parts))


def _read_dataset(X: Any, *, single: bool, labelled: bool) -> tuple[ItemViews, InputSpec]:
    """A map-style Dataset: the first item tells the structure, every batch is checked."""
    dataset = _check_map_style(X)
    _check_length(len(dataset), "X", minimum=2)
    first, label = _unwrap(dataset[0])
    item_labels = label is not None
    paired_item = isinstance(first, tuple | list)
    if labelled:
        items_paired = paired_item  # SupCon: one view, or two crops of it
    else:
        items_paired = not single
    parts = _item_views(first, 0, items_paired)
    for i, part in enumerate(parts):
        if not is_view_dict(part) and np.ndim(part) == 0:
            raise ValueError(f"view {i} of X[0] is a scalar ({type(part).__name__}); each view "
                             "must be an array or tensor")
    views = tuple(_item_view(p, i, f"view {i} of X[0]") for i, p in enumerate(parts))
    if labelled and items_paired:
        if (views[0].shape, views[0].integer) != (views[1].shape, views[1].integer):
            raise ValueError(f"the two crops of a SupCon item must be alike; got "
                             f"{views[0].describe()} and {views[1].describe()}")
        views = views[:1]
    spec = InputSpec("dataset", views, items_paired=items_paired, item_labels=item_labels)
    return ItemViews(dataset, spec), spec


def _item_view(part: Any, name: Any, label: str) -> View:
    """The :class:`View` of one item's view: a tensor, or a dict of tensors."""
    if is_view_dict(part):
        return View(name, (), False, tuple(_item_view(v, k, f"{label}[{k!r}]")
                                           for k, v in part.items()))
    return _array_view(_as_tensor(part, label)[None], name, None, label)


def _check_map_style(X: Any, name: str = "X") -> Any:
    if isinstance(X, IterableDataset):
        raise ValueError(f"{name} is an IterableDataset; batch selection needs random "
                         "access: pass a map-style Dataset (with __len__ and __getitem__)")
    try:
        len(X)
    except TypeError as exc:
        raise ValueError(f"{name} ({type(X).__name__}) has no __len__; pass a map-style "
                         "Dataset with __len__ and __getitem__") from exc
    return X


def _check_length(n: int, name: str, minimum: int) -> None:
    if n < minimum:
        need = "at least 2 are needed to contrast" if minimum > 1 else "nothing to embed"
        raise ValueError(f"{name} holds {n} sample(s); {need}")


def _array_view(x: torch.Tensor, name: Any, expected: View | None, label: str) -> View:
    """The :class:`View` of an array whose rows are items; checked against ``expected``."""
    if x.ndim < 2:
        raise ValueError(f"{label} must have one row per item and at least one feature "
                         f"axis; got {describe(x)}")
    if x.dtype.is_complex or x.dtype == torch.bool:
        raise ValueError(f"{label} must hold real numbers; got {describe(x)}")
    integer = not x.is_floating_point() and x.dtype != torch.uint8  # bytes: images
    view = View(name, tuple(x.shape[1:]), integer)
    if expected is not None:
        if view.shape != expected.shape:
            raise ValueError(f"{label} has items of shape {view.shape}, but the estimator "
                             f"was fitted on {expected.describe()}")
        if expected.integer and not integer:
            raise ValueError(f"{label} holds floats, but {expected.describe()} held "
                             "integers in fit (e.g. token ids)")
        view = expected
    return view


def _entry(label: str) -> Callable[[int, int], str]:
    """Names entry ``position`` of row ``row`` of the rows ``label``."""
    return lambda row, at: f"{label}[{row}] (value {at} of the row)"


def from_numpy(array: np.ndarray) -> torch.Tensor:
    """``torch.from_numpy`` without its warning for read-only arrays (a pandas frame's
    values, a read-only memmap): the estimators never write into their input."""
    if array.flags.writeable:
        return torch.from_numpy(array)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(array)


def _as_tensor(x: Any, label: str) -> torch.Tensor:
    """An array, tensor or sequence as a tensor (NumPy memory shared, never copied)."""
    if isinstance(x, torch.Tensor):
        return x.detach()
    array = np.asarray(x)
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{label} must hold numbers; got {describe(array)}")
    if array.dtype.kind == "u" and array.dtype != np.uint8:
        if array.dtype == np.uint64 and array.size and array.max() > np.iinfo(np.int64).max:
            raise ValueError(f"{label} holds values up to {array.max()}, beyond the int64 "
                             "range torch computes with; re-encode them (e.g. as token ids "
                             "from 0)")
        array = array.astype(np.int64)  # torch has no uint16/32/64 arithmetic
    return from_numpy(np.ascontiguousarray(array))


#: Values per chunk of the finiteness check, so a memory-mapped array is never copied
#: whole (nor a boolean mask of its size made).
FINITE_CHUNK = 2**24


#: The largest magnitude a float32 holds: the network computes in float32 (or lower),
#: so a float64 value beyond it would become inf when cast.
FLOAT32_MAX = float(np.finfo(np.float32).max)


def check_values(x: torch.Tensor | np.ndarray, name: str,
                 where: Callable[[int, int], str]) -> None:
    """Refuse non-finite floats in ``x`` (called ``name``), and float64 values beyond
    float32's range (which the cast to the network's float32 would turn into inf),
    naming the first bad entry by ``where(row, position)`` (its position among the
    row's values).

    Checked chunk by chunk, so a memory-mapped array is read but never held whole in
    memory twice."""
    flat = x.reshape(len(x), -1) if len(x) else x
    if not len(flat):
        return
    wide = flat.dtype in (torch.float64, np.float64)
    rows = max(1, FINITE_CHUNK // max(1, flat.shape[-1] if flat.ndim > 1 else 1))
    def chunk_at(start: int) -> torch.Tensor:
        chunk = flat[start:start + rows]
        return chunk if isinstance(chunk, torch.Tensor) else from_numpy(chunk)

    for start in range(0, len(flat), rows):
        chunk = chunk_at(start)
        bad = ~torch.isfinite(chunk)
        if bool(bad.any()):
            total = int(bad.sum()) + sum(int((~torch.isfinite(chunk_at(i))).sum())
                                         for i in range(start + rows, len(flat), rows))
            row, position = (int(i) for i in bad.nonzero()[0])
            raise ValueError(f"{name} contains {total} NaN or infinite value(s), the first "
                             f"{where(start + row, position)}; clean or impute them first")
        big = chunk.abs() > FLOAT32_MAX if wide else None
        if big is not None and bool(big.any()):
            row, position = (int(i) for i in big.nonzero()[0])
            raise ValueError(f"{where(start + row, position)} is "
                             f"{float(chunk[row, position]):g}, beyond the float32 range "
                             f"(±{FLOAT32_MAX:.4g}) the network computes in: it would "
                             "become inf. Rescale the data (e.g. sklearn's StandardScaler)")


def _conform(x: torch.Tensor, view: View, name: str,
             where: Callable[[int, int], str]) -> torch.Tensor:
    """Check a view's values (:func:`check_values`); keep them as they are (no copy:
    floats are cast to float32 and bytes turned into [0, 1] images on the training
    device, batch by batch)."""
    if view.integer or not x.is_floating_point():
        return x
    check_values(x, name, where)
    return x


def to_device(x: Any, device: Any, normalization: Any = None) -> Any:
    """A batch (a tensor, or a tuple of one per view) on ``device``, ready for the module.

    Copies from pinned memory overlap. On the device, floats become float32 and bytes
    (uint8 images) become floats in [0, 1]; then, with ``normalization=(mean, std)``,
    every float view becomes ``(x - mean) / std`` per channel (axis 1), so the host keeps
    the data as it was given. Integer views (token ids) stay as they are.
    """
    if isinstance(x, tuple | list):
        return tuple(to_device(t, device, normalization) for t in x)
    if isinstance(x, Mapping):  # a view of several tensors (keyword arguments)
        return {k: to_device(t, device, normalization) for k, t in x.items()}
    x = x.to(device, non_blocking=True)
    if x.dtype == torch.uint8:
        x = x.float().div_(255)
    elif x.is_floating_point() and x.dtype != torch.float32:
        x = x.float()
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
    tensor = None if labels is None else torch.as_tensor(labels)
    if isinstance(data, TensorViews):
        return TensorViews(data.views, tensor)
    assert isinstance(data, ItemViews)
    return ItemViews(data.dataset, data.spec, tensor, data.pick)


# --------------------------------------------------------------------------------------
# Text: strings, tokenized
# --------------------------------------------------------------------------------------

def resolve_tokenizer(tokenizer: Any) -> Any:
    """The tokenizer a text fit uses: the given one, or the default hashed n-grams."""
    from ..text import HashingNgramTokenizer

    if tokenizer is None:
        return HashingNgramTokenizer()
    if not callable(tokenizer):
        raise ValueError(f"tokenizer must be a callable tokenizer(list_of_str) -> token ids, "
                         f"a Hugging Face tokenizer, or None (hashed character n-grams); got "
                         f"{describe(tokenizer)}")
    return tokenizer


def _is_hf_tokenizer(tokenizer: Any) -> bool:
    return hasattr(tokenizer, "model_input_names") and hasattr(tokenizer, "pad_token_id")


def vocabulary_of(tokenizer: Any) -> int | None:
    """The number of ids a tokenizer produces (``vocabulary_size``, or a Hugging Face
    tokenizer's ``len``), ``None`` if it does not say."""
    if _is_hf_tokenizer(tokenizer):
        return len(tokenizer)
    size = getattr(tokenizer, "vocabulary_size", None)
    return None if size is None else int(size)


def tokenize(tokenizer: Any, texts: list[str], name: str = "X",
             where: Callable[[int], str] | None = None) -> Any:
    """Token ids of ``texts``: a long tensor ``(n, L)``, or a dict of them (a Hugging
    Face tokenizer's ``input_ids``, ``attention_mask``, ...), padded to the longest.

    A text that yields no token (every id 0, the padding, or an all-zero
    ``attention_mask``: "!!!" for a word tokenizer, "ab" for character 3-grams) is
    refused, named by ``where(i)`` (``name[i]`` by default): it would embed to the zero
    vector, whose cosine is undefined."""
    if _is_hf_tokenizer(tokenizer):
        encoded = tokenizer(texts, padding=True, truncation=True, return_tensors="np")
        out: Any = {k: torch.from_numpy(np.asarray(encoded[k], dtype=np.int64))
                    for k in tokenizer.model_input_names if k in encoded}
    else:
        out = tokenizer(texts)
        if isinstance(out, Mapping):
            out = {k: _token_matrix(v, len(texts), f"tokenizer output {k!r} for {name}")
                   for k, v in out.items()}
        else:
            out = _token_matrix(out, len(texts), f"the tokenizer's output for {name}")
    if isinstance(out, Mapping):
        present = out.get("attention_mask", out.get("input_ids"))
    else:
        present = out
    if present is not None and len(texts):
        empty = ~(present != 0).any(1)
        if bool(empty.any()):
            i = int(empty.nonzero()[0, 0])
            label = where(i) if where is not None else f"{name}[{i}]"
            raise ValueError(f"{label} ({texts[i]!r}) yields no token with this tokenizer "
                             f"({int(empty.sum())} text(s) of {name} do): it would embed to "
                             "the zero vector, whose cosine is undefined. Leave it out, or "
                             "use a tokenizer that covers it (e.g. a character analyzer "
                             "with a shorter ngram_range)")
    return out


def _token_matrix(value: Any, n: int, label: str) -> torch.Tensor:
    ids = torch.as_tensor(np.asarray(value.cpu() if isinstance(value, torch.Tensor) else value))
    if ids.ndim != 2 or len(ids) != n or ids.is_floating_point() or ids.dtype == torch.bool:
        raise ValueError(f"{label} must be integer token ids of shape ({n}, L); got "
                         f"{describe(ids)}")
    if len(ids) and int(ids.min()) < 0:
        raise ValueError(f"{label} holds a negative token id ({int(ids.min())})")
    return ids.long()


def _read_text(tokenizer: Any, X: Any, spec: InputSpec | None, *, single: bool,
               name: str = "X", names: Sequence | None = None) -> tuple[TensorViews, InputSpec]:
    """Strings: each column of ``X`` tokenized (all columns in one call, so that they
    share one padded length and a shared encoder embeds them in one batch). ``names``:
    the columns' names (a table's), the views' and hard-negative columns' names."""
    table = text_table(X, name)
    n, columns = table.shape
    if spec is None and single and columns != 1:
        raise ValueError(f"{name} holds rows of {columns} texts, but this fit takes single "
                         "texts (a list of strings)")
    if spec is not None and columns > len(spec.views):
        if columns == len(spec.views) + spec.negatives:  # negatives are for training
            table = table[:, :len(spec.views)]
            columns = table.shape[1]
        else:
            raise ValueError(f"{name} has rows of {columns} texts; the model was fitted on "
                             f"{len(spec.views)} per item")
    if spec is None and columns == 1 and not single:
        raise ValueError(f"{name} is a list of single strings; contrastive training takes "
                         "pairs of texts (rows of two strings: an anchor and its positive)")
    tokens = tokenize(tokenizer, list(table.T.reshape(-1)), name,
                      where=lambda f: f"{name}[{f % n}]" if table.shape[1] == 1
                      else f"{name}[{f % n}, {f // n}]")
    vocabulary = vocabulary_of(tokenizer)
    if spec is not None and vocabulary != spec.views[0].vocabulary:
        raise ValueError(f"the tokenizer now makes {vocabulary} token ids; the model was "
                         f"fitted with {spec.views[0].vocabulary}")
    if vocabulary is not None:
        largest = max(int(t.max()) for t in (tokens.values() if isinstance(tokens, Mapping)
                                             else [tokens]))
        if largest >= vocabulary:
            raise ValueError(f"the tokenizer made token id {largest}, beyond its vocabulary "
                             f"of {vocabulary} ids")
    parts = [_index(tokens, torch.arange(c * n, (c + 1) * n)) for c in range(columns)]
    negatives = max(0, columns - 2)
    if negatives:  # (n, k, L) per tensor: the negatives of each row, side by side
        parts = [*parts[:2], _side_by_side(parts[2:])]
        columns = 2
    labels = list(names) if names is not None else list(range(columns + negatives))
    views = []
    for c in range(columns):
        if isinstance(tokens, Mapping):
            inner = tuple(View(k, tuple(t.shape[1:]), True) for k, t in tokens.items())
            views.append(View(labels[c], (), True, inner, vocabulary))
        else:
            views.append(View(labels[c], tuple(tokens.shape[1:]), True, (), vocabulary))
    return (TensorViews(tuple(parts), names=tuple(labels[:columns]) if names else ()),
            InputSpec("text", tuple(views), items_paired=columns == 2, negatives=negatives,
                      negative_names=tuple(labels[2:]) if names is not None else ()))
