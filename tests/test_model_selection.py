"""BalanceSearchCV: coordinate descent along Sors et al. 2021's directions, as a real
sklearn search."""

import math

import numpy as np
import pytest
from sklearn.base import BaseEstimator

from skcontrast import ContrastiveEmbedder, SupConEmbedder
from skcontrast.datasets import make_paired_gaussians
from skcontrast.metrics import get_scorer
from skcontrast.model_selection import BALANCE_DIRECTIONS, BalanceSearchCV

BOUNDS = {"lambda_pos": (1e-2, 1e2), "lambda_ent": (1e-2, 1e2), "batch_size": (2, 4096)}
START = {"lambda_pos": 1.0, "lambda_ent": 1.0, "batch_size": 32}
NAMES = ("lambda_pos", "lambda_ent", "batch_size")  # the toy's flat names
TARGET = np.array([0.5, 0.0, 4.0])  # optimum in r = A log h
CURVATURE = np.array([100.0, 1.0, 10.0])  # skewed: very different along each direction


class QuadraticInR(BaseEstimator):
    """Not a skcontrast estimator: its score is a convex quadratic in r = A log h whose
    Hessian has the rows of A (Sors et al. 2021, Eq. 9) as eigenvectors."""

    def __init__(self, lambda_pos=1.0, lambda_ent=1.0, batch_size=32):
        self.lambda_pos = lambda_pos
        self.lambda_ent = lambda_ent
        self.batch_size = batch_size

    def fit(self, X, y=None):
        return self

    def score(self, X, y=None):
        r = BALANCE_DIRECTIONS @ np.log([self.lambda_pos, self.lambda_ent, self.batch_size])
        return -float(np.sum(CURVATURE * (r - TARGET) ** 2))


def search(directions, budget, per_direction=20):
    return BalanceSearchCV(QuadraticInR(), param_names=NAMES, bounds=BOUNDS, start=START,
                           directions=directions,
                           budget=budget, budget_per_direction=per_direction,
                           cv=2).fit(np.zeros((8, 1)))


def evaluations_to_reach(path, tolerance):
    return next((i + 1 for i, p in enumerate(path) if p["best_score"] >= -tolerance), None)


def test_reaches_the_optimum_of_a_quadratic_in_three_line_searches():
    result = search("balance", budget=1 + 3 * 20)
    directions_used = [p["direction"] for p in result.path_]
    # the start, then one line search per row of A (the last one may reuse cached
    # configurations: batch sizes are rounded to integers)
    assert directions_used[:41] == [-1] + [0] * 20 + [1] * 20
    fourth = next(i for i in range(41, len(directions_used)) if directions_used[i] != 2)
    assert all(d == 2 for d in directions_used[41:fourth])
    assert result.path_[fourth - 1]["best_score"] > -1e-3
    optimum = np.exp(np.linalg.solve(BALANCE_DIRECTIONS, TARGET))
    best = result.best_params_
    # tolerance: batch sizes are integers, so b=55 instead of 54.6 costs 10*log(55/54.6)^2
    assert result.best_score_ > -1e-3
    np.testing.assert_allclose([best["lambda_pos"], best["lambda_ent"]], optimum[:2],
                               rtol=1e-2)
    assert best["batch_size"] == 55 and isinstance(best["batch_size"], int)


def test_identity_directions_need_more_evaluations_on_skewed_axes():
    balance = search("balance", budget=200)
    identity = search("identity", budget=200)
    needed_balance = evaluations_to_reach(balance.path_, 1e-2)
    needed_identity = evaluations_to_reach(identity.path_, 1e-2)
    assert needed_balance is not None and needed_balance <= 61
    assert needed_identity is None or needed_identity > 2 * needed_balance
    assert identity.path_[60]["best_score"] < balance.path_[60]["best_score"]


def test_slope_rule_doubles_a_stalled_direction_and_budget_is_respected():
    result = search("balance", budget=25, per_direction=3)
    assert len(result.cv_results_["params"]) == 25
    per_line = []
    for p in result.path_[1:]:
        if per_line and per_line[-1][0] == p["direction"]:
            per_line[-1][1] += 1
        else:
            per_line.append([p["direction"], 1])
    # the learning-rate direction starts at its optimum: no gain, so its budget doubles
    lr_lines = [count for direction, count in per_line if direction == 1]
    assert len(lr_lines) >= 2 and lr_lines[1] > lr_lines[0]


