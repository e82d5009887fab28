"""Direct optimisation of unit-norm embeddings: the unconstrained-features model.

The papers study contrastive losses by optimising the embeddings themselves, free of
any network: Sreenivasan et al. 2023, openreview.net/forum?id=7n2dNATSHeQ, Sec. 5 and Cho et al.
2023, arXiv:2307.05906, Sec. 6.1 for pairs ``(U, V)``, Kini et al. 2023, arXiv:2306.07960, Sec. 4
(UFM+, non-negative features) for labelled ``H``.
:func:`optimize_embeddings` runs that experiment with any batch selector and any loss of
:mod:`skcontrast.losses`.

What a step is
--------------
Cho et al. 2023, Appendix C writes every method as: choose mini-batch(es), take a gradient step
on their loss, re-normalise each embedding (Alg. 4-7). Here, with ``update='batch'``
(default), **one step is one gradient update on one batch** yielded by the selector
(Alg. 5 "SGD without replacement" with one batch per update for the partition
selectors, Alg. 4/6 for random and OSGD candidates). Epochs are consecutive ``split``
calls, and adaptive selectors see the current embeddings at the start of each epoch,
so OSGD with ``candidates='random', n_groups=1, q=1`` re-selects before every step
(Alg. 6, "top-1 batch per iteration" of Sreenivasan et al. 2023). With ``update='epoch'``, one step
is one gradient update on the mean loss of *all* batches of an epoch: gradient descent on
the mini-batch objective of Cho et al. 2023, Eq. 4 (full batch, all ``C(N, B)`` batches, or a
fixed subset, Fig. 4 b-d).

Beyond the batch
----------------
``memory=`` (:mod:`skcontrast.memory`) lets each step's loss see more than its batch:
:class:`~skcontrast.memory.SogCLRMemory` replaces every anchor's mini-batch estimate of
its denominator by a moving average over its visits, the correction with which SogCLR
aims at the full-batch objective. :func:`memory_methods` asks, in the papers' setting,
whether it closes the gap that fixed, shuffled and OSGD batches leave to the ETF.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from sklearn.base import clone

from . import geometry
from ._validation import check_choice, check_int, check_positive, describe, encode_labels
from .losses import Loss, LossBatch, make_loss
from .selectors import (
    BatchSelector,
    BcSSelector,
    ExhaustiveBatchSelector,
    FixedBatchSelector,
    FullBatchSelector,
    OSGDSelector,
    ScBSelector,
    ShuffledBatchSelector,
    SpectralBatchSelector,
)

UPDATES = ("batch", "epoch")


@dataclass
class SimulationResult:
    """Outcome of :func:`optimize_embeddings`.

    Attributes
    ----------
    U : ndarray of shape (n, d)
        Final embeddings (``H`` for labelled runs).
    V : ndarray of shape (n, d) or None
        Final second view (``None`` for labelled runs).
    history : list of dict
        One entry per recorded step: ``step``, ``loss`` (the full-batch loss),
        ``gap`` (``etf_gap`` for pairs when a reference exists, ``orthogonal_frame_gap``
        for labels, else NaN) and ``batches`` (the index batches of that step).
    initial : tuple of ndarray
        The starting point (identical for every selector with the same random state).
    """

    U: np.ndarray
    V: np.ndarray | None
    history: list[dict] = field(default_factory=list)
    initial: tuple = ()

    @property
    def losses(self) -> np.ndarray:
        return np.array([h["loss"] for h in self.history])

    @property
    def gaps(self) -> np.ndarray:
        return np.array([h["gap"] for h in self.history])

    @property
    def final_gap(self) -> float:
        return float(self.history[-1]["gap"])

    @property
    def gram(self) -> np.ndarray:
        """``U V^T`` (or ``H H^T``), the heat map of the papers."""
        other = self.U if self.V is None else self.V
        return self.U @ other.T


def initial_embeddings(n: int, d: int, *, labelled: bool = False, nonnegative: bool = False,
                       random_state: Any = None) -> tuple[np.ndarray, ...]:
    """Random unit vectors, the same for every selector given ``random_state``.

    Gaussian vectors normalised to unit length (Cho et al. 2023, Sec. 6.1), their absolute values
    for ``nonnegative`` (UFM+). Returns ``(U, V)``, or ``(H,)`` when ``labelled``.
    """
    rng = np.random.default_rng(random_state)
    parts = 1 if labelled else 2
    x = rng.normal(size=(parts, n, d))
    if nonnegative:
        x = np.abs(x)
    return tuple(x / np.linalg.norm(x, axis=2, keepdims=True))


def _project(x: torch.Tensor, nonnegative: bool, previous: torch.Tensor) -> torch.Tensor:
    if nonnegative:
        x = x.clamp_min(0)
    norms = x.norm(dim=1, keepdim=True)
    return torch.where(norms > 0, x / norms.clamp_min(1e-30), previous)


def optimize_embeddings(n: int, d: int, selector: BatchSelector | None = None,
                        loss: Any = "symmetric_info_nce", steps: int = 500, lr: float = 0.5,
                        random_state: Any = None, nonnegative: bool = False,
                        labels: Any = None, init: Any = None, update: str = "batch",
                        record_every: int = 1, reference: str | None = "auto",
                        memory: Any = None) -> SimulationResult:
    """Projected gradient descent on unit-norm embeddings, batches chosen by ``selector``.

    Parameters
    ----------
    n : int
        Number of pairs (or of labelled points).
    d : int
        Embedding dimension.
    selector : BatchSelector or None, default=None
        Which rows share each batch; ``None`` is
        :class:`~skcontrast.selectors.FullBatchSelector` (full-batch gradient descent).
    loss : Loss or str, default='symmetric_info_nce'
        A loss object of :mod:`skcontrast.losses`, or a name: its object at temperature
        1, where the papers' theory is; with ``labels`` a label loss (``'supcon'``).
        Adaptive selectors score with it too.
    steps : int, default=500
        Gradient updates (see the module docstring for what one update covers).
    lr : float, default=0.5
        Step size (0.5 in Sreenivasan et al. 2023, Sec. 5 and Cho et al. 2023, Sec. 6.1).
    random_state : int or None, default=None
        Seeds the initial embeddings (and the selector when it has no seed of its own),
        so every selector starts from the same point.
    nonnegative : bool, default=False
        Keep features non-negative (clip at 0 before normalising): UFM+ of Kini et al. 2023.
    labels : array-like of shape (n,), optional
        Optimise one set of embeddings ``H`` under a label loss instead of pairs.
    init : tuple of arrays, optional
        Starting ``(U, V)`` (or ``(H,)``); normalised here. Overrides the random start.
    update : {'batch', 'epoch'}, default='batch'
        One update per batch, or one per epoch on the mean loss of its batches.
    record_every : int, default=1
        Record the history every this many steps (and always at the last step).
    reference : {'auto', 'etf', 'cross_polytope'} or None, default='auto'
        Geometry the recorded ``gap`` of paired runs measures against (see
        :func:`~skcontrast.geometry.etf_gap`); ``'auto'`` picks it from ``(n, d)`` and
        records NaN when none is known; ``None`` records no gap.
    memory : SogCLRMemory, CrossBatchMemory or None, default=None
        What each step's loss remembers from earlier batches (:mod:`skcontrast.memory`;
        ``update='batch'`` is needed). The recorded ``loss``
        stays the plain full-batch loss.

    Returns
    -------
    SimulationResult

    Examples
    --------
    >>> from skcontrast.simulation import optimize_embeddings
    >>> result = optimize_embeddings(4, 8, steps=300, random_state=0)
    >>> result.final_gap < 1e-2
    True
    """
    n = check_int(n, "n", minimum=2)
    d = check_int(d, "d", minimum=1)
    steps = check_int(steps, "steps", minimum=1)
    check_positive(lr, "lr")
    loss = _loss(loss)
    check_choice(update, "update", UPDATES)
    record_every = check_int(record_every, "record_every", minimum=1)
    selector = FullBatchSelector() if selector is None else selector
    if not isinstance(selector, BatchSelector):
        raise ValueError(f"selector must be a BatchSelector; got {describe(selector)}")
    labelled = labels is not None
    y = None
    if labelled:
        y = np.asarray(labels)
        if y.shape != (n,):
            raise ValueError(f"labels must have shape ({n},); got {describe(y)}")
    reference_kind = None if labelled else _reference(n, d, reference)
    start = _initial(init, n, d, labelled, nonnegative, random_state)
    selector = _seeded(selector, random_state)
    state = None
    if memory is not None:  # of batches laid out as _loss_batch lays them out
        state = _memory_state(memory, n, loss, update, "single" if labelled else "pairs")
    y_t = None
    if labelled:
        if not loss.labelled:
            raise ValueError(f"labels need a label loss (e.g. 'supcon'); got "
                             f"{type(loss).__name__}")
        y_t = torch.as_tensor(encode_labels(y, "labels")[1])
    params = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in start]
    history: list[dict] = []
    step = epochs = 0
    while step < steps:
        epoch = selector.epoch_batches(_selector_view(params, labelled), y, loss=loss)
        if state is not None:
            state.set_epoch(epochs)
        epochs += 1
        groups = [epoch] if update == "epoch" else [[b] for b in epoch]
        for batches in groups:
            if state is None:
                objective = loss.sub_batch_losses(_loss_batch(params, y_t), batches).mean()
            else:
                objective = _memory_loss(params, batches[0], loss, state, y_t)
            grads = torch.autograd.grad(objective, params)
            with torch.no_grad():
                for p, g in zip(params, grads, strict=True):
                    p.copy_(_project(p - lr * g, nonnegative, p))
            step += 1
            if step % record_every == 0 or step == steps:
                history.append(_record(step, params, batches, loss, y_t, y, reference_kind))
            if step == steps:
                break
    final = [p.detach().numpy() for p in params]
    return SimulationResult(final[0], None if labelled else final[1], history,
                            tuple(x.copy() for x in start))


def _memory_state(memory: Any, n: int, loss: Any, update: str, structure: str) -> Any:
    from .memory import BaseMemory

    if not isinstance(memory, BaseMemory):
        raise ValueError(f"memory must be None or a memory from skcontrast.memory; got "
                         f"{describe(memory)}")
    if update != "batch":
        raise ValueError("memory needs update='batch': a memory follows a sequence of "
                         "batches, one update each")
    return memory.build(n, loss, structure).double()


def _loss(loss: Any) -> Loss:
    """The loss object (a name: its object at temperature 1, the theory's), with the
    rows taken as they are: the simulation keeps them at unit norm itself."""
    obj = make_loss(loss)
    if not isinstance(loss, Loss) and "temperature" in obj.get_params():
        obj.set_params(temperature=1.0)
    if "normalize" in obj.get_params():
        obj = clone(obj).set_params(normalize=False)
    return obj


def _loss_batch(params: list[torch.Tensor], y_t: torch.Tensor | None,
                index: torch.Tensor | None = None) -> LossBatch:
    """The embeddings (``index``: the rows of one batch) as the loss takes them: one view
    per labelled point, or the pairs ``(U, V)``."""
    rows = slice(None) if index is None else index
    if y_t is not None:
        return LossBatch(params[0][rows], "single", y_t[rows], index)
    return LossBatch(torch.stack([params[0][rows], params[1][rows]], dim=1), index=index)


def _memory_loss(params: list[torch.Tensor], batch: np.ndarray, loss: Loss, state: Any,
                 y_t: torch.Tensor | None) -> torch.Tensor:
    """The loss of one batch through the memory."""
    rows = _loss_batch(params, y_t, torch.as_tensor(batch))
    terms = state(lambda **extra: loss.batch_terms(rows, **extra), rows, loss=loss,
                  overrides={})
    return terms.loss


def _reference(n: int, d: int, reference: str | None) -> str | None:
    if reference is None:
        return None
    check_choice(reference, "reference", geometry.REFERENCES)
    if reference == "auto":
        try:
            return geometry.reference_for(n, d)
        except ValueError:
            return None
    if reference == "etf" and d < n - 1:
        raise ValueError(f"reference='etf' needs d >= n - 1 = {n - 1}; got d={d}")
    if reference == "cross_polytope" and n != 2 * d:
        raise ValueError(f"reference='cross_polytope' needs n = 2d; got n={n}, d={d}")
    return reference


def _initial(init: Any, n: int, d: int, labelled: bool, nonnegative: bool,
             random_state: Any) -> tuple[np.ndarray, ...]:
    if init is None:
        return initial_embeddings(n, d, labelled=labelled, nonnegative=nonnegative,
                                  random_state=random_state)
    parts = (init,) if isinstance(init, np.ndarray | torch.Tensor) else tuple(init)
    expected = 1 if labelled else 2
    if len(parts) != expected:
        raise ValueError(f"init must hold {expected} array(s) of shape ({n}, {d}); got "
                         f"{len(parts)}")
    out = []
    for x in parts:
        x = np.asarray(x, dtype=np.float64)
        if x.shape != (n, d):
            raise ValueError(f"init arrays must have shape ({n}, {d}); got {describe(x)}")
        out.append(x / np.linalg.norm(x, axis=1, keepdims=True))
    return tuple(out)


def _seeded(selector: BatchSelector, random_state: Any) -> BatchSelector:
    selector = clone(selector)
    if "random_state" in selector.get_params() and selector.get_params()["random_state"] is None \
            and random_state is not None:
        selector.set_params(random_state=random_state)
    return selector


def _selector_view(params: list[torch.Tensor], labelled: bool) -> np.ndarray:
    arrays = [p.detach().numpy() for p in params]
    return arrays[0] if labelled else np.stack(arrays, axis=1)


def _record(step: int, params: list[torch.Tensor], batches: list[np.ndarray], loss: Loss,
            y_t: torch.Tensor | None, y: Any, reference_kind: str | None) -> dict:
    with torch.no_grad():
        full = float(loss.batch_terms(_loss_batch(params, y_t)).loss)
        if y_t is not None:
            gap = geometry.orthogonal_frame_gap(params[0].numpy(), y) \
                if len(np.unique(y)) > 1 else math.nan
        else:
            gap = geometry.etf_gap(params[0].numpy(), params[1].numpy(), reference_kind) \
                if reference_kind else math.nan
    return {"step": step, "loss": full, "gap": gap, "batches": [b.tolist() for b in batches]}


def step_imbalanced_labels(n_classes: int, n_majority: int, ratio: float) -> np.ndarray:
    """Labels with R-STEP imbalance (Kini et al. 2023, Sec. 3): half the classes have
    ``n_majority`` samples, the other half ``n_majority / ratio`` (at least 2)."""
    k = check_int(n_classes, "n_classes", minimum=2)
    major = check_int(n_majority, "n_majority", minimum=2)
    check_positive(ratio, "ratio")
    minor = max(2, round(major / ratio))
    counts = [major] * (k // 2) + [minor] * (k - k // 2)
    return np.repeat(np.arange(k), counts)


def paper_methods(n: int, batch_size: int) -> dict[str, tuple[BatchSelector, str]]:
    """The batch-selection methods of Sreenivasan et al. 2023, Fig. 2 / Cho et al. 2023, Fig. 4,
    with their update.

    ``full batch`` and ``all C(N,B)`` are gradient descent on the full and on the
    all-mini-batch objective (Thm. 1); the others take one update per selected batch.
    OSGD scores every ``C(N, B)`` batch and keeps the worst one per step (Sreenivasan et al. 2023
    "top-1 mini-batch per iteration", Cho et al. 2023, Alg. 6 with ``k = C(N, B)``, ``q = 1``).
    """
    b = batch_size
    every = math.comb(n, b)
    return {
        "full batch": (FullBatchSelector(), "batch"),
        "all C(N,B)": (ExhaustiveBatchSelector(b, max_batches=10**6), "epoch"),
        "fixed": (FixedBatchSelector(b), "batch"),
        "shuffled": (ShuffledBatchSelector(b), "batch"),
        "OSGD": (OSGDSelector(b, k=every, q=1, candidates="random", n_groups=1), "batch"),
        "spectral": (SpectralBatchSelector(b), "batch"),
        "BcS": (BcSSelector(b), "batch"),
        "ScB": (ScBSelector(b), "batch"),
    }


def memory_methods(n: int, batch_size: int, gamma: float = 0.9
                   ) -> dict[str, tuple[BatchSelector, str, Any]]:
    """Fixed, shuffled and OSGD batches with SogCLR's moving-average estimator.

    Does the global estimator close the mini-batch gap (Cho et al. 2023, Fig. 4)? Each method is
    the one of :func:`paper_methods` with :class:`~skcontrast.memory.SogCLRMemory`.
    """
    from .memory import SogCLRMemory

    base = paper_methods(n, batch_size)
    return {f"{name} + SogCLR": (base[name][0], "batch", SogCLRMemory(gamma=gamma))
            for name in ("fixed", "shuffled", "OSGD")}


def compare_selectors(n: int = 8, d: int = 16, batch_size: int = 2, steps: int = 500,
                      seeds: int = 5, lr: float = 0.5, loss: Any = "symmetric_info_nce",
                      methods: dict | None = None, record_every: int = 10
                      ) -> tuple[list[dict], dict[str, SimulationResult]]:
    """Run every method of :func:`paper_methods` from the same starting points.

    ``methods`` maps a name to ``(selector, update)`` or ``(selector, update, memory)``
    (see :func:`memory_methods`); ``loss`` is that of :func:`optimize_embeddings` (a name
    is its object at temperature 1).

    Returns
    -------
    rows : list of dict
        Per method: ``method``, ``gap_mean``, ``gap_std`` (final ``etf_gap`` over the
        seeds), ``loss_mean`` (final full-batch loss).
    first : dict of SimulationResult
        The run of the first seed of each method (for heat maps and curves).
    """
    seeds = check_int(seeds, "seeds", minimum=1)
    methods = paper_methods(n, batch_size) if methods is None else methods
    rows, first = [], {}
    for name, (selector, update, *memory) in methods.items():
        runs = [optimize_embeddings(n, d, selector, steps=steps, lr=lr,
                                    loss=loss, random_state=seed,
                                    update=update, record_every=record_every,
                                    memory=memory[0] if memory else None)
                for seed in range(seeds)]
        gaps = np.array([r.final_gap for r in runs])
        rows.append({"method": name, "gap_mean": float(gaps.mean()),
                     "gap_std": float(gaps.std()),
                     "loss_mean": float(np.mean([r.losses[-1] for r in runs]))})
        first[name] = runs[0]
    return rows, first


def format_table(rows: list[dict], title: str = "") -> str:
    """The rows of :func:`compare_selectors` as a fixed-width text table."""
    lines = [title] if title else []
    width = max(12, *(len(row["method"]) for row in rows))
    lines.append(f"{'method':<{width}} {'final etf_gap':>20} {'full-batch loss':>16}")
    for row in rows:
        gap = f"{row['gap_mean']:.3f} ± {row['gap_std']:.3f}"
        lines.append(f"{row['method']:<{width}} {gap:>20} {row['loss_mean']:>16.4f}")
    return "\n".join(lines)
