"""The ``skcontrast`` command (also ``python -m skcontrast``)."""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

BENCHMARKS = ("losses", "selectors", "fit")


def _benchmark_dir() -> Path:
    return Path(__file__).resolve().parents[1] / "benchmarks"


def _run_bench(args: argparse.Namespace) -> int:
    folder = _benchmark_dir()
    if not folder.is_dir():
        print("The benchmarks live in the source repository's benchmarks/ folder, which this "
              "installation does not include. Run from a clone: pip install -e '.[bench]'",
              file=sys.stderr)
        return 2
    for name in args.which:
        script = folder / f"bench_{name}.py"
        print(f"== {script.relative_to(folder.parent)} ==", flush=True)
        saved = sys.argv
        sys.argv = [str(script), *args.extra]
        try:
            runpy.run_path(str(script), run_name="__main__")
        finally:
            sys.argv = saved
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="skcontrast",
        description="Contrastive learning with pluggable mini-batch selection.")
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser(
        "bench", help="run the benchmarks against named peers",
        description="Run benchmarks/bench_<which>.py; options after -- go to the script, "
                    "e.g. skcontrast bench losses -- --sizes 256 1024")
    bench.add_argument("which", nargs="*", choices=BENCHMARKS, default=["losses"],
                       help="which benchmark(s) to run (default: losses)")
    bench.set_defaults(func=_run_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    forwarded: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, forwarded = argv[:cut], argv[cut + 1:]
    args = build_parser().parse_args(argv)
    args.extra = forwarded
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
