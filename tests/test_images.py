"""Tests of ``skcontrast.images``: single images in every common form train one model
with the default encoder and augmentation; the rule that tells single images from
pairs; ambiguous and wrong forms refused; saving, loading and export."""

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from sklearn.base import clone

from skcontrast import ContrastiveEmbedder, SupConEmbedder, load
from skcontrast.images import ImageAugmentation, ImageEncoder, image_layout

#: one epoch of the default image encoder, narrow (its first convolution of 4 channels)
QUICK = {"max_epochs": 1, "batch_size": 16, "random_state": 0, "n_components": 8,
         "module__width": 4}


def colour_images(n=40, side=8, seed=0):
    """Bytes ``(n, side, side, 3)`` (channels last, as PIL gives them) whose class is the
    dominant channel, and the classes."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    x = rng.uniform(0, 90, size=(n, side, side, 3))
    x[np.arange(n), :, :, y] += 150
    return x.astype(np.uint8), y


def forms(x_last):
    """The same colour images in each form a user may hold them."""
    from PIL import Image

    first = np.ascontiguousarray(np.moveaxis(x_last, 3, 1))
    return {
        "uint8 channels last": x_last,
        "uint8 channels first": first,
        "float channels first": first.astype(np.float32) / 255,
        "float tensor": torch.from_numpy(first).float() / 255,
        "uint8 tensor channels last": torch.from_numpy(x_last),
        "PIL images": [Image.fromarray(im) for im in x_last],
    }


def test_every_image_form_trains_the_same_model():
    x, _ = colour_images()
    embeddings = {}
    for name, X in forms(x).items():
        est = ContrastiveEmbedder(**QUICK).fit(X)
        assert est.input_spec_.form == "image", name
        assert est.input_spec_.views[0].shape == (3, 8, 8), name
        embeddings[name] = est.transform(X)
    reference = embeddings.pop("float channels first")
    for name, Z in embeddings.items():
        np.testing.assert_allclose(Z, reference, atol=2e-6, err_msg=name)


def test_a_fitted_model_reads_images_in_any_form():
    x, _ = colour_images()
    est = ContrastiveEmbedder(**QUICK).fit(x)
    reference = est.transform(x)
    for name, X in forms(x).items():
        np.testing.assert_allclose(est.transform(X), reference, atol=2e-6, err_msg=name)


def test_a_dataset_image_column_is_single_images():
    datasets = pytest.importorskip("datasets")
    from PIL import Image

    x, _ = colour_images()
    table = datasets.Dataset.from_dict({"image": [Image.fromarray(im) for im in x]})
    est = ContrastiveEmbedder(**QUICK).fit(table)
    assert est.input_spec_.form == "image"
    np.testing.assert_allclose(est.transform(table),
                               ContrastiveEmbedder(**QUICK).fit(x).transform(x), atol=2e-6)
    np.testing.assert_allclose(est.transform(table.with_format("numpy")), est.transform(x),
                               atol=2e-6)
    with pytest.raises(ValueError, match=r"fitted on images.*pass one image column"):
        est.transform(datasets.Dataset.from_dict({"image": table["image"],
                                                  "other": table["image"]}))


@pytest.mark.parametrize("shape, layout", [
    ((5, 1, 28, 28), "first"), ((5, 3, 32, 32), "first"), ((5, 1, 8, 8), "first"),
    ((5, 28, 28, 1), "last"), ((5, 32, 32, 3), "last"),
    ((5, 2, 28, 28), None),        # pairs of 28 x 28 views
    ((5, 2, 3, 32, 32), None),     # pairs of colour images
    ((5, 3, 4, 4), None),          # too small to be images: an array
    ((5, 28, 28), None),           # floats (n, H, W): not images (bytes are)
])
def test_the_rule_that_tells_single_images(shape, layout):
    assert image_layout(np.zeros(shape, dtype=np.float32)) == layout


def test_grey_bytes_without_a_channel_axis_are_images_and_rgba_is_refused():
    assert image_layout(np.zeros((5, 28, 28), dtype=np.uint8)) == "grey"
    for shape in ((5, 4, 16, 16), (5, 16, 16, 4)):
        with pytest.raises(ValueError, match=r"ambiguous: RGBA images.*X\[:, :3\]"):
            image_layout(np.zeros(shape, dtype=np.uint8))


@pytest.mark.parametrize("shape", [(1, 8, 8), (1, 28, 28), (3, 32, 32), (1, 40, 40)])
def test_grey_and_colour_images_of_each_size_fit_transform_and_supcon(shape):
    rng = np.random.default_rng(0)
    X = rng.random((32, *shape), dtype=np.float32)
    y = np.arange(32) % 4
    est = ContrastiveEmbedder(**QUICK).fit(X)
    assert est.transform(X).shape == (32, 8)
    U, V = est.transform_pairs(X)  # two default augmentations of each image
    assert U.shape == V.shape == (32, 8) and not np.allclose(U, V)
    supcon = SupConEmbedder(**QUICK).fit(X, y)
    assert supcon.net_.criterion_.structure == "crops"  # two augmented crops per image
    assert supcon.transform(X).shape == (32, 8)


def test_pairs_of_images_stay_pairs():
    X = np.random.default_rng(0).random((32, 2, 1, 8, 8), dtype=np.float32)
    est = ContrastiveEmbedder(max_epochs=1, batch_size=16, random_state=0).fit(X)
    assert est.input_spec_.form == "array" and est.input_spec_.paired


def test_wrong_image_input_after_fit_is_refused_saying_what_to_pass():
    x, _ = colour_images()
    est = ContrastiveEmbedder(**QUICK).fit(x)
    with pytest.raises(ValueError, match=r"X must be single images \(fitted on view 0 "
                                         r"\(images, shape \(3, 8, 8\)\)\)"):
        est.transform(np.zeros((4, 8), dtype=np.float32))
    with pytest.raises(ValueError, match=r"items of shape \(1, 8, 8\)"):
        est.transform(np.zeros((4, 1, 8, 8), dtype=np.float32))
    from PIL import Image

    mixed = [Image.new("RGB", (8, 8)), Image.new("RGB", (9, 9))]
    with pytest.raises(ValueError, match="PIL images of 2 sizes"):
        ContrastiveEmbedder(**QUICK).fit(mixed)


def test_a_saved_image_model_loads_with_its_default_augmentation(tmp_path):
    x, _ = colour_images()
    est = ContrastiveEmbedder(**QUICK).fit(x)
    path = est.save(tmp_path / "images")
    loaded = load(path)
    np.testing.assert_array_equal(loaded.transform(x), est.transform(x))
    np.testing.assert_array_equal(loaded.transform_pairs(x)[0], est.transform_pairs(x)[0])
    np.testing.assert_array_equal(clone(est).fit(x).transform(x), est.transform(x))


def darken(x, generator=None):
    """An augmentation of a user's own (a saved file cannot hold it)."""
    return x * 0.9


