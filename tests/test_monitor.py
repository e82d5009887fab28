"""Held-out monitoring (skcontrast/_estimators/_monitor.py): the split of the held-out
rows (trust issue, point 7)."""

import numpy as np
import pytest

from skcontrast import SupConEmbedder
from skcontrast._estimators._monitor import split_indices


def test_a_single_member_class_keeps_the_split_stratified_and_every_class_trains():
    labels = np.repeat(np.arange(6), [1, 3, 10, 10, 10, 20])
    for seed in range(30):
        train, valid = split_indices(len(labels), 0.25, seed, labels)
        assert len(valid) == round(0.25 * len(labels))
        assert set(labels[train]) == set(labels)  # no class goes missing
        assert 0 not in labels[valid]  # the single member trains
        counts = np.bincount(labels[valid], minlength=6)
        share = 0.25 * np.bincount(labels)
        assert np.abs(counts - share).max() < 1  # stratified: each class its share
        assert np.intersect1d(train, valid).size == 0 and len(train) + len(valid) == 54


def test_supcon_keeps_every_class_with_a_held_out_fraction():
    rng = np.random.default_rng(0)
    y = np.repeat(["one", "three", "a", "b"], [1, 3, 20, 20])
    X = rng.normal(size=(len(y), 5)).astype(np.float32)
    for seed in range(3):
        with pytest.warns(UserWarning, match="single sample"):
            est = SupConEmbedder(n_components=3, hidden_layer_sizes=(8,), max_epochs=1,
                                 validation_fraction=0.2, random_state=seed,
                                 device="cpu").fit(X, y)
        assert set(est.classes_) == set(y)


def test_too_few_samples_to_hold_out_is_a_clear_error():
    with pytest.raises(ValueError, match="holds out 1 sample"):
        split_indices(6, 0.34, 0, np.array([0, 1, 2, 3, 4, 4]))
