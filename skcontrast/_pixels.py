"""What pixels are: the rule that tells single images from other arrays, what their values
mean, and PIL images read as arrays (see :mod:`skcontrast.images`, which documents the
rule and exports these functions). Every reader of images applies them: the estimators'
input forms, the tables' image columns, the training step's device transfer."""

from __future__ import annotations

import math
import sys
import warnings
from typing import Any

import numpy as np
import torch

from ._validation import describe

#: the smallest side of an image (smaller 4-D arrays keep their array meaning)
MIN_SIDE = 8
#: colour channel counts an image may have (grey, RGB)
CHANNELS = (1, 3)
#: the integer pixel types read as images, by the value of full intensity: bytes, and
#: 16-bit pixels (microscopy, medical imaging); both become floats in [0, 1]
PIXEL_RANGES = {torch.uint8: 255, torch.uint16: 65535}
#: the same types as NumPy names them
NUMPY_PIXELS = {np.dtype(np.uint8): 255, np.dtype(np.uint16): 65535}

def is_pil_image(x: Any) -> bool:
    """Whether ``x`` is a PIL image (without importing PIL where it is not loaded)."""
    image = sys.modules.get("PIL.Image")
    return image is not None and isinstance(x, image.Image)


def pil_images(images: Any, name: str = "X") -> np.ndarray:
    """A sequence of PIL images as ``(n, H, W, C)`` bytes, all of one size: grey
    (``'L'``) images as one channel, colour (``'RGB'``, or ``'RGB'`` and ``'L'`` mixed,
    the grey ones converted as ``Image.convert('RGB')`` does) as three; other modes and
    several sizes are refused, naming the conversion to make. The one reader of PIL
    images, a list of them or a ``datasets`` image column alike."""
    modes = {im.mode for im in images}
    sizes = {im.size for im in images}
    if len(sizes) > 1:
        raise ValueError(f"{name} holds PIL images of {len(sizes)} sizes "
                         f"({sorted(sizes)[:3]}...); resize them to one size first (e.g. "
                         "[im.resize((32, 32)) for im in images])")
    if modes <= {"L"}:
        return np.stack([np.asarray(im, dtype=np.uint8) for im in images])[..., None]
    if not modes <= {"RGB", "L"}:
        raise ValueError(f"{name} holds PIL images of mode(s) {sorted(modes)}; convert them "
                         "to 'RGB' or 'L' first ([im.convert('RGB') for im in images])")
    return np.stack([np.asarray(im.convert("RGB"), dtype=np.uint8) for im in images])


def is_pixel_type(dtype: Any) -> bool:
    """Whether ``dtype`` (torch's or NumPy's) is an integer pixel type
    (``PIXEL_RANGES``): bytes or 16-bit pixels."""
    return dtype in PIXEL_RANGES if isinstance(dtype, torch.dtype) else \
        np.dtype(dtype) in NUMPY_PIXELS


def image_layout(x: np.ndarray | torch.Tensor) -> str | None:
    """``'first'`` (channels first), ``'last'`` (channels last), ``'grey'`` (``(n, H,
    W)`` bytes or 16-bit pixels) when the array is single images by the module's rule,
    else ``None``; ambiguous shapes, and images of an integer type other than
    ``uint8`` and ``uint16``, are refused (see :mod:`skcontrast.images`)."""
    shape = tuple(x.shape)
    if len(shape) == 3 and is_pixel_type(x.dtype) and min(shape[1:]) >= MIN_SIDE:
        return "grey"
    if len(shape) != 4:
        return None
    layout = None
    if min(shape[2:]) >= MIN_SIDE and shape[1] in CHANNELS:
        layout = "first"
    elif min(shape[1:3]) >= MIN_SIDE and shape[3] in CHANNELS and shape[1] > 3:
        layout = "last"
    if layout is not None:
        _check_pixel_type(x)
        return layout
    if (min(shape[2:]) >= MIN_SIDE and shape[1] == 4) or \
            (min(shape[1:3]) >= MIN_SIDE and shape[3] == 4 and shape[1] > 4):
        raise ValueError(f"X of {describe(x)} is ambiguous: RGBA images, or pairs with two "
                         "hard-negative columns? Pass colour images as X[:, :3] (channels "
                         "first) or X[..., :3] (channels last), or hard negatives of 2-D "
                         "views as (n, 4, 1, H, W)")
    return None


