"""est.save / skcontrast.load: a model folder runs nothing, and every saved model loads.
"""

import functools
import io
import json
import pickle
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import _helpers
import numpy as np
import pytest
import torch
from _helpers import (
    SMALL_IMAGES,
    TEXT_FIT,
    image_pairs,
    paired_gaussians,
    requires_cuda,
    small_mlp,
    tiny_cnn,
)
from skorch.callbacks import Callback
from torch import nn

import skcontrast
from skcontrast import ContrastiveEmbedder, SupConEmbedder, WarmupCosine
from skcontrast._estimators._encoding import allowed_objects, encode_value
from skcontrast.datasets import (
    GaussianNoise,
    digit_cnn,
    load_digit_images,
    make_paired_gaussians,
)
from skcontrast.losses import (
    DCL,
    FunctionLoss,
    HardNegativeNCE,
    SymmetricInfoNCE,
    info_nce,
)
from skcontrast.memory import CrossBatchMemory, SogCLRMemory
from skcontrast.selectors import (
    ClassBalancedSelector,
    OSGDSelector,
    ShuffledBatchSelector,
)

SMALL = {"n_components": 4, "hidden_layer_sizes": (8,), "max_epochs": 2, "lr": 1e-2,
         "random_state": 0, "device": "cpu"}


@pytest.fixture(scope="module")
def pairs():
    return make_paired_gaussians(48, 6, n_clusters=3, random_state=0)


@pytest.fixture(scope="module")
def saved(pairs, tmp_path_factory):
    X, _ = pairs
    folder = tmp_path_factory.mktemp("saved") / "model"
    ContrastiveEmbedder(**SMALL).fit(X).save(folder)
    return folder


def _planted(saved, tmp_path, edit):
    """A copy of the saved model whose config.json ``edit`` changed, with a hubconf.py
    that leaves a mark if anything runs it."""
    folder = tmp_path / "planted"
    folder.mkdir()
    for name in ("model.safetensors", "config.json"):
        (folder / name).write_bytes((saved / name).read_bytes())
    mark = tmp_path / "ran"
    (folder / "hubconf.py").write_text(
        f"open({str(mark)!r}, 'w').write('ran')\ndef entry(*a, **k):\n    return None\n")
    config = json.loads((folder / "config.json").read_text())
    edit(config, folder)
    (folder / "config.json").write_text(json.dumps(config))
    return folder, mark


# A model folder runs nothing ---------------------------------------------------------

HOSTILE = ["torch.hub.load", "torch.os.kill", "os.system", "subprocess.run", "builtins.eval",
           "builtins.exec", "torch.hub._load_local", "skcontrast.selectors._base.np.load",
           "torch.nn.modules.module.torch.hub.load", "evilmod.run"]


@pytest.mark.parametrize("path", HOSTILE)
@pytest.mark.parametrize("entry", ["import", "estimator", "object", "call", "partial"])
def test_load_refuses_every_name_outside_the_allow_list_and_runs_nothing(
        saved, tmp_path, monkeypatch, path, entry):
    monkeypatch.syspath_prepend(str(tmp_path))  # an importable module that marks its import
    (tmp_path / "evilmod.py").write_text(
        f"open({str(tmp_path / 'imported')!r}, 'w').write('x')\ndef run(*a, **k):\n    pass\n")
    value = {"import": {"import": path}, "estimator": {"estimator": path, "params": {"dict": {}}},
             "object": {"object": path, "state": {"dict": {}}}, "call": {"call": path},
             "partial": {"partial": path, "args": [], "keywords": {"dict": {}}}}[entry]

    def edit(config, folder):
        config["params"]["module"] = value
        config["params"]["module__source"] = "local"
        config["params"]["module__repo_or_dir"] = str(folder)
        config["fitted"]["input_spec"]["views"][0]["shape"] = [str(folder)]

    folder, mark = _planted(saved, tmp_path, edit)
    with pytest.raises(ValueError, match=r"does not construct|is not|must be a list of non-"):
        skcontrast.load(folder)
    assert not mark.exists() and not (tmp_path / "imported").exists()
    assert "evilmod" not in sys.modules


def test_a_path_as_a_view_shape_is_refused(saved, tmp_path):
    def edit(config, folder):
        config["fitted"]["input_spec"]["views"][0]["shape"] = [str(folder / "hubconf.py")]

    folder, mark = _planted(saved, tmp_path, edit)
    with pytest.raises(ValueError, match="shape of a view must be a list of non-negative"):
        skcontrast.load(folder)
    assert not mark.exists()


@pytest.mark.parametrize("value", [{"kwargs": 1}, ["/etc/passwd"], {"array": [1], "dtype": "V8"}])
def test_malformed_values_are_refused_by_name(saved, tmp_path, value):
    def edit(config, folder):
        config["params"]["selector"] = value

    folder, _ = _planted(saved, tmp_path, edit)
    if isinstance(value, list):  # a plain list is a legal value: the estimator refuses it
        with pytest.raises(ValueError, match="selector must be a BatchSelector"):
            skcontrast.load(folder)
    else:
        with pytest.raises(ValueError, match=r"selector|dtype V8"):
            skcontrast.load(folder)


def test_the_allow_list_holds_only_skcontrast_and_torch_layers_and_optimizers():
    allowed = allowed_objects()
    assert "torch.hub.load" not in allowed and "os.system" not in allowed
    for path, obj in allowed.items():
        root = path.split(".")[0]
        assert root in ("skcontrast", "torch"), path
        if root == "torch":
            assert isinstance(obj, type) and (issubclass(obj, nn.Module)
                                              or issubclass(obj, torch.optim.Optimizer)), path


# save never writes through a symlink ------------------------------------------------

def test_save_replaces_symlinks_instead_of_writing_through_them(pairs, tmp_path):
    X, _ = pairs
    est = ContrastiveEmbedder(**SMALL).fit(X)
    folder = tmp_path / "m"
    folder.mkdir()
    targets = {}
    for name in ("config.json", "model.safetensors"):
        targets[name] = tmp_path / f"victim-{name}"
        targets[name].write_text("precious")
        (folder / name).symlink_to(targets[name])
    est.save(folder)
    for name, target in targets.items():
        assert target.read_text() == "precious"
        assert not (folder / name).is_symlink()
    np.testing.assert_array_equal(skcontrast.load(folder).transform(X), est.transform(X))


