"""Figures of the papers: Gram heat maps, per-batch loss histograms, training curves.

Needs matplotlib (``pip install 'skcontrast[plot]'``). Every function draws on the given
``ax`` (or a new figure) and returns the Axes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._validation import as_numpy, describe

try:
    import matplotlib.pyplot as plt
except ImportError as exc:
    raise ImportError("skcontrast.plotting needs matplotlib; install the 'plot' extra: "
                      "pip install 'skcontrast[plot]'") from exc


def _axes(ax: Any) -> Any:
    if ax is None:
        _, ax = plt.subplots()
    return ax


def plot_gram(U: Any, V: Any = None, ax: Any = None, *, title: str | None = None,
              normalize: bool = True, cmap: str = "RdBu_r", colorbar: bool = True) -> Any:
    """Heat map of the inner products ``u_i . v_j`` (Sreenivasan et al. 2023,
    openreview.net/forum?id=7n2dNATSHeQ, Fig. 2, Cho et al. 2023, Fig. 4).

    Parameters
    ----------
    U : array-like of shape (n, d)
    V : array-like of shape (n, d), optional
        ``None`` plots ``U`` against itself.
    ax : matplotlib Axes, optional
    title : str, optional
    normalize : bool, default=True
        Unit-normalise rows, so the colour scale is the cosine in [-1, 1].
    cmap : str, default='RdBu_r'
    colorbar : bool, default=True

    Returns
    -------
    matplotlib.axes.Axes
    """
    U = as_numpy(U, "U").astype(float)
    V = U if V is None else as_numpy(V, "V").astype(float)
    if U.ndim != 2 or U.shape != V.shape:
        raise ValueError(f"U and V must be 2-D of the same shape; got {describe(U)} and "
                         f"{describe(V)}")
    if normalize:
        U = U / np.maximum(np.linalg.norm(U, axis=1, keepdims=True), 1e-12)
        V = V / np.maximum(np.linalg.norm(V, axis=1, keepdims=True), 1e-12)
    ax = _axes(ax)
    image = ax.imshow(U @ V.T, cmap=cmap, vmin=-1, vmax=1, interpolation="nearest")
    ax.set_xlabel("j (v)")
    ax.set_ylabel("i (u)")
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


def plot_batch_losses(X: Any, selectors: Mapping[str, Any], ax: Any = None, *,
                      y: Any = None, loss: Any = "symmetric_info_nce", bins: int = 30) -> Any:
    """Histograms of per-batch losses of several selectors on the same embeddings.

    Cho et al. 2023, arXiv:2307.05906, Fig. 3 / Fig. 5: one epoch of each selector is scored with
    ``loss`` and every adaptive selector score with it; harder selectors shift the
    histogram right.
    Each selector is drawn as an outline in its own colour, with its mean dashed.

    Parameters
    ----------
    X : array-like of shape (n, 2, d) or (n, d)
        Embeddings, as given to the selectors.
    selectors : mapping of name to BatchSelector
    ax : matplotlib Axes, optional
    y : array-like of shape (n,), optional
        Labels, for label losses and label-aware selectors.
    loss : Loss or str, default='symmetric_info_nce'
        A loss object of :mod:`skcontrast.losses` (or a name for its class with
        defaults): what the batches are scored with, and what adaptive selectors whose
        own ``loss`` is ``None`` select by.
    bins : int, default=30

    Returns
    -------
    matplotlib.axes.Axes
    """
    from ._validation import check_embeddings
    from .losses import make_loss

    X = check_embeddings(X)
    ax = _axes(ax)
    loss = make_loss(loss)
    scores = {name: loss.score_batches(X, selector.epoch_batches(X, y, loss=loss), y)
              for name, selector in selectors.items()}
    # a batch of one sample has no loss (NaN)
    scores = {name: values[np.isfinite(values)] for name, values in scores.items()}
    edges = np.histogram_bin_edges(np.concatenate(list(scores.values())), bins=bins)
    # outlines in distinct colours, so that overlapping histograms stay readable
    for i, (name, values) in enumerate(scores.items()):
        color = f"C{i}"
        ax.hist(values, bins=edges, histtype="step", linewidth=1.8, color=color,
                label=f"{name} (mean {values.mean():.3f})")
        ax.axvline(values.mean(), color=color, linestyle="--", linewidth=1)
    ax.set_xlabel(f"{loss} of a batch")
    ax.set_ylabel("batches")
    ax.legend()
    return ax


def _series(history: Any, key: str) -> np.ndarray:
    if isinstance(history, Mapping):
        return np.asarray(history[key], dtype=float)
    if hasattr(history, "history") and not isinstance(history, Sequence):
        return _series(history.history, key)
    return np.asarray([entry[key] for entry in history], dtype=float)


def plot_history(history: Any, keys: Sequence[str] = ("loss",), ax: Any = None, *,
                 xlabel: str = "epoch", logy: bool = False) -> Any:
    """Curves of recorded quantities (loss, gap, ...) against epochs or steps.

    Parameters
    ----------
    history : sequence of dicts, dict of sequences, or an object with ``.history``
        For example an estimator's ``history_`` or a simulation result.
    keys : sequence of str, default=('loss',)
        The first key uses the left axis, a second one a right axis.
    ax : matplotlib Axes, optional
    xlabel : str, default='epoch'
    logy : bool, default=False

    Returns
    -------
    matplotlib.axes.Axes
        The left axis.
    """
    if isinstance(keys, str):
        keys = (keys,)
    if not 1 <= len(keys) <= 2:
        raise ValueError(f"keys must name one or two series; got {keys!r}")
    ax = _axes(ax)
    axes = [ax, ax.twinx()] if len(keys) == 2 else [ax]
    colours = ["tab:blue", "tab:red"]
    for axis, key, colour in zip(axes, keys, colours, strict=False):
        values = _series(history, key)
        axis.plot(np.arange(1, len(values) + 1), values, color=colour, label=key)
        axis.set_ylabel(key, color=colour)
        if logy:
            axis.set_yscale("log")
    ax.set_xlabel(xlabel)
    return ax
