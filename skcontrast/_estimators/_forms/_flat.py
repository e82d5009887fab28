"""The flat form: scikit-learn's 2-D form, ``(n, d)`` single views or two views side by
side ``(n, d0 + d1)`` (``view_split``), and ``(n, 2, d)`` float pairs flattened to it;
what no other form recognises is read as it."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
from sklearn.utils.validation import validate_data

from ..._validation import check_int, describe, is_view_dict
from .._checks import check_length, check_values, from_numpy
from .._data import InputSpec, TensorViews, View, ViewData
from ._array import ARRAY, ArrayForm
from ._dict import DICT
from ._form import NO_FEATURES, InputForm, form_of, is_dataset, stand_in


class FlatForm(ArrayForm):
    """scikit-learn's 2-D form; what no other form recognises is read as it."""

    name = "flat"

    def detect(self, X: Any) -> bool:
        return True

    def fit(self, estimator: Any, X: Any, *, single: bool, labelled: bool,
            view_split: Any) -> tuple[ViewData, InputSpec, dict]:
        probe = stand_in(estimator)  # what validate_data records, not the estimator
        data, spec = _read_flat(probe, X, reset=True, single=single, view_split=view_split)
        return data, spec, {**NO_FEATURES, **{k: getattr(probe, k, None) for k in
                                              ("n_features_in_", "feature_names_in_")}}

    def view_form(self, view: View) -> InputForm:
        return DICT if view.parts else ARRAY

    def read(self, estimator: Any, X: Any, spec: InputSpec) -> ViewData:
        if is_view_dict(X) or is_dataset(X) or (
                isinstance(X, np.ndarray | torch.Tensor) and X.ndim > 3):
            raise ValueError(f"{type(estimator).__name__} was fitted on 2-D feature arrays; "
                             f"got {form_of(X)}")
        return _read_flat(estimator, X, reset=False, single=not spec.paired,
                          view_split=spec.split, negatives_fitted=spec.negatives)[0]


FLAT = FlatForm()


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
        check_length(len(X), "X", minimum=2 if reset else 1)
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
