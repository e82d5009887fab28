"""The training workflow: held-out monitoring, heads and backbones, freezing, schedules,
nested parameters, data sources, saving without pickle, devices."""

import json
import math
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from skorch.callbacks import Callback, Checkpoint, EarlyStopping, LRScheduler
from torch import nn

import skcontrast
from skcontrast import ContrastiveEmbedder, SupConEmbedder, WarmupCosine
from skcontrast.datasets import GaussianNoise, load_digit_images, make_paired_gaussians
from skcontrast.losses import DCL
from skcontrast.memory import SogCLRMemory
from skcontrast.selectors import ShuffledBatchSelector

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"n_components": 4, "hidden_layer_sizes": (16,), "max_epochs": 3, "lr": 1e-2,
         "random_state": 0, "device": "cpu"}


@pytest.fixture(scope="module")
def pairs():
    return make_paired_gaussians(120, 8, n_clusters=3, random_state=0)


# 1. Held-out monitoring ----------------------------------------------------------------

def test_valid_loss_is_the_same_loss_on_fixed_held_out_batches(pairs):
    """With nothing learned (lr tiny), the held-out loss is the same every epoch, also
    with random augmentations: the batches and their random views are fixed."""
    X, _ = pairs
    for extra, data in (({}, X), ({"augmentation": GaussianNoise(0.3)}, X[:, 0])):
        est = ContrastiveEmbedder(**{**SMALL, "lr": 1e-12, "validation_fraction": 0.25,
                                     **extra}).fit(data)
        losses = est.history_[:, "valid_loss"]
        assert len(losses) == 3 and np.allclose(losses, losses[0], rtol=1e-6)
        assert {b["valid_batch_size"] for b in est.history_[-1, "batches"]
                if "valid_batch_size" in b} <= {30, 32}
    trained = ContrastiveEmbedder(**{**SMALL, "validation_fraction": 0.25}).fit(X)
    assert trained.history_[-1, "valid_loss"] < trained.history_[0, "valid_loss"]


class SeenBySelector(Callback):
    def on_epoch_begin(self, net, **kwargs):
        self.n = len(net.training_data) if net.training_data is not None else None


def test_held_out_rows_never_reach_the_selector_or_the_memory(pairs):
    from conftest import RecordingSelector

    X, _ = pairs
    est = ContrastiveEmbedder(**{**SMALL, "loss": "dcl", "memory": SogCLRMemory(),
                                 "selector": RecordingSelector(ShuffledBatchSelector(16)),
                                 "validation_fraction": 0.25}).fit(X)
    assert est.net_.memory_state.n_samples == 90 == est.n_samples_
    seen = {i for epoch in est.net_.selector.seen_ for batch in epoch for i in batch}
    assert seen == set(range(90))  # indices of the 90 training rows only


