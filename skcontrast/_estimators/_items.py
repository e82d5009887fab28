"""A map-style Dataset's items: what one holds (one view or a pair of them, and maybe a
label) and how a batch of them is stacked into checked tensors.

An item is a view (an array, a tensor, or a dict of them for a view of several
tensors), a pair ``(x0, x1)`` of views, or either with its label: ``(x, label)``
(torchvision's ``ImageFolder``), or a dict item with the label under ``'label'`` or
``'labels'`` (a Hugging Face ``datasets.Dataset`` in torch format).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .._validation import describe
from ._checks import as_tensor, conform

if TYPE_CHECKING:
    from ._spec import View


def _is_label(x: Any) -> bool:
    """A class label: a Python or NumPy scalar, or a 0-d tensor (not a view)."""
    if isinstance(x, str | int | np.integer | np.str_):
        return not isinstance(x, bool)
    return isinstance(x, torch.Tensor | np.ndarray) and x.ndim == 0 and \
        not (x.dtype.is_floating_point if isinstance(x, torch.Tensor) else x.dtype.kind == "f")


#: the keys of a dict item that hold its label
LABEL_KEYS = ("label", "labels")


def unwrap(item: Any, labelled: bool | None = None) -> tuple[Any, Any]:
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


def item_views(item: Any, i: int, paired: bool) -> tuple[Any, ...]:
    """The views of item ``i`` (its label unwrapped): two when ``paired``, else one."""
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


def stack(column: list, indices: list[int], view: View) -> Any:
    """The items' values of one view (``column``, the items at ``indices``) as one
    checked batch: a tensor, or a dict of them for a view of several tensors."""
    if view.parts:  # a view of several tensors: stack each
        return {p.name: stack([x[p.name] for x in column], indices, p) for p in view.parts}
    tensors = []
    for i, x in zip(indices, column, strict=True):
        t = as_tensor(x, f"view {view.name!r} of X[{i}]")
        if tuple(t.shape) != view.shape:
            raise ValueError(f"view {view.name!r} of X[{i}] has shape {tuple(t.shape)}; every "
                             f"item must match the first item's shape {view.shape}")
        tensors.append(t)
    batch = torch.stack(tensors)
    return conform(batch, view, f"view {view.name!r} of X[{indices}]",
                   lambda row, at: f"X[{indices[row]}] (value {at} of the item)")

