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

from collections.abc import Callable

import torch
from sklearn.base import BaseEstimator
from torch import nn

from .._validation import describe
from ..losses import STRUCTURES, Loss, LossBatch, LossTerms


class MemoryState(nn.Module):
    """What a memory remembers, as buffers of a ``torch.nn.Module``.

    ``forward(batch_loss, batch, loss=..., overrides=...)`` returns the
    :class:`~skcontrast.losses.LossTerms` of a training batch and updates the state.
    ``batch_loss(**extra)`` computes the plain loss of the batch (with extra keyword
    arguments for the loss); ``batch`` is the :class:`~skcontrast.losses.LossBatch` the
    loss computes on: its embeddings, its structure (all the memory reads of the
    batch's layout), its labels and ``index``, the dataset indices of its ``B`` items;
    ``loss`` is the estimator's loss object and ``overrides`` its learned values (a
    temperature tensor), so the memory computes with the very loss that trains.

    Plain Python counters (epoch, steps, queue position) are part of the state dict
    through ``get_extra_state``.
    """

    _counters: tuple[str, ...] = ("n_samples", "epoch")

    def __init__(self, n_samples: int, loss: Loss) -> None:
        super().__init__()
        self.n_samples = int(n_samples)
        self.loss_name = loss.name  # what a warm start checks
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

    def match_saved(self, state_dict: dict, prefix: str = "") -> None:
        """Make ready to load ``state_dict`` (this state's entries under ``prefix``):
        buffers allocated on first use (their width is the embedding's) take the saved
        shapes, so that ``load_state_dict`` copies the values in. Called before every
        load of a training state (a warm start, a saved model, a checkpoint)."""
        for name, buffer in self.named_buffers(recurse=False):
            saved = state_dict.get(prefix + name)
            if saved is not None and saved.shape != buffer.shape:
                setattr(self, name, torch.empty_like(saved, device=buffer.device))

    def forward(self, batch_loss: Callable[..., LossTerms], batch: LossBatch, *,
                loss: Loss, overrides: dict) -> LossTerms:
        """The loss of one batch with what the memory remembers, and the memory updated.

        Implemented by each memory.
        """
        raise NotImplementedError


class BaseMemory(BaseEstimator):
    """Base class of the memories: parameters only; :meth:`build` makes the state.

    Subclasses implement ``_check_params``, ``_check_loss`` (refuse a loss that does not
    declare what the memory needs) and ``_make_state``.
    """

    def build(self, n_samples: int, loss: Loss, structure: str = "pairs") -> MemoryState:
        """A fresh :class:`MemoryState` for ``n_samples`` training items and ``loss``.

        Parameters
        ----------
        n_samples : int
            Number of items of the training set (dataset indices are ``0..n-1``).
        loss : Loss
            The estimator's loss object: what it declares (where its log-sum-exps are,
            its form against a queue) is what the memory works from.
        structure : {'pairs', 'single', 'crops'}, default='pairs'
            How the rows of a batch reach the loss.
        """
        self._check_params()
        if structure not in STRUCTURES:
            raise ValueError(f"structure must be one of {STRUCTURES}; got {describe(structure)}")
        if not isinstance(loss, Loss):
            raise ValueError(f"{type(self).__name__} needs a loss object of skcontrast.losses "
                             f"(what it declares tells the memory how its anchors meet "
                             f"their candidates); got loss={describe(loss)}")
        self._check_loss(loss, structure)
        return self._make_state(int(n_samples), loss, structure)

    def check_batch_rows(self, rows: int) -> None:
        """Refuse settings that cannot hold ``rows`` embeddings of one batch (default:
        nothing to check)."""

    def _check_params(self) -> None:
        raise NotImplementedError

    def _check_loss(self, loss: Loss, structure: str) -> None:
        raise NotImplementedError

    def _make_state(self, n_samples: int, loss: Loss, structure: str) -> MemoryState:
        raise NotImplementedError
