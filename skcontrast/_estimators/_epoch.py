"""skorch's epoch loop as :class:`~._net.SelectorNet` runs it (a mixin of the net, in a
module of its own): the batch values read from the device once per epoch, recorded in
the history as skorch records them, the selection's time and the curated rows, and a
diverging fit stopped."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import skorch.callbacks
import torch

from ..exceptions import TrainingDivergedError
from ._data import batch_length


class EpochLoop:
    """The epoch loop of :class:`~._net.SelectorNet` (which it is a part of: it reads
    the net's history, callbacks and selection)."""

    # what it reads of the net (its attributes and methods)
    history: Any
    verbose: Any
    callbacks_: Any
    fit_: Any
    lr: Any
    notify: Callable[..., Any]
    on_batch_begin: Callable[..., Any]
    prepare_selection: Callable[[], float]
    fixed_randomness: Callable[[], Any]
    plain_temperature: Callable[[], str]
    if TYPE_CHECKING:  # the net's property
        @property
        def sampler_(self) -> Any: ...

    def run_single_epoch(self, iterator: Any, training: bool, prefix: str, step_fn: Any,
                         **fit_params: Any) -> None:
        """skorch's epoch loop, reading the batch values from the device once per epoch.

        A training epoch first prepares the selection (:meth:`prepare_selection`) and
        records how long choosing its batches took (``select_time``) and how many it has
        (``n_batches``). With ``verbose``, or a callback acting on ``on_batch_end``, the
        values are recorded per batch, before the callbacks see the batch end, as skorch
        records them (a scheduler stepping per batch on ``train_loss`` reads it there).
        If the epoch is interrupted, the values of the steps already applied are still
        recorded. A non-finite loss stops training (:meth:`check_finite`).

        skorch's own cannot serve: it reads every batch's loss from the device as the
        step ends (``loss.item()``), which stalls a GPU's queue once per step, and it
        records neither the loss's terms nor the selection.
        """
        if iterator is None:
            return
        if not training:
            with self.fixed_randomness():
                self._run_epoch(iterator, training, prefix, step_fn, **fit_params)
            return
        select_time = self.prepare_selection()
        self._run_epoch(iterator, training, prefix, step_fn, **fit_params)
        assert self.sampler_ is not None  # made by get_iterator
        # (a stream's epoch says how long its windows' selections took)
        selected = getattr(iterator, "select_time", self.sampler_.select_time)
        self.history.record("select_time", select_time + selected)
        self.history.record("n_batches", self.history[-1, "train_batch_count"])

    def _run_epoch(self, iterator: Any, training: bool, prefix: str, step_fn: Any,
                   **fit_params: Any) -> None:
        first = len(self.history[-1]["batches"])
        pending = StepValues(len(iterator) if hasattr(iterator, "__len__") else 64)
        sizes: list[int] = []
        kept = KeptRows()  # rows a curating selector kept
        begin, end = (self._listening(hook) for hook in ("on_batch_begin", "on_batch_end"))
        # a callback that acts after each batch reads its values from the history (a
        # scheduler stepping on train_loss, a logger), as skorch records them: then they
        # are read from the device per batch, else once after the epoch
        per_batch = bool(self.verbose) or end
        try:
            for batch in iterator:
                if begin:
                    self.notify("on_batch_begin", batch=batch, training=training)
                else:  # the net's own hook alone (it opens the batch's history row)
                    self.on_batch_begin(self, batch=batch, training=training)
                step = step_fn(batch, **fit_params)
                terms = step["terms"]
                values = torch.stack((step["loss"].detach(), terms.positive.detach(),
                                      terms.entropy.detach()))
                if "kept" in step:  # rows embedded to choose, and the rows that trained
                    kept.add(step["selection_rows"], step["kept"])
                sizes.append(len(step["kept"]) if "kept" in step
                             else batch_length(batch.views))
                if per_batch:
                    self._record_batch(values.tolist(), sizes[-1], prefix,
                                       first + len(sizes) - 1)
                    self.check_finite(prefix, first + len(sizes) - 1)
                else:
                    pending.add(values)  # read from the device once, after the epoch
                if end:
                    self.notify("on_batch_end", batch=batch, training=training, **step)
        finally:
            if pending.count:
                rows = pending.read()
                records = self.history[-1]["batches"]  # skorch's lookup, once per epoch
                for i, row in enumerate(rows):
                    self._record_batch(row, sizes[i], prefix, first + i, records)
            if kept.steps:
                self._record_curation(kept, first)
        self.history.record(prefix + "_batch_count", len(sizes))
        self.check_finite(prefix, first, first + len(sizes))

    def _listening(self, hook: str) -> bool:
        """Whether a callback acts on a per-step ``hook`` (skorch's base methods do
        nothing, and calling every callback's each step costs a small model's step;
        the net's own ``on_batch_end`` does nothing either)."""
        fit = self.fit_
        if fit is None:
            return True
        if hook not in fit.listeners:
            base = getattr(skorch.callbacks.Callback, hook, None)
            fit.listeners[hook] = [cb for _, cb in self.callbacks_
                                   if getattr(type(cb), hook, None) is not base
                                   or hook in vars(cb)]
        return bool(fit.listeners[hook])

    def _record_curation(self, kept: KeptRows, first: int) -> None:
        """Per step of a curating selector: the training rows kept (``'kept'``) and the
        rows embedded to choose them (``'selection_rows'``: with a fresh selection pass,
        the super-batch, once by the learner and once more by a reference model; with a
        cached one, the rows never met before), read from the device once."""
        records = self.history[-1]["batches"]
        rows = kept.read()
        start = 0
        for i, (embedded, count) in enumerate(kept.steps):
            row = records[first + i]
            row["kept"] = rows[start:start + count]
            row["selection_rows"] = embedded
            start += count
        self.history.record("selection_rows", sum(embedded for embedded, _ in kept.steps))

    def _record_batch(self, values: list[float], size: int, prefix: str, position: int,
                      records: list | None = None) -> None:
        row = (self.history[-1]["batches"] if records is None else records)[position]
        row[prefix + "_loss"], row[prefix + "_positive"], row[prefix + "_entropy"] = values
        row[prefix + "_batch_size"] = size

    def check_finite(self, prefix: str, start: int, stop: int | None = None) -> None:
        """Stop training at the first recorded batch loss that is not finite (a held-out
        loss too: the network embeds held-out data as NaN)."""
        batches = self.history[-1]["batches"]
        stop = start + 1 if stop is None else stop
        for position in range(start, stop):
            value = batches[position].get(prefix + "_loss")
            if value is not None and not np.isfinite(value):
                raise TrainingDivergedError(
                    f"training diverged: the {'held-out ' * (prefix != 'train')}loss was "
                    f"{value} at epoch {len(self.history)}, "
                    f"batch {position + 1} of this epoch, so the weights are no longer "
                    f"finite. Lower the learning rate (lr={self.lr}), raise the "
                    f"temperature (temperature={self.plain_temperature()}), keep "
                    "the embeddings normalised (loss__normalize=True), or check that "
                    "the module does not output NaN or inf")


class StepValues:
    """The values of an epoch's steps (loss, positive, entropy), kept where they were
    computed, in one buffer, and read once after the epoch (reading each step's would
    wait for a GPU at every step). One buffer, not a tensor per step: the steps' own
    scalars, allocated among each step's large temporaries and kept to the epoch's end,
    kept the allocator from giving those back (+2.1 GiB over an epoch of 977 steps of
    B=1024; +200 MiB over 3,907 steps as a list of small tensors)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self.buffer: torch.Tensor | None = None
        self.count = 0

    def add(self, values: torch.Tensor) -> None:
        """Keep one step's values (copied into the buffer, which grows if the epoch has
        more steps than its iterator said)."""
        if self.buffer is None:
            self.buffer = values.new_empty((self.capacity, len(values)))
        elif self.count == len(self.buffer):
            grown = self.buffer.new_empty((2 * len(self.buffer), self.buffer.shape[1]))
            grown[:self.count] = self.buffer
            self.buffer = grown
        self.buffer[self.count] = values
        self.count += 1

    def read(self) -> list[list[float]]:
        """Every step's values, read from the device once."""
        assert self.buffer is not None
        return self.buffer[:self.count].tolist()


