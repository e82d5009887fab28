"""The loss library against brute-force loops, closed forms and the papers' theorems."""

import math
from itertools import combinations

import numpy as np
import pytest
import reference as ref
import torch
from _helpers import requires_cuda
from hypothesis import given
from hypothesis import strategies as st

from skcontrast import losses as L

PAIR_NAMES = list(L.PAIR_LOSSES)
ALL_NAMES = PAIR_NAMES + list(L.LABEL_LOSSES)


def random_pairs(b=5, d=4, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, d, generator=g, dtype=dtype),
            torch.randn(b, d, generator=g, dtype=dtype))


def call(name, u, v, **kw):
    """Call any loss on paired data (label losses see each pair as a class)."""
    return L.get_pair_loss(name)(u, v, **kw)


def simplex_etf_rows(n):
    x = np.eye(n) - 1.0 / n
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def etf_value(n):
    return 2 * math.log(1 + (n - 1) * math.exp(-n / (n - 1)))


# --------------------------------------------------------------------------------------
# Brute force, float64, rtol 1e-10
# --------------------------------------------------------------------------------------

REFERENCES = {
    "info_nce": ref.info_nce,
    "symmetric_info_nce": ref.symmetric_info_nce,
    "nt_xent": ref.nt_xent,
    "dcl": ref.dcl,
    "dhel": ref.dhel,
}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", list(REFERENCES))
def test_infonce_family_matches_brute_force(name, seed):
    u, v = random_pairs(b=5, d=4, seed=seed)
    t, lp, le = 0.3, 0.7, 1.3
    out = getattr(L, name)(u, v, temperature=t, lambda_pos=lp, lambda_ent=le,
                           return_terms=True)
    pos, ent = REFERENCES[name](u.numpy(), v.numpy(), t)
    np.testing.assert_allclose(out.positive.item(), pos, rtol=1e-10)
    np.testing.assert_allclose(out.entropy.item(), ent, rtol=1e-10)
    np.testing.assert_allclose(out.loss.item(), lp * pos + le * ent, rtol=1e-10)


def test_dhel_without_positive_view_matches_brute_force():
    u, v = random_pairs(seed=4)
    out = L.dhel(u, v, temperature=0.2, include_positive_view=False, return_terms=True)
    pos, ent = ref.dhel(u.numpy(), v.numpy(), 0.2, include_positive_view=False)
    np.testing.assert_allclose([out.positive.item(), out.entropy.item()], [pos, ent],
                               rtol=1e-10)


@pytest.mark.parametrize("seed", range(3))
def test_kcl_matches_brute_force(seed):
    u, v = random_pairs(b=6, d=3, seed=seed)
    t, lp, le = 0.5, 1.5, 16.0
    out = L.kcl(u, v, temperature=t, lambda_pos=lp, lambda_ent=le, return_terms=True)
    pos, ent = ref.kcl(u.numpy(), v.numpy(), t)
    np.testing.assert_allclose([out.positive.item(), out.entropy.item()], [pos, ent],
                               rtol=1e-10)
    np.testing.assert_allclose(out.loss.item(), lp * pos + le * ent, rtol=1e-10)


@pytest.mark.parametrize("convention", ["exclude", "zero"])
@pytest.mark.parametrize("seed", range(3))
def test_supcon_matches_brute_force(seed, convention):
    g = np.random.default_rng(seed)
    z = g.normal(size=(7, 4))
    y = np.array([0, 0, 1, 1, 1, 2, 3])  # classes 2 and 3 have no positive
    t, lp, le = 0.4, 0.8, 1.2
    out = L.supcon(z, y, temperature=t, lambda_pos=lp, lambda_ent=le,
                   anchors_without_positives=convention, return_terms=True)
    pos, ent = ref.supcon(z, y, t, convention)
    np.testing.assert_allclose([out.positive.item(), out.entropy.item()], [pos, ent],
                               rtol=1e-10)
    np.testing.assert_allclose(out.loss.item(), lp * pos + le * ent, rtol=1e-10)


def test_supcon_sum_is_kini_2023_eq3():
    g = np.random.default_rng(5)
    z, y = g.normal(size=(8, 3)), np.array([0, 0, 0, 1, 1, 2, 2, 2])
    np.testing.assert_allclose(L.supcon(z, y, temperature=0.5, reduction="sum").item(),
                               ref.supcon_sum(z, y, t=0.5), rtol=1e-10)


