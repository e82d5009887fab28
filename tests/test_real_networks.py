"""Real networks and real data: images, two modalities, Datasets, mixed precision, devices."""

import io
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from conftest import RecordingSelector, requires_cuda
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from skorch.helper import SliceDataset, SliceDict
from torch import nn
from torch.utils.data import Dataset, IterableDataset

from skcontrast import ContrastiveEmbedder, SupConEmbedder
from skcontrast.datasets import GaussianNoise, load_digit_views
from skcontrast.losses import SymmetricInfoNCE
from skcontrast.selectors import BindingSelector, OSGDSelector, ShuffledBatchSelector

SMALL = {"n_components": 4, "max_epochs": 2, "batch_size": 16, "random_state": 0}


def tiny_cnn(n_out=4):
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
                         nn.Flatten(), nn.Linear(16, n_out))


class Bag(nn.Module):
    """Text encoder for token ids: a bag of embeddings."""

    def __init__(self, vocab=20, n_out=4):
        super().__init__()
        self.bag = nn.EmbeddingBag(vocab, n_out)

    def forward(self, tokens):
        return self.bag(tokens)


@pytest.fixture(scope="module")
def digits():
    """96 digit images (n, 1, 8, 8), their labels, and caption-like token ids (n, 6)."""
    _, y, images = load_digit_views(return_images=True)
    images, y = images[:96, None], y[:96]
    rng = np.random.default_rng(0)
    tokens = np.concatenate([y[:, None] + 10, rng.integers(0, 10, size=(96, 5))], axis=1)
    return images, y, tokens.astype(np.int64)


def image_pairs(images, shift=1):
    """Two views of each image: the image and a shifted copy, (n, 2, 1, 8, 8)."""
    return np.stack([images, np.roll(images, shift, axis=-1)], axis=1)


class ShiftNoise:
    """An ``f(x)`` augmentation (no generator argument), drawing from torch's global RNG."""

    def __call__(self, x):
        return x + 0.05 * torch.randn_like(x)


class PairDataset(Dataset):
    """PyTorch's "two crops" pattern: item i is (x0, x1)."""

    def __init__(self, images, views=2):
        self.images = torch.as_tensor(images)
        self.views = views

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        x = self.images[i]
        return (x, x.roll(1, dims=-1)) if self.views == 2 else x


# --------------------------------------------------------------------------------------
# Input forms
# --------------------------------------------------------------------------------------

def test_image_pairs_reach_a_cnn_whole(digits):
    images, _, _ = digits
    X = image_pairs(images)
    seen = []

    class Spy(nn.Module):
        def __init__(self):
            super().__init__()
            self.cnn = tiny_cnn()

        def forward(self, x):
            seen.append(tuple(x.shape[1:]))
            return self.cnn(x)

    est = ContrastiveEmbedder(module=Spy(), **SMALL).fit(X)
    assert set(seen) == {(1, 8, 8)}
    assert est.transform(X).shape == (96, 4)
    U, V = est.transform_pairs(X)
    np.testing.assert_allclose(est.transform_view(X[:, 1], view=1), V, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(U, axis=1), 1, rtol=1e-5)
    assert not hasattr(est, "n_features_in_") and est.view_split_ is None
    assert 0 <= est.score(X) <= 1
    with pytest.raises(ValueError, match=r"items of shape \(1, 8, 9\), but the estimator was "
                                         r"fitted on view 0 \(float, shape \(1, 8, 8\)\)"):
        est.transform(np.zeros((4, 2, 1, 8, 9), dtype=np.float32))
    with pytest.raises(ValueError, match=r"X_view for view 1 must have shape \(n, 1, 8, 8\)"):
        est.transform_view(X[:, 1, 0], view=1)


def test_default_module_flattens_nd_float_views(digits):
    images, _, _ = digits
    est = ContrastiveEmbedder(hidden_layer_sizes=(8,), **SMALL).fit(image_pairs(images))
    encoder = est.net_.module_.encoders[0]
    assert isinstance(encoder[0], nn.Flatten) and encoder[1][0].in_features == 64


def test_tensor_input_gives_the_same_model_as_the_array(digits):
    images, _, _ = digits
    X = image_pairs(images)
    cnn = tiny_cnn()
    a = ContrastiveEmbedder(module=cnn, **SMALL).fit(X)
    b = ContrastiveEmbedder(module=cnn, **SMALL).fit(torch.from_numpy(X))
    np.testing.assert_array_equal(a.transform(X), b.transform(torch.from_numpy(X)))


@pytest.mark.parametrize("augmentation", [GaussianNoise(0.05), ShiftNoise()],
                         ids=["f(x, generator)", "f(x)"])