def test_skorch_callbacks_work_with_their_default_monitors(pairs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    X, y = pairs
    est = SupConEmbedder(**{**SMALL, "max_epochs": 30, "lr": 0.5, "optimizer": "sgd",
                            "validation_fraction": 0.2, "scoring": "ncc_accuracy",
                            "callbacks": [EarlyStopping(patience=2), Checkpoint(),
                                          LRScheduler("ReduceLROnPlateau")]})
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*(stopped|interrupt)")  # a normal stop
        est.fit(X[:, 0], y)
    history = est.history_
    assert len(history) < 30  # EarlyStopping stopped it
    assert all(np.isfinite(history[:, "valid_loss"]))
    assert all(0 <= s <= 1 for s in history[:, "valid_score"])
    assert (tmp_path / "params.pt").exists()  # Checkpoint saved on valid_loss_best


def test_x_val_and_the_errors_of_held_out_settings(pairs):
    X, y = pairs
    est = SupConEmbedder(**{**SMALL, "scoring": "ncc_accuracy"}).fit(
        X[:90, 0], y[:90], X_val=X[90:, 0], y_val=y[90:])
    assert len(est.history_[:, "valid_score"]) == 3
    with pytest.raises(ValueError, match="EarlyStopping watches 'valid_loss', which needs "
                                         "held-out data"):
        ContrastiveEmbedder(**{**SMALL, "callbacks": [EarlyStopping()]}).fit(X)
    with pytest.raises(ValueError, match="scoring records a score of held-out data"):
        ContrastiveEmbedder(**{**SMALL, "scoring": "recall@1"}).fit(X)
    with pytest.raises(ValueError, match="either X_val or validation_fraction"):
        ContrastiveEmbedder(**{**SMALL, "validation_fraction": 0.2}).fit(X, X_val=X)
    with pytest.raises(ValueError, match="needs y_val with X_val"):
        SupConEmbedder(**SMALL).fit(X[:, 0], y, X_val=X[:, 0])
    with pytest.raises(ValueError, match="validation_fraction must be None or a number"):
        ContrastiveEmbedder(**{**SMALL, "validation_fraction": 1.5}).fit(X)
    with pytest.raises(ValueError, match="compares the two views of pairs"):
        SupConEmbedder(**{**SMALL, "scoring": "recall@1", "validation_fraction": 0.2}).fit(
            X[:, 0], y)


# 2. Heads, backbones, freezing ---------------------------------------------------------

class Encoder(nn.Module):
    """A class that takes the sizes the estimator knows, and a width of its own."""

    def __init__(self, n_in, n_out, hidden=16):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_in, hidden), nn.BatchNorm1d(hidden), nn.ReLU())
        self.out = nn.Linear(hidden, n_out)

    def forward(self, x):
        return self.out(self.body(x))


def test_projection_head_backbone_features_and_widths(pairs):
    pytest.importorskip("pandas")
    X, _ = pairs
    est = ContrastiveEmbedder(Encoder, **{**SMALL, "n_components": 6, "module__hidden": 12,
                                          "projection_head": 10,
                                          "transform_from": "backbone"}).fit(X)
    assert est.net_.module_.encoders[0].body[0].out_features == 12
    head = est.net_.module_.heads[0]
    assert (head[0].in_features, head[0].out_features, head[2].out_features) == (6, 10, 6)
    backbone, projected = est.transform(X), est.transform_head(X)
    np.testing.assert_allclose(backbone, est.transform_backbone(X))
    assert not np.allclose(np.linalg.norm(backbone, axis=1), 1)  # raw features
    np.testing.assert_allclose(np.linalg.norm(projected, axis=1), 1, rtol=1e-5)
    wide = ContrastiveEmbedder(nn.Linear(8, 20), **{**SMALL, "projection_head": "mlp",
                                                    "transform_from": "backbone"}).fit(X)
    assert wide.n_components_ == 20 and len(wide.get_feature_names_out()) == 20
    frame = wide.set_output(transform="pandas").transform(X)
    assert frame.shape == (120, 20)
    assert wide.transform_head(X).shape == (120, 4)  # its own column names


def test_freezing_keeps_weights_and_batch_norm_statistics(pairs):
    X, _ = pairs
    pretrained = Encoder(8, 4)
    before = {k: v.clone() for k, v in pretrained.state_dict().items()}
    est = ContrastiveEmbedder(pretrained, **{**SMALL, "projection_head": "mlp",
                                             "freeze": ["body"]}).fit(X)
    after = est.net_.module_.encoders[0].state_dict()
    for name in ("body.0.weight", "body.1.running_mean", "body.1.running_var"):
        torch.testing.assert_close(after[name], before[name])  # weights and statistics
    assert not torch.equal(after["out.weight"], before["out.weight"])
    probe = ContrastiveEmbedder(pretrained, **{**SMALL, "projection_head": 8,
                                               "freeze": "backbone"}).fit(X)
    for name, value in probe.net_.module_.encoders[0].state_dict().items():
        torch.testing.assert_close(value, before[name])
    with pytest.raises(ValueError, match=r"freeze names 'layer9'.*parts are"):
        ContrastiveEmbedder(pretrained, **{**SMALL, "freeze": ["layer9"]}).fit(X)


