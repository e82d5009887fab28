"""The dict form: two modalities of any shapes and dtypes, ``{name: array}`` (a view may
itself be a dict of tensors, given to its encoder as keyword arguments), then
hard-negative keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..._validation import is_view_dict
from .._checks import as_tensor, check_length, conform, where_in
from .._data import (
    InputSpec,
    TensorViews,
    View,
    ViewData,
    array_view,
    batch_length,
    side_by_side,
)
from ._form import NO_FEATURES, InputForm, form_of


class DictForm(InputForm):
    name = "dict"

    def detect(self, X: Any) -> bool:
        return is_view_dict(X)

    def fit(self, estimator: Any, X: Any, *, single: bool, labelled: bool,
            view_split: Any) -> tuple[ViewData, InputSpec, dict]:
        if single:
            raise ValueError(f"{type(estimator).__name__} takes a dict of views only for two "
                             f"modalities (pairs without an augmentation); got keys {list(X)}")
        data, spec = _read_dict(X, None)
        return data, spec, NO_FEATURES

    def read(self, estimator: Any, X: Any, spec: InputSpec) -> ViewData:
        if not is_view_dict(X):
            raise ValueError(f"{type(estimator).__name__} was fitted on a dict of views "
                             f"{[v.name for v in spec.views]}; got {form_of(X)}")
        return _read_dict(X, spec)[0]

    def read_view(self, X: Any, view: View, name: str, tokenizer: Any) -> ViewData:
        tensors, _ = _read_view_value(X, view.name, view, name)
        check_length(batch_length(tensors), name, minimum=1)
        return TensorViews((tensors,))


DICT = DictForm()


def _names(spec: InputSpec) -> list:
    return [v.name for v in spec.views]


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
    lengths = {key: batch_length(t) for key, t in zip(names, tensors, strict=True) if t is not None}
    columns = [_read_view_value(X[key], names[1], views[1], f"X[{key!r}] (a hard-negative "
                                f"column: items like X[{names[1]!r}])")[0]
               for key in negative_names]
    lengths.update({key: batch_length(t) for key, t in zip(negative_names, columns, strict=True)})
    if len(set(lengths.values())) != 1:
        raise ValueError(f"the views of X must hold equally many items; got {lengths}")
    if columns:
        tensors.append(side_by_side(columns))
    return (TensorViews(tuple(tensors), names=tuple(names)),
            InputSpec("dict", tuple(views), items_paired=True, negatives=len(columns),
                      negative_names=negative_names))


def _read_view_value(value: Any, name: Any, expected: View | None, label: str
                     ) -> tuple[Any, View]:
    """One modality: an array or tensor, or a dict of them (one view of several tensors,
    passed to its encoder as keyword arguments, e.g. ``input_ids`` and
    ``attention_mask``)."""
    if not is_view_dict(value):
        if expected is not None and expected.parts:
            raise ValueError(f"{label} must be a dict with the keys "
                             f"{[p.name for p in expected.parts]}, as in fit")
        x = as_tensor(value, label)
        view = array_view(x, name, expected, label)
        return conform(x, view, label, where_in(label)), view
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