def test_single_images_with_an_augmentation_are_reproducible(digits, augmentation):
    images, _, _ = digits
    params = {"module": tiny_cnn(), "augmentation": augmentation, **SMALL}
    a = ContrastiveEmbedder(**params).fit(images)
    b = ContrastiveEmbedder(**params).fit(images)
    np.testing.assert_array_equal(a.transform(images), b.transform(images))
    assert a.history_[:, "train_loss"] == b.history_[:, "train_loss"]
    U, V = a.transform_pairs(images)
    assert U.shape == V.shape == (96, 4) and not np.allclose(U, V)
    c = ContrastiveEmbedder(**{**params, "random_state": 1}).fit(images)
    assert a.history_[-1, "train_loss"] != c.history_[-1, "train_loss"]


def test_augmentation_runs_on_whole_batches_on_the_training_device(digits):
    images, _, _ = digits
    calls = []

    def record(x, generator):
        calls.append((x.device.type, tuple(x.shape), generator.device.type))
        return x

    ContrastiveEmbedder(module=tiny_cnn(), augmentation=record, **SMALL).fit(images)
    assert calls and all(c[0] == "cpu" and c[2] == "cpu" for c in calls)
    assert {c[1] for c in calls} == {(16, 1, 8, 8)}  # whole batches, 2 views per batch
    assert len(calls) == 2 * 2 * 6  # 2 epochs x 6 batches x 2 views


def test_two_modalities_as_a_dict(digits):
    images, _, tokens = digits
    X = {"image": images.astype(np.float32), "text": tokens}
    module = {"image": tiny_cnn(), "text": Bag()}
    est = ContrastiveEmbedder(module=module, **SMALL).fit(X)
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


def test_dict_errors(digits):
    images, _, tokens = digits
    X = {"image": images.astype(np.float32), "text": tokens}
    with pytest.raises(ValueError, match=r"view 'text' \(integer, shape \(6,\)\) holds "
                                         r"integers \(e.g. token ids\).*pass an encoder"):
        ContrastiveEmbedder(**SMALL).fit(X)
    with pytest.raises(ValueError, match=r"module as a dict must have one encoder per view, "
                                         r"keyed \['image', 'text'\]; got keys \['image'\]"):
        ContrastiveEmbedder(module={"image": tiny_cnn()}, **SMALL).fit(X)
    with pytest.raises(ValueError, match="equally many items"):
        ContrastiveEmbedder(module={"image": tiny_cnn(), "text": Bag()}, **SMALL).fit(
            {"image": X["image"], "text": tokens[:50]})
    with pytest.raises(ValueError, match=r"must hold two views.*got 1 key"):
        ContrastiveEmbedder(**SMALL).fit({"image": X["image"]})
    with pytest.raises(ValueError, match=r"X\['extra'\] \(a hard-negative column: items like "
                                         r"X\['text'\]\) has items of shape"):
        ContrastiveEmbedder(module={"image": tiny_cnn(), "text": Bag()}, **SMALL).fit(
            {**X, "extra": X["image"]})
    bad = X["image"].copy()
    bad[3, 0, 2, 2] = np.nan
    with pytest.raises(ValueError, match=r"X\['image'\] contains 1 NaN or infinite"):
        ContrastiveEmbedder(module={"image": tiny_cnn(), "text": Bag()}, **SMALL).fit(
            {"image": bad, "text": tokens})


def test_integer_nd_pairs_need_a_module_and_stay_integers():
    tokens = np.random.default_rng(0).integers(0, 20, size=(40, 2, 5, 3))
    with pytest.raises(ValueError, match="holds integers"):
        ContrastiveEmbedder(**SMALL).fit(tokens)

    class SeqBag(Bag):
        def forward(self, tokens):
            assert tokens.dtype == torch.int64
            return self.bag(tokens.flatten(1))

    est = ContrastiveEmbedder(module=SeqBag(), **SMALL).fit(tokens)
    assert est.transform(tokens).shape == (40, 4)


def test_supcon_on_images_with_and_without_augmentation(digits):
    images, y, _ = digits
    est = SupConEmbedder(module=tiny_cnn(), **SMALL).fit(images, y)
    assert est.transform(images).shape == (96, 4)
    assert 0 <= est.score(images, y) <= 1
    aug = SupConEmbedder(module=tiny_cnn(), augmentation=GaussianNoise(0.05), **SMALL)
    aug.fit(images, y)
    assert np.isfinite(aug.history_[-1, "train_loss"])


