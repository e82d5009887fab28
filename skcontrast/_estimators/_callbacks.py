"""What every fit of :class:`~._net.SelectorNet` adds to skorch's default callbacks
(:class:`FitStreams`: the fit's state and each epoch's random streams; :class:`PrintLog`:
the epoch table without colour codes off a terminal), and the state a fit holds while it
runs (:class:`FitState`)."""

from __future__ import annotations

import re
import sys
from typing import Any

import skorch.callbacks

from ._step import (
    seed_torch,
    stream_seed,
)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")



class PrintLog(skorch.callbacks.PrintLog):
    """skorch's epoch table, with its colour codes only when output goes to a terminal
    (a log file or a notebook cell would show them as ``[35m`` garbage)."""

    def format_row(self, row: Any, key: str, color: str) -> Any:
        text = super().format_row(row, key, color)
        if isinstance(text, str) and not sys.stdout.isatty():
            return _ANSI.sub("", text)
        return text



class FitStreams(skorch.callbacks.Callback):
    """What a fit sets up once and each epoch: the per-fit state of the net when
    training begins (the float16 scaler, the batch-norm warning of gradient caching),
    and each epoch's random numbers (dropout, augmentations, the selection pass) drawn
    from streams seeded by ``(seed, epoch)``: torch's generators and the
    augmentation's own. So an epoch is the same whether the fit runs on or stops and
    continues (a warm start, a saved and loaded model, a pickle): 2 + 2 epochs are 4,
    on any device."""

    def on_train_begin(self, net: Any, X: Any = None, y: Any = None, **kwargs: Any) -> None:
        net.start_fit(X)

    def on_epoch_begin(self, net: Any, **kwargs: Any) -> None:
        epoch = len(net.history) - 1  # skorch has opened this epoch's row
        seed_torch(stream_seed(net.plan.seed, 5, epoch))
        if net.plan.augmentation is not None:
            net.plan.augmentation.seed(net.compute_device, stream_seed(net.plan.seed, 2, epoch))
        memory = net.memory_state
        if memory is not None:  # e.g. SogCLR's schedule of gamma counts epochs
            memory.set_epoch(epoch)

    def on_train_end(self, net: Any, X: Any = None, y: Any = None, **kwargs: Any) -> None:
        net.end_fit()



class FitState:
    """What one fit of the net holds while it runs (dropped when it ends)."""

    def __init__(self, data: Any) -> None:
        self.data = data  # the training rows, which the selection pass embeds
        self.checked_augmentation = False  # whether its first output was checked
        self.modes: Any = None  # the modules' train/eval modes the last walk left
        self.listeners: dict[str, list] = {}  # the callbacks that act on a hook