def test_two_parameter_search_and_warm_start_from_the_estimator():
    est = QuadraticInR(lambda_pos=0.5, lambda_ent=2.0, batch_size=55)
    result = BalanceSearchCV(est, param_names=("lambda_pos", "lambda_ent"), bounds=BOUNDS,
                             budget=5, cv=2).fit(np.zeros((4, 1)))
    assert result.path_[0]["params"] == {"lambda_pos": 0.5, "lambda_ent": 2.0}
    assert set(result.best_params_) == {"lambda_pos", "lambda_ent"}


@pytest.mark.slow
def test_a_real_search_over_contrastive_embedder():
    X, _ = make_paired_gaussians(150, 6, random_state=0)
    flat = X.reshape(len(X), -1)
    est = ContrastiveEmbedder(n_components=4, hidden_layer_sizes=(16,), max_epochs=2,
                              random_state=0)
    scoring = {"r1": get_scorer("recall@1"), "align": get_scorer("alignment")}
    result = BalanceSearchCV(est, bounds={"loss__lambda_pos": (0.1, 10),
                                          "loss__lambda_ent": (0.1, 10),
                                          "batch_size": (8, 64)},
                             budget=5, cv=2, scoring=scoring, refit="r1", n_jobs=2).fit(flat)
    assert len(result.cv_results_["params"]) == 5
    assert "mean_test_align" in result.cv_results_
    assert result.best_score_ == max(result.cv_results_["mean_test_r1"])
    assert result.transform(flat).shape == (150, 4)
    assert all(isinstance(p["batch_size"], int) for p in result.cv_results_["params"])


def test_supcon_with_the_margin_loss():
    X, y = make_paired_gaussians(120, 5, n_clusters=4, random_state=1)
    est = SupConEmbedder(n_components=3, hidden_layer_sizes=(8,), max_epochs=2,
                         loss="contrastive_margin", random_state=0)
    result = BalanceSearchCV(est, param_names=("loss__lambda_pos", "loss__lambda_ent"),
                             budget=3, cv=2).fit(X[:, 0], y)
    assert math.isfinite(result.best_score_)


@pytest.mark.parametrize("kwargs,message", [
    ({"bounds": {"lambda_pos": (0, 1), "lambda_ent": (0.1, 1), "batch_size": (8, 64)}},
     r"bounds\['lambda_pos'\] must be a positive"),
    ({"bounds": {"lambda_pos": (2, 1), "lambda_ent": (0.1, 1), "batch_size": (8, 64)}},
     "low < high"),
    ({"start": {"lambda_pos": 1e6}}, r"start\['lambda_pos'\]=1000000.0 is outside"),
    ({"budget": 0}, "budget must be >= 1"),
    ({"param_names": ("lambda_pos", "weight_decay")}, r"\['weight_decay'\] are not parameters"),
    ({"directions": [[1, 1, 0], [1, 1, 0], [0, 0, 1]]}, "invertible"),
])
def test_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BalanceSearchCV(QuadraticInR(), **{"param_names": NAMES, **kwargs}).fit(
            np.zeros((4, 1)))


class SeededQuadratic(QuadraticInR):
    """A positive score (as R-mAP) from QuadraticInR, scaled a little per random_state."""

    def __init__(self, lambda_pos=1.0, lambda_ent=1.0, batch_size=32, random_state=None):
        super().__init__(lambda_pos, lambda_ent, batch_size)
        self.random_state = random_state

    def score(self, X, y=None):
        return math.exp(super().score(X, y) / 100) * (1 - 0.05 * (self.random_state or 0))


def test_searches_compared_at_equal_budget():
    from skcontrast.model_selection import balance_searches, best_levels, search_curves

    bounds = {"lambda_pos": (1e-2, 1e2), "lambda_ent": (1e-2, 1e2)}
    searches = balance_searches(SeededQuadratic(), bounds=bounds, budget=9, seeds=(0, 1),
                                starts={"centre": None, "corner": {"lambda_pos": 50.0,
                                                                   "lambda_ent": 0.02}})
    assert list(searches) == ["BalanceSearchCV, centre", "BalanceSearchCV, corner",
                              "GridSearchCV", "RandomizedSearchCV"]
    assert all(len(runs) == 2 for runs in searches.values())
    assert [s.estimator.random_state for s in searches["GridSearchCV"]] == [0, 1]
    curves = search_curves(searches, np.zeros((8, 1)))
    for c in curves.values():
        assert c.curves.shape == (2, 9)
        assert (np.diff(c.curves, axis=1) >= 0).all()  # best so far never decreases
    grid = curves["GridSearchCV"]
    by_hand = np.maximum.accumulate(searches["GridSearchCV"][1].cv_results_["mean_test_score"])
    np.testing.assert_allclose(grid.curves[1], by_hand)
    mean, std = grid.auc(4)
    assert mean == pytest.approx(grid.curves[:, :4].mean(1).mean())
    assert std == pytest.approx(grid.curves[:, :4].mean(1).std())
    levels = best_levels(curves)
    assert levels.shape == (2,)
    assert levels[1] == pytest.approx(0.95 * max(c.curves[1, -1] for c in curves.values()))
    best = max(curves.values(), key=lambda c: c.curves[:, -1].sum())
    first = [np.argmax(best.curves[r] >= levels[r]) + 1 for r in range(2)]
    assert best.runs_to_reach(levels) == pytest.approx(np.mean(first))
    assert 1 <= np.mean(first) <= 9
    assert grid.runs_to_reach(np.inf) == np.inf


