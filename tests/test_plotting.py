"""Tests of ``skcontrast.plotting``: the figures draw from fitted estimators and
measurements without a display."""


import matplotlib
import numpy as np
import pytest

from skcontrast import geometry as G
from skcontrast.datasets import make_paired_gaussians
from skcontrast.selectors import ShuffledBatchSelector


def test_plots_render_to_files(tmp_path):
    import matplotlib.pyplot as plt

    from skcontrast import plotting
    from skcontrast.selectors import ShuffledBatchSelector, SpectralBatchSelector

    ax = plotting.plot_gram(G.simplex_etf(8, 16), title="ETF")
    ax.figure.savefig(tmp_path / "gram.png")
    X = np.random.default_rng(0).normal(size=(64, 2, 8))
    ax = plotting.plot_batch_losses(X, {"shuffled": ShuffledBatchSelector(8, random_state=0),
                                        "spectral": SpectralBatchSelector(8, random_state=0)})
    ax.figure.savefig(tmp_path / "losses.png")
    history = [{"loss": 3 - 0.1 * i, "etf_gap": 1 / (i + 1)} for i in range(10)]
    ax = plotting.plot_history(history, keys=("loss", "etf_gap"))
    ax.figure.savefig(tmp_path / "history.png")
    plt.close("all")
    assert all((tmp_path / f).stat().st_size > 1000 for f in
               ("gram.png", "losses.png", "history.png"))


def test_plotting_without_matplotlib_names_the_extra(monkeypatch):
    import importlib
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    monkeypatch.delitem(sys.modules, "skcontrast.plotting", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'skcontrast\[plot\]'"):
        importlib.import_module("skcontrast.plotting")
    monkeypatch.delitem(sys.modules, "skcontrast.plotting", raising=False)


@pytest.fixture(scope="module")
def pairs():
    return make_paired_gaussians(96, 8, n_clusters=3, random_state=0)


def test_batch_loss_histograms_are_outlines_in_distinct_colours(pairs):

    matplotlib.use("Agg")
    from skcontrast.plotting import plot_batch_losses
    from skcontrast.selectors import FixedBatchSelector

    X, _ = pairs
    ax = plot_batch_losses(X, {"shuffled": ShuffledBatchSelector(16, random_state=0),
                               "fixed": FixedBatchSelector(16, random_state=0)})
    patches = [p for p in ax.patches if p.get_label() and not p.get_label().startswith("_")]
    assert len(patches) == 2
    assert not any(p.get_fill() for p in patches)
    assert patches[0].get_edgecolor() != patches[1].get_edgecolor()