def test_supcon_base_temperature_factor():
    z, y = np.random.default_rng(0).normal(size=(6, 3)), [0, 0, 1, 1, 2, 2]
    plain = L.supcon(z, y, temperature=0.1)
    scaled = L.supcon(z, y, temperature=0.1, base_temperature=0.07)
    np.testing.assert_allclose(scaled.item(), plain.item() * 0.1 / 0.07, rtol=1e-12)


@pytest.mark.parametrize("distance", ["euclidean", "cosine"])
@pytest.mark.parametrize("averaging", ["separate", "global"])
@pytest.mark.parametrize("power", [1, 2])
def test_contrastive_margin_matches_brute_force(averaging, distance, power):
    g = np.random.default_rng(1)
    z, y = g.normal(size=(6, 3)), np.array([0, 0, 1, 1, 2, 3])
    out = L.contrastive_margin(z, y, margin=1.2, temperature=0.9, lambda_pos=0.6,
                               lambda_ent=1.7, averaging=averaging, distance=distance,
                               power=power, return_terms=True)
    pos, ent, wp, we = ref.contrastive_margin(z, y, 1.2, averaging, power, distance, t=0.9)
    np.testing.assert_allclose([out.positive.item(), out.entropy.item()], [pos, ent],
                               rtol=1e-10)
    np.testing.assert_allclose(out.loss.item(), 0.6 * wp * pos + 1.7 * we * ent, rtol=1e-10)


@pytest.mark.parametrize("b", [4, 6, 10])
def test_global_average_equals_sors_2021_balance(b):
    """Sec. 4.1: global averaging is lambda_p = 1/(b-1), lambda_e = 1 - 1/(b-1)."""
    z = np.random.default_rng(b).normal(size=(b, 5))
    y = np.repeat(np.arange(b // 2), 2)
    glob = L.contrastive_margin(z, y, averaging="global")
    sep = L.contrastive_margin(z, y, averaging="separate", lambda_pos=1 / (b - 1),
                               lambda_ent=1 - 1 / (b - 1))
    np.testing.assert_allclose(glob.item(), sep.item(), rtol=1e-12)


@pytest.mark.parametrize("seed", range(2))
def test_pairwise_lower_bound_matches_brute_force(seed):
    u, v = random_pairs(b=5, d=3, seed=seed)
    np.testing.assert_allclose(
        L.pairwise_lower_bound(u, v, temperature=0.7).item(),
        ref.lower_bound(u.numpy(), v.numpy(), 0.7, 5), rtol=1e-10)


def test_pair_affinity_is_symmetric_nonnegative_with_zero_diagonal():
    u, v = random_pairs(b=9, d=4)
    w = L.pair_affinity(u, v, batch_size=3, temperature=0.1)
    assert torch.allclose(w, w.T)
    assert (w >= 0).all() and (torch.diagonal(w) == 0).all()


# --------------------------------------------------------------------------------------
# Gradients
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ALL_NAMES)
def test_gradcheck(name):
    u, v = random_pairs(b=4, d=3, seed=7)
    u.requires_grad_(True)
    v.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: call(name, a, b, temperature=0.5), (u, v))


def test_gradcheck_supcon_with_labels_and_lower_bound():
    z = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    y = torch.tensor([0, 0, 1, 1, 1, 2])
    assert torch.autograd.gradcheck(lambda a: L.supcon(a, y, temperature=0.3), (z,))
    u, v = random_pairs(b=4, d=3, seed=1)
    u.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a: L.pairwise_lower_bound(a, v), (u,))


# --------------------------------------------------------------------------------------
# Closed forms (seeds/README.md)
# --------------------------------------------------------------------------------------

def test_simplex_etf_closed_form():
    u = torch.from_numpy(simplex_etf_rows(8))
    value = L.symmetric_info_nce(u, u, temperature=1.0).item()
    assert value == pytest.approx(etf_value(8), rel=1e-12)
    # seeds/README.md quotes 2.3465; the formula gives 2.346416..., i.e. 2.3464 to 4 d.p.
    assert value == pytest.approx(2.3465, abs=2e-4)


def test_cross_polytope_closed_form():
    d = 4
    u = torch.cat([torch.eye(d), -torch.eye(d)]).double()
    value = L.symmetric_info_nce(u, u, temperature=1.0).item()
    n = 2 * d
    assert value == pytest.approx(2 * math.log(1 + (n - 2) * math.exp(-1) + math.exp(-2)),
                                  rel=1e-12)
    # seeds/README.md quotes 2.4137; the formula gives 2.413505..., i.e. 2.4135 to 4 d.p.
    assert value == pytest.approx(2.4137, abs=3e-4)