def test_a_truncated_configuration_is_a_clear_error(saved, tmp_path):
    folder, _ = _planted(saved, tmp_path, lambda config, folder: None)
    text = (folder / "config.json").read_text()
    (folder / "config.json").write_text(text[: len(text) // 2])
    with pytest.raises(ValueError, match=r"is not valid JSON.*interrupted or damaged save"):
        skcontrast.load(folder)


# A saved model either loads, or says what to pass ----------------------------------

def custom_loss(u, v, temperature=0.1):
    from skcontrast.losses import info_nce

    return info_nce(u, v, temperature=temperature)


class MyAdam(torch.optim.Adam):
    """An optimizer of another package (timm's Lars, say)."""


def scorer(estimator, X, y=None):
    return 0.5


@pytest.mark.parametrize("name, value, required", [
    ("loss", custom_loss, True),
    ("optimizer", MyAdam, True),
    ("random_state", np.random.RandomState(0), False),
    ("scoring", scorer, False),
])
def test_objects_the_file_cannot_hold_are_passed_back_by_the_keyword_named(
        pairs, tmp_path, name, value, required):
    X, _ = pairs
    extra = {"validation_fraction": 0.25} if name == "scoring" else {}
    est = ContrastiveEmbedder(**{**SMALL, **extra, name: value}).fit(X)
    folder = est.save(tmp_path / "m")
    if required:
        with pytest.raises(ValueError, match=rf"skcontrast.load\(path, {name}=<"):
            skcontrast.load(folder)
    elif name == "random_state":  # not read by further training: None
        with pytest.warns(UserWarning, match=rf"{name} was .*pass {name}=\.\.\. to load"):
            assert skcontrast.load(folder).get_params()[name] is None
    else:  # a placeholder: the model transforms, and refuses to train until it is back
        with pytest.warns(UserWarning, match=rf"{name} was .*refuses to train until it is "
                                             rf"passed back \(pass {name}=\.\.\. to load"):
            lost = skcontrast.load(folder)
        np.testing.assert_array_equal(lost.transform(X), est.transform(X))
        with pytest.raises(ValueError, match=rf"{name} was test_persist.{value.__name__} "
                                             r"when the model was saved"):
            lost.set_params(warm_start=True, max_epochs=1).fit(X)
        lost.set_params(**{name: value}).fit(X)
    again = skcontrast.load(folder, **{name: value})
    assert again.get_params()[name] is value
    np.testing.assert_array_equal(again.transform(X), est.transform(X))
    again.set_params(warm_start=True, max_epochs=1).fit(X)  # and it keeps training


@pytest.mark.parametrize("kind", [dict, tuple])
def test_encoder_instances_per_view_load_when_passed_back(tmp_path, kind):
    rng = np.random.default_rng(0)
    X = {"a": rng.normal(size=(40, 5)).astype(np.float32),
         "b": rng.normal(size=(40, 3)).astype(np.float32)}
    encoders = (nn.Linear(5, 4), nn.Linear(3, 4))
    module = dict(zip("ab", encoders, strict=True)) if kind is dict else encoders
    est = ContrastiveEmbedder(module, **SMALL).fit(X)
    folder = est.save(tmp_path / "m")
    with pytest.raises(ValueError, match=r"skcontrast.load\(path, module=<"):
        skcontrast.load(folder)
    again = skcontrast.load(folder, module=module)
    np.testing.assert_array_equal(again.transform(X), est.transform(X))


def test_skcontrast_and_torch_objects_are_stored_and_rebuilt(tmp_path):
    images = np.random.default_rng(0).random((48, 1, 8, 8)).astype(np.float32)
    est = SupConEmbedder(functools.partial(digit_cnn, norm="group"), **SMALL,
                         selector=OSGDSelector(8, k=2, q=1), optimizer=torch.optim.RMSprop,
                         augmentation=GaussianNoise(0.05), memory=SogCLRMemory(0.5)
                         ).fit(images, np.arange(48) % 3)
    folder = est.save(tmp_path / "m")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = skcontrast.load(folder)
    assert again.get_params()["module"].keywords == {"norm": "group"}
    assert isinstance(again.optimizer, type) and again.optimizer is torch.optim.RMSprop
    assert repr(again.augmentation) == "GaussianNoise(std=0.05)"
    assert again.memory.gamma == 0.5 and again.selector.k == 2
    np.testing.assert_array_equal(again.transform(images), est.transform(images))


# What a saved model keeps -----------------------------------------------------------

class LabelledItems(torch.utils.data.Dataset):
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], int(self.y[i])


def test_a_loaded_model_reads_its_own_labelled_dataset(pairs, tmp_path):
    X, y = pairs
    data = LabelledItems(torch.as_tensor(X[:, 0]), y)
    est = SupConEmbedder(**SMALL).fit(data)
    again = skcontrast.load(est.save(tmp_path / "m"))
    assert again.input_spec_.item_labels
    np.testing.assert_array_equal(again.transform(data), est.transform(data))


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_a_warm_start_after_load_continues_as_one_uninterrupted_fit(pairs, tmp_path,
                                                                     optimizer):
    X, _ = pairs
    params = {**SMALL, "optimizer": optimizer, "selector": ShuffledBatchSelector(8),
              "random_state": None}
    first = ContrastiveEmbedder(**params).fit(X)
    uninterrupted = ContrastiveEmbedder(**{**params, "max_epochs": 4,
                                           "random_state": first.net_.plan.seed}).fit(X)
    again = skcontrast.load(first.save(tmp_path / "m"))
    again.set_params(warm_start=True).fit(X)
    assert again.net_.selector.current_epoch == 4
    np.testing.assert_allclose(again.transform(X), uninterrupted.transform(X), atol=1e-6)


@pytest.mark.parametrize(("optimizer", "settings"), [
    ("sgd", {"momentum": 0.9}), ("sgd", {"momentum": 0.9, "weight_decay": 1e-4}),
    ("adam", {"amsgrad": True}), (torch.optim.Adagrad, {})], ids=str)
def test_every_optimizer_state_of_a_text_fit_saves_and_continues(text_pairs, tmp_path,
                                                                 optimizer, settings):
    # SGD's momentum buffer of the sparse bag was a sparse tensor, which save could not
    # write ("unsupported memory format option Contiguous")
    params = {**TEXT_FIT, "n_components": 16, "optimizer": optimizer, "lr": 0.05,
              **{f"optimizer__{k}": v for k, v in settings.items()}}
    whole = ContrastiveEmbedder(**{**params, "max_epochs": 4}).fit(text_pairs)
    half = ContrastiveEmbedder(**params).fit(text_pairs)
    again = skcontrast.load(half.save(tmp_path / "m"))
    again.set_params(warm_start=True).fit(text_pairs)
    texts = [a for a, _ in text_pairs]
    np.testing.assert_allclose(again.transform(texts), whole.transform(texts), atol=1e-6)


def test_optimizer_state_a_file_cannot_hold_is_refused_by_name(pairs, tmp_path):
    X, _ = pairs
    est = ContrastiveEmbedder(**{**SMALL, "max_epochs": 1},
                              optimizer=torch.optim.LBFGS).fit(X)
    with pytest.raises(ValueError, match=r"cannot save the LBFGS state '\w+': it holds "
                                         r"(list|NoneType), which a saved file does not hold"):
        est.save(tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_the_librarys_own_digit_augmentation_is_restored(tmp_path):
    pytest.importorskip("kornia")
    from skcontrast.datasets import digit_augmentation

    images, _ = load_digit_images()
    images = images[:64]
    est = ContrastiveEmbedder(**SMALL, augmentation=digit_augmentation()).fit(images)
    folder = est.save(tmp_path / "m")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = skcontrast.load(folder)
    for a, b in zip(again.transform_pairs(images), est.transform_pairs(images), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_a_model_trained_on_class_balanced_batches_loads_without_its_labels(pairs, tmp_path):
    # small_classes='repeat' counts an epoch's batches from the labels, which a loaded
    # model does not have; it needs no count until it trains again (with its labels)
    X, y = pairs
    selector = ClassBalancedSelector(8, 4, small_classes="repeat", random_state=0)
    est = SupConEmbedder(**SMALL, selector=selector, lr_schedule=WarmupCosine()).fit(X[:, 0], y)
    assert est.net_.selector.n_balanced_ >= 1
    again = skcontrast.load(est.save(tmp_path / "m"))
    np.testing.assert_array_equal(again.transform(X[:, 0]), est.transform(X[:, 0]))
    again.set_params(warm_start=True).fit(X[:, 0], y)
    assert again.net_.selector.current_epoch == 4


def _cached_selectors(X):
    from skcontrast.selectors import JESTSelector, RhoLossSelector, SpectralBatchSelector

    reference = ContrastiveEmbedder(**SMALL, batch_size=16).fit(X)
    return {"jest reference": JESTSelector(8, 0.5, reference=reference),
            "jest hard": JESTSelector(8, 0.5, score="hard"),
            "rho-loss": RhoLossSelector(8, 0.5, reference=reference),
            "spectral": SpectralBatchSelector(16)}


@pytest.mark.parametrize("name", ["jest reference", "jest hard", "rho-loss", "spectral"])
@pytest.mark.parametrize("resume", ["warm start", "save and load", "pickle"])
def test_a_cached_selection_pass_continues_exactly(pairs, tmp_path, name, resume):
    # the embeddings the training steps computed are training state: 2 + 2 epochs read
    # up to 0.11 away from 4 when a warm start, a saved model or a pickle dropped them
    import pickle

    X, _ = pairs
    selector = _cached_selectors(X)[name]
    kw = {**SMALL, "selector": selector, "selection_pass": "cached"}
    whole = ContrastiveEmbedder(**{**kw, "max_epochs": 4}).fit(X)
    half = ContrastiveEmbedder(**kw).fit(X)
    if resume == "save and load":
        half.save(tmp_path / "half")
        half = skcontrast.load(tmp_path / "half", selector=selector)
    elif resume == "pickle":
        half = pickle.loads(pickle.dumps(half))
    half.set_params(warm_start=True).fit(X)
    np.testing.assert_array_equal(half.transform(X), whole.transform(X))


def test_a_warm_start_on_other_rows_does_not_reuse_their_cached_embeddings(pairs):
    from skcontrast._estimators._state import without_row_caches

    X, _ = pairs
    other = X[::-1].copy()  # the same size, other rows in each position
    selector = _cached_selectors(X)["jest hard"]
    kw = {**SMALL, "selector": selector, "selection_pass": "cached"}
    half = ContrastiveEmbedder(**kw).fit(X)
    state = half.net_.training_state()
    assert "cache" not in state["selector_state"]  # JEST's table is the sampler's
    assert state["selection"]["known"].all()
    stripped = ContrastiveEmbedder(**kw).fit(X)
    stripped.net_.restore(without_row_caches(state))
    assert not stripped.net_.selector.state_dict().get("cache")
    half.set_params(warm_start=True).fit(other)
    stripped.set_params(warm_start=True).fit(other)
    np.testing.assert_array_equal(half.transform(X), stripped.transform(X))


@pytest.mark.parametrize(("slot", "where", "value"), [
    ("tokenizer_", "attributes", {"estimator": "skcontrast.selectors._basic."
                                  "ShuffledBatchSelector", "params": {"dict": {}}}),
    ("tokenizer", "params", {"import": "torch.nn.modules.linear.Linear"}),
    ("selector", "params", {"estimator": "skcontrast.memory._sogclr.SogCLRMemory",
                            "params": {"dict": {}}}),
    ("memory", "params", {"estimator": "skcontrast.losses._objects.InfoNCE",
                          "params": {"dict": {}}}),
    ("optimizer", "params", {"import": "torch.nn.modules.linear.Linear"}),
    ("module", "params", {"import": "torch.optim.sgd.SGD"}),
    ("temperature_", "attributes", {"import": "torch.nn.modules.linear.Linear"}),
])
def test_each_restored_slot_takes_only_its_kind_of_object(saved, tmp_path, slot, where, value):
    # an edited config put torch.nn.Linear in the tokenizer's place: it loaded, and
    # transform failed far from the cause
    def edit(config, folder):
        target = config["fitted"]["attributes"] if where == "attributes" else config["params"]
        target[slot] = value

    folder, mark = _planted(saved, tmp_path, edit)
    with pytest.raises(ValueError, match=rf"malformed saved configuration: {slot} holds "):
        skcontrast.load(folder)
    assert not mark.exists()


@pytest.mark.parametrize(("loss", "former"), [
    (HardNegativeNCE(beta=0.5), "skcontrast.losses._objects.HardNegativeNCE"),
    (FunctionLoss(info_nce, temperature=0.2), "skcontrast.losses._infonce.info_nce"),
])
def test_a_file_naming_a_loss_by_its_module_in_0_2_loads(pairs, tmp_path, loss, former):
    # skcontrast 0.2.0 kept the loss classes in losses/_objects.py and the functions in a
    # module per family (_infonce, _hard, ...); each loss is now one module of its own
    X, _ = pairs
    est = ContrastiveEmbedder(**SMALL, loss=loss).fit(X)
    est.save(tmp_path / "m")
    named = loss.function if isinstance(loss, FunctionLoss) else type(loss)
    config = tmp_path / "m" / "config.json"
    text = config.read_text()
    assert f"{named.__module__}.{named.__qualname__}" in text
    config.write_text(text.replace(f"{named.__module__}.{named.__qualname__}", former))
    loaded = skcontrast.load(tmp_path / "m")
    assert loaded.get_params()["loss"].get_params() == loss.get_params()
    np.testing.assert_array_equal(loaded.transform(X), est.transform(X))


def test_a_file_naming_a_curating_selector_by_its_former_module_loads(pairs, tmp_path):
    from skcontrast.selectors import JESTSelector

    X, _ = pairs
    est = ContrastiveEmbedder(**SMALL, selector=JESTSelector(8, 0.5, score="hard")).fit(X)
    est.save(tmp_path / "m")
    config = tmp_path / "m" / "config.json"
    now = "skcontrast.selectors._curators.JESTSelector"
    assert now in config.read_text()
    config.write_text(config.read_text().replace(now, "skcontrast.selectors._curation."
                                                      "JESTSelector"))
    loaded = skcontrast.load(tmp_path / "m")
    assert loaded.get_params()["selector"].get_params() == est.selector.get_params()


class _ReadsValues(nn.Module):
    """An encoder that reads a tensor's value while it is built: it cannot be built on
    torch's meta device, so its shapes are compared when it is built for real."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.linear = nn.Linear(n_in, n_out)
        self.scale = float(torch.ones(1).item())

    def forward(self, x):
        return self.linear(x) * self.scale


@pytest.mark.parametrize("edit", ["declared samples", "remembered samples", "queue size"])
def test_declared_memory_sizes_are_compared_before_anything_is_built(pairs, tmp_path, edit):
    # a memory of 2**33 samples in an edited config made load allocate 64 GB before any
    # size was compared (an encoder that cannot be built on meta skipped every check)
    from skcontrast.memory import CrossBatchMemory

    X, _ = pairs
    memory = CrossBatchMemory(32) if edit == "queue size" else SogCLRMemory()
    ContrastiveEmbedder(_ReadsValues, **SMALL, loss="dcl", memory=memory,
                        batch_size=8).fit(X).save(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    if edit == "declared samples":
        config["fitted"]["n_samples"] = 2**20
        match = r"the saved tensor 'criterion.memory_state.log_u' has shape \(48, 1\), but " \
                r"the saved parameters build it with shape \(1048576, 1\)"
    elif edit == "remembered samples":
        config["fitted"]["extra_state"]["criterion.memory_state._extra_state"][
            "n_samples"] = 2**20
        match = r"the saved memory remembers 1048576 samples"
    else:
        config["params"]["memory"]["params"]["dict"]["size"] = 2**20
        match = r"queue holds \[32, 32, 32\] entries .* declares size=1048576"
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=match):
        skcontrast.load(tmp_path / "m", module=_ReadsValues)


@pytest.mark.parametrize("memory", [SogCLRMemory(), CrossBatchMemory(32)],
                         ids=["SogCLR", "cross-batch"])
def test_a_declared_memory_the_file_does_not_hold_is_refused_before_anything_is_built(
        pairs, tmp_path, monkeypatch, memory):
    # a memory added to the configuration of a model saved without one was built
    # (2**33 samples: 64 GB) before load found its state missing
    X, _ = pairs
    ContrastiveEmbedder(**SMALL, loss="dcl", batch_size=8).fit(X).save(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["params"]["memory"] = encode_value(memory)
    config["fitted"]["n_samples"] = 2**33
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))

    def build_net(*args, **kwargs):
        raise AssertionError("load built the net")

    monkeypatch.setattr(ContrastiveEmbedder, "_build_net", build_net)
    with pytest.raises(ValueError, match=r"the saved parameters build 'criterion\.memory_state"
                                         r"\.\w+'.*, which the saved model does not hold"):
        skcontrast.load(tmp_path / "m")


@pytest.mark.parametrize(("dtype", "values", "encoding"), [
    ("<U5000000", ["a", "b", "c"], None), ("<U1", ["ab", "cde"], None),
    ("|S5000000", [b"a", b"bc"], "hex")])
def test_saved_strings_are_read_at_their_own_width(saved, tmp_path, dtype, values, encoding):
    # '<U5000000' for three one-letter names allocated 57 MiB: 40 bytes of a file could
    # ask for gigabytes ('<U1' cut longer values short)
    def edit(config, folder):
        items = [v.hex() for v in values] if encoding else values
        config["fitted"]["attributes"]["feature_names_in_"] = {
            "array": items, "dtype": dtype, "encoding": encoding}

    folder, _ = _planted(saved, tmp_path, edit)
    names = skcontrast.load(folder).feature_names_in_
    assert names.tolist() == values
    assert names.dtype.itemsize == max(map(len, values)) * (1 if encoding else 4)


SMALL_FIT = small_mlp(batch_size=16)
pairs_fit = paired_gaussians(64)


@pytest.fixture(scope="module")
def saved_model(pairs_fit, tmp_path_factory):
    folder = tmp_path_factory.mktemp("trust") / "model"
    est = ContrastiveEmbedder(**SMALL_FIT).fit(pairs_fit[0])
    est.save(folder)
    return est, folder


def _copy(folder, tmp_path, edit=None, weights=None):
    """A copy of a saved model whose config ``edit`` changed and whose weights are
    ``weights(tensors)`` (the checksum kept in step, as a careful forger would)."""
    import hashlib
    import json

    from safetensors.torch import load_file, save

    out = tmp_path / "copy"
    out.mkdir(exist_ok=True)
    config = json.loads((folder / "config.json").read_text())
    data = (folder / "model.safetensors").read_bytes()
    if weights is not None:
        tensors = load_file(str(folder / "model.safetensors"))
        weights(tensors)
        data = save(tensors)
        config["weights_sha256"] = hashlib.sha256(data).hexdigest()
    (out / "model.safetensors").write_bytes(data)
    if edit is not None:
        edit(config)
    (out / "config.json").write_text(json.dumps(config))
    return out


class _Kill(Exception):
    pass


def test_a_selectors_state_travels_with_a_saved_model_and_a_warm_start(pairs_fit, tmp_path):
    import skcontrast
    from skcontrast.selectors import SpectralBatchSelector, TemperedSelector

    selector = TemperedSelector(SpectralBatchSelector(8), refresh_every=3,
                                exclude_neighbours=1)
    settings = {**SMALL_FIT, "batch_size": None}
    est = ContrastiveEmbedder(**settings, selector=selector).fit(pairs_fit[0])
    state = est.net_.selector.state_dict()
    assert state["chosen"]["epoch"] == 0 and state["neighbours"]["m"] == 1
    loaded = skcontrast.load(est.save(tmp_path / "m"))
    assert loaded.net_.selector.state_dict() == state
    warm = ContrastiveEmbedder(**{**SMALL_FIT, "batch_size": None, "max_epochs": 4},
                               selector=selector).fit(pairs_fit[0])
    est.set_params(warm_start=True).fit(pairs_fit[0])  # 2 + 2 epochs, the period resumed
    np.testing.assert_allclose(est.transform(pairs_fit[0]), warm.transform(pairs_fit[0]), atol=1e-6)


@pytest.mark.parametrize("name", ["__class__", "transform", "net_", "fit", "history_",
                                  "__dict__"])
def test_load_restores_only_the_documented_fitted_attributes(saved_model, tmp_path, name):
    import skcontrast

    _, folder = saved_model
    value = {"estimator": "skcontrast.selectors._basic.ShuffledBatchSelector",
             "params": {"dict": {}}}
    copy = _copy(folder, tmp_path, lambda c: c["fitted"]["attributes"].update({name: value}))
    with pytest.raises(ValueError, match=rf"sets \['{name}'\], which are not fitted "
                                         "attributes load restores"):
        skcontrast.load(copy)


def test_a_save_that_cannot_complete_writes_nothing(pairs_fit, tmp_path):

    class Records(Callback):  # puts an object JSON cannot hold into the history
        def on_epoch_end(self, net, **kwargs):
            net.history.record("odd", object())

    est = ContrastiveEmbedder(**SMALL_FIT, callbacks=[Records()]).fit(pairs_fit[0])
    with pytest.raises(ValueError, match="cannot save the training history"):
        est.save(tmp_path / "never")
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize("keys", [(0.5, 1.5), ((1,), (2,)), (None, "b")],
                         ids=["float", "tuple", "None"])
def test_view_names_a_file_cannot_hold_are_refused_before_writing(tmp_path, keys):
    rng = np.random.default_rng(0)
    X = {k: rng.normal(size=(32, 4)).astype(np.float32) for k in keys}
    est = ContrastiveEmbedder(**{**SMALL_FIT, "max_epochs": 1}).fit(X)
    with pytest.raises(ValueError, match="needs a string or integer name"):
        est.save(tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_numpy_integer_view_names_save_and_load(tmp_path):
    import skcontrast

    rng = np.random.default_rng(0)
    X = {np.int64(k): rng.normal(size=(32, 4)).astype(np.float32) for k in (0, 1)}
    est = ContrastiveEmbedder(**{**SMALL_FIT, "max_epochs": 1}).fit(X)
    loaded = skcontrast.load(est.save(tmp_path / "m"))
    np.testing.assert_array_equal(loaded.transform_view(X[0], view=0),
                                  est.transform_view(X[0], view=0))


@pytest.mark.parametrize("step", ["stage weights", "stage config", "rename weights",
                                  "rename config"])
def test_a_save_killed_at_any_write_leaves_the_old_model_or_a_clear_refusal(
        pairs_fit, tmp_path, monkeypatch, step):
    import os

    import skcontrast
    from skcontrast._estimators import _persist

    folder = tmp_path / "m"
    old = ContrastiveEmbedder(**SMALL_FIT).fit(pairs_fit[0])
    old.save(folder)
    new = ContrastiveEmbedder(**{**SMALL_FIT, "random_state": 1}).fit(pairs_fit[0])
    calls = {"stage": 0, "rename": 0}
    stage, rename = _persist.stage_file, os.replace
    kind, index = step.split()[0], {"weights": 1, "config": 2}[step.split()[1]]

    def counted(real, name):
        def call(*args):
            calls[name] += 1
            if name == kind and calls[name] == index:
                raise _Kill(step)
            return real(*args)
        return call

    monkeypatch.setattr(_persist, "stage_file", counted(stage, "stage"))
    monkeypatch.setattr(_persist.os, "replace", counted(rename, "rename"))
    with pytest.raises(_Kill):
        new.save(folder)
    monkeypatch.undo()
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    if step == "rename config":  # new weights beside the old configuration
        with pytest.raises(ValueError, match="interrupted save, or two saves"):
            skcontrast.load(folder)
    else:
        np.testing.assert_array_equal(skcontrast.load(folder).transform(pairs_fit[0]),
                                      old.transform(pairs_fit[0]))


def test_two_saves_racing_never_load_as_a_mixed_model(pairs_fit, tmp_path):
    import json

    import skcontrast

    a = ContrastiveEmbedder(**SMALL_FIT).fit(pairs_fit[0])
    b = ContrastiveEmbedder(**{**SMALL_FIT, "random_state": 1}).fit(pairs_fit[0])
    a.save(tmp_path / "a")
    b.save(tmp_path / "b")
    mixed = tmp_path / "mixed"  # a's weights published, then b's configuration
    mixed.mkdir()
    (mixed / "model.safetensors").write_bytes((tmp_path / "a" / "model.safetensors")
                                              .read_bytes())
    (mixed / "config.json").write_text((tmp_path / "b" / "config.json").read_text())
    assert json.loads((mixed / "config.json").read_text())["weights_sha256"]
    with pytest.raises(ValueError, match="checksums differ"):
        skcontrast.load(mixed)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_load_refuses_non_finite_weights_naming_the_tensor(saved_model, tmp_path, value):
    import skcontrast

    _, folder = saved_model

    def poison(tensors):
        name = next(k for k in sorted(tensors) if k.startswith("module."))
        tensors[name].view(-1)[0] = value

    with pytest.raises(ValueError, match=r"the saved tensor 'module\..*' holds NaN or "
                                         "infinite"):
        skcontrast.load(_copy(folder, tmp_path, weights=poison))


def test_load_refuses_optimizer_state_of_the_wrong_shape(saved_model, tmp_path):
    import skcontrast

    _, folder = saved_model

    def reshape(tensors):
        name = next(k for k in sorted(tensors) if k.startswith("optimizer.") and
                    k.endswith("exp_avg"))
        tensors[name] = torch.zeros(tensors[name].numel() + 3)

    with pytest.raises(ValueError, match=r"saved optimizer state 'optimizer\.\d+\.exp_avg' "
                                         r"has shape"):
        skcontrast.load(_copy(folder, tmp_path, weights=reshape))


def test_optimizer_groups_declaring_more_parameters_than_the_file_holds_are_refused(
        saved_model, tmp_path):
    # a group's declared size became a list of that many indices before any check
    _, folder = saved_model

    def edit(config):
        config["fitted"]["optimizer"]["param_groups"][0]["size"] = 10**6

    with pytest.raises(ValueError, match=r"the optimizer's param groups declare 1000000 or "
                                         r"more parameters, but the saved model holds \d+ "
                                         r"tensors"):
        skcontrast.load(_copy(folder, tmp_path, edit))


@pytest.mark.parametrize("edit", [
    lambda c: c["params"].update(hidden_layer_sizes={"tuple": [2**31]}),
    lambda c: c["params"].update(n_components=2**30),
    lambda c: c["fitted"].update(n_samples=2**40),
], ids=["hidden width", "n_components", "memory size"])
def test_declared_sizes_are_compared_before_anything_is_allocated(pairs_fit, tmp_path, edit):
    import resource
    import time

    import skcontrast
    from skcontrast.memory import SogCLRMemory

    folder = tmp_path / "m"
    ContrastiveEmbedder(**SMALL_FIT, memory=SogCLRMemory()).fit(pairs_fit[0]).save(folder)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"the saved tensor '(module|criterion)\..*' has "
                                         r"shape .* but the saved parameters build it"):
        skcontrast.load(_copy(folder, tmp_path, edit))
    assert time.perf_counter() - start < 5
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 500


def test_the_estimator_class_is_found_by_its_qualified_name(saved_model, tmp_path):
    import skcontrast

    _, folder = saved_model

    class ContrastiveEmbedder(skcontrast.ContrastiveEmbedder):  # same bare name, later
        pass

    loaded = skcontrast.load(folder)
    assert type(loaded) is skcontrast.ContrastiveEmbedder
    copy = _copy(folder, tmp_path, lambda c: c.update({"class": "ContrastiveEmbedder"}))
    with pytest.raises(ValueError, match="unknown estimator class 'ContrastiveEmbedder'"):
        skcontrast.load(copy)


@pytest.mark.parametrize("name", ["config.json", "model.safetensors"])
def test_links_that_leave_the_folder_are_refused(saved_model, tmp_path, name):
    import skcontrast

    _, folder = saved_model
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    copy = tmp_path / "linked"
    copy.mkdir()
    for file in ("config.json", "model.safetensors"):
        (outside if file == name else copy).joinpath(file).write_bytes(
            (folder / file).read_bytes())
    (copy / name).symlink_to(outside / name)
    with pytest.raises(ValueError, match="outside the model folder"):
        skcontrast.load(copy)
    inside = tmp_path / "inside"  # a link within the folder is fine
    inside.mkdir()
    for file in ("config.json", "model.safetensors"):
        (inside / file).write_bytes((folder / file).read_bytes())
    (inside / name).rename(inside / f"real-{name}")
    (inside / name).symlink_to(inside / f"real-{name}")
    skcontrast.load(inside)


@pytest.mark.parametrize("where, value, named", [
    (("params", "selector"), {"estimator": "skcontrast.selectors._basic."
                              "ShuffledBatchSelector", "params": {"dict": {"bogus": 1}}},
     "selector"),
    (("params", "selector"), {"tuple": [[[[[[[[[[1]]]]]]]]]] * 1}, "selector"),
    (("fitted", "attributes", "classes_"), {"array": ["zz"], "dtype": "|S1",
                                            "encoding": "hex"}, "classes_"),
    (("fitted", "attributes", "classes_"), {"array": [1, 2, 3], "dtype": "<i8",
                                            "shape": [2, 2]}, "classes_"),
    (("fitted", "attributes", "classes_"), {"array": [2**80], "dtype": "<i8"}, "classes_"),
    (("params", "lr"), {"float": "a lot"}, "lr"),
    (("params", "lr"), "deep", "lr"),
])
def test_malformed_entries_are_errors_that_name_them(saved_model, tmp_path, where, value,
                                                     named):
    import skcontrast

    _, folder = saved_model

    def edit(config):
        target = config
        for key in where[:-1]:
            target = target.setdefault(key, {})
        target[where[-1]] = value

    copy = _copy(folder, tmp_path, edit)
    if value == "deep":  # nested lists beyond what a JSON reader recurses through
        text = (copy / "config.json").read_text()
        (copy / "config.json").write_text(text.replace('"deep"', "[" * 5000 + "]" * 5000))
    with pytest.raises(ValueError, match=rf"{named}|too deeply"):
        skcontrast.load(copy)


ROOT = Path(__file__).resolve().parents[1]


SMALL_FLOW = small_mlp(max_epochs=3)
pairs_flow = paired_gaussians(120)


class Encoder(_helpers.Encoder):
    """The shared encoder as a class of this module: the saved models below name
    ``test_persist.Encoder``, and a fresh process imports it from here."""


@pytest.mark.slow
def test_a_saved_model_loads_in_a_process_where_pickle_fails(pairs_flow, tmp_path):
    X, _ = pairs_flow
    est = ContrastiveEmbedder(Encoder, **{**SMALL_FLOW, "module__hidden": 8,
                                          "memory": SogCLRMemory(), "projection_head": "mlp",
                                          "loss": DCL(learn_temperature=True)}).fit(X)
    folder = est.save(tmp_path / "model")
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "expected.npy", est.transform(X))
    script = textwrap.dedent(f"""
        import pickle, sys
        def refuse(*args, **kwargs):
            raise RuntimeError("pickle was used")
        class Refusing(pickle.Unpickler):
            def load(self):
                refuse()
        pickle.load = pickle.loads = refuse
        pickle.Unpickler = Refusing
        sys.path.insert(0, {str(ROOT / 'tests')!r})
        import numpy as np
        import skcontrast
        from test_persist import Encoder
        est = skcontrast.load({str(folder)!r}, module=Encoder)
        X = np.load({str(tmp_path / 'X.npy')!r}, allow_pickle=False)
        np.testing.assert_allclose(est.transform(X), np.load({str(tmp_path / 'expected.npy')!r}),
                                   atol=1e-6)
        assert est.net_.memory_state.visited.all() and est.temperature_ != 0.1
        est.set_params(warm_start=True, max_epochs=1).fit(X)
        print("ok", len(est.history_))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["ok", "4"]


def test_loading_checks_versions_and_names_what_it_will_not_import(pairs_flow, tmp_path):
    X, _ = pairs_flow
    est = ContrastiveEmbedder(Encoder, **SMALL_FLOW).fit(X)
    folder = est.save(tmp_path / "m")
    with pytest.raises(ValueError, match=r"pass them to load, "
                                         r"skcontrast.load\(path, module=<test_persist.Encoder>"):
        skcontrast.load(folder)
    config = json.loads((folder / "config.json").read_text())
    config["versions"]["torch"] = "0.0.1"
    config["params"]["optimizer"] = {"import": "os.system"}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.warns(UserWarning, match=r"saved with torch 0.0.1 \(now"),\
            pytest.raises(ValueError, match=r"names 'os.system' for optimizer, which "
                                            r"skcontrast.load does not construct"):
        skcontrast.load(folder, module=Encoder)


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
    tensors = [v for v in (*net.module_.state_dict().values(),
                           *net.criterion_.state_dict().values())
               if isinstance(v, torch.Tensor)]  # not extra states (a selection's progress)
    for name in net._optimizers:
        for state in getattr(net, name + "_").state.values():
            tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
    return {t.untyped_storage().data_ptr() for t in tensors if t.numel()}


@pytest.mark.parametrize("make", [
    lambda: ContrastiveEmbedder(module=tiny_cnn(), loss=SymmetricInfoNCE(learn_temperature=True),
                                precision="float16", **SMALL_IMAGES),
    lambda: SupConEmbedder(module=tiny_cnn(), augmentation=GaussianNoise(0.1), **SMALL_IMAGES),
], ids=["contrastive", "supcon"])
def test_trained_tensors_are_pickled_only_inside_skorchs_device_mapped_state(digit_images, make):
    """skorch pickles its ``cuda_dependent_attributes_`` with a device map; a trained tensor
    pickled anywhere else (the bug: the encoder handed to skorch as ``module=``) is loaded
    without one, so a model fitted on a GPU would not load on a CPU-only machine. (The
    untrained template the user passed as ``module`` stays on the CPU.)"""
    images, y, _ = digit_images
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
def test_a_gpu_fitted_model_loads_transforms_and_trains_on_a_cpu_only_process(digit_images,
                                                                                tmp_path):
    """Fitted with device='cuda', unpickled where no GPU is: transform works; a warm start
    with device='cuda' is refused with a clear error (and changes nothing); with
    device='cpu' (or 'auto') it continues on the CPU."""
    images, _, _ = digit_images
    X = image_pairs(images)
    est = ContrastiveEmbedder(module=tiny_cnn(), device="cuda",
                              loss=SymmetricInfoNCE(learn_temperature=True),
                              **SMALL_IMAGES).fit(X)
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


# Every object a fit uses is saved, or refuses to train until it is passed back ----------

def _fit_objects():
    """How each object type of the package that a fit can use takes part in one: the
    estimator class, its parameters (the object in its slot) and the data. Built lazily
    (igraph, kornia and the text tools are imported only here)."""
    from skorch.callbacks import EpochTimer

    from skcontrast import AcceleratorCheckpoint, LazyAdam, images, losses, selectors, text
    from skcontrast import datasets as data

    rng = np.random.default_rng(0)
    pairs = rng.normal(size=(24, 2, 4)).astype(np.float32)
    y = np.arange(24) % 3
    pictures = rng.integers(0, 256, size=(24, 1, 8, 8), dtype=np.uint8)
    flat = rng.normal(size=(24, 64)).astype(np.float32)
    texts = [(w, w.upper()) for w in ["red heart", "cat face", "blue car", "sun", "moon",
                                      "star", "rain", "snow"] * 3]
    fixed = rng.normal(size=(24, 2, 4)).astype(np.float32)
    pair, label = ContrastiveEmbedder, SupConEmbedder
    on_pairs = lambda **p: (pair, p, pairs, None)  # noqa: E731
    on_labels = lambda **p: (label, p, pairs[:, 0], y)  # noqa: E731
    on_images = lambda **p: (pair, p, pictures, None)  # noqa: E731
    on_flat = lambda **p: (pair, p, flat, None)  # noqa: E731
    return {
        images.ImageAugmentation: on_images(augmentation=images.ImageAugmentation(degrees=5)),
        images.ImageEncoder: on_images(module=images.ImageEncoder,
                                       module__shape=(1, 8, 8), module__width=2),
        data.DigitAugmentation: (pair, {"augmentation": data.DigitAugmentation(),
                                        "module": data.digit_cnn},
                                 pictures.astype(np.float32) / 255, None),
        data.GaussianNoise: on_flat(augmentation=data.GaussianNoise(0.05)),
        data.RandomFeatureMask: on_flat(augmentation=data.RandomFeatureMask(0.1)),
        data.RandomShift: on_flat(augmentation=data.RandomShift()),
        data.Compose: on_flat(augmentation=data.Compose(data.GaussianNoise(0.05),
                                                        data.RandomShift())),
        text.HashingNgramTokenizer: (pair, {"tokenizer": text.HashingNgramTokenizer(
            n_features=2**10)}, texts, None),
        text.NgramBagEncoder: (pair, {"tokenizer": text.HashingNgramTokenizer(
            n_features=2**10), "module": text.NgramBagEncoder,
            "module__vocabulary_size": 2**10 + 1}, texts, None),
        selectors.BcSSelector: on_pairs(selector=selectors.BcSSelector(8)),
        selectors.BindingSelector: on_labels(selector=selectors.BindingSelector(
            selectors.ShuffledBatchSelector(8))),
        selectors.ClassBalancedSelector: on_labels(
            selector=selectors.ClassBalancedSelector(6, 2)),
        selectors.CommunityBatchSelector: on_pairs(
            selector=selectors.CommunityBatchSelector(8, p=2, q=6)),
        selectors.ExhaustiveBatchSelector: (pair, {"selector": selectors.
                                                   ExhaustiveBatchSelector(2)},
                                            pairs[:5], None),
        selectors.FixedBatchSelector: on_pairs(selector=selectors.FixedBatchSelector(8)),
        selectors.FullBatchSelector: on_pairs(selector=selectors.FullBatchSelector()),
        selectors.JESTSelector: on_pairs(selector=selectors.JESTSelector(
            8, n_chunks=2, reference=fixed)),
        selectors.OSGDSelector: on_pairs(selector=selectors.OSGDSelector(8, k=3, q=2)),
        selectors.PredefinedBatchSelector: on_pairs(selector=selectors.
                                                    PredefinedBatchSelector(
                                                        np.arange(24).reshape(3, 8))),
        selectors.RandomBatchSelector: on_pairs(selector=selectors.RandomBatchSelector(8)),
        selectors.RandomWalkBatchSelector: on_pairs(
            selector=selectors.RandomWalkBatchSelector(8, n_candidates=12,
                                                       n_neighbours=4)),
        selectors.RhoLossSelector: on_pairs(selector=selectors.RhoLossSelector(
            8, reference=fixed)),
        selectors.ScBSelector: on_pairs(selector=selectors.ScBSelector(8)),
        selectors.ShuffledBatchSelector: on_pairs(selector=selectors.ShuffledBatchSelector(8)),
        selectors.SpectralBatchSelector: on_pairs(selector=selectors.SpectralBatchSelector(
            8, chunk_size=24)),
        selectors.TemperedSelector: on_labels(selector=selectors.TemperedSelector(
            selectors.SpectralBatchSelector(8), random_share=0.25, max_same_label=4)),
        CrossBatchMemory: on_pairs(memory=CrossBatchMemory(16)),
        SogCLRMemory: on_pairs(memory=SogCLRMemory(0.5)),
        **{cls: on_pairs(loss=cls(temperature=0.2))
           for cls in (losses.DCL, losses.DHEL, losses.KCL, losses.DebiasedNCE,
                       losses.HardNegativeNCE, losses.InfoNCE, losses.NTXent, losses.SigLIP,
                       losses.SymmetricInfoNCE)},
        losses.SupCon: on_labels(loss=losses.SupCon(temperature=0.2)),
        losses.ContrastiveMargin: on_labels(loss=losses.ContrastiveMargin(0.3)),
        losses.FalseNegativeGuard: on_pairs(loss=losses.InfoNCE(
            false_negatives=losses.FalseNegativeGuard())),
        losses.FunctionLoss: on_pairs(loss=losses.FunctionLoss(info_nce)),
        LazyAdam: on_pairs(optimizer=LazyAdam, optimizer__betas=(0.8, 0.9)),
        WarmupCosine: on_pairs(lr_schedule=WarmupCosine(warmup_epochs=1)),
        EpochTimer: on_pairs(callbacks=[EpochTimer()]),
        AcceleratorCheckpoint: on_pairs(callbacks=[AcceleratorCheckpoint("unused")]),
    }


#: The package's classes that no fit takes as a parameter, and why.
NOT_FIT_OBJECTS = {
    "BatchSelector": "the selectors' base class", "CuratingSelector": "a base class",
    "BaseMemory": "the memories' base class", "Loss": "the losses' base class",
    "MemoryState": "a memory's state inside the net, saved with it (tested above)",
    "SelectorSampler": "made by the fit from its selector",
    "FitSettings": "what a fit hands its selector", "SampledBatch": "a sampler's output",
    "CurationBatch": "what a curating selector is handed", "Corollary21": "a result",
    "LossBatch": "a loss's input", "LossInputs": "a loss's input",
    "LossTerms": "a loss's output", "GrowingBatches": "the greedy selectors' scratch",
    "HybridRetriever": "built on a fitted estimator, with its own save",
    "ContrastiveEmbedder": "the estimators", "SupConEmbedder": "the estimators",
}


def _package_classes():
    """Every class the package's public modules define and export."""
    from skcontrast import (
        _estimators,
        datasets,
        images,
        losses,
        memory,
        selectors,
        text,
    )

    found = {}
    for module in (images, datasets, text, selectors, memory, losses, _estimators):
        names = getattr(module, "__all__", None) or [n for n in vars(module)
                                                     if not n.startswith("_")]
        for name in names:
            obj = getattr(module, name)
            if isinstance(obj, type) and obj.__module__.startswith("skcontrast"):
                found[obj.__name__] = obj
    return found


def test_every_object_type_of_the_package_has_a_fit_recipe():
    """A new class in a public module that a fit can use needs a recipe in
    :func:`_fit_objects` (so the next test covers it), or a reason here."""
    recipes = {cls.__name__ for cls in _fit_objects()}
    missing = sorted(set(_package_classes()) - recipes - set(NOT_FIT_OBJECTS))
    assert not missing, f"add a recipe in _fit_objects, or a reason in NOT_FIT_OBJECTS: " \
                        f"{missing}"


@pytest.mark.parametrize("kind", sorted(
    {*_package_classes(), "EpochTimer"} - set(NOT_FIT_OBJECTS)))
def test_every_object_a_fit_uses_is_saved_or_refuses_training_until_passed_back(
        kind, tmp_path):
    """Each object type in its slot: the loaded model holds an equal object (its saved
    form is the original's), or ``load`` refuses naming the keyword to pass it by, or
    the loaded model transforms and refuses to train until it is passed back; never
    ``None`` or a default in its place."""
    from skcontrast._estimators._encoding import Unsaved, encode_params

    if kind == "CommunityBatchSelector":
        pytest.importorskip("igraph")
    if kind == "DigitAugmentation":
        pytest.importorskip("kornia")
    recipes = {cls.__name__: recipe for cls, recipe in _fit_objects().items()}
    cls, params, X, y = recipes[kind]
    fit_params = {"max_epochs": 1, "random_state": 0, "n_components": 4,
                  "batch_size": None if "selector" in params else 8, **params}
    if "callbacks" in params:  # fitted without them (the accelerator's needs a launch)
        callbacks = fit_params.pop("callbacks")
        est = cls(**fit_params).fit(X, y).set_params(callbacks=callbacks)
    else:
        est = cls(**fit_params).fit(X, y)
    folder = est.save(tmp_path / "m")
    slot = next(iter(params))
    saved, named = encode_params(est)
    if slot in named and slot not in ("augmentation", "callbacks", "scoring"):
        with pytest.raises(ValueError, match=rf"skcontrast.load\(path, {slot}=<"):
            skcontrast.load(folder)
        return
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        loaded = skcontrast.load(folder)
    value = loaded.get_params(deep=False)[slot]
    if slot in named:
        assert isinstance(value, Unsaved)
        np.testing.assert_allclose(loaded.transform(X), est.transform(X), atol=1e-6)
        with pytest.raises(ValueError, match=rf"{slot} was .* pass it back before this "
                                             rf"model trains again"):
            loaded.set_params(warm_start=True).fit(X, y)
        return
    assert value is not None and not isinstance(value, Unsaved)
    again, _ = encode_params(loaded)
    assert {k: again[k] for k in params} == {k: saved[k] for k in params}


def test_a_pickled_fitted_estimator_holds_its_model_as_save_writes_it(tmp_path):
    """A pickle kept skorch's pickle of the net (torch's pickled modules and
    optimizer): one training state had two formats. It now holds the two files ``save``
    writes, as bytes, beside the parameters, rebuilt as ``load`` rebuilds them; so the
    pickle names no class but the estimator's, and a warm start from it continues as
    one from the saved folder does."""
    X, _ = make_paired_gaussians(64, 4, random_state=0)
    est = ContrastiveEmbedder(**SMALL).fit(X)
    data = pickle.dumps(est)

    named = []

    class Recording(pickle.Unpickler):
        def find_class(self, module, name):
            named.append(f"{module}.{name}")
            return super().find_class(module, name)

    restored = Recording(io.BytesIO(data)).load()
    assert named == ["skcontrast._estimators._contrastive.ContrastiveEmbedder"]
    state = est.__getstate__()
    assert "net_" not in state and "history_" not in state
    config = json.loads(state["_saved_model"][0])
    assert config["class"] == "skcontrast._estimators._contrastive.ContrastiveEmbedder"
    assert set(vars(restored)) == set(vars(est))
    np.testing.assert_array_equal(restored.transform(X), est.transform(X))

    est.save(tmp_path / "model")
    loaded = skcontrast.load(tmp_path / "model")
    for model in (restored, loaded):
        model.set_params(warm_start=True, max_epochs=2).fit(X)
    np.testing.assert_allclose(restored.transform(X), loaded.transform(X), atol=1e-6)
    assert len(restored.history_) == len(loaded.history_) == 4
