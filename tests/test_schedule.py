"""Tests of ``skcontrast._estimators._schedule``: learning-rate warm-up and cosine decay
step once per batch."""

import math

import numpy as np
import pytest
from _helpers import paired_gaussians, small_mlp
from skorch.callbacks import Callback

from skcontrast import ContrastiveEmbedder, WarmupCosine

SMALL = small_mlp(max_epochs=3)
pairs = paired_gaussians(120)


class Rates(Callback):
    def initialize(self):
        self.rates = []
        return self

    def on_batch_begin(self, net, training=False, **kwargs):
        if training:
            self.rates.append(net.optimizer_.param_groups[0]["lr"])


def test_warmup_cosine_steps_per_batch(pairs):
    X, _ = pairs
    rates = Rates()
    est = ContrastiveEmbedder(**{**SMALL, "max_epochs": 4, "lr": 0.1, "batch_size": 30,
                                 "lr_schedule": WarmupCosine(warmup_epochs=1),
                                 "callbacks": [rates]}).fit(X)
    total, warm = 16, 4
    expected = [0.1 * (t + 1) / warm if t < warm else
                0.1 * 0.5 * (1 + math.cos(math.pi * (t - warm) / (total - warm - 1)))
                for t in range(total)]
    np.testing.assert_allclose(rates.rates[1:], expected[1:], rtol=1e-9)
    assert est.history_[-1, "lr"] == pytest.approx(expected[-1])
    with pytest.raises(ValueError, match="warmup_epochs must be a non-negative, finite number"):
        ContrastiveEmbedder(**{**SMALL, "lr_schedule": WarmupCosine(-1)}).fit(X)
