"""The repository's promises: the README's commands are the ones CI runs."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_commands():
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```bash\n(.*?)\n```", text, flags=re.S)


def test_readme_opens_with_two_commands():
    commands = readme_commands()
    assert len(commands) >= 2
    setup, tests = commands[0], commands[1]
    assert "pip install -q torch==2.13.0" in setup and "skcontrast" in setup
    assert tests.rstrip().endswith("python -m pytest")


def test_ci_runs_the_readme_test_command_verbatim():
    test_command = readme_commands()[1].strip()
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert test_command in ci_lines


def test_torch_is_installed_before_the_package_everywhere():
    for command in readme_commands()[:2]:
        assert command.index("torch==2.13.0") < command.index("pip install -q -e")


def test_the_demo_run_time_is_stated_the_same_everywhere():
    """README, quickstart and ``skcontrast demo --help`` say one measured thing."""
    from skcontrast._cli import build_parser

    said = "about a minute"
    help_text = " ".join(build_parser().format_help().split())
    sources = {"README.md": (ROOT / "README.md").read_text(),
               "docs/quickstart.rst": (ROOT / "docs" / "quickstart.rst").read_text(),
               "skcontrast --help": help_text}
    for where, text in sources.items():
        assert said in " ".join(text.lower().split()), where


def test_the_readme_and_quick_start_show_the_summary_the_demo_writes():
    """docs/_static/demo_table.txt is ``skcontrast-demo/table.txt`` of a full
    ``skcontrast demo`` (copy it there after a change that moves the numbers): the
    README shows it verbatim and the quick start includes that file; the demo's quick
    run (tests/test_cli_examples.py) checks that it still prints these columns."""
    stored = (ROOT / "docs" / "_static" / "demo_table.txt").read_text().rstrip("\n")
    assert f"```\n{stored}\n```" in (ROOT / "README.md").read_text()
    assert "literalinclude:: _static/demo_table.txt" in \
        (ROOT / "docs" / "quickstart.rst").read_text()
