"""The memory protocol: scikit-learn parameters outside, a torch state module inside.

A memory object (:class:`SogCLRMemory`, :class:`CrossBatchMemory`) holds only its
parameters, like a batch selector, so that ``clone``, ``get_params``/``set_params`` and
``GridSearchCV`` (``memory__gamma``) work and the user's object is never changed. ``fit``
asks it to :meth:`~BaseMemory.build` a :class:`MemoryState`: a ``torch.nn.Module`` whose
buffers hold what is remembered. The estimators keep that module inside their loss
module, so the state is pickled with the net (through skorch's device-mapped path: a
state learned on a GPU loads on a CPU-only machine), moves with ``.to(device)``, lives
on through ``warm_start``, and is saved by :class:`~skcontrast.AcceleratorCheckpoint`.
A fresh ``fit`` (or a ``clone``) starts from an empty state.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from sklearn.base import BaseEstimator
from torch import nn

from .._validation import describe
from ..losses import LABEL_LOSSES, PAIR_LOSSES, LossTerms

#: How the rows of a batch reach the loss: two views per item, one view (SupCon), or
#: two augmented crops of each labelled item stacked row by row (SupCon).
STRUCTURES = ("pairs", "single", "crops")


def loss_options(loss: str, options: dict) -> dict:
    """The keyword arguments ``options`` completed with the defaults of the named loss."""
    fn = PAIR_LOSSES.get(loss, LABEL_LOSSES.get(loss))
    defaults = {name: p.default for name, p in inspect.signature(fn).parameters.items()
                if p.default is not p.empty}
    return {**defaults, **options}


class MemoryState(nn.Module):
    """What a memory remembers, as buffers of a ``torch.nn.Module``.

    ``forward(batch_loss, embeddings, labels, index, structure=..., options=...)``
    returns the :class:`~skcontrast.losses.LossTerms` of a training batch and updates
    the state. ``batch_loss(**extra)`` computes the plain loss of the batch (with extra
    keyword arguments for the loss); ``embeddings`` are ``(B, 2, k)`` for pairs and
    crops, ``(B, k)`` for single views; ``index`` holds the dataset indices of the
    ``B`` items; ``options`` are the loss's keyword arguments (temperature included).

    Plain Python counters (epoch, steps, queue position) are part of the state dict
    through ``get_extra_state``.
    """

    _counters: tuple[str, ...] = ("n_samples", "epoch")

    def __init__(self, n_samples: int, loss: str) -> None:
        super().__init__()
        self.n_samples = int(n_samples)
        self.loss = loss
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """The (0-based) epoch the next batches belong to."""
        self.epoch = int(epoch)

    def get_extra_state(self) -> dict:
        """The plain counters (e.g. the queue's write position) that travel with the
        buffers in the state dict."""
        return {name: getattr(self, name) for name in self._counters}

    def set_extra_state(self, state: dict) -> None:
        """Restore the counters saved by :meth:`get_extra_state`."""
        for name in self._counters:
            setattr(self, name, state[name])

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any,
                              **kwargs: Any) -> None:
        # buffers allocated on first use (their width is the embedding's) take the
        # saved shape before the values are copied in
        for name, buffer in self.named_buffers(recurse=False):
            saved = state_dict.get(prefix + name)
            if saved is not None and saved.shape != buffer.shape:
                setattr(self, name, torch.empty_like(saved, device=buffer.device))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, batch_loss: Callable[..., LossTerms], embeddings: torch.Tensor,
                labels: torch.Tensor | None, index: torch.Tensor, *, structure: str,
                options: dict) -> LossTerms:
        """The loss of one batch with what the memory remembers, and the memory updated.

        ``batch_loss`` is the estimator's loss function, ``embeddings`` the batch's
        (views stacked or one view), ``index`` the dataset indices of its rows,
        ``structure`` ``'pairs'`` or ``'labels'`` and ``options`` the loss's keyword
        arguments. Implemented by each memory.
        """
        raise NotImplementedError


class BaseMemory(BaseEstimator):
    """Base class of the memories: parameters only; :meth:`build` makes the state.

    Subclasses list the losses they support in ``supported_losses`` and implement
    ``_check_params`` and ``_make_state``.
    """

    supported_losses: tuple[str, ...] = ()

    def build(self, n_samples: int, loss: Any) -> MemoryState:
        """A fresh :class:`MemoryState` for ``n_samples`` training items and ``loss``.

        Parameters
        ----------
        n_samples : int
            Number of items of the training set (dataset indices are ``0..n-1``).
        loss : str
            Name of the batch loss (a callable loss cannot be supported: the memory
            must know how the loss forms each anchor's candidates).
        """
        self._check_params()
        name = type(self).__name__
        if not isinstance(loss, str) or loss not in self.supported_losses:
            options = ", ".join(repr(s) for s in self.supported_losses)
            raise ValueError(f"{name} works with loss in ({options}); got loss="
                             f"{describe(loss)}")
        state = self._make_state(int(n_samples), loss)
        state.memory_name = name  # what a warm start checks the memory against
        return state

    def check_batch_rows(self, rows: int) -> None:
        """Refuse settings that cannot hold ``rows`` embeddings of one batch (default:
        nothing to check)."""

    def _check_params(self) -> None:
        raise NotImplementedError

    def _make_state(self, n_samples: int, loss: str) -> MemoryState:
        raise NotImplementedError