def test_supcon_with_a_single_class_is_an_error():
    X = np.random.default_rng(0).normal(size=(20, 4))
    with pytest.raises(ValueError, match=r"needs at least 2 classes in y; got 1 class \('a'\)"):
        SupConEmbedder(**SMALL).fit(X, ["a"] * 20)


# --------------------------------------------------------------------------------------
# Datasets
# --------------------------------------------------------------------------------------

def test_a_dataset_of_pairs_trains_like_the_array(digits):
    images, y, _ = digits
    X = image_pairs(torch.as_tensor(images).numpy())
    dataset = PairDataset(images)
    params = {"module": tiny_cnn(), **SMALL}
    a = ContrastiveEmbedder(**params).fit(X)
    b = ContrastiveEmbedder(**params).fit(dataset)
    np.testing.assert_allclose(a.transform(X), b.transform(dataset), atol=1e-6)
    selector = RecordingSelector(OSGDSelector(16, k=3, q=2))
    c = ContrastiveEmbedder(module=tiny_cnn(), selector=selector, n_components=4,
                            max_epochs=2, random_state=0, num_workers=2).fit(dataset, y)
    assert c.net_.selector.shapes_ == [(96, 2, 4), (96, 2, 4)]
    binding = ContrastiveEmbedder(module=tiny_cnn(), selector=BindingSelector(
        ShuffledBatchSelector(16)), **{**SMALL, "batch_size": None}).fit(dataset, y)
    assert np.isfinite(binding.history_[-1, "train_loss"])


def test_a_dataset_of_single_views_with_an_augmentation(digits):
    images, y, _ = digits
    single = PairDataset(images, views=1)
    est = ContrastiveEmbedder(module=tiny_cnn(), augmentation=GaussianNoise(0.05),
                              **SMALL).fit(single)
    assert est.transform(single).shape == (96, 4)
    sup = SupConEmbedder(module=tiny_cnn(), **SMALL).fit(single, y)
    two_crops = SupConEmbedder(module=tiny_cnn(), **SMALL).fit(PairDataset(images), y)
    assert sup.transform(single).shape == two_crops.transform(PairDataset(images)).shape


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


def test_dataset_errors(digits):
    images, _, _ = digits

    class Labelled(PairDataset):
        def __getitem__(self, i):
            return self.images[i], 3

    # (x, label) items: the label is set aside (ContrastiveEmbedder does not use it), so
    # the item is a single view, which pairs training refuses and SimCLR takes
    with pytest.raises(ValueError, match=r"X\[0\] must be a pair \(x0, x1\)"):
        ContrastiveEmbedder(**SMALL).fit(Labelled(images))
    simclr = ContrastiveEmbedder(augmentation=GaussianNoise(0.1), **SMALL).fit(Labelled(images))
    assert simclr.input_spec_.item_labels and simclr.transform(images).shape == (96, 4)

    class Stream(IterableDataset):
        def __iter__(self):
            return iter([])

    with pytest.raises(ValueError, match="IterableDataset; batch selection needs random "
                                         "access"):
        ContrastiveEmbedder(**SMALL).fit(Stream())
    est = ContrastiveEmbedder(module=tiny_cnn(), **SMALL).fit(PairDataset(images))
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
        ContrastiveEmbedder(**SMALL).fit(PairDataset(images), np.zeros(5))


# --------------------------------------------------------------------------------------
# Mixed precision and the training loop
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_mixed_precision_on_the_cpu(digits, precision):
    images, _, _ = digits
    X = image_pairs(images)
    torch.manual_seed(0)
    cnn = tiny_cnn()
    est = ContrastiveEmbedder(module=cnn, precision=precision, loss=SymmetricInfoNCE(0.01),
                              **SMALL).fit(X)
    assert np.isfinite(est.history_[:, "train_loss"]).all()
    assert np.isfinite(est.history_[:, "train_entropy"]).all()
    out = est.transform(X)
    assert out.dtype == np.float32
    reference = ContrastiveEmbedder(module=cnn, loss=SymmetricInfoNCE(0.01), **SMALL).fit(X)
    # same start, same batches: the first batch's loss (before any update) differs by the
    # rounding of the low-precision forward only; then training makes progress (the
    # float16 gradient scaler starts at 2**16 and skips the first, overflowing steps, so
    # its course lags behind)
    first = [e.history_[0, "batches", 0, "train_loss"] for e in (est, reference)]
    assert first[0] == pytest.approx(first[1], rel=0.02)
    assert est.history_[-1, "train_loss"] < est.history_[0, "train_loss"]
    assert (est.net_.grad_scaler_ is not None) == (precision == "float16")


