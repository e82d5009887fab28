"""Tables of columns, read by column name wherever the package takes data.

A table is a pandas ``DataFrame``, a Hugging Face ``datasets.Dataset`` (in any format:
Python, NumPy, torch, Arrow, pandas), a list of row dicts (JSON lines) or a dict of text
columns (a dict of arrays is two modalities, not a table). A pandas
``Series`` is not a table but the sequence of its values. Every entry point that takes
data reads a table here, the estimators (``fit``, ``transform``, ``transform_view``)
and the text tools (:class:`~skcontrast.text.HybridRetriever`,
:func:`~skcontrast.text.mine_hard_negatives`) alike, so a table means the same thing
everywhere:

- its columns are read by name, in order (:func:`table_columns`); a text column holds
  one string per row, a numeric column one number per row, a vector column one array
  per row, all of one shape; anything else is refused naming the column and the row;
- after ``fit``, a table is read by the column names the fit saw (scikit-learn's rule
  for an estimator fitted with feature names): a missing, extra or renamed column is
  refused naming it; columns in another order are taken by name, in the fit's order
  (:func:`order_columns`), as a dict of views is read by key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._pixels import is_pil_image, pil_images
from ._validation import describe, is_text

#: column names that hold labels, which go in ``y``, never among the views
LABEL_COLUMNS = ("label", "labels")


def _module(X: Any) -> str:
    return type(X).__module__.split(".")[0]


def is_series(X: Any) -> bool:
    """A pandas ``Series`` (recognised without importing pandas)."""
    return _module(X) == "pandas" and hasattr(X, "to_numpy") and not hasattr(X, "columns")


def is_row_dicts(X: Any) -> bool:
    """A list or tuple of row dicts ``[{column: value, ...}, ...]`` (JSON lines)."""
    return isinstance(X, list | tuple) and len(X) > 0 and all(
        isinstance(row, Mapping) for row in X)


def is_text_dict(X: Any) -> bool:
    """A dict of text columns ``{name: list of strings}`` (a dict of arrays is two
    modalities, read by the estimators' dict form)."""
    return isinstance(X, dict) and len(X) > 0 and all(
        isinstance(v, list | tuple | np.ndarray) and len(v) > 0 and
        isinstance(v[0], str | np.str_) for v in X.values())


def is_table(X: Any) -> bool:
    """A pandas ``DataFrame``, a Hugging Face ``datasets.Dataset`` or
    ``IterableDataset`` (recognised without importing either), a list of row dicts, or
    a dict of text columns."""
    module = _module(X)
    return (module == "pandas" and hasattr(X, "columns") and hasattr(X, "iloc")) or (
        module == "datasets" and hasattr(X, "column_names") and hasattr(X, "features")) \
        or is_row_dicts(X) or is_text_dict(X)


def series_values(X: Any) -> Any:
    """A ``Series`` as the sequence it holds: a list of its values (strings, rows of
    strings, arrays), or an array of its numbers."""
    values = X.to_numpy()
    return values if values.dtype.kind in "biuf" else list(values)


def column_names(X: Any) -> list:
    """The names of a table's columns, in order."""
    if hasattr(X, "iloc"):
        return list(X.columns)
    if is_row_dicts(X):
        return list(X[0])
    if isinstance(X, dict):
        return list(X)
    return list(X.column_names)


def table_columns(X: Any, name: str = "X") -> dict[Any, Any]:
    """The columns of a table, in order, by name: each a list (strings, or arrays of
    the rows) or a 1-D or N-D NumPy array (numbers).

    Refused, naming what to do: a streamed ``datasets.IterableDataset`` (read as a
    stream, not as a table), repeated column names, a label column (labels go in ``y``), rows
    of a list of row dicts that lack or add a column, and a column whose values are
    neither all strings, all numbers, nor arrays of one shape (naming the column and
    the row).
    """
    if _module(X) == "datasets" and type(X).__name__ == "IterableDataset":
        raise ValueError(f"{name} is a streamed datasets.IterableDataset, whose rows have "
                         "no index: give it as X to fit or transform, which read it a "
                         "window at a time (skcontrast.Stream), or load it without "
                         "streaming=True")
    names = column_names(X)
    if len(set(names)) != len(names):
        raise ValueError(f"{name} has repeated column names {names}")
    label = [c for c in names if str(c).lower() in LABEL_COLUMNS]
    if label:
        raise ValueError(f"{name} has a label column {label[0]!r}: pass the labels (or "
                         "groups) as y, and X with the views' columns only")
    if not names:
        raise ValueError(f"{name} has no columns")
    if hasattr(X, "iloc"):
        raw = {c: X[c].to_numpy() for c in names}
    elif is_row_dicts(X):
        raw = _row_dict_columns(X, names, name)
    elif isinstance(X, dict):
        raw = X
    else:
        raw = _dataset_columns(X, names)
    return {c: _column(values, c, name) for c, values in raw.items()}


def _row_dict_columns(rows: Sequence[Mapping], names: list, name: str) -> dict[Any, list]:
    keys = set(names)
    for i, row in enumerate(rows):
        if set(row) != keys:
            lacks = [c for c in names if c not in row]
            adds = [c for c in row if c not in keys]
            raise ValueError(f"{name}[{i}] has the columns {list(row)}, {name}[0] has "
                             f"{names}" + (f" (it lacks {lacks})" if lacks else "")
                             + (f" (it adds {adds})" if adds else "")
                             + ": every row dict holds the same columns")
    return {c: [row[c] for row in rows] for c in names}


def _dataset_columns(X: Any, names: list) -> dict[Any, Any]:
    """A ``datasets.Dataset``'s columns whatever its format: text (and anything not
    numeric) as Python values, numbers as NumPy arrays (equal-length lists of numbers
    stack into one array; the Arrow table is read once, not row by row in Python)."""
    plain, numeric = X.with_format(None), X.with_format("numpy")
    columns = {}
    for c in names:
        if _numeric_feature(X.features[c]):
            values = numeric[c][:]
            columns[c] = list(values) if isinstance(values, np.ndarray) and \
                values.dtype == object else values
        else:
            columns[c] = plain[c][:]
    return columns


def _numeric_feature(feature: Any) -> bool:
    """Whether a ``datasets`` feature holds numbers (a number, or lists or arrays of
    them, at any depth); strings, images and dicts are not."""
    dtype = getattr(feature, "dtype", None)
    if isinstance(dtype, str) and type(feature).__name__ != "ClassLabel":
        return dtype.startswith(("int", "uint", "float", "bool"))
    inner = getattr(feature, "feature", None)
    return inner is not None and _numeric_feature(inner)


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def _what(value: Any) -> str:
    return "a missing value" if _is_missing(value) else describe(value)


def _column(values: Any, column: Any, name: str) -> Any:
    """One column checked: a list of strings, a numeric array (scalars), or an array
    stacking the rows' arrays when they have one shape; else an error naming the
    column and the row."""
    where = f"column {column!r}" + ("" if name == "X" else f" of {name}")
    if isinstance(values, np.ndarray) and values.dtype.kind in "biuf":
        return values
    if isinstance(values, np.ndarray) and values.dtype.kind in "US":
        return values.tolist()
    values = list(values)
    if not values:
        return np.zeros(0)
    if all(is_pil_image(v) for v in values):  # an image column: the one rule of PIL images
        return pil_images(values, where)
    strings = [isinstance(v, str) for v in values]
    if any(strings):
        if not all(strings):
            bad = strings.index(False)
            raise ValueError(f"{where} mixes strings with "
                             f"{_what(values[bad])} (row {bad}); a text column holds one "
                             "string per row")
        return [str(v) for v in values]
    if all(isinstance(v, int | float | np.number) and not isinstance(v, bool)
           and not _is_missing(v) for v in values):
        return np.asarray(values)
    scalar = next((i for i, v in enumerate(values) if _is_missing(v) or np.ndim(v) == 0),
                  None)
    if scalar is not None:
        raise ValueError(f"{where} holds {_what(values[scalar])} at row "
                         f"{scalar}: a column is text (strings), numbers, or one array per "
                         "row")
    rows = [np.asarray(v.cpu() if hasattr(v, "cpu") else v) for v in values]
    shape = rows[0].shape
    for i, row in enumerate(rows):
        if row.shape != shape:
            raise ValueError(f"{where} holds arrays of shape {shape} "
                             f"(row 0) and {row.shape} (row {i}): a vector column holds "
                             "one array per row, all of one shape (pad or truncate them "
                             "first)")
        if row.dtype.kind not in "biuf":
            raise ValueError(f"{where} holds {describe(row)} at row "
                             f"{i}: a vector column holds numbers")
    return np.stack(rows)


def column_kind(values: Any) -> str:
    """``'text'`` (a list of strings), ``'scalar'`` (one number per row) or ``'rows'``
    (one array per row) of a column read by :func:`table_columns`."""
    if isinstance(values, list):
        return "text"
    return "scalar" if values.ndim == 1 else "rows"


def table_kind(columns: dict) -> str:
    """``'text'``, ``'features'`` (scalar columns) or ``'views'`` (columns of per-row
    arrays); a table mixing text with numbers is refused naming the column."""
    kinds = {c: column_kind(v) for c, v in columns.items()}
    first = next(iter(columns))
    for column, kind in kinds.items():
        if (kind == "text") != (kinds[first] == "text"):
            raise ValueError(f"column {column!r} is {'text' if kind == 'text' else 'numeric'}"
                             f" but column {first!r} is "
                             f"{'text' if kinds[first] == 'text' else 'numeric'}: a table "
                             "is all text columns (views by name) or all numeric")
    if kinds[first] == "text":
        return "text"
    return "views" if any(k == "rows" for k in kinds.values()) else "features"


def text_rows(columns: dict) -> list:
    """A table of text columns as the text form's rows: a list of strings for one
    column, of tuples of strings (anchor, positive, negatives...) for several."""
    if len(columns) == 1:
        return list(next(iter(columns.values())))
    return list(zip(*columns.values(), strict=True))


def order_columns(columns: dict, fitted: Sequence, name: str = "X", *,
                  leading: bool = False, expected: str | None = None) -> dict:
    """The ``columns`` of a table given after fit, in the order of ``fitted`` (the
    names the fit saw), whatever their order here; a missing, unseen or renamed column
    is refused, naming it.

    ``leading=True``: the first ones of ``fitted`` are enough (the views without the
    hard-negative columns that only training reads, or view 0 alone): a column
    given needs every column before it. ``expected`` words what is expected (default:
    the fitted columns)."""
    got, fitted = list(columns), list(fitted)
    unexpected = [c for c in got if c not in fitted]
    known = [fitted.index(c) for c in got if c in fitted]
    needed = fitted[:max(known) + 1] if leading and known else fitted
    missing = [c for c in needed if c not in got]
    if not unexpected and not missing:
        return {c: columns[c] for c in needed}
    problems = []
    if unexpected:
        problems.append(f"columns not seen in fit {unexpected}")
    if missing:
        problems.append(f"missing {missing}")
    if expected is None:
        expected = f"the columns seen in fit, {fitted}" + (
            " (or their first ones)" if leading else "")
    raise ValueError(f"{name} must have {expected}; got {got}: {' and '.join(problems)}. "
                     "A table is read by column name (in any order), so a column needs the "
                     "name it had in fit")


def text_table(X: Any, name: str = "X") -> np.ndarray:
    """``X`` as an object array of strings of shape ``(n, c)``: one column for a list of
    strings (or a ``Series`` of them), ``c`` for rows of ``c`` strings or a table of
    ``c`` text columns (read by :func:`table_columns`, in their order). Anything else,
    an empty string or rows of unequal length is an error naming the row."""
    if isinstance(X, str):
        raise ValueError(f"{name} is a single string; pass a list of strings")
    if is_series(X):
        X = series_values(X)
    if is_table(X):
        columns = table_columns(X, name)
        if table_kind(columns) != "text":
            raise ValueError(f"{name} must be text: a table of text columns; got numeric "
                             f"columns {list(columns)}")
        X = text_rows(columns)
    rows = list(X)
    single = all(isinstance(r, str) for r in rows)
    if single:
        table = np.empty((len(rows), 1), dtype=object)
        table[:, 0] = rows
    else:
        widths = set()
        for i, row in enumerate(rows):
            if isinstance(row, str) or not isinstance(row, Sequence | np.ndarray):
                raise ValueError(f"{name}[{i}] is {describe(row)}; a text {name} is a list of "
                                 "strings or of rows of strings (pairs), not a mix")
            widths.add(len(row))
            if len(widths) > 1:
                raise ValueError(f"the rows of {name} must hold equally many texts; "
                                 f"{name}[{i}] has {len(row)}, {name}[0] has {len(rows[0])}")
        table = np.empty((len(rows), widths.pop() if rows else 0), dtype=object)
        for i, row in enumerate(rows):
            table[i] = list(row)
    for (i, j), value in np.ndenumerate(table):
        where = f"{name}[{i}]" if table.shape[1] == 1 and single else f"{name}[{i}, {j}]"
        if not isinstance(value, str):
            raise ValueError(f"{where} is {describe(value)}; every entry of a text {name} "
                             "must be a string")
        if not value.strip():
            raise ValueError(f"{where} is an empty string ({value!r}); every text needs "
                             "some content")
    return table


def text_column(X: Any, name: str = "X") -> list[str]:
    """Single texts in any form (a list or array of strings, a ``Series``, a table of
    one text column), as a list; rows of several texts, or a table of several columns,
    are refused naming their width (one text per item is expected)."""
    table = text_table(X, name)
    if table.shape[1] != 1:
        columns = f"columns {column_names(X)}" if is_table(X) else \
            f"rows of {table.shape[1]} texts"
        raise ValueError(f"{name} must be single texts (a list of strings, or a table of "
                         f"one text column); got {columns}")
    return list(table[:, 0])


def holds_text(X: Any) -> bool:
    """Whether ``X`` is text: strings, rows of them, a ``Series`` of them, or a table
    whose first column holds strings (its other columns are checked when it is read)."""
    if is_series(X):
        X = series_values(X)
    if is_table(X) and not (_module(X) == "datasets" and type(X).__name__ ==
                            "IterableDataset"):
        first = column_names(X)[:1]
        if not first:
            return False
        if _module(X) == "datasets":
            return getattr(X.features[first[0]], "dtype", None) in ("string", "large_string")
        column = X[first[0]] if not is_row_dicts(X) else [row[first[0]] for row in X[:1]]
        values = column.to_numpy() if hasattr(column, "to_numpy") else column
        return len(values) > 0 and isinstance(values[0], str)
    return is_text(X)
