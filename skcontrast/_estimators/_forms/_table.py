"""The table form: a table of columns, read as the form its columns spell (text, flat
features, or a dict of views); see :class:`TableForm`."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from ..._tables import (
    column_kind,
    is_table,
    order_columns,
    table_columns,
    table_kind,
    text_rows,
)
from .._checks import check_length
from .._columns import ArrowColumns, columns_of, numeric_list_columns, string_columns
from .._data import InputSpec, View, ViewData
from .._spec import array_view
from ._array import ARRAY, read_array
from ._dict import DICT
from ._flat import FLAT
from ._form import NO_FEATURES, InputForm
from ._image import IMAGE, read_images
from ._text import TEXT, resolve_tokenizer, text_spec, token_reader, vocabulary_of


class TableForm(InputForm):
    """A table of columns (:mod:`skcontrast._tables`): a pandas ``DataFrame``, a Hugging
    Face ``datasets.Dataset`` in any format, or a list of row dicts, read by column name.

    Text columns (every value a string) are text views, by name: the first two the views
    (one for single views), further ones hard-negative columns, as in the dict form.
    Numeric columns are scikit-learn's features (``feature_names_in_``), and columns of
    per-row arrays are views (the first two) and hard-negative columns, as in the dict
    form; a table of one column of images (a ``datasets`` ``Image`` column, PIL images,
    or per-row arrays that are images by the rule of :mod:`skcontrast.images`) is single
    images, and one of other arrays single views (augmented, or labelled), named after
    the column. A ``datasets.Dataset`` of array columns is read by the rows each batch
    needs (:class:`~.._columns.ArrowColumns`), never whole. A table mixing text and
    numeric columns, or a column of missing, mixed or ragged values, is refused naming
    the column; so is a label column (pass the labels
    as ``y``). After ``fit`` a table is read by the column names seen in fit, in any
    order (:func:`~skcontrast._tables.order_columns`; the views' columns without the
    hard-negative ones, or the first view's alone, for ``transform``); a missing, unseen
    or renamed column is refused naming it. A model fitted without column names (lists,
    arrays, a table whose names are not strings) reads a table by position, with
    scikit-learn's warning.
    """

    name = "table"
    container = True

    def detect(self, X: Any) -> bool:
        return is_table(X)

    def fit(self, estimator: Any, X: Any, *, single: bool, labelled: bool,
            view_split: Any) -> tuple[ViewData, InputSpec, dict]:
        if numeric_list_columns(X):  # read by the rows a batch needs, never whole
            return (*_arrow_views(estimator, X, None, single=single), NO_FEATURES)
        if string_columns(X):  # texts too: tokenized a batch at a time
            tokenizer = resolve_tokenizer(getattr(estimator, "tokenizer", None))
            data, spec = _arrow_texts(estimator, tokenizer, X, None, single=single)
            return data, spec, {**NO_FEATURES, "tokenizer_": tokenizer}
        columns = table_columns(X)
        kind = table_kind(columns)
        if kind == "text":
            if single and len(columns) != 1:
                raise ValueError(f"{type(estimator).__name__} takes single texts: a table "
                                 f"of one text column; got columns {list(columns)}")
            return TEXT.fit(estimator, text_rows(columns), single=single, labelled=labelled,
                            view_split=view_split, names=list(columns))
        images = _image_column(columns, kind)
        if images is not None:
            ((column, values),) = images.items()
            data, spec = read_images(values, None, column=column)
            return data, spec, NO_FEATURES
        if kind == "views" and single:
            return (*_single_column(estimator, columns, None), NO_FEATURES)
        form = FLAT if kind == "features" else DICT
        return form.fit(estimator, _table_values(X, columns, kind), single=single,
                        labelled=labelled, view_split=view_split)

    def read(self, estimator: Any, X: Any, spec: InputSpec) -> ViewData:
        single = spec.form == "array" and not spec.items_paired
        if (spec.form == "dict" or single) and numeric_list_columns(X):
            return _arrow_views(estimator, X, spec, single=single)[0]
        if spec.form == "text" and string_columns(X):
            return _arrow_texts(estimator, estimator.tokenizer_, X, spec, single=True)[0]
        columns = table_columns(X)
        if single:  # a table of one column of arrays, as fit read it
            return _single_column(estimator, _in_fitted_order(estimator, spec, columns),
                                  spec)[0]
        kind = table_kind(columns)
        if spec.form == "image":
            if len(columns) != 1:
                raise ValueError(f"{type(estimator).__name__} was fitted on images; got a "
                                 f"table of columns {list(columns)}: pass one image column")
            columns = _in_fitted_order(estimator, spec, columns)
            return IMAGE.read(estimator, next(iter(columns.values())), spec)
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
            columns = order_columns(columns, fitted, leading=True,
                                    expected=_leading_columns(spec, fitted))
        if spec.form == "text":
            return TEXT.read(estimator, text_rows(columns), spec)
        if fitted is None and spec.form == "dict":  # by position
            if len(columns) > len(fitted_views(spec)):
                raise ValueError(f"X has {len(columns)} columns; the model was fitted on "
                                 f"{len(fitted_views(spec))}: {fitted_views(spec)}")
            columns = dict(zip(fitted_views(spec), columns.values(), strict=False))
        form = FLAT if spec.form == "flat" else DICT
        return form.read(estimator, _table_values(X, columns, kind), spec)

    def read_view(self, X: Any, view: View, name: str, tokenizer: Any) -> ViewData:
        if not view.text and numeric_list_columns(X):  # by batch, as fit reads them
            return _arrow_view(X, view, name)
        if view.text and string_columns(X):
            return _arrow_text_view(X, view, name, tokenizer)
        columns = table_columns(X, name)
        if len(columns) != 1:
            raise ValueError(f"{name} for {view.describe()} must be a table of one column; "
                             f"got columns {list(columns)}")
        if isinstance(view.name, str):
            order_columns(columns, [view.name], name)
        (values,) = columns.values()  # strings (a list) or numbers (an array)
        form = TEXT if view.text or column_kind(values) == "text" else ARRAY
        return form.view_form(view).read_view(values, view, name, tokenizer)


TABLE = TableForm()


def _arrow_texts(estimator: Any, tokenizer: Any, X: Any, spec: InputSpec | None, *,
                 single: bool) -> tuple[ViewData, InputSpec]:
    """A ``datasets.Dataset`` of text columns as the text form reads a table of them
    (the first two columns the views, further ones hard-negative columns; single texts
    from one column; after fit, the columns by name, in any order), read and tokenized a
    batch at a time (:class:`~.._columns.ArrowColumns`): every text is checked in one
    pass, a chunk at a time."""
    names = list(X.column_names)
    if spec is None:
        if single and len(names) != 1:
            raise ValueError(f"{type(estimator).__name__} takes single texts: a table of one "
                             f"text column; got columns {names}")
        if not single and len(names) < 2:
            raise ValueError("X is a table of one text column; contrastive training takes "
                             "pairs of texts (two columns: an anchor and its positive)")
    else:
        fitted = _fitted_columns(estimator, spec)
        if fitted is None:  # by position, as the text form reads rows of texts
            _warn_unnamed(estimator, dict.fromkeys(names))
            if len(names) > len(spec.views) and \
                    len(names) != len(spec.views) + spec.negatives:
                raise ValueError(f"X has rows of {len(names)} texts; the model was fitted "
                                 f"on {len(spec.views)} per item")
            names = names[:len(spec.views)]
        else:
            ordered = order_columns(dict.fromkeys(names), fitted, leading=True,
                                    expected=_leading_columns(spec, fitted))
            names = [c for c in fitted[:len(spec.views)] if c in ordered]
    columns: list[tuple[str, ...] | None] = [(c,) for c in names[:2]]
    if len(names) > 2:
        columns.append(tuple(names[2:]))
    data = ArrowColumns(X, tuple(columns), names=tuple(names[:2]),
                        tokenize=token_reader(tokenizer, spec))
    check_length(len(data), "X", minimum=1 if spec is not None else 2)
    length = data.check()
    return data, spec if spec is not None else text_spec(
        data.read(np.arange(1)), names, vocabulary_of(tokenizer), length=length)


def _arrow_text_view(X: Any, view: View, name: str, tokenizer: Any) -> ViewData:
    """One text view of a ``datasets.Dataset`` of one text column, by batch."""
    column = _view_column(X, view, name)
    data = ArrowColumns(X, ((column,),), tokenize=token_reader(
        tokenizer, InputSpec("text", (view,))))
    check_length(len(data), name, minimum=1)
    data.check()
    return data


def _arrow_views(estimator: Any, X: Any, spec: InputSpec | None, single: bool = False
                 ) -> tuple[ViewData, InputSpec]:
    """A ``datasets.Dataset`` of numeric array columns as the dict form reads its columns
    (two views, then hard-negative columns; after ``fit``, the views' columns by name,
    in any order, the hard-negative ones left out), or, ``single``, as the array form
    reads single views (one column), read by batch (:class:`~.._columns.ArrowColumns`);
    its values are checked in one pass, a chunk at a time."""
    names = list(X.column_names)
    if single:  # one view: a table of one column of arrays
        if spec is None and len(names) != 1:
            raise ValueError(f"{type(estimator).__name__} takes single views: a table of "
                             f"one column of arrays; got columns {names}")
        if spec is not None:
            names = list(_in_fitted_order(estimator, spec, dict.fromkeys(names)))
        data = columns_of(X, names[:1])
    elif spec is None:
        if len(names) < 2:
            raise ValueError(f"a table of array columns holds two views, then optionally "
                             f"hard-negative columns of the second view's form; got the "
                             f"columns {names}")
        data = columns_of(X, names)
    else:
        fitted = fitted_views(spec)
        ordered = order_columns(dict.fromkeys(names), fitted, leading=True,
                                expected=_leading_columns(spec, fitted))
        assert fitted[0] in ordered  # the leading columns: the first view's at least
        data = columns_of(X, fitted[:len(spec.views)])
    check_length(len(data), "X", minimum=1 if spec is not None else 2)
    first = data.read(np.arange(1))
    views: list[View] = []
    for i, (column, tensor) in enumerate(zip(data.columns, first, strict=True)):
        expected = None if spec is None or i >= len(spec.views) else spec.views[i]
        if column is None or tensor is None:  # a view absent (after fit only)
            assert expected is not None
            views.append(expected)
        elif i >= 2:  # the hard-negative columns: items of the second view's form
            for j, name in enumerate(column):
                array_view(tensor[:, j], name, views[1], f"column {name!r} (a hard-negative "
                           f"column: items like column {names[1]!r})")
        else:
            views.append(array_view(tensor, column[0], expected, f"column {column[0]!r}"))
    data.check()
    if spec is None and single:
        spec = InputSpec("array", tuple(views))
    elif spec is None:
        spec = InputSpec("dict", tuple(views), items_paired=True, negatives=len(names) - 2,
                         negative_names=tuple(names[2:]))
    return data, spec


def _single_column(estimator: Any, columns: dict, spec: InputSpec | None
                   ) -> tuple[ViewData, InputSpec]:
    """A table of one column of arrays as single views (augmented, or labelled), the
    view named after the column, as the array form reads an array of them."""
    if len(columns) != 1:
        raise ValueError(f"{type(estimator).__name__} takes single views: a table of one "
                         f"column of arrays; got columns {list(columns)}")
    ((column, values),) = columns.items()
    data, read = read_array(values, spec, single=True)
    return data, read if spec is not None else InputSpec(
        "array", (dataclasses.replace(read.views[0], name=column),))


def _view_column(X: Any, view: View, name: str) -> str:
    """The one column of a ``datasets.Dataset`` given as ``name``, the items of
    ``view`` (named as the view, when the fit named it)."""
    names = list(X.column_names)
    if len(names) != 1:
        raise ValueError(f"{name} for {view.describe()} must be a table of one column; "
                         f"got columns {names}")
    if isinstance(view.name, str):
        order_columns(dict.fromkeys(names), [view.name], name)
    return names[0]


def _arrow_view(X: Any, view: View, name: str) -> ViewData:
    """A one-column ``datasets.Dataset`` of arrays as the items of ``view``, read by
    batch (:class:`~.._columns.ArrowColumns`), as ``transform_view`` takes it."""
    column = _view_column(X, view, name)
    data = columns_of(X, [column])
    check_length(len(data), name, minimum=1)
    (first,) = data.read(np.arange(1))
    assert first is not None
    array_view(first, column, view, f"column {column!r} of {name}")
    data.check()
    return data


def _in_fitted_order(estimator: Any, spec: InputSpec, columns: dict) -> dict:
    """A table's ``columns`` by the names the fit saw (a fit without names: as they
    are, with scikit-learn's warning)."""
    fitted = _fitted_columns(estimator, spec)
    if fitted is None:
        _warn_unnamed(estimator, columns)
        return columns
    return order_columns(columns, fitted)


def _leading_columns(spec: InputSpec, fitted: list) -> str:
    """What a table of views after fit must hold: the views' columns, then optionally
    the hard-negative ones, in any order."""
    negatives = list(spec.negative_names)
    return (f"the {'text' if spec.form == 'text' else 'view'} columns seen in fit, "
            f"{fitted[:len(spec.views)]}"
            + (f", then optionally the hard-negative columns {negatives}" if negatives
               else "") + " (or their first ones), in any order")


def fitted_views(spec: InputSpec) -> list:
    """The names of the views and then of the hard-negative columns a fit saw."""
    return [v.name for v in spec.views] + list(spec.negative_names)


def _fitted_columns(estimator: Any, spec: InputSpec) -> list | None:
    """The column names a table given after fit must have, ``None`` for a fit without
    names (scikit-learn records string names only)."""
    if spec.form == "flat":
        names = getattr(estimator, "feature_names_in_", None)
        return None if names is None else list(names)
    names = fitted_views(spec)  # the views (an image column: its one view) by name
    return names if all(isinstance(c, str) for c in names) else None


def _image_column(columns: dict, kind: str) -> dict | None:
    """The table (its one column) when it holds single images, else ``None``."""
    if kind != "views" or len(columns) != 1:
        return None
    values = next(iter(columns.values()))
    return columns if IMAGE.detect(values) else None


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

