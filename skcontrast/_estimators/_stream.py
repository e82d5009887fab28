"""Streams of training rows, read a window at a time.

A stream (a Hugging Face ``datasets.IterableDataset``, a torch ``IterableDataset``, a
function that returns an iterator, or any re-iterable) has no random access and maybe no
end, so no selector can choose among all of its rows. :class:`Stream` reads it in
*windows* of ``window × batch_size`` rows, the chunks in which Cho et al. 2023 (App. D,
https://arxiv.org/abs/2306.01010) run their spectral selector on data too big for one
graph: each window is read into memory as the same rows in memory would be (the same
checks, the same tensors), the fit's selector chooses its batches among the window's rows
(an adaptive one from the network's embeddings of the window, taken when the window is
read), and the window is dropped once its batches have trained. A fit's memory therefore
holds a window, a shuffle buffer and the model, however long the stream.

:class:`StreamViews` is the :class:`~._data.ViewData` a fit reads a stream into: its
length is the rows of one window (what a selection round chooses among, and what the
sampler and the loss module are sized by); :meth:`StreamViews.epoch_batches` is its
training epoch (a pass over the stream, or ``steps_per_epoch`` steps of an endless one).
A batch's ``index`` is the rows' position in the pass, so that what keeps per-row state
over a step (a cross-batch memory's sample ids) tells rows of different windows apart.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import time
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any

import numpy as np

from .._validation import check_int, describe
from ._data import Batch, InputSpec, ViewData

__all__ = ["Stream", "StreamViews", "is_stream", "window_batch_size"]

#: batch size of a stream fit whose estimator and selector set none (the estimators')
DEFAULT_STREAM_BATCH = 64


def _hf_stream(source: Any) -> bool:
    return type(source).__module__.split(".")[0] == "datasets" and \
        type(source).__name__ == "IterableDataset"


def is_stream(X: Any) -> bool:
    """Whether ``X`` is read as a stream: a :class:`Stream`, a torch (or Hugging Face)
    ``IterableDataset``, or a generator function."""
    from torch.utils.data import IterableDataset

    return isinstance(X, Stream | IterableDataset) or _hf_stream(X) or \
        inspect.isgeneratorfunction(X)


class Stream:
    """Training rows read from a stream, a window at a time.

    Pass it to ``fit`` (or ``transform``) where an array would go:
    ``ContrastiveEmbedder().fit(Stream(rows, window=40))``. A bare ``IterableDataset``
    or generator function is read as ``Stream(source)`` with the defaults.

    The fit reads ``window × batch_size`` rows at a time (``batch_size``: the estimator's,
    or its selector's) into memory, as the same rows given as an array would be read,
    and its selector chooses that window's batches among them, as Cho et al. 2023
    (App. D, https://arxiv.org/abs/2306.01010) run their spectral selector on chunks of
    ``k·B`` rows (``k = 40``): an adaptive selector embeds the window, not the set, and
    each window is one of the selector's epochs (its ``random_state`` draws window ``w``
    from ``(seed, w)``). Selectors that need every row at once (``FullBatchSelector``,
    ``ExhaustiveBatchSelector``, ``FixedBatchSelector``, ``PredefinedBatchSelector``)
    are refused. A larger window lets a selector find harder batches among more rows
    and costs a window's memory (and, for an adaptive selector, a pass over it before
    its batches train); see the user guide, "Data bigger than memory".

    Parameters
    ----------
    source : iterable, IterableDataset, or callable
        The rows: a Hugging Face ``datasets.IterableDataset`` (rows of columns, as a
        ``datasets.Dataset``'s), a torch ``IterableDataset``, a function of no arguments
        returning an iterator (called once per pass), or any object iterated anew each
        time (a list). Each row is what one row of an array holds: a pair ``(x0, x1)``
        (then hard negatives, ``(x0, x1, n1, ...)``), a single view ``x`` (with an
        augmentation), texts, or a dict of columns. A one-shot iterator (a generator
        object) is refused: each epoch reads the stream again.
    window : int, default=40
        Batches per window: a window holds ``window × batch_size`` rows.
    shuffle_buffer : int, default=0
        Rows of a shuffle buffer the stream passes through first (each row leaves it
        for a random one of the buffer; seeded per pass); ``0``: the stream's own order.
        A stream sorted by class or source needs one (or its own shuffle, e.g. a
        Hugging Face stream's ``.shuffle(buffer_size=...)``); it costs its rows' memory.
    steps_per_epoch : int or None, default=None
        Training steps per epoch, for an endless stream (or epochs shorter than a pass):
        the next epoch continues where the last one stopped, and a stream that ends is
        read again from its start. ``None``: an epoch is one pass over the stream.

    Notes
    -----
    With an ``accelerate.Accelerator`` of several processes, each process reads its own
    shard of the stream (a Hugging Face stream through
    ``datasets.distributed.split_dataset_by_node``, any other every ``P``-th row from its
    rank on) and its share of each window, ``window × batch_size / P`` rows; the shares
    are gathered (in process order) into the window every process selects from, so
    every process draws the same global batches and trains on its slice of each, as
    with data in memory.
    """

    def __init__(self, source: Any, *, window: int = 40, shuffle_buffer: int = 0,
                 steps_per_epoch: int | None = None) -> None:
        if isinstance(source, Stream):
            raise ValueError("source is already a Stream; pass its source")
        if isinstance(source, Iterator) or inspect.isgenerator(source):
            raise ValueError(f"source is a one-shot iterator ({describe(source)}), which "
                             "can be read once; every epoch reads the stream again: pass "
                             "the function that makes it (a generator function), or an "
                             "IterableDataset")
        if not (callable(source) or isinstance(source, Iterable) or _hf_stream(source)):
            raise ValueError(f"source must be an IterableDataset, an iterable or a function "
                             f"returning an iterator; got {describe(source)}")
        self.source = source
        self.window = check_int(window, "window", minimum=1)
        self.shuffle_buffer = check_int(shuffle_buffer, "shuffle_buffer", minimum=0)
        self.steps_per_epoch = None if steps_per_epoch is None else \
            check_int(steps_per_epoch, "steps_per_epoch", minimum=1)

    def __repr__(self) -> str:
        return (f"Stream({type(self.source).__name__}, window={self.window}, "
                f"shuffle_buffer={self.shuffle_buffer}, "
                f"steps_per_epoch={self.steps_per_epoch})")

    # -- reading ----------------------------------------------------------------------

    def chunks(self, rows: int, seed: int, read: int, least: int = 2,
               shard: tuple[int, int] = (1, 0)) -> Iterator[Any]:
        """Pass number ``read`` over the stream (or over this process's ``shard``,
        ``(processes, rank)``) in chunks of ``rows`` rows: a list of rows, or for a
        Hugging Face stream a pyarrow table (read without a Python value per number). A
        last chunk of fewer than ``least`` rows (a batch) joins the one before. The
        shuffle buffer is seeded by ``(seed, read)``."""
        if not _hf_stream(self.source):
            yield from _lists(self._rows(seed, read, shard), rows, least)
            return
        yield from _tails_joined(self._arrow_chunks(rows, seed, read, shard), least)

    def _rows(self, seed: int, read: int, shard: tuple[int, int]) -> Iterator[Any]:
        source = self.source
        if callable(source) and not isinstance(source, Iterable):
            rows = source()
            if not isinstance(rows, Iterable):
                raise ValueError(f"the stream's function returned {describe(rows)}, not an "
                                 "iterator of rows")
        else:
            set_epoch = getattr(source, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(read)
            rows = source
        processes, rank = shard
        if processes > 1:  # this process's rows: every processes-th, from its rank on
            rows = islice(rows, rank, None, processes)
        if self.shuffle_buffer:
            rows = _shuffled(rows, self.shuffle_buffer, np.random.default_rng([seed, read]))
        return iter(rows)

    def _arrow_chunks(self, rows: int, seed: int, read: int, shard: tuple[int, int]
                      ) -> Iterator[Any]:
        source = self.source
        processes, rank = shard
        if processes > 1:
            from datasets.distributed import split_dataset_by_node

            source = split_dataset_by_node(source, rank=rank, world_size=processes)
        if self.shuffle_buffer:
            source = source.shuffle(seed=seed, buffer_size=self.shuffle_buffer)
        source.set_epoch(read)
        return iter(source.with_format("arrow").iter(batch_size=rows))


def _lists(rows: Iterator[Any], size: int, least: int) -> Iterator[list]:
    """Chunks of ``size`` rows; the last one takes fewer than ``least`` rows left after
    it, which reading ``least`` rows ahead tells."""
    ahead: list = []
    while True:
        chunk = ahead + list(islice(rows, max(0, size - len(ahead))))
        ahead = list(islice(rows, least))
        if len(ahead) < least:
            chunk += ahead
            if chunk:
                yield chunk
            return
        yield chunk


def _tails_joined(chunks: Iterator[Any], least: int) -> Iterator[Any]:
    """``chunks``, each of fewer than ``least`` rows after the first joined to the one
    before (a last window shorter than a batch)."""
    ahead = next(chunks, None)
    for chunk in chunks:
        if len(chunk) < least:
            ahead = _joined(ahead, chunk)
            continue
        yield ahead
        ahead = chunk
    if ahead is not None:
        yield ahead


def _joined(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if isinstance(a, list):
        return a + b
    import pyarrow as pa

    return pa.concat_tables([a, b])


def _shuffled(rows: Iterable[Any], size: int, rng: np.random.Generator) -> Iterator[Any]:
    """``rows`` through a shuffle buffer of ``size`` rows: each new row takes the place of
    a random one of the buffer, which leaves; the rest leave in random order at the end."""
    buffer: list[Any] = []
    for row in rows:
        if len(buffer) < size:
            buffer.append(row)
            continue
        i = int(rng.integers(size))
        buffer[i], row = row, buffer[i]
        yield row
    for i in rng.permutation(len(buffer)):
        yield buffer[i]


def chunk_input(chunk: Any) -> Any:
    """A chunk of a stream as the in-memory input it spells: rows of arrays stacked into
    one array (pairs ``(m, 2 + k, ...)``, single views ``(m, ...)``), rows of texts as
    rows of strings, dict rows as a dict of columns (numbers stacked, texts a table);
    a Hugging Face chunk (a pyarrow table) as its columns (:func:`_table_input`)."""
    if not isinstance(chunk, list):  # a pyarrow table of a Hugging Face stream
        return _table_input(chunk)
    first = chunk[0]
    if isinstance(first, dict):
        names = list(first)
        for i, row in enumerate(chunk):
            if not isinstance(row, dict) or list(row) != names:
                raise ValueError(f"the stream's rows are dicts of the columns {names}; a "
                                 f"row of this window holds {describe(row)} (row {i})")
        columns = {name: [row[name] for row in chunk] for name in names}
        if any(isinstance(column[0], str) for column in columns.values()):
            import pandas as pd

            return pd.DataFrame(columns)
        return {name: _stacked(column, f"column {name!r}") for name, column in columns.items()}
    if isinstance(first, str) or (isinstance(first, tuple | list) and first and
                                  all(isinstance(x, str) for x in first)):
        return np.asarray(chunk, dtype=object) if isinstance(first, str) else \
            [list(row) for row in chunk]
    if isinstance(first, tuple | list):
        width = len(first)
        for i, row in enumerate(chunk):
            if not isinstance(row, tuple | list) or len(row) != width:
                raise ValueError(f"the stream's rows are tuples of {width} views; a row of "
                                 f"this window holds {describe(row)} (row {i})")
        parts = [_stacked([row[j] for row in chunk], f"view {j}") for j in range(width)]
        if all(p.shape[1:] == parts[0].shape[1:] for p in parts):
            return np.stack(parts, axis=1)
        return {str(j): p for j, p in enumerate(parts)}
    return _stacked(chunk, "the rows")


def _table_input(table: Any) -> Any:
    """A Hugging Face stream's chunk (a pyarrow table) as the in-memory input its rows
    spell: columns of per-row arrays as a dict of NumPy arrays (the dict form, as a
    ``datasets.Dataset`` of them is read), read without a Python value per number; other
    columns (texts) as a ``DataFrame``."""
    import pyarrow as pa

    from ._columns import arrow_array

    def arrays(column: Any) -> bool:
        kind = column.type.storage_type if isinstance(column.type, pa.ExtensionType) \
            else column.type
        return pa.types.is_list(kind) or pa.types.is_large_list(kind) or \
            pa.types.is_fixed_size_list(kind)

    if all(arrays(table.column(name)) for name in table.column_names):
        return {name: arrow_array(table.column(name), len(table), f"column {name!r}")
                for name in table.column_names}
    return table.to_pandas()


def _stacked(values: list, what: str) -> np.ndarray:
    import torch

    arrays = [v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
              for v in values]
    shape = arrays[0].shape
    for i, a in enumerate(arrays):
        if a.shape != shape:
            raise ValueError(f"the stream's {what} hold arrays of shape {shape}; row {i} of "
                             f"this window holds one of shape {a.shape}")
    return np.stack(arrays)


def window_batch_size(estimator: Any) -> int:
    """The batch size a stream fit of ``estimator`` trains with (its ``batch_size``, else
    its selector's), which sets the rows of a window."""
    params = estimator.get_params(deep=False)
    if params.get("batch_size") is not None:
        return int(params["batch_size"])
    selector = params.get("selector")
    size = None if selector is None else selector.nominal_batch_size(2**62)
    return DEFAULT_STREAM_BATCH if size is None else int(size)


class StreamViews(ViewData):
    """A stream as a fit's data: windows of ``rows`` rows, each read by ``read`` (a
    chunk's in-memory input to a :class:`~._data.ViewData`, as the same rows in memory
    would be read, against the fit's spec); the last window of a pass takes a tail of
    fewer than ``batch_size`` rows after it (a selector needs a batch's rows).

    Its length is the rows of one window. ``first`` is the first window, read when the
    fit read the stream's spec (a sample for what needs one before training: the output
    width, an encoder's prior, the end of fit's check). ``pick``: one view of each
    window (:meth:`select`)."""

    labels = None
    streamed = True

    def __init__(self, stream: Stream, spec: InputSpec, read: Callable[[Any], ViewData],
                 rows: int, first: ViewData, pick: int | None = None,
                 batch_size: int = 2, replicas: Any = None) -> None:
        self.stream, self.spec, self.read = stream, spec, read
        self.rows, self.first, self.pick, self.batch_size = rows, first, pick, batch_size
        self.replicas = replicas  # the processes reading their shards (None: one)
        self.select_time = 0.0  # seconds its windows' selections took, all epochs

    def __len__(self) -> int:
        return self.rows

    def __getitems__(self, indices: Any) -> Batch:
        raise TypeError("a stream has no random access: its rows are read a window at a "
                        "time (StreamViews.windows)")

    def sample(self) -> ViewData:
        """The first window (view ``pick``)."""
        return self.first if self.pick is None else self.first.select(self.pick)

    def windows(self, seed: int = 0, read: int = 0) -> Iterator[ViewData]:
        """Pass number ``read`` over the stream, a window at a time."""
        for chunk in self._chunks(seed, read):
            window = self.read(chunk_input(chunk))
            yield window if self.pick is None else window.select(self.pick)

    def _chunks(self, seed: int, read: int) -> Iterator[Any]:
        """The windows' rows: read whole here, or with several processes, each
        process's share of every window from its shard, gathered in process order (the
        same window on every process), a last window of fewer than a batch joined to the
        one before."""
        processes, rank = (1, 0) if self.replicas is None else self.replicas.world()
        if processes == 1:
            yield from self.stream.chunks(self.rows, seed, read, self.batch_size)
            return
        own = self.stream.chunks(-(-self.rows // processes), seed, read, 1, (processes, rank))

        def gathered() -> Iterator[Any]:
            while parts := [p for p in self.replicas.gather_objects(next(own, None))
                            if p is not None]:
                yield functools.reduce(_joined, parts)

        yield from _tails_joined(gathered(), self.batch_size)

    def select(self, view: int) -> StreamViews:
        return StreamViews(self.stream, self.spec, self.read, self.rows, self.first, view,
                           self.batch_size, self.replicas)

    def sharded(self, replicas: Any) -> StreamViews:
        """The same stream read by ``replicas``, the processes of a fit
        (:mod:`._replicas`), each its shard."""
        return StreamViews(self.stream, self.spec, self.read, self.rows, self.first,
                           self.pick, self.batch_size, replicas)

    def subset(self, indices: np.ndarray) -> ViewData:
        raise ValueError("a stream cannot hold out a fraction of rows it has not read "
                         "(validation_fraction): pass held-out rows as X_val")

    def labelled(self, labels: Any) -> StreamViews:
        if labels is not None:
            raise ValueError("a stream's rows carry no labels for the loss; "
                             "SupConEmbedder needs y for every row (an array)")
        return self

    def epoch_batches(self, sampler: Any, embed: Callable[..., np.ndarray],
                      batches: Callable[[ViewData, Any], Iterable[Batch]], seed: int
                      ) -> WindowBatches:
        """The training epochs (each pass over the result is the next): the windows of a
        pass over the stream (or the next ``steps_per_epoch`` batches of it), each
        window's batches chosen by a sampler of the fit's selector over its rows
        (:meth:`SelectorSampler.for_rows
        <skcontrast.selectors.SelectorSampler.for_rows>`), which an adaptive selector
        fills with ``embed(indices, window)``; ``batches(window, sampler)`` reads them
        (as an in-memory fit's training iterator does). A pass's shuffle buffer is
        seeded by the fit's ``seed`` and the selector's epoch as the pass begins (a warm
        start continues it)."""
        return WindowBatches(self, lambda: self._pass(sampler, embed, batches, seed),
                             lambda: self._endless(sampler, embed, batches, seed))

    def _endless(self, sampler: Any, embed: Any, batches: Any, seed: int
                 ) -> Iterator[Batch]:
        while True:
            count = 0
            for batch in self._pass(sampler, embed, batches, seed):
                count += 1
                yield batch
            if not count:
                raise ValueError("the stream gave no row to train on")

    def _pass(self, sampler: Any, embed: Any, batches: Any, seed: int) -> Iterator[Batch]:
        start = 0
        for window in self.windows(seed, sampler.epoch):
            began = time.perf_counter()
            rows = sampler.for_rows(len(window), embed=lambda i, w=window: embed(i, w))
            selected = iter(batches(window, rows))
            first = next(selected, None)  # the selection runs as the first batch is read
            self.select_time += time.perf_counter() - began
            if first is not None:
                yield _offset(first, start)
            for batch in selected:
                yield _offset(batch, start)
            start += len(window)


def _offset(batch: Batch, start: int) -> Batch:
    """``batch`` with its rows' index counted from the start of the pass."""
    return Batch(batch.views, batch.labels, batch.index + start)


class WindowBatches:
    """The training epochs of a stream (:meth:`StreamViews.epoch_batches`): each pass
    over it is the next epoch, a pass over the stream (``one_pass()``) or the next
    ``steps_per_epoch`` batches of an endless reading (``endless()``, opened once);
    ``select_time`` is the seconds the last epoch's selections took, which its history
    records."""

    def __init__(self, data: StreamViews, one_pass: Callable[[], Iterator[Batch]],
                 endless: Callable[[], Iterator[Batch]]) -> None:
        self.data, self.one_pass, self.endless = data, one_pass, endless
        self.reading: Iterator[Batch] | None = None
        self.began = data.select_time

    @property
    def select_time(self) -> float:
        return self.data.select_time - self.began

    def __iter__(self) -> Iterator[Batch]:
        self.began = self.data.select_time
        steps = self.data.stream.steps_per_epoch
        if steps is None:
            return self.one_pass()
        if self.reading is None:
            self.reading = self.endless()
        return islice(self.reading, steps)


def check_stream_fit(estimator: Any) -> None:
    """Refuse what a stream fit of ``estimator`` cannot do, naming why, before the
    stream is read: a selector that needs every row at once, a memory or a selection
    pass that keeps state per row across windows, a held-out fraction."""
    params = estimator.get_params(deep=False)
    selector = params.get("selector")
    reason = None if selector is None else selector.stream_refusal()
    if reason is not None:
        raise ValueError(f"{type(selector).__name__} cannot select inside a stream's "
                         f"windows: {reason}. Use a selector that chooses among the rows "
                         "it is given (shuffled, spectral, OSGD, greedy, community, walk, "
                         "tempered, curating)")
    memory = params.get("memory")
    if memory is not None and type(memory).__name__ == "SogCLRMemory":
        raise ValueError("SogCLRMemory keeps a moving average per training row, which needs "
                         "every row by a stable index; a stream's rows have none (an "
                         "endless or shuffled stream never returns a row where it was). "
                         "Use CrossBatchMemory, or a memory-mapped array or Arrow dataset")
    selection_pass = params.get("selection_pass")
    if selection_pass != "fresh" and selector is not None and (
            selector.needs_embeddings or selector.curates):
        raise ValueError(f"selection_pass={selection_pass!r} reuses embeddings of rows seen "
                         "in an earlier epoch; a stream's window holds rows read anew, so "
                         "each window is embedded when it is read: use "
                         "selection_pass='fresh'")
    if params.get("validation_fraction") is not None:
        raise ValueError("validation_fraction holds out a fraction of the training rows, "
                         "which a stream never holds all of: pass held-out rows as X_val")
    if isinstance(params.get("batch_size"), numbers.Integral) and params["batch_size"] < 2:
        raise ValueError(f"batch_size={params['batch_size']}: a stream's window holds "
                         "window × batch_size rows; give a batch size of 2 or more")
