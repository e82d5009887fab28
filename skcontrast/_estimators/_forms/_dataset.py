"""The dataset form: a map-style ``torch.utils.data.Dataset`` (or skorch's
``SliceDataset``), whose items (``_estimators/_items.py``) are read a batch at a time;
after fit, an array of such items is read too."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..._validation import is_view_dict
from .._checks import as_tensor, check_length
from .._data import InputSpec, ItemViews, View, ViewData, array_view
from .._items import item_views, unwrap
from ._array import read_array
from ._form import NO_FEATURES, InputForm, form_of, is_dataset


class DatasetForm(InputForm):
    name = "dataset"

    def detect(self, X: Any) -> bool:
        return is_dataset(X)

    def fit(self, estimator: Any, X: Any, *, single: bool, labelled: bool,
            view_split: Any) -> tuple[ViewData, InputSpec, dict]:
        data, spec = _read_dataset(X, single=single, labelled=labelled)
        return data, spec, NO_FEATURES

    def read(self, estimator: Any, X: Any, spec: InputSpec) -> ViewData:
        if is_dataset(X):
            return ItemViews(_check_map_style(X), spec)
        if not isinstance(X, np.ndarray | torch.Tensor):
            raise ValueError(f"{type(estimator).__name__} was fitted on a Dataset; got "
                             f"{form_of(X)} (pass a Dataset, or an array of items of the "
                             "shape fitted on)")
        # an array of the Dataset's items: single views, or pairs (n, 2, *shape)
        pairs = spec.items_paired and np.ndim(X) == len(spec.views[0].shape) + 2
        return read_array(X, InputSpec("array", spec.views), single=not pairs)[0]

    def read_view(self, X: Any, view: View, name: str, tokenizer: Any) -> ViewData:
        return ItemViews(_check_map_style(X, name), InputSpec("dataset", (view,)))


DATASET = DatasetForm()


def _read_dataset(X: Any, *, single: bool, labelled: bool) -> tuple[ItemViews, InputSpec]:
    """A map-style Dataset: the first item tells the structure, every batch is checked."""
    dataset = _check_map_style(X)
    check_length(len(dataset), "X", minimum=2)
    first, label = unwrap(dataset[0])
    item_labels = label is not None
    paired_item = isinstance(first, tuple | list)
    if labelled:
        items_paired = paired_item  # SupCon: one view, or two crops of it
    else:
        items_paired = not single
    parts = item_views(first, 0, items_paired)
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
    return array_view(as_tensor(part, label)[None], name, None, label)


def _check_map_style(X: Any, name: str = "X") -> Any:
    try:
        len(X)
    except TypeError as exc:
        raise ValueError(f"{name} ({type(X).__name__}) has no __len__; pass a map-style "
                         "Dataset with __len__ and __getitem__") from exc
    return X
