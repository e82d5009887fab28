"""What X is (skcontrast/_estimators/_data.py): integer pairs stay integers, and images
are scaled and normalised whatever their shape (trust issue, points 9 and 10)."""

import numpy as np
import pytest
import torch
from torch import nn

from skcontrast import ContrastiveEmbedder

SMALL = {"n_components": 4, "hidden_layer_sizes": (8,), "max_epochs": 2, "lr": 1e-2,
         "random_state": 0, "device": "cpu"}


class Tokens(nn.Module):
    """Bags of token ids; remembers the largest id it was given."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.bag = nn.EmbeddingBag(1000, n_out)
        self.largest = 0

    def forward(self, x):
        assert x.dtype == torch.long
        self.largest = max(self.largest, int(x.max()))
        return self.bag(x % 1000)


def test_integer_pairs_keep_their_token_ids():
    rng = np.random.default_rng(0)
    X = rng.integers(2**24, 2**24 + 9, size=(40, 2, 5))  # collide as float32
    X[0, 0, 0] = 2**24 + 9
    est = ContrastiveEmbedder(Tokens, **SMALL).fit(X)
    assert est.input_spec_.views[0].integer
    assert est.net_.module_.encoders[0].largest == 2**24 + 9
    assert est.transform(X).shape == (40, 4)
    with pytest.raises(ValueError, match=r"holds integers .*pass an encoder"):
        ContrastiveEmbedder(**SMALL).fit(X)


def test_bytes_are_images_in_any_shape():
    X = np.random.default_rng(0).integers(0, 256, size=(40, 2, 16), dtype=np.uint8)
    flat = ContrastiveEmbedder(**SMALL).fit(X)
    channel = ContrastiveEmbedder(**SMALL).fit(X[..., None])
    np.testing.assert_allclose(flat.transform(X), channel.transform(X[..., None]), atol=1e-6)
    floats = ContrastiveEmbedder(**SMALL).fit(X.astype(np.float32) / 255)
    np.testing.assert_allclose(flat.transform(X), floats.transform(X.astype(np.float32) / 255),
                               atol=1e-5)


def test_image_normalization_applies_to_float_images_too():
    X = np.random.default_rng(0).random((40, 2, 3, 4, 4)).astype(np.float32)
    mean, std = (0.2, 0.5, 0.7), (0.5, 0.25, 0.1)
    normalised = ContrastiveEmbedder(**SMALL, image_normalization=(mean, std)).fit(X)
    by_hand = (X - np.reshape(mean, (1, 1, 3, 1, 1))) / np.reshape(std, (1, 1, 3, 1, 1))
    plain = ContrastiveEmbedder(**SMALL).fit(by_hand.astype(np.float32))
    np.testing.assert_allclose(normalised.transform(X), plain.transform(by_hand), atol=1e-5)
    with pytest.raises(ValueError, match="has 3 values per channel, but view 0"):
        ContrastiveEmbedder(**SMALL, image_normalization=(mean, std)).fit(X[:, :, :2])