def test_theorem2_bound_is_attained_at_orthogonal_frame_with_collapse():
    y = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2])
    h = np.eye(4)[y]
    bound = _kini_2023_bound(y)
    value = L.supcon(h, y, temperature=1.0, reduction="sum").item()
    assert value == pytest.approx(bound, rel=1e-12)


def _kini_2023_bound(y_batch):
    n_b = len(y_batch)
    _, counts = np.unique(y_batch, return_counts=True)
    return sum(c * math.log(c - 1 + (n_b - c) * math.exp(-1)) for c in counts)


# --------------------------------------------------------------------------------------
# Theorems as hypothesis properties
# --------------------------------------------------------------------------------------

def unit_matrix(seed, n, d, nonnegative=False):
    x = np.random.default_rng(seed).normal(size=(n, d))
    if nonnegative:
        x = np.abs(x)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 7), extra=st.integers(0, 3))
def test_lemma1_etf_is_the_full_batch_minimum(seed, n, extra):
    d = n - 1 + extra
    u, v = unit_matrix(seed, n, d), unit_matrix(seed + 1, n, d)
    value = L.symmetric_info_nce(u, v, temperature=1.0).item()
    assert value >= etf_value(n) - 1e-9


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(3, 7), data=st.data())
def test_theorem1_mean_over_all_batches_is_minimised_at_etf(seed, n, data):
    b = data.draw(st.integers(2, n - 1))
    u, v = unit_matrix(seed, n, n), unit_matrix(seed + 7, n, n)
    batches = np.array(list(combinations(range(n), b)))
    mean = L.batch_losses(u, v, batches, temperature=1.0).mean().item()
    at_etf = 2 * math.log(1 + (b - 1) * math.exp(-n / (n - 1)))
    etf = simplex_etf_rows(n)
    assert L.batch_losses(etf, etf, batches, temperature=1.0).mean().item() == \
        pytest.approx(at_etf, rel=1e-12)
    assert mean >= at_etf - 1e-9


@given(seed=st.integers(0, 2**32 - 1), b=st.integers(2, 8), d=st.integers(1, 6),
       temperature=st.floats(0.05, 5.0))
def test_jensen_bound_below_every_batch_loss(seed, b, d, temperature):
    g = np.random.default_rng(seed)
    u, v = g.normal(size=(b, d)), g.normal(size=(b, d))
    loss = L.symmetric_info_nce(u, v, temperature=temperature).item()
    bound = L.pairwise_lower_bound(u, v, temperature=temperature).item()
    assert loss >= bound - 1e-9 * max(1.0, abs(loss))


@given(seed=st.integers(0, 2**32 - 1), name=st.sampled_from(ALL_NAMES))
def test_permuting_pairs_jointly_leaves_loss_unchanged(seed, name):
    u, v = random_pairs(b=6, d=4, seed=seed % 1000)
    perm = torch.from_numpy(np.random.default_rng(seed).permutation(6))
    assert torch.allclose(call(name, u, v), call(name, u[perm], v[perm]), rtol=1e-10)


@given(seed=st.integers(0, 2**32 - 1))
def test_symmetric_info_nce_is_symmetric(seed):
    u, v = random_pairs(b=5, d=3, seed=seed % 1000)
    assert torch.allclose(L.symmetric_info_nce(u, v), L.symmetric_info_nce(v, u), rtol=1e-12)


@given(seed=st.integers(0, 2**32 - 1), name=st.sampled_from(ALL_NAMES))
def test_rotation_invariance(seed, name):
    u, v = random_pairs(b=5, d=4, seed=seed % 1000)
    q, _ = torch.linalg.qr(torch.from_numpy(np.random.default_rng(seed).normal(size=(4, 4))))
    assert torch.allclose(call(name, u, v), call(name, u @ q, v @ q), rtol=1e-9)


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(3, 7), data=st.data())
def test_kcl_uniformity_is_unbiased_over_subsets(seed, n, data):
    """Seed 004: the mean over all size-M subsets of the uniformity term is its full value."""
    m = data.draw(st.integers(2, n))
    u, v = unit_matrix(seed, n, 3), unit_matrix(seed + 3, n, 3)
    full = L.kcl(u, v, return_terms=True).entropy.item()
    subsets = np.array(list(combinations(range(n), m)))
    uu, vv = torch.from_numpy(u), torch.from_numpy(v)
    sub = L.kcl(uu[subsets], vv[subsets], return_terms=True).entropy
    assert sub.mean().item() == pytest.approx(full, rel=1e-10)


