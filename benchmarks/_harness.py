"""Timing and peak-memory measurement shared by the benchmarks.

Peers run side by side in one process. Peak memory is the rise of the process's peak
resident set size (``VmHWM``) over its size before the call; Linux lets a process reset
that peak by writing ``5`` to ``/proc/self/clear_refs``, so successive measurements in
one process do not see each other's peaks, and glibc's ``malloc_trim`` first returns
freed heap memory to the system, so that memory a previous call left in the allocator's
cache does not hide new allocations. Where that is not possible the column says ``n/a``
rather than print a wrong figure.
"""

from __future__ import annotations

import gc
import importlib
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kb(field: str) -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _trim_heap() -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _reset_peak() -> bool:
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def measure(fn: Callable[[], object], *, repeats: int = 5, warmup: int = 1,
            device: str = "cpu") -> tuple[float, float | None]:
    """Median wall time (s) of ``fn`` and its peak extra memory (MiB): resident memory on
    the CPU, allocated GPU memory for ``device='cuda'`` (synchronised timings)."""
    cuda = device.startswith("cuda")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), (gpu_peak_mib(fn) if cuda else peak_memory_mib(fn))


def gpu_peak_mib(fn: Callable[[], object]) -> float:
    """Peak GPU memory allocated by one call of ``fn`` beyond what was held before."""
    gc.collect()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return max(0, torch.cuda.max_memory_allocated() - base) / 2**20


def peak_memory_mib(fn: Callable[[], object]) -> float | None:
    """Peak resident memory added by one call of ``fn``, in MiB (``None`` if unknown)."""
    gc.collect()
    _trim_heap()
    base = _status_kb("VmRSS")
    if base is None or not _reset_peak():
        fn()
        return None
    fn()
    peak = _status_kb("VmHWM")
    return None if peak is None else max(0, peak - base) / 1024


def available_memory_bytes() -> int:
    """Memory the system can still give (``MemAvailable``; 8 GiB where unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 * 2**30


def fmt_seconds(t: float | None) -> str:
    if t is None:
        return "—"
    return f"{t * 1e3:9.1f} ms" if t < 10 else f"{t:9.1f} s "


def fmt_mib(m: float | None) -> str:
    return "      n/a" if m is None else f"{m:8.0f}M"


def import_pml(*submodules: str) -> Any:
    """pytorch-metric-learning with ``submodules`` imported, or None (saying so)."""
    try:
        pml = importlib.import_module("pytorch_metric_learning")
        for name in submodules:
            importlib.import_module(f"pytorch_metric_learning.{name}")
    except ImportError:
        print("pytorch-metric-learning is not installed (pip install -e '.[bench]'); "
              "showing skcontrast alone.")
        return None
    return pml


def import_open_clip_loss() -> Any:
    """open_clip's ``loss`` module (torch only), loaded from the installed package
    without running its ``__init__`` (which imports torchvision); or None, saying how to
    install it (``pip install --no-deps open_clip_torch``)."""
    import importlib.util

    spec = importlib.util.find_spec("open_clip")
    if spec is None or not spec.submodule_search_locations:
        print("open_clip is not installed (pip install --no-deps open_clip_torch: its "
              "loss module needs torch only); showing skcontrast alone.")
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "loss.py"
    loader = importlib.util.spec_from_file_location("open_clip_loss", path)
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module


def set_threads(n: int = 2) -> None:
    torch.set_num_threads(n)


def table(rows: list[list[str]], header: list[str]) -> str:
    """Plain fixed-width table."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(h).rjust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def anonymous() -> int:
    """The process's anonymous resident memory, in bytes (Linux's ``RssAnon``): a
    memory-mapped file's pages, which the kernel can drop, are not in it."""
    kb = _status_kb("RssAnon")
    if kb is None:
        raise OSError("the process's anonymous memory needs Linux's /proc/self/status")
    return kb * 1024


def peak_anonymous(run) -> tuple[float, float, object]:
    """MiB of anonymous memory above the start at its peak while ``run()`` runs, its
    seconds, and what it returned."""
    gc.collect()
    _trim_heap()
    peak, done = [0], threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], anonymous())
            time.sleep(0.005)

    before = anonymous()
    watcher = threading.Thread(target=watch)
    watcher.start()
    start = time.perf_counter()
    try:
        result = run()
    finally:
        seconds = time.perf_counter() - start
        done.set()
        watcher.join()
    return max(0, peak[0] - before) / 2**20, seconds, result
