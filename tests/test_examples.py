"""Every script in ``examples/`` runs in its quick mode and writes what it promises."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each example runs in a subprocess

ROOT = Path(__file__).resolve().parents[1]


EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


RUNNER = """
import contextlib, io, json, runpy, sys, traceback, warnings
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
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def example_runs(tmp_path_factory):
    """Every example's printout and error, from two processes of one thread each that
    share the examples (small models gain little from a second thread, and the two
    processes take the machine's two cores)."""
    from concurrent.futures import ThreadPoolExecutor

    out = str(tmp_path_factory.mktemp("examples"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

    def run(share):
        return subprocess.run(
            [sys.executable, "-c", RUNNER, json.dumps({s.name: str(s) for s in share}), out],
            capture_output=True, text=True, cwd=ROOT, timeout=1200, env=env)

    results = {}
    with ThreadPoolExecutor(2) as pool:
        for done in pool.map(run, [EXAMPLES[i::2] for i in range(2)]):
            assert done.returncode == 0, done.stderr[-3000:]
            results.update(json.loads(done.stdout.strip().splitlines()[-1]))
    return results


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_in_quick_mode(script, example_runs):
    run = example_runs[script.name]
    assert run["error"] == "", run["error"][-3000:]
    assert run["stdout"].strip()
