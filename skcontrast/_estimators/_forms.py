"""Every input form the estimators accept, as one table of readers.

An input form is one entry of :data:`FORMS`: how to recognise it (``detect``), how to
read it for ``fit`` (``fit``: a :class:`~._data.ViewData` and an
:class:`~._data.InputSpec`, and what scikit-learn records about the input), how to read
later input against the spec of the fit (``read``), and how to read one view of it alone
(``read_view``, for ``transform_view``, with ``view_form`` naming the form that reads
one view). A container of another form's data (a table) says so (``container``): it
reads later input whatever form its fit made. :func:`read_fit_input`,
:func:`read_input` and :func:`read_view` go through the table; nothing else in the
estimators branches on the form. Adding a form is one class here, its place in
:data:`FORMS` and its tests.

The forms, in the order they are recognised:

- ``'text'``: strings, a list of them or rows of them (anchor, positive, negatives...);
- tables of columns, a pandas ``DataFrame`` or a Hugging Face ``datasets.Dataset``
  (:class:`TableForm`): text columns are text views by name (the first two the views,
  further ones hard-negative columns, as a dict's keys), numeric columns scikit-learn's
  features (a DataFrame) or views of per-row arrays (a ``datasets.Dataset``);
- ``'dict'``: two modalities of any shapes, ``{name: array}``, then hard-negative keys;
- ``'dataset'``: a map-style ``torch.utils.data.Dataset``;
- ``'array'``: N-D arrays or tensors, ``(n, 2, *view_shape)`` pairs or single views;
- ``'flat'``: scikit-learn's 2-D form (and ``(n, 2, d)`` pairs, flattened to it).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from sklearn.base import BaseEstimator
from torch.utils.data import Dataset

from .._tables import (
    is_series,
    is_table,
    order_columns,
    series_values,
    table_columns,
    table_kind,
    text_rows,
)
from .._validation import describe, is_text, is_view_dict
from ._data import (
    InputSpec,
    ItemViews,
    TensorViews,
    View,
    ViewData,
    _array_view,
    _as_tensor,
    _check_length,
    _check_map_style,
    _conform,
    _read_array,
    _read_dataset,
    _read_dict,
    _read_flat,
    _read_text,
    _read_view_value,
    _rows,
    resolve_tokenizer,
)

#: what a fit records about its input besides the spec (``None`` where it has none)
NO_FEATURES: dict[str, Any] = {"n_features_in_": None, "feature_names_in_": None,
                               "tokenizer_": None}


class InputForm:
    """One input form (see the module docstring); subclasses implement its readers."""

    #: the ``InputSpec.form`` its ``fit`` makes (a table makes another form's)
    name: ClassVar[str]
    #: a container of another form's data (a table): its ``read`` takes later input
    #: whatever form its fit made; other forms' later input is read by the fit's form
    container: ClassVar[bool] = False

    def detect(self, X: Any) -> bool:
        raise NotImplementedError

    def fit(self, estimator: Any, X: Any, *, single: bool, labelled: bool,
            view_split: Any) -> tuple[ViewData, InputSpec, dict]:
        raise NotImplementedError

    def read(self, estimator: Any, X: Any, spec: InputSpec) -> ViewData:
        raise NotImplementedError

    def read_view(self, X: Any, view: View, name: str, tokenizer: Any) -> ViewData:
        raise NotImplementedError

    def view_form(self, view: View) -> InputForm:
        """The form that reads one ``view`` of input recognised as this form."""
        return self


class TextForm(InputForm):
    name = "text"

    def detect(self, X: Any) -> bool:
        return is_text(X)

    def fit(self, estimator: Any, X: Any, *, single: bool, labelled: bool,
            view_split: Any, names: Sequence | None = None
            ) -> tuple[ViewData, InputSpec, dict]:
        tokenizer = resolve_tokenizer(getattr(estimator, "tokenizer", None))
        data, spec = _read_text(tokenizer, X, None, single=single, names=names)
        return data, spec, {**NO_FEATURES, "tokenizer_": tokenizer}

    def read(self, estimator: Any, X: Any, spec: InputSpec) -> ViewData:
        if not is_text(X):
            raise ValueError(f"{type(estimator).__name__} was fitted on text; got "
                             f"{form_of(X)} (pass a list of strings, or rows of strings as "
                             "in fit)")
        return _read_text(estimator.tokenizer_, X, spec, single=True)[0]

    def read_view(self, X: Any, view: View, name: str, tokenizer: Any) -> ViewData:
        if not is_text(X):
            raise ValueError(f"{name} for {view.describe()} must be a list of strings; got "
                             f"{form_of(X)}")
        return _read_text(tokenizer, X, InputSpec("text", (view,)), single=True,
                          name=name)[0]


class TableForm(InputForm):
    """A table of columns (:mod:`skcontrast._tables`): a pandas ``DataFrame``, a Hugging
    Face ``datasets.Dataset`` in any format, or a list of row dicts, read by column name.

    Text columns (every value a string) are text views, by name: the first two the
    views (one for single views), further ones hard-negative columns, as in the dict
    form. Numeric columns are scikit-learn's features (``feature_names_in_``), and
    columns of per-row arrays are views (the first two) and hard-negative columns, as
    in the dict form. A table mixing text and numeric columns, or a column of missing,
    mixed or ragged values, is refused naming the column; so is a label column (pass
    the labels as ``y``). After ``fit`` a table is read by the column names seen in fit,
    in any order (:func:`~skcontrast._tables.order_columns`; the views' columns without
    the hard-negative ones, or the first view's alone, for ``transform``); a missing,
    unseen or renamed column is refused naming it. A model fitted without column names
    (lists, arrays, a table whose names are not strings) reads a table by position,
    with scikit-learn's warning.
    """

    name = "table"
    container = True

    def detect(self, X: Any) -> bool:
        return is_table(X)

    def fit(self, estimator: Any, X: Any, *, single: bool, labelled: bool,
            view_split: Any) -> tuple[ViewData, InputSpec, dict]:
        columns = table_columns(X)
        kind = table_kind(columns)
        if kind == "text":
            if single and len(columns) != 1:
                raise ValueError(f"{type(estimator).__name__} takes single texts: a table "
                                 f"of one text column; got columns {list(columns)}")
            return TEXT.fit(estimator, text_rows(columns), single=single, labelled=labelled,
                            view_split=view_split, names=list(columns))
        form = FLAT if kind == "features" else DICT
        return form.fit(estimator, _table_values(X, columns, kind), single=single,
                        labelled=labelled, view_split=view_split)

    def read(self, estimator: Any, X: Any, spec: InputSpec) -> ViewData:
        columns = table_columns(X)
        kind = table_kind(columns)
        if (kind == "text") != (spec.form == "text") or spec.form not in (
                "text", "flat", "dict"):
            what = "text" if spec.form == "text" else f"{spec.form} input, not text"
            raise ValueError(f"{type(estimator).__name__} was fitted on {what}; got a "
                             f"table of {'text' if kind == 'text' else 'numeric'} columns "
                             f"{list(columns)}")
        fitted = _fitted_columns(estimator, spec)
        if fitted is None:
            _warn_unnamed(estimator, columns)
        elif spec.form == "flat":
            columns = order_columns(columns, fitted)
            X = None  # the columns in the fit's order
        else:
            negatives = list(spec.negative_names)
            columns = order_columns(columns, fitted, leading=True, expected=(
                f"the {'text' if spec.form == 'text' else 'view'} columns seen in fit, "
                f"{fitted[:len(spec.views)]}"
                + (f", then optionally the hard-negative columns {negatives}"
                   if negatives else "") + " (or their first ones), in any order"))
        if spec.form == "text":
            return TEXT.read(estimator, text_rows(columns), spec)
        if fitted is None and spec.form == "dict":  # by position
            if len(columns) > len(fitted_views(spec)):
                raise ValueError(f"X has {len(columns)} columns; the model was fitted on "
                                 f"{len(fitted_views(spec))}: {fitted_views(spec)}")
            columns = dict(zip(fitted_views(spec), columns.values(), strict=False))
        return form_named(spec.form).read(estimator, _table_values(X, columns, kind), spec)

    def read_view(self, X: Any, view: View, name: str, tokenizer: Any) -> ViewData:
        columns = table_columns(X, name)
        if len(columns) != 1:
            raise ValueError(f"{name} for {view.describe()} must be a table of one column; "
                             f"got columns {list(columns)}")
        if isinstance(view.name, str):
            order_columns(columns, [view.name], name)
        (values,) = columns.values()
        return read_view(values, view, name, tokenizer)


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
        _check_length(_rows(tensors), name, minimum=1)
        return TensorViews((tensors,))


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
        return _read_array(X, InputSpec("array", spec.views), single=not pairs)[0]

    def read_view(self, X: Any, view: View, name: str, tokenizer: Any) -> ViewData:
        return ItemViews(_check_map_style(X, name), InputSpec("dataset", (view,)))


class ArrayForm(InputForm):
    name = "array"

    def detect(self, X: Any) -> bool:
        return isinstance(X, np.ndarray | torch.Tensor) and X.ndim >= 3

    def fit(self, estimator: Any, X: Any, *, single: bool, labelled: bool,
            view_split: Any) -> tuple[ViewData, InputSpec, dict]:
        data, spec = _read_array(X, None, single=single)
        return data, spec, NO_FEATURES

    def read(self, estimator: Any, X: Any, spec: InputSpec) -> ViewData:
        if not isinstance(X, np.ndarray | torch.Tensor):
            X = np.asarray(X)
        return _read_array(X, spec, single=not spec.items_paired)[0]

    def view_form(self, view: View) -> InputForm:
        return DICT if view.parts else self

    def read_view(self, X: Any, view: View, name: str, tokenizer: Any) -> ViewData:
        x = _as_tensor(X, name)
        _check_length(len(x), name, minimum=1)
        if tuple(x.shape[1:]) != view.shape:
            raise ValueError(f"{name} for view {view.name!r} must have shape (n, "
                             f"{', '.join(map(str, view.shape))}); got {describe(x)}")
        return TensorViews((_conform(x, _array_view(x, view.name, view, name), name,
                                     lambda row, at: f"{name}[{row}] (value {at} of the row)"),))


class FlatForm(ArrayForm):
    """scikit-learn's 2-D form; what no other form recognises is read as it."""

    name = "flat"

    def detect(self, X: Any) -> bool:
        return True

    def fit(self, estimator: Any, X: Any, *, single: bool, labelled: bool,
            view_split: Any) -> tuple[ViewData, InputSpec, dict]:
        probe = _probe(estimator)  # what validate_data records, not the estimator
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


TEXT, TABLE, DICT, DATASET, ARRAY, FLAT = (TextForm(), TableForm(), DictForm(), DatasetForm(),
                                           ArrayForm(), FlatForm())

#: The forms in the order they are recognised (the last one takes the rest).
FORMS: tuple[InputForm, ...] = (TEXT, TABLE, DICT, DATASET, ARRAY, FLAT)


def spelled_array(X: Any) -> Any:
    """A pandas ``Series`` is the sequence of its values; nested lists or tuples that no
    form reads as such (only the catch-all flat form would) are the array they spell."""
    if is_series(X):
        X = series_values(X)
    if isinstance(X, list | tuple) and not any(form.detect(X) for form in FORMS[:-1]):
        return np.asarray(X)
    return X


def form_named(name: str) -> InputForm:
    """The form a fit of ``InputSpec.form`` ``name`` reads later input with."""
    return next(form for form in FORMS if form.name == name)


def form_of_input(X: Any, single: bool = True) -> InputForm:
    """The first form of :data:`FORMS` that recognises ``X``. An ``(n, 2, d)`` float
    array is scikit-learn's pairs (flat); integers and bytes keep their N-D form."""
    form = next(form for form in FORMS if form.detect(X))
    if form is ARRAY and not single and X.ndim == 3 and not _whole_numbers(X):
        return FLAT
    return form


def read_fit_input(estimator: Any, X: Any, y: Any = None, *, single: bool,
                   view_split: Any = None, labelled: bool = False
                   ) -> tuple[ViewData, InputSpec, dict]:
    """Turn training input of any accepted form into a dataset and its spec.

    Nothing is set on ``estimator``: what scikit-learn records about the input
    (``n_features_in_``, ``feature_names_in_``) and the tokenizer of text are returned
    instead, ``None`` where the input has none, for the estimator to set once its fit
    has succeeded (a refused or failed fit leaves a fitted estimator as it was).

    Parameters
    ----------
    single : bool
        Items are single views (an augmentation makes the pairs, or labels supervise);
        otherwise items are pairs.
    view_split : int or None
        For paired 2-D input: the column where view 1 starts (``None``: half way).
    labelled : bool
        SupCon: a Dataset's items may be single views or two crops ``(x0, x1)``.
    """
    X = spelled_array(X)
    data, spec, features = form_of_input(X, single).fit(
        estimator, X, single=single, labelled=labelled, view_split=view_split)
    _check_length(len(data), "X", minimum=2)
    return data, spec, features


def read_input(estimator: Any, X: Any, spec: InputSpec) -> ViewData:
    """Check input given after ``fit`` (same form, same view shapes) and read it; a table
    of columns reads as the form it made in fit.

    Data already read (a :class:`ViewData`, e.g. the held-out part of the training
    input that the per-epoch scorer embeds) passes through.
    """
    if isinstance(X, ViewData):
        return X
    X = spelled_array(X)
    form = form_of_input(X)
    if not form.container:
        if form is TEXT and spec.form != "text":
            raise ValueError(f"{type(estimator).__name__} was fitted on {spec.form} input, "
                             "not text; got strings")
        form = form_named(spec.form)
    data = form.read(estimator, X, spec)
    _check_length(len(data), "X", minimum=1)
    return data


def read_view(X: Any, view: View, name: str = "X_view", tokenizer: Any = None) -> ViewData:
    """One view's items alone (``transform_view``): an array, tensor, Dataset, a table of
    one column, or a list of strings for a text view (tokenized by ``tokenizer``)."""
    form = form_of_input(X)
    if view.text and not form.container:
        form = TEXT
    return form.view_form(view).read_view(X, view, name, tokenizer)


# --------------------------------------------------------------------------------------
# Recognising the forms
# --------------------------------------------------------------------------------------

def is_dataset(X: Any) -> bool:
    """A torch ``Dataset`` or skorch's ``SliceDataset`` (what ``GridSearchCV`` can split)."""
    from skorch.helper import SliceDataset

    return isinstance(X, Dataset | SliceDataset)


def _whole_numbers(X: np.ndarray | torch.Tensor) -> bool:
    """Integer or byte values: ``(n, 2, L)`` token ids keep their integers (as in the
    dict form) and ``(n, 2, d)`` bytes are images, not scikit-learn's float features."""
    if isinstance(X, torch.Tensor):
        return not X.is_floating_point() and not X.is_complex() and X.dtype != torch.bool
    return X.dtype.kind in "iu"


def form_of(X: Any) -> str:
    """What ``X`` is, for messages."""
    if is_table(X):
        return f"a {type(X).__name__} with columns {list(table_columns(X))}"
    if is_view_dict(X):
        return f"a dict with keys {list(X)}"
    if is_dataset(X):
        return f"a {type(X).__name__} (Dataset)"
    return describe(X)


# --------------------------------------------------------------------------------------
# Tables of columns
# --------------------------------------------------------------------------------------

def fitted_views(spec: InputSpec) -> list:
    """The names of the views and then of the hard-negative columns a fit saw."""
    return [v.name for v in spec.views] + list(spec.negative_names)


def _fitted_columns(estimator: Any, spec: InputSpec) -> list | None:
    """The column names a table given after fit must have, ``None`` for a fit without
    names (scikit-learn records string names only)."""
    if spec.form == "flat":
        names = getattr(estimator, "feature_names_in_", None)
        return None if names is None else list(names)
    names = fitted_views(spec)
    return names if all(isinstance(c, str) for c in names) else None


def _warn_unnamed(estimator: Any, columns: dict) -> None:
    warnings.warn(f"X has column names {list(columns)}, but {type(estimator).__name__} "
                  "was fitted without column names: its columns are read by position",
                  UserWarning, stacklevel=5)


def _table_values(X: Any, columns: dict, kind: str) -> Any:
    """A numeric table as the form that reads it: a DataFrame of scalar columns
    (scikit-learn's features, with their names: ``X`` itself if it is one, else made of
    ``columns``) or a dict of views."""
    if kind == "views":
        return columns
    if X is not None and hasattr(X, "iloc"):
        return X
    try:
        import pandas as pd
    except ImportError as exc:
        raise ValueError("a table of numeric columns other than a DataFrame is read as "
                         "scikit-learn's features with their names, which needs pandas: "
                         "install it, or pass the matrix as an array") from exc
    return pd.DataFrame(columns)


def _probe(estimator: Any) -> Any:
    """A stand-in that ``validate_data`` can record the input on: the estimator's class
    name and tags, none of its state (the estimator itself is set after a fit succeeds).
    It holds the tags, not the estimator: a class is a reference cycle, which would keep
    a fitted model's tensors until Python's next full garbage collection."""
    tags = estimator.__sklearn_tags__()
    probe_class = type(type(estimator).__name__, (BaseEstimator,),
                       {"__sklearn_tags__": lambda self: tags})
    return probe_class()
