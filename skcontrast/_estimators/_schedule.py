"""Learning-rate schedules stepped per batch.
"""

from __future__ import annotations

import math
from typing import Any

from sklearn.base import BaseEstimator
from skorch.callbacks import Callback

from .._validation import check_nonnegative, check_real


class WarmupCosine(BaseEstimator):
    """Linear warm-up, then half-cycle cosine decay, stepped every batch.

    The schedule of SimCLR (Chen et al., 2020) and of Cho et al. 2023's (arXiv:2307.05906) real-data
    protocol (App. D.3: 10 warm-up epochs, then cosine): the learning rate of every parameter
    group rises linearly from ``lr / warmup_steps`` to its full value over the first
    ``warmup_epochs`` epochs, then follows half a cosine down to ``final_fraction`` of it
    at the last batch of ``max_epochs``. Groups keep their own base rates, so per-group
    learning rates are scaled alike. Each ``fit`` runs the schedule over its own
    ``max_epochs`` (a warm start starts a new schedule).

    Pass it as ``lr_schedule=`` to :class:`~skcontrast.ContrastiveEmbedder` or
    :class:`~skcontrast.SupConEmbedder`; ``GridSearchCV`` can tune
    ``lr_schedule__warmup_epochs``. The rate of each epoch's last batch is recorded in
    the history as ``lr``.

    Parameters
    ----------
    warmup_epochs : float, default=10
        Epochs of linear warm-up (fractions allowed; 0 for none). Capped at the
        training length.
    final_fraction : float in [0, 1], default=0.0
        The last rate as a fraction of the base rate.

    Examples
    --------
    >>> from skcontrast import ContrastiveEmbedder, WarmupCosine
    >>> est = ContrastiveEmbedder(max_epochs=100, lr_schedule=WarmupCosine(warmup_epochs=10))
    """

    def __init__(self, warmup_epochs: float = 10, final_fraction: float = 0.0) -> None:
        self.warmup_epochs = warmup_epochs
        self.final_fraction = final_fraction

    def check(self) -> None:
        """Raise a clear error for bad parameters."""
        check_nonnegative(self.warmup_epochs, "warmup_epochs")
        check_real(self.final_fraction, "final_fraction", low=0, high=1)

    def factor(self, step: int, total: int, per_epoch: float) -> float:
        """Multiplier of the base rate at ``step`` (0-based) of ``total`` steps."""
        warmup = min(total, round(self.warmup_epochs * per_epoch))
        if step < warmup:
            return (step + 1) / warmup
        span = max(total - warmup - 1, 1)
        progress = min((step - warmup) / span, 1.0)
        return self.final_fraction + (1 - self.final_fraction) * 0.5 * (
            1 + math.cos(math.pi * progress))


class ScheduleCallback(Callback):
    """Sets every parameter group's rate before each training batch (no torch scheduler:
    the rates come straight from the schedule, so resuming needs no scheduler state)."""

    def __init__(self, schedule: Any, batches_per_epoch: int, epochs: int) -> None:
        self.schedule = schedule
        self.batches_per_epoch = batches_per_epoch
        self.epochs = epochs

    def on_train_begin(self, net: Any, **kwargs: Any) -> None:
        self.step_ = 0
        groups = net.optimizer_.param_groups
        self.base_ = [group.get("initial_lr", group["lr"]) for group in groups]
        for group, base in zip(groups, self.base_, strict=True):
            group["initial_lr"] = base

    def on_batch_begin(self, net: Any, training: bool = False, **kwargs: Any) -> None:
        if not training:
            return
        factor = self.schedule.factor(self.step_, self.batches_per_epoch * self.epochs,
                                      self.batches_per_epoch)
        for group, base in zip(net.optimizer_.param_groups, self.base_, strict=True):
            group["lr"] = base * factor
        self.step_ += 1

    def on_epoch_end(self, net: Any, **kwargs: Any) -> None:
        net.history.record("lr", net.optimizer_.param_groups[0]["lr"])
