"""The one registry of losses: look them up by name, and run label losses on paired data.

Each loss is registered once, by its class in ``REGISTERED`` (a module of its own holds
the class and its function); :data:`~skcontrast.losses.LOSSES` (name -> loss class), the
dictionaries of functions and :data:`~skcontrast.losses.TILED_LOSSES` are derived from it,
and :func:`make_loss` builds a loss object from a name. Paired losses take ``(u, v)``;
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
from ._batched import DEFAULT_MAX_ELEMENTS, batch_values
from ._contrastive_margin import ContrastiveMargin
from ._core import pair_labels
from ._dcl import DCL
from ._debiased_nce import DebiasedNCE
from ._dhel import DHEL
from ._hard_negative_nce import HardNegativeNCE
from ._info_nce import InfoNCE
from ._kcl import KCL
from ._nt_xent import NTXent
from ._objects import FunctionLoss, Loss
from ._siglip import SigLIP
from ._supcon import SupCon
from ._symmetric_info_nce import SymmetricInfoNCE

#: Every loss, once: its name is its function's (``InfoNCE.function`` is ``info_nce``).
REGISTERED: tuple[type[Loss], ...] = (
    InfoNCE,
    SymmetricInfoNCE,
    NTXent,
    DCL,
    DHEL,
    KCL,
    SigLIP,
    HardNegativeNCE,
    DebiasedNCE,
    SupCon,
    ContrastiveMargin,
)
#: Every loss class by the name of its function.
LOSSES: dict[str, type[Loss]] = {cls.function.__name__: cls for cls in REGISTERED}
PAIR_LOSSES: dict[str, Callable[..., Any]] = {
    name: cls.function for name, cls in LOSSES.items() if not cls.labelled}
LABEL_LOSSES: dict[str, Callable[..., Any]] = {
    name: cls.function for name, cls in LOSSES.items() if cls.labelled}
#: Losses that take ``chunk_size`` (tiled, O(B (d + chunk)) memory).
TILED_LOSSES = tuple(name for name, cls in LOSSES.items()
                     if "chunk_size" in inspect.signature(cls).parameters)


def make_loss(loss: Any, *, what: str = "loss", labelled: bool = False) -> Loss:
    """A loss object from a name (its class with defaults), a loss object (as it is)
    or, with a warning naming what it gives up, a bare callable (:class:`FunctionLoss`,
    of labelled samples ``f(z, y)`` when ``labelled``).
    """
    if isinstance(loss, Loss):
        return loss
    if isinstance(loss, str):
        if loss not in LOSSES:
            raise ValueError(f"{what} must be a loss object of skcontrast.losses or one of "
                             f"{', '.join(repr(n) for n in LOSSES)}; got {describe(loss)}")
        return LOSSES[loss]()
    if isinstance(loss, type) and issubclass(loss, Loss):
        return loss()
    if callable(loss):
        import warnings

        warnings.warn(
            f"{what}={getattr(loss, '__name__', loss)!r} is a bare callable: it gives up "
            "chunk_size='auto', memories, the positive and entropy terms in the history "
            "(NaN) and a loss-specific selection affinity. Wrap it in "
            "skcontrast.losses.FunctionLoss (or subclass skcontrast.losses.Loss) to set "
            "its temperature, or use a loss object", UserWarning, stacklevel=3)
        return FunctionLoss(loss, labelled=labelled)
    raise ValueError(f"{what} must be a loss object of skcontrast.losses, a loss name or a "
                     f"callable; got {describe(loss)}")



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


def batch_losses(u: Any, v: Any = None, batches: Any = None, *, y: Any = None,
                 loss: str | Callable[..., Any] = "symmetric_info_nce",
                 max_elements: int = DEFAULT_MAX_ELEMENTS, **loss_kwargs: Any) -> torch.Tensor:
    r"""Loss of each of many index batches, in vectorised calls (no loop over batches).

    Batches of equal size are gathered into one ``(m, B, d)`` tensor and scored by the
    loss itself, which accepts leading batch dimensions; batches of other sizes form
    their own groups. Work is split into chunks of at most ``max_elements`` similarity
    entries, so memory stays bounded for any number of batches. Gradients flow back to
    ``u``/``v`` when they require them.

    Parameters
    ----------
    u : array-like of shape (n, d)
        Embeddings (first view for paired losses; all rows for label losses).
    v : array-like of shape (n, d), optional
        Second view, required by the paired losses. Given together with a label loss,
        each pair is its own class (see :func:`get_pair_loss`).
    batches : 2-D int array of shape (m, B) or sequence of 1-D int arrays
        The index batches, e.g. the output of a selector's ``split``.
    y : array-like of shape (n,), optional
        Labels for label losses (``'supcon'``, ``'contrastive_margin'``) without ``v``.
    loss : str or callable, default='symmetric_info_nce'
        Any loss of :mod:`skcontrast.losses` by name, or a callable with the paired
        signature ``f(u, v, **kwargs)`` accepting leading dimensions.
    max_elements : int, default=2**24
        Memory bound of one vectorised call, in similarity-matrix entries.
    **loss_kwargs
        Passed to the loss (``temperature``, ``lambda_pos``, ...). ``reduction`` is fixed
        to the loss's default (the mean within a batch).

    Returns
    -------
    torch.Tensor of shape (m,)
        ``out[k]`` is the loss of ``batches[k]``, identical to calling the loss on
        ``u[batches[k]], v[batches[k]]``.

    Examples
    --------
    >>> import torch
    >>> from skcontrast.losses import batch_losses, symmetric_info_nce
    >>> u, v = torch.randn(10, 4, dtype=torch.float64), torch.randn(10, 4, dtype=torch.float64)
    >>> out = batch_losses(u, v, [[0, 1, 2], [3, 4, 5], [6, 7]])
    >>> bool(torch.isclose(out[2], symmetric_info_nce(u[[6, 7]], v[[6, 7]])))
    True
    """
    if y is None and v is None:
        wants_labels = isinstance(loss, str) and loss in LABEL_LOSSES
        hint = " (or y, for a label loss)" if wants_labels else ""
        raise ValueError(f"v is required for the paired loss {loss!r}{hint}")
    fn = get_label_loss(loss) if y is not None else get_pair_loss(loss)
    return batch_values(u, v, batches, y=y, fn=fn, max_elements=max_elements, **loss_kwargs)