def test_per_group_learning_rates(pairs):
    X, _ = pairs
    est = ContrastiveEmbedder(Encoder, **{**SMALL, "projection_head": 8, "lr": 1e-3,
                                          "optimizer__param_groups": [
                                              ("heads.*", {"lr": 1e-1})]}).fit(X)
    rates = sorted(group["lr"] for group in est.net_.optimizer_.param_groups)
    assert rates == [1e-3, 1e-1]


# 3. Schedules --------------------------------------------------------------------------

class Rates(Callback):
    def initialize(self):
        self.rates = []
        return self

    def on_batch_begin(self, net, training=False, **kwargs):
        if training:
            self.rates.append(net.optimizer_.param_groups[0]["lr"])


def test_warmup_cosine_steps_per_batch(pairs):
    X, _ = pairs
    rates = Rates()
    est = ContrastiveEmbedder(**{**SMALL, "max_epochs": 4, "lr": 0.1, "batch_size": 30,
                                 "lr_schedule": WarmupCosine(warmup_epochs=1),
                                 "callbacks": [rates]}).fit(X)
    total, warm = 16, 4
    expected = [0.1 * (t + 1) / warm if t < warm else
                0.1 * 0.5 * (1 + math.cos(math.pi * (t - warm) / (total - warm - 1)))
                for t in range(total)]
    np.testing.assert_allclose(rates.rates[1:], expected[1:], rtol=1e-9)
    assert est.history_[-1, "lr"] == pytest.approx(expected[-1])
    with pytest.raises(ValueError, match="warmup_epochs must be a non-negative, finite number"):
        ContrastiveEmbedder(**{**SMALL, "lr_schedule": WarmupCosine(-1)}).fit(X)


# 4. Nested parameters ------------------------------------------------------------------

def test_module_and_optimizer_parameters_are_tunable(pairs):
    X, _ = pairs
    est = ContrastiveEmbedder(Encoder, **{**SMALL, "module__hidden": 8,
                                          "optimizer__weight_decay": 1e-3})
    assert clone(est).get_params()["module__hidden"] == 8
    search = GridSearchCV(est, {"module__hidden": [4, 8], "optimizer__weight_decay": [0, 1e-2]},
                          cv=2).fit(X)
    assert set(search.best_params_) == {"module__hidden", "optimizer__weight_decay"}
    fitted = search.best_estimator_
    assert fitted.net_.optimizer_.param_groups[0]["weight_decay"] == \
        search.best_params_["optimizer__weight_decay"]
    assert fitted.net_.module_.encoders[0].out.out_features == 4  # n_components reached it
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['colour'\]"):
        ContrastiveEmbedder(colour="red", **SMALL).fit(X)
    with pytest.raises(ValueError, match="set both as optimizer__\\* and in optimizer_params"):
        ContrastiveEmbedder(optimizer__eps=1e-6, optimizer_params={"eps": 1e-7}, **SMALL).fit(X)
    with pytest.raises(ValueError, match="go to a module class or factory"):
        ContrastiveEmbedder(nn.Linear(8, 4), module__bias=False, **SMALL).fit(X)


# 5. Data sources -----------------------------------------------------------------------

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
        est = SupConEmbedder(**SMALL).fit(Folder(images, y, crops))  # labels from the items
        np.testing.assert_array_equal(est.classes_, np.unique(y))
        assert est.transform(images).shape == (160, 4)
    single = torch.utils.data.TensorDataset(torch.from_numpy(images))
    est = ContrastiveEmbedder(augmentation=GaussianNoise(0.1), **SMALL).fit(single)
    np.testing.assert_allclose(est.transform(single), est.transform(images), atol=1e-6)


def test_uint8_images_become_floats_on_the_device(digits):
    images, _ = digits
    raw = np.round(images * 255).astype(np.uint8)
    mean, std = 0.3, 0.4
    by_bytes = ContrastiveEmbedder(augmentation=GaussianNoise(0.1),
                                   image_normalization=(mean, std), **SMALL).fit(raw)
    assert by_bytes.input_spec_.views[0].integer is False  # images, not token ids
    by_floats = ContrastiveEmbedder(augmentation=GaussianNoise(0.1), **SMALL).fit(
        (raw / np.float32(255) - mean) / std)
    np.testing.assert_allclose(by_bytes.transform(raw),
                               by_floats.transform((raw / np.float32(255) - mean) / std),
                               atol=1e-5)
    with pytest.raises(ValueError, match="image_normalization must be"):
        ContrastiveEmbedder(augmentation=GaussianNoise(0.1), image_normalization=(0.5,),
                            **SMALL).fit(raw)


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
        ContrastiveEmbedder(**SMALL).fit(np.lib.format.open_memmap(tmp_path / "bad.npy"))


