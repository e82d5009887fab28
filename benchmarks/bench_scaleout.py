"""Sharded selection through joblib: spectral at n=500,000 and the graph selectors at
n=4,000,000, on 1 and 2 processes.

Run:  python benchmarks/bench_scaleout.py [--n 500000] [--dask]
                                          [--graph-n 4000000] [--only-graph]

The graph selectors (``--graph-n``, on a Dask ``LocalCluster`` of ``--jobs`` workers,
one thread each): CommunityBatchSelector (B3) and RandomWalkBatchSelector, shards of
125,000 samples (``shard_size``) sent to the workers through joblib's Dask backend,
one epoch each, single-view embeddings (d=128, float32, n/100 centres). The table gives
the epoch's time, the peak resident memory of each worker process during it (from the
operating system's high-water mark, reset before the epoch) and of the process that
shards, and checks that the batches partition the samples.

SpectralBatchSelector clusters 1280-point chunks; ``n_jobs`` hands stacks of chunks to
joblib workers (loky processes here, or the workers of a Dask ``LocalCluster`` with
``--dask``), each chunk seeded from (random_state, epoch, chunk index), so the batches
are identical for every setting (checked below). d=128, B=32, temperature 0.1,
clustered embeddings (500 centres). Compared: one process with all its torch threads
(the default), one process with one thread, and ``n_jobs`` worker processes; joblib and
Dask start their workers with one thread each (``OMP_NUM_THREADS=1``), and the table
reports the number each worker actually ran with. "vs 1 thread" is the scaling with
the number of processes at one thread per process.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np
import torch
from joblib import Parallel, delayed

sys.path.insert(0, os.path.dirname(__file__))
from _harness import table

from skcontrast.datasets import make_paired_embeddings
from skcontrast.selectors import SpectralBatchSelector


def epoch(X, n_jobs: int | None) -> tuple[list, float]:
    selector = SpectralBatchSelector(32, n_jobs=n_jobs, random_state=0)
    start = time.perf_counter()
    batches = [b.tolist() for b in selector.split(X)]
    return batches, time.perf_counter() - start


def _torch_threads() -> int:
    return torch.get_num_threads()


def _reset_peak() -> int:
    """Reset this process's high-water mark of resident memory; returns the resident MiB."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status("VmRSS")


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        return int(f.read().split(f"{field}:")[1].split()[0]) // 1024


def _peak() -> int:
    return _status("VmHWM")


def clustered_rows(n: int, d: int = 128, seed: int = 0) -> np.ndarray:
    """``n`` unit float32 rows around ``n / 100`` centres, made block by block."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(max(1, n // 100), d)).astype(np.float32)
    out = np.empty((n, d), dtype=np.float32)
    for s in range(0, n, 1 << 18):
        block = centres[rng.integers(0, len(centres), size=min(1 << 18, n - s))]
        block += 0.3 * rng.standard_normal(block.shape, dtype=np.float32)
        out[s:s + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def graph_rows(n: int, jobs: int) -> list[list[str]]:
    """One epoch of each graph selector, shards on a Dask cluster; peak memory per worker."""
    from distributed import Client, LocalCluster
    from joblib import parallel_backend

    from skcontrast.selectors import CommunityBatchSelector, RandomWalkBatchSelector

    X = clustered_rows(n)
    rows = []
    with LocalCluster(n_workers=jobs, threads_per_worker=1, dashboard_address=None,
                      memory_limit=None) as cluster, Client(cluster) as client:
        for name, selector in (
                ("community (B3)", CommunityBatchSelector(32, n_jobs=-1, random_state=0)),
                ("random walk (ProSampler)", RandomWalkBatchSelector(
                    32, shard_size=125_000, n_jobs=-1, random_state=0))):
            client.run(_reset_peak)
            here = _reset_peak()
            start = time.perf_counter()
            with parallel_backend("dask"):
                batches = selector.epoch_batches(X)
            seconds = time.perf_counter() - start
            peaks = sorted(client.run(_peak).values())
            flat = np.concatenate(batches)
            partitioned = len(flat) == n and len(np.unique(flat)) == n
            rows.append([name, f"{seconds:.0f} s", " / ".join(f"{p:,} MiB" for p in peaks),
                         f"+{_peak() - here:,} MiB", "yes" if partitioned else "NO"])
    return rows


def _threads(counts: list[int]) -> str:
    return "/".join(map(str, counts)) + (" torch thread" if counts == [1] else " torch threads")


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500_000,
                        help="pairs to select batches for")
    parser.add_argument("--jobs", type=int, default=2,
                        help="worker processes (Dask) for the scale-out rows")
    parser.add_argument("--dask", action="store_true", help="also on a Dask LocalCluster")
    parser.add_argument("--graph-n", type=int, default=4_000_000,
                        help="samples of the sharded graph selectors' epoch (0: skip)")
    parser.add_argument("--only-graph", action="store_true",
                        help="only the graph selectors' table")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    graph_text = ""
    if args.graph_n:
        graph_text = (f"Graph selectors, one epoch of n={args.graph_n:,} (d=128, B=32, shards "
                      f"of 125,000) on a Dask LocalCluster of {args.jobs} workers with one "
                      f"thread each, CPU with {os.cpu_count()} cores; peak resident memory "
                      "per worker process, and added in the process that shards\n")
        graph_text += table(graph_rows(args.graph_n, args.jobs),
                            ["selector", "epoch", "peak per worker", "sharding process",
                             "partition"])
        print(graph_text, flush=True)
    if args.only_graph:
        return graph_text
    X = make_paired_embeddings(args.n, 128, n_groups=500, random_state=0)[0]
    threads = torch.get_num_threads()
    reference, default = epoch(X, None)
    torch.set_num_threads(1)
    try:
        batches, single = epoch(X, None)
    finally:
        torch.set_num_threads(threads)
    rows = [[f"1 process, {threads} torch threads (default)", default, batches == reference],
            ["1 process, 1 torch thread", single, batches == reference]]
    batches, parallel = epoch(X, args.jobs)
    inner = sorted(set(Parallel(n_jobs=args.jobs)(delayed(_torch_threads)()
                                                  for _ in range(args.jobs))))
    rows.append([f"{args.jobs} loky processes, {_threads(inner)} each", parallel,
                 batches == reference])
    if args.dask:
        from distributed import Client, LocalCluster
        from joblib import parallel_backend

        with LocalCluster(n_workers=args.jobs, threads_per_worker=1,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            epoch(X[:20_000], -1)  # start the workers
            with parallel_backend("dask"):
                batches, remote = epoch(X, -1)
            inner = sorted(set(client.run(_torch_threads).values()))
        rows.append([f"Dask LocalCluster, {args.jobs} workers, {_threads(inner)} each",
                     remote, batches == reference])
    rows = [[name, f"{seconds:.1f} s", f"{default / seconds:.2f}x", f"{single / seconds:.2f}x",
             "yes" if same else "NO"] for name, seconds, same in rows]
    text = graph_text + ("\n\n" if graph_text else "")
    text += (f"Spectral selection, one epoch of n={args.n:,} pairs (d=128, B=32, chunks of "
             f"1280), CPU with {os.cpu_count()} cores\n")
    text += table(rows, ["setting", "epoch", "vs default", "vs 1 thread",
                        "same batches"])
    print(text)
    return text


if __name__ == "__main__":
    main()
