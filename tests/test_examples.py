"""Every script in ``examples/`` runs in its quick mode and writes what it promises."""

import json
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
    scripts = {script.name: str(script) for script in EXAMPLES}
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(scripts),
         str(tmp_path_factory.mktemp("examples"))],
        capture_output=True, text=True, cwd=ROOT, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_in_quick_mode(script, example_runs):
    run = example_runs[script.name]
    assert run["error"] == "", run["error"][-3000:]
    assert run["stdout"].strip()
