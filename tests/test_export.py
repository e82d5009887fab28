"""Export of what ``transform`` computes (skcontrast/_estimators/_export.py) to ONNX and
TorchScript."""

import importlib.util

import numpy as np
import pytest
import torch
from _helpers import small_mlp
from torch import nn

from skcontrast import ContrastiveEmbedder, SupConEmbedder
from skcontrast.datasets import (
    digit_cnn,
    load_digit_images,
    load_digit_views,
)

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


SMALL_FIT = small_mlp(batch_size=16)


class _TokenMean(torch.nn.Module):
    def __init__(self, n_out=4):
        super().__init__()
        self.embedding = torch.nn.Embedding(50, n_out)  # the exporter names a value so

    def forward(self, x):
        return self.embedding(x).mean(1)


class _Branchy(torch.nn.Module):
    """Data-dependent branching that TorchScript can script."""

    def __init__(self, n_in=5, n_out=4):
        super().__init__()
        self.a, self.b = torch.nn.Linear(n_in, n_out), torch.nn.Linear(n_in, n_out)

    def forward(self, x):
        if bool(x.sum() > 0):
            return self.a(x)
        return self.b(x)


class _UnscriptableBranchy(_Branchy):
    """The same branch through NumPy, which TorchScript cannot script."""

    def forward(self, x):
        return self.a(x) if np.sign(float(x.sum())) > 0 else self.b(x)


@pytest.mark.slow
@pytest.mark.parametrize("module", [_TokenMean, torch.nn.EmbeddingBag], ids=["Embedding",
                                                                             "EmbeddingBag"])
def test_onnx_export_of_an_embedding_encoder_loads_and_equals_transform(module, tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    X = np.random.default_rng(0).integers(0, 50, size=(64, 2, 6))
    encoder = _TokenMean if module is _TokenMean else\
        (lambda n_in, n_out: torch.nn.EmbeddingBag(50, n_out))
    est = ContrastiveEmbedder(encoder, **{**SMALL_FIT, "max_epochs": 1}).fit(X)
    path = est.export(tmp_path / "tokens.onnx")
    session = onnxruntime.InferenceSession(str(path))
    assert [o.name for o in session.get_outputs()] == ["embedding"]
    out = session.run(None, {"x": X[:9, 0]})[0]
    np.testing.assert_allclose(out, est.transform_view(X[:9, 0], view=0), atol=1e-5)


def test_torchscript_keeps_the_branches_of_a_scriptable_encoder(tmp_path):
    X = np.random.default_rng(0).normal(size=(64, 2, 5)).astype(np.float32)
    est = ContrastiveEmbedder(_Branchy, **SMALL_FIT).fit(X)
    module = torch.jit.load(str(est.export(tmp_path / "branchy.pt", "torchscript")))
    for x in (np.abs(X[:6, 0]), -np.abs(X[:6, 0])):
        with torch.no_grad():
            out = module(torch.as_tensor(x)).numpy()
        np.testing.assert_allclose(out, est.transform_view(x, view=0), atol=1e-5)


def test_a_trace_that_records_one_branch_is_refused_and_not_written(tmp_path):
    X = np.random.default_rng(0).normal(size=(64, 2, 5)).astype(np.float32)
    est = ContrastiveEmbedder(_UnscriptableBranchy, **SMALL_FIT).fit(X)
    path = tmp_path / "branchy.pt"
    with pytest.raises(ValueError, match="torchscript export of view 0 differs from "
                                         "transform on an input unlike the example"):
        est.export(path, "torchscript")
    assert not path.exists()
