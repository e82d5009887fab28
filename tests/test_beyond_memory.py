"""Batches beyond memory: gradient caching in the training step and tiled losses."""

import functools
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from skcontrast import ContrastiveEmbedder, SupConEmbedder
from skcontrast.datasets import GaussianNoise, load_digit_images, make_paired_gaussians
from skcontrast.losses import (
    KCL,
    TILED_LOSSES,
    NTXent,
    SymmetricInfoNCE,
    dcl,
    dhel,
    info_nce,
    kcl,
    nt_xent,
    supcon,
    symmetric_info_nce,
)
from skcontrast.memory import CrossBatchMemory, SogCLRMemory
from skcontrast.selectors import FullBatchSelector

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pairs():
    return make_paired_gaussians(96, 6, n_clusters=3, random_state=0)


def fit(X, y=None, kind=ContrastiveEmbedder, **params):
    settings = {"n_components": 4, "hidden_layer_sizes": (16,), "max_epochs": 2,
                "lr": 1e-2, "batch_size": 32, "random_state": 0, "device": "cpu", **params}
    est = kind(**settings)
    return est.fit(X) if y is None else est.fit(X, y)


def assert_same_weights(a, b, **tolerance):
    sa, sb = a.net_.module_.state_dict(), b.net_.module_.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        torch.testing.assert_close(sb[name], sa[name], **tolerance)


# --------------------------------------------------------------------------------------
# Gradient caching
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("params", [{}, {"loss": SymmetricInfoNCE(learn_temperature=True)},
                                    {"memory": SogCLRMemory(gamma=0.7), "loss": "dcl"},
                                    {"memory": CrossBatchMemory(size=96), "loss": "nt_xent"}],
                         ids=["mlp", "learned temperature", "sogclr", "xbm"])
def test_cached_update_equals_the_plain_update(pairs, params):
    X, _ = pairs
    plain = fit(X, **params)
    cached = fit(X, micro_batch_size=5, **params)
    assert_same_weights(plain, cached, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cached.history_[:, "train_loss"],
                               plain.history_[:, "train_loss"], rtol=1e-5)
    assert cached.temperature_ == pytest.approx(plain.temperature_, rel=1e-5)
    if "memory" in params:
        for name, value in plain.net_.memory_state.state_dict().items():
            if isinstance(value, torch.Tensor):
                torch.testing.assert_close(cached.net_.memory_state.state_dict()[name], value,
                                           rtol=1e-5, atol=1e-6)


def test_cached_update_for_supcon_and_two_modalities(pairs):
    X, y = pairs
    assert_same_weights(fit(X[:, 0], y, SupConEmbedder),
                        fit(X[:, 0], y, SupConEmbedder, micro_batch_size=7),
                        rtol=1e-5, atol=1e-6)
    modalities = {"a": X[:, 0], "b": X[:, 1, :3]}
    assert_same_weights(fit(modalities), fit(modalities, micro_batch_size=4),
                        rtol=1e-5, atol=1e-6)


def small_cnn(n_in, n_out):
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, n_out))


def test_cached_update_for_a_cnn_on_augmented_images_and_a_dataset_with_workers():
    """The augmentation is drawn once per batch (on the whole batch) and the update is
    the plain one, from arrays and from a Dataset loaded by two workers."""
    images, _ = load_digit_images()
    images = images[:120]
    settings = {"module": small_cnn, "augmentation": GaussianNoise(0.1), "max_epochs": 1}
    plain = fit(images, **settings)
    assert_same_weights(plain, fit(images, micro_batch_size=6, **settings),
                        rtol=1e-5, atol=1e-6)
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(images))
    from_workers = fit(SingleViews(dataset), micro_batch_size=6, num_workers=2, **settings)
    assert_same_weights(plain, from_workers, rtol=1e-5, atol=1e-6)


