"""Tune the loss balance on split-view digits: BalanceSearchCV vs grid vs random search.

Seed 001 Table 1 compares HPO methods by the best score reached as a function of the
number of configurations tried: AUC@k (mean of that curve over the first k runs) and
n-95 (runs needed to reach 95% of the best score any method found). Here the three
searches of scikit-learn's API tune (Lambda_p, Lambda_e) of a ContrastiveEmbedder trained
with plain SGD (so that, as in seed 001 Eq. 6, the learning rate folds into the Lambdas)
on the left/right halves of sklearn's digits, scored by pair-retrieval recall@1 with
3-fold cross-validation, at the same budget of configurations.

    python examples/balance_search.py [--quick] [--out DIR]
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from scipy.stats import loguniform
from sklearn.model_selection import GridSearchCV, RandomizedSearchCV

from skcontrast import ContrastiveEmbedder
from skcontrast.datasets import load_digit_views
from skcontrast.model_selection import BalanceSearchCV
from skcontrast.selectors import ShuffledBatchSelector

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--quick", action="store_true")
parser.add_argument("--out", default="examples/output")
args = parser.parse_args()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)

X, _ = load_digit_views()
X = X.reshape(len(X), -1)
if args.quick:
    X, side, epochs, random_seeds = X[:300], 2, 2, 1
else:
    X, side, epochs, random_seeds = X[:1200], 4, 10, 3
budget = side * side
low, high = 1e-3, 1.0  # with SGD at lr 1, Lambda is the step size of each term
estimator = ContrastiveEmbedder(n_components=16, hidden_layer_sizes=(64,), optimizer="sgd",
                                lr=1.0, max_epochs=epochs, temperature=0.2,
                                selector=ShuffledBatchSelector(64), random_state=0)
common = {"cv": 3, "n_jobs": 2}
grid_values = np.geomspace(low, high, side)
balance = {"param_names": ("lambda_pos", "lambda_ent"), "budget": budget,
           "bounds": {"lambda_pos": (low, high), "lambda_ent": (low, high)}, **common}
searches = {
    # the default start, the log-centre of the box, happens to lie on the diagonal
    # lambda_pos = lambda_ent; the second run starts far from it
    "BalanceSearchCV": [BalanceSearchCV(estimator, **balance)],
    "BalanceSearchCV (off-diagonal start)": [BalanceSearchCV(
        estimator, start={"lambda_pos": 0.3, "lambda_ent": 0.003}, **balance)],
    "GridSearchCV": [GridSearchCV(estimator, {"lambda_pos": grid_values,
                                              "lambda_ent": grid_values}, **common)],
    "RandomizedSearchCV": [RandomizedSearchCV(
        estimator, {"lambda_pos": loguniform(low, high), "lambda_ent": loguniform(low, high)},
        n_iter=budget, random_state=seed, **common) for seed in range(random_seeds)],
}
curves = {}
for name, runs in searches.items():
    trajectories = []
    for search in runs:
        search.fit(X)
        scores = np.nan_to_num(search.cv_results_["mean_test_score"], nan=0.0)
        trajectories.append(np.maximum.accumulate(scores[:budget]))
    curves[name] = np.mean(trajectories, axis=0)
    best = max(runs, key=lambda s: s.best_score_)
    print(f"{name:<36} best recall@1 {best.best_score_:.3f} at "
          f"lambda_pos={best.best_params_['lambda_pos']:.3g}, "
          f"lambda_ent={best.best_params_['lambda_ent']:.3g}")

overall = max(c[-1] for c in curves.values())
half = max(1, budget // 2)
print(f"\n{'method':<36} {f'AUC@{half}':>8} {f'AUC@{budget}':>8} {'n-95':>6}")
for name, curve in curves.items():
    reached = np.flatnonzero(curve >= 0.95 * overall)
    n95 = str(reached[0] + 1) if len(reached) else f">{budget}"
    print(f"{name:<36} {curve[:half].mean():>8.3f} {curve.mean():>8.3f} {n95:>6}")
    plt.plot(np.arange(1, budget + 1), curve, marker="o", label=name)
plt.axhline(0.95 * overall, color="k", ls=":", lw=1, label="95% of the best")
plt.xlabel("configurations tried (each a 3-fold CV)")
plt.ylabel("best cross-validated recall@1 so far")
plt.title("Loss-balance search on split-view digits")
plt.legend()
plt.tight_layout()
plt.savefig(out / "balance_search.png", dpi=110)
print(f"figure: {out / 'balance_search.png'}")
