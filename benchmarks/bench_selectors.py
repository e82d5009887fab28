"""Batch selectors: SpectralBatchSelector vs the published spectral pipeline, and the others.

Run:  python benchmarks/bench_selectors.py [--sizes 10000 50000] [--quick]

Side by side in one process, d=128, temperature 0.1, B=32, chunks of 1280:

- "published": the pipeline of the authors' code (krafton-ai/mini-batch-cl, utils.py
  ``sc_even_kb_loose`` / ``sc_naive``) per 1280-point chunk: their affinity, ``exp`` of
  it, sklearn ``spectral_embedding`` (ARPACK, normalised Laplacian), ``KMeans``, and a
  dense ``linear_sum_assignment`` on the centres repeated B times. Like their code it
  only uses whole chunks (the remainder of n is dropped). It runs in float64, because
  in float32 the ``exp`` of the affinity overflows at this temperature.
- ``SpectralBatchSelector`` with its defaults (exp affinity, normalised Laplacian,
  block Krylov eigensolver), with the exact dense eigensolver, with the Rayleigh-Ritz
  approximation, and as Alg. 3 is written (affinity w, unnormalised Laplacian, the
  previous release's default); shuffled batches for reference.

"hardness" is the mean within-batch ``symmetric_info_nce`` divided by that of shuffled
batches (higher = harder batches, Cho et al. 2023, arXiv:2307.05906, Fig. 3). The embeddings come
from
:func:`skcontrast.datasets.make_paired_embeddings`: clustered (500 centres, noise 0.8,
so about 2.6 items of a cluster per chunk; where batch choice matters), near-duplicate
groups of 8, isotropic. The first
table times one epoch (median of interleaved runs, on the CPU; and with the CuPy
backend when a GPU is usable); the second compares the affinity and Laplacian choices
in the three regimes. Then the other adaptive selectors: OSGD (k=1500, q=150), ScB
(n=10,000, B=100) and BcS (n=5,000, B=50). Last, the graph selectors at scale
(``--graph-sizes``, default n = 1,000,000, d = 128, clustered embeddings with 10,000
centres): ``CommunityBatchSelector`` (B3: rank window 10-40 searched by cells, Leiden
communities) and ``RandomWalkBatchSelector`` (ProSampler: 1000 candidates, 100
neighbours), with the peak memory one epoch adds and the neighbour guard
(``TemperedSelector(exclude_neighbours=5)`` on shuffled batches).
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

from skcontrast._backend import cupy_usable
from skcontrast.datasets import make_paired_embeddings
from skcontrast.losses import SymmetricInfoNCE, batch_losses
from skcontrast.selectors import (
    BcSSelector,
    CommunityBatchSelector,
    OSGDSelector,
    RandomWalkBatchSelector,
    ScBSelector,
    ShuffledBatchSelector,
    SpectralBatchSelector,
    TemperedSelector,
)

TEMPERATURE, BATCH, CHUNK, DIM = 0.1, 32, 1280, 128
VARIANTS = {
    "spectral (default)": {},
    "spectral, dense eigh": {"eigen_solver": "dense"},
    "spectral, ritz": {"eigen_solver": "ritz"},
    "spectral, Alg. 3 as written": {"affinity": "bound", "laplacian": "unnormalized",
                                    "eigen_solver": "dense"},
}
OPTIONS = {  # affinity x Laplacian, exact eigenvectors
    "exp(w), normalised": {"eigen_solver": "dense"},
    "exp(w), unnormalised": {"laplacian": "unnormalized", "eigen_solver": "dense"},
    "w, normalised": {"affinity": "bound", "eigen_solver": "dense"},
    "w, unnormalised": {"affinity": "bound", "laplacian": "unnormalized",
                        "eigen_solver": "dense"},
}


def pairs(n: int, structure: str, seed: int = 0) -> np.ndarray:
    """500 centres when clustered: about 2.6 items of a cluster in each chunk, at any n."""
    groups = 500 if structure == "clustered" else None
    return make_paired_embeddings(n, DIM, structure=structure, n_groups=groups,
                                  random_state=seed)[0]


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


def spectral(X: np.ndarray, backend: str = "scipy", **params) -> list[np.ndarray]:
    return list(SpectralBatchSelector(BATCH, loss=SymmetricInfoNCE(TEMPERATURE), backend=backend,
                                      random_state=0, **params).split(X))


def speed_rows(sizes: list[int], structures: list[str], repeats: int) -> list[list[str]]:
    """Median over ``repeats`` interleaved runs: this machine's timings drift by up to 2x."""
    rows = []
    for structure in structures:
        for n in sizes:
            X = pairs(n, structure)
            runs = {"published": lambda X=X: published_epoch(X)}
            runs.update({name: lambda X=X, p=params: spectral(X, **p)
                         for name, params in VARIANTS.items()})
            runs["shuffled"] = lambda X=X: list(ShuffledBatchSelector(
                BATCH, random_state=0).split(X))
            seconds = {name: [] for name in runs}
            batches = {}
            for _ in range(repeats):
                for name, fn in runs.items():
                    batches[name], elapsed = timed(fn)
                    seconds[name].append(elapsed)
            shuffled = mean_loss(X, batches["shuffled"])
            ref_t = statistics.median(seconds["published"])
            ref_h = mean_loss(X, batches["published"]) / shuffled
            for name, fn in runs.items():
                t = statistics.median(seconds[name])
                h = mean_loss(X, batches[name]) / shuffled
                rows.append([structure, f"n={n:,}", name, f"{t:8.2f} s",
                             fmt_mib(peak_memory_mib(fn)), f"{h:.2f}",
                             f"{100 * h / ref_h:5.1f}%", f"{ref_t / t:7.1f}x",
                             f"{sum(len(b) for b in batches[name]):,}"])
    return rows


