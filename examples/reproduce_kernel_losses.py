"""Reproduce Koromilas et al. 2024, arXiv:2405.18045: InfoNCE variants, DHEL and KCL share the
simplex-ETF minimiser when the number of samples M <= d + 1.

M=8 pairs, full-batch projected gradient descent (lr 0.5, 500 steps) from the same
random starts for each loss; prints the final distance to the simplex ETF (mean over
seeds) and how many seeds got within 1e-2 of it. The shared minimiser is a statement
about the optimum: gradient descent can stall elsewhere (see the docs).

    python examples/reproduce_kernel_losses.py [--quick] [--out DIR]
"""

import argparse

import numpy as np

from skcontrast.losses import LOSSES
from skcontrast.simulation import optimize_embeddings

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--quick", action="store_true")
parser.add_argument("--out", default="examples/output")
args = parser.parse_args()

steps, seeds = (20, 1) if args.quick else (500, 3)  # quick: a smoke run of every loss
# the papers' theory is at temperature 1; KCL's kernel bandwidth is the authors' 0.5
losses = {"symmetric_info_nce": 1.0, "info_nce": 1.0, "nt_xent": 1.0, "dcl": 1.0,
          "dhel": 1.0, "kcl": 0.5}
print(f"M=8 pairs, {steps} full-batch steps, {seeds} seed(s): final etf_gap (seeds at the ETF)")
print(f"{'loss':<20} {'d=7 (M = d+1)':>18} {'d=16':>18}")
for name, temperature in losses.items():
    cells = []
    for d in (7, 16):
        loss = LOSSES[name](temperature=temperature)
        gaps = [optimize_embeddings(8, d, loss=loss, steps=steps, lr=0.5, random_state=s,
                                    record_every=steps).final_gap
                for s in range(seeds)]
        reached = sum(g < 1e-2 for g in gaps)
        cells.append(f"{np.mean(gaps):.4f} ({reached}/{seeds})")
    print(f"{name:<20} {cells[0]:>18} {cells[1]:>18}")
