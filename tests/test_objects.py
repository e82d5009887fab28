"""The loss objects (skcontrast/losses/_objects.py) and the losses they brought: SigLIP,
HardNegativeNCE and DebiasedNCE."""

import pickle
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import reference as ref
import torch
from _helpers import peak_memory_growth
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV

import skcontrast
from skcontrast import ContrastiveEmbedder, SupConEmbedder
from skcontrast.datasets import make_paired_gaussians
from skcontrast.losses import (
    KCL,
    LOSSES,
    DebiasedNCE,
    FunctionLoss,
    HardNegativeNCE,
    Loss,
    LossTerms,
    NTXent,
    SigLIP,
    SupCon,
    SymmetricInfoNCE,
    debiased_nce,
    hard_negative_nce,
    info_nce,
    make_loss,
    nt_xent,
    pair_affinity,
    siglip,
)
from skcontrast.memory import CrossBatchMemory, SogCLRMemory

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"n_components": 4, "hidden_layer_sizes": (8,), "max_epochs": 2, "lr": 1e-2,
         "random_state": 0, "device": "cpu"}


def views(b=6, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(b, d, dtype=torch.float64, generator=g, requires_grad=True)
    v = torch.randn(b, d, dtype=torch.float64, generator=g, requires_grad=True)
    return u, v


def grads(value, *inputs):
    return torch.autograd.grad(value, inputs)


# --------------------------------------------------------------------------------------
# Every object is its function
# --------------------------------------------------------------------------------------

OPTIONS = {"info_nce": {"lambda_ent": 0.7}, "symmetric_info_nce": {"directions": "mean"},
           "nt_xent": {"lambda_pos": 1.3}, "dcl": {}, "dhel": {"include_positive_view": False},
           "kcl": {"kernel": "imq"}, "siglip": {"bias": -2.0, "symmetric": True},
           "hard_negative_nce": {"beta": 0.5, "tau_plus": 0.05},
           "debiased_nce": {"tau_plus": 0.1, "negatives": "other view"},
           "supcon": {"base_temperature": 0.07}, "contrastive_margin": {"margin": 0.8}}


@pytest.mark.parametrize("name", list(LOSSES))
def test_every_loss_object_equals_its_function_in_values_and_gradients(name):
    cls = LOSSES[name]
    obj = cls(**OPTIONS.get(name, {}), temperature=0.4)  # a new loss: its defaults
    u, v = views()
    # the parameters but the learn_* flags and the false-negative guard (made into masks
    # per batch by the estimator) are the function's options
    params = {k: val for k, val in obj.get_params().items()
              if not k.startswith("learn_") and k != "false_negatives"}
    assert params == obj.options()
    if cls.labelled:
        z, y = torch.cat([u, v]), torch.arange(6).repeat(2)
        got, want = obj(z, y), cls.function(z, y, **params)
    else:
        got, want = obj(u, v), cls.function(u, v, **params)
    torch.testing.assert_close(got, want)
    for a, b in zip(grads(got, u, v), grads(want, u, v), strict=True):
        torch.testing.assert_close(a, b)
    assert obj.tileable == ("chunk_size" in params)


@pytest.mark.parametrize("name", list(LOSSES))
def test_loss_objects_clone_pickle_and_take_parameters(name):
    obj = LOSSES[name]()
    again = pickle.loads(pickle.dumps(clone(obj).set_params(temperature=0.3)))
    assert again.temperature == 0.3 and obj.temperature != 0.3
    assert type(make_loss(name)) is LOSSES[name]
    assert obj.check() is obj


@pytest.mark.parametrize("name", list(LOSSES))
def test_every_loss_object_trains_saves_and_loads(name, tmp_path):
    X, _ = make_paired_gaussians(48, 4, n_clusters=3, random_state=0)
    loss = LOSSES[name](learn_temperature=True)
    est = ContrastiveEmbedder(loss=loss, **SMALL).fit(X)
    assert np.isfinite(est.history_[:, "train_loss"]).all()
    again = skcontrast.load(est.save(tmp_path / "m"))
    assert again.loss.get_params() == loss.get_params()
    np.testing.assert_array_equal(again.transform(X), est.transform(X))
    assert again.temperature_ == est.temperature_ != loss.temperature
    restored = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(restored.transform(X), est.transform(X))


def test_a_grid_over_the_loss_temperature_and_balance_runs():
    X, _ = make_paired_gaussians(64, 4, random_state=0)
    grid = GridSearchCV(ContrastiveEmbedder(**SMALL),  # the loss given by name
                        {"loss__temperature": [0.1, 0.5], "loss__lambda_ent": [0.5, 1.0]},
                        cv=2).fit(X)
    assert grid.best_params_.keys() == {"loss__temperature", "loss__lambda_ent"}
    assert len(grid.cv_results_["params"]) == 4
    assert grid.best_estimator_.loss.temperature == grid.best_params_["loss__temperature"]
    objects = GridSearchCV(SupConEmbedder(**SMALL), {"loss__temperature": [0.1, 0.5]},
                           cv=2).fit(X[:, 0], np.arange(64) % 4)
    assert isinstance(objects.best_estimator_.loss, Loss)


@pytest.mark.parametrize("old", ["temperature", "learn_temperature", "lambda_pos",
                                 "lambda_ent", "loss_params"])
def test_the_flat_loss_parameters_point_to_the_loss_object(old):
    X, _ = make_paired_gaussians(32, 4, random_state=0)
    with pytest.raises(ValueError, match=rf"{old} is now a parameter of the loss object"):
        ContrastiveEmbedder(**{old: 1.0}).fit(X)
    with pytest.raises(ValueError, match=r"loss__"):
        ContrastiveEmbedder().set_params(**{old: 1.0})


# --------------------------------------------------------------------------------------
# SigLIP
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("symmetric", [False, True])
def test_siglip_is_zhai_et_al_eq_1_in_values_and_gradients(symmetric):
    u, v = views(5, 3, seed=1)
    t = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    bias = torch.tensor(-1.5, dtype=torch.float64, requires_grad=True)
    got = siglip(u, v, temperature=t, bias=bias, lambda_pos=0.8, lambda_ent=1.2,
                 symmetric=symmetric)
    want = ref.siglip(u, v, t, bias, lambda_pos=0.8, lambda_ent=1.2)
    torch.testing.assert_close(got, want)
    for a, b in zip(grads(got, u, v, t, bias), grads(want, u, v, t, bias), strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("chunk", [1, 3, 7])
def test_tiled_siglip_equals_the_dense_one_with_learned_temperature_and_bias(chunk):
    u, v = views(7, 4, seed=2)
    values = []
    for chunk_size in (None, chunk):
        t = torch.tensor(0.2, dtype=torch.float64, requires_grad=True)
        bias = torch.tensor(-3.0, dtype=torch.float64, requires_grad=True)
        terms = siglip(u, v, temperature=t, bias=bias, chunk_size=chunk_size,
                       symmetric=True, return_terms=True)
        values.append((terms, grads(terms.loss, u, v, t, bias)))
    (dense, dense_grads), (tiled, tiled_grads) = values
    for a, b in zip(tiled, dense, strict=True):
        torch.testing.assert_close(a, b)
    for a, b in zip(tiled_grads, dense_grads, strict=True):
        torch.testing.assert_close(a, b)
    stacked = torch.randn(2, 3, 9, 4, dtype=torch.float64)
    torch.testing.assert_close(siglip(stacked, stacked.flip(-2), chunk_size=4),
                               siglip(stacked, stacked.flip(-2)))




@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="Linux's peak memory (/proc) and glibc's allocator")
def test_tiled_siglip_backward_stays_under_a_memory_bound_the_dense_one_exceeds():
    """Forward and backward at B = 4,096, a learned temperature and bias included, in
    a fresh process: the tiled SigLIP (256-row tiles) peaks at less than half of one
    dense B x B logits matrix (64 MiB); the dense one keeps such matrices for autograd and
    needs more than one."""
    bound = 4096 ** 2 * 4
    tiled, dense = peak_memory_growth("siglip", 4096, 256, temperature=0.1, bias=-10.0)
    assert tiled < bound / 2 < bound < dense


def test_siglip_affinity_is_exactly_its_pair_terms():
    """SigLIP's entropy is a sum of pair terms: the negative terms of a batch are the sum
    of its pairs' affinities."""
    u, v = views(8, 3, seed=3)
    loss = SigLIP(0.5, bias=-1.0)
    w = loss.affinity(u, v, 4)
    batch = [1, 3, 4, 6]
    entropy = loss(u[batch], v[batch], return_terms=True, reduction="sum").entropy
    pairs = sum(w[k, m] for i, k in enumerate(batch) for m in batch[i + 1:])
    torch.testing.assert_close(entropy, pairs)


def test_symmetric_infonce_affinity_is_cho_2023_eq_5():
    u, v = views(8, 3, seed=4)
    torch.testing.assert_close(SymmetricInfoNCE(0.3).affinity(u, v, 4),
                               pair_affinity(u, v, 4, temperature=0.3))


# --------------------------------------------------------------------------------------
# Hard negatives and debiasing
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("negatives", ["both views", "other view"])
@pytest.mark.parametrize("beta, tau_plus", [(0.0, 0.0), (1.0, 0.1), (0.5, 0.0), (0.0, 0.2),
                                            (2.0, 0.3)])
def test_hcl_is_robinson_et_als_estimator_in_values_and_gradients(negatives, beta, tau_plus):
    u, v = views(5, 3, seed=5)
    t = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    got = hard_negative_nce(u, v, temperature=t, beta=beta, tau_plus=tau_plus,
                            negatives=negatives)
    want = ref.hard_negative(u, v, t, beta, tau_plus, negatives)
    torch.testing.assert_close(got, want)
    for a, b in zip(grads(got, u, v, t), grads(want, u, v, t), strict=True):
        torch.testing.assert_close(a, b)


def test_hcl_at_beta_0_and_tau_plus_0_is_nt_xent_or_info_nce():
    u, v = views(6, 4, seed=6)
    plain = hard_negative_nce(u, v, beta=0.0, tau_plus=0.0, return_terms=True)
    for a, b in zip(plain, nt_xent(u, v, return_terms=True), strict=True):
        torch.testing.assert_close(a, b)
    one_sided = debiased_nce(u, v, tau_plus=0.0, negatives="other view")
    torch.testing.assert_close(one_sided, info_nce(u, v))
    torch.testing.assert_close(DebiasedNCE(tau_plus=0.1)(u, v),
                               HardNegativeNCE(beta=0.0, tau_plus=0.1)(u, v))


@pytest.mark.parametrize("negatives", ["both views", "other view"])
def test_tiled_hcl_equals_the_dense_one(negatives):
    u, v = views(9, 4, seed=7)
    dense = hard_negative_nce(u, v, beta=1.0, tau_plus=0.1, negatives=negatives)
    tiled = hard_negative_nce(u, v, beta=1.0, tau_plus=0.1, negatives=negatives, chunk_size=2)
    torch.testing.assert_close(tiled, dense)
    for a, b in zip(grads(tiled, u, v), grads(dense, u, v), strict=True):
        torch.testing.assert_close(a, b)


def test_harder_negatives_weigh_more():
    """With beta > 0, the negative term grows as one negative moves close to the anchor,
    more than with beta = 0."""
    u, v = views(6, 4, seed=8)
    near = v.detach().clone()
    near[1] = u.detach()[0]  # the hardest negative of anchor 0
    plain, hard = (hard_negative_nce(u, near, beta=beta, tau_plus=0.0, reduction="none",
                                     negatives="other view")[0] -
                   hard_negative_nce(u, v, beta=beta, tau_plus=0.0, reduction="none",
                                     negatives="other view")[0] for beta in (0.0, 2.0))
    assert hard > plain > 0


@pytest.mark.parametrize("bad, message", [({"beta": -1.0}, "beta must be a non-negative"),
                                          ({"tau_plus": 1.0}, r"tau_plus must be a number in"),
                                          ({"negatives": "all"}, "negatives must be one of")])
def test_hcl_bad_parameters(bad, message):
    u, v = views()
    with pytest.raises(ValueError, match=message):
        hard_negative_nce(u, v, **bad)
    with pytest.raises(ValueError, match=f"HardNegativeNCE: {message}"):
        HardNegativeNCE(**bad).check()


# --------------------------------------------------------------------------------------
# What the memories ask of a loss, custom losses, and bare callables
# --------------------------------------------------------------------------------------

def test_siglip_trains_with_a_queue_and_hcl_is_refused_by_memories_by_name():
    X, _ = make_paired_gaussians(48, 4, random_state=0)
    est = ContrastiveEmbedder(loss=SigLIP(learn_bias=True), memory=CrossBatchMemory(64),
                              batch_size=16, **SMALL).fit(X)
    assert np.isfinite(est.history_[:, "train_loss"]).all()
    with pytest.raises(ValueError, match="which HardNegativeNCE does not have"):
        ContrastiveEmbedder(loss="hard_negative_nce", memory=SogCLRMemory(), **SMALL).fit(X)
    with pytest.raises(ValueError, match="which SigLIP does not have"):
        ContrastiveEmbedder(loss="siglip", memory=SogCLRMemory(), **SMALL).fit(X)


def alignment_uniformity(u, v, *, temperature=0.1, return_terms=False, **unused):
    """Pull pairs together (positive), push the rows of ``u`` apart (entropy)."""
    u = torch.nn.functional.normalize(u, dim=-1)
    v = torch.nn.functional.normalize(v, dim=-1)
    positive = -(u * v).sum(-1).mean(-1) / temperature
    entropy = torch.logsumexp(u @ u.transpose(-1, -2) / temperature, -1).mean(-1)
    terms = LossTerms(positive + entropy, positive, entropy)
    return terms if return_terms else terms.loss


class Alignment(Loss):
    """A custom loss in a few lines: a function, and the parameters it takes."""

    function = staticmethod(alignment_uniformity)

    def __init__(self, temperature=0.1, *, learn_temperature=False):
        self.temperature = temperature
        self.learn_temperature = learn_temperature


def test_a_custom_loss_subclass_trains_in_an_estimator_with_its_terms():
    X, _ = make_paired_gaussians(48, 4, random_state=0)
    est = ContrastiveEmbedder(loss=Alignment(0.2), **SMALL).fit(X)
    assert np.isfinite(est.history_[:, "train_positive"]).all()
    with pytest.raises(ValueError, match="which Alignment does not have"):
        ContrastiveEmbedder(loss=Alignment(), memory=CrossBatchMemory(128), **SMALL).fit(X)


def test_a_bare_callable_works_and_says_what_it_gives_up():
    X, _ = make_paired_gaussians(48, 4, random_state=0)

    def loss(u, v, temperature):
        return info_nce(u, v, temperature=temperature)

    with pytest.warns(UserWarning, match=r"bare callable: it gives up chunk_size='auto', "
                                         r"memories, the positive and entropy terms"):
        est = ContrastiveEmbedder(loss=loss, **SMALL).fit(X)
    assert np.isnan(est.history_[:, "train_positive"]).all()
    assert np.isfinite(est.history_[:, "train_loss"]).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        wrapped = ContrastiveEmbedder(loss=FunctionLoss(loss, temperature=0.3), **SMALL).fit(X)
    assert wrapped.temperature_ == 0.3


@pytest.mark.parametrize("name", ["SymmetricInfoNCE", "NTXent"])
@pytest.mark.parametrize("chunk_size", [None, 3])
def test_a_guided_loss_applies_each_anchors_own_rule(name, chunk_size):
    # GISTEmbed's rule is per anchor: s(a_i, p_j) > s(a_i, p_i) + margin drops p_j for a_i
    # alone; making the mask symmetric dropped candidates no rule of the anchor named
    from reference import softmax_with_extras, unit_rows

    import skcontrast.losses as L

    g = torch.Generator().manual_seed(7)
    u = torch.randn(6, 4, generator=g, dtype=torch.float64)
    v = u + 0.9 * torch.randn(6, 4, generator=g, dtype=torch.float64)
    v[1] = u[0] + 0.05 * v[1]  # p_1 near a_0: flagged for anchor 0 only
    margin = 0.05
    loss = getattr(L, name)(0.3, chunk_size=chunk_size,
                            false_negatives=L.FalseNegativeGuard(same_content=False,
                                                                 guide="self", margin=margin))
    masks = loss.false_negatives.masks(u, v, None, torch.arange(6), None, None, share=True)
    got = float(loss.pair_terms(u, v, **masks).loss)
    A, P = unit_rows(u.numpy()), unit_rows(v.numpy())
    rule = [[[i != j and float(x[i] @ y[j]) > float(A[i] @ P[i]) + margin for j in range(6)]
             for i in range(6)] for x, y in ((A, P), (P, A))]
    assert rule[0][0][1] and not rule[0][1][0]  # the case: one anchor's rule, not both
    kind = "symmetric" if name == "SymmetricInfoNCE" else "nt_xent"
    expected = softmax_with_extras(kind, u, v, 0.3, exclude=rule)
    assert got == pytest.approx(expected, rel=1e-9)


SMALL_FIT = {"n_components": 4, "hidden_layer_sizes": (16,), "max_epochs": 2, "lr": 1e-2,
         "random_state": 0, "device": "cpu", "batch_size": 16}


@pytest.fixture(scope="module")
def pairs():
    return make_paired_gaussians(64, 8, n_clusters=3, random_state=0)


@pytest.mark.parametrize("start", [0.005, 0.01])
def test_a_learned_temperature_must_start_above_its_floor(pairs, start):
    with pytest.raises(ValueError, match=rf"temperature={start} is the start of a learned "
                                         r"temperature, which stays above 0.01"):
        ContrastiveEmbedder(**SMALL_FIT, loss=SymmetricInfoNCE(start, learn_temperature=True)
                            ).fit(pairs[0])
    SymmetricInfoNCE(start).check()  # a fixed temperature may be that low


@pytest.mark.parametrize("loss, name", [
    (SymmetricInfoNCE(lambda_pos=float("nan")), "lambda_pos"),
    (NTXent(lambda_ent=float("inf")), "lambda_ent"),
    (SigLIP(bias=float("nan")), "bias"),
    (SigLIP(bias=float("-inf")), "bias"),
    (SymmetricInfoNCE(temperature=float("inf")), "temperature"),
    (SymmetricInfoNCE(temperature=float("inf"), learn_temperature=True), "temperature"),
    (KCL(lambda_pos=float("nan")), "lambda_pos"),
    (SupCon(lambda_ent=float("nan")), "lambda_ent"),
])
def test_non_finite_loss_settings_are_refused(pairs, loss, name):
    with pytest.raises(ValueError, match=rf"{name} must be a .*finite number"):
        loss.check()
    if not loss.labelled:
        with pytest.raises(ValueError, match=name):
            ContrastiveEmbedder(**SMALL_FIT, loss=loss).fit(pairs[0])
