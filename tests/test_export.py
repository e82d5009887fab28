"""Export of what ``transform`` computes (skcontrast/_estimators/_export.py) to ONNX and
TorchScript (issue 28)."""

import importlib.util

import numpy as np
import pytest
import torch
from torch import nn

from skcontrast import ContrastiveEmbedder, SupConEmbedder
from skcontrast.datasets import digit_cnn, load_digit_images, load_digit_views

needs_onnx = pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnx") is None,
    reason="needs onnx and onnxruntime (pip install onnx onnxruntime onnxscript)")
SMALL = {"max_epochs": 2, "random_state": 0, "device": "cpu", "batch_size": 64}


@pytest.fixture(scope="module")
def fitted():
    X, _ = load_digit_views()
    images, y = load_digit_images()
    mlp = ContrastiveEmbedder(**SMALL).fit(X[:400])
    cnn = SupConEmbedder(digit_cnn, projection_head=16, transform_from="backbone",
                         **SMALL).fit(images[:400], y[:400])
    return {"mlp": (mlp, X[:100, 0], X[:100]), "cnn": (cnn, images[:100], images[:100])}


def run_onnx(path, x):
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path))
    return session.run(None, {"x": np.asarray(x)})[0]


def run_torchscript(path, x):
    module = torch.jit.load(str(path))
    with torch.no_grad():
        return module(torch.as_tensor(x)).numpy()


@pytest.mark.parametrize("model", ["mlp", "cnn"])
@pytest.mark.parametrize("format", [pytest.param("onnx", marks=[needs_onnx, pytest.mark.slow]),
                                    "torchscript"])
def test_the_exported_encoder_gives_transforms_output(fitted, model, format, tmp_path):
    est, items, X = fitted[model]
    path = est.export(tmp_path / f"encoder.{format}", format)
    run = run_onnx if format == "onnx" else run_torchscript
    np.testing.assert_allclose(run(path, items.astype(np.float32)), est.transform(X),
                               atol=1e-5)
    np.testing.assert_allclose(run(path, items[:7].astype(np.float32)),
                               est.transform(X[:7]), atol=1e-5)  # any batch size


def test_bytes_in_bytes_out_as_transform_scales_them(tmp_path):
    images, _ = load_digit_images()
    pixels = (images[:200] * 255).astype(np.uint8)
    pairs = np.stack([pixels, np.roll(pixels, 1, axis=-1)], axis=1)
    est = ContrastiveEmbedder(digit_cnn, image_normalization=(0.3, 0.4), **SMALL).fit(pairs)
    path = est.export(tmp_path / "bytes.pt", "torchscript", example=pixels[:2])
    np.testing.assert_allclose(run_torchscript(path, pixels[:50]), est.transform(pairs[:50]),
                               atol=1e-5)


def test_what_cannot_be_exported_is_said(tmp_path):
    class Keywords(nn.Module):
        def __init__(self, n_in, n_out):
            super().__init__()
            self.embed = nn.EmbeddingBag(20, n_out, mode="sum")

        def forward(self, ids, weights):
            return self.embed(ids, per_sample_weights=weights)

    rng = np.random.default_rng(0)
    X = {"a": rng.normal(size=(40, 5)).astype(np.float32),
         "b": {"ids": rng.integers(0, 20, size=(40, 3)),
               "weights": rng.random((40, 3)).astype(np.float32)}}
    est = ContrastiveEmbedder({"a": nn.Linear(5, 4), "b": Keywords}, n_components=4,
                              **{**SMALL, "batch_size": 8}).fit(X)
    assert est.export(tmp_path / "a.pt", "torchscript", view="a").exists()
    with pytest.raises(ValueError, match="keyword arguments, which export does not handle"):
        est.export(tmp_path / "b.pt", "torchscript", view="b")
    with pytest.raises(ValueError, match="format must be one of 'onnx', 'torchscript'"):
        est.export(tmp_path / "a.bin", "pickle", view="a")
