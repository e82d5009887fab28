"""Every script in ``examples/`` runs in its quick mode and writes what it promises."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each example runs in a subprocess

ROOT = Path(__file__).resolve().parents[1]


EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


RUNNER = """
import contextlib, gc, io, json, runpy, sys, traceback, warnings
import matplotlib
matplotlib.use("Agg")
scripts, out, results = json.loads(sys.argv[1]), sys.argv[2], {}
for name, path in scripts.items():
    sys.argv = [path, "--quick", "--out", f"{out}/{name}"]
    printed, error = io.StringIO(), ""
    with warnings.catch_warnings():
        try:
            with contextlib.redirect_stdout(printed):
                runpy.run_path(path, run_name="__main__")
        except SystemExit as exit:
            if exit.code not in (None, 0):
                error = f"exit status {exit.code}"
        except BaseException:
            error = traceback.format_exc()
    results[name] = {"stdout": printed.getvalue(), "error": error}
    gc.collect()
    gc.freeze()  # what the script left alive leaves the collector's sight (as conftest)
print(json.dumps(results))
"""


def run_all() -> dict:
    """Every script in its quick mode, one after the other in one subprocess of one
    thread (Python, torch and the package are imported once); its results by script
    name. Under pytest-xdist it runs once (conftest's ``run_once``), on the worker that
    first asks, while the other worker goes on with other tests."""
    scripts = {s.name: str(s) for s in EXAMPLES}
    with tempfile.TemporaryDirectory(prefix="skcontrast-examples-") as out:
        done = subprocess.run(
            [sys.executable, "-c", RUNNER, json.dumps(scripts), out],
            capture_output=True, text=True, cwd=ROOT, timeout=1200,
            env={**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_in_quick_mode(script, run_once):
    runs = run_once("examples", run_all)
    assert "error" not in runs, runs.get("error")
    run = runs[script.name]
    assert run["error"] == "", run["error"][-3000:]
    assert run["stdout"].strip()
