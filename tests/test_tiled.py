"""Tests of ``skcontrast.losses._tiled``: tiled losses equal the dense ones (values and
gradients) and stay within a memory bound the dense ones exceed."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from _helpers import peak_memory_growth
from hypothesis import given
from hypothesis import strategies as st

from skcontrast import ContrastiveEmbedder
from skcontrast.losses import (
    KCL,
    TILED_LOSSES,
    dcl,
    dhel,
    info_nce,
    kcl,
    nt_xent,
    supcon,
    symmetric_info_nce,
)

ROOT = Path(__file__).resolve().parents[1]


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
    from skcontrast.losses._core import resolve_chunk_size

    assert resolve_chunk_size("auto", 4096, 4096) is None
    assert resolve_chunk_size("auto", 2 * 16384, 2 * 16384) == 2048
    u = torch.randn(6, 3)
    torch.testing.assert_close(nt_xent(u, u, chunk_size="auto"), nt_xent(u, u))
    for bad in (0, -1, 2.5, "big"):
        with pytest.raises(ValueError, match="chunk_size must be None, 'auto' or a positive"):
            nt_xent(u, u, chunk_size=bad)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="Linux's peak memory (/proc) and glibc's allocator")
def test_tiled_nt_xent_stays_under_a_memory_bound_the_dense_one_exceeds():
    """Forward and backward at B = 4,096 (d = 16), in a fresh process: the tiled loss
    (512-row tiles) peaks at less than half of one dense 2B x 2B logits matrix (256 MiB);
    the dense loss, which keeps such matrices for autograd, needs more than one."""
    bound = (2 * 4096) ** 2 * 4
    tiled, dense = peak_memory_growth("nt_xent", 4096, 512, temperature=0.1)
    assert tiled < bound / 2 < bound < dense


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
