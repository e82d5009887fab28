"""Scale-out: data-parallel training with Accelerate (2 CPU processes, gloo), searches and
sharded selection under Dask."""

import importlib.util
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from _helpers import paired_gaussians, small_mlp
from sklearn.model_selection import GridSearchCV
from skorch.callbacks import Callback

from skcontrast import AcceleratorCheckpoint, ContrastiveEmbedder
from skcontrast.datasets import make_paired_embeddings, make_paired_gaussians
from skcontrast.model_selection import BalanceSearchCV
from skcontrast.selectors import (
    ShuffledBatchSelector,
    SpectralBatchSelector,
)

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "scripts"
sys.path.insert(0, str(SCRIPTS))

needs_accelerate = pytest.mark.skipif(importlib.util.find_spec("accelerate") is None,
                                      reason="needs the 'distributed' extra (accelerate)")
needs_dask = pytest.mark.skipif(importlib.util.find_spec("distributed") is None,
                                reason="needs the 'distributed' extra (dask[distributed])")


# --------------------------------------------------------------------------------------
# Accelerate: two processes train like one
# --------------------------------------------------------------------------------------

@needs_accelerate
@pytest.mark.parametrize("case", ["shuffled", "osgd, learned temperature",
                                  "supcon, spectral", "sogclr, learned temperature",
                                  "xbm, supcon", "micro-batches, sogclr",
                                  "jest, reference model", "rho, cached, supcon",
                                  "text, sparse updates", "stream, spectral"])
@pytest.mark.slow
def test_two_processes_make_the_single_process_update(two_process_results, case):
    """Each process trains on its half of every global batch; the embeddings are gathered
    with their gradients, so after two epochs the weights equal those of one process on
    the same global batches (the adaptive selectors see embeddings gathered shard by
    shard). A memory is updated from the gathered batch and its dataset indices, so its
    state is the single-process state on every process. With micro-batches (gradient
    caching on each process, gradients synchronised at the last one) the update is the
    plain single-process update. A curating selector keeps the rows one process keeps
    (every process embeds a slice of the super-batch, learner and reference, and all
    choose from the gathered embeddings), and each trains on its slice of them. On a
    stream each process reads its shard (every other row), and the shares gathered into
    one window make the update of one process on that window's rows."""
    from distributed_fit import fit, summary

    assert two_process_results["world"] == 2
    got = two_process_results["results"][case]
    expected = summary(fit(case, plain=True))
    assert got["n_batches"] == expected["n_batches"]
    assert got["kept"] == expected["kept"]
    assert got["sparse"] == expected["sparse"] == ([True] if case.startswith("text") else [])
    np.testing.assert_allclose(got["losses"], expected["losses"], rtol=1e-5)
    for name, weight in expected["weights"].items():
        torch.testing.assert_close(got["weights"][name], weight, rtol=1e-5, atol=1e-6)
    assert got["temperature"] == pytest.approx(expected["temperature"], rel=1e-5)
    assert_same_memory(got["memory"], expected["memory"])


def assert_same_memory(got, expected):
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(got[name], value, rtol=1e-6, atol=1e-6)
        else:
            assert got[name] == value


@pytest.mark.slow
@needs_accelerate
def test_a_resumed_checkpoint_continues_the_same_training(two_process_results):
    """One epoch, AcceleratorCheckpoint, a fresh estimator resumed for one more epoch:
    the weights of two uninterrupted epochs (the selector resumes at epoch 1), with the
    learned temperature and the memory restored."""
    from distributed_fit import fit, summary

    for case, resumed in (("shuffled", "resumed"),
                          ("sogclr, learned temperature", "resumed with memory")):
        got = two_process_results["results"][resumed]
        expected = summary(fit(case))
        assert got["n_batches"] == expected["n_batches"]
        for name, weight in expected["weights"].items():
            torch.testing.assert_close(got["weights"][name], weight, rtol=1e-5, atol=1e-6)
        assert got["temperature"] == pytest.approx(expected["temperature"], rel=1e-5)
        assert_same_memory(got["memory"], expected["memory"])


