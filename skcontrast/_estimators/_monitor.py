"""Held-out monitoring: the data set aside, and a per-epoch score on it."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
from skorch.callbacks import Callback

from .._validation import check_real


def check_validation_fraction(value: Any, name: str = "validation_fraction") -> None:
    if value is None:
        return
    try:
        check_real(value, name, low=0, high=1, low_open=True, high_open=True)
    except ValueError as exc:
        raise ValueError(str(exc).replace("must be", "must be None or", 1)) from None


def held_out_counts(n: int, fraction: float, sizes: np.ndarray | None) -> np.ndarray:
    """How many samples each class holds out (one count without classes).

    ``round(n * fraction)`` in all, each class its share of it, except that every class
    keeps at least one training sample: the places a class cannot take go to the other
    classes, largest remainders first, then in proportion to the room they have left.
    Fewer are held out only when the classes have no room at all (e.g. all singletons).
    """
    n_valid = round(n * fraction)
    if n_valid < 2 or n - n_valid < 2:
        raise ValueError(f"validation_fraction={fraction} of {n} samples leaves {n_valid} "
                         f"held out and {n - n_valid} to train on; each side needs at least "
                         "2 (more data, or another fraction)")
    if sizes is None:
        return np.array([n_valid])
    share = sizes * fraction
    counts = np.minimum(np.floor(share).astype(int), sizes - 1)
    order = np.argsort(-(share - np.floor(share)), kind="stable")
    while counts.sum() < n_valid and (counts < sizes - 1).any():
        # one more place per class with room, largest remainders (then most room) first
        room = sizes - 1 - counts
        for c in sorted(order, key=lambda c: room[c] == 0):
            if counts.sum() >= n_valid or room[c] == 0:
                continue
            counts[c] += 1
    return counts


def split_indices(n: int, fraction: float, seed: int, labels: np.ndarray | None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Training and held-out indices, ``round(n * fraction)`` held out.

    With ``labels`` the split is stratified class by class, and every class keeps at
    least one training sample: a class of one sample is never held out (its sample
    trains), so no class seen in ``X`` goes missing from the fitted ``classes_``. Each
    class holds out its share of ``fraction``; the places singleton (or too small)
    classes cannot take go to the others (:func:`held_out_counts`), so the total is
    ``round(n * fraction)`` unless every class is too small, which a warning says.
    """
    rng = np.random.default_rng(seed)
    if labels is None:
        n_valid = int(held_out_counts(n, fraction, None)[0])
        order = rng.permutation(n)
        return np.sort(order[n_valid:]), np.sort(order[:n_valid])
    members = [np.flatnonzero(labels == c) for c in np.unique(labels)]
    counts = held_out_counts(n, fraction, np.array([len(m) for m in members]))
    valid = np.concatenate([rng.permutation(m)[:k] for m, k in zip(members, counts,
                                                                   strict=True)])
    if len(valid) < 2:
        raise ValueError(f"validation_fraction={fraction} holds out {len(valid)} sample(s): "
                         "every class keeps one sample to train on, and most classes here "
                         "have a single sample; the held-out loss needs at least 2")
    if len(valid) < round(n * fraction):
        warnings.warn(f"validation_fraction={fraction} holds out {len(valid)} of {n} samples, "
                      f"not {round(n * fraction)}: every class keeps one sample to train on, "
                      "and the classes have no more to give", UserWarning, stacklevel=4)
    return np.setdiff1d(np.arange(n), valid), np.sort(valid)


class EstimatorScore:
    """A skcontrast scorer of the estimator as its net is at the moment of the call, as
    skorch's scoring callbacks call their ``scoring``: ``score(net, X, y)``.

    ``X`` is data the estimators read (the training or held-out :class:`~._data.ViewData`
    that ``EpochScoring`` hands over), or a batch's views (``BatchScoring``), read as the
    data of that batch; ``y`` defaults to the labels the data carries. What
    ``scoring=`` records as ``valid_score`` (:class:`ValidScore`) is this on the held-out
    data, so ``EpochScoring`` with a scorer's name agrees with it.
    """

    def __init__(self, scorer: Any, estimator: Any, spec: Any) -> None:
        self.scorer = scorer
        # what makes the scored estimator: its class and parameters (shared, not
        # copied), with the fit's input spec
        self.kind, self.params = type(estimator), estimator.get_params(deep=False)
        self.spec = spec

    @property
    def __name__(self) -> str:  # skorch names a callable scoring by it
        return str(getattr(self.scorer, "name", type(self.scorer).__name__))

    def __call__(self, net: Any, X: Any, y: Any = None) -> float:
        from ._data import TensorViews, ViewData

        current = self.kind._at_epoch(self.params, net, self.spec)
        if not isinstance(X, ViewData):  # a batch's views
            X = TensorViews(tuple(X) if isinstance(X, tuple | list) else (X,), y)
        labels = X.labels if y is None else y
        if isinstance(labels, torch.Tensor):
            labels = labels.cpu().numpy()
        return float(self.scorer(current, X, labels))


