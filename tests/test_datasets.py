"""Data makers, the split-view digits and the augmentations."""

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from skcontrast.datasets import (
    Compose,
    GaussianNoise,
    RandomFeatureMask,
    RandomShift,
    load_digit_views,
    make_paired_gaussians,
)


@pytest.mark.parametrize("view", ["halves", "top_bottom", "interleaved"])
def test_digit_views_are_the_two_parts_of_each_image(view):
    X, y, images = load_digit_views(view, return_images=True)
    assert X.shape == (1797, 2, 32) and X.dtype == np.float32 and y.shape == (1797,)
    reference = load_digits()
    np.testing.assert_array_equal(y, reference.target)
    assert X.min() >= 0 and X.max() <= 1
    pixels = np.sort(np.concatenate([X[5, 0], X[5, 1]]))
    np.testing.assert_allclose(pixels, np.sort(images[5].ravel()))
    if view == "halves":
        np.testing.assert_allclose(X[5, 0].reshape(8, 4), images[5][:, :4])


def test_paired_gaussians_are_reproducible_and_paired():
    X, y = make_paired_gaussians(300, 8, n_clusters=3, noise=0.05, random_state=0)
    X2, y2 = make_paired_gaussians(300, 8, n_clusters=3, noise=0.05, random_state=0)
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)
    assert X.shape == (300, 2, 8) and set(y.tolist()) == {0, 1, 2}
    with pytest.raises(ValueError, match="n_samples"):
        make_paired_gaussians(0)


def test_random_shift_moves_images_and_fills_with_zeros():
    image = torch.arange(1, 17, dtype=torch.float32).reshape(1, 16)
    generator = torch.Generator().manual_seed(0)
    shifted = RandomShift((4, 4), max_shift=1)(image.repeat(50, 1), generator)
    assert shifted.shape == (50, 16)
    for row in shifted.reshape(50, 4, 4):
        kept = row[row > 0]
        assert 9 <= len(kept) <= 16  # at most one row and one column shifted out
        assert set(kept.tolist()) <= set(range(1, 17))
    assert len({tuple(r.tolist()) for r in shifted}) > 1
    with pytest.raises(ValueError, match="needs 16 features"):
        RandomShift((4, 4))(torch.zeros(2, 10))


def test_noise_and_mask_are_seeded():
    x = torch.ones(4, 10)
    a = Compose(GaussianNoise(0.1), RandomFeatureMask(0.5))(x, torch.Generator().manual_seed(1))
    b = Compose(GaussianNoise(0.1), RandomFeatureMask(0.5))(x, torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    assert (a == 0).any() and not torch.equal(a, x)
    with pytest.raises(ValueError, match="p must be in"):
        RandomFeatureMask(1.0)
