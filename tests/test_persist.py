"""est.save / skcontrast.load: a model folder runs nothing, and every saved model loads.

Numbered as the points of the trust issue (24) they cover.
"""

import functools
import json
import sys
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import skcontrast
from skcontrast import ContrastiveEmbedder, SupConEmbedder, WarmupCosine
from skcontrast._estimators._persist import allowed_objects
from skcontrast.datasets import GaussianNoise, digit_cnn, make_paired_gaussians
from skcontrast.memory import SogCLRMemory
from skcontrast.selectors import ClassBalancedSelector, OSGDSelector, ShuffledBatchSelector

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


# 1. A model folder runs nothing ---------------------------------------------------------

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


# 2. save never writes through a symlink ------------------------------------------------

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


# 15. A saved model either loads, or says what to pass ----------------------------------

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
    else:
        with pytest.warns(UserWarning, match=rf"{name} was .*pass {name}=\.\.\. to load"):
            assert skcontrast.load(folder).get_params()[name] is None
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


# 16. What a saved model keeps -----------------------------------------------------------

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
                                           "random_state": first.net_.seed}).fit(X)
    again = skcontrast.load(first.save(tmp_path / "m"))
    again.set_params(warm_start=True).fit(X)
    assert again.net_.selector.current_epoch == 4
    np.testing.assert_allclose(again.transform(X), uninterrupted.transform(X), atol=1e-6)


def test_the_librarys_own_digit_augmentation_is_restored(tmp_path):
    pytest.importorskip("kornia")
    from skcontrast.datasets import digit_augmentation, load_digit_images

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
    from skcontrast._estimators._net import without_row_caches

    X, _ = pairs
    other = X[::-1].copy()  # the same size, other rows in each position
    selector = _cached_selectors(X)["jest hard"]
    kw = {**SMALL, "selector": selector, "selection_pass": "cached"}
    half = ContrastiveEmbedder(**kw).fit(X)
    state = half.net_.training_state()
    assert state["selection"]["embeddings"] is None  # JEST's table is the selector's own
    assert state["selector_state"]["cache"]["learner"]["known"].all()
    stripped = ContrastiveEmbedder(**kw).fit(X)
    stripped.net_.load_training_state(without_row_caches(state))
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
