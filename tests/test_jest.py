"""Tests of ``skcontrast.selectors._jest``: JEST's joint sampler (Evans et al. 2024)
against a brute-force sampler, its learnability scores and its argument checks."""

import math

import numpy as np
import pytest
import torch
from _helpers import requires_cuda
from reference import jest_brute_force

from skcontrast.losses import (
    siglip,
)
from skcontrast.selectors import (
    jest_select,
)
from skcontrast.selectors._jest import chunk_sizes, pair_scores


def pair(n, d, seed):
    g = torch.Generator().manual_seed(seed)
    u, v = torch.randn(n, d, generator=g, dtype=torch.float64), \
        torch.randn(n, d, generator=g, dtype=torch.float64)
    v = u + 0.8 * v  # related views, so the positives differ from the negatives
    return u / u.norm(dim=1, keepdim=True), v / v.norm(dim=1, keepdim=True)


def logits(u, v, t, b):
    return u @ v.T / t + b


@pytest.mark.parametrize(("n", "keep", "n_chunks", "seed"),
                         [(8, 4, 2, 0), (10, 5, 3, 1), (12, 6, 6, 2), (9, 7, 1, 3),
                          (16, 8, 4, 4), (20, 10, 5, 5)])
def test_jest_select_equals_the_brute_force_sampler(n, keep, n_chunks, seed):
    t, b = 0.5, -2.0
    learner, ref = pair(n, 5, seed), pair(n, 5, seed + 100)
    g = torch.Generator().manual_seed(seed)
    got = jest_select(logits(*learner, t, b), logits(*ref, t, b), keep, n_chunks, g)
    # the same uniforms the sampler drew: one row of n per chunk
    g = torch.Generator().manual_seed(seed)
    sizes = chunk_sizes(keep, n_chunks)
    uniforms = [torch.rand(n, generator=g, dtype=torch.float64).tolist() for _ in sizes]
    expected = jest_brute_force(learner, ref, t, b, keep, sizes, uniforms)
    assert got.tolist() == expected  # the same rows, drawn in the same order
    assert len(set(got.tolist())) == keep


def test_learnability_is_the_difference_of_two_summed_float64_losses():
    t, b = 0.3, -4.0
    learner, ref = pair(12, 6, 0), pair(12, 6, 1)
    scores = pair_scores(logits(*learner, t, b), logits(*ref, t, b))
    for rows in ([0, 1, 2], [3, 7, 8, 11], list(range(12))):
        block = scores[rows][:, rows].sum()
        direct = siglip(learner[0][rows], learner[1][rows], temperature=t, bias=b,
                        reduction="sum") - \
            siglip(ref[0][rows], ref[1][rows], temperature=t, bias=b, reduction="sum")
        assert float(block) == pytest.approx(float(direct), rel=1e-12, abs=1e-12)


def test_hard_and_easy_reference_scores():
    t, b = 0.5, -1.0
    learner, ref = pair(6, 4, 0), pair(6, 4, 1)
    L, R = logits(*learner, t, b), logits(*ref, t, b)
    rows = [1, 2, 4]
    hard = pair_scores(L, None, "hard")[rows][:, rows].sum()
    easy = pair_scores(None, R, "easy_reference")[rows][:, rows].sum()
    assert float(hard) == pytest.approx(
        float(siglip(*(x[rows] for x in learner), temperature=t, bias=b, reduction="sum")))
    assert float(easy) == pytest.approx(
        -float(siglip(*(x[rows] for x in ref), temperature=t, bias=b, reduction="sum")))
    # 'hard' needs no reference; the others do
    assert len(jest_select(L, None, 3, 1, score="hard")) == 3
    with pytest.raises(ValueError, match="score='learnability' needs reference_logits"):
        jest_select(L, None, 3)


