"""Retrieval metrics vs pytorch-metric-learning's AccuracyCalculator: time and peak memory.

Run:  python benchmarks/bench_metrics.py [--sizes 20000 100000] [--dim 128] [--classes 2000]

Side by side in one process, CPU, 2 threads: skcontrast's mAP@R, R-precision and
precision@1 (:func:`skcontrast.metrics.class_retrieval`: one blocked pass, O(block * n)
memory, pessimistic ties) against PML's
``AccuracyCalculator`` with its torch k-NN (``CustomKNN(CosineSimilarity())``: PML's
default k-NN needs faiss, which this machine does not have), which asks for the
``max class size`` nearest neighbours of every query at once. The values are compared
first; uniformity is timed alone (PML has no such metric). Where skcontrast screens
candidates with a bfloat16 product (large n, on CPUs where bfloat16 products are faster),
the same pass without the screen and the float32 products alone (the dense path's floor)
are timed too. Peak memory is the rise of the
process's peak resident set. A case is skipped, with the memory it would need, when it
would not fit.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from _harness import (
    available_memory_bytes,
    fmt_mib,
    fmt_seconds,
    import_pml,
    measure,
    set_threads,
    table,
)

from skcontrast import geometry, metrics
from skcontrast.metrics._retrieval import _Screen

INCLUDE = ("mean_average_precision_at_r", "r_precision", "precision_at_1")


def ours(H: np.ndarray, y: np.ndarray) -> dict:
    scores = metrics.class_retrieval(H, y)
    return {"mean_average_precision_at_r": scores["map_at_r"],
            "r_precision": scores["r_precision"], "precision_at_1": scores["precision_at_1"]}


def float32_products(H: np.ndarray) -> None:
    """The dense path's matrix products alone, in its blocks (its floor)."""
    Ht = torch.from_numpy(H).float()
    step = geometry.block_rows(len(H), 2 * geometry.BLOCK_ELEMENTS)
    for start in range(0, len(H), step):
        Ht[start:start + step] @ Ht.T


def row(n: int, d: int, classes: int, pml) -> list[list[str]]:
    rng = np.random.default_rng(n)
    H = rng.normal(size=(n, d)).astype(np.float32)
    y = rng.integers(0, classes, size=n)
    found = {}
    t_ours, m_ours = measure(lambda: found.update(screened=ours(H, y)), repeats=1, warmup=0)
    rows = [[f"mAP@R + R-prec. + P@1, n={n:,}", "skcontrast", fmt_seconds(t_ours),
             fmt_mib(m_ours), ""]]
    if _Screen.worth_it(n):  # the same pass without the bfloat16 screen
        threshold, _Screen.MIN_COLUMNS = _Screen.MIN_COLUMNS, n + 1
        try:
            t_dense, m_dense = measure(lambda: found.update(dense=ours(H, y)), repeats=1,
                                       warmup=0)
        finally:
            _Screen.MIN_COLUMNS = threshold
        agree = max(abs(found["screened"][key] - found["dense"][key]) for key in INCLUDE)
        rows.append(["", "skcontrast, dense float32", fmt_seconds(t_dense), fmt_mib(m_dense),
                     f"|Δ| {agree:.1e}"])
        t_floor, m_floor = measure(lambda: float32_products(H), repeats=1, warmup=0)
        rows.append(["", "float32 product alone", fmt_seconds(t_floor), fmt_mib(m_floor), ""])
    t_unif, m_unif = measure(lambda: geometry.uniformity(H), repeats=1, warmup=0)
    rows.append([f"uniformity, n={n:,}", "skcontrast", fmt_seconds(t_unif), fmt_mib(m_unif),
                 ""])
    if pml is None:
        return rows
    need = 64 * n * n  # measured: 1.8 GB at n = 5,000, 6.3 GB at 10,000
    if need > 0.6 * available_memory_bytes():
        rows.append(["", "PML AccuracyCalculator", f"needs ~{need / 2**30:.0f} GiB", "", ""])
        return rows
    from pytorch_metric_learning.distances import CosineSimilarity
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
    from pytorch_metric_learning.utils.inference import CustomKNN

    calculator = AccuracyCalculator(include=INCLUDE, knn_func=CustomKNN(CosineSimilarity()))
    Ht, yt = torch.from_numpy(H), torch.from_numpy(y)

    def theirs():
        return calculator.get_accuracy(Ht, yt, Ht, yt, ref_includes_query=True)

    t_pml, m_pml = measure(theirs, repeats=1, warmup=0)
    a, b = ours(H, y), theirs()
    agree = max(abs(a[key] - b[key]) for key in INCLUDE)
    rows.append(["", "PML AccuracyCalculator", fmt_seconds(t_pml), fmt_mib(m_pml),
                 f"{t_pml / t_ours:.1f}x, |Δ| {agree:.1e}"])
    return rows


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 20_000, 100_000],
                        help="numbers of embeddings n")
    parser.add_argument("--dim", type=int, default=128,
                        help="embedding width d")
    parser.add_argument("--classes", type=int, default=2000,
                        help="number of classes of the labels")
    parser.add_argument("--threads", type=int, default=2,
                        help="torch threads on the CPU")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    pml = import_pml()
    rows = [r for n in args.sizes for r in row(n, args.dim, args.classes, pml)]
    text = (f"Class-level retrieval metrics, d={args.dim}, {args.classes} classes, CPU, "
            f"{torch.get_num_threads()} threads, torch {torch.__version__}\n"
            + table(rows, ["case", "implementation", "time", "peak mem", "PML/ours"]))
    print(text)
    return text


if __name__ == "__main__":
    main()
