"""The checks every input form's reader shares: values made tensors (NumPy memory
shared, never copied) and refused, naming the first bad entry, when they are not finite
or beyond float32's range; and the least number of items a fit or an embedding needs.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .._validation import describe, torch_viewable

if TYPE_CHECKING:
    from ._spec import View


def check_length(n: int, name: str, minimum: int) -> None:
    if n < minimum:
        need = "at least 2 are needed to contrast" if minimum > 1 else "nothing to embed"
        raise ValueError(f"{name} holds {n} sample(s); {need}")


def where_in(label: str) -> Callable[[int, int], str]:
    """Names entry ``position`` of row ``row`` of the rows ``label``."""
    return lambda row, at: f"{label}[{row}] (value {at} of the row)"


def from_numpy(array: np.ndarray) -> torch.Tensor:
    """``torch.from_numpy`` without its warning for read-only arrays (a pandas frame's
    values, a read-only memmap): the estimators never write into their input. An array
    with a negative stride (``X[::-1]``, ``X[:, ::-1]``), which torch cannot view, is read
    as its copy (:func:`~skcontrast._validation.torch_viewable`)."""
    array = torch_viewable(array)
    if array.flags.writeable:
        return torch.from_numpy(array)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(array)


def as_tensor(x: Any, label: str, images: bool = False) -> torch.Tensor:
    """An array, tensor or sequence as a tensor (NumPy memory shared, never copied).
    Unsigned integers beyond bytes become int64 (token ids), but for ``images``, whose
    16-bit pixels keep their type (:mod:`skcontrast.images`)."""
    if isinstance(x, torch.Tensor):
        return x.detach()
    array = np.asarray(x)
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{label} must hold numbers; got {describe(array)}")
    if array.dtype.kind == "u" and array.dtype != np.uint8 and not (
            images and array.dtype == np.uint16):
        if array.dtype == np.uint64 and array.size and array.max() > np.iinfo(np.int64).max:
            raise ValueError(f"{label} holds values up to {array.max()}, beyond the int64 "
                             "range torch computes with; re-encode them (e.g. as token ids "
                             "from 0)")
        array = array.astype(np.int64)  # torch has no uint16/32/64 arithmetic
    return from_numpy(np.ascontiguousarray(array))


#: Values per chunk of the finiteness check, so a memory-mapped array is never copied
#: whole (nor a boolean mask of its size made).
FINITE_CHUNK = 2**24


#: The largest magnitude a float32 holds: the network computes in float32 (or lower),
#: so a float64 value beyond it would become inf when cast.
FLOAT32_MAX = float(np.finfo(np.float32).max)


def check_values(x: torch.Tensor | np.ndarray, name: str,
                 where: Callable[[int, int], str]) -> None:
    """Refuse non-finite floats in ``x`` (called ``name``), and float64 values beyond
    float32's range (which the cast to the network's float32 would turn into inf),
    naming the first bad entry by ``where(row, position)`` (its position among the
    row's values).

    Checked chunk by chunk, so a memory-mapped array is read but never held whole in
    memory twice."""
    flat = x.reshape(len(x), -1) if len(x) else x
    if not len(flat):
        return
    wide = flat.dtype in (torch.float64, np.float64)
    rows = max(1, FINITE_CHUNK // max(1, flat.shape[-1] if flat.ndim > 1 else 1))
    def chunk_at(start: int) -> torch.Tensor:
        chunk = flat[start:start + rows]
        return chunk if isinstance(chunk, torch.Tensor) else from_numpy(chunk)

    for start in range(0, len(flat), rows):
        chunk = chunk_at(start)
        bad = ~torch.isfinite(chunk)
        if bool(bad.any()):
            total = int(bad.sum()) + sum(int((~torch.isfinite(chunk_at(i))).sum())
                                         for i in range(start + rows, len(flat), rows))
            row, position = (int(i) for i in bad.nonzero()[0])
            raise ValueError(f"{name} contains {total} NaN or infinite value(s), the first "
                             f"{where(start + row, position)}; clean or impute them first")
        big = chunk.abs() > FLOAT32_MAX if wide else None
        if big is not None and bool(big.any()):
            row, position = (int(i) for i in big.nonzero()[0])
            raise ValueError(f"{where(start + row, position)} is "
                             f"{float(chunk[row, position]):g}, beyond the float32 range "
                             f"(±{FLOAT32_MAX:.4g}) the network computes in: it would "
                             "become inf. Rescale the data (e.g. sklearn's StandardScaler)")


def conform(x: torch.Tensor, view: View, name: str,
            where: Callable[[int, int], str]) -> torch.Tensor:
    """Check a view's values (:func:`check_values`); keep them as they are (no copy:
    floats are cast to float32 and bytes turned into [0, 1] images on the training
    device, batch by batch)."""
    if view.integer or not x.is_floating_point():
        return x
    check_values(x, name, where)
    return x