def gpu_rows(sizes: list[int], structure: str, repeats: int) -> list[list[str]]:
    """The CuPy backend on the GPU (after one warm-up epoch), when one is usable."""
    rows = []
    for n in sizes:
        X = pairs(n, structure)
        shuffled = mean_loss(X, list(ShuffledBatchSelector(BATCH, random_state=0).split(X)))
        for name, params in (("spectral (default)", {}),
                             ("spectral, dense eigh", {"eigen_solver": "dense"})):
            spectral(X, backend="cupy", **params)
            times = []
            for _ in range(repeats):
                torch.cuda.synchronize()
                batches, elapsed = timed(lambda X=X, p=params: spectral(X, backend="cupy", **p))
                times.append(elapsed)
            rows.append([structure, f"n={n:,}", name, f"{statistics.median(times):8.3f} s",
                         f"{mean_loss(X, batches) / shuffled:.2f}"])
    return rows


def option_rows(n: int, structures: list[str]) -> list[list[str]]:
    """Hardness of the affinity and Laplacian choices, with the published pipeline."""
    rows = []
    for structure in structures:
        X = pairs(n, structure, seed=2)
        shuffled = mean_loss(X, list(ShuffledBatchSelector(BATCH, random_state=0).split(X)))
        cells = [structure, f"{mean_loss(X, published_epoch(X)) / shuffled:.2f}"]
        cells += [f"{mean_loss(X, spectral(X, **p)) / shuffled:.2f}" for p in OPTIONS.values()]
        cells.append(f"{mean_loss(X, spectral(X)) / shuffled:.2f}")
        rows.append(cells)
    return rows


def other_rows(quick: bool) -> list[list[str]]:
    cases = [
        ("OSGD k=1500 q=150", 10_000 if quick else 50_000,
         OSGDSelector(BATCH, k=1500, q=150, loss=SymmetricInfoNCE(TEMPERATURE),
                      random_state=0)),
        ("ScB B=100", 2_000 if quick else 10_000,
         ScBSelector(100, loss=SymmetricInfoNCE(TEMPERATURE), random_state=0)),
        ("BcS B=50", 1_000 if quick else 5_000,
         BcSSelector(50, loss=SymmetricInfoNCE(TEMPERATURE), random_state=0)),
    ]
    rows = []
    for name, n, selector in cases:
        X = pairs(n, "isotropic", seed=1)
        batches, seconds = timed(lambda X=X, s=selector: list(s.split(X)))
        shuffled = list(ShuffledBatchSelector(selector.batch_size, random_state=0).split(X))
        rows.append([name, f"n={n:,}", f"{seconds:8.2f} s", f"{len(batches)}",
                     f"{mean_loss(X, batches):.4f}", f"{mean_loss(X, shuffled):.4f}"])
    return rows