@pytest.mark.parametrize("augmentation", [ImageAugmentation(degrees=5, noise=0.02), darken],
                         ids=["ImageAugmentation", "own"])
def test_a_saved_explicit_augmentation_continues_or_is_asked_back(tmp_path, augmentation):
    """An explicit ``ImageAugmentation`` is saved with its settings, and load + 2 epochs
    is 4 epochs; an augmentation of the user's own is asked back before training goes
    on (it never trains silently with the default in its place)."""
    x, _ = colour_images()
    params = {**QUICK, "augmentation": augmentation}
    four = ContrastiveEmbedder(**{**params, "max_epochs": 4}).fit(x)
    folder = ContrastiveEmbedder(**{**params, "max_epochs": 2}).fit(x).save(tmp_path / "m")
    if augmentation is darken:
        with pytest.warns(UserWarning, match="refuses to train until it is passed back"):
            loaded = load(folder)
        with pytest.raises(ValueError, match=r"augmentation was test_images.darken when "
                                             r"the model was saved.*set_params\("
                                             r"augmentation=\.\.\.\)"):
            loaded.set_params(warm_start=True, max_epochs=2).fit(x)
        with pytest.raises(ValueError, match="augmentation was"):
            loaded.transform_pairs(x)
        loaded.set_params(augmentation=darken)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            loaded = load(folder)
        assert repr(loaded.augmentation) == repr(augmentation)
    loaded.set_params(warm_start=True, max_epochs=2).fit(x)
    np.testing.assert_allclose(loaded.transform(x), four.transform(x), atol=1e-6)


