"""Batch selectors: SpectralBatchSelector vs the published spectral pipeline, and the others.

Run:  python benchmarks/bench_selectors.py [--sizes 10000 50000] [--quick]

Side by side in one process on the same random unit-norm embeddings (u_i, v_i drawn
independently, d=128), temperature 0.1, B=32, CPU:

- "published": the pipeline of the authors' code (krafton-ai/mini-batch-cl, utils.py
  ``sc_even_kb_loose`` / ``sc_naive``) per 1280-point chunk: their affinity, ``exp`` of
  it, sklearn ``spectral_embedding`` (ARPACK, normalised Laplacian), ``KMeans``, and a
  dense ``linear_sum_assignment`` on the centres repeated B times. Like their code it
  only uses whole chunks (the remainder of n is dropped). It runs in float64, because
  in float32 the ``exp`` of the affinity overflows at this temperature.
- ``SpectralBatchSelector`` with the exact dense eigensolver (the default) and with the
  Rayleigh-Ritz approximation, and shuffled batches for reference.

Printed: seconds per epoch of batches, peak extra memory, mean within-batch
``symmetric_info_nce`` (higher = harder batches), and ratios to the published pipeline.
Then the other adaptive selectors: OSGD (k=1500, q=150), ScB (n=10,000, B=100) and BcS
(n=5,000, B=50).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from _harness import fmt_mib, peak_memory_mib, set_threads, table

from skcontrast.losses import batch_losses
from skcontrast.selectors import (
    BcSSelector,
    OSGDSelector,
    ScBSelector,
    ShuffledBatchSelector,
    SpectralBatchSelector,
)

TEMPERATURE, BATCH, CHUNK, DIM = 0.1, 32, 1280, 128


def random_pairs(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=2, keepdims=True)


def published_epoch(X: np.ndarray, seed: int = 0) -> list[np.ndarray]:
    """The authors' per-chunk pipeline (see the module docstring)."""
    from scipy.optimize import linear_sum_assignment
    from scipy.spatial.distance import cdist
    from sklearn.cluster import KMeans
    from sklearn.manifold import spectral_embedding

    order = np.random.default_rng(seed).permutation(len(X))
    usable = len(X) // CHUNK * CHUNK
    k = CHUNK // BATCH
    batches = []
    for start in range(0, usable, CHUNK):
        idx = order[start:start + CHUNK]
        u = X[idx, 0].astype(np.float64) / np.sqrt(TEMPERATURE)
        v = X[idx, 1].astype(np.float64) / np.sqrt(TEMPERATURE)
        z = u @ v.T
        diag = np.diag(z)[:, None]
        affinity = np.log(1 + (BATCH - 1) * np.exp(z - diag))
        affinity += np.log(1 + (BATCH - 1) * np.exp(z.T - diag))
        affinity += affinity.T
        maps = spectral_embedding(np.exp(affinity), n_components=k, eigen_solver="arpack",
                                  norm_laplacian=True, drop_first=False, random_state=seed)
        centres = KMeans(k, random_state=seed).fit(maps).cluster_centers_
        repeated = np.repeat(centres, BATCH, axis=0)
        labels = linear_sum_assignment(cdist(maps, repeated))[1] // BATCH
        batches += [idx[labels == c] for c in range(k)]
    return batches


def mean_loss(X: np.ndarray, batches: list[np.ndarray]) -> float:
    with torch.no_grad():
        return float(batch_losses(X[:, 0], X[:, 1], batches, temperature=TEMPERATURE).mean())


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def spectral_rows(sizes: list[int], repeats: int) -> list[list[str]]:
    """Median over ``repeats`` interleaved runs: this machine's timings drift by up to 2x."""
    rows = []
    for n in sizes:
        X = random_pairs(n)
        runs = {
            "published": lambda X=X: published_epoch(X),
            "spectral (dense)": lambda X=X: list(SpectralBatchSelector(
                BATCH, temperature=TEMPERATURE, backend="scipy", random_state=0).split(X)),
            "spectral (ritz)": lambda X=X: list(SpectralBatchSelector(
                BATCH, temperature=TEMPERATURE, backend="scipy", eigen_solver="ritz",
                random_state=0).split(X)),
            "shuffled": lambda X=X: list(ShuffledBatchSelector(BATCH, random_state=0).split(X)),
        }
        seconds = {name: [] for name in runs}
        batches = {}
        for _ in range(repeats):
            for name, fn in runs.items():
                batches[name], elapsed = timed(fn)
                seconds[name].append(elapsed)
        results = {name: (statistics.median(seconds[name]), peak_memory_mib(fn),
                          mean_loss(X, batches[name]), sum(len(b) for b in batches[name]))
                   for name, fn in runs.items()}
        ref_t, _, ref_loss, _ = results["published"]
        for name, (seconds, mem, loss, covered) in results.items():
            rows.append([f"n={n:,}", name, f"{seconds:8.2f} s", fmt_mib(mem),
                         f"{loss:.4f}", f"{ref_t / seconds:7.1f}x",
                         f"{100 * (loss / ref_loss - 1):+6.2f}%", f"{covered:,}"])
    return rows


def other_rows(quick: bool) -> list[list[str]]:
    cases = [
        ("OSGD k=1500 q=150", 10_000 if quick else 50_000,
         OSGDSelector(BATCH, k=1500, q=150, temperature=TEMPERATURE, random_state=0)),
        ("ScB B=100", 2_000 if quick else 10_000,
         ScBSelector(100, temperature=TEMPERATURE, random_state=0)),
        ("BcS B=50", 1_000 if quick else 5_000,
         BcSSelector(50, temperature=TEMPERATURE, random_state=0)),
    ]
    rows = []
    for name, n, selector in cases:
        X = random_pairs(n, seed=1)
        batches, seconds = timed(lambda X=X, s=selector: list(s.split(X)))
        shuffled = list(ShuffledBatchSelector(selector.batch_size, random_state=0).split(X))
        rows.append([name, f"n={n:,}", f"{seconds:8.2f} s", f"{len(batches)}",
                     f"{mean_loss(X, batches):.4f}", f"{mean_loss(X, shuffled):.4f}"])
    return rows


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    set_threads(args.threads)
    warnings.simplefilter("ignore")
    sizes = [2_560] if args.quick else args.sizes
    text = (f"Spectral batch selection, d={DIM}, temperature={TEMPERATURE}, B={BATCH}, "
            f"chunks of {CHUNK}, CPU, {torch.get_num_threads()} threads; median of "
            f"{1 if args.quick else args.repeats} interleaved run(s)\n")
    repeats = 1 if args.quick else args.repeats
    text += table(spectral_rows(sizes, repeats), ["n", "method", "time/epoch", "peak mem",
                                         "mean loss", "speed-up", "loss vs pub.", "samples"])
    text += "\n\nOther adaptive selectors (one epoch)\n"
    text += table(other_rows(args.quick), ["selector", "n", "time/epoch", "batches",
                                           "mean loss", "shuffled loss"])
    print(text)
    return text


if __name__ == "__main__":
    main()
