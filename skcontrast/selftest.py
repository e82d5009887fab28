"""A self-check of the GPU paths: ``python -m skcontrast.selftest [--gpu]``.

Checks, in a few minutes, what the CPU-only test suite cannot: that the CUDA and CuPy
paths compute what the CPU computes, and how fast they are. It needs only torch and the
package's core dependencies (CuPy for the spectral selector's ``backend='cupy'``), runs
from an installed package or a copy of the repository, and prints one table:

- every loss object on CUDA against the CPU in float64 (values and gradients), and tiled
  against dense on the device;
- a tiled loss at ``B = 16,384`` on the GPU: time and peak memory against the dense one;
- the spectral selector on CuPy: planted groups recovered with every eigensolver,
  ``backend='auto'`` choosing CuPy, and an epoch at ``n = 12,800`` timed against SciPy
  with its hardness;
- a training epoch on CUDA (time per epoch from two fit lengths), mixed precision, a
  memory, and the model saved there loading and transforming on the CPU;
- mAP@R and the other class-retrieval metrics on CUDA against the CPU;
- the test suite's GPU tests (``pytest -m gpu``), when pytest and the repository's tests
  are present.

Without ``--gpu`` it runs in CPU-only mode where no GPU is usable: the checks that need
none run, the others are listed as skipped with the reason. ``--gpu`` refuses to run
without a GPU. The exit status is 1 when a check fails.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPOSITORY = Path(__file__).resolve().parents[1]


@dataclass
class Row:
    """One line of the table: a check, its outcome, its figures, what it means."""

    check: str
    status: str  # 'pass', 'FAIL' or 'skip'
    figures: str = ""
    note: str = ""


def _median_time(fn: Callable[[], object], repeats: int = 3, sync: bool = False) -> float:
    fn()  # warm-up (kernels compiled, caches filled)
    times = []
    for _ in range(repeats):
        if sync:
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if sync:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def environment(gpu: bool) -> list[Row]:
    from ._backend import cupy_usable
    from ._version import __version__

    where = torch.cuda.get_device_name() if gpu else "no CUDA GPU usable"
    cupy = "absent"
    if importlib.util.find_spec("cupy") is not None:
        import cupy as cp

        cupy = f"{cp.__version__} ({'usable' if cupy_usable() else 'no GPU'})"
    return [Row("environment", "pass", f"skcontrast {__version__}, torch "
                f"{torch.__version__}, CuPy {cupy}", where)]


def losses(gpu: bool) -> list[Row]:
    """Every loss object on CUDA equals the CPU in float64; tiled equals dense."""
    from .losses import LOSSES

    rng = np.random.default_rng(0)
    u0, v0 = (torch.from_numpy(rng.normal(size=(12, 6))) for _ in range(2))
    device = "cuda" if gpu else "cpu"
    worst_device, worst_tiled = 0.0, 0.0

    def value_and_grads(loss: Any, device: str) -> list[torch.Tensor]:
        u, v = (x.to(device).clone().requires_grad_() for x in (u0, v0))
        out = loss.pair_terms(u, v).loss
        out.backward()
        assert u.grad is not None and v.grad is not None
        return [out.detach().cpu(), u.grad.cpu(), v.grad.cpu()]

    def gap(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
        return max(float(((x - y).abs() / y.abs().clamp_min(1e-12)).max())
                   for x, y in zip(a, b, strict=True))

    for cls in LOSSES.values():
        dense = cls()
        if "chunk_size" in dense.get_params():
            dense.set_params(chunk_size=None)
        reference = value_and_grads(dense, "cpu")
        if gpu:
            worst_device = max(worst_device, gap(value_and_grads(dense, "cuda"), reference))
        if dense.tileable:
            tiled = cls(chunk_size=5)
            worst_tiled = max(worst_tiled, gap(value_and_grads(tiled, device), reference))
    rows = [Row(f"{len(LOSSES)} losses: tiled = dense on {device}",
                "pass" if worst_tiled < 1e-9 else "FAIL",
                f"max rel. difference {worst_tiled:.1e}", "values and gradients, float64")]
    if gpu:
        rows.insert(0, Row(f"{len(LOSSES)} losses: CUDA = CPU",
                           "pass" if worst_device < 1e-9 else "FAIL",
                           f"max rel. difference {worst_device:.1e}",
                           "values and gradients, float64"))
    else:
        rows.insert(0, Row(f"{len(LOSSES)} losses: CUDA = CPU", "skip", "", "no GPU"))
    return rows


def tiled_loss(gpu: bool) -> list[Row]:
    """Symmetric InfoNCE at B = 16,384, d = 128: tiled against dense on the GPU."""
    name = "tiled loss, B=16,384, fwd+bwd"
    if not gpu:
        return [Row(name, "skip", "", "no GPU (bench_losses.py measures the CPU)")]
    from .losses import symmetric_info_nce

    g = torch.Generator(device="cuda").manual_seed(0)
    u, v = (torch.randn(16384, 128, device="cuda", generator=g).requires_grad_()
            for _ in range(2))
    figures, values = [], []
    for chunk in (None, 1024):
        def step(chunk: int | None = chunk) -> torch.Tensor:
            u.grad = v.grad = None
            out: Any = symmetric_info_nce(u, v, temperature=0.1, chunk_size=chunk)
            out.backward()
            return out.detach()

        seconds = _median_time(step, sync=True)
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        values.append(float(step()))
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
        figures.append(f"{'dense' if chunk is None else 'tiled'} {1e3 * seconds:.1f} ms "
                       f"{peak:,.0f} MiB")
    same = abs(values[0] - values[1]) <= 1e-4 * abs(values[0])
    return [Row(name, "pass" if same else "FAIL", "; ".join(figures),
                f"values {values[0]:.6f} / {values[1]:.6f}")]


def _planted(n_groups: int = 8, size: int = 6, d: int = 16) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(n_groups, d)) * 4
    truth = np.repeat(np.arange(n_groups), size)
    X = centres[truth][:, None, :] + 0.05 * rng.normal(size=(len(truth), 2, d))
    return X, truth


def spectral(gpu: bool) -> list[Row]:
    """The CuPy backend recovers planted groups, 'auto' picks it, and an epoch is timed."""
    from ._backend import cupy_usable, resolve_backend
    from .datasets import make_paired_embeddings
    from .losses import SymmetricInfoNCE
    from .selectors import ShuffledBatchSelector, SpectralBatchSelector

    usable = gpu and cupy_usable()
    backend = "cupy" if usable else "scipy"
    X, truth = _planted()
    pure = all(
        all(len(set(truth[b].tolist())) == 1 for b in SpectralBatchSelector(
            6, loss=SymmetricInfoNCE(0.1), backend=backend, eigen_solver=solver,
            random_state=0).split(X))
        for solver in ("krylov", "dense", "ritz"))
    rows = [Row(f"spectral ({backend}): planted groups", "pass" if pure else "FAIL",
                "8 groups of 6, 3 eigensolvers", "every batch one group")]
    auto = resolve_backend("auto")
    rows.append(Row("spectral: backend='auto'",
                    "pass" if auto == ("cupy" if cupy_usable() else "scipy") else "FAIL",
                    f"-> {auto}", "CuPy only where a GPU is usable"))
    n = 12_800 if usable else 2_560
    Y, _ = make_paired_embeddings(n, 32, random_state=0)
    loss = SymmetricInfoNCE(0.1)

    def hardness(batches: list[np.ndarray]) -> float:
        return float(np.mean(loss.batch_losses(torch.from_numpy(Y[:, 0]),
                                               torch.from_numpy(Y[:, 1]), batches).numpy()))

    shuffled = hardness(list(ShuffledBatchSelector(32, random_state=0).split(Y)))
    figures, found = [], {}
    for name in (["cupy"] if usable else []) + ["scipy"]:
        selector = SpectralBatchSelector(32, loss=loss, backend=name, random_state=0)
        seconds = _median_time(lambda s=selector: s.epoch_batches(Y),  # type: ignore[misc]
                               repeats=2, sync=name == "cupy")
        found[name] = hardness(selector.epoch_batches(Y)) / shuffled
        figures.append(f"{name} {seconds:.2f} s, hardness {found[name]:.3f}")
    ok = not usable or found["cupy"] >= 0.98 * found["scipy"]
    rows.append(Row(f"spectral epoch, n={n:,}", "pass" if ok else "FAIL", "; ".join(figures),
                    "hardness: mean batch loss / shuffled's" +
                    ("" if usable else " (no GPU: SciPy alone)")))
    return rows


def training(gpu: bool) -> list[Row]:
    """Time per epoch on the device, mixed precision, a memory, and a CPU reload."""
    from ._estimators import ContrastiveEmbedder
    from ._estimators._saving import load
    from .datasets import load_digit_views
    from .memory import SogCLRMemory

    X, _ = load_digit_views()
    device = "cuda" if gpu else "cpu"
    settings = {"batch_size": 256, "random_state": 0, "device": device}

    def fit(epochs: int, **extra: Any) -> tuple[Any, float]:
        start = time.perf_counter()
        est = ContrastiveEmbedder(max_epochs=epochs, **{**settings, **extra}).fit(X)
        return est, time.perf_counter() - start

    fit(1)  # warm-up
    (_, short), (est, long) = fit(2), fit(8)
    per_epoch = (long - short) / 6
    finite = bool(np.isfinite(est.history_[:, "train_loss"]).all())
    rows = [Row(f"training epoch on {device}", "pass" if finite else "FAIL",
                f"{1e3 * per_epoch:.1f} ms per epoch, setup {short - 2 * per_epoch:.2f} s",
                "MLP, digit views (1,797 pairs), B = 256; from fits of 2 and 8 epochs")]
    with tempfile.TemporaryDirectory() as folder:
        est.save(folder)
        loaded = load(folder, device="cpu")
        gap = float(np.abs(loaded.transform(X) - est.transform(X)).max())
    rows.append(Row(f"saved on {device}, loaded on the CPU", "pass" if gap < 1e-4 else "FAIL",
                    f"max difference {gap:.1e}", "transform of the loaded model"))
    extras: dict[str, dict[str, Any]] = {"precision='bfloat16'": {"precision": "bfloat16"},
              "SogCLRMemory": {"memory": SogCLRMemory()}}
    for name, extra in extras.items():
        if not gpu:
            rows.append(Row(f"{name} on CUDA", "skip", "", "no GPU"))
            continue
        trained, _ = fit(2, **extra)
        ok = bool(np.isfinite(trained.history_[:, "train_loss"]).all())
        rows.append(Row(f"{name} on CUDA", "pass" if ok else "FAIL", "finite losses", ""))
    return rows


def retrieval(gpu: bool) -> list[Row]:
    """mAP@R and the other class-retrieval metrics on CUDA equal the CPU's."""
    name = "mAP@R etc. on CUDA, n=20,000"
    if not gpu:
        return [Row(name, "skip", "", "no GPU")]
    from .metrics import class_retrieval

    rng = np.random.default_rng(0)
    H, y = rng.normal(size=(20_000, 64)), rng.integers(0, 100, size=20_000)
    H[10_000:] = H[:10_000] * 3  # rescaled copies: ties
    times, results = {}, {}
    for device in ("cuda", "cpu"):
        times[device] = _median_time(
            lambda d=device: class_retrieval(H, y, device=d),  # type: ignore[misc]
            repeats=1, sync=device == "cuda")
        results[device] = class_retrieval(H, y, device=device)
    gap = max(abs(results["cuda"][k] - results["cpu"][k]) for k in results["cpu"])
    return [Row(name, "pass" if gap < 1e-12 else "FAIL",
                f"cuda {times['cuda']:.2f} s, cpu {times['cpu']:.2f} s "
                f"({times['cpu'] / times['cuda']:.0f}x)", f"max difference {gap:.1e}")]