def assert_one_training_state(folder, net):
    """The checkpoint is the training state a warm start, a saved model and a pickle
    carry, in the saved model's format (safetensors and JSON, nothing pickled): every
    part reads back equal, and the float16 scaler (which a CPU cannot train) goes
    through the files as well."""
    from skcontrast._estimators._distributed import read_state
    from skcontrast._estimators._state import (
        PARTS,
        files_training_state,
        training_state_files,
    )

    assert sorted(p.name for p in folder.iterdir()) == [
        "skcontrast_state.json", "skcontrast_state.safetensors"]
    saved, live = read_state(folder), net.training_state()

    def same(a, b, where):
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=where)
        elif isinstance(a, dict):
            assert set(a) == set(b), where
            for key in a:
                same(a[key], b[key], f"{where}.{key}")
        elif isinstance(a, list | tuple):
            assert len(a) == len(b), where
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                same(x, y, f"{where}[{i}]")
        else:
            assert a == b or (a != a and b != b), (where, a, b)

    for part in ("module", "criterion", "history", "selector_epoch", "selector_state",
                 "selection", "grad_scaler"):
        same(saved[part], live[part], part)
    assert saved["optimizer_class"].endswith(live["optimizer_class"].__name__)
    same(saved["optimizer"]["state"], {int(k): v for k, v in
                                       live["optimizer"]["state"].items()}, "optimizer")
    assert {p.split("_")[0] for p in PARTS} <= {k.split("_")[0] for k in saved}
    scaler = torch.amp.GradScaler("cpu", init_scale=512.0).state_dict()
    tensors, fitted = training_state_files({**live, "grad_scaler": scaler})
    assert files_training_state(tensors, json.loads(json.dumps(fitted)))["grad_scaler"] \
        == scaler


@needs_accelerate
def test_one_process_with_an_accelerator_and_its_errors(tmp_path):
    from accelerate import Accelerator

    X, _ = make_paired_gaussians(64, 4, random_state=0)
    params = {"n_components": 3, "hidden_layer_sizes": (8,), "max_epochs": 2,
              "batch_size": 16, "random_state": 0, "device": "cpu"}
    accelerator = Accelerator(cpu=True)
    est = ContrastiveEmbedder(accelerator=accelerator,
                              callbacks=[AcceleratorCheckpoint(tmp_path / "state")],
                              **params).fit(X)
    plain = ContrastiveEmbedder(**params).fit(X)
    np.testing.assert_allclose(est.transform(X), plain.transform(X), atol=1e-6)
    assert (tmp_path / "state" / "skcontrast_state.json").exists()
    assert_one_training_state(tmp_path / "state", est.net_)
    restored = pickle.loads(pickle.dumps(est))  # the accelerator is not pickled
    assert restored.accelerator is None
    np.testing.assert_array_equal(restored.transform(X), est.transform(X))
    with pytest.raises(ValueError, match=r"precision='float16' disagrees with the "
                                         r"accelerator's mixed_precision='no'"):
        ContrastiveEmbedder(accelerator=accelerator, precision="float16", **params).fit(X)
    with pytest.raises(ValueError, match=r"accelerator must be an accelerate\.Accelerator"):
        ContrastiveEmbedder(accelerator="gpu", **params).fit(X)
    with pytest.raises(ValueError, match="AcceleratorCheckpoint needs an estimator with "
                                         "accelerator="):
        ContrastiveEmbedder(callbacks=[AcceleratorCheckpoint(tmp_path / "x")],
                            **params).fit(X)


@needs_accelerate
@pytest.mark.parametrize("kind", ["jest", "spectral"])
def test_a_resumed_checkpoint_keeps_the_cached_selection_embeddings(tmp_path, kind):
    # the embeddings the steps computed (a curating selector's table, or the net's for an
    # adaptive selector) are part of the state: resuming re-embedded every row
    from accelerate import Accelerator

    from skcontrast.selectors import JESTSelector, SpectralBatchSelector

    X, _ = make_paired_gaussians(64, 4, random_state=0)
    selector = JESTSelector(8, 0.5, score="hard") if kind == "jest" else \
        SpectralBatchSelector(16)
    params = {"n_components": 3, "hidden_layer_sizes": (8,), "random_state": 0,
              "device": "cpu", "selector": selector, "selection_pass": "cached"}
    whole = ContrastiveEmbedder(accelerator=Accelerator(cpu=True), max_epochs=3,
                                **params).fit(X)
    ContrastiveEmbedder(accelerator=Accelerator(cpu=True), max_epochs=2,
                        callbacks=[AcceleratorCheckpoint(tmp_path / "s")], **params).fit(X)
    resumed = ContrastiveEmbedder(accelerator=Accelerator(cpu=True), max_epochs=1,
                                  callbacks=[AcceleratorCheckpoint(tmp_path / "s",
                                                                   resume=True)],
                                  **params).fit(X)
    np.testing.assert_allclose(resumed.transform(X), whole.transform(X), atol=1e-6)