@st.composite
def class_batches(draw):
    """Batches whose present classes each have at least two members (Kini et al. 2023's
    assumption)."""
    k = draw(st.integers(1, 4))
    batches = []
    for _ in range(draw(st.integers(1, 3))):
        counts = draw(st.lists(st.sampled_from([0, 2, 3, 4]), min_size=k, max_size=k)
                      .filter(lambda c: sum(c) >= 2))
        batches.append(np.repeat(np.arange(k), counts))
    return k, batches


@given(data=class_batches(), seed=st.integers(0, 2**32 - 1), extra=st.integers(0, 2))
def test_kini_2023_theorem2_lower_bound(data, seed, extra):
    k, batches = data
    total = bound = 0.0
    for i, y in enumerate(batches):
        h = unit_matrix(seed + i, len(y), k + extra, nonnegative=True)
        total += L.supcon(h, y, temperature=1.0, reduction="sum").item()
        bound += _kini_2023_bound(y)
    assert total >= bound - 1e-9


# --------------------------------------------------------------------------------------
# Stability, dtypes, reductions, devices
# --------------------------------------------------------------------------------------

def hard_inputs():
    g = torch.Generator().manual_seed(0)
    rnd = torch.randn(16, 8, generator=g)
    same = torch.ones(16, 8)
    antipodal = torch.cat([torch.eye(8), -torch.eye(8)])
    return {"random": (rnd, torch.randn(16, 8, generator=g)), "collapsed": (same, same),
            "antipodal": (antipodal, antipodal.flip(0))}


@pytest.mark.parametrize("case", ["random", "collapsed", "antipodal"])
@pytest.mark.parametrize("name", ALL_NAMES)
def test_stable_at_temperature_001_in_float32(name, case):
    u, v = (t.clone().requires_grad_(True) for t in hard_inputs()[case])
    loss = call(name, u, v, temperature=0.01)
    loss.backward()
    assert loss.dtype == torch.float32
    assert torch.isfinite(loss)
    assert torch.isfinite(u.grad).all() and torch.isfinite(v.grad).all()


@pytest.mark.parametrize("name", ALL_NAMES)
def test_float32_agrees_with_float64(name):
    u, v = random_pairs(b=8, d=5, seed=3)
    hi = call(name, u, v, temperature=0.2)
    lo = call(name, u.float(), v.float(), temperature=0.2)
    assert lo.dtype == torch.float32
    np.testing.assert_allclose(lo.item(), hi.item(), rtol=1e-5)


@pytest.mark.parametrize("name", ALL_NAMES)
def test_accepts_numpy_arrays(name):
    u, v = random_pairs(b=4, d=3)
    assert torch.allclose(call(name, u.numpy(), v.numpy()), call(name, u, v))


@pytest.mark.parametrize("name", ALL_NAMES)
def test_leading_dimensions_are_independent_batches(name):
    g = torch.Generator().manual_seed(2)
    u, v = torch.randn(3, 5, 4, generator=g).double(), torch.randn(3, 5, 4, generator=g).double()
    stacked = call(name, u, v)
    assert stacked.shape == (3,)
    for k in range(3):
        assert torch.allclose(stacked[k], call(name, u[k], v[k]), rtol=1e-12)


@pytest.mark.parametrize("name", ["info_nce", "nt_xent", "dcl", "dhel", "supcon"])
def test_sum_and_none_reductions(name):
    u, v = random_pairs(b=5, d=3)
    mean = call(name, u, v, reduction="mean")
    total = call(name, u, v, reduction="sum")
    each = call(name, u, v, reduction="none")
    assert torch.allclose(total, each.sum())
    assert torch.allclose(mean, each.mean())


def test_symmetric_directions_and_none_shape():
    u, v = random_pairs(b=5, d=3)
    each = L.symmetric_info_nce(u, v, reduction="none")
    assert each.shape == (2, 5)
    summed = L.symmetric_info_nce(u, v)
    assert torch.allclose(summed, each.mean(-1).sum())
    assert torch.allclose(L.symmetric_info_nce(u, v, directions="mean"), summed / 2)
    assert torch.allclose(summed, L.info_nce(u, v) + L.info_nce(v, u))


def test_kcl_none_reduction_shape_and_sum():
    u, v = random_pairs(b=5, d=3)
    each = L.kcl(u, v, reduction="none")
    assert each.shape == (2, 5)
    assert torch.allclose(L.kcl(u, v), each.mean(-1).sum())


def test_kcl_imq_and_callable_kernels():
    u, v = random_pairs(b=5, d=3)
    imq = L.kcl(u, v, kernel="imq", temperature=0.5)
    same = L.kcl(u, v, kernel=lambda sq, t: torch.rsqrt(1 + sq / t), temperature=0.5)
    assert torch.allclose(imq, same)


