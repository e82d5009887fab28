"""Every script in ``examples/`` runs in its quick mode and writes what it promises."""

import pytest
from _helpers import EXAMPLES

pytestmark = pytest.mark.slow  # the examples run in a subprocess


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_in_quick_mode(script, user_facing):
    run = user_facing["examples"][script.name]
    assert run["error"] == "", run["error"][-3000:]
    assert run["stdout"].strip()