@needs_accelerate
def test_a_resumed_checkpoint_refuses_another_data_sets_memory(tmp_path):
    from accelerate import Accelerator

    from skcontrast.memory import SogCLRMemory

    X, _ = make_paired_gaussians(96, 4, random_state=0)
    params = {"n_components": 3, "hidden_layer_sizes": (8,), "max_epochs": 1, "loss": "dcl",
              "batch_size": 16, "random_state": 0, "device": "cpu",
              "memory": SogCLRMemory(), "accelerator": Accelerator(cpu=True)}
    ContrastiveEmbedder(callbacks=[AcceleratorCheckpoint(tmp_path / "s")], **params).fit(X)
    with pytest.raises(ValueError, match="holds a memory of 96 samples, but this fit has "
                                         "a memory of 50 samples"):
        ContrastiveEmbedder(callbacks=[AcceleratorCheckpoint(tmp_path / "s", resume=True)],
                            **params).fit(X[:50])


BF16_THROUGH_ACCELERATE = """
import numpy as np
from accelerate import Accelerator
from skcontrast import ContrastiveEmbedder
from skcontrast.datasets import make_paired_gaussians

X, _ = make_paired_gaussians(128, 6, random_state=0)
params = dict(n_components=3, hidden_layer_sizes=(16,), max_epochs=3, batch_size=32,
              random_state=0, device="cpu")
accelerated = ContrastiveEmbedder(accelerator=Accelerator(cpu=True, mixed_precision="bf16"),
                                  **params).fit(X)
autocast = ContrastiveEmbedder(precision="bfloat16", **params).fit(X)
a, b = (np.array(e.history_[:, "train_loss"]) for e in (accelerated, autocast))
assert np.isfinite(a).all() and a[-1] < a[0], a
np.testing.assert_allclose(a, b, rtol=1e-6)
print("ok")
"""


