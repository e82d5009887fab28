"""Batches as the training step and the selectors hold them: a tensor, a dict of tensors
(a view of several inputs, or named views), or a tuple with one entry per view; and the
data-parallel processes a batch is split over.

Shared by the estimators' training step and the selectors (both keep some rows of a
batch, both slice batches over the processes), so it lives at the top of the package
rather than in either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def take_rows(x: Any, positions: torch.Tensor) -> Any:
    """Rows ``positions`` of a batch (a tensor, a dict of them, or a tuple per view)."""
    if isinstance(x, tuple | list):
        return tuple(take_rows(t, positions) for t in x)
    if isinstance(x, Mapping):
        return {k: take_rows(t, positions) for k, t in x.items()}
    return x[positions.to(x.device)]


def world_size() -> tuple[int, int]:
    """The data-parallel processes (``torch.distributed``, when it is initialised) and
    this one's rank; one process otherwise."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0
