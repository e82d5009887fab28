"""Tests of ``skcontrast._estimators._step``: the training step, gradient caching
(micro-batches), augmentation on whole batches and mixed precision."""

import functools
import warnings

import numpy as np
import pytest
import torch
from _helpers import SMALL_IMAGES, image_pairs, paired_gaussians, small_mlp, tiny_cnn
from torch import nn

from skcontrast import ContrastiveEmbedder, SupConEmbedder
from skcontrast.datasets import (
    GaussianNoise,
    load_digit_images,
)
from skcontrast.losses import (
    NTXent,
    SymmetricInfoNCE,
)
from skcontrast.memory import CrossBatchMemory, SogCLRMemory
from skcontrast.selectors import (
    FullBatchSelector,
    OSGDSelector,
)

SMALL = small_mlp()


def test_an_augmentation_that_changes_the_batch_shape_is_explained():
    images = np.random.default_rng(0).random((64, 8, 8)).astype(np.float32)

    def adds_an_axis(x):  # what kornia does to a batch of (n, 8, 8) images
        return x[None]

    with pytest.raises(ValueError, match=r"got \(\d+, 8, 8\) and returned \(1, \d+, 8, 8\).*"
                                         r"give single-channel images a channel axis"):
        ContrastiveEmbedder(augmentation=adds_an_axis, **SMALL).fit(images)

pairs = paired_gaussians(96, 6)


def fit(X, y=None, kind=ContrastiveEmbedder, **params):
    settings = {"n_components": 4, "hidden_layer_sizes": (16,), "max_epochs": 2,
                "lr": 1e-2, "batch_size": 32, "random_state": 0, "device": "cpu", **params}
    est = kind(**settings)
    return est.fit(X) if y is None else est.fit(X, y)


def assert_same_weights(a, b, **tolerance):
    sa, sb = a.net_.module_.state_dict(), b.net_.module_.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        torch.testing.assert_close(sb[name], sa[name], **tolerance)


def small_cnn(n_in, n_out):
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, n_out))