def test_the_loss_is_computed_in_float32_under_autocast(digits):
    images, _, _ = digits
    dtypes = []

    def loss(u, v, temperature):
        dtypes.append((u.dtype, v.dtype))
        return ((u - v) ** 2).sum(1).mean() / temperature

    ContrastiveEmbedder(module=tiny_cnn(), loss=loss, precision="bfloat16",
                        **SMALL).fit(image_pairs(images))
    assert set(dtypes) == {(torch.float32, torch.float32)}


def test_batch_values_are_read_once_per_epoch(digits, monkeypatch):
    """Reading a value off the device (``item``, ``tolist``) stalls the GPU queue: the
    training loop reads the batch losses once per epoch. Reads made inside torch itself
    (Adam's CPU step counter) are not counted."""
    images, _, _ = digits
    X = image_pairs(images)
    reads = []

    def counting(method):
        def read(t):
            if "/torch/" not in sys._getframe(1).f_code.co_filename:
                reads.append(method.__name__)
            return method(t)
        return read

    monkeypatch.setattr(torch.Tensor, "item", counting(torch.Tensor.item))
    monkeypatch.setattr(torch.Tensor, "tolist", counting(torch.Tensor.tolist))

    def count(batch_size):
        reads.clear()
        est = ContrastiveEmbedder(module=tiny_cnn(), n_components=4, max_epochs=2,
                                  batch_size=batch_size, random_state=0).fit(X)
        return len(reads), est.history_

    few, _ = count(48)               # 2 batches per epoch
    many, history_many = count(8)    # 12 batches per epoch
    assert few == many == 2          # once per epoch
    assert len(history_many[-1, "batches"]) == 12
    assert all(np.isfinite(b["train_loss"]) and b["train_batch_size"] == 8
               for b in history_many[-1, "batches"])
    mean = np.mean([b["train_loss"] for b in history_many[-1, "batches"]])
    assert history_many[-1, "train_loss"] == pytest.approx(mean)


def test_parameter_errors(digits):
    images, _, _ = digits
    X = image_pairs(images)
    with pytest.raises(ValueError, match=r"precision must be one of 'float32', 'bfloat16', "
                                         r"'float16'; got 'half'"):
        ContrastiveEmbedder(precision="half", **SMALL).fit(X)
    with pytest.raises(ValueError, match="num_workers must be >= 0; got -1"):
        ContrastiveEmbedder(num_workers=-1, **SMALL).fit(X)
    with pytest.raises(ValueError, match=r"data_on_device must be True, False or 'auto'"):
        ContrastiveEmbedder(data_on_device="yes", **SMALL).fit(X)
    with pytest.raises(ValueError, match="data_on_device=True needs array or tensor data"):
        ContrastiveEmbedder(data_on_device=True, **SMALL).fit(PairDataset(images))


def test_warm_start_needs_the_same_views(digits):
    images, _, _ = digits
    est = ContrastiveEmbedder(module=tiny_cnn(), warm_start=True, **SMALL)
    est.fit(image_pairs(images))
    est.fit(image_pairs(images))
    assert len(est.history_) == 4
    with pytest.raises(ValueError, match="warm_start continues the fitted network"):
        est.fit(np.zeros((10, 2, 1, 4, 4), dtype=np.float32))


# --------------------------------------------------------------------------------------
# scikit-learn: searches, clone, pickle, loading a GPU model on the CPU
# --------------------------------------------------------------------------------------

def test_grid_search_on_image_pairs_dicts_and_datasets(digits):
    images, _, tokens = digits
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


def test_clone_and_pickle_image_models(digits):
    images, _, tokens = digits
    X = {"image": images.astype(np.float32), "text": tokens}
    est = ContrastiveEmbedder(module={"image": tiny_cnn(), "text": Bag()},
                              augmentation=None, **SMALL).fit(X)
    twin = clone(est)
    assert not hasattr(twin, "net_") and set(twin.module) == {"image", "text"}
    restored = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(restored.transform(X), est.transform(X))
    np.testing.assert_array_equal(restored.transform_view(tokens, view="text"),
                                  est.transform_view(tokens, view="text"))


class TensorSpy(pickle.Pickler):
    """Plain pickling that records the storage of every tensor it has to write itself."""

    def __init__(self, file):
        super().__init__(file)
        self.pointers = set()

    def reducer_override(self, obj):
        if isinstance(obj, torch.Tensor):
            self.pointers.add(obj.untyped_storage().data_ptr())
        return NotImplemented


def device_dependent_storages(net):
    """Storages of what the training device holds: module, criterion, optimizer state."""
    tensors = [*net.module_.state_dict().values(), *net.criterion_.state_dict().values()]
    for name in net._optimizers:
        for state in getattr(net, name + "_").state.values():
            tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
    return {t.untyped_storage().data_ptr() for t in tensors if t.numel()}