def scoring_callbacks(callbacks: Any, estimator: Any, spec: Any) -> list:
    """The user's callbacks as the fit's net takes them: skorch's ``EpochScoring`` and
    ``BatchScoring`` whose ``scoring`` names a skcontrast scorer (``'recall@1'``,
    ``'map@r'``, ... of :func:`~skcontrast.metrics.get_scorer`) score the estimator with
    it (:class:`EstimatorScore`; the callback is a copy with every other setting kept,
    named after the scorer unless it has a name); a name only scikit-learn knows
    (``'accuracy'``) is refused, since the estimators embed rather than predict. A
    callable ``scoring`` gets skorch's net, as on a ``NeuralNet``."""
    from skorch.callbacks.scoring import ScoringBase

    from ..metrics import get_scorer

    out = []
    for item in callbacks or []:
        name, callback = item if isinstance(item, tuple) else (None, item)
        if isinstance(callback, ScoringBase) and isinstance(callback.scoring, str):
            try:
                scorer = get_scorer(callback.scoring, estimator)
            except ValueError as exc:
                raise ValueError(
                    f"{type(callback).__name__}(scoring={callback.scoring!r}): the "
                    f"estimators embed, they do not predict classes; score with a "
                    f"skcontrast scorer by name or a callable scoring(net, X, y) ({exc})"
                ) from None
            params = callback.get_params(deep=False)
            params.update(scoring=EstimatorScore(scorer, estimator, spec),
                          name=callback.name or callback.scoring)
            callback = type(callback)(**params)
        out.append(callback if name is None else (name, callback))
    return out


class ValidScore(Callback):
    """Records ``valid_score`` (and ``valid_score_best``) each epoch: ``scorer`` applied
    to the held-out data by the estimator as it is at that epoch."""

    def __init__(self, scorer: Any, estimator: Any, spec: Any, X: Any, y: Any) -> None:
        self.scorer = scorer
        self.score = EstimatorScore(scorer, estimator, spec)
        self.X = X
        self.y = y

    def initialize(self) -> ValidScore:
        self.best_ = -np.inf
        return self

    def on_epoch_end(self, net: Any, **kwargs: Any) -> None:
        value = self.score(net, self.X, self.y)
        net.history.record("valid_score", value)
        is_best = value > self.best_
        if is_best:
            self.best_ = value
        net.history.record("valid_score_best", bool(is_best))

    def __getstate__(self) -> dict:  # the held-out data stays out of the pickle
        return {**self.__dict__, "X": None, "y": None, "score": None}


def check_monitors(callbacks: Any, held_out: bool, scored: bool = False) -> None:
    """Callbacks that watch held-out values need held-out data, and ``valid_score`` a
    ``scoring``: say so before training, not with a ``KeyError`` after the first epoch
    (skorch issue 746)."""
    for item in callbacks or []:
        callback = item[1] if isinstance(item, tuple) else item
        monitor = getattr(callback, "monitor", None)
        if not isinstance(monitor, str) or not monitor.startswith("valid"):
            continue
        if not held_out:
            raise ValueError(f"{type(callback).__name__} watches {monitor!r}, which needs "
                             "held-out data: set validation_fraction (e.g. 0.1) or pass "
                             "X_val (and y_val) to fit")
        if monitor.startswith("valid_score") and not scored:
            raise ValueError(f"{type(callback).__name__} watches {monitor!r}, which is "
                             "recorded only with a scoring: set scoring (e.g. 'map@r'), or "
                             "watch 'valid_loss'")