class SingleViews(torch.utils.data.Dataset):
    """A TensorDataset's one tensor as single-view items (picklable, for workers)."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i):
        return self.dataset[i][0]


class RecordingDropout(nn.Module):
    """Dropout that keeps what it let through at every call."""

    def __init__(self):
        super().__init__()
        self.dropout = nn.Dropout(0.5)
        self.calls = []

    def forward(self, x):
        out = self.dropout(x)
        if self.training:  # the training passes, not the inference ones
            self.calls.append((torch.is_grad_enabled(), out.detach().clone()))
        return out


@pytest.mark.parametrize("params", [{}, {"loss": SymmetricInfoNCE(learn_temperature=True)},
                                    {"memory": SogCLRMemory(gamma=0.7), "loss": "dcl"},
                                    {"memory": CrossBatchMemory(size=96), "loss": "nt_xent"}],
                         ids=["mlp", "learned temperature", "sogclr", "xbm"])
def test_cached_update_equals_the_plain_update(pairs, params):
    X, _ = pairs
    plain = fit(X, **params)
    cached = fit(X, micro_batch_size=5, **params)
    assert_same_weights(plain, cached, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cached.history_[:, "train_loss"],
                               plain.history_[:, "train_loss"], rtol=1e-5)
    assert cached.temperature_ == pytest.approx(plain.temperature_, rel=1e-5)
    if "memory" in params:
        for name, value in plain.net_.memory_state.state_dict().items():
            if isinstance(value, torch.Tensor):
                torch.testing.assert_close(cached.net_.memory_state.state_dict()[name], value,
                                           rtol=1e-5, atol=1e-6)


def test_cached_update_for_supcon_and_two_modalities(pairs):
    X, y = pairs
    assert_same_weights(fit(X[:, 0], y, SupConEmbedder),
                        fit(X[:, 0], y, SupConEmbedder, micro_batch_size=7),
                        rtol=1e-5, atol=1e-6)
    modalities = {"a": X[:, 0], "b": X[:, 1, :3]}
    assert_same_weights(fit(modalities), fit(modalities, micro_batch_size=4),
                        rtol=1e-5, atol=1e-6)


def test_cached_update_for_a_cnn_on_augmented_images_and_a_dataset_with_workers():
    """The augmentation is drawn once per batch (on the whole batch) and the update is
    the plain one, from arrays and from a Dataset loaded by two workers."""
    images, _ = load_digit_images()
    images = images[:120]
    settings = {"module": small_cnn, "augmentation": GaussianNoise(0.1), "max_epochs": 1}
    plain = fit(images, **settings)
    assert_same_weights(plain, fit(images, micro_batch_size=6, **settings),
                        rtol=1e-5, atol=1e-6)
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(images))
    from_workers = fit(SingleViews(dataset), micro_batch_size=6, num_workers=2, **settings)
    assert_same_weights(plain, from_workers, rtol=1e-5, atol=1e-6)


def test_cached_update_in_float16_scales_once(pairs, monkeypatch):
    """The grad scaler scales the loss once; with the same scale (no overflow: a small
    initial scale) the float16 update is the plain one up to float16 rounding."""
    monkeypatch.setattr(torch.amp, "GradScaler",
                        functools.partial(torch.amp.GradScaler, init_scale=16.0))
    X, _ = pairs
    settings = {"precision": "float16", "optimizer": "sgd", "lr": 0.1}
    plain, cached = fit(X, **settings), fit(X, micro_batch_size=6, **settings)
    assert cached.net_.grad_scaler_.get_scale() == plain.net_.grad_scaler_.get_scale() == 16.0
    assert_same_weights(plain, cached, rtol=0, atol=5e-3)


def test_dropout_sees_the_same_random_numbers_in_both_passes(pairs):
    X, _ = pairs
    recorder = RecordingDropout()
    module = nn.Sequential(nn.Linear(6, 16), recorder, nn.Linear(16, 4))
    est = fit(X, module=module, max_epochs=1, micro_batch_size=4, batch_size=12)
    calls = est.net_.module_.encoders[0][1].calls
    steps = 96 // 12
    assert len(calls) == steps * 2 * 3  # per step: 3 micro-batches, twice
    for step in range(steps):
        block = calls[6 * step: 6 * step + 6]
        assert [grad for grad, _ in block] == [False] * 3 + [True] * 3
        for (_, first), (_, second) in zip(block[:3], block[3:], strict=True):
            torch.testing.assert_close(first, second, rtol=0, atol=0)
            assert (first == 0).any()  # the masks are not trivially empty


def test_batch_norm_is_warned_about_and_its_statistics_updated_once(pairs):
    X, _ = pairs
    module = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.Linear(16, 4))
    with pytest.warns(UserWarning, match="batch-normalisation layers: with micro_batch_size"):
        est = fit(X, module=module, max_epochs=1, micro_batch_size=8)
    norm = est.net_.module_.encoders[0][1]
    # one update per micro-batch of the pass with gradients, none from the no-grad pass
    assert int(norm.num_batches_tracked) == (96 // 32) * (32 // 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit(X, module=module, max_epochs=1)  # no caching, no warning


@pytest.mark.parametrize("value, message", [
    (0, "micro_batch_size must be >= 1"), (-3, "micro_batch_size must be >= 1"),
    (2.5, "micro_batch_size must be an integer"),
    (33, "micro_batch_size=33 is larger than the batch size 32")])
def test_bad_micro_batch_sizes(pairs, value, message):
    X, _ = pairs
    with pytest.raises(ValueError, match=message):
        fit(X, micro_batch_size=value, max_epochs=1)


def test_adaptive_selectors_embedding_pass_is_unaffected(pairs):

    X, _ = pairs
    settings = {"selector": OSGDSelector(16, k=3, q=2, loss=SymmetricInfoNCE(0.5)),
                "batch_size": None}
    assert_same_weights(fit(X, **settings), fit(X, micro_batch_size=4, **settings),
                        rtol=1e-5, atol=1e-6)


def test_full_batch_simclr_on_all_digit_images_with_micro_batches():
    """FullBatchSelector on a CNN over all 1,797 images, 64 at a time, tiled loss."""
    images, _ = load_digit_images()
    est = ContrastiveEmbedder(module=small_cnn, augmentation=GaussianNoise(0.1),
                              selector=FullBatchSelector(), micro_batch_size=64,
                              loss=NTXent(chunk_size=512), max_epochs=2,
                              lr=3e-3, n_components=8, random_state=0, device="cpu").fit(images)
    assert list(est.history_[:, "n_batches"]) == [1, 1]
    assert est.history_[-1, "batches", :, "train_batch_size"] == [len(images)]
    assert np.isfinite(est.history_[:, "train_loss"]).all()
    assert est.history_[-1, "train_loss"] < est.history_[0, "train_loss"]


class ShiftNoise:
    """An ``f(x)`` augmentation (no generator argument), drawing from torch's global RNG."""

    def __call__(self, x):
        return x + 0.05 * torch.randn_like(x)


