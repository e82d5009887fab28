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
    digit_augmentation,
    digit_cnn,
    load_digit_images,
    load_digit_views,
    make_paired_embeddings,
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


def test_digit_images_cnn_and_augmentation():
    images, y = load_digit_images()
    assert images.shape == (1797, 1, 8, 8) and images.dtype == np.float32
    np.testing.assert_allclose(images[:, 0], load_digit_views(return_images=True)[2])
    np.testing.assert_array_equal(y, load_digits().target)
    assert digit_cnn(n_out=7)(torch.from_numpy(images[:5])).shape == (5, 7)
    with pytest.raises(ValueError, match="n_in must be >= 64"):
        digit_cnn(32, 7)
    pytest.importorskip("kornia")
    augment = digit_augmentation()
    x = torch.from_numpy(images[:64])
    torch.manual_seed(0)
    a = augment(x)
    torch.manual_seed(0)
    assert torch.equal(a, augment(x)) and a.shape == x.shape
    assert not torch.equal(a, x)
    per_sample = (a - x).flatten(1).abs().sum(1)
    assert len(set(per_sample.round(decimals=4).tolist())) > 32  # per-sample parameters


def test_digit_augmentation_draws_what_kornias_container_of_its_transforms_draws():
    """The transforms run in a plain ``nn.Sequential`` (kornia's container took 1.6x
    as long a call for 64 images): under one seed, the very images of kornia's
    ``AugmentationSequential`` of the same three transforms, on batches of 1 and 64."""
    K = pytest.importorskip("kornia.augmentation")
    augment = digit_augmentation()
    container = K.AugmentationSequential(*augment.pipeline)
    images, _ = load_digit_images()
    for x in (torch.from_numpy(images[:1]), torch.from_numpy(images[:64])):
        for seed in range(3):
            torch.manual_seed(seed)
            expected = container(x)
            torch.manual_seed(seed)
            assert torch.equal(augment(x), expected)


def test_digit_augmentation_without_kornia_names_the_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_kornia(name, *args, **kwargs):
        if name.startswith("kornia"):
            raise ImportError("No module named 'kornia'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_kornia)
    with pytest.raises(ImportError, match=r"skcontrast\[vision\]"):
        digit_augmentation()


def test_augmentations_draw_on_the_generators_device():
    x = torch.ones(3, 4)
    generator = torch.Generator(device="cpu").manual_seed(0)
    for augmentation in (GaussianNoise(0.1), RandomFeatureMask(0.5), RandomShift((2, 2))):
        assert augmentation(x, generator).device == x.device
        assert augmentation(x).shape == x.shape  # no generator: torch's global one


@pytest.mark.parametrize("structure", ["clustered", "near_duplicate", "isotropic"])
def test_paired_embeddings_have_the_asked_structure(structure):
    X, y = make_paired_embeddings(400, 16, structure=structure, random_state=0)
    assert X.shape == (400, 2, 16) and X.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(X, axis=2), 1, rtol=1e-5)
    same = y[:, None] == y[None, :]
    cosine = X[:, 0] @ X[:, 0].T
    off = ~np.eye(400, dtype=bool)
    if structure == "isotropic":
        assert np.abs(cosine[off]).mean() < 0.25 and len(set(y.tolist())) == 400
    else:  # items of a group are far closer to each other than to the rest
        assert cosine[same & off].mean() > 0.5 > 0.3 > np.abs(cosine[~same]).mean()
    assert np.array_equal(X, make_paired_embeddings(400, 16, structure=structure,
                                                    random_state=0)[0])
    with pytest.raises(ValueError, match="structure"):
        make_paired_embeddings(10, structure="blobs")


def test_emoji_names_pair_languages_and_split_by_emoji():
    pytest.importorskip("emoji")
    from skcontrast.datasets import load_emoji_names

    data = load_emoji_names(["en", "de", "ja"], test_size=0.25, random_state=0)
    n = len(data.emoji)
    assert n > 3500 and set(data.names) == {"en", "de", "ja"}
    assert len(np.intersect1d(data.train_emoji, data.test_emoji)) == 0
    assert len(data.train_emoji) + len(data.test_emoji) == n
    assert len(data.test_emoji) == round(0.25 * n)
    # each emoji gives one pair per other language, its anchor the English name
    assert len(data.pairs_train) == 2 * len(data.train_emoji)
    assert set(data.groups_test) == set(data.test_emoji)
    for (anchor, other), group, lang in zip(data.pairs_test, data.groups_test,
                                             data.languages_test, strict=True):
        assert anchor == data.names["en"][group] and other == data.names[lang][group]
        assert ":" not in anchor and "_" not in other
    again = load_emoji_names(["en", "de", "ja"], test_size=0.25, random_state=0)
    np.testing.assert_array_equal(again.test_emoji, data.test_emoji)  # reproducible
    assert "thumbs up" in set(data.names["en"])
    with pytest.raises(ValueError, match="must hold the anchor"):
        load_emoji_names(["de", "ja"])
    with pytest.raises(ValueError, match="languages must be one of"):
        load_emoji_names(["en", "xx"])
    with pytest.raises(ValueError, match="test_size must be a share"):
        load_emoji_names(["en", "de"], test_size=1.5)


def _edit_distance(a, b):
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (x != y))
    return row[-1]


def test_typos_are_at_most_n_edits_away_and_reproducible():
    from skcontrast.datasets import add_typos

    texts = ["thumbs up", "red heart", "a", "", "flag: united kingdom"]
    typos = add_typos(texts, 2, random_state=3)
    assert typos.dtype == object and len(typos) == len(texts)
    assert all(_edit_distance(t, u) <= 2 for t, u in zip(texts, typos, strict=True))
    assert sum(t != u for t, u in zip(texts, typos, strict=True)) >= 3
    assert list(add_typos(texts, 2, random_state=3)) == list(typos)
    assert list(add_typos(texts, 0)) == texts
    with pytest.raises(ValueError, match="texts must be strings"):
        add_typos(["ok", 3])
