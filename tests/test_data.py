"""What X is (skcontrast/_estimators/_data.py): integer pairs stay integers, and images
are scaled and normalised whatever their shape."""


import numpy as np
import pytest
import torch
from _helpers import (
    SMALL_IMAGES,
    Bag,
    PairDataset,
    RecordingSelector,
    image_pairs,
    small_mlp,
    tiny_cnn,
)
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from skorch.helper import SliceDataset, SliceDict
from torch import nn
from torch.utils.data import Dataset, IterableDataset

from skcontrast import ContrastiveEmbedder, SupConEmbedder
from skcontrast.datasets import (
    GaussianNoise,
    load_digit_images,
)
from skcontrast.selectors import BindingSelector, OSGDSelector, ShuffledBatchSelector

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


SMALL_FLOW = small_mlp(max_epochs=3)


def tiny_mlp(n_in, n_out):
    """The estimators' default MLP of SMALL_FLOW's widths, on flattened images."""
    return nn.Sequential(nn.Flatten(), nn.Linear(n_in, 16), nn.ReLU(), nn.Linear(16, n_out))


@pytest.fixture(scope="module")
def digits():
    images, y = load_digit_images()
    return images[:160], y[:160]


class Folder(torch.utils.data.Dataset):
    """torchvision ImageFolder-like items: (image or two crops, label)."""

    def __init__(self, images, y, crops):
        self.images, self.y, self.crops = images, y, crops

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        x = torch.from_numpy(self.images[i])
        return ((x, x.flip(-1)) if self.crops else x), int(self.y[i])


def test_labelled_items_one_tensor_items_and_arrays_after_a_dataset(digits):
    images, y = digits
    for crops in (False, True):
        est = SupConEmbedder(**SMALL_FLOW).fit(Folder(images, y, crops))  # labels from the items
        np.testing.assert_array_equal(est.classes_, np.unique(y))
        assert est.transform(images).shape == (160, 4)
    single = torch.utils.data.TensorDataset(torch.from_numpy(images))
    est = ContrastiveEmbedder(augmentation=GaussianNoise(0.1), **SMALL_FLOW).fit(single)
    np.testing.assert_allclose(est.transform(single), est.transform(images), atol=1e-6)


def test_uint8_images_become_floats_on_the_device(digits):
    images, _ = digits
    raw = np.round(images * 255).astype(np.uint8)
    mean, std = 0.3, 0.4
    # the MLP on flattened pixels, whose training amplifies no rounding (the default
    # image encoder's PCA prior of bytes and of floats differs in the last bits)
    flat = {**SMALL_FLOW, "module": tiny_mlp}
    by_bytes = ContrastiveEmbedder(augmentation=GaussianNoise(0.1),
                                   image_normalization=(mean, std), **flat).fit(raw)
    assert by_bytes.input_spec_.views[0].integer is False  # images, not token ids
    by_floats = ContrastiveEmbedder(augmentation=GaussianNoise(0.1), **flat).fit(
        (raw / np.float32(255) - mean) / std)
    np.testing.assert_allclose(by_bytes.transform(raw),
                               by_floats.transform((raw / np.float32(255) - mean) / std),
                               atol=1e-5)
    with pytest.raises(ValueError, match="image_normalization must be"):
        ContrastiveEmbedder(augmentation=GaussianNoise(0.1), image_normalization=(0.5,),
                            **SMALL_FLOW).fit(raw)


def test_memory_mapped_arrays_are_not_copied(digits, tmp_path):
    from skcontrast._estimators._forms import read_fit_input

    images, _ = digits
    path = tmp_path / "pairs.npy"
    np.save(path, np.stack([images, images], 1).astype(np.float64))
    mapped = np.load(path, mmap_mode="r")
    data, _, _ = read_fit_input(ContrastiveEmbedder(), mapped, single=False)
    assert data.views[0].dtype == torch.float64  # cast batch by batch on the device
    assert np.shares_memory(data.views[0].numpy(), mapped)
    bad = np.lib.format.open_memmap(tmp_path / "bad.npy", mode="w+", dtype=np.float32,
                                    shape=(40, 2, 1, 3))
    bad[:] = 1
    bad[33, 1, 0, 2] = np.nan
    with pytest.raises(ValueError, match="contains 1 NaN"):
        ContrastiveEmbedder(**SMALL_FLOW).fit(np.lib.format.open_memmap(tmp_path / "bad.npy"))


class BadItems(Dataset):
    def __init__(self, bad_index, kind):
        self.bad_index, self.kind = bad_index, kind

    def __len__(self):
        return 32

    def __getitem__(self, i):
        x = torch.zeros(1, 8, 8)
        if i == self.bad_index:
            if self.kind == "shape":
                x = torch.zeros(1, 8, 9)
            elif self.kind == "nan":
                x = x.clone()
                x[0, 0, 0] = float("nan")
            else:
                return x
        return x, x


