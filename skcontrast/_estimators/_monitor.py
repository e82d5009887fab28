"""Held-out monitoring: the data set aside, and a per-epoch score on it."""

from __future__ import annotations

import copy
import numbers
from typing import Any

import numpy as np
from skorch.callbacks import Callback

from .._validation import describe


def check_validation_fraction(value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < 1:
        raise ValueError(f"validation_fraction must be None or a number in (0, 1); got "
                         f"{describe(value)}")


def split_indices(n: int, fraction: float, seed: int, labels: np.ndarray | None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Training and held-out indices; stratified by ``labels`` when every class has two
    members or more (as scikit-learn's ``MLPClassifier`` does for its early stopping)."""
    from sklearn.model_selection import ShuffleSplit, StratifiedShuffleSplit

    n_valid = round(n * fraction)
    if n_valid < 2 or n - n_valid < 2:
        raise ValueError(f"validation_fraction={fraction} of {n} samples leaves {n_valid} "
                         f"held out and {n - n_valid} to train on; each side needs at least "
                         "2 (more data, or another fraction)")
    placeholder = np.zeros((n, 1))
    stratify = labels is not None and np.bincount(labels).min() >= 2 and \
        n_valid >= len(np.unique(labels)) and n - n_valid >= len(np.unique(labels))
    splitter = StratifiedShuffleSplit(1, test_size=n_valid, random_state=seed) if stratify \
        else ShuffleSplit(1, test_size=n_valid, random_state=seed)
    train, valid = next(splitter.split(placeholder, labels if stratify else None))
    return np.sort(train), np.sort(valid)


class ValidScore(Callback):
    """Records ``valid_score`` (and ``valid_score_best``) each epoch: ``scorer`` applied
    to the held-out data by the estimator as it is at that epoch."""

    def __init__(self, scorer: Any, estimator: Any, X: Any, y: Any) -> None:
        self.scorer = scorer
        self.estimator = estimator
        self.X = X
        self.y = y

    def initialize(self) -> ValidScore:
        self.best_ = -np.inf
        return self

    def on_epoch_end(self, net: Any, **kwargs: Any) -> None:
        current = copy.copy(self.estimator)
        current.net_ = net
        value = float(self.scorer(current, self.X, self.y))
        net.history.record("valid_score", value)
        is_best = value > self.best_
        if is_best:
            self.best_ = value
        net.history.record("valid_score_best", bool(is_best))

    def __getstate__(self) -> dict:  # the held-out data stays out of the pickle
        return {**self.__dict__, "X": None, "y": None, "estimator": None}


def check_monitors(callbacks: Any, held_out: bool) -> None:
    """Callbacks that watch held-out values need held-out data: say so before training,
    not with a ``KeyError`` after the first epoch (skorch issue 746)."""
    if held_out:
        return
    for item in callbacks or []:
        callback = item[1] if isinstance(item, tuple) else item
        monitor = getattr(callback, "monitor", None)
        if isinstance(monitor, str) and monitor.startswith("valid"):
            raise ValueError(f"{type(callback).__name__} watches {monitor!r}, which needs "
                             "held-out data: set validation_fraction (e.g. 0.1) or pass "
                             "X_val (and y_val) to fit")