def test_learnable_temperature_gets_a_gradient():
    u, v = random_pairs(b=6, d=3)
    log_t = torch.tensor(math.log(0.1), dtype=torch.float64, requires_grad=True)
    L.symmetric_info_nce(u, v, temperature=log_t.exp()).backward()
    assert log_t.grad is not None and torch.isfinite(log_t.grad)


def test_supcon_without_any_positive_is_zero_and_differentiable():
    z = torch.randn(4, 3, requires_grad=True)
    loss = L.supcon(z, [0, 1, 2, 3])
    loss.backward()
    assert loss.item() == 0.0 and torch.isfinite(z.grad).all()


def test_labels_of_any_type_are_encoded():
    z = np.random.default_rng(0).normal(size=(6, 3))
    a = L.supcon(z, np.array(["cat", "cat", "dog", "dog", "eel", "eel"]))
    b = L.supcon(z, np.array([0, 0, 1, 1, 2, 2]))
    assert torch.allclose(a, b)


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("name", ALL_NAMES)
def test_cuda_matches_cpu(name):
    u, v = random_pairs(b=8, d=5, seed=9)
    cpu = call(name, u, v, temperature=0.2)
    gpu = call(name, u.cuda(), v.cuda(), temperature=0.2)
    assert gpu.device.type == "cuda"
    np.testing.assert_allclose(gpu.item(), cpu.item(), rtol=1e-10)


# --------------------------------------------------------------------------------------
# batch_losses
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ALL_NAMES)
def test_batch_losses_equals_looping_the_loss(name):
    u, v = random_pairs(b=12, d=4, seed=5)
    batches = [np.array([0, 3, 5]), np.array([1, 2, 4, 6]), np.array([7, 8, 9]),
               np.array([10, 11]), np.array([2, 9, 4, 1])]
    out = L.batch_losses(u, v, batches, loss=name, temperature=0.3)
    looped = torch.stack([call(name, u[b], v[b], temperature=0.3) for b in batches])
    assert out.shape == (5,)
    assert torch.allclose(out, looped, rtol=1e-12)


def test_batch_losses_chunks_give_the_same_answer_and_gradients():
    u, v = random_pairs(b=20, d=4, seed=8)
    u.requires_grad_(True)
    batches = np.random.default_rng(0).permutation(20).reshape(5, 4)
    full = L.batch_losses(u, v, batches)
    tiny = L.batch_losses(u, v, batches, max_elements=1)
    assert torch.allclose(full, tiny)
    tiny.sum().backward()
    assert torch.isfinite(u.grad).all() and u.grad.abs().sum() > 0


def test_batch_losses_with_labels():
    z = torch.randn(10, 3, dtype=torch.float64)
    y = torch.tensor([0, 0, 1, 1, 2, 2, 0, 1, 2, 3])
    batches = np.arange(10).reshape(2, 5)
    out = L.batch_losses(z, batches=batches, y=y, loss="supcon")
    looped = torch.stack([L.supcon(z[b], y[b]) for b in batches])
    assert torch.allclose(out, looped)


# --------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", PAIR_NAMES)
def test_mismatched_shapes_name_the_arguments(name):
    with pytest.raises(ValueError, match=r"u and v must have the same shape"):
        call(name, torch.randn(4, 3), torch.randn(5, 3))


@pytest.mark.parametrize("name", PAIR_NAMES)
def test_batch_of_one_is_refused(name):
    with pytest.raises(ValueError, match=r"B >= 2"):
        call(name, torch.randn(1, 3), torch.randn(1, 3))


@pytest.mark.parametrize("temperature", [0.0, -1.0, float("nan"), "hot"])
@pytest.mark.parametrize("name", ALL_NAMES)
def test_bad_temperature(name, temperature):
    with pytest.raises(ValueError, match="temperature"):
        call(name, torch.randn(4, 3), torch.randn(4, 3), temperature=temperature)


@pytest.mark.parametrize("name", list(L.LABEL_LOSSES))
def test_labels_of_wrong_length(name):
    with pytest.raises(ValueError, match=r"y must hold one label per row"):
        L.get_label_loss(name)(torch.randn(5, 3), torch.tensor([0, 0, 1]))


