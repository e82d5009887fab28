"""Nothing silently wrong when parts are combined, saved, exported or interrupted: one
test or more per numbered point of the issue, each failing before its fix."""

import numpy as np
import pytest
import torch

from skcontrast import ContrastiveEmbedder
from skcontrast._estimators._modules import ContrastiveCriterion
from skcontrast.datasets import make_paired_gaussians
from skcontrast.losses import (
    DCL,
    KCL,
    NTXent,
    DebiasedNCE,
    HardNegativeNCE,
    SigLIP,
    SupCon,
    SymmetricInfoNCE,
)

SMALL = {"n_components": 4, "hidden_layer_sizes": (16,), "max_epochs": 2, "lr": 1e-2,
         "random_state": 0, "device": "cpu", "batch_size": 16}


@pytest.fixture(scope="module")
def pairs():
    return make_paired_gaussians(64, 8, n_clusters=3, random_state=0)


# 6. A learned temperature keeps learning near its floor --------------------------------

def test_a_learned_temperature_has_a_gradient_down_to_its_floor():
    criterion = ContrastiveCriterion(SymmetricInfoNCE(0.07, learn_temperature=True))
    u = torch.nn.functional.normalize(torch.randn(8, 2, 5, dtype=torch.float64), dim=-1)
    (name, parameter), = criterion.named_parameters()
    with torch.no_grad():
        parameter.fill_(-12.0)  # log(t) = -12 was far below the floor, clamped, no gradient
    assert float(criterion.temperature.detach()) > 0.01
    criterion(u.float()).loss.backward()
    assert float(parameter.grad.abs()) > 0, name


@pytest.mark.parametrize("start", [0.005, 0.01])
def test_a_learned_temperature_must_start_above_its_floor(pairs, start):
    with pytest.raises(ValueError, match=rf"temperature={start} is the start of a learned "
                                         r"temperature, which stays above 0.01"):
        ContrastiveEmbedder(**SMALL, loss=SymmetricInfoNCE(start, learn_temperature=True)
                            ).fit(pairs[0])
    SymmetricInfoNCE(start).check()  # a fixed temperature may be that low


# 7. Non-finite loss settings are refused ----------------------------------------------

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
            ContrastiveEmbedder(**SMALL, loss=loss).fit(pairs[0])


# 8. Every real number type is a number ------------------------------------------------

@pytest.mark.parametrize("kind", [np.float32, np.float64, np.float16, np.int64])
def test_numpy_scalars_are_accepted_for_float_settings(kind):
    from skcontrast.selectors import (
        BcSSelector,
        CommunityBatchSelector,
        RandomWalkBatchSelector,
        ShuffledBatchSelector,
        TemperedSelector,
    )

    X = np.random.default_rng(0).normal(size=(16, 2, 4))
    half = kind(0.5) if kind is not np.int64 else kind(0)
    DebiasedNCE(tau_plus=half if kind is not np.int64 else kind(0)).check()
    HardNegativeNCE(beta=kind(1), tau_plus=half).check()
    SymmetricInfoNCE(temperature=kind(1), lambda_pos=kind(1)).check()
    DCL(lambda_ent=kind(2)).check()
    SigLIP(bias=kind(-3)).check()
    for selector in (TemperedSelector(ShuffledBatchSelector(4, random_state=0),
                                      random_share=half, random_state=0),
                     RandomWalkBatchSelector(4, n_candidates=5, n_neighbours=2,
                                             restart=half, random_state=0),
                     CommunityBatchSelector(4, p=1, q=3, resolution=kind(1), random_state=0),
                     BcSSelector(4, random_fraction=half, random_state=0)):
        assert sorted(np.concatenate(list(selector.split(X))).tolist()) == list(range(16))


@pytest.mark.parametrize("bad", [True, "0.5", None, float("nan")])
def test_what_is_not_a_finite_number_is_still_refused_by_name(bad):
    from skcontrast.selectors import ShuffledBatchSelector, TemperedSelector

    with pytest.raises(ValueError, match="tau_plus must be a number in"):
        DebiasedNCE(tau_plus=bad).check()
    with pytest.raises(ValueError, match="random_share must be a number in"):
        list(TemperedSelector(ShuffledBatchSelector(4), random_share=bad).split(np.zeros((8, 2))))


# 21. A warm start applies a changed start of every learned loss parameter ---------------

@pytest.mark.parametrize("change", [False, True])
def test_a_warm_start_applies_a_changed_siglip_bias(pairs, change):
    est = ContrastiveEmbedder(**{**SMALL, "lr": 0.5}, optimizer="sgd",
                              loss=SigLIP(bias=-10.0, learn_bias=True)).fit(pairs[0])
    learned = float(est.net_.criterion_.learned_bias)
    assert abs(learned + 10) > 1e-3  # it learned
    est.set_params(warm_start=True, lr=1e-9, max_epochs=1)
    if change:
        est.set_params(loss__bias=-5.0)
    est.fit(pairs[0])
    expected = -5.0 if change else learned
    assert float(est.net_.criterion_.learned_bias) == pytest.approx(expected, abs=1e-6)