class SingleViews(torch.utils.data.Dataset):
    """A TensorDataset's one tensor as single-view items (picklable, for workers)."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i):
        return self.dataset[i][0]


def test_cached_update_in_float16_scales_once(pairs, monkeypatch):
    """The grad scaler scales the loss once; with the same scale (no overflow: a small
    initial scale) the float16 update is the plain one up to float16 rounding."""
    monkeypatch.setattr(torch.amp, "GradScaler",
                        functools.partial(torch.amp.GradScaler, init_scale=16.0))
    X, _ = pairs
    settings = {"precision": "float16", "optimizer": "sgd", "lr": 0.1}
    plain, cached = fit(X, **settings), fit(X, micro_batch_size=6, **settings)
    assert cached.net_.grad_scaler_.get_scale() == plain.net_.grad_scaler_.get_scale() == 16.0
    assert_same_weights(plain, cached, rtol=0, atol=5e-3)


class RecordingDropout(nn.Module):
    """Dropout that keeps what it let through at every call."""

    def __init__(self):
        super().__init__()
        self.dropout = nn.Dropout(0.5)
        self.calls = []

    def forward(self, x):
        out = self.dropout(x)
        if self.training:  # the training passes, not the inference ones
            self.calls.append((torch.is_grad_enabled(), out.detach().clone()))
        return out


def test_dropout_sees_the_same_random_numbers_in_both_passes(pairs):
    X, _ = pairs
    recorder = RecordingDropout()
    module = nn.Sequential(nn.Linear(6, 16), recorder, nn.Linear(16, 4))
    est = fit(X, module=module, max_epochs=1, micro_batch_size=4, batch_size=12)
    calls = est.net_.module_.encoders[0][1].calls
    steps = 96 // 12
    assert len(calls) == steps * 2 * 3  # per step: 3 micro-batches, twice
    for step in range(steps):
        block = calls[6 * step: 6 * step + 6]
        assert [grad for grad, _ in block] == [False] * 3 + [True] * 3
        for (_, first), (_, second) in zip(block[:3], block[3:], strict=True):
            torch.testing.assert_close(first, second, rtol=0, atol=0)
            assert (first == 0).any()  # the masks are not trivially empty


def test_batch_norm_is_warned_about_and_its_statistics_updated_once(pairs):
    X, _ = pairs
    module = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.Linear(16, 4))
    with pytest.warns(UserWarning, match="batch-normalisation layers: with micro_batch_size"):
        est = fit(X, module=module, max_epochs=1, micro_batch_size=8)
    norm = est.net_.module_.encoders[0][1]
    # one update per micro-batch of the pass with gradients, none from the no-grad pass
    assert int(norm.num_batches_tracked) == (96 // 32) * (32 // 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit(X, module=module, max_epochs=1)  # no caching, no warning


@pytest.mark.parametrize("value, message", [
    (0, "micro_batch_size must be >= 1"), (-3, "micro_batch_size must be >= 1"),
    (2.5, "micro_batch_size must be an integer"),
    (33, "micro_batch_size=33 is larger than the batch size 32")])
def test_bad_micro_batch_sizes(pairs, value, message):
    X, _ = pairs
    with pytest.raises(ValueError, match=message):
        fit(X, micro_batch_size=value, max_epochs=1)


def test_adaptive_selectors_embedding_pass_is_unaffected(pairs):
    from skcontrast.selectors import OSGDSelector

    X, _ = pairs
    settings = {"selector": OSGDSelector(16, k=3, q=2, loss=SymmetricInfoNCE(0.5)),
                "batch_size": None}
    assert_same_weights(fit(X, **settings), fit(X, micro_batch_size=4, **settings),
                        rtol=1e-5, atol=1e-6)


def test_full_batch_simclr_on_all_digit_images_with_micro_batches():
    """FullBatchSelector on a CNN over all 1,797 images, 64 at a time, tiled loss."""
    images, _ = load_digit_images()
    est = ContrastiveEmbedder(module=small_cnn, augmentation=GaussianNoise(0.1),
                              selector=FullBatchSelector(), micro_batch_size=64,
                              loss=NTXent(chunk_size=512), max_epochs=2,
                              lr=3e-3, n_components=8, random_state=0, device="cpu").fit(images)
    assert list(est.history_[:, "n_batches"]) == [1, 1]
    assert est.history_[-1, "batches", :, "train_batch_size"] == [len(images)]
    assert np.isfinite(est.history_[:, "train_loss"]).all()
    assert est.history_[-1, "train_loss"] < est.history_[0, "train_loss"]


# --------------------------------------------------------------------------------------
# Tiled losses
# --------------------------------------------------------------------------------------

PAIR_LOSSES = {"info_nce": info_nce, "symmetric_info_nce": symmetric_info_nce,
               "nt_xent": nt_xent, "dcl": dcl, "dhel": dhel}


def compare_tiled(fn, tensors, chunk, labels=None, **kwargs):
    tensors = [x.clone().requires_grad_() for x in tensors]
    t = torch.tensor(kwargs.pop("temperature"), dtype=torch.float64, requires_grad=True)
    args = tensors if labels is None else [*tensors, labels]
    dense = fn(*args, temperature=t, return_terms=True, **kwargs)
    tiled = fn(*args, temperature=t, return_terms=True, chunk_size=chunk, **kwargs)
    for a, b in zip(dense, tiled, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-9)
    for g_dense, g_tiled in zip(torch.autograd.grad(dense.loss.sum(), [*tensors, t]),
                                torch.autograd.grad(tiled.loss.sum(), [*tensors, t]),
                                strict=True):
        torch.testing.assert_close(g_tiled, g_dense, rtol=1e-8, atol=1e-9)


@given(st.integers(2, 12), st.integers(1, 5), st.sampled_from(sorted(PAIR_LOSSES)),
       st.sampled_from([1, 7, None]), st.sampled_from([0.01, 0.1, 1.0]),
       st.integers(0, 10**6), st.sampled_from(["mean", "sum", "none"]))
def test_tiled_losses_equal_the_dense_ones(b, d, name, chunk, temperature, seed, reduction):
    """Values (every LossTerms field) and gradients (embeddings and a tensor
    temperature) in float64, tiles of 1, 7 and B rows, with balance weights."""
    rng = np.random.default_rng(seed)
    u, v = (torch.tensor(rng.normal(size=(b, d))) for _ in range(2))
    compare_tiled(PAIR_LOSSES[name], (u, v), chunk or b, temperature=temperature,
                  lambda_pos=0.7, lambda_ent=1.3, reduction=reduction)


@given(st.integers(2, 14), st.sampled_from([1, 7, None]), st.integers(0, 10**6),
       st.sampled_from(["exclude", "zero"]))
def test_tiled_supcon_equals_the_dense_one(b, chunk, seed, convention):
    rng = np.random.default_rng(seed)
    z = torch.tensor(rng.normal(size=(b, 3)))
    y = torch.as_tensor(rng.integers(3, size=b))
    compare_tiled(supcon, (z,), chunk or b, labels=y, temperature=0.01, lambda_pos=0.5,
                  anchors_without_positives=convention, base_temperature=0.07)


@given(st.integers(2, 12), st.sampled_from([1, 7, None]), st.integers(0, 10**6),
       st.sampled_from(["gaussian", "imq", "callable"]),
       st.sampled_from(["mean", "sum", "none"]))
def test_tiled_kcl_equals_the_dense_one(b, chunk, seed, kernel, reduction):
    """KCL's energy is a plain kernel row sum: blocks under checkpointing give the dense
    value and gradient (embeddings and a tensor bandwidth) for any kernel, in float64."""
    rng = np.random.default_rng(seed)
    u, v = (torch.tensor(rng.normal(size=(b, 4))) for _ in range(2))
    if kernel == "callable":
        kernel = lambda sq, t: 1 / (1 + sq / t) ** 2  # noqa: E731
    compare_tiled(kcl, (u, v), chunk or b, temperature=0.5, kernel=kernel, lambda_ent=3.0,
                  reduction=reduction)


def test_tiled_kcl_with_leading_dimensions_and_in_the_estimator():
    torch.manual_seed(0)
    u, v = torch.randn(2, 3, 30, 8), torch.randn(2, 3, 30, 8)
    torch.testing.assert_close(kcl(u, v, chunk_size=4), kcl(u, v), rtol=1e-5, atol=1e-5)
    assert "kcl" in TILED_LOSSES
    X = np.random.default_rng(0).normal(size=(96, 2, 6)).astype(np.float32)
    dense = ContrastiveEmbedder(loss=KCL(chunk_size=None), batch_size=32,
                                max_epochs=2, random_state=0).fit(X)
    tiled = ContrastiveEmbedder(loss=KCL(chunk_size=5), batch_size=32,
                                max_epochs=2, random_state=0).fit(X)
    np.testing.assert_allclose(tiled.transform(X), dense.transform(X), rtol=1e-4, atol=1e-5)


def test_tiled_losses_at_temperature_001_in_float32_and_with_leading_dimensions():
    torch.manual_seed(0)
    u = torch.nn.functional.normalize(torch.randn(3, 40, 8), dim=-1)
    v = u + 0.01 * torch.randn(3, 40, 8)
    for fn in PAIR_LOSSES.values():
        dense = fn(u, v, temperature=0.01)
        tiled = fn(u, v, temperature=0.01, chunk_size=7)
        assert torch.isfinite(tiled).all()
        torch.testing.assert_close(tiled, dense, rtol=1e-5, atol=1e-4)


def test_chunk_size_auto_and_bad_values():
    from skcontrast.losses._tiled import resolve_chunk_size

    assert resolve_chunk_size("auto", 4096, 4096) is None
    assert resolve_chunk_size("auto", 2 * 16384, 2 * 16384) == 2048
    u = torch.randn(6, 3)
    torch.testing.assert_close(nt_xent(u, u, chunk_size="auto"), nt_xent(u, u))
    for bad in (0, -1, 2.5, "big"):
        with pytest.raises(ValueError, match="chunk_size must be None, 'auto' or a positive"):
            nt_xent(u, u, chunk_size=bad)


PEAK = """
import json, resource, sys, torch
from skcontrast.losses import nt_xent
torch.manual_seed(0)
b, chunk = int(sys.argv[1]), None if sys.argv[2] == "dense" else int(sys.argv[2])
u = torch.randn(b, 16, requires_grad=True)
v = torch.randn(b, 16, requires_grad=True)
nt_xent(u, v, temperature=0.1, chunk_size=chunk).backward()
assert torch.isfinite(u.grad).all() and torch.isfinite(v.grad).all()
print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS bound: Linux only")
def test_tiled_nt_xent_at_b_12288_stays_under_a_memory_bound_the_dense_one_exceeds():
    """Forward and backward at B = 12,288 (d = 16) in processes whose address space is
    capped at 2 GiB: the tiled loss (2048-row tiles) runs with a peak resident memory
    under the cap; the dense loss needs 2.25 GiB for one 2B x 2B matrix and cannot."""
    import resource

    bound = 2 * 2**30

    def run(mode):
        return subprocess.run(
            [sys.executable, "-c", PEAK, "12288", mode], capture_output=True, text=True,
            timeout=600, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "2"},
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (bound, bound)))

    tiled = run("2048")
    assert tiled.returncode == 0, tiled.stderr[-2000:]
    assert json.loads(tiled.stdout.strip().splitlines()[-1]) < bound
    dense = run("dense")
    assert dense.returncode != 0
    assert "can't allocate memory" in dense.stderr and "2415919104 bytes" in dense.stderr


