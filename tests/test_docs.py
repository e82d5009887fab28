"""The user guide: every Python code block runs on its own and Sphinx builds it without
warnings."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the user guide's code, run in a subprocess

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^( *)\.\. code-block:: python\n\n((?:\1   .*\n|\n)+)", re.MULTILINE)
SKIP = re.compile(r"\.\. not-run: .*\n\n$")  # an RST comment right before a block
# ``.. continues: <page>-<n>`` right before a block: it runs after that block's code
CONTINUES = re.compile(r"\.\. continues: (\S+)\n\n$")


def code_blocks() -> dict[str, str]:
    blocks = {}
    for page in sorted((ROOT / "docs").glob("*.rst")):
        text = page.read_text()
        for number, match in enumerate(BLOCK.finditer(text), start=1):
            if SKIP.search(text[:match.start()]):
                continue
            indent = len(match.group(1)) + 3
            code = "\n".join(line[indent:] for line in match.group(2).splitlines())
            after = CONTINUES.search(text[:match.start()])
            if after:
                code = blocks[after.group(1)] + "\n" + code
            blocks[f"{page.stem}-{number}"] = code
    return blocks


BLOCKS = code_blocks()
# One process runs every block, each in a fresh namespace (so a block that uses a name
# another block defined fails), in its own empty working directory; it runs once
# (conftest's ``run_once``), on the pytest-xdist worker that first asks, while the other
# worker goes on with other tests. One process, not one per worker: the imports the
# blocks need (torch, dask, lightning ...) cost seconds each time.
# After each block, what it left alive (the modules it imported) leaves the garbage
# collector's sight, as conftest does after collection: 3.5 s of collections became 2.
RUNNER = """
import gc, json, os, sys, tempfile, traceback, warnings
warnings.simplefilter("ignore")
blocks, results = json.load(sys.stdin), {}
for name, code in blocks.items():
    os.chdir(tempfile.mkdtemp())
    try:
        exec(compile(code, name, "exec"), {"__name__": "__main__"})
        results[name] = ""
    except BaseException:
        results[name] = traceback.format_exc()
    gc.collect()
    gc.freeze()
print(json.dumps(results))
"""


def outcomes() -> dict:
    """Each block's traceback (``""``: it ran)."""
    done = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(BLOCKS),
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "MPLBACKEND": "Agg"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", list(BLOCKS))
def test_doc_code_block_runs_on_its_own(name, run_once):
    results = run_once("docs", outcomes)
    assert "error" not in results, results.get("error")
    outcome = results[name]
    assert outcome == "", f"{BLOCKS[name]}\n---\n{outcome[-3000:]}"


@pytest.mark.skipif(importlib.util.find_spec("sphinx") is None
                    or importlib.util.find_spec("numpydoc") is None,
                    reason="the docs build needs the 'docs' extra (sphinx, numpydoc)")
def test_docs_build_without_warnings(tmp_path):
    """Nitpicky (-n): every cross-reference resolves, those into scikit-learn, torch and
    skorch through the local inventories of docs/_intersphinx, with no network; and the
    built pages link into those projects' documentation."""
    done = subprocess.run([sys.executable, "-m", "sphinx", "-n", "-W", "--keep-going", "-q",
                           "-b", "html", str(ROOT / "docs"), str(tmp_path / "html")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    pages = (tmp_path / "html" / "selectors.html").read_text()
    assert "https://scikit-learn.org/stable/modules/generated/sklearn.base.clone.html" in pages
