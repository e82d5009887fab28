"""Views read from the columns of a Hugging Face ``datasets.Dataset`` by the rows a batch
needs: an Arrow table on disk (``Dataset.load_from_disk``, memory-mapped) is never read
whole, cast or copied.

:class:`ArrowColumns` is the :class:`~._data.ViewData` of a table of numeric columns,
one array per row (a ``List``/``Sequence`` of numbers of one length, or an
``Array2D``...): the first two columns are the views, further ones hard-negative
columns of the second view's form, as the dict form reads them. A batch's rows are
taken through ``datasets``' own Arrow format (``with_format('arrow')[rows]``, which
also follows a dataset's ``select``/``shuffle`` indices) and flattened to NumPy without
a Python value per row. What must see every row before training (the values' check,
the rows' digest) reads it a chunk at a time (:meth:`ArrowColumns.chunks`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from .._validation import describe
from ._checks import FINITE_CHUNK, as_tensor, check_values
from ._data import Batch, SamplerEpochs, ViewData, _rows_and_batch, index_rows, side_by_side

#: Rows per chunk of a pass over every row (the check of values, the digest).
CHUNK_ROWS = 65536
#: Rows per chunk of a pass over texts (their token ids are padded to the chunk's longest)
TEXT_CHUNK_ROWS = 8192


def arrow_array(column: Any, n: int, where: str, first_row: int | None = None
                ) -> np.ndarray:
    """A pyarrow column of ``n`` rows, each a list of numbers (nested lists: an N-D
    array per row), as one ``(n, *shape)`` NumPy array, read without a Python value per
    row. A missing row or value, or rows of different shapes, are refused naming
    ``where`` and, when the rows are the dataset's ``first_row`` onwards, the row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def row(i: int) -> str:
        return f"row {first_row + i}" if first_row is not None else f"row {i} of a batch"

    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if isinstance(array.type, pa.ExtensionType):  # datasets' Array2D..5D: nested lists
        array = array.storage
    shape: list[int] = []
    depth = 0
    while pa.types.is_list(array.type) or pa.types.is_large_list(array.type) or \
            pa.types.is_fixed_size_list(array.type):
        if array.null_count:
            missing = int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])
            raise ValueError(f"{where} holds a missing value at "
                             f"{row(missing) if depth == 0 else 'a row'}: every row holds "
                             "an array of one shape")
        if pa.types.is_fixed_size_list(array.type):  # one length, by its type
            shape.append(array.type.list_size)
        else:
            lengths = pc.list_value_length(array).to_numpy(zero_copy_only=False)
            if len(lengths) and (lengths != lengths[0]).any():
                bad = int(np.flatnonzero(lengths != lengths[0])[0])
                at = f" ({row(0)}) and ({lengths[bad]},) ({row(bad)})" if depth == 0 else \
                    f" and ({lengths[bad]},) within a row"
                raise ValueError(f"{where} holds arrays of shape ({lengths[0]},){at}: every "
                                 "row holds an array of one shape")
            shape.append(int(lengths[0]) if len(lengths) else 0)
        array = array.flatten()
        depth += 1
    if not (pa.types.is_integer(array.type) or pa.types.is_floating(array.type)):
        raise ValueError(f"{where} must hold numbers; got Arrow type {array.type}")
    if array.null_count:
        raise ValueError(f"{where} holds a missing value (None) within a row; clean or "
                         "impute it first")
    return array.to_numpy(zero_copy_only=False).reshape(n, *shape)


