"""Coordinate-descent search of the loss balance (Sors et al. 2021, arXiv:2112.11743, Sec. 5 and
supplement B).
"""

from __future__ import annotations

import math
import numbers
import time
from typing import Any

import numpy as np
from scipy.stats import rankdata
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone, is_classifier
from sklearn.model_selection import GridSearchCV, check_cv
from sklearn.utils.metaestimators import available_if

from .._validation import check_int, check_positive, describe, store_params

#: Sors et al. 2021, Eq. 9: rows are the balance direction (-1, 1, 0), the joint learning-rate
#: direction (1, 1, 0) and the batch-size direction (0, 0, 1), in log(Lambda_p, Lambda_e, b).
BALANCE_DIRECTIONS = np.array([[-1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
DEFAULT_BOUNDS = {"lambda_pos": (1e-2, 1e2), "lambda_ent": (1e-2, 1e2), "batch_size": (8, 256)}
INVERSE_GOLDEN = (math.sqrt(5) - 1) / 2


def _refitted(method: str) -> Any:
    """Whether the search has a refitted best estimator with ``method`` (or, before
    ``fit``, whether the estimator has it), for ``available_if``."""
    def check(search: Any) -> bool:
        best = getattr(search, "best_estimator_", None)
        return hasattr(search.estimator if best is None else best, method)

    return check


def _merged(results: list[dict]) -> dict:
    """The ``cv_results_`` of configurations cross-validated one at a time, as one
    search's: their entries in evaluation order, each ``rank_test_*`` ranked across
    all of them (a configuration whose mean score is NaN ranks last)."""
    merged: dict[str, Any] = {}
    for key in results[0]:
        parts = [r[key] for r in results]
        if key == "params":
            merged[key] = [p for part in parts for p in part]
        elif key.startswith("param_"):
            merged[key] = np.ma.concatenate([np.ma.asarray(part, dtype=object)
                                             for part in parts])
        elif not key.startswith("rank_"):
            merged[key] = np.concatenate(parts)
    for key in [k for k in results[0] if k.startswith("rank_test_")]:
        means = np.asarray(merged["mean_test_" + key[len("rank_test_"):]], dtype=float)
        if np.isnan(means).all():
            merged[key] = np.ones(len(means), dtype=np.int32)
        else:
            means = np.where(np.isnan(means), np.nanmin(means) - 1, means)
            merged[key] = rankdata(-means, method="min").astype(np.int32)
    return merged


class BalanceSearchCV(MetaEstimatorMixin, BaseEstimator):
    """Tune the balance ``h = (Lambda_p, Lambda_e, b)`` of a contrastive loss by coordinate descent.

    Sors et al. 2021 (Sec. 5.2 and supplement Alg. 1-2): in log space, ``r = A log h`` with
    ``A`` of Eq. 9 (rows: the *balance* direction, moving ``Lambda_p`` down and
    ``Lambda_e`` up; the *joint learning-rate* direction; the *batch-size* direction).
    The search cycles over the rows of ``A``; each line search is a bounded
    golden-section search over the segment of that line inside the search box, with a
    per-direction budget of evaluations. When a line search improves the best score by
    less than ``slope_threshold`` per evaluation, that direction's budget doubles (the
    paper's slope rule). If the metric is close to a quadratic whose Hessian has the
    rows of ``A`` as eigenvectors, three exact line searches reach its optimum.

    It is a scikit-learn search built on scikit-learn's public API: each configuration
    is cross-validated by ``GridSearchCV`` on the same folds (``cv`` is split once), and
    ``cv``, ``scoring`` (scikit-learn's names and scorers, and skcontrast's scorer names
    such as ``'map@r'`` or ``'recall@1'`` directly; multi-metric lists and dicts with
    ``refit``), ``n_jobs``, ``cv_results_``, ``best_params_``, ``best_score_``,
    ``best_estimator_`` and ``transform``/``predict`` delegation work as in
    ``GridSearchCV``.

    Parameters
    ----------
    estimator : estimator
        Anything exposing the parameters named in ``param_names`` (e.g.
        ``ContrastiveEmbedder``, ``SupConEmbedder``, or a pipeline with
        ``'step__loss__lambda_pos'``-style names).
    param_names : sequence of 2 or 3 str, default=('loss__lambda_pos', 'loss__lambda_ent', \
'batch_size')
        The estimator parameters playing ``Lambda_p``, ``Lambda_e`` and (optionally) ``b``
        (the balance weights of the estimators' loss object are ``loss__lambda_pos`` and
        ``loss__lambda_ent``). The batch-size parameter is rounded to an integer (at
        least 2).
    bounds : dict or None, default=None
        ``{name: (low, high)}``, all positive (the search is in log space). ``None``
        uses ``lambda_*`` in ``[1e-2, 1e2]`` and ``batch_size`` in ``[8, 256]``.
    start : dict or None, default=None
        Warm start point ``{name: value}`` inside the bounds. ``None`` uses the
        estimator's current values where they are numbers inside the bounds, and the
        log-centre of the box elsewhere.
    directions : 'balance', 'identity' or array of shape (p, p), default='balance'
        Search directions (rows) in log space: ``'balance'`` is ``A`` of Eq. 9 (its first
        two rows when ``p = 2``); ``'identity'`` searches each parameter alone.
    budget : int, default=20
        Total number of configurations evaluated (each is a full cross-validation).
    budget_per_direction : int or sequence of int, default=3
        Initial evaluations per line search (the paper's setting is 3 for each).
    slope_threshold : float, default=0.02
        Minimum improvement of the best score per evaluation before a direction's
        budget doubles.
    scoring, n_jobs, refit, cv, verbose, pre_dispatch, error_score, return_train_score
        As in :class:`~sklearn.model_selection.GridSearchCV`.

    Attributes
    ----------
    cv_results_, best_params_, best_score_, best_estimator_, best_index_, scorer_,
    n_splits_, refit_time_, multimetric_
        As in ``GridSearchCV``; ``cv_results_`` lists configurations in evaluation order.
    path_ : list of dict
        Each evaluation: ``params``, ``score``, ``direction`` (index of the row of
        ``directions``, -1 for the start) and the best score so far.

    Examples
    --------
    >>> from skcontrast import ContrastiveEmbedder
    >>> from skcontrast.datasets import make_paired_gaussians
    >>> from skcontrast.model_selection import BalanceSearchCV
    >>> X, _ = make_paired_gaussians(120, 6, random_state=0)
    >>> search = BalanceSearchCV(
    ...     ContrastiveEmbedder(n_components=4, max_epochs=2, random_state=0),
    ...     param_names=("loss__lambda_pos", "loss__lambda_ent"), budget=4, cv=2).fit(X)
    >>> len(search.cv_results_["params"])
    4
    """

    def __init__(self, estimator: Any, *, param_names: Any = ("loss__lambda_pos",
                                                               "loss__lambda_ent",
                                                               "batch_size"),
                 bounds: dict | None = None, start: dict | None = None,
                 directions: Any = "balance", budget: int = 20,
                 budget_per_direction: Any = 3, slope_threshold: float = 0.02,
                 scoring: Any = None, n_jobs: int | None = None, refit: Any = True,
                 cv: Any = None, verbose: int = 0, pre_dispatch: Any = "2*n_jobs",
                 error_score: Any = np.nan, return_train_score: bool = False) -> None:
        store_params(self, locals())

    # -- configuration ----------------------------------------------------------------

    def _names(self) -> list[str]:
        names = list(self.param_names)
        if len(names) not in (2, 3) or len(set(names)) != len(names) or \
                not all(isinstance(n, str) for n in names):
            raise ValueError(f"param_names must be 2 or 3 distinct parameter names "
                             f"(Lambda_p, Lambda_e[, b]); got {describe(self.param_names)}")
        known = self.estimator.get_params(deep=True)
        missing = [n for n in names if n not in known]
        if missing:
            raise ValueError(f"param_names {missing} are not parameters of "
                             f"{type(self.estimator).__name__}; it has "
                             f"{sorted(k for k in known if '__' not in k)}")
        return names

    def _box(self, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
        bounds = DEFAULT_BOUNDS if self.bounds is None else self.bounds
        lo, hi = [], []
        for name in names:
            key = name if name in bounds else name.rsplit("__", 1)[-1]
            if key not in bounds:
                raise ValueError(f"bounds has no range for {name!r}; give bounds={{"
                                 f"{name!r}: (low, high), ...}}")
            low, high = bounds[key]
            for value in (low, high):
                check_positive(value, f"bounds[{name!r}]")
            if not low < high:
                raise ValueError(f"bounds[{name!r}] must satisfy low < high; got "
                                 f"({low}, {high})")
            lo.append(math.log(low))
            hi.append(math.log(high))
        return np.array(lo), np.array(hi)

    def _start(self, names: list[str], lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        current = self.estimator.get_params(deep=True)
        point = []
        for name, low, high in zip(names, lo, hi, strict=True):
            if self.start is not None and name in self.start:
                value = self.start[name]
                if isinstance(value, bool) or not isinstance(value, numbers.Real) or \
                        value <= 0 or not low - 1e-12 <= math.log(value) <= high + 1e-12:
                    raise ValueError(
                        f"start[{name!r}]={value!r} is outside the search box "
                        f"[{math.exp(low):g}, {math.exp(high):g}]")
                point.append(math.log(value))
                continue
            value = current.get(name)
            if isinstance(value, numbers.Real) and not isinstance(value, bool) \
                    and float(value) > 0 and low <= math.log(value) <= high:
                point.append(math.log(value))
            else:
                point.append(0.5 * (low + high))
        if self.start is not None:
            unknown = set(self.start) - set(names)
            if unknown:
                raise ValueError(f"start names {sorted(unknown)} are not in param_names "
                                 f"{names}")
        return np.array(point)

    def _direction_matrix(self, p: int) -> np.ndarray:
        if isinstance(self.directions, str):
            if self.directions == "balance":
                return BALANCE_DIRECTIONS[:p, :p].copy()
            if self.directions == "identity":
                return np.eye(p)
            raise ValueError(f"directions must be 'balance', 'identity' or a ({p}, {p}) "
                             f"array; got {self.directions!r}")
        matrix = np.asarray(self.directions, dtype=float)
        if matrix.shape != (p, p) or np.linalg.matrix_rank(matrix) < p:
            raise ValueError(f"directions must be an invertible ({p}, {p}) array; got "
                             f"{describe(matrix)}")
        return matrix

    def _budgets(self, p: int) -> list[int]:
        values = self.budget_per_direction
        values = [values] * p if isinstance(values, numbers.Integral) else list(values)
        if len(values) != p:
            raise ValueError(f"budget_per_direction must be an int or {p} ints; got "
                             f"{describe(self.budget_per_direction)}")
        return [check_int(v, "budget_per_direction", minimum=1) for v in values]

    # -- the search -------------------------------------------------------------------

    def fit(self, X: Any, y: Any = None, **params: Any) -> BalanceSearchCV:
        """Run the search (see ``GridSearchCV.fit``; ``groups`` go to the splitter, the
        other ``params`` to the estimator's ``fit``); the scorers' preconditions and the
        splittability of ``X`` are checked before any fitting."""
        from ..metrics import resolve_scoring

        check_search_input(self.estimator, X, y, self.scoring)
        scoring = resolve_scoring(self.scoring)
        several = isinstance(scoring, dict | list | tuple | set)
        if several and not isinstance(self.refit, str):
            raise ValueError(f"with several scorers the search needs one to follow: refit "
                             f"must name one of them (e.g. refit={_first(self.scoring)!r}); "
                             f"got refit={self.refit!r}")
        groups = params.pop("groups", None)
        cv = check_cv(self.cv, y, classifier=is_classifier(self.estimator))
        folds: list = []  # split once (after the search's settings are checked): every
        results: list[dict] = []  # configuration is cross-validated on the same folds

        def evaluate_candidates(candidates: list[dict]) -> dict:
            if not folds:
                folds.extend(cv.split(X, y, groups))
            for candidate in candidates:
                one = GridSearchCV(
                    self.estimator, {k: [v] for k, v in candidate.items()},
                    scoring=scoring, n_jobs=self.n_jobs, refit=False, cv=folds,
                    verbose=self.verbose, pre_dispatch=self.pre_dispatch,
                    error_score=self.error_score,
                    return_train_score=self.return_train_score).fit(X, y, **params)
                results.append(one.cv_results_)
                self.scorer_, self.multimetric_ = one.scorer_, one.multimetric_
            return _merged(results)

        self._run_search(evaluate_candidates)
        self.cv_results_ = _merged(results)
        self.n_splits_ = len(folds)
        key = "score" if not self.multimetric_ else self.refit
        if callable(self.refit):
            self.best_index_ = int(self.refit(self.cv_results_))
        elif self.refit or not self.multimetric_:
            self.best_index_ = int(np.argmin(self.cv_results_[f"rank_test_{key}"]))
            self.best_score_ = float(self.cv_results_[f"mean_test_{key}"][self.best_index_])
        if hasattr(self, "best_index_"):
            self.best_params_ = self.cv_results_["params"][self.best_index_]
        if self.refit:
            start = time.perf_counter()
            self.best_estimator_ = clone(self.estimator).set_params(
                **clone(self.best_params_, safe=False)).fit(X, y, **params)
            self.refit_time_ = time.perf_counter() - start
            if hasattr(self.best_estimator_, "feature_names_in_"):
                self.feature_names_in_ = self.best_estimator_.feature_names_in_
        return self

    # -- the best estimator's methods, as GridSearchCV delegates them -----------------

    @available_if(_refitted("transform"))
    def transform(self, X: Any) -> Any:
        """The best estimator's ``transform``."""
        return self.best_estimator_.transform(X)

    @available_if(_refitted("inverse_transform"))
    def inverse_transform(self, X: Any) -> Any:
        """The best estimator's ``inverse_transform``."""
        return self.best_estimator_.inverse_transform(X)

    @available_if(_refitted("predict"))
    def predict(self, X: Any) -> Any:
        """The best estimator's ``predict``."""
        return self.best_estimator_.predict(X)

    @available_if(_refitted("predict_proba"))
    def predict_proba(self, X: Any) -> Any:
        """The best estimator's ``predict_proba``."""
        return self.best_estimator_.predict_proba(X)

    @available_if(_refitted("decision_function"))
    def decision_function(self, X: Any) -> Any:
        """The best estimator's ``decision_function``."""
        return self.best_estimator_.decision_function(X)

    @available_if(_refitted("score_samples"))
    def score_samples(self, X: Any) -> Any:
        """The best estimator's ``score_samples``."""
        return self.best_estimator_.score_samples(X)

    def score(self, X: Any, y: Any = None) -> float:
        """``X`` scored by the search's scorer (the one ``refit`` follows) with the best
        estimator."""
        if not hasattr(self, "best_estimator_"):
            raise AttributeError("score needs the refitted best estimator: refit=True (or "
                                 "a scorer's name)")
        scorer = self.scorer_[self.refit] if self.multimetric_ else self.scorer_
        return float(scorer(self.best_estimator_, X, y))

    @property
    def classes_(self) -> Any:
        """The best estimator's classes."""
        return self.best_estimator_.classes_

    @property
    def n_features_in_(self) -> int:
        """The best estimator's number of input features."""
        return self.best_estimator_.n_features_in_

    def _run_search(self, evaluate_candidates: Any) -> None:
        """The coordinate descent, evaluating each configuration by
        ``evaluate_candidates([params])``, which returns the results so far."""
        names = self._names()
        total = check_int(self.budget, "budget", minimum=1)
        check_positive(self.slope_threshold, "slope_threshold")
        lo, hi = self._box(names)
        x = self._start(names, lo, hi)
        directions = self._direction_matrix(len(names))
        budgets = self._budgets(len(names))
        integer = [i for i, n in enumerate(names) if n.rsplit("__", 1)[-1] == "batch_size"]
        key = f"mean_test_{self.refit}" if isinstance(self.refit, str) else "mean_test_score"
        cache: dict[tuple, float] = {}
        self.path_: list[dict[str, Any]] = []

        def params_at(point: np.ndarray) -> dict:
            values = np.exp(point)
            out = {}
            for i, name in enumerate(names):
                out[name] = max(2, round(float(values[i]))) if i in integer else float(values[i])
            return out

        def evaluate(point: np.ndarray, direction: int) -> float | None:
            params = params_at(point)
            marker = tuple(params[n] for n in names)
            if marker in cache:
                return cache[marker]
            if len(self.path_) >= total:
                return None
            results = evaluate_candidates([params])
            score = float(results[key][-1])
            score = -math.inf if math.isnan(score) else score
            cache[marker] = score
            best = max([p["score"] for p in self.path_] + [score])
            self.path_.append({"params": params, "score": score, "direction": direction,
                               "best_score": best})
            return score

        first = evaluate(x, -1)
        assert first is not None  # the budget holds at least one evaluation
        current: float = first
        axis, idle = 0, 0
        while len(self.path_) < total and idle < len(names):
            before, used_before = current, len(self.path_)
            x, current = self._line_search(evaluate, x, current, directions[axis], axis,
                                           budgets[axis], lo, hi)
            used = len(self.path_) - used_before
            # slope rule: a direction that no longer improves gets a finer search
            if not used or (current - before) / used < self.slope_threshold:
                budgets[axis] *= 2
            idle = 0 if used else idle + 1  # a whole cycle with nothing new: converged
            axis = (axis + 1) % len(names)

    @staticmethod
    def _line_search(evaluate: Any, x: np.ndarray, current: float, direction: np.ndarray,
                     axis: int, budget: int, lo: np.ndarray,
                     hi: np.ndarray) -> tuple[np.ndarray, float]:
        """Bounded golden-section search (supp. Alg. 2) along ``x + gamma * direction``."""
        a, b = _segment(x, direction, lo, hi)
        best_gamma, best_score = 0.0, current
        seen: list[tuple[float, float]] = []

        def f(gamma: float) -> float | None:
            score = evaluate(np.clip(x + gamma * direction, lo, hi), axis)
            if score is not None:
                seen.append((gamma, score))
            return score

        if b - a <= 1e-12:
            return x, current
        c, d = b - INVERSE_GOLDEN * (b - a), a + INVERSE_GOLDEN * (b - a)
        fc = f(c)
        fd = f(d) if budget > 1 else None
        for _ in range(max(0, budget - 2)):
            if fc is None or fd is None:
                break
            if fc >= fd:
                b, d, fd = d, c, fc
                c = b - INVERSE_GOLDEN * (b - a)
                fc = f(c)
            else:
                a, c, fc = c, d, fd
                d = a + INVERSE_GOLDEN * (b - a)
                fd = f(d)
        for gamma, score in seen:
            if score > best_score:
                best_gamma, best_score = gamma, score
        return np.clip(x + best_gamma * direction, lo, hi), best_score


def _segment(x: np.ndarray, direction: np.ndarray, lo: np.ndarray,
             hi: np.ndarray) -> tuple[float, float]:
    """The range of ``gamma`` keeping ``x + gamma * direction`` inside ``[lo, hi]``."""
    low, high = -math.inf, math.inf
    for xi, di, li, hi_i in zip(x, direction, lo, hi, strict=True):
        if abs(di) < 1e-15:
            continue
        g1, g2 = (li - xi) / di, (hi_i - xi) / di
        low, high = max(low, min(g1, g2)), min(high, max(g1, g2))
    return low, high


def check_search_input(estimator: Any, X: Any, y: Any, scoring: Any) -> None:
    """What a search over ``estimator`` would otherwise only discover fold by fold.

    A plain dict of views cannot be split by index (scikit-learn would fail with a
    ``KeyError``); skcontrast scorers whose preconditions the estimator or the labels
    cannot meet would score NaN in every fold.
    """
    from skorch.helper import SliceDict

    from .._validation import is_view_dict
    from ..metrics import EmbeddingScorer, resolve_scoring

    scoring = resolve_scoring(scoring)
    if is_view_dict(X) and not isinstance(X, SliceDict):
        raise ValueError(f"X is a plain dict of views ({list(X)}), which cross-validation "
                         "cannot split by sample; wrap it: skorch.helper.SliceDict(**X)")
    scorers = scoring.values() if isinstance(scoring, dict) else \
        scoring if isinstance(scoring, list | tuple) else [scoring]
    for scorer in scorers:
        if isinstance(scorer, EmbeddingScorer):
            scorer.check(estimator, y, labels_known=True)


def _first(scoring: Any) -> Any:
    return next(iter(scoring), None)