class KeptRows:
    """The rows a curating selector kept at each step of an epoch, in one buffer where
    they were computed (read once after the epoch, as :class:`StepValues`), and per
    step the rows embedded to choose them and how many were kept. A tensor per step,
    allocated among the step's large temporaries and kept to the epoch's end, kept the
    allocator from giving those back (+550 MiB over 490 JEST steps of 2,048 rows)."""

    def __init__(self) -> None:
        self.buffer: torch.Tensor | None = None
        self.count = 0
        self.steps: list[tuple[int, int]] = []

    def add(self, embedded: int, rows: torch.Tensor) -> None:
        """Keep one step's kept rows (copied into the buffer, grown as needed)."""
        n = len(rows)
        if self.buffer is None:
            self.buffer = rows.new_empty(max(1, 64 * n))
        elif self.count + n > len(self.buffer):
            grown = self.buffer.new_empty(max(2 * len(self.buffer), self.count + n))
            grown[:self.count] = self.buffer[:self.count]
            self.buffer = grown
        self.buffer[self.count:self.count + n] = rows
        self.count += n
        self.steps.append((embedded, n))

    def read(self) -> list[int]:
        """Every step's kept rows, in order, read from the device once."""
        return [] if self.buffer is None else self.buffer[:self.count].tolist()