def test_a_randomly_initialised_timm_model_trains_on_images(digits):
    """timm needs torchvision, and this project's package index has no CPU build of it
    (see the README): the test runs where both are installed."""
    pytest.importorskip("torchvision", reason="timm needs a torchvision matching torch; "
                                              "none is installable here")
    timm = pytest.importorskip("timm")
    images, _ = digits

    def resnet(n_in, n_out):
        body = timm.create_model("resnet10t", pretrained=False, in_chans=1, num_classes=0)
        return nn.Sequential(body, nn.Linear(body.num_features, n_out))

    est = ContrastiveEmbedder(module=resnet, augmentation=GaussianNoise(0.1), **SMALL)
    assert est.fit(images).transform(images).shape == (160, 4)


def test_a_transformers_text_encoder_takes_its_view_as_keyword_arguments():
    transformers = pytest.importorskip("transformers")
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 30, size=(64, 8))
    mask = (np.arange(8) < rng.integers(3, 9, size=64)[:, None]).astype(np.int64)
    config = transformers.BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32,
                                     max_position_embeddings=8)

    class Pooled(nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = transformers.BertModel(config)

        def forward(self, input_ids, attention_mask):
            return self.bert(input_ids=input_ids,
                             attention_mask=attention_mask).last_hidden_state[:, 0]

    pairs = {"a": {"input_ids": ids, "attention_mask": mask},
             "b": {"input_ids": ids[:, ::-1].copy(), "attention_mask": mask[:, ::-1].copy()}}
    est = ContrastiveEmbedder(module=Pooled(), **{**SMALL, "micro_batch_size": 8}).fit(pairs)
    assert len(est.net_.module_.encoders) == 1  # alike views share the encoder
    assert est.transform(pairs).shape == (64, 16)
    assert est.transform_view(pairs["b"], view="b").shape == (64, 16)


# 7. Saving without pickle --------------------------------------------------------------

@pytest.mark.slow
def test_a_saved_model_loads_in_a_process_where_pickle_fails(pairs, tmp_path):
    X, _ = pairs
    est = ContrastiveEmbedder(Encoder, **{**SMALL, "module__hidden": 8,
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
        from test_workflow import Encoder
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


def test_loading_checks_versions_and_names_what_it_will_not_import(pairs, tmp_path):
    X, _ = pairs
    est = ContrastiveEmbedder(Encoder, **SMALL).fit(X)
    folder = est.save(tmp_path / "m")
    with pytest.raises(ValueError, match=r"pass them to load, "
                                         r"skcontrast.load\(path, module=<test_workflow.Encoder>"):
        skcontrast.load(folder)
    config = json.loads((folder / "config.json").read_text())
    config["versions"]["torch"] = "0.0.1"
    config["params"]["optimizer"] = {"import": "os.system"}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.warns(UserWarning, match=r"saved with torch 0.0.1 \(now"), \
            pytest.raises(ValueError, match=r"names 'os.system' for optimizer, which "
                                            r"skcontrast.load does not construct"):
        skcontrast.load(folder, module=Encoder)


# 8. Devices ----------------------------------------------------------------------------

@pytest.mark.skipif(getattr(torch.backends, "mps", None) is not None
                    and torch.backends.mps.is_available(), reason="an MPS device is here")
def test_mps_without_an_apple_gpu_is_a_clear_error(pairs):
    X, _ = pairs
    with pytest.raises(ValueError, match="device='mps' was requested but no Apple GPU"):
        ContrastiveEmbedder(**{**SMALL, "device": "mps"}).fit(X)