def test_tensor_input_gives_the_same_model_as_the_array(digit_images):
    images, _, _ = digit_images
    X = image_pairs(images)
    cnn = tiny_cnn()
    a = ContrastiveEmbedder(module=cnn, **SMALL_IMAGES).fit(X)
    b = ContrastiveEmbedder(module=cnn, **SMALL_IMAGES).fit(torch.from_numpy(X))
    np.testing.assert_array_equal(a.transform(X), b.transform(torch.from_numpy(X)))


def test_two_modalities_as_a_dict(digit_images):
    images, _, tokens = digit_images
    X = {"image": images.astype(np.float32), "text": tokens}
    module = {"image": tiny_cnn(), "text": Bag()}
    est = ContrastiveEmbedder(module=module, **SMALL_IMAGES).fit(X)
    assert [v.name for v in est.input_spec_.views] == ["image", "text"]
    assert est.input_spec_.views[1].integer
    U = est.transform(X)
    np.testing.assert_allclose(U, est.transform({"image": X["image"]}))
    np.testing.assert_allclose(U, est.transform_view(X["image"], view="image"))
    captions = est.transform_view(tokens, view="text")
    np.testing.assert_allclose(captions, est.transform_view(torch.from_numpy(tokens), view=1))
    np.testing.assert_allclose(est.transform_pairs(X)[1], captions, atol=1e-6)
    with pytest.raises(ValueError, match=r"view must be 0 or 1 or 'image' or 'text'"):
        est.transform_view(tokens, view="caption")
    with pytest.raises(ValueError, match=r"holds floats, but view 'text' \(integer"):
        est.transform_view(tokens.astype(np.float32), view="text")
    with pytest.raises(ValueError, match=r"X must have the keys seen in fit"):
        est.transform({"img": X["image"]})
    with pytest.raises(ValueError, match=r"X lacks the view 'image'"):
        est.transform({"text": tokens})


def test_dict_errors(digit_images):
    images, _, tokens = digit_images
    X = {"image": images.astype(np.float32), "text": tokens}
    with pytest.raises(ValueError, match=r"view 'text' \(integer, shape \(6,\)\) holds "
                                         r"integers \(e.g. token ids\).*pass an encoder"):
        ContrastiveEmbedder(**SMALL_IMAGES).fit(X)
    with pytest.raises(ValueError, match=r"module as a dict must have one encoder per view, "
                                         r"keyed \['image', 'text'\]; got keys \['image'\]"):
        ContrastiveEmbedder(module={"image": tiny_cnn()}, **SMALL_IMAGES).fit(X)
    with pytest.raises(ValueError, match="equally many items"):
        ContrastiveEmbedder(module={"image": tiny_cnn(), "text": Bag()}, **SMALL_IMAGES).fit(
            {"image": X["image"], "text": tokens[:50]})
    with pytest.raises(ValueError, match=r"must hold two views.*got 1 key"):
        ContrastiveEmbedder(**SMALL_IMAGES).fit({"image": X["image"]})
    with pytest.raises(ValueError, match=r"X\['extra'\] \(a hard-negative column: items like "
                                         r"X\['text'\]\) has items of shape"):
        ContrastiveEmbedder(module={"image": tiny_cnn(), "text": Bag()}, **SMALL_IMAGES).fit(
            {**X, "extra": X["image"]})
    bad = X["image"].copy()
    bad[3, 0, 2, 2] = np.nan
    with pytest.raises(ValueError, match=r"X\['image'\] contains 1 NaN or infinite"):
        ContrastiveEmbedder(module={"image": tiny_cnn(), "text": Bag()}, **SMALL_IMAGES).fit(
            {"image": bad, "text": tokens})


def test_integer_nd_pairs_need_a_module_and_stay_integers():
    tokens = np.random.default_rng(0).integers(0, 20, size=(40, 2, 5, 3))
    with pytest.raises(ValueError, match="holds integers"):
        ContrastiveEmbedder(**SMALL_IMAGES).fit(tokens)

    class SeqBag(Bag):
        def forward(self, tokens):
            assert tokens.dtype == torch.int64
            return self.bag(tokens.flatten(1))

    est = ContrastiveEmbedder(module=SeqBag(), **SMALL_IMAGES).fit(tokens)
    assert est.transform(tokens).shape == (40, 4)


