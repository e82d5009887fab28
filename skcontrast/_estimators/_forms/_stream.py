"""The stream form: a :class:`~skcontrast.Stream` (or a bare ``IterableDataset`` or
generator function, read as one), read a window at a time (:mod:`.._stream`). Each window
is read by the form of the in-memory input it spells (an array, a dict of columns, rows of
texts, a table of text columns): the fit's spec is that form's, learned from the first
window, so later input may be the same rows in memory, and a stream given after fit is
read window by window against it."""

from __future__ import annotations

from typing import Any

from .._data import InputSpec, View, ViewData
from .._stream import (
    DEFAULT_STREAM_BATCH,
    Stream,
    StreamViews,
    check_stream_fit,
    chunk_input,
    is_stream,
    window_batch_size,
)
from ._form import InputForm, stand_in


def as_stream(X: Any) -> Stream:
    """``X`` as a :class:`Stream` (a bare source with the defaults)."""
    return X if isinstance(X, Stream) else Stream(X)


def first_chunk(stream: Stream, rows: int, least: int = 2) -> Any:
    chunk = next(stream.chunks(rows, seed=0, read=0, least=least), None)
    if chunk is None:
        raise ValueError("X is a stream that gave no row")
    return chunk


class StreamForm(InputForm):
    """The stream form; each window is read by the table of forms, through its readers
    (``read_fit_input``, ``read_input`` and ``read_view`` of :mod:`._forms`)."""

    name = "stream"
    container = True  # its windows are read by the form they spell

    def __init__(self, fit_input: Any, read_input: Any, read_view: Any) -> None:
        self.fit_input, self.read_input, self.read_view_of = fit_input, read_input, read_view

    def detect(self, X: Any) -> bool:
        import inspect

        return is_stream(X) or inspect.isgenerator(X)  # a generator object: refused

    def fit(self, estimator: Any, X: Any, *, single: bool, labelled: bool,
            view_split: Any) -> tuple[ViewData, InputSpec, dict]:
        read_input = self.read_input
        stream = as_stream(X)
        check_stream_fit(estimator)
        batch = window_batch_size(estimator)
        rows = stream.window * batch
        data, spec, features = self.fit_input(
            estimator, chunk_input(first_chunk(stream, rows, batch)), single=single,
            view_split=view_split, labelled=labelled)
        reader = stand_in(estimator, features)
        return StreamViews(stream, spec, lambda chunk: read_input(reader, chunk, spec), rows,
                           data, batch_size=batch), spec, features

    def read(self, estimator: Any, X: Any, spec: InputSpec) -> ViewData:
        stream = as_stream(X)
        rows = stream.window * window_batch_size(estimator)
        read = lambda chunk: self.read_input(estimator, chunk, spec)  # noqa: E731
        return StreamViews(stream, spec, read, rows, read(chunk_input(first_chunk(stream,
                                                                                   rows))))

    def read_view(self, X: Any, view: View, name: str, tokenizer: Any) -> ViewData:
        stream = as_stream(X)
        rows = stream.window * DEFAULT_STREAM_BATCH
        read = lambda chunk: self.read_view_of(chunk_input(chunk), view, name,  # noqa: E731
                                               tokenizer)
        return StreamViews(stream, InputSpec("stream", (view,)), read, rows,
                           read(chunk_input(first_chunk(stream, rows))))

