"""Reproduce Sreenivasan et al. 2023, openreview.net/forum?id=7n2dNATSHeQ, Fig. 2 / Cho et al. 2023,
arXiv:2307.05906, Fig. 4: which batches reach the optimal geometry?

N=8 pairs of unit vectors, optimised directly (no network) with lr 0.5 and B=2, in
d=2N (optimum: simplex ETF) and d=N/2 (optimum: cross-polytope). Every method starts
from the same random embeddings. Prints the final distance to the optimum
(mean ± std over seeds) after 500 steps, and after 5000 steps of gradient descent for
the full-batch and all-C(N,B) objectives; writes the Gram heat maps and the curves.

    python examples/reproduce_batch_selection.py [--quick] [--out DIR]
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from skcontrast import geometry
from skcontrast.plotting import plot_gram
from skcontrast.simulation import compare_selectors, format_table, paper_methods

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--quick", action="store_true", help="few steps and one seed")
parser.add_argument("--out", default="examples/output")
args = parser.parse_args()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)

N, B = 8, 2
steps, long_steps, seeds = (10, 20, 1) if args.quick else (500, 5000, 5)
fig, axes = plt.subplots(2, 9, figsize=(19, 5.2))
curves, curve_axes = plt.subplots(1, 2, figsize=(11, 4))
for row, d in enumerate((2 * N, N // 2)):
    rows, first = compare_selectors(N, d, B, steps=steps, seeds=seeds)
    print(format_table(rows, f"\nN={N}, d={d}, B={B}: {steps} steps, {seeds} seed(s)"))
    methods = paper_methods(N, B)
    gd = {name: methods[name] for name in ("full batch", "all C(N,B)")}
    long_rows, _ = compare_selectors(N, d, B, steps=long_steps, seeds=seeds, methods=gd,
                                     record_every=100)
    print(format_table(long_rows, f"gradient descent run to {long_steps} steps"))
    kind = geometry.reference_for(N, d)
    reference = geometry.simplex_etf(N, d) if kind == "etf" else geometry.cross_polytope(N, d)
    plot_gram(reference, ax=axes[row, 0], title=f"d={d}: {kind}", colorbar=False)
    for ax, (name, result) in zip(axes[row, 1:], first.items(), strict=True):
        plot_gram(result.U, result.V, ax=ax, colorbar=False,
                  title=f"{name}\ngap {result.final_gap:.2f}")
        curve_axes[row].plot([h["step"] for h in result.history], result.gaps, label=name)
    curve_axes[row].set(title=f"N={N}, d={d}", xlabel="step", ylabel="etf_gap", yscale="log")
for ax in axes.ravel():
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_xlabel("")
    ax.set_ylabel("")
curve_axes[1].legend(fontsize=8)
fig.tight_layout()
fig.savefig(out / "batch_selection_gram.png", dpi=110)
curves.tight_layout()
curves.savefig(out / "batch_selection_curves.png", dpi=110)
print(f"\nfigures: {out / 'batch_selection_gram.png'}, {out / 'batch_selection_curves.png'}")