class ArrowColumns(ViewData):
    """Views read by row from the columns of a ``datasets.Dataset``.

    ``columns`` holds, per view, the names of its columns (one, or the hard-negative
    columns, read side by side) or ``None`` (a view absent after fit); ``rows`` maps
    these items to the dataset's rows (``None``: all, in order), so a subset (the
    held-out rows) is a row map, never a copy. With ``tokenize`` (``tokenize(texts,
    where) -> ids``, the text form's tokenisation with the fit's tokenizer) the columns
    hold strings, tokenized a batch at a time: every column of a batch in one call, so
    that they share one padded length, as the text form tokenizes the rows in memory.
    """

    def __init__(self, dataset: Any, columns: tuple[tuple[str, ...] | None, ...],
                 labels: torch.Tensor | None = None, rows: np.ndarray | None = None,
                 names: tuple = (), tokenize: Any = None) -> None:
        self.dataset = dataset.with_format("arrow")
        self.columns = columns
        self.labels = labels
        self.rows = rows
        self.names = names
        self.tokenize = tokenize

    def _like(self, columns: tuple, labels: Any, rows: np.ndarray | None) -> ArrowColumns:
        return ArrowColumns(self.dataset, columns, labels, rows, self.names, self.tokenize)

    def __len__(self) -> int:
        return len(self.dataset) if self.rows is None else len(self.rows)

    def read(self, rows: np.ndarray) -> tuple[torch.Tensor | None, ...]:
        """The views of items ``rows``, in that order, as tensors."""
        rows = np.asarray(rows, dtype=np.int64)
        stored = rows if self.rows is None else self.rows[rows]
        order = np.argsort(stored, kind="stable")
        ordered = stored[order]
        first: int | None = None  # the dataset row of the table's first (consecutive)
        if len(ordered) and ordered[-1] - ordered[0] + 1 == len(ordered) and \
                (np.diff(ordered) == 1).all():  # consecutive: one slice
            first = int(ordered[0])
            table = self.dataset[first:first + len(ordered)]
        else:
            table = self.dataset[ordered.tolist()]
        back = np.empty_like(order)
        back[order] = np.arange(len(order))  # the table's row of each item
        if self.tokenize is not None:
            return self._tokens(table, back, stored)
        out: list[torch.Tensor | None] = []
        for i, columns in enumerate(self.columns):
            if columns is None:
                out.append(None)
                continue
            arrays = [arrow_array(table.column(c), len(ordered), f"column {c!r}",
                                  first)[back] for c in columns]
            # a view's column, or the hard-negative columns side by side (n, k, ...)
            value = arrays[0] if i < 2 else np.stack(arrays, axis=1)
            out.append(as_tensor(value, f"column {columns[0]!r}"))
        return tuple(out)

    def _tokens(self, table: Any, back: np.ndarray, stored: np.ndarray) -> tuple:
        """The text columns of ``table`` (rows ``back`` of it, the dataset's rows
        ``stored``) as token ids: every column tokenized in one call (one padded
        length), the hard-negative columns side by side."""
        import pyarrow as pa
        import pyarrow.compute as pc

        names = [c for columns in self.columns if columns is not None for c in columns]
        take = pa.array(back)
        texts: list = []
        for name in names:
            column = pc.take(table.column(name), take)
            if column.null_count:
                at = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
                raise ValueError(f"column {name!r} holds a missing text at row "
                                 f"{int(stored[at])}")
            texts += column.to_pylist()
        n = len(back)
        ids = self.tokenize(texts, lambda f: f"column {names[f // n]!r}, row "
                                             f"{int(stored[f % n])}")
        parts = iter(index_rows(ids, torch.arange(c * n, (c + 1) * n))
                     for c in range(len(names)))
        out: list[Any] = []
        for i, columns in enumerate(self.columns):
            if columns is None:
                out.append(None)
                continue
            views = [next(parts) for _ in columns]
            out.append(views[0] if i < 2 else side_by_side(views))
        return tuple(out)

    def __getitems__(self, indices: Any) -> Batch:
        return self.gather_rows(*_rows_and_batch(indices))

    def gather_rows(self, rows: np.ndarray, batch: np.ndarray) -> Batch:
        """The items ``rows`` (int64) of the selected ``batch`` (its dataset indices)."""
        views = self.read(rows)
        labels = None if self.labels is None else self.labels[torch.from_numpy(rows)]
        return Batch(views if len(views) > 1 else views[0], labels, torch.from_numpy(batch))

    def batches(self, sampler: Any) -> Iterable[Batch]:
        """The batches ``sampler`` (a :class:`~skcontrast.selectors.SelectorSampler`)
        yields, an epoch per pass, each read one batch ahead in a thread while the step
        before it trains (Arrow and NumPy release the interpreter while they copy)."""
        return ReadAhead(self, sampler)

    def chunks(self, size: int | None = None) -> Iterator[tuple[int, tuple]]:
        """Every item's views, ``size`` items at a time: ``(first item, views)``
        (default: :data:`CHUNK_ROWS`, :data:`TEXT_CHUNK_ROWS` of texts)."""
        size = size or (CHUNK_ROWS if self.tokenize is None else TEXT_CHUNK_ROWS)
        for start in range(0, len(self), size):
            yield start, self.read(np.arange(start, min(start + size, len(self))))

    def select(self, view: int) -> ArrowColumns:
        if self.columns[view] is None:
            raise ValueError(f"X lacks the view {self.names[view]!r}, which is needed here")
        return self._like((self.columns[view],), self.labels, self.rows)

    def subset(self, indices: np.ndarray) -> ArrowColumns:
        index = np.asarray(indices, dtype=np.int64)
        labels = None if self.labels is None else self.labels[torch.from_numpy(index)]
        rows = index if self.rows is None else self.rows[index]
        return self._like(self.columns, labels, rows)

    def labelled(self, labels: torch.Tensor | None) -> ArrowColumns:
        """The same items carrying ``labels``."""
        return self._like(self.columns, labels, self.rows)

    def fingerprint(self) -> str | None:
        """A SHA-256 digest of every item's views, read a chunk at a time."""
        digest = hashlib.sha256(f"{len(self)}{self.columns}".encode())
        for _, views in self.chunks():
            for view in views:
                parts = [] if view is None else sorted(view.items()) \
                    if isinstance(view, dict) else [("", view)]
                for name, tensor in parts:
                    digest.update(f"{name}{tuple(tensor.shape)}{tensor.dtype}".encode())
                    digest.update(tensor.contiguous().view(torch.uint8).numpy().data)
        return digest.hexdigest()

    def check(self) -> int | None:
        """Refuse non-finite values (and float64 values beyond float32's range), naming
        the column and the row, in one pass a chunk at a time; texts: a missing text, or
        one that yields no token (the tokenizer's check, as it reads each chunk), and
        return the token ids' longest padded length (what the texts in memory are padded
        to)."""
        if self.tokenize is not None:
            longest = 0
            for _, views in self.chunks():
                for view in views:
                    if view is not None:
                        ids = next(iter(view.values())) if isinstance(view, dict) else view
                        longest = max(longest, ids.shape[-1])
            return longest
        rows = max(1, min(CHUNK_ROWS, FINITE_CHUNK // max(1, self._width())))
        for start, views in self.chunks(rows):
            for columns, view in zip(self.columns, views, strict=True):
                if columns is None or view is None or not view.is_floating_point():
                    continue
                label = f"column {columns[0]!r}" if len(columns) == 1 else \
                    f"the columns {list(columns)}"

                def where(row: int, at: int, first: int = start, what: str = label) -> str:
                    return f"{what}, row {first + row} (value {at} of the row)"

                check_values(view, label, where)
        return None

    def _width(self) -> int:
        first = self.read(np.arange(min(1, len(self))))
        return sum(int(np.prod(v.shape[1:])) for v in first if v is not None)


class ReadAhead(SamplerEpochs):
    """The batches of :meth:`ArrowColumns.batches`, the next read by one thread while
    the current one trains (in the selector's order: the same batches as read in
    turn)."""

    data: ArrowColumns

    def __iter__(self) -> Iterator[Batch]:
        selections = self.sampler.selections()
        if not selections:
            return
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="skcontrast-read") as pool:
            pending = pool.submit(self.data.gather_rows, *selections[0])
            try:
                for following in [*selections[1:], None]:
                    batch = pending.result()
                    if following is not None:
                        pending = pool.submit(self.data.gather_rows, *following)
                    yield batch
            finally:
                pending.cancel()


def string_columns(X: Any) -> bool:
    """Whether ``X`` is a ``datasets.Dataset`` (not streamed) whose every column holds
    a string per row, by its features (nothing is read)."""
    if type(X).__module__.split(".")[0] != "datasets" or \
            type(X).__name__ != "Dataset" or not X.column_names:
        return False
    return all(type(X.features[c]).__name__ == "Value" and
               str(X.features[c].dtype) in ("string", "large_string") for c in X.column_names)


def numeric_list_columns(X: Any) -> bool:
    """Whether ``X`` is a ``datasets.Dataset`` (not streamed) whose every column holds
    an array of numbers per row, by its features (nothing is read)."""
    if type(X).__module__.split(".")[0] != "datasets" or \
            type(X).__name__ != "Dataset" or not X.column_names:
        return False
    return all(_numeric_lists(X.features[c]) for c in X.column_names)


def _numeric_lists(feature: Any) -> bool:
    """A feature of lists (at any depth) of numbers, or an N-D array type."""
    kind = type(feature).__name__
    if kind in ("Array2D", "Array3D", "Array4D", "Array5D"):
        return str(getattr(feature, "dtype", "")).startswith(("int", "uint", "float"))
    inner = getattr(feature, "feature", None)
    if kind not in ("Sequence", "List", "LargeList") or inner is None:
        return False
    dtype = getattr(inner, "dtype", None)
    if type(inner).__name__ == "Value":
        return isinstance(dtype, str) and dtype.startswith(("int", "uint", "float"))
    return _numeric_lists(inner)


def columns_of(X: Any, names: Sequence[str]) -> ArrowColumns:
    """The views of a ``datasets.Dataset`` from its columns ``names`` (two views, then
    hard-negative columns, read side by side), ``None`` for a view it lacks."""
    present = set(X.column_names)
    columns: list[tuple[str, ...] | None] = [
        (name,) if name in present else None for name in names[:2]]
    if len(names) > 2:
        columns.append(tuple(names[2:]))
    if all(c is None for c in columns):
        raise ValueError(f"X holds none of the columns {list(names)}; got "
                         f"{describe(X.column_names)}")
    return ArrowColumns(X, tuple(columns), names=tuple(names[:2]))
