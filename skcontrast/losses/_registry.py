"""Look losses up by name, and run label losses on paired data.

The one list of losses is :data:`~skcontrast.losses.LOSSES` (name -> loss class); the
dictionaries of functions here are derived from it. Paired losses take ``(u, v)``;
label losses take ``(z, y)``. A paired problem can be trained with a label loss by
stacking the views and labelling each pair with its own class — the standard reduction
of SimCLR to SupCon — which :func:`get_pair_loss` does.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from .._validation import as_float_tensor, describe
from ._core import pair_labels
from ._objects import LOSSES

PAIR_LOSSES: dict[str, Callable[..., Any]] = {
    name: cls.function for name, cls in LOSSES.items() if not cls.labelled}
LABEL_LOSSES: dict[str, Callable[..., Any]] = {
    name: cls.function for name, cls in LOSSES.items() if cls.labelled}
#: Losses that take ``chunk_size`` (tiled, O(B (d + chunk)) memory).
TILED_LOSSES = tuple(name for name, cls in LOSSES.items()
                     if "chunk_size" in inspect.signature(cls).parameters)


def _unknown(loss: Any, names: list[str]) -> ValueError:
    options = ", ".join(repr(n) for n in names)
    return ValueError(f"loss must be a callable or one of {options}; got {describe(loss)}")


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
