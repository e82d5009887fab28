"""Look losses up by name, and run label losses on paired data.

Paired losses take ``(u, v)``; label losses take ``(z, y)``. A paired problem can be
trained with a label loss by stacking the views and labelling each pair with its own
class — the standard reduction of SimCLR to SupCon — which :func:`get_pair_loss` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .._validation import as_float_tensor, describe
from ._infonce import dcl, dhel, info_nce, nt_xent, symmetric_info_nce
from ._kernel import kcl
from ._supervised import contrastive_margin, supcon

PAIR_LOSSES: dict[str, Callable[..., Any]] = {
    "info_nce": info_nce,
    "symmetric_info_nce": symmetric_info_nce,
    "nt_xent": nt_xent,
    "dcl": dcl,
    "dhel": dhel,
    "kcl": kcl,
}
LABEL_LOSSES: dict[str, Callable[..., Any]] = {
    "supcon": supcon,
    "contrastive_margin": contrastive_margin,
}
#: Losses that take ``chunk_size`` (tiled log-sum-exps, O(B (d + chunk)) memory).
TILED_LOSSES = ("info_nce", "symmetric_info_nce", "nt_xent", "dcl", "dhel", "kcl", "supcon")


def _unknown(loss: Any, names: list[str]) -> ValueError:
    options = ", ".join(repr(n) for n in names)
    return ValueError(f"loss must be a callable or one of {options}; got {describe(loss)}")


def pair_labels(batch_size: int, leading: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """Labels ``[0..B-1, 0..B-1]`` for the stacked views ``[u; v]``, broadcast to ``leading``."""
    labels = torch.arange(batch_size, device=device).repeat(2)
    return labels.expand(*leading, 2 * batch_size)


def _on_pairs(label_loss: Callable[..., Any]) -> Callable[..., Any]:
    def loss_on_pairs(u: Any, v: Any, **kwargs: Any) -> Any:
        u, v = as_float_tensor(u, "u"), as_float_tensor(v, "v")
        if u.shape != v.shape or u.ndim < 2:
            raise ValueError(
                f"u and v must have the same shape (..., B, d); got u.shape={tuple(u.shape)}"
                f" and v.shape={tuple(v.shape)}"
            )
        z = torch.cat([u, v], dim=-2)
        return label_loss(z, pair_labels(u.shape[-2], u.shape[:-2], u.device), **kwargs)

    loss_on_pairs.__name__ = f"{label_loss.__name__}_on_pairs"
    loss_on_pairs.__doc__ = f"{label_loss.__name__} on pairs: each pair is its own class."
    return loss_on_pairs


def get_pair_loss(loss: str | Callable[..., Any]) -> Callable[..., Any]:
    """Return a loss with the paired signature ``f(u, v, **kwargs)``.

    Parameters
    ----------
    loss : str or callable
        A name from :data:`PAIR_LOSSES` or :data:`LABEL_LOSSES` (a label loss is applied
        to the stacked views ``[u; v]`` with each pair as its own class), or a callable
        ``f(u, v, **kwargs)`` returned unchanged.

    Returns
    -------
    callable
    """
    if callable(loss):
        return loss
    if loss in PAIR_LOSSES:
        return PAIR_LOSSES[loss]
    if loss in LABEL_LOSSES:
        return _on_pairs(LABEL_LOSSES[loss])
    raise _unknown(loss, [*PAIR_LOSSES, *LABEL_LOSSES])


def get_label_loss(loss: str | Callable[..., Any]) -> Callable[..., Any]:
    """Return a loss with the labelled signature ``f(z, y, **kwargs)``.

    Parameters
    ----------
    loss : str or callable
        A name from :data:`LABEL_LOSSES`, or a callable ``f(z, y, **kwargs)``.

    Returns
    -------
    callable
    """
    if callable(loss):
        return loss
    if loss in LABEL_LOSSES:
        return LABEL_LOSSES[loss]
    raise _unknown(loss, list(LABEL_LOSSES))