def _check_pixel_type(x: np.ndarray | torch.Tensor) -> None:
    """Refuse integer images of a type other than bytes and 16-bit pixels, whose scale
    is unknown (``int64`` from ``np.asarray`` of nested lists, ``int16`` scans...)."""
    integer = not x.is_floating_point() and x.dtype != torch.bool \
        if isinstance(x, torch.Tensor) else x.dtype.kind in "iu"
    if integer and not is_pixel_type(x.dtype):
        raise ValueError(
            f"X ({describe(x)}) holds images of {x.dtype} pixels, whose scale is unknown: "
            "images are bytes (uint8, 0-255), 16-bit pixels (uint16, 0-65535) or floats in "
            "[0, 1]. Convert them: X.astype(np.uint8) for values in 0-255, "
            "X.astype(np.uint16) for 16-bit values, or X.astype(np.float32) / full_scale "
            "for others")


def pixel_floats(x: torch.Tensor) -> torch.Tensor:
    """Images as the float32 values the network reads.

    What the estimators do to every batch on the training device (and
    :meth:`ImageEncoder.fit_prior` to the images of its prior): bytes are divided by
    255 and 16-bit pixels by 65535, their types' full range, so both lie in [0, 1];
    floats are kept as they are (made float32); other tensors (token ids) are returned
    untouched.

    Parameters
    ----------
    x : torch.Tensor
        A batch of images (or of any view).

    Returns
    -------
    torch.Tensor

    Examples
    --------
    >>> import torch
    >>> from skcontrast.images import pixel_floats
    >>> pixel_floats(torch.tensor([0, 255], dtype=torch.uint8)).tolist()
    [0.0, 1.0]
    >>> pixel_floats(torch.tensor([65535], dtype=torch.uint16)).tolist()
    [1.0]
    """
    full = PIXEL_RANGES.get(x.dtype)
    if full is not None:
        return x.float().div_(full)
    return x.float() if x.is_floating_point() and x.dtype != torch.float32 else x


def check_pixel_range(x: np.ndarray | torch.Tensor, name: str = "X") -> None:
    """Warn when float images hold values beyond [0, 1] and none below 0.

    Float images are read as intensities in [0, 1], the range bytes are scaled to
    (:func:`pixel_floats`), and the default augmentation's brightness, contrast and
    noise are in its units; float images in [0, 255] (``np.asarray(pil).astype(float)``)
    and the same pixels as bytes would embed differently. Every read of float images
    by the estimators (``fit``, ``transform``, ``score``) goes through this check.
    Standardised images (with negative values) pass. The values are read a chunk at a
    time (a memory-mapped array is never copied whole).

    Parameters
    ----------
    x : ndarray or torch.Tensor
        Images ``(n, ...)``; anything but floats passes.
    name : str, default='X'
        What the warning calls them.

    Warns
    -----
    UserWarning
        Naming the range found and the fix (divide 0-255 values by 255, or pass bytes).
    """
    if not (x.is_floating_point() if isinstance(x, torch.Tensor) else x.dtype.kind == "f") \
            or not len(x):
        return
    flat = x.reshape(len(x), -1)
    rows = max(1, 2**24 // max(1, flat.shape[1]))
    low, high = math.inf, -math.inf
    for start in range(0, len(flat), rows):
        chunk = flat[start:start + rows]
        chunk = chunk if isinstance(chunk, torch.Tensor) else torch.from_numpy(
            np.ascontiguousarray(chunk))
        lo, hi = torch.aminmax(chunk)
        low, high = min(low, float(lo)), max(high, float(hi))
        if low < 0:
            return
    if high > 1 + 1e-3:
        warnings.warn(
            f"{name} holds float images with values from {low:g} to {high:g}, but float "
            "images are read as intensities in [0, 1] (bytes are scaled to it, and the "
            "default augmentation's brightness, contrast and noise are in its units): a "
            "model fitted on these embeds the same pixels given as bytes differently. "
            "Divide 0-255 values by 255 (or pass them as uint8), or scale them into "
            "[0, 1]", UserWarning, stacklevel=5)


def channels_first(x: np.ndarray | torch.Tensor, layout: str) -> np.ndarray | torch.Tensor:
    """Images of ``layout`` (see :func:`image_layout`) as ``(n, C, H, W)``."""
    if layout == "grey":
        return x[:, None]
    if layout == "last":
        return x.permute(0, 3, 1, 2) if isinstance(x, torch.Tensor) \
            else np.moveaxis(x, 3, 1)
    return x
