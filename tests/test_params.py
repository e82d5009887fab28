"""Tests of ``skcontrast._estimators._params``: the shared estimator parameters, their
validation, per-group learning rates and tunable module/optimizer parameters."""

import numpy as np
import pytest
import torch
from _helpers import SMALL_IMAGES, Encoder, PairDataset, image_pairs, paired_gaussians, small_mlp
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from torch import nn

from skcontrast import ContrastiveEmbedder

SMALL = small_mlp(max_epochs=3)
pairs = paired_gaussians(120)


def test_per_group_learning_rates(pairs):
    X, _ = pairs
    est = ContrastiveEmbedder(Encoder, **{**SMALL, "projection_head": 8, "lr": 1e-3,
                                          "optimizer__param_groups": [
                                              ("heads.*", {"lr": 1e-1})]}).fit(X)
    rates = sorted(group["lr"] for group in est.net_.optimizer_.param_groups)
    assert rates == [1e-3, 1e-1]


def test_module_and_optimizer_parameters_are_tunable(pairs):
    X, _ = pairs
    est = ContrastiveEmbedder(Encoder, **{**SMALL, "module__hidden": 8,
                                          "optimizer__weight_decay": 1e-3})
    assert clone(est).get_params()["module__hidden"] == 8
    search = GridSearchCV(est, {"module__hidden": [4, 8], "optimizer__weight_decay": [0, 1e-2]},
                          cv=2).fit(X)
    assert set(search.best_params_) == {"module__hidden", "optimizer__weight_decay"}
    fitted = search.best_estimator_
    assert fitted.net_.optimizer_.param_groups[0]["weight_decay"] == \
        search.best_params_["optimizer__weight_decay"]
    assert fitted.net_.module_.encoders[0].out.out_features == 4  # n_components reached it
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['colour'\]"):
        ContrastiveEmbedder(colour="red", **SMALL).fit(X)
    with pytest.raises(ValueError, match="set both as optimizer__\\* and in optimizer_params"):
        ContrastiveEmbedder(optimizer__eps=1e-6, optimizer_params={"eps": 1e-7}, **SMALL).fit(X)
    with pytest.raises(ValueError, match="go to a module class or factory"):
        ContrastiveEmbedder(nn.Linear(8, 4), module__bias=False, **SMALL).fit(X)


@pytest.mark.skipif(getattr(torch.backends, "mps", None) is not None
                    and torch.backends.mps.is_available(), reason="an MPS device is here")
def test_mps_without_an_apple_gpu_is_a_clear_error(pairs):
    X, _ = pairs
    with pytest.raises(ValueError, match="device='mps' was requested but no Apple GPU"):
        ContrastiveEmbedder(**{**SMALL, "device": "mps"}).fit(X)


def test_parameter_errors(digit_images):
    images, _, _ = digit_images
    X = image_pairs(images)
    with pytest.raises(ValueError, match=r"precision must be one of 'float32', 'bfloat16', "
                                         r"'float16'; got 'half'"):
        ContrastiveEmbedder(precision="half", **SMALL_IMAGES).fit(X)
    with pytest.raises(ValueError, match="num_workers must be >= 0; got -1"):
        ContrastiveEmbedder(num_workers=-1, **SMALL_IMAGES).fit(X)
    with pytest.raises(ValueError, match=r"data_on_device must be one of True, False, 'auto'; "
                                         r"got 'yes'"):
        ContrastiveEmbedder(data_on_device="yes", **SMALL_IMAGES).fit(X)
    with pytest.raises(ValueError, match="data_on_device=True needs array or tensor data"):
        ContrastiveEmbedder(data_on_device=True, **SMALL_IMAGES).fit(PairDataset(images))


def test_the_parameters_are_declared_and_checked_in_fit():
    """scikit-learn's ``_parameter_constraints``: each parameter's accepted values, in one
    declaration, checked when ``fit`` starts; the error names the parameter, what it
    may be and what it got."""
    declared = ContrastiveEmbedder._parameter_constraints
    assert {"max_epochs", "precision", "selection_pass", "transform_views"} <= set(declared)
    X = np.zeros((8, 4))
    for params, message in [
        ({"max_epochs": 0}, "max_epochs must be >= 1; got 0"),
        ({"n_components": "all"}, "n_components must be 'auto' or an integer >= 1; got 'all'"),
        ({"transform_views": "sum"}, "transform_views must be one of 'first', 'concat', "
                                     "'mean'; got 'sum'"),
        ({"warm_start": "yes"}, "warm_start must be True or False; got 'yes'"),
        ({"optimizer": "lbfgs"}, r"optimizer must be one of 'adam', 'adamw', 'sgd' or a "
                                 r"torch.optim.Optimizer class; got 'lbfgs'"),
    ]:
        with pytest.raises(ValueError, match=message):
            ContrastiveEmbedder(**params).fit(X)


@pytest.mark.parametrize("name", ["iterator_train__shuffle", "iterator_train__num_workers",
                                  "iterator_valid__batch_size", "dataset__length",
                                  "train_split"])
def test_skorchs_loader_parameters_are_refused_naming_what_to_set(pairs, name):
    """skorch's ``iterator_*``, ``dataset__*`` and ``train_split`` would be dead here (the
    estimators make their loaders and held-out data themselves): refused, naming the
    selector, ``batch_size``, ``num_workers`` and ``validation_fraction``."""
    X, _ = pairs
    with pytest.raises(ValueError, match=rf"\['{name}'\]: parameters of skorch's "
                                         r"NeuralNet that the estimators set themselves.*"
                                         r"batch_size.*num_workers.*validation_fraction"):
        ContrastiveEmbedder(**small_mlp(max_epochs=1), **{name: 1}).fit(X)