@pytest.mark.parametrize("augmentation", [GaussianNoise(0.05), ShiftNoise()],
                         ids=["f(x, generator)", "f(x)"])
def test_single_images_with_an_augmentation_are_reproducible(digit_images, augmentation):
    images, _, _ = digit_images
    params = {"module": tiny_cnn(), "augmentation": augmentation, **SMALL_IMAGES}
    a = ContrastiveEmbedder(**params).fit(images)
    b = ContrastiveEmbedder(**params).fit(images)
    np.testing.assert_array_equal(a.transform(images), b.transform(images))
    assert a.history_[:, "train_loss"] == b.history_[:, "train_loss"]
    U, V = a.transform_pairs(images)
    assert U.shape == V.shape == (96, 4) and not np.allclose(U, V)
    c = ContrastiveEmbedder(**{**params, "random_state": 1}).fit(images)
    assert a.history_[-1, "train_loss"] != c.history_[-1, "train_loss"]


def test_augmentation_runs_on_whole_batches_on_the_training_device(digit_images):
    images, _, _ = digit_images
    calls = []

    def record(x, generator):
        calls.append((x.device.type, tuple(x.shape), generator.device.type))
        return x

    ContrastiveEmbedder(module=tiny_cnn(), augmentation=record, **SMALL_IMAGES).fit(images)
    assert calls and all(c[0] == "cpu" and c[2] == "cpu" for c in calls)
    assert {c[1] for c in calls} == {(16, 1, 8, 8)}  # whole batches, 2 views per batch
    assert len(calls) == 2 * 2 * 6  # 2 epochs x 6 batches x 2 views


@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_mixed_precision_on_the_cpu(digit_images, precision):
    images, _, _ = digit_images
    X = image_pairs(images)
    torch.manual_seed(0)
    cnn = tiny_cnn()
    est = ContrastiveEmbedder(module=cnn, precision=precision, loss=SymmetricInfoNCE(0.01),
                              **SMALL_IMAGES).fit(X)
    assert np.isfinite(est.history_[:, "train_loss"]).all()
    assert np.isfinite(est.history_[:, "train_entropy"]).all()
    out = est.transform(X)
    assert out.dtype == np.float32
    reference = ContrastiveEmbedder(module=cnn, loss=SymmetricInfoNCE(0.01), **SMALL_IMAGES).fit(X)
    # same start, same batches: the first batch's loss (before any update) differs by the
    # rounding of the low-precision forward only; then training makes progress (the
    # float16 gradient scaler starts at 2**16 and skips the first, overflowing steps, so
    # its course lags behind)
    first = [e.history_[0, "batches", 0, "train_loss"] for e in (est, reference)]
    assert first[0] == pytest.approx(first[1], rel=0.02)
    assert est.history_[-1, "train_loss"] < est.history_[0, "train_loss"]
    assert (est.net_.grad_scaler_ is not None) == (precision == "float16")


def test_the_loss_is_computed_in_float32_under_autocast(digit_images):
    images, _, _ = digit_images
    dtypes = []

    def loss(u, v, temperature):
        dtypes.append((u.dtype, v.dtype))
        return ((u - v) ** 2).sum(1).mean() / temperature

    ContrastiveEmbedder(module=tiny_cnn(), loss=loss, precision="bfloat16",
                        **SMALL_IMAGES).fit(image_pairs(images))
    assert set(dtypes) == {(torch.float32, torch.float32)}
