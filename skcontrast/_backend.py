"""Which array library and device to compute with: NumPy/SciPy on the CPU, CuPy on a GPU."""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import numpy as np

from ._validation import check_choice

BACKENDS = ("auto", "numpy", "scipy", "cupy")


@functools.lru_cache(maxsize=1)
def cupy_usable() -> bool:
    """True when CuPy imports *and* a CUDA device answers (cached)."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def resolve_backend(backend: str) -> str:
    """``auto`` becomes ``cupy`` (GPU usable) or ``scipy``; an unusable ``cupy`` is refused."""
    check_choice(backend, "backend", BACKENDS)
    if backend == "auto":
        return "cupy" if cupy_usable() else "scipy"
    if backend == "cupy" and not cupy_usable():
        raise ValueError(
            "backend='cupy' needs CuPy and a CUDA GPU, and none is usable here; install the "
            "'gpu' extra on a machine with a GPU, or use backend='auto' to fall back to SciPy"
        )
    return backend


def array_module(backend: str) -> ModuleType:
    """NumPy for the CPU backends, CuPy for ``'cupy'``."""
    if backend == "cupy":
        import cupy

        return cupy
    return np


def to_numpy(x: Any) -> np.ndarray:
    """Bring a NumPy or CuPy array to host memory."""
    return x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else np.asarray(x)
