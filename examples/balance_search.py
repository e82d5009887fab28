"""Tune the loss balance on split-view digits: BalanceSearchCV vs grid vs random search.

Sors et al. 2021, arXiv:2112.11743, Table 1 compares HPO methods by the best score reached as a
function of the number of configurations tried: AUC@k (mean of that curve over the first k runs) and
n-95 (runs needed to reach 95% of the best score any method found). Here the three
searches of scikit-learn's API tune (Lambda_p, Lambda_e) of a ContrastiveEmbedder trained
with plain SGD (so that, as in Sors et al. 2021, Eq. 6, the learning rate folds into the Lambdas)
on the left/right halves of sklearn's digits, scored by pair-retrieval recall@1 with
3-fold cross-validation, at the same budget of configurations; 3 seeds (model and folds),
mean +- std. n-95 is the mean over seeds of the configurations needed to reach 95% of the
best score any search found with that seed (inf when a seed never got there).

    python examples/balance_search.py [--quick] [--out DIR]
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from skcontrast import ContrastiveEmbedder
from skcontrast.datasets import load_digit_views
from skcontrast.losses import SymmetricInfoNCE
from skcontrast.metrics import get_scorer
from skcontrast.model_selection import balance_searches, best_levels, search_curves
from skcontrast.selectors import ShuffledBatchSelector

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--quick", action="store_true")
parser.add_argument("--out", default="examples/output")
args = parser.parse_args()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)

X, _ = load_digit_views()
X = X.reshape(len(X), -1)
if args.quick:  # a smoke run: one batch of 64 per training fold, two configurations
    X, budget, epochs, seeds = X[:96], 2, 1, (0,)
else:
    X, budget, epochs, seeds = X[:1200], 16, 10, (0, 1, 2)
# with SGD at lr 1, Lambda is the step size of each term
estimator = ContrastiveEmbedder(n_components=16, hidden_layer_sizes=(64,), optimizer="sgd",
                                lr=1.0, max_epochs=epochs, loss=SymmetricInfoNCE(0.2),
                                selector=ShuffledBatchSelector(64))
# the default start, the log-centre of the box, happens to lie on the diagonal
# lambda_pos = lambda_ent; the second run starts far from it
starts = {"centre start": None,
          "off-diagonal start": {"loss__lambda_pos": 0.3, "loss__lambda_ent": 0.003}}
searches = balance_searches(estimator, bounds={"loss__lambda_pos": (1e-3, 1.0),
                                               "loss__lambda_ent": (1e-3, 1.0)},
                            budget=budget, seeds=seeds, starts=starts,
                            scoring=get_scorer("recall@1"), cv=3,
                            n_jobs=1 if args.quick else 2)  # no worker start-up in a smoke run
curves = search_curves(searches, X)
levels = best_levels(curves)  # per seed: 95% of the best any search reached
half = max(1, budget // 2)
print(f"{len(seeds)} seed(s), {budget} configurations per search, 3-fold recall@1")
print(f"{'method':<36} {f'AUC@{half}':>14} {f'AUC@{budget}':>14} {'n-95':>6}")
for name, c in curves.items():
    (a_half, s_half), (a_all, s_all) = c.auc(half), c.auc(budget)
    print(f"{name:<36} {a_half:>7.3f} ± {s_half:.3f} {a_all:>7.3f} ± {s_all:.3f} "
          f"{c.runs_to_reach(levels):>6.1f}")
    plt.plot(np.arange(1, c.curves.shape[1] + 1), c.curves.mean(0), marker="o", label=name)
plt.axhline(levels.mean(), color="k", ls=":", lw=1, label="95% of the best (mean)")
plt.xlabel("configurations tried (each a 3-fold CV)")
plt.ylabel("best cross-validated recall@1 so far")
plt.title("Loss-balance search on split-view digits")
plt.legend(fontsize=8)
plt.tight_layout()
plt.savefig(out / "balance_search.png", dpi=110)
print(f"figure: {out / 'balance_search.png'}")
