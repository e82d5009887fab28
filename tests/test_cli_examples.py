"""The demo, the command line, the example scripts and the documentation build."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from skcontrast._cli import main
from skcontrast._demo import COLUMNS, run_demo

# subprocesses: examples, the command line, the docs (see pyproject: -m "not slow")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def test_demo_quick_has_every_column_and_beats_the_cca_baseline(tmp_path):
    result = run_demo(tmp_path, quick=True, report=lambda *args: None)
    table = result.table()
    for column in COLUMNS:
        assert column in table
    names = [row["method"] for row in result.rows]
    assert names == ["shuffled", "fixed", "OSGD (k=8, q=4)", "spectral", "ScB",
                     "SupCon, shuffled", "SupCon, fixed + binding"]
    shuffled = result.rows[0]
    recall = 0.5 * (shuffled["R@1 u->v"] + shuffled["R@1 v->u"])
    assert recall > result.baseline  # a real comparison: the CCA baseline is fitted here
    assert all(row["NCC acc."] > 0.9 for row in result.rows[5:])
    simclr = {row["representation"]: row for row in result.simclr_rows}
    assert list(simclr) == ["raw pixels", "PCA (32)", "SimCLR CNN, 8 epochs"]
    learned = simclr["SimCLR CNN, 8 epochs"]
    assert learned["kNN acc."] > 0.8 and learned["linear probe"] > 0.8  # chance is 0.1
    assert "SimCLR on the digit images" in (tmp_path / "table.txt").read_text()
    text = {row["search"]: row for row in result.text_rows}
    assert list(text) == ["TF-IDF, character 2-4-grams", "ContrastiveEmbedder, 3 epochs",
                          "hybrid: learned + TF-IDF (weight 0.5)"]
    # strings in: the learned search beats TF-IDF across languages, even briefly trained
    assert text["ContrastiveEmbedder, 3 epochs"]["R@1"] > \
        text["TF-IDF, character 2-4-grams"]["R@1"] + 0.2
    assert "Text: English emoji names" in (tmp_path / "table.txt").read_text()
    assert all(Path(p).stat().st_size > 10_000 for p in result.figures)
    written = (tmp_path / "table.txt").read_text()
    assert written == result.summary() and written.startswith(table.splitlines()[0])

    def layout(text):  # the column headers and the CCA line without its number
        return [" ".join((line.rsplit(" ", 1)[0] if line.startswith("CCA") else line).split())
                for line in text.splitlines()
                if "method" in line or "representation" in line or line.startswith("CCA")
                or line.strip().startswith("search")]

    # the README's table (docs/_static/demo_table.txt) has the columns the demo prints
    assert layout(written) == layout((ROOT / "docs" / "_static" / "demo_table.txt").read_text())
    assert "fit s" in result.timing() and "fit s" not in written  # times apart


def test_synthetic_command(tmp_path, capsys, monkeypatch):
    from matplotlib.figure import Figure

    saved = []
    original = Figure.savefig

    def keep(fig, *args, **kwargs):
        saved.append(fig)
        return original(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    code = main(["synthetic", "--n", "4", "--d", "8", "--steps", "20", "--seeds", "1",
                 "--out", str(tmp_path)])
    [fig] = saved
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    for ax in fig.axes:  # every panel title inside the figure, none cut off at the top
        box = ax.title.get_window_extent(renderer)
        assert box.y1 <= fig.bbox.y1 and box.x0 >= fig.bbox.x0 - 1
    out = capsys.readouterr().out
    assert code == 0
    for method in ("full batch", "all C(N,B)", "fixed", "shuffled", "OSGD", "spectral",
                   "BcS", "ScB"):
        assert method in out
    assert (tmp_path / "synthetic_gram_N4_d8.png").exists()


def test_python_dash_m_runs_the_cli():
    done = subprocess.run([sys.executable, "-m", "skcontrast", "--help"], capture_output=True,
                          text=True, check=True)
    for command in ("demo", "synthetic", "bench"):
        assert command in done.stdout


# One process runs every example's --quick run in turn (torch and the rest are imported
# once, not once per script), each as ``__main__`` in a fresh namespace with its own
# arguments and output folder; a failure is recorded and the next example still runs.
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