def test_supcon_on_images_with_and_without_augmentation(digit_images):
    images, y, _ = digit_images
    est = SupConEmbedder(module=tiny_cnn(), **SMALL_IMAGES).fit(images, y)
    assert est.transform(images).shape == (96, 4)
    assert 0 <= est.score(images, y) <= 1
    aug = SupConEmbedder(module=tiny_cnn(), augmentation=GaussianNoise(0.05), **SMALL_IMAGES)
    aug.fit(images, y)
    assert np.isfinite(aug.history_[-1, "train_loss"])


def test_supcon_with_a_single_class_is_an_error():
    X = np.random.default_rng(0).normal(size=(20, 4))
    with pytest.raises(ValueError, match=r"needs at least 2 classes in y; got 1 class \('a'\)"):
        SupConEmbedder(**SMALL_IMAGES).fit(X, ["a"] * 20)


def test_a_dataset_of_pairs_trains_like_the_array(digit_images):
    images, y, _ = digit_images
    X = image_pairs(torch.as_tensor(images).numpy())
    dataset = PairDataset(images)
    params = {"module": tiny_cnn(), **SMALL_IMAGES}
    a = ContrastiveEmbedder(**params).fit(X)
    b = ContrastiveEmbedder(**params).fit(dataset)
    np.testing.assert_allclose(a.transform(X), b.transform(dataset), atol=1e-6)
    selector = RecordingSelector(OSGDSelector(16, k=3, q=2))
    c = ContrastiveEmbedder(module=tiny_cnn(), selector=selector, n_components=4,
                            max_epochs=2, random_state=0, num_workers=2).fit(dataset, y)
    assert c.net_.selector.shapes_ == [(96, 2, 4), (96, 2, 4)]
    binding = ContrastiveEmbedder(module=tiny_cnn(), selector=BindingSelector(
        ShuffledBatchSelector(16)), **{**SMALL_IMAGES, "batch_size": None}).fit(dataset, y)
    assert np.isfinite(binding.history_[-1, "train_loss"])


def test_a_dataset_of_single_views_with_an_augmentation(digit_images):
    images, y, _ = digit_images
    single = PairDataset(images, views=1)
    est = ContrastiveEmbedder(module=tiny_cnn(), augmentation=GaussianNoise(0.05),
                              **SMALL_IMAGES).fit(single)
    assert est.transform(single).shape == (96, 4)
    sup = SupConEmbedder(module=tiny_cnn(), **SMALL_IMAGES).fit(single, y)
    two_crops = SupConEmbedder(module=tiny_cnn(), **SMALL_IMAGES).fit(PairDataset(images), y)
    assert sup.transform(single).shape == two_crops.transform(PairDataset(images)).shape


@pytest.mark.parametrize("kind,message", [
    ("shape", r"view 0 of X\[7\] has shape \(1, 8, 9\); every item must match the first "
              r"item's shape \(1, 8, 8\)"),
    ("nan", r"view 0 of X\[\[.*7.*\]\] contains 1 NaN"),
    ("single", r"X\[7\] must be a pair \(x0, x1\) of the two views of item 7"),
])
def test_bad_dataset_items_are_named(kind, message):
    with pytest.raises(ValueError, match=message):
        ContrastiveEmbedder(module=tiny_cnn(), max_epochs=1, batch_size=32,
                            random_state=0).fit(BadItems(7, kind))


def test_dataset_errors(digit_images):
    images, _, _ = digit_images

    class Labelled(PairDataset):
        def __getitem__(self, i):
            return self.images[i], 3

    # (x, label) items: the label is set aside (ContrastiveEmbedder does not use it), so
    # the item is a single view, which pairs training refuses and SimCLR takes
    with pytest.raises(ValueError, match=r"X\[0\] must be a pair \(x0, x1\)"):
        ContrastiveEmbedder(**SMALL_IMAGES).fit(Labelled(images))
    simclr = ContrastiveEmbedder(augmentation=GaussianNoise(0.1), **SMALL_IMAGES)
    simclr.fit(Labelled(images))
    assert simclr.input_spec_.item_labels and simclr.transform(images).shape == (96, 4)

    class Stream(IterableDataset):
        def __iter__(self):
            return iter([])

    with pytest.raises(ValueError, match="X is a stream that gave no row"):
        ContrastiveEmbedder(**SMALL_IMAGES).fit(Stream())
    est = ContrastiveEmbedder(module=tiny_cnn(), **SMALL_IMAGES).fit(PairDataset(images))
    # after a Dataset, arrays of its items are accepted too (pairs, or single views)
    np.testing.assert_allclose(est.transform(image_pairs(images)),
                               est.transform(PairDataset(images)), atol=1e-6)
    np.testing.assert_allclose(est.transform(images), est.transform(PairDataset(images)),
                               atol=1e-6)
    with pytest.raises(ValueError, match=r"items of shape \(8, 8\)"):
        est.transform(images[:, 0])
    with pytest.raises(ValueError, match=r"fitted on a Dataset; got a dict"):
        est.transform({"a": images})
    with pytest.raises(ValueError, match="y has 5 labels but X has 96 samples"):
        ContrastiveEmbedder(**SMALL_IMAGES).fit(PairDataset(images), np.zeros(5))


