"""What the input is: the spec of its views, learned in ``fit`` and enforced on later input.

A :class:`View` describes one view (modality) of the data, an :class:`InputSpec` the
whole input (its form and views); :func:`array_view` reads the view of an array whose
rows are items. The readers of every form (:mod:`._forms`), the checks of values
(:mod:`._checks`), a Dataset's items (:mod:`._items`) and the datasets the input is
read into (:mod:`._data`) all describe input with them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .._pixels import is_pixel_type
from .._validation import describe


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
    #: single images ``(C, H, W)``, whose defaults are :mod:`skcontrast.images`'
    image: bool = False

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
        kind = "images" if self.image else "integer" if self.integer else "float"
        return f"view {self.name!r} ({kind}, shape {self.shape})"


def array_view(x: torch.Tensor, name: Any, expected: View | None, label: str) -> View:
    """The :class:`View` of an array whose rows are items; checked against ``expected``."""
    if x.ndim < 2:
        raise ValueError(f"{label} must have one row per item and at least one feature "
                         f"axis; got {describe(x)}")
    if x.dtype.is_complex or x.dtype == torch.bool:
        raise ValueError(f"{label} must hold real numbers; got {describe(x)}")
    integer = not x.is_floating_point() and not is_pixel_type(x.dtype)  # pixels: images
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