def test_balance_search_takes_skcontrast_scorer_names():
    X, y = make_paired_gaussians(90, 5, n_clusters=3, random_state=0)
    est = ContrastiveEmbedder(n_components=3, hidden_layer_sizes=(8,), max_epochs=1,
                              random_state=0)
    names = ("loss__lambda_pos", "loss__lambda_ent")
    one = BalanceSearchCV(est, param_names=names, budget=2, cv=2, scoring="map@r").fit(X, y)
    assert np.isfinite(one.best_score_)
    several = BalanceSearchCV(est, param_names=names, budget=2, cv=2,
                              scoring=["recall@1", "map@r"], refit="map@r").fit(X, y)
    assert "mean_test_recall@1" in several.cv_results_
    with pytest.raises(ValueError, match="'ncc_accuracy' scorer needs labels y"):
        BalanceSearchCV(est, param_names=names, budget=2, cv=2,
                        scoring="ncc_accuracy").fit(X)


def test_grid_search_takes_the_scorers_by_get_scorer():
    from sklearn.model_selection import GridSearchCV

    X, y = make_paired_gaussians(90, 5, n_clusters=3, random_state=0)
    est = ContrastiveEmbedder(n_components=3, hidden_layer_sizes=(8,), max_epochs=1,
                              random_state=0)
    grid = GridSearchCV(est, {"loss__temperature": [0.1, 0.3]}, cv=2,
                        scoring=get_scorer("map@r")).fit(X, y)
    assert np.isfinite(grid.best_score_)


def test_the_results_are_those_of_grid_search_over_the_configurations_it_chose():
    """Built on scikit-learn's public API (it subclassed the private ``BaseSearchCV``):
    each configuration is cross-validated by ``GridSearchCV``, and the merged results
    rank, pick and refit as one ``GridSearchCV`` over the same configurations does."""
    from sklearn.model_selection import GridSearchCV, KFold

    result = search("balance", budget=7, per_direction=3)
    chosen = result.cv_results_["params"]
    grid = GridSearchCV(QuadraticInR(), [{k: [v] for k, v in p.items()} for p in chosen],
                        cv=KFold(2)).fit(np.zeros((8, 1)))
    assert grid.cv_results_["params"] == chosen
    for key in ("mean_test_score", "split0_test_score", "rank_test_score"):
        np.testing.assert_array_equal(result.cv_results_[key], grid.cv_results_[key])
    assert result.best_index_ == grid.best_index_
    assert result.best_params_ == grid.best_params_
    assert result.best_score_ == grid.best_score_
    assert result.best_estimator_.get_params() == grid.best_estimator_.get_params()
    assert result.score(np.zeros((2, 1))) == grid.score(np.zeros((2, 1)))
    assert result.n_splits_ == 2 and not result.multimetric_


class ScoreOfRows(QuadraticInR):
    """Scores the rows it is given (their sum): a fold's score shows which rows it held."""

    def score(self, X, y=None):
        return float(np.sum(X))


def test_every_configuration_is_cross_validated_on_the_same_folds():
    from sklearn.model_selection import KFold

    X = np.arange(20, dtype=float)[:, None]
    result = BalanceSearchCV(ScoreOfRows(), param_names=NAMES, bounds=BOUNDS, start=START,
                             budget=4, cv=KFold(3, shuffle=True)).fit(X)
    for fold in range(3):
        scores = result.cv_results_[f"split{fold}_test_score"]
        assert len(set(scores)) == 1, scores  # a fresh shuffle per configuration differs
    refit_off = BalanceSearchCV(QuadraticInR(), param_names=NAMES, bounds=BOUNDS,
                                budget=3, cv=2, refit=False).fit(np.zeros((8, 1)))
    assert not hasattr(refit_off, "best_estimator_") and not hasattr(refit_off, "transform")
    assert refit_off.best_params_ == refit_off.cv_results_["params"][refit_off.best_index_]
