"""Reproduce Sreenivasan et al. 2023, openreview.net/forum?id=7n2dNATSHeQ, Theorem 2: with B=2, any
strict subset of the C(N,2) batches has a minimiser that is not the simplex ETF.

Gradient descent on the mean loss of all pairs except (0, 1), against all pairs, from the
same start, for N in {4, 6, 8} and d = 2N. The proof's construction predicts that u_0
and u_1, never contrasted, collapse onto each other.

    python examples/reproduce_theorem2.py [--quick] [--out DIR]
"""

import argparse
import itertools
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from skcontrast.plotting import plot_gram
from skcontrast.selectors import ExhaustiveBatchSelector, PredefinedBatchSelector
from skcontrast.simulation import optimize_embeddings

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--quick", action="store_true")
parser.add_argument("--out", default="examples/output")
args = parser.parse_args()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)

steps = 10 if args.quick else 2000  # quick: a smoke run
sizes = (4, 6, 8)
fig, axes = plt.subplots(2, len(sizes), figsize=(3.2 * len(sizes), 6.2))
print(f"{'N':>3} {'batches':>14} {'etf_gap':>8} {'u_0.u_1':>8}")
for col, n in enumerate(sizes):
    pairs = [list(p) for p in itertools.combinations(range(n), 2)]
    for row, (name, selector) in enumerate([("all pairs", ExhaustiveBatchSelector(2)),
                                            ("all but (0,1)", PredefinedBatchSelector(pairs[1:]))]):
        result = optimize_embeddings(n, 2 * n, selector, steps=steps, update="epoch",
                                     random_state=0)
        print(f"{n:>3} {name:>14} {result.final_gap:>8.3f} {result.U[0] @ result.U[1]:>8.3f}")
        plot_gram(result.U, result.V, ax=axes[row, col], colorbar=False,
                  title=f"N={n}, {name}\ngap {result.final_gap:.2f}")
fig.tight_layout()
fig.savefig(out / "theorem2.png", dpi=110)
print(f"figure: {out / 'theorem2.png'}")