@pytest.mark.parametrize("make", [
    lambda: ContrastiveEmbedder(module=tiny_cnn(), loss=SymmetricInfoNCE(learn_temperature=True),
                                precision="float16", **SMALL),
    lambda: SupConEmbedder(module=tiny_cnn(), augmentation=GaussianNoise(0.1), **SMALL),
], ids=["contrastive", "supcon"])
def test_trained_tensors_are_pickled_only_inside_skorchs_device_mapped_state(digits, make):
    """skorch pickles its ``cuda_dependent_attributes_`` with a device map; a trained tensor
    pickled anywhere else (the bug: the encoder handed to skorch as ``module=``) is loaded
    without one, so a model fitted on a GPU would not load on a CPU-only machine. (The
    untrained template the user passed as ``module`` stays on the CPU.)"""
    images, y, _ = digits
    est = make()
    fit_args = (image_pairs(images),) if isinstance(est, ContrastiveEmbedder) else (images, y)
    est.fit(*fit_args)
    trained = device_dependent_storages(est.net_)
    assert len(trained) > 8
    spy = TensorSpy(io.BytesIO())
    spy.dump(est)
    assert spy.pointers, "the user's template module is pickled plainly, as it should be"
    assert not spy.pointers & trained
    restored = pickle.loads(pickle.dumps(est))
    restored.set_params(warm_start=True, max_epochs=1)
    restored.fit(*fit_args)
    assert len(restored.history_) == 3


@requires_cuda
@pytest.mark.gpu
def test_a_gpu_fitted_model_loads_transforms_and_trains_on_a_cpu_only_process(digits,
                                                                                tmp_path):
    """Fitted with device='cuda', unpickled where no GPU is: transform works; a warm start
    with device='cuda' is refused with a clear error (and changes nothing); with
    device='cpu' (or 'auto') it continues on the CPU."""
    images, _, _ = digits
    X = image_pairs(images)
    est = ContrastiveEmbedder(module=tiny_cnn(), device="cuda",
                              loss=SymmetricInfoNCE(learn_temperature=True),
                              **SMALL).fit(X)
    path = tmp_path / "model.pkl"
    path.write_bytes(pickle.dumps(est))
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "expected.npy", est.transform(X))
    script = textwrap.dedent(f"""
        import pickle, warnings, numpy as np, torch
        assert not torch.cuda.is_available()
        warnings.simplefilter("ignore")
        est = pickle.loads(open({str(path)!r}, "rb").read())
        X = np.load({str(tmp_path / 'X.npy')!r})
        np.testing.assert_allclose(est.transform(X), np.load({str(tmp_path / 'expected.npy')!r}),
                                   atol=1e-4)
        est.set_params(warm_start=True, max_epochs=1)
        try:  # device='cuda' asks for a GPU: refused here, not silently moved
            est.fit(X)
        except ValueError as exc:
            assert "device='cuda' was requested but no CUDA GPU" in str(exc)
        else:
            raise AssertionError("device='cuda' trained without a GPU")
        assert len(est.history_) == 2  # the refused warm start left the model as it was
        est.set_params(device="cpu").fit(X)
        assert len(est.history_) == 3 and est.net_.device == "cpu"
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("data_on_device", [False, True])
def test_cuda_training_with_and_without_resident_data(digits, data_on_device):
    images, _, _ = digits
    X = image_pairs(images)
    est = ContrastiveEmbedder(module=tiny_cnn(), device="cuda", data_on_device=data_on_device,
                              augmentation=None, precision="bfloat16", **SMALL).fit(X)
    assert np.isfinite(est.history_[:, "train_loss"]).all()
    single = ContrastiveEmbedder(module=tiny_cnn(), device="cuda",
                                 data_on_device=data_on_device,
                                 augmentation=GaussianNoise(0.05), **SMALL).fit(images)
    assert single.net_.augmentation.generator.device.type == "cuda"
    assert single.transform(images).shape == (96, 4)


def test_kornia_augmentations_on_a_factory_built_cnn_are_reproducible(digits):
    """kornia draws from torch's global generator, which fit seeds (in a forked state);
    a module factory is built after seeding, so the whole fit is reproducible."""
    pytest.importorskip("kornia")
    from skcontrast.datasets import digit_augmentation, digit_cnn

    images, _, _ = digits
    fits = [ContrastiveEmbedder(module=digit_cnn, augmentation=digit_augmentation(),
                                **SMALL).fit(images) for _ in range(2)]
    np.testing.assert_array_equal(fits[0].transform(images), fits[1].transform(images))
