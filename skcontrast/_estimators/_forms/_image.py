"""The image form: single images, by the rule of :mod:`skcontrast.images` — ``(n, C, H,
W)`` with 1 or 3 channels, channels-last ``(n, H, W, C)``, ``(n, H, W)`` bytes, or a list
of PIL images — read as one view ``(C, H, W)`` (bytes stay bytes, turned into [0, 1] on
the training device). Colour channels are never views: an estimator makes the pairs with
its augmentation (the default :class:`~skcontrast.images.ImageAugmentation` when it has
none)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..._pixels import (
    channels_first,
    check_pixel_range,
    image_layout,
    is_pil_image,
    pil_images,
)
from ..._validation import describe
from .._checks import as_tensor, check_length, conform, where_in
from .._data import InputSpec, TensorViews, View, ViewData, array_view
from ._form import NO_FEATURES, InputForm


def is_pil_list(X: Any) -> bool:
    """A non-empty list or tuple of PIL images."""
    return isinstance(X, list | tuple) and bool(X) and all(is_pil_image(x) for x in X)


def as_images(X: Any, name: str = "X") -> torch.Tensor | None:
    """``X`` as ``(n, C, H, W)`` images when it is single images by the rule, else
    ``None`` (ambiguous shapes are refused)."""
    if is_pil_list(X):
        X = pil_images(X, name)
    if not isinstance(X, np.ndarray | torch.Tensor):
        return None
    layout = image_layout(X)
    if layout is None:
        return None
    return as_tensor(channels_first(X, layout), name, images=True)


class ImageForm(InputForm):
    name = "image"

    def detect(self, X: Any) -> bool:
        if isinstance(X, list | tuple):
            return is_pil_list(X)
        return isinstance(X, np.ndarray | torch.Tensor) and image_layout(X) is not None

    def fit(self, estimator: Any, X: Any, *, single: bool, labelled: bool,
            view_split: Any) -> tuple[ViewData, InputSpec, dict]:
        data, spec = read_images(X, None)
        return data, spec, NO_FEATURES

    def read(self, estimator: Any, X: Any, spec: InputSpec) -> ViewData:
        return read_images(X, spec)[0]

    def read_view(self, X: Any, view: View, name: str, tokenizer: Any) -> ViewData:
        return read_images(X, InputSpec(self.name, (view,)), name)[0]


IMAGE = ImageForm()


def read_images(X: Any, spec: InputSpec | None, name: str = "X", column: Any = 0
                  ) -> tuple[TensorViews, InputSpec]:
    """Single images as one view ``(C, H, W)``, checked against ``spec`` after fit; in
    fit, the view is named ``column`` (a table's image column: read by that name
    after fit)."""
    x = as_images(X, name)
    if x is None:
        expected = "" if spec is None else f" (fitted on {spec.views[0].describe()})"
        raise ValueError(f"{name} must be single images{expected}: (n, C, H, W) with 1 or 3 "
                         "channels, (n, H, W, C) channels last, (n, H, W) bytes or a list "
                         f"of PIL images; got {describe(X)}")
    check_length(len(x), name, minimum=1)
    expected_view = None if spec is None else spec.views[0]
    view = array_view(x, column, expected_view, name)
    view = View(view.name, view.shape, view.integer, image=True)
    x = conform(x, view, name, where_in(name))
    check_pixel_range(x, name)
    return TensorViews((x,)), InputSpec("image", (view,))
