"""Tests of ``skcontrast.geometry``: the simplex-ETF, cross-polytope and antipodal
optima, neural collapse, alignment, uniformity and effective rank."""

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from skcontrast import geometry as G


@pytest.mark.parametrize("n,d", [(2, 1), (3, 2), (8, 7), (8, 16), (5, 40)])
def test_simplex_etf_gram(n, d):
    x = G.simplex_etf(n, d)
    assert x.shape == (n, d)
    gram = x @ x.T
    np.testing.assert_allclose(np.diag(gram), 1, atol=1e-12)
    np.testing.assert_allclose(gram[~np.eye(n, dtype=bool)], -1 / (n - 1), atol=1e-12)


@given(seed=st.integers(0, 10_000), n=st.integers(2, 10), extra=st.integers(0, 5))
def test_etf_gap_of_etf_is_zero_under_permutation_and_rotation(seed, n, extra):
    d = n - 1 + extra
    x = G.simplex_etf(n, d)
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    y = (x @ q)[rng.permutation(n)]
    assert G.etf_gap(y) == pytest.approx(0, abs=1e-9)
    assert G.etf_gap(y, y.copy()) == pytest.approx(0, abs=1e-9)


@given(seed=st.integers(0, 10_000), d=st.integers(1, 8))
def test_cross_polytope_gap_is_zero_under_relabelling(seed, d):
    x = G.cross_polytope(2 * d, d)
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    y = (x @ q)[rng.permutation(2 * d)]
    assert G.etf_gap(y) == pytest.approx(0, abs=1e-9)


def test_etf_gap_is_the_frobenius_distance_of_cho_2023():
    rng = np.random.default_rng(0)
    u, v = rng.normal(size=(5, 8)), rng.normal(size=(5, 8))
    un = u / np.linalg.norm(u, axis=1, keepdims=True)
    vn = v / np.linalg.norm(v, axis=1, keepdims=True)
    target = np.full((5, 5), -0.25)
    np.fill_diagonal(target, 1)
    assert G.etf_gap(u, v) == pytest.approx(np.linalg.norm(un @ vn.T - target), rel=1e-12)


@given(seed=st.integers(0, 10_000), half=st.integers(1, 4))
def test_antipodal_pairing_is_optimal(seed, half):
    n = 2 * half
    a = np.random.default_rng(seed).normal(size=(n, n))
    w = a + a.T
    partner = G.antipodal_pairing(w)
    assert (partner[partner] == np.arange(n)).all() and (partner != np.arange(n)).all()

    def matchings(items):
        if not items:
            yield []
            return
        first, rest = items[0], items[1:]
        for i, other in enumerate(rest):
            for m in matchings(rest[:i] + rest[i + 1:]):
                yield [(first, other), *m]

    best = min(sum(w[p] for p in m) for m in matchings(list(range(n))))
    assert sum(w[i, partner[i]] for i in range(n)) / 2 == pytest.approx(best)


def test_orthogonal_frame_gap():
    y = np.array([0, 0, 1, 1, 1, 2])
    assert G.orthogonal_frame_gap(np.eye(3)[y] * 2.0, y) == pytest.approx(0, abs=1e-12)
    assert G.orthogonal_frame_gap(G.orthogonal_frame(3, 5)[y], y) == pytest.approx(0, abs=1e-12)
    assert G.orthogonal_frame_gap(G.simplex_etf(3, 3)[y], y) > 0.5
    k = 3  # by hand: G_M has 1 on the diagonal and -1/2 off it
    gram = np.full((k, k), -0.5)
    np.fill_diagonal(gram, 1)
    expected = np.linalg.norm(gram / np.linalg.norm(gram) - np.eye(k) / math.sqrt(k))
    assert G.orthogonal_frame_gap(G.simplex_etf(3, 3)[y], y) == pytest.approx(expected)


def test_neural_collapse_is_zero_at_collapse_and_positive_otherwise():
    y = np.repeat([0, 1, 2], 4)
    assert G.neural_collapse(np.eye(3)[y], y) == pytest.approx(0, abs=1e-12)
    noisy = np.eye(3)[y] + 0.3 * np.random.default_rng(0).normal(size=(12, 3))
    assert G.neural_collapse(noisy, y) > 0.01


def test_uniformity_in_blocks_equals_the_direct_value(monkeypatch):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(37, 4))
    direct = G.uniformity(x)
    monkeypatch.setattr(G, "BLOCK_ELEMENTS", 5 * 37)
    assert G.uniformity(x) == pytest.approx(direct, rel=1e-12)


def test_alignment_and_uniformity():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(20, 4))
    assert G.alignment(x, x) == 0.0
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    pairs = [math.exp(-2 * np.sum((xn[i] - xn[j]) ** 2))
             for i, j in itertools.combinations(range(20), 2)]
    assert G.uniformity(x) == pytest.approx(math.log(np.mean(pairs)), rel=1e-12)
    noise = xn + 0.1 * rng.normal(size=xn.shape)
    expected = np.mean(np.linalg.norm(xn - noise / np.linalg.norm(noise, axis=1,
                                                                    keepdims=True), axis=1) ** 2)
    assert G.alignment(x, noise) == pytest.approx(expected)


def test_effective_rank():
    cloud = np.random.default_rng(2).normal(size=(20_000, 12))
    assert G.effective_rank(cloud) == pytest.approx(12, rel=0.02)
    line = np.outer(np.arange(1, 30), np.ones(5))
    assert G.effective_rank(line) == pytest.approx(1, abs=1e-9)


def test_geometry_accepts_torch_tensors():
    x = torch.from_numpy(G.simplex_etf(4, 6))
    assert G.etf_gap(x) == pytest.approx(0, abs=1e-12)
    assert isinstance(G.effective_rank(x), float)


def test_geometry_bad_input():
    with pytest.raises(ValueError, match=r"simplex ETF of n=5 vectors needs d >= n - 1 = 4"):
        G.simplex_etf(5, 3)
    with pytest.raises(ValueError, match=r"cross-polytope has n = 2d"):
        G.cross_polytope(6, 2)
    with pytest.raises(ValueError, match=r"no reference geometry is known for n=10 points"):
        G.etf_gap(np.random.default_rng(0).normal(size=(10, 3)))
    with pytest.raises(ValueError, match="same shape"):
        G.etf_gap(np.ones((4, 3)), np.ones((5, 3)))
    with pytest.raises(ValueError, match="at least 2 rows"):
        G.etf_gap(np.ones((1, 3)))
    with pytest.raises(ValueError, match="reference"):
        G.etf_gap(np.eye(3), reference="square")
    with pytest.raises(ValueError, match="at least 2 classes"):
        G.orthogonal_frame_gap(np.ones((4, 2)), [0, 0, 0, 0])
    with pytest.raises(ValueError, match="NaN"):
        G.alignment(np.full((3, 2), np.nan), np.ones((3, 2)))
