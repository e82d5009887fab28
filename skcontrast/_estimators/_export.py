"""Export of the encoder that ``transform`` uses, to TorchScript or ONNX."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .._validation import check_choice, describe
from ._step import to_device

FORMATS = ("onnx", "torchscript")


class TransformModule(nn.Module):
    """What ``transform`` computes for one view, as a plain module: the input made float
    (bytes scaled to [0, 1], ``image_normalization`` applied) as on the training device,
    the view's encoder (and projection head, as ``transform_from`` says), and the unit
    normalisation of the loss's space."""

    def __init__(self, encoders: nn.Module, view: int, head: bool, normalize: bool,
                 normalization: Any) -> None:
        super().__init__()
        self.encoders = encoders
        self.view, self.head, self.normalize = view, head, normalize
        self.normalization = normalization

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = to_device(x, x.device, self.normalization)
        z = self.encoders.encode(x, self.view, head=self.head)
        return F.normalize(z, dim=-1) if self.normalize else z


def transform_module(estimator: Any, view: int) -> TransformModule:
    """The estimator's ``transform`` for ``view`` as a CPU module in eval mode."""
    net = estimator.net_
    spec = estimator.input_spec_.views[view]
    if spec.parts:
        raise ValueError(f"{spec.describe()} goes to its encoder as keyword arguments, which "
                         "export does not handle; export the encoder yourself from "
                         "est.net_.module_.encoders")
    head = estimator.transform_from == "head"
    normalize = head and getattr(net.criterion_.loss, "normalize", True)
    encoders = copy.deepcopy(net.inference_module()).cpu().eval()
    return TransformModule(encoders, view, head, normalize,
                           estimator.image_normalization).eval()


def export(estimator: Any, path: Any, format: str, view: int, example: Any) -> Path:
    """See :meth:`BaseEmbedder.export`."""
    check_choice(format, "format", FORMATS)
    module = transform_module(estimator, view)
    spec = estimator.input_spec_.views[view]
    if example is None:
        dtype = torch.long if spec.integer else torch.float32
        example = torch.zeros((2, *spec.shape), dtype=dtype)
    example = torch.as_tensor(example)
    if tuple(example.shape[1:]) != spec.shape:
        raise ValueError(f"example must hold items of {spec.describe()}; got "
                         f"{describe(example)}")
    path = Path(path)
    try:
        with torch.no_grad():
            if format == "torchscript":
                torch.jit.save(torch.jit.trace(module, (example,)), str(path))
            else:
                batch = torch.export.Dim("batch", min=1)
                torch.onnx.export(module, (example,), str(path), input_names=["x"],
                                  output_names=["embedding"], dynamo=True,
                                  dynamic_shapes=({0: batch},), external_data=False,
                                  verbose=False)
    except Exception as exc:  # the tracer's or exporter's own message, with what failed
        raise ValueError(f"the encoder of view {spec.name!r} could not be exported to "
                         f"{format}: {type(exc).__name__}: {exc}") from exc
    return path
