"""Batches as the training step and the selectors hold them: a tensor, a dict of tensors
(a view of several inputs, or named views), or a tuple with one entry per view.

Shared by the estimators' training step and the curating selectors (both keep some rows
of a batch), so it lives at the top of the package rather than in either.
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