def test_other_bad_arguments():
    u = torch.randn(4, 3)
    with pytest.raises(ValueError, match="reduction"):
        L.info_nce(u, u, reduction="avg")
    with pytest.raises(ValueError, match="directions"):
        L.symmetric_info_nce(u, u, directions="both")
    with pytest.raises(ValueError, match="anchors_without_positives"):
        L.supcon(u, [0, 0, 1, 1], anchors_without_positives="drop")
    with pytest.raises(ValueError, match="averaging"):
        L.contrastive_margin(u, [0, 0, 1, 1], averaging="local")
    with pytest.raises(ValueError, match="margin"):
        L.contrastive_margin(u, [0, 0, 1, 1], margin=0)
    with pytest.raises(ValueError, match="kernel"):
        L.kcl(u, u, kernel="cosine")
    with pytest.raises(ValueError, match="loss must be"):
        L.batch_losses(u, u, [[0, 1]], loss="triplet")
    with pytest.raises(ValueError, match=r"batches\[0\] holds indices outside"):
        L.batch_losses(u, u, [[0, 9]])
    with pytest.raises(ValueError, match="batch_size"):
        L.pair_affinity(u, u, batch_size=1)
    with pytest.raises(ValueError, match="v is required"):
        L.batch_losses(u, None, [[0, 1]], loss="supcon")


# --------------------------------------------------------------------------------------
# The hand-written backward of the Gram log-sum-exp
# --------------------------------------------------------------------------------------

def _gram_inputs(seed=0):
    from skcontrast.losses._gram import _plain_gram_logsumexp, gram_logsumexp

    g = torch.Generator().manual_seed(seed)
    z = torch.randn(2, 5, 3, generator=g, dtype=torch.float64, requires_grad=True)
    t = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    exclude = torch.zeros(5, 5, dtype=torch.bool)
    exclude[0, 3] = exclude[3, 0] = exclude[1, 2] = True
    return gram_logsumexp, _plain_gram_logsumexp, z, t, exclude


@pytest.mark.parametrize("with_exclude", [False, True])
def test_gram_logsumexp_matches_autograd_reference(with_exclude):
    fast, plain, z, t, exclude = _gram_inputs()
    exclude = exclude if with_exclude else None
    w = torch.randn(2, 5, dtype=torch.float64)
    a = fast(z, t, exclude)
    b = plain(z, t, exclude)
    assert torch.allclose(a, b, rtol=1e-12)
    ga = torch.autograd.grad((a * w).sum(), (z, t))
    gb = torch.autograd.grad((b * w).sum(), (z, t))
    for x, y in zip(ga, gb, strict=True):
        assert torch.allclose(x, y, rtol=1e-10)


def test_gram_logsumexp_gradcheck_and_gradgradcheck():
    fast, _, z, t, exclude = _gram_inputs(1)
    assert torch.autograd.gradcheck(lambda a, b: fast(a, b, exclude), (z, t))
    assert torch.autograd.gradgradcheck(lambda a, b: fast(a, b, exclude), (z, t))


def test_gram_logsumexp_backward_twice_with_retained_graph():
    fast, _, z, t, _ = _gram_inputs(2)
    out = fast(z, t).sum()
    first = torch.autograd.grad(out, z, retain_graph=True)[0]
    second = torch.autograd.grad(out, z)[0]
    assert torch.equal(first, second)


# --------------------------------------------------------------------------------------
# Hard-negative columns and false negatives left out (dense and tiled)
# --------------------------------------------------------------------------------------

def _extras_case(seed=0, b=6, k=2, d=5):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(b, d, generator=g, dtype=torch.float64)
    v = u + 0.7 * torch.randn(b, d, generator=g, dtype=torch.float64)
    negatives = v[:, None] + 0.8 * torch.randn(b, k, d, generator=g, dtype=torch.float64)
    exclude = torch.zeros(b, b, dtype=torch.bool)
    exclude[0, 3] = exclude[2, 5] = exclude[1, 4] = True
    return u, v, negatives, exclude


@pytest.mark.parametrize("kind", ["info_nce", "symmetric", "nt_xent", "dcl", "hcl",
                                  "hcl other view", "debiased"])
