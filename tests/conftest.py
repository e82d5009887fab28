"""Shared pytest configuration: hypothesis profiles, threads, and fixtures.

The helpers test modules import (``RecordingSelector``, ``random_data``, ``TEXT_FIT``,
``requires_cuda`` ...) live in ``_helpers.py``: this module is imported by pytest-xdist's
controller too, which runs no test, so it imports nothing heavy at module level (torch,
scikit-learn and hypothesis took 6 CPU-s there, before the workers started)."""

import os
from pathlib import Path

import pytest


def pytest_configure(config):
    """Settings of a process that runs tests (an xdist worker, or pytest with ``-n 0``);
    the xdist controller, which runs none, only the first."""
    import skcontrast  # its __init__ imports nothing heavy (PEP 562)

    # The suite tests the package it imports: under .ci/run, the installed wheel. A
    # Python subprocess started in the repository would import the source tree instead
    # (its working directory heads sys.path), so when the package is not the source
    # tree, subprocesses (the xdist workers the controller starts among them) are told
    # to leave that directory out (PYTHONSAFEPATH, Python >= 3.11).
    if not Path(skcontrast.__file__).resolve().is_relative_to(ROOT / "skcontrast"):
        os.environ["PYTHONSAFEPATH"] = "1"
    worker = hasattr(config, "workerinput")
    if config.getoption("numprocesses", None) and not worker:
        return
    # The imports and the collection make millions of objects that live to the end;
    # the automatic collections they trigger found no garbage (a collection of the suite
    # took 8.6 CPU-s with them, 6.4 without). Collection resumes, and those objects are
    # frozen, once collection ends (``pytest_collection_finish``).
    import gc

    gc.disable()
    # Under pytest-xdist (the project's default: ``-n auto``) each worker has a core to
    # itself: one thread per worker, for torch, for the BLAS numpy and SciPy load, and for
    # the subprocesses tests start (torch's and OpenBLAS's threads spin-wait, and two
    # workers of two threads each on two cores ran the suite several times slower). The
    # variable is set before torch's import loads numpy's OpenBLAS, which reads it once
    # (it had two threads in each worker); threadpoolctl limits any a plugin loaded
    # before. Run alone (``-n 0``), a process uses up to two.
    if worker:
        os.environ["OMP_NUM_THREADS"] = "1"
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    import torch

    torch.set_num_threads(1 if worker else min(2, torch.get_num_threads()))

    from hypothesis import HealthCheck, settings

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


def pytest_collection_modifyitems(session, config, items):
    """Tests that read a shared subprocess run (conftest's ``run_once``: the torchrun
    launch, the user guide's blocks with the examples and the docs build) come first. The
    project runs pytest-xdist's ``worksteal`` schedule (``pyproject.toml``), which hands
    each worker a contiguous half of this order: the first worker starts those runs at
    once and waits on them, one after the other, while the second goes through its half;
    whichever ends first takes half of the other's remaining tests. Under the ``load``
    schedule both workers were handed tests of those runs early, and the second one
    waited for the first's run (a core idle for a minute), or the runs started late and
    ended the suite alone."""
    items.sort(key=lambda item: "run_once" not in getattr(item, "fixturenames", ()))


def pytest_collection_finish(session):
    """What the imports and the collection made (torch, scikit-learn, the test modules:
    millions of objects, all alive to the end) leaves the garbage collector's sight
    (``gc.freeze``): a full collection, the estimators' own when Accelerate frees an
    accelerator, the tests' and the automatic ones, then walks only what tests make.
    In the quick suite the workers' collections took 13 s, not 19 s. Objects a test
    makes are collected as before; a frozen one is never freed, and nothing frozen here
    is garbage. The automatic collections, off while modules were imported (see
    ``pytest_configure``), resume here."""
    import gc

    gc.enable()
    gc.collect()
    gc.freeze()


ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def text_pairs():
    """48 (text, its upper-case variant) pairs of 12 short texts: the text model's data."""
    words = ["red heart", "cat face", "thumbs up", "blue car", "green tree", "sun",
             "moon", "star", "rain cloud", "snow man", "fire", "water wave"]
    return [(w, w.upper() + "!") for w in words * 4]


@pytest.fixture(scope="module")
def digit_images():
    """96 digit images (n, 1, 8, 8), their labels, and caption-like token ids (n, 6)."""
    import numpy as np

    from skcontrast.datasets import load_digit_views

    _, y, images = load_digit_views(return_images=True)
    images, y = images[:96, None], y[:96]
    rng = np.random.default_rng(0)
    tokens = np.concatenate([y[:, None] + 10, rng.integers(0, 10, size=(96, 5))], axis=1)
    return images, y, tokens.astype(np.int64)


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
def user_facing(run_once):
    """What ``_helpers.run_user_facing`` returned: the user guide's blocks, the examples'
    quick runs and the docs build, from one subprocess run once per session, whichever
    worker asks first (tests/test_docs.py, tests/test_examples.py)."""
    from _helpers import run_user_facing

    results = run_once("user-facing", run_user_facing)
    assert "error" not in results, results.get("error")
    return results


@pytest.fixture(scope="session")
def two_process_results(run_once, tmp_path_factory):
    """What tests/scripts/distributed_fit.py saved from one torchrun launch of two CPU
    processes (gloo): the data-parallel fits of test_distributed.py and the sampler's
    slices of test_sampler.py. Launched once per session, whichever worker asks first."""
    import subprocess
    import sys

    import torch

    def launch():
        out = tmp_path_factory.mktemp("ddp") / "results.pt"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), os.environ.get("PYTHONPATH", "")]), "OMP_NUM_THREADS": "1"}
        done = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone",
             "--nproc_per_node=2", str(ROOT / "tests" / "scripts" / "distributed_fit.py"),
             str(out)], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
        return str(out)

    path = run_once("two-processes", launch)
    assert not isinstance(path, dict), path["error"]
    return torch.load(path, weights_only=False)