def test_the_first_chunk_follows_the_softmax_of_the_own_scores():
    # one chunk of one row: P(row k) = softmax(A_kk); Gumbel-max makes it exact
    g = torch.Generator().manual_seed(0)
    L = torch.randn(5, 5, generator=g, dtype=torch.float64)
    R = torch.randn(5, 5, generator=g, dtype=torch.float64)
    expected = torch.softmax(torch.diagonal(pair_scores(L, R)), 0).numpy()
    draws = [int(jest_select(L, R, 1, 1, g)) for _ in range(20_000)]
    freq = np.bincount(draws, minlength=5) / len(draws)
    assert np.abs(freq - expected).max() < 4 * math.sqrt(0.25 / len(draws))


def test_two_rows_without_replacement_follow_sequential_sampling():
    # Gumbel top-2 has the law of drawing one row, then another from the rest
    g = torch.Generator().manual_seed(1)
    L = torch.randn(4, 4, generator=g, dtype=torch.float64)
    p = torch.softmax(torch.diagonal(pair_scores(L, None, "hard")), 0).numpy()
    counts: dict = {}
    trials = 20_000
    for _ in range(trials):
        key = frozenset(jest_select(L, None, 2, 1, g, score="hard").tolist())
        counts[key] = counts.get(key, 0) + 1
    for i in range(4):
        for j in range(i + 1, 4):
            exact = p[i] * p[j] / (1 - p[i]) + p[j] * p[i] / (1 - p[j])
            assert abs(counts.get(frozenset({i, j}), 0) / trials - exact) < \
                4 * math.sqrt(0.25 / trials)


def test_learnable_rows_are_kept_and_the_result_is_reproducible():
    # rows the reference has learned and the learner has not are the learnable ones
    n = 32
    eye = torch.eye(n)
    reference = 12 * eye - 6
    learner = reference.clone()
    learnable = torch.arange(0, n, 4)
    learner[learnable, learnable] = -6.0  # positives the learner gets wrong
    g = torch.Generator().manual_seed(0)
    kept = jest_select(learner, reference, 8, 4, g)
    assert set(kept.tolist()) == set(learnable.tolist())
    noisy = learner + torch.randn(n, n, generator=g)
    runs = [jest_select(noisy, reference, 10, 5, torch.Generator().manual_seed(s))
            for s in (3, 3, 4)]
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])


def test_chunk_sizes_cover_keep():
    assert chunk_sizes(10, 3) == [4, 3, 3]
    assert chunk_sizes(16, 16) == [1] * 16
    assert sum(chunk_sizes(37, 5)) == 37


def test_bad_arguments_are_named():
    L = torch.zeros(4, 4)
    with pytest.raises(ValueError, match=r"learner_logits must be the \(S, S\) logits"):
        jest_select(torch.zeros(4, 3), L, 2)
    with pytest.raises(ValueError, match="reference_logits has shape"):
        jest_select(L, torch.zeros(5, 5), 2)
    with pytest.raises(ValueError, match="keep must be <= 4"):
        jest_select(L, L, 5)
    with pytest.raises(ValueError, match="n_chunks must be <= 2"):
        jest_select(L, L, 2, 3)
    with pytest.raises(ValueError, match="score must be one of"):
        jest_select(L, L, 2, score="easy")
    with pytest.raises(ValueError, match=r"generator must be a torch\.Generator"):
        jest_select(L, L, 2, 1, generator=0)
    bad = L.clone()
    bad[0, 1] = float("nan")
    with pytest.raises(ValueError, match="learner_logits contains 1 NaN"):
        jest_select(bad, L, 2)


@requires_cuda
def test_cuda_logits_with_a_cpu_generator_keep_the_cpu_rows():
    learner, ref = pair(64, 8, 0), pair(64, 8, 1)
    L, R = logits(*learner, 0.1, -5.0), logits(*ref, 0.1, -5.0)
    cpu = jest_select(L, R, 16, 4, torch.Generator().manual_seed(0))
    cuda = jest_select(L.cuda(), R.cuda(), 16, 4, torch.Generator().manual_seed(0))
    assert cuda.device.type == "cuda"
    assert cuda.cpu().tolist() == cpu.tolist()
    on_device = jest_select(L.cuda(), R.cuda(), 16, 4,
                            torch.Generator(device="cuda").manual_seed(0))
    assert len(set(on_device.tolist())) == 16