def gpu_tests(gpu: bool) -> list[Row]:
    """The test suite's tests marked ``gpu``, when pytest and the tests are here."""
    name = "pytest -m gpu"
    tests = REPOSITORY / "tests"
    if not gpu:
        return [Row(name, "skip", "", "no GPU")]
    missing = [m for m in ("pytest", "hypothesis") if importlib.util.find_spec(m) is None]
    if missing or not tests.is_dir():
        return [Row(name, "skip", "", f"needs {', '.join(missing) or 'the repository tests'}")]
    # only the modules that hold GPU tests: the others may need test extras not here
    files = sorted(str(f) for f in tests.glob("test_*.py") if "mark.gpu" in f.read_text())
    done = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p",
                           "no:cacheprovider", *files], cwd=REPOSITORY,
                          capture_output=True, text=True)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "no output"
    failed = done.returncode not in (0, 5)
    note = "" if not failed else (done.stdout + done.stderr)[-600:].replace("\n", " | ")
    return [Row(name, "FAIL" if failed else "pass", summary.strip("= "), note)]


CHECKS = (environment, losses, tiled_loss, spectral, training, retrieval, gpu_tests)


def run(gpu: bool, checks: tuple[Callable[[bool], list[Row]], ...] = CHECKS
        ) -> list[Row]:
    """Every check's rows; a check that raises is a failed row saying what it raised."""
    rows = []
    for check in checks:
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                found = check(gpu)
        except Exception as exc:  # reported as a failed check
            found = [Row(check.__name__, "FAIL", "", f"{type(exc).__name__}: {exc}"[:300])]
        print(f"  {check.__name__}: {time.perf_counter() - start:.1f} s", file=sys.stderr,
              flush=True)
        rows += found
    return rows


