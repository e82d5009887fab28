"""Sors et al. 2021, arXiv:2112.11743, App. E at the scale of the bundled digits: how much of
cross-batch memory's gain is a change of the loss balance?

Sors et al. 2021 trains a contrastive margin loss with and without XBM (Wang et al., 2020) on
Stanford Online Products in three set-ups (Table 5):

- S1: XBM as its authors use it. The pair terms are summed per anchor (the batch loss
  is sum over pairs / b, here ``averaging='anchor'``) for the batch and for the memory,
  so the weight of the entropy (negative) part grows as the queue fills.
- S2: the balance of the batch and memory terms fixed (``averaging='separate'``) to
  the no-memory default of S1 at batch size b: Lambda_p = E|P|/b, Lambda_e = E|E|/b.
- S3: the balance re-tuned by coordinate descent (BalanceSearchCV), separately without
  and with the memory.

Here: SupConEmbedder with the margin loss (cosine distance, margin 0.5: the XBM
authors' gradients), an MLP on the 64 pixels of scikit-learn's digits, plain SGD (so the
learning rate folds into the Lambdas, Sors et al. 2021, Eq. 6), B = 32, a queue of 10 batches
started after a tenth of the steps; mAP@R and R-mAP of the held-out 40% of the digits
(Sors et al. 2021 supp. C). S3 searches 10 configurations with 2-fold mAP@R. 3 seeds, mean +- std.

    python examples/xbm_balance.py [--quick] [--out DIR]
"""

import argparse
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from skcontrast import SupConEmbedder
from skcontrast.losses import ContrastiveMargin
from skcontrast.memory import CrossBatchMemory
from skcontrast.metrics import get_scorer, map_at_r, r_map
from skcontrast.model_selection import BalanceSearchCV
from skcontrast.selectors import ShuffledBatchSelector

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--quick", action="store_true")
parser.add_argument("--out", default="examples/output")
args = parser.parse_args()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)

digits = load_digits()
X, y = (digits.data / 16).astype(np.float32), digits.target
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.4, random_state=0,
                                                    stratify=y)
b, lr = 32, 0.02
epochs, seeds, budget = (1, (0,), 2) if args.quick else (20, (0, 1, 2), 10)
if args.quick:  # a smoke run: seconds
    X_train, y_train = X_train[:300], y_train[:300]
steps = epochs * -(-len(X_train) // b)
memory = CrossBatchMemory(size=10 * b, start_step=steps // 10)
# S1's implied balance without memory: the expected positive and negative pairs per anchor
share = np.bincount(y_train) / len(y_train)
same = float((share**2).sum())
default = {"lambda_pos": (b - 1) * same, "lambda_ent": (b - 1) * (1 - same)}


def embedder(averaging, with_memory, seed, **balance):
    loss = ContrastiveMargin(0.5, distance="cosine", averaging=averaging, **balance)
    return SupConEmbedder(
        loss=loss, n_components=32, hidden_layer_sizes=(128,),
        optimizer="sgd", lr=lr, selector=ShuffledBatchSelector(b), max_epochs=epochs,
        memory=memory if with_memory else None, random_state=seed, device="cpu")


def scores(est):
    H = est.transform(X_test)
    return map_at_r(H, y_test), r_map(H, y_test)


rows = {}
for setup in ("S1", "S2", "S3"):
    for with_memory in (False, True):
        values = []
        for seed in seeds:
            if setup == "S1":
                est = embedder("anchor", with_memory, seed).fit(X_train, y_train)
            elif setup == "S2":
                est = embedder("separate", with_memory, seed, **default).fit(X_train, y_train)
            else:
                search = BalanceSearchCV(
                    embedder("separate", with_memory, seed, **default),
                    param_names=("loss__lambda_pos", "loss__lambda_ent"), budget=budget, cv=2,
                    bounds={f"loss__{k}": (v / 10, v * 10) for k, v in default.items()},
                    scoring=get_scorer("map@r"),
                    n_jobs=1 if args.quick else 2).fit(X_train, y_train)
                est = search.best_estimator_
            values.append(scores(est))
        rows[setup, with_memory] = np.array(values)
        print(f"  {setup} {'with' if with_memory else 'without'} XBM: mAP@R "
              f"{rows[setup, with_memory][:, 0].mean():.3f}", flush=True)

lines = [f"B={b}, {epochs} epochs, SGD lr {lr}, queue {memory.size} embeddings from step "
         f"{memory.start_step}; default balance (S2) Lambda_p={default['lambda_pos']:.2f}, "
         f"Lambda_e={default['lambda_ent']:.2f}; {len(seeds)} seed(s)",
         f"{'set-up':<7} {'mAP@R without':>15} {'mAP@R with':>15} {'R-mAP without':>15} "
         f"{'R-mAP with':>15} {'XBM gain (mAP@R)':>17}"]
for setup in ("S1", "S2", "S3"):
    without, with_ = rows[setup, False], rows[setup, True]
    cells = [f"{v[:, i].mean():.3f} ± {v[:, i].std():.3f}"
             for i in (0, 1) for v in (without, with_)]
    gain = with_[:, 0] - without[:, 0]
    lines.append(f"{setup:<7} " + " ".join(f"{c:>15}" for c in cells)
                 + f" {gain.mean():>+9.3f} ± {gain.std():.3f}")
text = "\n".join(lines)
print()
print(text)
(out / "xbm_balance.txt").write_text(text + "\n")
print(f"table: {out / 'xbm_balance.txt'}")
