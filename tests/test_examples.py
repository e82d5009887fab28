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


#: the examples run in two processes of one thread each, every script of a share in the
#: same process (Python, torch and the package are imported once per share); under
#: pytest-xdist each share runs once (conftest's ``run_once``), on the worker that
#: first asks for it, beside the other tests
SHARES = 2


def share_of(script: Path) -> int:
    return EXAMPLES.index(script) % SHARES


def run_share(share: int) -> dict:
    """Every script of one share in its quick mode, in one subprocess; its results
    by script name."""
    scripts = {s.name: str(s) for s in EXAMPLES if share_of(s) == share}
    with tempfile.TemporaryDirectory(prefix="skcontrast-examples-") as out:
        done = subprocess.run(
            [sys.executable, "-c", RUNNER, json.dumps(scripts), out],
            capture_output=True, text=True, cwd=ROOT, timeout=1200,
            env={**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_in_quick_mode(script, run_once):
    share = share_of(script)
    runs = run_once(f"examples-{share}", lambda: run_share(share))
    assert "error" not in runs, runs.get("error")
    run = runs[script.name]
    assert run["error"] == "", run["error"][-3000:]
    assert run["stdout"].strip()
