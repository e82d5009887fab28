"""The ``skcontrast`` command (also ``python -m skcontrast``)."""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import time
from pathlib import Path
from typing import Any

BENCHMARKS = ("losses", "selectors", "fit", "metrics")


def _benchmark_dir(root: Path | None = None) -> Path | None:
    """``benchmarks/`` of the source checkout this package runs from, or ``None``.

    A non-editable install lives in ``site-packages``, whose ``benchmarks/`` folder (if
    any) belongs to some other distribution: only a folder beside this package's own
    ``pyproject.toml`` naming the project ``skcontrast`` is ours.
    """
    root = Path(__file__).resolve().parents[1] if root is None else root
    folder, project = root / "benchmarks", root / "pyproject.toml"
    if folder.is_dir() and project.is_file() and \
            'name = "skcontrast"' in project.read_text(encoding="utf-8"):
        return folder
    return None


def _run_bench(args: argparse.Namespace) -> int:
    folder = _benchmark_dir()
    if folder is None:
        print("The benchmarks live in the source repository's benchmarks/ folder, which this "
              "installation does not include. Run from a clone: pip install -e '.[bench]'",
              file=sys.stderr)
        return 2
    unknown = [name for name in args.which if name not in BENCHMARKS]
    if unknown:
        print(f"skcontrast bench: unknown benchmark(s) {', '.join(unknown)}; choose from "
              f"{', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    for name in args.which or ["losses"]:
        script = folder / f"bench_{name}.py"
        print(f"== {script.relative_to(folder.parent)} ==", flush=True)
        saved = sys.argv
        sys.argv = [str(script), *args.extra]
        try:
            runpy.run_path(str(script), run_name="__main__")
        finally:
            sys.argv = saved
    return 0


def pick_threads(requested: str | int | None = "auto") -> tuple[int, str]:
    """The number of CPU threads a command should use, and why.

    An integer is the user's choice. ``'auto'`` honours ``OMP_NUM_THREADS`` when it is
    set. Otherwise it takes every core this process may run on while the 1-minute load
    average is at most half of them, and the cores the load leaves free (at least one)
    beyond that: torch's default of one thread per core makes every thread wait on a
    busy machine (the demo ran 10 times slower with all cores' threads on a loaded
    machine than with one).
    """
    if requested not in (None, "auto"):
        try:
            threads = int(requested)
        except (TypeError, ValueError):
            threads = 0
        if threads < 1:
            raise SystemExit(f"skcontrast: --threads must be a positive integer or 'auto'; "
                             f"got {requested!r}")
        return threads, "--threads"
    if os.environ.get("OMP_NUM_THREADS", "").isdigit() and int(os.environ["OMP_NUM_THREADS"]):
        return int(os.environ["OMP_NUM_THREADS"]), "OMP_NUM_THREADS"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    # light load (up to half the cores busy) costs little: keep every core, which also
    # keeps results equal to an idle machine's (the thread count can change the last
    # digit of a float sum); beyond it, only the cores the load leaves free
    threads = cores if load <= cores / 2 else max(1, min(cores, round(cores - load)))
    return threads, f"auto: {cores} cores, load {load:.1f}"


def _use_threads(args: argparse.Namespace) -> None:
    """Apply ``--threads`` to torch and to the BLAS libraries NumPy and SciPy use."""
    import torch
    from threadpoolctl import threadpool_limits

    threads, why = pick_threads(args.threads)
    torch.set_num_threads(threads)
    args.thread_limits = threadpool_limits(threads)  # held for the command's lifetime
    print(f"using {threads} CPU thread(s) ({why}; override with --threads N)", flush=True)


def _run_demo(args: argparse.Namespace) -> int:
    from ._demo import run_demo

    _use_threads(args)
    start = time.perf_counter()
    result = run_demo(args.out, quick=args.quick, seed=args.seed)
    print()
    print(result.summary())
    print("Seconds on this machine (fit includes select):")
    print(result.timing())
    for path in result.figures:
        print(f"figure: {path}")
    print(f"done in {time.perf_counter() - start:.0f} s; table in {args.out}/table.txt")
    return 0


def _run_synthetic(args: argparse.Namespace) -> int:
    from . import geometry
    from .simulation import compare_selectors, format_table, memory_methods, paper_methods

    _use_threads(args)
    methods = {**paper_methods(args.n, args.batch_size),
               **memory_methods(args.n, args.batch_size, gamma=args.gamma)}
    rows, first = compare_selectors(args.n, args.d, args.batch_size, args.steps, args.seeds,
                                    lr=args.lr, methods=methods)
    title = (f"Direct optimisation of unit-norm embeddings: N={args.n}, d={args.d}, "
             f"B={args.batch_size}, {args.steps} steps, lr={args.lr}, temperature 1, "
             f"{args.seeds} seed(s) (mean ± std)")
    print(format_table(rows, title))
    figure = _gram_figure(first, geometry, args)
    if figure:
        print(f"heat maps: {figure}")
    return 0


def _gram_figure(results: dict, geometry: Any, args: argparse.Namespace) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from .plotting import plot_gram
    except ImportError:
        print("(install the 'plot' extra to get the heat-map figure)")
        return None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    panels = list(results.items())
    kind = geometry.reference_for(args.n, args.d)
    reference = geometry.simplex_etf(args.n, args.d) if kind == "etf" else \
        geometry.cross_polytope(args.n, args.d)
    # a grid of square panels (constrained layout keeps the two-line titles inside the
    # figure) and one colour bar: the cosine u_i . v_j in [-1, 1]
    columns = 4
    rows = -(-(len(panels) + 1) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(2.4 * columns + 0.8, 2.7 * rows),
                             layout="constrained", squeeze=False)
    axes = axes.ravel()
    plot_gram(reference, ax=axes[0], title=kind.replace("_", "-"), colorbar=False)
    for ax, (name, result) in zip(axes[1:], panels, strict=False):
        plot_gram(result.U, result.V, ax=ax, colorbar=False,
                  title=f"{name}\ngap {result.final_gap:.2f}")
    for ax in axes[len(panels) + 1:]:
        ax.set_axis_off()
    for ax in axes[:len(panels) + 1]:
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_xlabel("")
        ax.set_ylabel("")
    fig.colorbar(axes[0].images[0], ax=axes.tolist(), shrink=0.6,
                 label="cosine $u_i^T v_j$")
    path = out / f"synthetic_gram_N{args.n}_d{args.d}.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)


def build_parser() -> argparse.ArgumentParser:
    from ._version import __version__

    parser = argparse.ArgumentParser(
        prog="skcontrast",
        description="Contrastive learning with pluggable mini-batch selection.")
    parser.add_argument("--version", action="version", version=f"skcontrast {__version__}")
    threads = argparse.ArgumentParser(add_help=False)
    threads.add_argument("--threads", default="auto",
                         help="CPU threads for torch and BLAS: a number, or 'auto' (the "
                              "cores left free by other load; OMP_NUM_THREADS if set)")
    sub = parser.add_subparsers(dest="command", metavar="{demo,bench,synthetic}")
    defaults = argparse.ArgumentDefaultsHelpFormatter
    demo = sub.add_parser(
        "demo", help="compare batch selectors on split-view digits, SimCLR on the digit "
             "images and text search (about three minutes on two CPU cores)",
        description="Train ContrastiveEmbedder with several batch selectors and "
                    "SupConEmbedder with and without batch-binding on sklearn's digits "
                    "split into left/right halves, SimCLR on the digit images and a text "
                    "search of emoji names; print a table and write figures.",
        formatter_class=defaults, parents=[threads])
    demo.add_argument("--quick", action="store_true", help="small budget (CI)")
    demo.add_argument("--out", default="skcontrast-demo", help="folder for figures")
    demo.add_argument("--seed", type=int, default=0, help="random_state of every fit")
    demo.set_defaults(func=_run_demo)
    bench = sub.add_parser(
        "bench", help="run the benchmarks against named peers",
        description="Run benchmarks/bench_<which>.py; options after -- go to the script, "
                    "e.g. skcontrast bench losses -- --sizes 256 1024 (see each script's "
                    "options with: skcontrast bench losses -- --help)")
    # no ``choices`` here: with nargs='*', Python < 3.12 checks the default list itself
    # against them and refuses it; names are checked in _run_bench
    bench.add_argument("which", nargs="*", metavar="NAME",
                       help=f"benchmark(s) to run, among {', '.join(BENCHMARKS)} "
                            "(default: losses)")
    bench.set_defaults(func=_run_bench)
    synthetic = sub.add_parser(
        "synthetic", help="batch selection on directly optimised embeddings (Sreenivasan "
                          "et al. 2023, Cho et al. 2023)",
        description="Optimise N unit-norm pairs directly with every batch-selection "
                    "method from the same starting points (the synthetic experiments of "
                    "Sreenivasan et al. 2023 and Cho et al. 2023, 'Mini-batch optimization "
                    "of contrastive loss'), and fixed, shuffled and OSGD batches with "
                    "SogCLR's global estimator; print the final distance to the optimal "
                    "geometry and draw the Gram heat maps.", formatter_class=defaults,
        parents=[threads])
    synthetic.add_argument("--n", type=int, default=8, help="number of pairs N")
    synthetic.add_argument("--d", type=int, default=16, help="embedding dimension")
    synthetic.add_argument("--batch-size", type=int, default=2, help="batch size B")
    synthetic.add_argument("--steps", type=int, default=500, help="gradient steps")
    synthetic.add_argument("--seeds", type=int, default=5,
                           help="starting points per method (mean ± std)")
    synthetic.add_argument("--lr", type=float, default=0.5, help="step size")
    synthetic.add_argument("--gamma", type=float, default=0.9,
                           help="SogCLR's moving-average weight in the '+ SogCLR' rows")
    synthetic.add_argument("--out", default="skcontrast-synthetic",
                           help="folder for the figure")
    synthetic.set_defaults(func=_run_synthetic)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    forwarded: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, forwarded = argv[:cut], argv[cut + 1:]
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # plain `skcontrast`: what it can do
        parser.print_help()
        return 0
    args.extra = forwarded
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