def test_module_options_reach_the_default_image_encoder_and_others_are_refused():
    x, _ = colour_images()
    est = ContrastiveEmbedder(**{**QUICK, "module__width": 8}).fit(x)
    assert est.net_.module_.encoders[0].width == 8
    with pytest.raises(ValueError, match=r"\['depth'\] are not options of the default image "
                                         r"encoder \(ImageEncoder\)"):
        ContrastiveEmbedder(module__depth=3, **QUICK).fit(x)


def test_the_pixel_prior_is_a_half_whitened_pca_of_the_training_pixels():
    """``fit_prior``: the prior projects the centred pixels on their leading principal
    directions, each scaled by (variance + 1e-3 * the largest) ** -1/4, as a float64
    eigendecomposition of the covariance does (up to each direction's sign)."""
    x = torch.rand(60, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    encoder = ImageEncoder((1, 8, 8), 16, prior_width=10).fit_prior([x])
    flat = x.flatten(1).double().numpy()
    centred = flat - flat.mean(axis=0)
    values, vectors = np.linalg.eigh(centred.T @ centred / len(flat))
    values, vectors = values[::-1][:10], vectors[:, ::-1][:, :10]
    expected = centred @ (vectors * (values + 1e-3 * values[0]) ** -0.25)
    with torch.no_grad():
        got = encoder.prior(x).double().numpy()
    signs = np.sign(np.sum(got * expected, axis=0))
    np.testing.assert_allclose(got * signs, expected, atol=1e-4)


def test_before_it_is_fitted_the_prior_keeps_pixel_distances():
    """Unfitted (a model built to be loaded), the prior is a random orthogonal
    projection: keeping every direction, it keeps every distance between images."""
    x = torch.rand(20, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    encoder = ImageEncoder((1, 8, 8), 100, prior_width=64)
    with torch.no_grad():
        projected = encoder.prior(x).double()
    np.testing.assert_allclose(torch.cdist(projected, projected).numpy(),
                               torch.cdist(x.flatten(1).double(), x.flatten(1).double())
                               .numpy(), atol=1e-5)


@given(st.integers(0, 2**31 - 1))
def test_an_augmentation_is_a_function_of_its_generator(seed):
    x = torch.rand(6, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    augment = ImageAugmentation.for_images((3, 16, 16))
    a = augment(x, torch.Generator().manual_seed(seed))
    b = augment(x, torch.Generator().manual_seed(seed))
    assert a.shape == x.shape and torch.equal(a, b) and torch.isfinite(a).all()


def test_grey_images_are_never_flipped_colour_ones_may_be():
    assert ImageAugmentation.for_images((1, 28, 28)).flip == 0
    assert ImageAugmentation.for_images((3, 32, 32)).flip == 0.5
    with pytest.raises(ValueError, match="padding must be"):
        ImageAugmentation(padding="wrap")
    with pytest.raises(ValueError, match="crop_scale must be"):
        ImageAugmentation(crop_scale=(0, 1))
    with pytest.raises(ValueError, match=r"takes images \(n, C, H, W\)"):
        ImageAugmentation()(torch.zeros(4, 64))


def _pca_prior(seen, width):
    """The half-whitened PCA prior of the images ``seen`` (what the encoder receives), in
    float64: each leading direction scaled by (variance + 1e-3 * the largest) ** -1/4."""
    flat = seen.flatten(1).double().numpy()
    centred = flat - flat.mean(axis=0)
    values, vectors = np.linalg.eigh(centred.T @ centred / len(flat))
    values, vectors = values[::-1][:width], vectors[:, ::-1][:, :width]
    return centred @ (vectors * (values + 1e-3 * values[0]) ** -0.25)


@pytest.mark.parametrize("normalization", [(0.5, 0.25), ((0.2, 0.5, 0.7), (0.3, 0.2, 0.1))])
def test_the_prior_is_the_pca_of_the_normalised_pixels_the_encoder_receives(normalization):
    """With ``image_normalization``, the prior is fitted on the normalised pixels, which
    the encoder receives, not on the raw ones: its Gram matrix is the float64 PCA's."""
    x, _ = colour_images(60, side=8)
    est = ContrastiveEmbedder(image_normalization=normalization, **QUICK).fit(x)
    encoder = est.net_.module_.encoders[0]
    mean, std = (torch.as_tensor(v, dtype=torch.float32).reshape(1, -1, 1, 1)
                 for v in normalization)
    seen = (torch.from_numpy(np.moveaxis(x, 3, 1)).float() / 255 - mean) / std
    expected = _pca_prior(seen, encoder.prior_width)
    with torch.no_grad():
        got = encoder.prior(seen).double().numpy()
    np.testing.assert_allclose(got @ got.T, expected @ expected.T, atol=1e-3)


@pytest.mark.parametrize("value", [0, 255, 128])
def test_constant_images_train_with_a_prior_of_the_directions_that_exist(value):
    """Blank scans and padding frames: a set with no variance trains (an all-zero prior,
    finite embeddings); a set that varies in one pixel only keeps that direction."""
    x = np.full((32, 1, 8, 8), value, dtype=np.uint8)
    est = ContrastiveEmbedder(**QUICK).fit(x)
    encoder = est.net_.module_.encoders[0]
    assert np.isfinite(est.transform(x)).all()
    assert not encoder.projection.any()
    x[::2, 0, 3, 4] = 255 - value
    encoder = ContrastiveEmbedder(**QUICK).fit(x).net_.module_.encoders[0]
    assert int((encoder.projection.abs().sum(0) > 0).sum()) == 1
    assert np.isfinite(encoder.projection.numpy()).all()


def test_16_bit_images_are_read_by_their_range_and_other_integers_refused():
    """``uint16`` images (microscopy, medical) are pixels of 0-65535, the same model as
    their floats in [0, 1], channels first or as grey ``(n, H, W)``; ``int64``,
    ``int32`` and ``int16`` images are refused naming the conversion."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2**16, size=(32, 1, 8, 8)).astype(np.uint16)
    est = ContrastiveEmbedder(**QUICK).fit(x)
    floats = ContrastiveEmbedder(**QUICK).fit(x.astype(np.float32) / 65535)
    np.testing.assert_allclose(est.transform(x), floats.transform(x), atol=2e-6)
    grey = ContrastiveEmbedder(**QUICK).fit(x[:, 0])
    np.testing.assert_allclose(grey.transform(x[:, 0]), est.transform(x), atol=2e-6)
    for dtype in (np.int64, np.int32, np.int16):
        with pytest.raises(ValueError, match=rf"images of {np.dtype(dtype).name} pixels.*"
                                             r"X\.astype\(np\.uint8\)"):
            ContrastiveEmbedder(**QUICK).fit(x.astype(dtype))


@pytest.mark.parametrize("form", ["float channels first", "float tensor"])
def test_float_images_beyond_0_1_are_warned_of_naming_the_range(form):
    """``np.asarray(pil).astype(float)`` gives 0-255 floats, read as intensities in
    [0, 1]: fit and transform warn, naming the range and the fix; [0, 1] floats and
    standardised ones (with negative values) pass."""
    x, _ = colour_images()
    images = forms(x)[form]
    with pytest.warns(UserWarning, match=r"values from [\d.]+ to 2\d\d(\.\d+)?, but float "
                                         r"images are read as intensities in \[0, 1\].*"
                                         r"Divide 0-255 values by 255"):
        est = ContrastiveEmbedder(**QUICK).fit(images * 255)
    with pytest.warns(UserWarning, match="intensities in"):
        est.transform(images * 255)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = ContrastiveEmbedder(**QUICK).fit(images)
        est.transform((images - 0.5) / 0.25)


def test_the_prior_of_large_images_reads_them_pooled_so_its_size_is_bounded(tmp_path):
    """Photographs: the prior reads images averaged down to 32 pixels a side, so a saved
    model of 512 x 512 colour images is as small as one of 32 x 32 ones, and its prior
    is the PCA of the area averages."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(6, 3, 64, 64), dtype=np.uint8)
    est = ContrastiveEmbedder(**{**QUICK, "batch_size": 3}).fit(x)
    encoder = est.net_.module_.encoders[0]
    assert encoder.projection.shape == (3 * 32 * 32, encoder.prior_width)
    seen = torch.nn.functional.avg_pool2d(torch.from_numpy(x).float() / 255, 2)
    expected = _pca_prior(seen, encoder.prior_width)
    with torch.no_grad():
        got = encoder.prior(torch.from_numpy(x)).double().numpy()
    np.testing.assert_allclose(got @ got.T, expected @ expected.T, atol=1e-3)
    big = rng.integers(0, 256, size=(2, 3, 512, 512), dtype=np.uint8)
    model = ContrastiveEmbedder(**{**QUICK, "batch_size": 2}).fit(big)
    assert model.net_.module_.encoders[0].projection.numel() == encoder.projection.numel()
    small = est.save(tmp_path / "small") / "model.safetensors"
    large = model.save(tmp_path / "large") / "model.safetensors"
    assert large.stat().st_size < 1.2 * small.stat().st_size


def test_an_image_column_is_read_by_its_name_after_fit():
    """Round 7's rule for tables holds for image columns: a renamed column is refused
    naming it; a model fitted on an array reads an image table by position, warning."""
    datasets = pytest.importorskip("datasets")
    pd = pytest.importorskip("pandas")
    from PIL import Image

    x, _ = colour_images()
    pil = [Image.fromarray(im) for im in x]
    table = datasets.Dataset.from_dict({"image": pil})
    est = ContrastiveEmbedder(**QUICK).fit(table)
    assert est.input_spec_.views[0].name == "image"
    expected = est.transform(x)
    np.testing.assert_allclose(est.transform(pd.DataFrame({"image": pil})), expected,
                               atol=2e-6)
    for renamed in (datasets.Dataset.from_dict({"photo": pil}),
                    pd.DataFrame({"photo": pil})):
        with pytest.raises(ValueError, match=r"columns not seen in fit \['photo'\] and "
                                             r"missing \['image'\]"):
            est.transform(renamed)
    by_position = ContrastiveEmbedder(**QUICK).fit(x)
    with pytest.warns(UserWarning, match="fitted without column names"):
        np.testing.assert_allclose(by_position.transform(table), expected, atol=2e-6)


def test_grey_and_colour_pil_images_mixed_read_alike_in_a_list_and_a_dataset_column():
    """One rule for PIL images wherever they come from: grey (``'L'``) images among
    colour ones are converted to RGB, in a list and in a ``datasets`` image column."""
    datasets = pytest.importorskip("datasets")
    from PIL import Image

    x, _ = colour_images()
    pil = [Image.fromarray(im).convert("L") if i % 3 == 0 else Image.fromarray(im)
           for i, im in enumerate(x)]
    from_list = ContrastiveEmbedder(**QUICK).fit(pil)
    from_column = ContrastiveEmbedder(**QUICK).fit(datasets.Dataset.from_dict({"image": pil}))
    assert from_column.input_spec_.views[0].shape == (3, 8, 8)
    np.testing.assert_allclose(from_column.transform(pil), from_list.transform(pil),
                               atol=2e-6)
    sizes = [*pil[:-1], pil[-1].resize((9, 9))]
    for X in (sizes, datasets.Dataset.from_dict({"image": sizes})):
        with pytest.raises(ValueError, match=r"PIL images of 2 sizes.*resize them"):
            ContrastiveEmbedder(**QUICK).fit(X)
