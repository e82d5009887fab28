"""Every script in ``examples/`` runs in its quick mode and writes what it promises."""

import json
import os
import shutil
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


class ExampleRuns:
    """The examples' quick runs in two background processes of one thread each, started
    as soon as the session knows it will test them (``conftest.py``), so that they run
    beside the tests before them rather than after; each process writes its results
    to a file."""

    def __init__(self) -> None:
        self.out = Path(tempfile.mkdtemp(prefix="skcontrast-examples-"))
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self.running = []
        for i in range(2):
            share = {s.name: str(s) for s in EXAMPLES[i::2]}
            stdout = open(self.out / f"stdout-{i}.txt", "w")  # noqa: SIM115 (closed in wait)
            stderr = open(self.out / f"stderr-{i}.txt", "w")  # noqa: SIM115
            process = subprocess.Popen(
                [sys.executable, "-c", RUNNER, json.dumps(share), str(self.out)],
                stdout=stdout, stderr=stderr, text=True, cwd=ROOT, env=env)
            self.running.append((process, stdout, stderr, i))

    def wait(self) -> dict:
        results = {}
        for process, stdout, stderr, i in self.running:
            code = process.wait(timeout=1200)
            stdout.close()
            stderr.close()
            assert code == 0, (self.out / f"stderr-{i}.txt").read_text()[-3000:]
            printed = (self.out / f"stdout-{i}.txt").read_text()
            results.update(json.loads(printed.strip().splitlines()[-1]))
        return results

    def stop(self) -> None:
        for process, stdout, stderr, _ in self.running:
            if process.poll() is None:
                process.kill()
                process.wait()
            stdout.close()
            stderr.close()
        shutil.rmtree(self.out, ignore_errors=True)


#: the session's runs (set by conftest.py when examples are among the tests)
STARTED: list[ExampleRuns] = []


@pytest.fixture(scope="module")
def example_runs():
    if not STARTED:  # this module imported another way: start them now
        STARTED.append(ExampleRuns())
    return STARTED[0].wait()


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_in_quick_mode(script, example_runs):
    run = example_runs[script.name]
    assert run["error"] == "", run["error"][-3000:]
    assert run["stdout"].strip()
