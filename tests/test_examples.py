"""Every script in ``examples/`` runs in its quick mode and writes what it promises."""

import pytest

from _helpers import EXAMPLES, run_user_facing

pytestmark = pytest.mark.slow  # each example runs in a subprocess


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_in_quick_mode(script, run_once):
    runs = run_once("user-facing", run_user_facing)
    assert "error" not in runs, runs.get("error")
    run = runs["examples"][script.name]
    assert run["error"] == "", run["error"][-3000:]
    assert run["stdout"].strip()