def graph_rows(sizes: list[int]) -> list[list[str]]:
    """One epoch of each graph selector: time, peak memory added, hardness."""
    rows = []
    for n in sizes:
        X, _ = make_paired_embeddings(n, DIM, n_groups=max(1, n // 100), random_state=0)
        shuffled = list(ShuffledBatchSelector(BATCH, random_state=0).split(X))
        reference = mean_loss(X, shuffled)
        cases = {
            "community (B3), shards of 125,000": CommunityBatchSelector(BATCH, random_state=0),
            "community (B3), one graph": CommunityBatchSelector(BATCH, shard_size=None,
                                                                random_state=0),
            "random walk (ProSampler)": RandomWalkBatchSelector(BATCH, random_state=0),
            "shuffled + neighbour guard m=5": TemperedSelector(
                ShuffledBatchSelector(BATCH, random_state=0), exclude_neighbours=5,
                random_state=0),
        }
        for name, selector in cases.items():
            box = {}

            def epoch(selector=selector, box=box, X=X):
                start = time.perf_counter()
                box["batches"] = selector.epoch_batches(X)
                box["seconds"] = time.perf_counter() - start

            peak = peak_memory_mib(epoch)
            batches = box["batches"]
            covered = len(np.unique(np.concatenate(batches)))
            rows.append([f"n={n:,}", name, f"{box['seconds']:8.1f} s", fmt_mib(peak),
                         f"{mean_loss(X, batches) / reference:.2f}",
                         f"{covered:,} / {n:,}"])
        del X
    return rows


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000],
                        help="numbers of pairs n of the spectral table")
    parser.add_argument("--structures", nargs="+", default=["clustered", "isotropic"],
                        help="embedding structures: 'clustered', 'isotropic', 'duplicates'")
    parser.add_argument("--options-n", type=int, default=12_800,
                        help="n of the affinity/Laplacian comparison")
    parser.add_argument("--graph-sizes", type=int, nargs="+", default=[1_000_000],
                        help="numbers of pairs n of the graph selectors' table")
    parser.add_argument("--only-graph", action="store_true",
                        help="run only the graph selectors' table")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--threads", type=int, default=2,
                        help="torch threads on the CPU")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed repetitions (median)")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    warnings.simplefilter("ignore")
    sizes = [2_560] if args.quick else args.sizes
    repeats = 1 if args.quick else args.repeats
    graph_sizes = [20_000] if args.quick else args.graph_sizes
    graph_text = (f"Graph selectors, one epoch, d={DIM}, B={BATCH}, clustered embeddings "
                  f"(n/100 centres), CPU, {torch.get_num_threads()} threads; peak mem = "
                  "resident memory the epoch adds (the embeddings themselves excluded); "
                  "hardness = mean batch loss / shuffled's\n")
    graph_text += table(graph_rows(graph_sizes), ["n", "selector", "time/epoch",
                                                  "peak mem", "hardness", "samples"])
    if args.only_graph:
        print(graph_text)
        return graph_text
    text = (f"Spectral batch selection, d={DIM}, temperature={TEMPERATURE}, B={BATCH}, "
            f"chunks of {CHUNK}, CPU, {torch.get_num_threads()} threads; median of "
            f"{repeats} interleaved run(s); hardness = mean batch loss / shuffled's\n")
    text += table(speed_rows(sizes, args.structures, repeats),
                  ["embeddings", "n", "method", "time/epoch", "peak mem", "hardness",
                   "vs pub.", "speed-up", "samples"])
    if cupy_usable():
        text += (f"\n\nGPU ({torch.cuda.get_device_name()}), backend='cupy', median of "
                 f"{repeats} epochs after a warm-up\n")
        text += table(gpu_rows(sizes, "clustered", repeats),
                      ["embeddings", "n", "method", "time/epoch", "hardness"])
    else:
        text += "\n\n(no usable GPU with CuPy here: the GPU rows are not measured)"
    n_options = 2_560 if args.quick else args.options_n
    text += (f"\n\nHardness of the affinity and Laplacian choices (exact eigenvectors), "
             f"n={n_options:,}\n")
    text += table(option_rows(n_options, ["clustered", "near_duplicate", "isotropic"]),
                  ["embeddings", "published", *OPTIONS, "default"])
    text += "\n\nOther adaptive selectors (one epoch, isotropic embeddings)\n"
    text += table(other_rows(args.quick), ["selector", "n", "time/epoch", "batches",
                                           "mean loss", "shuffled loss"])
    text += "\n\n" + graph_text
    print(text)
    return text


if __name__ == "__main__":
    main()
