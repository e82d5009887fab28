"""Tests of ``skcontrast._demo``: the quick demo prints every column of its table and
its trained embedder beats the CCA baseline."""

from pathlib import Path

import pytest
import torch
from threadpoolctl import threadpool_limits

from skcontrast._demo import COLUMNS, run_demo

pytestmark = pytest.mark.slow  # the demo trains a model

ROOT = Path(__file__).resolve().parents[1]


def test_demo_quick_has_every_column_and_beats_the_cca_baseline(tmp_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the kept quick table was made (a sum's order moves digits)
    try:
        with threadpool_limits(1):
            result = run_demo(tmp_path, quick=True, report=lambda *args: None)
    finally:
        torch.set_num_threads(threads)
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
    images = {row["representation"]: row for row in result.image_rows}
    assert list(images) == ["raw pixels", "PCA (32)", "untrained default (pixel prior)",
                            "ContrastiveEmbedder(), 8 epochs"]
    learned = images["ContrastiveEmbedder(), 8 epochs"]
    assert learned["kNN acc."] > 0.9 and learned["linear probe"] > 0.9  # chance is 0.1
    assert images["untrained default (pixel prior)"]["kNN acc."] > 0.9  # the prior alone
    assert "Images in: the digit images" in (tmp_path / "table.txt").read_text()
    for pairs in ("same script", "other scripts"):  # a row of each search per pair set
        text = {row["search"].split(",")[0]: row for row in result.text_rows
                if row["pairs"] == pairs}
        assert list(text) == ["TF-IDF", "ContrastiveEmbedder", "hybrid"]
        assert text["hybrid"]["search"].endswith("(auto)")
        # strings in: the learned search beats TF-IDF, in either script, briefly trained
        assert text["ContrastiveEmbedder"]["R@1"] > text["TF-IDF"]["R@1"] + 0.2
    assert "Text: English emoji names" in (tmp_path / "table.txt").read_text()
    assert all(Path(p).stat().st_size > 10_000 for p in result.figures)
    written = (tmp_path / "table.txt").read_text()
    assert written == result.summary() and written.startswith(table.splitlines()[0])

    def layout(text):  # the column headers and the CCA line without its number
        return [" ".join((line.rsplit(" ", 1)[0] if line.startswith("CCA") else line).split())
                for line in text.splitlines()
                if "method" in line or "representation" in line or line.startswith("CCA")
                or ("search" in line and "nDCG" in line)]

    # the README's table (docs/_static/demo_table.txt) has the columns the demo prints
    assert layout(written) == layout((ROOT / "docs" / "_static" / "demo_table.txt").read_text())
    # and the quick run prints the quick table kept beside it, to the last digit (run
    # `skcontrast demo --quick --threads 1` and copy its table.txt there, and the full
    # demo's into demo_table.txt and the README, after a change that moves the numbers)
    assert written == (ROOT / "docs" / "_static" / "demo_table_quick.txt").read_text()
    assert "fit s" in result.timing() and "fit s" not in written  # times apart