def test_grid_search_on_image_pairs_dicts_and_datasets(digit_images):
    images, _, tokens = digit_images
    est = ContrastiveEmbedder(module=tiny_cnn(), n_components=4, max_epochs=1,
                              random_state=0)
    grid = {"batch_size": [8, 16]}
    search = GridSearchCV(est, grid, cv=2).fit(image_pairs(images))
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    two = SliceDict(image=images.astype(np.float32), text=tokens)
    est_dict = clone(est).set_params(module={"image": tiny_cnn(), "text": Bag()})
    search = GridSearchCV(est_dict, grid, cv=2).fit(two)
    assert search.best_estimator_.transform(two).shape == (96, 4)
    sliced = SliceDataset(PairDataset(images), idx=slice(None))
    search = GridSearchCV(est, grid, cv=2).fit(sliced)
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()


@pytest.mark.parametrize(("make", "where"), [
    (lambda X: X.reshape(len(X), -1), r"X\[3, 5\]"),
    (lambda X: X, r"X\[3, 1, 1\]"),
    (lambda X: X.reshape(len(X), 2, 2, 2), r"X\[3\] \(value 5 of the row\)"),
    (lambda X: {"a": X[:, 0], "b": X[:, 1]}, r"X\['b'\]\[3\] \(value 1 of the row\)"),
])
def test_a_value_beyond_float32_is_refused_naming_its_row(make, where):
    """A float64 1e39 passed the input check: transform returned NaN rows, and fit blamed
    the learning rate for a divergence."""
    X = np.random.default_rng(0).normal(size=(16, 2, 4))
    est = ContrastiveEmbedder(**SMALL).fit(make(X))
    X[3, 1, 1] = -1e39
    message = where + r" is -1e\+39, beyond the float32 range"
    with pytest.raises(ValueError, match=message):
        ContrastiveEmbedder(**SMALL).fit(make(X))
    with pytest.raises(ValueError, match=message):
        est.transform(make(X))


def test_a_value_beyond_float32_is_named_by_its_column_and_in_hard_negatives():
    pd = pytest.importorskip("pandas")
    X = np.random.default_rng(0).normal(size=(16, 4))
    X[2, 3] = 1e39
    with pytest.raises(ValueError, match=r"X\[2, 3\] \(column 'd'\) is 1e\+39, beyond"):
        ContrastiveEmbedder(**SMALL).fit(pd.DataFrame(X, columns=list("abcd")))
    triplets = np.random.default_rng(0).normal(size=(16, 3, 2))
    triplets[4, 2, 1] = 1e39
    with pytest.raises(ValueError, match=r"X\[4, 2, 1\] \(a hard-negative column\) is "
                                         r"1e\+39, beyond"):
        ContrastiveEmbedder(**SMALL).fit(triplets)


def test_the_rows_digest_sees_every_row():
    """It read 64 rows: with 130 rows, 5 replaced or 2 swapped went unseen, and a cached
    selection pass selected on the old rows' embeddings."""
    from hypothesis import given
    from hypothesis import strategies as st

    from skcontrast._estimators._data import TensorViews

    X = torch.randn(130, 2, 3)
    digest = TensorViews((X[:, 0], X[:, 1])).fingerprint()
    assert TensorViews((X[:, 0].clone(), X[:, 1].clone())).fingerprint() == digest

    @given(st.integers(0, 129), st.integers(0, 129), st.integers(0, 1))
    def changed(i, j, view):
        Y = X.clone()
        if i == j:
            Y[i, view, 0] += 1
        else:
            Y[[i, j]] = Y[[j, i]]
        assert TensorViews((Y[:, 0], Y[:, 1])).fingerprint() != digest

    changed()


def test_a_cached_selection_warm_start_on_other_rows_embeds_them_afresh():
    X = np.random.default_rng(0).normal(size=(130, 2, 4)).astype(np.float32)

    def warm_start_refreshes(Y):
        est = ContrastiveEmbedder(selector=OSGDSelector(batch_size=16, k=2, q=1,
                                                        random_state=0),
                                  selection_pass="cached", warm_start=True,
                                  **{**SMALL, "max_epochs": 1}).fit(X)
        est.fit(Y)
        return est.net_.sampler_.refreshes  # full embedding passes of the second fit

    assert warm_start_refreshes(X.copy()) == 0  # the same rows: the cache carries over
    swapped = X.copy()
    swapped[[1, 3]] = swapped[[3, 1]]
    assert warm_start_refreshes(swapped) == 1