@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("chunk_size", [None, 2])
@pytest.mark.parametrize("parts", ["negatives", "exclude", "both"])
def test_hard_negatives_and_exclusions_equal_the_float64_brute_force(kind, share, chunk_size,
                                                                     parts):
    from reference import softmax_with_extras

    from skcontrast.losses import (
        dcl,
        debiased_nce,
        hard_negative_nce,
        info_nce,
        nt_xent,
        symmetric_info_nce,
    )

    u, v, negatives, exclude = _extras_case()
    k = negatives.shape[1]
    exclude_negatives = torch.zeros(6, 6 * k if share else k, dtype=torch.bool)
    exclude_negatives[0, 1] = exclude_negatives[3, 0] = True
    given = {"hard_negatives": negatives if parts != "exclude" else None,
             "exclude": exclude if parts != "negatives" else None,
             "exclude_negatives": exclude_negatives if parts == "both" else None,
             "share_negatives": share}
    t = 0.5
    function, options, ref = {
        "info_nce": (info_nce, {}, {}),
        "symmetric": (symmetric_info_nce, {}, {}),
        "nt_xent": (nt_xent, {}, {}),
        "dcl": (dcl, {}, {}),
        "hcl": (hard_negative_nce, {"beta": 0.7, "tau_plus": 0.1}, {"beta": 0.7}),
        "hcl other view": (hard_negative_nce, {"beta": 0.7, "tau_plus": 0.1,
                                               "negatives": "other view"},
                           {"beta": 0.7, "hcl_negatives": "other view"}),
        "debiased": (debiased_nce, {"tau_plus": 0.1}, {"beta": 0.0}),
    }[kind]
    got = function(u, v, temperature=t, chunk_size=chunk_size,
                   **options, **given)
    expected = softmax_with_extras(
        "hcl" if kind.startswith(("hcl", "debiased")) else kind, u, v, t,
        negatives=given["hard_negatives"], share=share,
        exclude=None if given["exclude"] is None else given["exclude"].tolist(),
        exclude_negatives=None if given["exclude_negatives"] is None
        else given["exclude_negatives"].tolist(), **ref)
    assert float(got) == pytest.approx(expected, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("chunk_size", [None, 2])
def test_leaving_items_out_has_the_gradient_of_the_masked_sum(chunk_size):
    from skcontrast.losses import nt_xent

    u, v, negatives, exclude = _extras_case(seed=1)
    u.requires_grad_()
    got = nt_xent(u, v, temperature=0.3, chunk_size=chunk_size, exclude=exclude,
                  hard_negatives=negatives)
    (grad,) = torch.autograd.grad(got, u)
    w = u.detach().clone().requires_grad_()
    z = torch.nn.functional.normalize(torch.cat([w, v]), dim=1)
    n = torch.nn.functional.normalize(negatives, dim=-1).reshape(-1, 5)
    b = 6
    logits = z @ z.T / 0.3
    item_mask = exclude.repeat(2, 2) | torch.eye(2 * b, dtype=torch.bool)
    extra = torch.cat([z[:b] @ n.T / 0.3, torch.full((b, n.shape[0]), float("-inf"),
                                                     dtype=z.dtype)])
    full = torch.cat([logits.masked_fill(item_mask, float("-inf")), extra], dim=1)
    positive = (z[:b] * z[b:]).sum(-1) / 0.3
    expected = (-torch.cat([positive, positive]) + torch.logsumexp(full, dim=1)).mean()
    (grad_expected,) = torch.autograd.grad(expected, w)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(grad, grad_expected)


def test_bad_hard_negatives_and_exclusions_are_named():
    from skcontrast.losses import info_nce

    u, v, negatives, exclude = _extras_case()
    with pytest.raises(ValueError, match=r"hard_negatives must have shape \(B, k, d\)"):
        info_nce(u, v, hard_negatives=negatives[:3])
    with pytest.raises(ValueError, match="exclude must be a boolean"):
        info_nce(u, v, exclude=exclude.int())
    with pytest.raises(ValueError, match="exclude_negatives applies to hard_negatives"):
        info_nce(u, v, exclude_negatives=exclude)
    with pytest.raises(ValueError, match="one batch of pairs"):
        info_nce(u[None], v[None], exclude=exclude)


@pytest.mark.parametrize("kind", ["info_nce", "symmetric"])
@pytest.mark.parametrize("chunk_size", [None, 2])
@pytest.mark.parametrize("with_extras", [False, True])
def test_same_view_negatives_are_gte_and_equal_the_brute_force(kind, chunk_size, with_extras):
    from reference import softmax_with_extras

    from skcontrast.losses import info_nce, symmetric_info_nce

    u, v, negatives, exclude = _extras_case(seed=2)
    given = {"hard_negatives": negatives, "exclude": exclude} if with_extras else {}
    function = info_nce if kind == "info_nce" else symmetric_info_nce
    got = function(u, v, temperature=0.4, chunk_size=chunk_size, same_view_negatives=True,
                   **given)
    expected = softmax_with_extras(kind, u, v, 0.4, negatives=given.get("hard_negatives"),
                                   exclude=None if not with_extras else exclude.tolist(),
                                   same_view=True)
    assert float(got) == pytest.approx(expected, rel=1e-9, abs=1e-9)


def _dominated_case(b=6, d=8, seed=3):
    """A batch of weak positives where candidate v_3 equals anchor u_0 and v_0 equals
    u_3: for anchors 0 and 3 the left-out candidate dominates the sum (e^{(1 - s)/t}
    times the positive's term), as a duplicate text or what a guide removes does."""
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(b, d, generator=g, dtype=torch.float64)
    v = u + 1.2 * torch.randn(b, d, generator=g, dtype=torch.float64)
    v[3], v[0] = u[0], u[3]
    negatives = v[:, None] + 0.5 * torch.randn(b, 2, d, generator=g, dtype=torch.float64)
    exclude = torch.zeros(b, b, dtype=torch.bool)
    exclude[0, 3] = exclude[3, 0] = True
    return u, v, negatives, exclude


_EXCLUDING = {
    "info_nce": ("info_nce", {}, {}),
    "symmetric": ("symmetric_info_nce", {}, {}),
    "nt_xent": ("nt_xent", {}, {}),
    "dcl": ("dcl", {}, {}),
    "hcl": ("hard_negative_nce", {"beta": 0.5, "tau_plus": 0.1}, {"beta": 0.5}),
    "debiased": ("debiased_nce", {"tau_plus": 0.1}, {"beta": 0.0}),
}


@pytest.mark.parametrize("kind", list(_EXCLUDING))
@pytest.mark.parametrize("chunk_size", [None, 4])
@pytest.mark.parametrize("with_negatives", [False, True])
def test_float32_exclusions_equal_the_float64_brute_force_when_the_left_out_dominates(
        kind, chunk_size, with_negatives):
    # a left-out candidate must never enter the sum: subtracting its term afterwards
    # cancels catastrophically in float32 (one anchor read 7.523 for 7.284)
    from reference import softmax_with_extras

    import skcontrast.losses as L

    name, options, ref = _EXCLUDING[kind]
    u, v, negatives, exclude = _dominated_case()
    t = 0.05
    given = {"exclude": exclude}
    if with_negatives:
        given["hard_negatives"] = negatives.float()
    got = getattr(L, name)(u.float(), v.float(), temperature=t, chunk_size=chunk_size,
                           **options, **given)
    assert got.dtype == torch.float32
    expected = softmax_with_extras("hcl" if kind in ("hcl", "debiased") else kind, u, v, t,
                                   negatives=negatives if with_negatives else None,
                                   exclude=exclude.tolist(), **ref)
    # float32's rounding at logits of size 1/t = 20 is about 1e-6
    assert float(got) == pytest.approx(expected, rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("kind", ["symmetric", "nt_xent", "hcl"])
@pytest.mark.parametrize("chunk_size", [None, 4])
def test_each_view_anchors_read_their_own_exclusions(kind, chunk_size):
    # a (2, B, B) mask: the u anchors read [0], the v anchors [1] (a guide's rule is per
    # anchor; neither is made symmetric)
    from reference import softmax_with_extras

    import skcontrast.losses as L

    name, options, ref = _EXCLUDING[kind]
    u, v, _, _ = _extras_case(seed=4)
    exclude = torch.zeros(2, 6, 6, dtype=torch.bool)
    exclude[0, 0, 3] = exclude[0, 2, 5] = exclude[1, 4, 1] = exclude[1, 3, 0] = True
    got = getattr(L, name)(u, v, temperature=0.3, chunk_size=chunk_size, exclude=exclude,
                           **options)
    expected = softmax_with_extras("hcl" if kind == "hcl" else kind, u, v, 0.3,
                                   exclude=exclude.tolist(), **ref)
    assert float(got) == pytest.approx(expected, rel=1e-9)
    same = getattr(L, name)(u, v, temperature=0.3, chunk_size=chunk_size,
                            exclude=exclude[0], **options)
    assert float(same) != pytest.approx(float(got), rel=1e-6)


@pytest.mark.parametrize("chunk_size", [None, 2])
def test_an_anchor_with_every_negative_left_out_passes_no_nan_gradient(chunk_size):
    from skcontrast.losses import hard_negative_nce

    u, v, _, _ = _extras_case(seed=5)
    u.requires_grad_()
    exclude = torch.zeros(6, 6, dtype=torch.bool)
    exclude[0, 1:] = True  # anchor 0 keeps no negative
    loss = hard_negative_nce(u, v, temperature=0.3, tau_plus=0.0, chunk_size=chunk_size,
                             exclude=exclude, negatives="other view")
    (grad,) = torch.autograd.grad(loss, u)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