@pytest.mark.slow
@needs_accelerate
def test_mixed_precision_goes_through_the_accelerator():
    """Accelerator(mixed_precision='bf16') trains as precision='bfloat16' does without
    one. Accelerate's state is per process and cannot change once set, hence the
    subprocess."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", BF16_THROUGH_ACCELERATE],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


# --------------------------------------------------------------------------------------
# Dask: searches and sharded selection on a cluster
# --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dask_client():
    """A cluster of one worker process with two threads: tasks cross a process boundary
    (pickled both ways), for the cost of one process's imports (a second worker process
    added about 10 CPU-s to the suite and nothing a test checks). The sharded selection's
    tasks run two at once; a search's fits take turns on torch's generator (the
    estimators warn), which the results must not depend on."""
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True,
                                       dashboard_address=None)
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


def _drop_times(results):
    return {k: v for k, v in results.items() if "time" not in k}


def _assert_same_results(a, b):
    a, b = _drop_times(a), _drop_times(b)
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], np.ndarray) and a[key].dtype.kind == "f":
            np.testing.assert_allclose(a[key], b[key], rtol=1e-6, err_msg=key)
        else:
            assert list(a[key]) == list(b[key]), key


@pytest.mark.slow
@needs_dask
def test_grid_and_balance_searches_under_the_dask_backend(dask_client):
    from joblib import parallel_backend

    X, _ = make_paired_gaussians(120, 5, random_state=0)
    flat = X.reshape(len(X), -1)
    est = ContrastiveEmbedder(n_components=3, hidden_layer_sizes=(8,), max_epochs=2,
                              selector=ShuffledBatchSelector(16), random_state=0,
                              device="cpu")
    grid = {"loss__temperature": [0.1, 0.5], "loss__lambda_ent": [0.5, 1.0]}
    local = GridSearchCV(est, grid, cv=2, n_jobs=1).fit(flat)
    with parallel_backend("dask"):
        remote = GridSearchCV(est, grid, cv=2, n_jobs=-1).fit(flat)
    _assert_same_results(local.cv_results_, remote.cv_results_)
    balance = {"estimator": est, "cv": 2, "budget": 5}
    local = BalanceSearchCV(n_jobs=1, **balance).fit(flat)
    with parallel_backend("dask"):
        remote = BalanceSearchCV(n_jobs=-1, **balance).fit(flat)
    _assert_same_results(local.cv_results_, remote.cv_results_)


@pytest.mark.slow
@needs_dask
def test_sharded_spectral_selection_is_the_same_for_any_jobs_and_backend(dask_client):
    from joblib import parallel_backend

    X, _ = make_paired_embeddings(1600, 16, random_state=0)
    params = {"chunk_size": 320, "random_state": 3}

    def epochs(**extra):
        selector = SpectralBatchSelector(32, **params, **extra)
        return [[b.tolist() for b in selector.split(X)] for _ in range(2)]

    one = epochs(n_jobs=1)
    assert epochs(n_jobs=2) == one  # loky processes
    with parallel_backend("dask"):
        assert epochs(n_jobs=-1) == one  # the Dask workers


SMALL = small_mlp()
pairs = paired_gaussians(96)


class FailAt(Callback):
    def __init__(self, epoch):
        self.epoch = epoch

    def on_epoch_end(self, net, **kwargs):
        if len(net.history) == self.epoch:
            raise RuntimeError("injected failure")


@pytest.mark.slow
def test_a_failed_fit_hands_the_accelerator_back_and_resume_is_checked(pairs, tmp_path):
    pytest.importorskip("accelerate")
    from accelerate import Accelerator

    from skcontrast import AcceleratorCheckpoint
    from skcontrast._estimators._distributed import META

    X, _ = pairs
    accelerator = Accelerator(cpu=True)
    for _ in range(2):  # every failure used to leak one model
        with pytest.raises(RuntimeError, match="injected failure"):
            ContrastiveEmbedder(**{**SMALL, "accelerator": accelerator,
                                   "callbacks": [FailAt(1)]}).fit(X)
    assert accelerator._models == [] and accelerator._optimizers == []
    folder = tmp_path / "ckpt"
    good = ContrastiveEmbedder(**{**SMALL, "accelerator": accelerator,
                                  "callbacks": [AcceleratorCheckpoint(folder)]}).fit(X)
    resumed = ContrastiveEmbedder(**{**SMALL, "max_epochs": 1, "accelerator": accelerator,
                                     "callbacks": [AcceleratorCheckpoint(folder, resume=True)]}
                                  ).fit(X)
    assert len(resumed.history_) == 3 and len(good.history_) == 2
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        ContrastiveEmbedder(**{**SMALL, "accelerator": accelerator, "callbacks": [
            AcceleratorCheckpoint(tmp_path / "missing", resume=True)]}).fit(X)
    (folder / META).write_text('{"selector_epoch": "two"}')
    with pytest.raises(ValueError, match=r"ckpt/skcontrast_state.json is not a valid"):
        ContrastiveEmbedder(**{**SMALL, "accelerator": accelerator, "callbacks": [
            AcceleratorCheckpoint(folder, resume=True)]}).fit(X)
    (folder / META).write_text("{not json")
    with pytest.raises(ValueError, match="is not a valid checkpoint state"):
        ContrastiveEmbedder(**{**SMALL, "accelerator": accelerator, "callbacks": [
            AcceleratorCheckpoint(folder, resume=True)]}).fit(X)


def test_the_state_file_replaces_a_symlink_instead_of_following_it(tmp_path):
    from skcontrast._estimators._distributed import write_replacing

    target = tmp_path / "elsewhere.txt"
    target.write_text("precious")
    link = tmp_path / "state.json"
    link.symlink_to(target)
    write_replacing(link, b"{}")
    assert target.read_text() == "precious"
    assert not link.is_symlink() and link.read_text() == "{}"

