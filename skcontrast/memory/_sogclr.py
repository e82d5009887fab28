"""SogCLR's moving-average estimator of each sample's negative term (Yuan et al., 2022).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import numpy as np
import torch

from .._validation import check_choice, check_int, check_real
from ..losses import LOSSES, Loss, LossBatch, LossTerms
from ._base import BaseMemory, MemoryState

GAMMA_SCHEDULES = ("constant", "cosine")


class SogCLRMemory(BaseMemory):
    r"""SogCLR: every anchor's log-denominator estimated by a moving average across epochs.

    A mini-batch contrastive loss estimates each anchor's denominator (the log of the
    mean of :math:`e^{s/\tau}` over its candidates) from the batch alone, a biased
    estimate of the global one; the bias is what separates mini-batch from full-batch
    training (Cho et al. 2023, arXiv:2307.05906, Sec. 4-5). SogCLR (Yuan et al., ICML 2022, Alg. 1;
    the "SogCLR objective" of Cho et al. 2023, Sec. 6.2 and Tables 1-2) keeps, for every sample
    ``i`` (and direction), a moving average

    .. math::

        u_i \leftarrow (1 - \gamma)\, u_i + \gamma\, \hat g_i(B),
        \qquad \hat g_i(B) = \frac{1}{|C_i|} \sum_{c \in C_i} e^{s_{ic}/\tau},

    and descends along the compositional gradient
    :math:`\nabla \hat g_i / u_i` (the weights of the candidates are
    :math:`e^{s_{ic}/\tau} / u_i`, detached) instead of :math:`\nabla \log \hat g_i`.

    - The state is kept in log space (:math:`\log u_i`, mixed with ``logaddexp``), so
      no exponential can overflow, also at :math:`\tau = 0.01` in float32. LibAUC keeps
      :math:`u_i` itself, which overflows float32 for :math:`\tau < 0.0114` (v1).
    - A sample's first visit sets :math:`u_i = \hat g_i` (:math:`\gamma = 1`), as
      LibAUC does in its first epoch; with :math:`\gamma = 1` throughout the update is
      the plain mini-batch update.
    - The value recorded as the loss is :math:`\lambda_p \cdot` positive
      :math:`+ \lambda_e (\log u_i + \log |C_i|)`: the loss with the batch estimate
      replaced by the moving average (equal to the batch loss at :math:`\gamma = 1`).
    - A learned temperature gets its true compositional gradient,
      :math:`\partial_\tau \hat g_i / u_i` plus the positive term's (LibAUC's surrogate
      gives the temperature none).

    What it means for each loss (``loss=`` of the estimator); the memory reads where a
    loss keeps its per-anchor log-sum-exps from the loss itself (its ``lse_layout``):

    :class:`~skcontrast.losses.DCL`
        SogCLR's global contrastive loss exactly as LibAUC's ``GCLoss_v1`` (the
        SogCLR reference code, used by Cho et al. 2023): the candidates are the ``2B - 2``
        negatives from both views (positive excluded), one :math:`u_i` per sample
        shared by its two views (the mean of their two estimates is stored). LibAUC's
        gradient is :math:`2\tau` times ours: its loss is scaled by :math:`\tau` (the
        GCL objective is :math:`\tau \log E e^{h/\tau}`) and sums the two views'
        anchors where we average the ``2B`` anchors.
    :class:`~skcontrast.losses.SymmetricInfoNCE`
        The two-directional (CLIP) form, one :math:`u_i` per sample and direction, as
        LibAUC's ``GCLoss_v2``. The candidates are the ``B`` rows of the other view,
        positive included, as in :func:`~skcontrast.losses.symmetric_info_nce`
        (``GCLoss_v2`` leaves the positive out and measures the negatives relative to
        it, :math:`e^{(s_{ij} - s_{ii})/\tau}`).
    ``NTXent``, ``InfoNCE``, ``SupCon``
        The same estimator of the loss's own denominator (``2B - 1``, ``B`` and
        ``B - 1`` candidates; one :math:`u_i` per sample). Where the positive is among
        the candidates, the moving average estimates the mean over batches of the
        batch mean, so the positive keeps the weight :math:`1/|C_i|` it has in a batch
        while the negatives approach their global mean. SupCon's gradient generalises
        cleanly: its entropy term is the anchor's log-denominator, positives and all.

    Other losses (no log-sum-exp per anchor: KCL, SigLIP, the margin loss, DHEL, HCL)
    raise an error naming those that have one. The adaptive selectors (OSGD, spectral,
    greedy) keep scoring batches with the plain batch loss. Per-sample temperatures
    (iSogCLR) are not implemented.

    Parameters
    ----------
    gamma : float in (0, 1], default=0.9
        Weight of the new batch estimate in the moving average (the final value when
        ``gamma_schedule='cosine'``).
    gamma_schedule : {'constant', 'cosine'}, default='constant'
        ``'cosine'`` decays the weight from 1 to ``gamma`` over ``gamma_decay_epochs``
        epochs, as LibAUC's ``gamma_schedule='cosine'``.
    gamma_decay_epochs : int or None, default=None
        Required with ``'cosine'`` (LibAUC recommends half the training epochs).

    Examples
    --------
    >>> from skcontrast import ContrastiveEmbedder
    >>> from skcontrast.memory import SogCLRMemory
    >>> est = ContrastiveEmbedder(loss="dcl", memory=SogCLRMemory(gamma=0.9))

    References
    ----------
    Yuan, Z., Wu, Y., Qiu, Z., Du, X., Zhang, L., Zhou, D., Yang, T. Provable stochastic
    optimization for global contrastive learning: small batch does not harm
    performance. ICML 2022.
    """

    def __init__(self, gamma: float = 0.9, gamma_schedule: str = "constant",
                 gamma_decay_epochs: int | None = None) -> None:
        self.gamma = gamma
        self.gamma_schedule = gamma_schedule
        self.gamma_decay_epochs = gamma_decay_epochs

    def _check_params(self) -> None:
        try:
            check_real(self.gamma, "gamma", low=0, high=1, low_open=True)
        except ValueError as exc:
            raise ValueError(f"{exc} (the weight of the new batch estimate; 1 is the plain "
                             "mini-batch loss)") from None
        check_choice(self.gamma_schedule, "gamma_schedule", GAMMA_SCHEDULES)
        if self.gamma_schedule == "cosine":
            if self.gamma_decay_epochs is None:
                raise ValueError("gamma_schedule='cosine' needs gamma_decay_epochs, the "
                                 "epochs over which gamma decays from 1 (e.g. half of "
                                 "max_epochs)")
            check_int(self.gamma_decay_epochs, "gamma_decay_epochs", minimum=1)
        elif self.gamma_decay_epochs is not None:
            check_int(self.gamma_decay_epochs, "gamma_decay_epochs", minimum=1)

    def _check_loss(self, loss: Loss, structure: str) -> None:
        if loss.lse_layout(structure) is None:
            having = ", ".join(cls.__name__ for cls in LOSSES.values()
                               if cls().lse_layout("pairs") is not None)
            raise ValueError(f"SogCLRMemory replaces each anchor's log-sum-exp, which "
                             f"{type(loss).__name__} does not have; it works with a loss "
                             f"that has one ({having})")

    def _make_state(self, n_samples: int, loss: Loss, structure: str) -> SogCLRState:
        layout = loss.lse_layout(structure)
        assert layout is not None  # checked by _check_loss
        return SogCLRState(n_samples, loss, layout, float(self.gamma),
                           self.gamma_schedule, self.gamma_decay_epochs)


def gamma_at(epoch: int, gamma: float, schedule: str, decay_epochs: int | None) -> float:
    """The weight of the new estimate in ``epoch`` (LibAUC's ``adjust_gamma``)."""
    if schedule == "cosine" and decay_epochs is not None and epoch < decay_epochs:
        return float((1 - gamma) * 0.5 * (1 + np.cos(np.pi * epoch / decay_epochs)) + gamma)
    return gamma


# How a loss lays out its anchors' log-sum-exps (``Loss.lse_layout``), as a grid
# (B items, D directions, S anchors of an item that share one estimate), and back.
def _grid(lse: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "crops":  # labelled two crops, stacked item by item
        return lse.reshape(-1, 2)[:, None, :]
    if layout == "anchors":
        return lse[:, None, None]
    if layout == "directions":  # (2, B): the two directions
        return lse.transpose(0, 1)[..., None]
    return lse.reshape(2, -1).transpose(0, 1)[:, None, :]  # [view 0; view 1] blocks


def _ungrid(grid: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "crops":
        return grid[:, 0, :].reshape(-1)
    if layout == "anchors":
        return grid[:, 0, 0]
    if layout == "directions":
        return grid[..., 0].transpose(0, 1)
    return grid[:, 0, :].transpose(0, 1).reshape(-1)


class SogCLRState(MemoryState):
    """``log_u`` (float64, ``(n, directions)``) and which entries were ever visited."""

    log_u: torch.Tensor
    visited: torch.Tensor

    def __init__(self, n_samples: int, loss: Loss, layout: str, gamma: float, schedule: str,
                 decay_epochs: int | None) -> None:
        super().__init__(n_samples, loss)
        self.layout = layout
        directions = 2 if layout == "directions" else 1
        self.register_buffer("log_u", torch.zeros(n_samples, directions, dtype=torch.float64))
        self.register_buffer("visited", torch.zeros(n_samples, directions, dtype=torch.bool))
        self.gamma = gamma
        self.schedule = schedule
        self.decay_epochs = decay_epochs

    @property
    def current_gamma(self) -> float:
        return gamma_at(self.epoch, self.gamma, self.schedule, self.decay_epochs)

    def forward(self, batch_loss: Callable[..., LossTerms], batch: LossBatch, *,
                loss: Loss, overrides: dict) -> LossTerms:
        assert batch.index is not None  # a training batch knows its rows
        return batch_loss(denominator=partial(self.estimate, index=batch.index))

    def estimate(self, lse: torch.Tensor, count: int, *, index: torch.Tensor) -> torch.Tensor:
        """Replace the batch log-sum-exps ``lse`` by the moving averages, and update them.

        The value returned is ``log u + log count`` (the log of a sum, like ``lse``);
        its gradient is ``grad(g_hat) / u`` with ``g_hat = exp(lse) / count``.
        """
        log_count = math.log(count)
        grid = _grid(lse, self.layout) - log_count
        rows = index.to(self.log_u.device, torch.long)
        old = self.log_u[rows].to(grid.device)[..., None]
        seen = self.visited[rows].to(grid.device)[..., None]
        fresh = grid.detach().to(old.dtype)
        gamma = self.current_gamma
        mixed = fresh
        if gamma < 1:
            mixed = torch.where(seen, torch.logaddexp(old + math.log1p(-gamma),
                                                      fresh + math.log(gamma)), fresh)
        ratio = torch.exp(grid - mixed.to(grid.dtype))
        estimate = mixed.to(grid.dtype) + (ratio - ratio.detach()) + log_count
        shared = torch.logsumexp(mixed, dim=-1) - math.log(mixed.shape[-1])
        self.log_u[rows] = shared.to(self.log_u.device)
        self.visited[rows] = True
        return _ungrid(estimate, self.layout)