def table(rows: list[Row]) -> str:
    header = Row("check", "result", "figures", "note")
    widths = [max(len(getattr(r, f)) for r in [header, *rows])
              for f in ("check", "status", "figures")]
    lines = []
    for row in [header, *rows]:
        cells = [row.check.ljust(widths[0]), row.status.ljust(widths[1]),
                 row.figures.ljust(widths[2]), row.note]
        lines.append("  ".join(cells).rstrip())
        if row is header:
            lines.append("  ".join("-" * w for w in widths) + "  ----")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m skcontrast.selftest",
        description="Check skcontrast's GPU paths (CUDA, CuPy) against the CPU and time "
                    "them; without a GPU, run the CPU-only checks and say what was skipped.")
    parser.add_argument("--gpu", action="store_true",
                        help="require a CUDA GPU (exit status 2 where none is usable)")
    args = parser.parse_args(argv)
    gpu = torch.cuda.is_available()
    if args.gpu and not gpu:
        print("skcontrast selftest --gpu: no CUDA GPU is usable here (torch "
              f"{torch.__version__}); run without --gpu for the CPU-only checks",
              file=sys.stderr)
        return 2
    start = time.perf_counter()
    rows = run(gpu)
    mode = "GPU" if gpu else "CPU-only (no CUDA GPU usable: GPU checks skipped)"
    print(f"skcontrast self-check, {mode}, {time.perf_counter() - start:.0f} s\n")
    print(table(rows))
    failed = [r.check for r in rows if r.status == "FAIL"]
    print(f"\n{len(rows) - len(failed)} of {len(rows)} rows pass or skip"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
