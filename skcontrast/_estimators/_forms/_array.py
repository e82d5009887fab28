"""The array form: N-D arrays or tensors, ``(n, 2, *view_shape)`` pairs (``(n, 2 + k,
*view_shape)`` with ``k`` hard-negative columns in fit) or ``(n, *view_shape)`` single
views; integer views (token ids) keep their integers, bytes are images."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..._validation import describe
from .._checks import as_tensor, check_length, conform, where_in
from .._data import InputSpec, TensorViews, View, ViewData, array_view
from ._dict import DICT
from ._form import NO_FEATURES, InputForm


class ArrayForm(InputForm):
    name = "array"

    def detect(self, X: Any) -> bool:
        return isinstance(X, np.ndarray | torch.Tensor) and X.ndim >= 3

    def fit(self, estimator: Any, X: Any, *, single: bool, labelled: bool,
            view_split: Any) -> tuple[ViewData, InputSpec, dict]:
        data, spec = read_array(X, None, single=single)
        return data, spec, NO_FEATURES

    def read(self, estimator: Any, X: Any, spec: InputSpec) -> ViewData:
        if not isinstance(X, np.ndarray | torch.Tensor):
            X = np.asarray(X)
        return read_array(X, spec, single=not spec.items_paired)[0]

    def view_form(self, view: View) -> InputForm:
        return DICT if view.parts else self

    def read_view(self, X: Any, view: View, name: str, tokenizer: Any) -> ViewData:
        x = as_tensor(X, name)
        check_length(len(x), name, minimum=1)
        if tuple(x.shape[1:]) != view.shape:
            raise ValueError(f"{name} for view {view.name!r} must have shape (n, "
                             f"{', '.join(map(str, view.shape))}); got {describe(x)}")
        return TensorViews((conform(x, array_view(x, view.name, view, name), name,
                                    where_in(name)),))


ARRAY = ArrayForm()


def read_array(X: Any, spec: InputSpec | None, *, single: bool
               ) -> tuple[TensorViews, InputSpec]:
    """N-D arrays: ``(n, 2, *view_shape)`` pairs or ``(n, *shape)`` single views."""
    x = as_tensor(X, "X")
    if single:
        expected = None if spec is None else spec.views[0]
        view = array_view(x, 0, expected, "X")
        return TensorViews((conform(x, view, "X", where_in("X")),)), InputSpec("array", (view,))
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
        views.append(array_view(x[:, i], i, expected, "X"))
    x = conform(x, views[0], "X", where_in("X"))
    if negatives:  # (anchor, positive, negative_1 ... negative_k): view 1's form
        return (TensorViews((x[:, 0], x[:, 1], x[:, 2:])),
                InputSpec("array", tuple(views), items_paired=True, negatives=negatives))
    return (TensorViews((x[:, 0], x[:, 1])),
            InputSpec("array", tuple(views), items_paired=True))

