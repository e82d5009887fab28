"""The net that owns training (skcontrast/_estimators/_net.py): skorch extended through
its public hooks, the fit iterating the public sampler, the step returning its terms."""

import numpy as np
import pytest
import torch
from skorch import NeuralNet
from torch.utils.data import DataLoader

from skcontrast import ContrastiveEmbedder
from skcontrast._estimators._data import GatheredBatches, ItemViews, TensorViews
from skcontrast._estimators._distributed import DistributedSelectorNet
from skcontrast._estimators._net import SelectorNet
from skcontrast.datasets import make_paired_gaussians
from skcontrast.losses import LossTerms
from skcontrast.selectors import SampledBatch, SelectorSampler

SMALL = {"n_components": 4, "hidden_layer_sizes": (8,), "max_epochs": 1, "random_state": 0,
         "batch_size": 16}


def overridden(cls):
    """The methods of skorch's ``NeuralNet`` (and its bases) that ``cls`` overrides."""
    own = {name for base in cls.__mro__[:cls.__mro__.index(NeuralNet)] for name in vars(base)
           if callable(vars(base)[name]) or isinstance(vars(base)[name], property)}
    skorch = {name for base in NeuralNet.__mro__[:-1] for name in vars(base)}
    return sorted(own & skorch)


@pytest.mark.parametrize("cls", [SelectorNet, DistributedSelectorNet])
def test_the_net_extends_at_most_ten_of_skorchs_methods_none_private(cls):
    """It overrode 19 (the epoch loop, partial_fit, notify, two private ones)."""
    names = overridden(cls)
    assert len(names) <= 10, names
    assert not [n for n in names if n.startswith("_") and not n.endswith("__")], names


def test_the_fit_iterates_the_public_sampler():
    X, _ = make_paired_gaussians(40, 4, random_state=0)
    net = ContrastiveEmbedder(**SMALL).fit(X).net_
    assert isinstance(net.sampler_, SelectorSampler) and net.sampler_.selector is net.selector
    data = TensorViews((torch.zeros(40, 4), torch.zeros(40, 4)))
    gathered = net.get_iterator(data, training=True)
    assert isinstance(gathered, GatheredBatches) and gathered.sampler is net.sampler_
    pairs = [(np.zeros(4, np.float32), np.ones(4, np.float32)) for _ in range(40)]
    dataset = ItemViews(pairs, _spec_of_pairs(4))
    loader = net.get_iterator(dataset, training=True)
    assert isinstance(loader, DataLoader) and loader.batch_sampler is net.sampler_
    batch = next(iter(net.sampler_))
    assert isinstance(batch, SampledBatch) and list(batch) == batch.batch.tolist()
    assert sum(len(b.index) for b in loader) == 40  # one epoch, every row once


def _spec_of_pairs(d):
    from skcontrast._estimators._data import InputSpec, View

    return InputSpec("dataset", (View(0, (d,), False), View(1, (d,), False)),
                     items_paired=True)


def test_the_step_returns_its_loss_terms():
    """The terms reached the epoch loop through an attribute the loss left on the net."""
    X, _ = make_paired_gaussians(32, 4, random_state=0)
    net = ContrastiveEmbedder(**SMALL).fit(X).net_
    data = TensorViews((torch.from_numpy(X[:, 0]), torch.from_numpy(X[:, 1])))
    batch = data.gather(torch.arange(16))
    step = net.train_step(batch)
    terms = step["terms"]
    assert isinstance(terms, LossTerms) and step["loss"] is terms.loss
    assert np.isfinite(float(terms.positive)) and np.isfinite(float(terms.entropy))
    held = net.validation_step(batch)
    assert isinstance(held["terms"], LossTerms)
    assert "_batch_terms" not in vars(net)
