"""Searches of the loss balance compared at equal budget (Sors et al. 2021, arXiv:2112.11743, Sec. 6
and Table 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, KFold, RandomizedSearchCV

from .._validation import check_int
from ._balance import BalanceSearchCV


@dataclass
class SearchCurves:
    """Best score found so far after each configuration, for each run of one search.

    Attributes
    ----------
    curves : ndarray of shape (n_runs, budget)
        ``curves[r, i]``: the best cross-validated score among the first ``i + 1``
        configurations of run ``r`` (failed fits count as no improvement).
    best_params : list of dict
        The best configuration of each run.
    """

    curves: np.ndarray
    best_params: list = field(default_factory=list)

    def auc(self, k: int | None = None) -> tuple[float, float]:
        """AUC@k of Sors et al. 2021, Table 1: the mean of the curve over the first ``k``
        configurations; mean and standard deviation over runs."""
        k = self.curves.shape[1] if k is None else check_int(k, "k", minimum=1)
        per_run = self.curves[:, :k].mean(1)
        return float(per_run.mean()), float(per_run.std())

    def runs_to_reach(self, level: Any) -> float:
        """n-95 of Sors et al. 2021, Table 1 with ``level`` = 95% of the best score: the mean over
        runs of the configurations needed to reach it (``inf`` if some run never did).

        ``level`` is one number, or one per run (e.g. from :func:`best_levels`).
        """
        reached = self.curves >= np.reshape(level, (-1, 1))
        first = np.where(reached.any(1), reached.argmax(1) + 1, np.inf)
        return float(first.mean())


def best_levels(curves: dict[str, SearchCurves], fraction: float = 0.95) -> np.ndarray:
    """Per run (seed): ``fraction`` of the best score any search reached on it, the level
    of Sors et al. 2021's n-95 (runs share a seed across searches in :func:`balance_searches`),
    for positive scores such as R-mAP or recall@1."""
    return fraction * np.max([c.curves[:, -1] for c in curves.values()], axis=0)


def balance_searches(estimator: Any, *, bounds: dict, budget: int, seeds: Any = (0, 1, 2),
                     starts: dict | None = None, scoring: Any = None, cv: int = 3,
                     n_jobs: int | None = None) -> dict[str, list]:
    """The searches of Sors et al. 2021's comparison, at the same budget of configurations.

    For each seed (the estimator's ``random_state`` and a shuffled ``KFold``):
    :class:`BalanceSearchCV` from each point of ``starts`` (``{label: start}``, default
    the log-centre of the box), ``GridSearchCV`` on a log-spaced grid of about
    ``budget`` points, and ``RandomizedSearchCV`` with log-uniform draws.

    Parameters
    ----------
    estimator : estimator
        With the two parameters named in ``bounds``.
    bounds : dict
        ``{name: (low, high)}`` of the two balance parameters (positive).
    budget : int
        Configurations per search (the grid uses ``floor(sqrt(budget))`` per axis).
    seeds, starts, scoring, cv, n_jobs

    Returns
    -------
    dict of list
        Unfitted searches, one per seed, keyed by method; pass to :func:`search_curves`.
    """
    from scipy.stats import loguniform

    budget = check_int(budget, "budget", minimum=1)
    names = list(bounds)
    if len(names) != 2:
        raise ValueError(f"bounds must name the two balance parameters; got {names}")
    side = max(1, int(np.sqrt(budget)))
    starts = {"centre start": None} if starts is None else starts
    out: dict[str, list] = {}
    for seed in seeds:
        est = clone(estimator).set_params(random_state=seed)
        folds = KFold(cv, shuffle=True, random_state=seed)
        common = {"scoring": scoring, "cv": folds, "n_jobs": n_jobs}
        for label, start in starts.items():
            out.setdefault(f"BalanceSearchCV, {label}", []).append(BalanceSearchCV(
                est, param_names=tuple(names), bounds=bounds, budget=budget, start=start,
                **common))
        grid = {name: np.geomspace(bounds[name][0], bounds[name][1], side) for name in names}
        out.setdefault("GridSearchCV", []).append(GridSearchCV(est, grid, **common))
        space = {name: loguniform(*bounds[name]) for name in names}
        out.setdefault("RandomizedSearchCV", []).append(RandomizedSearchCV(
            est, space, n_iter=budget, random_state=seed, **common))
    return out


def search_curves(searches: dict[str, list], X: Any, y: Any = None) -> dict[str, SearchCurves]:
    """Fit every search and record its best-so-far curve (Sors et al. 2021, Fig. 4 and Table 1).

    The grid, whose size is a square, is padded with its final value up to the longest
    search, so that the curves share one axis.
    """
    results = {}
    for name, runs in searches.items():
        curves, best = [], []
        for search in runs:
            search.fit(X, y)
            scores = np.nan_to_num(search.cv_results_["mean_test_score"], nan=-np.inf)
            curves.append(np.maximum.accumulate(scores))
            best.append(search.best_params_)
        results[name] = (curves, best)
    width = max(len(c) for curves, _ in results.values() for c in curves)
    return {name: SearchCurves(np.array([np.pad(c, (0, width - len(c)), mode="edge")
                                         for c in curves]), best)
            for name, (curves, best) in results.items()}
