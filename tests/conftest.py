"""Shared pytest configuration: hypothesis profiles and device helpers."""

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings

import skcontrast
from skcontrast.datasets import load_digit_views, make_paired_embeddings
from skcontrast.selectors import BatchSelector
from skcontrast.text import HashingNgramTokenizer

# Bounded, derandomised examples keep CI fast and free of flakiness; use
# HYPOTHESIS_PROFILE=dev locally for a deeper search.
settings.register_profile(
    "ci",
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("dev", max_examples=300, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Under pytest-xdist (the project's default: ``-n auto``) each worker has a core to
# itself: one thread per worker, for torch here and for the subprocesses tests start
# (torch's threads spin-wait, and two workers of two threads each on two cores ran the
# suite several times slower). Run alone (``-n 0``), a process uses up to two threads.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
else:
    torch.set_num_threads(min(2, torch.get_num_threads()))

# The suite tests the package it imports: under .ci/run, the installed wheel. A Python
# subprocess started in the repository would import the source tree instead (its working
# directory heads sys.path), so when the package is not the source tree, subprocesses are
# told to leave that directory out (PYTHONSAFEPATH, Python >= 3.11).
ROOT = Path(__file__).resolve().parents[1]
if not Path(skcontrast.__file__).resolve().is_relative_to(ROOT / "skcontrast"):
    os.environ["PYTHONSAFEPATH"] = "1"

CUDA = torch.cuda.is_available()
requires_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU; none is usable here")


class RecordingSelector(BatchSelector):
    """Delegates to another selector and keeps, per epoch, the shape of what it was shown
    (``shapes_``), the loss it was handed to score with (``losses_``) and the batches it
    chose (``seen_``)."""

    def __init__(self, inner=None):
        self.inner = inner

    @property
    def needs_embeddings(self):
        return self.inner.needs_embeddings

    @property
    def current_epoch(self):
        return self.inner.current_epoch

    def set_epoch(self, epoch):
        self.inner.set_epoch(epoch)
        return self

    def epoch_batches(self, X, y=None, groups=None, *, loss=None):
        batches = self.inner.epoch_batches(X, y, groups, loss=loss)
        self.losses_ = [*getattr(self, "losses_", []), loss]
        self.shapes_ = [*getattr(self, "shapes_", []), np.shape(X)]
        self.seen_ = [*getattr(self, "seen_", []), [b.tolist() for b in batches]]
        return batches

    def _n_batches(self, n, y):
        return self.inner.get_n_splits(n, y)


def random_data(n=192, d=8, seed=0):
    """Random pairs ``(n, 2, d)`` and labels of 6 classes: data with no structure."""
    X = np.random.default_rng(seed).normal(size=(n, 2, d)).astype(np.float32)
    return X, np.random.default_rng(seed + 1).integers(6, size=n)


def clustered_data(n=192, d=8, seed=0):
    """Pairs in 6 clusters and their cluster labels: data with structure to find."""
    return make_paired_embeddings(n, d, n_groups=6, noise=0.5, random_state=seed)


def brute_top(X, m):
    """Each row's m nearest other rows by cosine similarity, in float64 with a full sort."""
    u = X[:, 0].astype(np.float64)
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    sims = u @ u.T
    np.fill_diagonal(sims, -np.inf)
    return np.argsort(-sims, axis=1, kind="stable")[:, :m]


@pytest.fixture(scope="session")
def text_pairs():
    """48 (text, its upper-case variant) pairs of 12 short texts: the text model's data."""
    words = ["red heart", "cat face", "thumbs up", "blue car", "green tree", "sun",
             "moon", "star", "rain cloud", "snow man", "fire", "water wave"]
    return [(w, w.upper() + "!") for w in words * 4]


@pytest.fixture(scope="module")
def digit_images():
    """96 digit images (n, 1, 8, 8), their labels, and caption-like token ids (n, 6)."""
    _, y, images = load_digit_views(return_images=True)
    images, y = images[:96, None], y[:96]
    rng = np.random.default_rng(0)
    tokens = np.concatenate([y[:, None] + 10, rng.integers(0, 10, size=(96, 5))], axis=1)
    return images, y, tokens.astype(np.int64)


#: A small, reproducible fit of the default text model (a 2^12-id bag).
TEXT_FIT = {"max_epochs": 2, "batch_size": 8, "random_state": 0, "device": "cpu",
            "tokenizer": HashingNgramTokenizer(n_features=2**12)}


@pytest.fixture(scope="session")
def run_once(tmp_path_factory):
    """``run_once(key, fn)``: ``fn()``'s JSON result, computed once per session, however
    many pytest-xdist workers ask (the first one runs it, under a file lock, and the
    others read its result). A failure is kept too (``{"error": traceback}``), so it is
    reported by each test that asks, not run again."""
    import json
    import traceback

    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by the workers
    root = root / "run-once"
    root.mkdir(exist_ok=True)

    def once(key, fn):
        path = root / f"{key}.json"
        with FileLock(str(path) + ".lock"):
            if not path.exists():
                try:
                    result = fn()
                except Exception:
                    result = {"error": traceback.format_exc()}
                path.write_text(json.dumps(result))
        return json.loads(path.read_text())

    return once


@pytest.fixture(scope="session")
def two_process_results(run_once, tmp_path_factory):
    """What tests/scripts/distributed_fit.py saved from one torchrun launch of two CPU
    processes (gloo): the data-parallel fits of test_distributed.py and the sampler's
    slices of test_sampler.py. Launched once per session, whichever worker asks first."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]

    def launch():
        out = tmp_path_factory.mktemp("ddp") / "results.pt"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(root), os.environ.get("PYTHONPATH", "")]), "OMP_NUM_THREADS": "1"}
        done = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone",
             "--nproc_per_node=2", str(root / "tests" / "scripts" / "distributed_fit.py"),
             str(out)], capture_output=True, text=True, timeout=300, env=env, cwd=root)
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
        return str(out)

    path = run_once("two-processes", launch)
    assert not isinstance(path, dict), path["error"]
    return torch.load(path, weights_only=False)
