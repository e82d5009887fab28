"""Reproduce Cho et al. 2023, arXiv:2307.05906, Sec. 5.1 / Fig. 2: OSGD converges faster than SGD on
a toy problem.

N=4 pairs in d=2, started at the toy's configuration (u_1 = (cos e, sin e),
u_2 = (cos e, -sin e), u_3 = -u_1, u_4 = -u_2, with v_i = u_i, e = 0.05). The optimum,
the cross-polytope, has full-batch loss 2 log(1 + 2/e + 1/e^2) = 1.253. SGD draws a
random pair of samples each step (Alg. 4), OSGD takes the pair of largest loss among all
C(4, 2) (Alg. 6 with k = 6, q = 1), gradient descent uses the full batch. Here the
vectors are free (the paper parametrises them by angles); the optimum is the same.

    python examples/reproduce_osgd_toy.py [--quick] [--out DIR]
"""

import argparse
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from skcontrast.selectors import FullBatchSelector, OSGDSelector, RandomBatchSelector
from skcontrast.simulation import optimize_embeddings

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--quick", action="store_true")
parser.add_argument("--out", default="examples/output")
args = parser.parse_args()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)

eps = 0.05
u = np.array([[np.cos(eps), np.sin(eps)], [np.cos(eps), -np.sin(eps)],
              [-np.cos(eps), -np.sin(eps)], [-np.cos(eps), np.sin(eps)]])
optimum = 2 * math.log(1 + 2 / math.e + math.e**-2)
steps, seeds = (100, 1) if args.quick else (600, 10)  # quick: OSGD reaches the optimum once
methods = {"OSGD": OSGDSelector(2, k=6, q=1, candidates="random", n_groups=1),
           "SGD": RandomBatchSelector(2, n_batches=1),
           "full-batch GD": FullBatchSelector()}
fig, ax = plt.subplots(figsize=(6, 4))
print(f"optimum (cross-polytope, N=4, d=2): {optimum:.4f}")
print(f"{'method':<14} {'final loss':>11} {'steps to within 1e-3 of the optimum':>38}")
for name, selector in methods.items():
    runs = [optimize_embeddings(4, 2, selector, steps=steps, lr=0.1, init=(u, u),
                                random_state=seed) for seed in range(seeds)]
    losses = np.array([r.losses for r in runs])
    reached = [int(np.argmax(r < optimum + 1e-3)) + 1 if (r < optimum + 1e-3).any() else None
               for r in losses]
    done = [s for s in reached if s is not None]
    when = f"{np.mean(done):.0f} (mean of {len(done)}/{seeds})" if done else "not reached"
    print(f"{name:<14} {losses[:, -1].mean():>11.4f} {when:>38}")
    ax.plot(np.arange(1, steps + 1), losses.mean(0), label=name)
ax.axhline(optimum, color="k", ls="--", lw=1, label="optimum 1.253")
ax.set(xlabel="step", ylabel="full-batch loss", title="Cho et al. 2023 toy: N=4, d=2, B=2")
ax.legend()
fig.tight_layout()
fig.savefig(out / "osgd_toy.png", dpi=110)
print(f"figure: {out / 'osgd_toy.png'}")
