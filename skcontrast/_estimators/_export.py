"""Export of the encoder that ``transform`` uses, to TorchScript or ONNX."""

from __future__ import annotations

import contextlib
import copy
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .._validation import check_choice, describe
from ._data import to_device

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

    encoders: Any

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
    checks = [example, *_other_inputs(example, module)]
    if spec.text:  # token ids of any length: a longer batch is checked too
        longer = _other_inputs(torch.zeros((2, example.shape[1] + 3), dtype=example.dtype),
                               module)[0]
        checks.append(longer)
    try:
        with torch.no_grad():
            if format == "torchscript":
                exported = _torchscript(module, example)
                torch.jit.save(exported, str(path))
                run = exported
            else:
                _onnx(module, example, path, text=spec.text)
                run = _onnx_runner(path)
    except Exception as exc:  # the tracer's or exporter's own message, with what failed
        raise ValueError(f"the encoder of view {spec.name!r} could not be exported to "
                         f"{format}: {type(exc).__name__}: {exc}") from exc
    if run is not None:
        _check_equal(module, run, checks, path, format, spec.name)
    return path


def _torchscript(module: TransformModule, example: torch.Tensor) -> Any:
    """The module traced, with each encoder and head scripted where TorchScript can
    script it, so that its branches on the data are kept (a trace records only those
    the example takes; :func:`_check_equal` then compares other inputs)."""
    module = copy.deepcopy(module)
    for parts in (module.encoders.encoders, module.encoders.heads or []):
        for i, part in enumerate(parts):
            with contextlib.suppress(Exception):  # not scriptable: traced with the rest
                parts[i] = torch.jit.script(part)
    return torch.jit.trace(module, (example,), check_trace=False)


def _onnx(module: nn.Module, example: torch.Tensor, path: Path, text: bool = False) -> None:
    """ONNX export with a dynamic batch size (and, for token ids, a dynamic length) and
    the output named ``embedding``."""
    import onnx

    batch = torch.export.Dim("batch", min=1)
    axes = {0: batch, 1: torch.export.Dim("length", min=1)} if text else {0: batch}
    torch.onnx.export(module, (example,), str(path), input_names=["x"],
                      output_names=[OUTPUT], dynamo=True, dynamic_shapes=(axes,),
                      external_data=False, verbose=False)
    model = onnx.load(str(path))
    if _rename_inner_values(model.graph, OUTPUT):
        onnx.save(model, str(path))
    onnx.checker.check_model(model, full_check=True)


#: The name of the exported ONNX graph's output.
OUTPUT = "embedding"


def _rename_inner_values(graph: Any, name: str) -> bool:
    """Give a fresh name to every value of ``graph`` that is called ``name`` but is not
    its output (the exporter names values after their operator, so an encoder with an
    ``nn.Embedding`` computes a value called ``embedding`` before the output, and the
    file would define that name twice). Returns whether anything was renamed."""
    producers = [i for i, node in enumerate(graph.node) if name in node.output]
    if len(producers) < 2:
        return False
    taken = {value for node in graph.node for value in [*node.input, *node.output]}
    fresh = next(f"{name}_inner_{i}" for i in range(len(taken) + 1)
                 if f"{name}_inner_{i}" not in taken)
    last = producers[-1]
    for i, node in enumerate(graph.node[:last + 1]):
        node.input[:] = [fresh if value == name else value for value in node.input]
        if i < last:
            node.output[:] = [fresh if value == name else value for value in node.output]
    return True


def _onnx_runner(path: Path) -> Any:
    """A callable running the ONNX file with onnxruntime, or ``None`` (with a warning)
    when onnxruntime is not installed."""
    try:
        import onnxruntime
    except ImportError:
        warnings.warn(f"{path} was written but not compared with transform: onnxruntime is "
                      "not installed (pip install onnxruntime)", UserWarning, stacklevel=4)
        return None
    session = onnxruntime.InferenceSession(str(path))
    return lambda x: torch.as_tensor(session.run(None, {"x": x.numpy()})[0])


def _other_inputs(example: torch.Tensor, module: nn.Module) -> list[torch.Tensor]:
    """Two inputs unlike the example (another batch size, random values of its dtype,
    of either sign), to compare the export with the module on."""
    generator = torch.Generator().manual_seed(0)
    shape = (3, *example.shape[1:])
    if example.dtype == torch.uint8:
        return [torch.randint(0, 256, shape, generator=generator, dtype=torch.uint8)
                for _ in range(2)]
    if not example.is_floating_point():
        sizes = [m.num_embeddings for m in module.modules()
                 if isinstance(m, nn.Embedding | nn.EmbeddingBag)]
        high = min(sizes) if sizes else int(example.max()) + 1
        return [torch.randint(0, max(high, 1), shape, generator=generator,
                              dtype=example.dtype) for _ in range(2)]
    scale = float(example.abs().max()) or 1.0
    draw = torch.randn(shape, generator=generator, dtype=example.dtype) * scale
    return [draw, -draw]


def _check_equal(module: nn.Module, run: Any, inputs: list[torch.Tensor], path: Path,
                 format: str, view: Any) -> None:
    """Refuse (and remove) an export whose output differs from the module's."""
    for x in inputs:
        with torch.no_grad():
            want, got = module(x), run(x).detach()
        if want.shape != got.shape or not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
            path.unlink(missing_ok=True)
            gap = (got - want).abs().max() if want.shape == got.shape else "shape"
            raise ValueError(
                f"the {format} export of view {view!r} differs from transform on an input "
                f"unlike the example (largest difference {gap}): the encoder's computation "
                "depends on its input's values in a way the exporter did not record (e.g. "
                "an if on the data, traced along one branch). Make the branch a tensor "
                "operation (torch.where), or export with an example that takes every path; "
                "nothing was written")