def _dense_logsumexp(a, b, temperature, skip_self, partner):
    logits = a @ b.transpose(-1, -2) / temperature
    n, m = logits.shape[-2:]
    rows = torch.arange(n)
    left_out = torch.zeros(n, m, dtype=torch.bool)
    if skip_self:
        left_out[rows, rows] = True
    if partner is not None:
        left_out[rows, (rows + partner) % m] = True
    return torch.logsumexp(logits.masked_fill(left_out, float("-inf")), -1)


@pytest.mark.parametrize("weights", ["uniform", "uneven"])
@pytest.mark.parametrize("shape", ["same", "other", "stacked"])
@pytest.mark.parametrize("chunk", [1, 3, 7])
def test_the_fused_tiled_logsumexp_gives_the_dense_gradients(weights, shape, chunk):
    """The forward keeps what the backward needs (O((n + m) d)); the gradients of a,
    b and a learned temperature equal the dense ones in float64, for a mean of the
    rows (the fused path) and for per-row weights (grad_b recomputed from the tiles),
    with a = b (NT-Xent's layout, self and partner left out) and in a stack."""
    from skcontrast.losses._tiled import tiled_logsumexp

    g = torch.Generator().manual_seed(chunk)
    lead = (3,) if shape == "stacked" else ()
    a = torch.randn(*lead, 8, 5, generator=g, dtype=torch.float64)
    b = a.clone() if shape == "same" else torch.randn(*lead, 11, 5, generator=g,
                                                      dtype=torch.float64)
    skip_self, partner = (True, 4) if shape == "same" else (False, None)
    w = torch.ones(*lead, 8, dtype=torch.float64) if weights == "uniform" else \
        torch.rand(*lead, 8, generator=g, dtype=torch.float64)
    results = []
    for tiled in (True, False):
        x = a.clone().requires_grad_()
        y = x if shape == "same" else b.clone().requires_grad_()
        t = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
        lse = tiled_logsumexp(x, y, t, chunk, skip_self=skip_self, partner=partner) \
            if tiled else _dense_logsumexp(x, y, t, skip_self, partner)
        (lse * w).sum().backward()
        results.append((lse.detach(), x.grad, None if y is x else y.grad, t.grad))
    for got, want in zip(*results, strict=True):
        if want is not None:
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    with torch.no_grad():  # no gradient wanted: values only
        torch.testing.assert_close(
            tiled_logsumexp(a, b, 0.3, chunk, skip_self=skip_self, partner=partner),
            _dense_logsumexp(a, b, 0.3, skip_self, partner))
