"""Which of the package's files and functions one training step runs.

A one-epoch fit of 64 rows and one of 256 rows, at batch size 64 (one step and four),
are profiled; the package's functions whose call counts grow with the number of steps
are the training step's, and their files the step's path. Array pairs and text pairs
are measured (text adds the tokenizer and the text encoder).

Run: ``python benchmarks/fit_path.py`` (``--functions`` lists the functions too).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

import skcontrast
from skcontrast import ContrastiveEmbedder

PACKAGE = Path(skcontrast.__file__).resolve().parent


def calls(X: object) -> dict[tuple[str, str], int]:
    """How often each of the package's functions runs in a one-epoch fit on ``X``."""
    est = ContrastiveEmbedder(max_epochs=1, batch_size=64, random_state=0, device="cpu")
    profile = cProfile.Profile()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        profile.runcall(est.fit, X)
    counts: dict[tuple[str, str], int] = {}
    for (path, _, name), row in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
        where = Path(path).resolve()
        if where.is_relative_to(PACKAGE):
            key = (str(where.relative_to(PACKAGE.parent)), name)
            counts[key] = counts.get(key, 0) + row[1]
    return counts


def step_path(make: object) -> tuple[dict[str, list[str]], dict[tuple[str, str], int]]:
    """The files (and their functions) whose calls grow from one step to four, and every
    function a one-step fit runs."""
    small, large = calls(make(64)), calls(make(256))  # type: ignore[operator]
    growing: dict[str, list[str]] = defaultdict(list)
    for key, count in large.items():
        if count > small.get(key, 0):
            growing[key[0]].append(key[1])
    return dict(sorted(growing.items())), small


def arrays(n: int) -> np.ndarray:
    return np.random.default_rng(0).normal(size=(n, 2, 16)).astype(np.float32)


def texts(n: int) -> list[tuple[str, str]]:
    words = ["red", "heart", "cat", "face", "flag", "france", "thumbs", "up", "blue", "dog"]
    rng = np.random.default_rng(0)
    return [(" ".join(rng.choice(words, 3)), " ".join(rng.choice(words, 3)))
            for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--functions", action="store_true", help="list the functions too")
    args = parser.parse_args()
    for name, make in (("array pairs", arrays), ("text pairs", texts)):
        files, fit = step_path(make)
        fit_files = {path for path, _ in fit}
        print(f"{name}: a step runs {sum(map(len, files.values()))} functions in "
              f"{len(files)} files; a one-step fit runs {len(fit)} functions in "
              f"{len(fit_files)} files")
        for path, functions in files.items():
            print(f"  {path}" + (f": {', '.join(sorted(functions))}" if args.functions
                                 else f" ({len(functions)})"))


if __name__ == "__main__":
    main()
