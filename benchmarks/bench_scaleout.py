"""Sharded spectral selection through joblib: one epoch at n=500,000 on 1 and 2 processes.

Run:  python benchmarks/bench_scaleout.py [--n 500000] [--dask]

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


def _threads(counts: list[int]) -> str:
    return "/".join(map(str, counts)) + (" torch thread" if counts == [1] else " torch threads")


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500_000,
                        help="pairs to select batches for")
    parser.add_argument("--jobs", type=int, default=2,
                        help="worker processes (Dask) for the scale-out rows")
    parser.add_argument("--dask", action="store_true", help="also on a Dask LocalCluster")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
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
    text = (f"Spectral selection, one epoch of n={args.n:,} pairs (d=128, B=32, chunks of "
            f"1280), CPU with {os.cpu_count()} cores\n")
    text += table(rows, ["setting", "epoch", "vs default", "vs 1 thread",
                        "same batches"])
    print(text)
    return text


if __name__ == "__main__":
    main()
