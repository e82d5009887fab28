"""scikit-learn compatible scorers for embeddings, by name (:func:`get_scorer`): plain
callables ``scorer(estimator, X, y=None)``, greater is better (why they are not
:func:`sklearn.metrics.make_scorer`'s: :mod:`skcontrast.metrics`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import geometry
from .._validation import check_labels, describe
from ._classifiers import leave_one_out_ncc, nearest_centre
from ._ranking import map_at_r, precision_at_1, r_map, r_precision
from ._retrieval import recall_at_k


def _final_step(estimator: Any, X: Any) -> tuple[Any, Any]:
    """Walk through (nested) pipelines: the last estimator and X transformed up to it."""
    from sklearn.pipeline import Pipeline

    while isinstance(estimator, Pipeline):
        if len(estimator) > 1:
            X = estimator[:-1].transform(X)
        estimator = estimator[-1]
    return estimator, X


def pair_embeddings(estimator: Any, X: Any) -> tuple[np.ndarray, np.ndarray]:
    """Embeddings ``(U, V)`` of both views of paired ``X`` from a fitted estimator.

    Works for estimators with a ``transform_pairs`` method (``ContrastiveEmbedder``)
    and pipelines ending in one.
    """
    final, Xt = _final_step(estimator, X)
    if not hasattr(final, "transform_pairs"):
        raise TypeError(f"this scorer needs paired embeddings: the estimator must have a "
                        f"transform_pairs method (e.g. ContrastiveEmbedder); got "
                        f"{type(final).__name__}")
    U, V = final.transform_pairs(Xt)
    return np.asarray(U), np.asarray(V)


def _needs_y(name: str, y: Any) -> None:
    if y is None:
        raise ValueError(f"the {name!r} scorer needs labels y")


class EmbeddingScorer:
    """A scorer ``scorer(estimator, X, y=None) -> float`` (greater is better).

    Parameters
    ----------
    name : str
    metric : callable
        ``metric(estimator, X, y) -> float`` in the metric's own sign.
    greater_is_better : bool
        ``False`` negates the metric so that scikit-learn can maximise it.
    needs : {'pairs', 'labels', 'pairs or labels'} or None, default=None
        The scorer's precondition: an estimator that embeds both views of a pair
        (``transform_pairs``, i.e. :class:`~skcontrast.ContrastiveEmbedder`), labels
        ``y``, or either. :meth:`check` tests it before any fitting.
    """

    def __init__(self, name: str, metric: Callable[[Any, Any, Any], float],
                 greater_is_better: bool = True, needs: str | None = None) -> None:
        self.name = name
        self.metric = metric
        self.greater_is_better = greater_is_better
        self.needs = needs

    def __call__(self, estimator: Any, X: Any, y: Any = None) -> float:
        value = float(self.metric(estimator, X, y))
        return value if self.greater_is_better else -value

    def check(self, estimator: Any, y: Any = None, *, labels_known: bool = False) -> None:
        """Raise when this scorer cannot score ``estimator`` (before fitting it).

        ``labels_known``: whether ``y`` is the data the search will score with (so a
        ``None`` means no labels); otherwise only the estimator is checked.
        """
        final = estimator
        from sklearn.pipeline import Pipeline

        while isinstance(final, Pipeline):
            final = final[-1]
        pairs = hasattr(final, "transform_pairs")
        has_labels = y is not None or not labels_known
        if self.needs == "pairs" and not pairs:
            raise ValueError(f"the {self.name!r} scorer compares the two views of pairs, which "
                             f"{type(final).__name__} does not embed; use it with "
                             "ContrastiveEmbedder, or choose 'ncc_accuracy', 'map@r' or "
                             "'r_map' for labelled data")
        if self.needs == "labels" and not has_labels:
            raise ValueError(f"the {self.name!r} scorer needs labels y; pass y to fit (or "
                             "choose 'recall@1' for pairs)")
        if self.needs == "pairs or labels" and not (pairs or has_labels):
            raise ValueError(f"the {self.name!r} scorer needs labels y for "
                             f"{type(final).__name__}; pass y to fit")

    def __repr__(self) -> str:
        sign = "" if self.greater_is_better else ", negated"
        return f"EmbeddingScorer({self.name!r}{sign})"

    def __reduce__(self) -> Any:
        # the named scorers hold local functions: they pickle by name (so does an
        # estimator fitted with scoring='map@r')
        if SCORERS.get(self.name) is self or re.fullmatch(r"recall@\d+", self.name):
            return (get_scorer, (self.name,))
        return super().__reduce__()


def _recall(k: int) -> Callable[[Any, Any, Any], float]:
    def metric(estimator: Any, X: Any, y: Any) -> float:
        return recall_at_k(*pair_embeddings(estimator, X), k=k)

    return metric


def _retrieval(fn: Callable[[Any, Any], float], name: str) -> Callable[[Any, Any, Any], float]:
    def metric(estimator: Any, X: Any, y: Any) -> float:
        final, _ = _final_step(estimator, X)
        if y is None and hasattr(final, "transform_pairs"):
            U, V = pair_embeddings(estimator, X)
            ids = np.arange(len(U))
            return fn(np.vstack([U, V]), np.concatenate([ids, ids]))
        _needs_y(name, y)
        return fn(estimator.transform(X), y)

    return metric


def _ncc(estimator: Any, X: Any, y: Any) -> float:
    _needs_y("ncc_accuracy", y)
    final, _ = _final_step(estimator, X)
    H = estimator.transform(X)
    if hasattr(final, "class_centres_"):
        predicted = nearest_centre(H, final.classes_, final.class_centres_)
        return float(np.mean(predicted == check_labels(y, "y", n_samples=len(H),
                                                         like=final.classes_)))
    return leave_one_out_ncc(H, y)


def _of_gap(estimator: Any, X: Any, y: Any) -> float:
    _needs_y("orthogonal_frame_gap", y)
    return geometry.orthogonal_frame_gap(estimator.transform(X), y)


SCORERS: dict[str, EmbeddingScorer] = {
    "recall@1": EmbeddingScorer("recall@1", _recall(1), needs="pairs"),
    "recall@5": EmbeddingScorer("recall@5", _recall(5), needs="pairs"),
    "etf_gap": EmbeddingScorer(
        "etf_gap", lambda e, X, y: geometry.etf_gap(*pair_embeddings(e, X)), False,
        needs="pairs"),
    "alignment": EmbeddingScorer(
        "alignment", lambda e, X, y: geometry.alignment(*pair_embeddings(e, X)), False,
        needs="pairs"),
    "uniformity": EmbeddingScorer(
        "uniformity", lambda e, X, y: geometry.uniformity(e.transform(X)), False),
    "orthogonal_frame_gap": EmbeddingScorer("orthogonal_frame_gap", _of_gap, False,
                                            needs="labels"),
    "ncc_accuracy": EmbeddingScorer("ncc_accuracy", _ncc, needs="labels"),
    "map@r": EmbeddingScorer("map@r", _retrieval(map_at_r, "map@r"), needs="pairs or labels"),
    "r_map": EmbeddingScorer("r_map", _retrieval(r_map, "r_map"), needs="pairs or labels"),
    "precision@1": EmbeddingScorer("precision@1", _retrieval(precision_at_1, "precision@1"),
                                   needs="pairs or labels"),
    "r_precision": EmbeddingScorer("r_precision", _retrieval(r_precision, "r_precision"),
                                   needs="pairs or labels"),
}


def get_scorer(name: str | Callable, estimator: Any = None
               ) -> Callable[[Any, Any, Any], float]:
    """A scorer by name, for ``GridSearchCV(scoring=...)`` (greater is better).

    Each scorer has preconditions; inside a search a scorer that cannot score becomes
    NaN with a warning per fold, so pass the ``estimator`` to check them up front:

    - ``'recall@K'``, ``'alignment'``: pairs, i.e. an estimator with
      ``transform_pairs`` (ContrastiveEmbedder);
    - ``'etf_gap'``: pairs, and ``d >= n - 1`` or ``n = 2d`` (``n`` scored pairs, ``d``
      the embedding width; see :func:`~skcontrast.geometry.etf_gap`);
    - ``'ncc_accuracy'``, ``'orthogonal_frame_gap'``: labels ``y``;
    - ``'map@r'``, ``'r_map'``, ``'precision@1'``, ``'r_precision'``: labels ``y``, or
      pairs (each pair its own class);
    - ``'uniformity'``: nothing.

    Parameters
    ----------
    name : str or callable
        ``'recall@1'``, ``'recall@5'`` (any ``'recall@K'``), ``'etf_gap'``,
        ``'alignment'``, ``'uniformity'``, ``'orthogonal_frame_gap'``,
        ``'ncc_accuracy'``, ``'map@r'``, ``'r_map'``, ``'precision@1'`` or
        ``'r_precision'``. Gaps, alignment and uniformity are negated. A callable is
        returned unchanged.
    estimator : estimator or pipeline, optional
        Check that the scorer can score it (e.g. ``'recall@1'`` refuses a
        SupConEmbedder, which embeds no pairs).

    Returns
    -------
    callable ``scorer(estimator, X, y=None) -> float``

    Examples
    --------
    >>> from skcontrast.metrics import get_scorer
    >>> get_scorer("etf_gap")
    EmbeddingScorer('etf_gap', negated)
    """
    scorer = _named_scorer(name)
    if estimator is not None and isinstance(scorer, EmbeddingScorer):
        scorer.check(estimator)
    return scorer


def is_scorer_name(name: Any) -> bool:
    """Whether ``name`` is one of skcontrast's scorer names (``'map@r'``, ``'recall@5'``)."""
    return isinstance(name, str) and (name in SCORERS or
                                      re.fullmatch(r"recall@(\d+)", name) is not None)


def resolve_scoring(scoring: Any) -> Any:
    """``scoring`` with skcontrast's scorer names replaced by their scorers: a name, a
    list or tuple of names (as scikit-learn's multi-metric form, a dict by name), or a
    dict of them; other values (scikit-learn's names, callables) are kept."""
    if is_scorer_name(scoring):
        return get_scorer(scoring)
    if isinstance(scoring, list | tuple | set) and any(map(is_scorer_name, scoring)):
        return {name: get_scorer(name) if is_scorer_name(name) else name for name in scoring}
    if isinstance(scoring, dict):
        return {key: get_scorer(value) if is_scorer_name(value) else value
                for key, value in scoring.items()}
    return scoring


def _named_scorer(name: str | Callable) -> Callable[[Any, Any, Any], float]:
    if callable(name):
        return name
    if isinstance(name, str):
        match = re.fullmatch(r"recall@(\d+)", name)
        if match and name not in SCORERS:
            k = int(match.group(1))
            return EmbeddingScorer(name, _recall(k), needs="pairs")
        if name in SCORERS:
            return SCORERS[name]
    options = ", ".join(repr(s) for s in SCORERS)
    raise ValueError(f"unknown scorer {describe(name)}; expected one of {options} "
                     f"(or 'recall@K')")
