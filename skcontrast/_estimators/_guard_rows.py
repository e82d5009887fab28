"""What the loss's false-negative guard (:class:`~skcontrast.losses.FalseNegativeGuard`)
reads of a fit's rows: their content ids and their groups, worked out once per fit for
the training rows and the held-out rows alike."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from .._validation import (
    describe,
)
from ._data import InputSpec, ViewData


class GuardRows(NamedTuple):
    """What the guard reads of a fit's rows (:func:`guard_rows`): content ids and groups
    of the training rows and of the held-out rows (``None`` where it reads none)."""

    keys: torch.Tensor | None = None
    groups: torch.Tensor | None = None
    held_out_keys: torch.Tensor | None = None
    held_out_groups: torch.Tensor | None = None


#: a fit whose loss has no guard (and a loaded net, whose next fit reads the rows again)
NO_GUARD_ROWS = GuardRows()


def guard_rows(loss: Any, data: ViewData, spec: InputSpec, groups: Any, check: bool = True
               ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """What the loss's false-negative guard reads per training row: content ids of each
    row's texts (or numeric rows) and its group; checks that the loss can use hard
    negatives and the guard."""
    from ..losses import FalseNegativeGuard

    name = type(loss).__name__
    if spec.negatives and not loss.takes_negatives:
        raise ValueError(f"X has {spec.negatives} hard-negative column(s), which {name} does "
                         "not take: use InfoNCE, SymmetricInfoNCE, NTXent, DCL, "
                         "HardNegativeNCE or DebiasedNCE")
    guard = getattr(loss, "false_negatives", None)
    if guard is None:
        return None, None
    if not isinstance(guard, FalseNegativeGuard):
        raise ValueError(f"loss__false_negatives must be a FalseNegativeGuard or None; got "
                         f"{describe(guard)}")
    if check:  # the training rows (held-out rows have no guide of their own)
        guard.check(n_rows=len(data), has_groups=groups is not None)
    keys = content_keys(data) if guard.same_content else None
    codes = None
    if guard.same_group and groups is not None:
        codes = torch.from_numpy(np.unique(np.asarray(groups), return_inverse=True)[1]
                                 .reshape(-1).astype(np.int64))
    return keys, codes



def content_keys(data: ViewData) -> torch.Tensor:
    """``(n, c)`` ids of each row's views (and hard negatives): equal ids, equal content
    (:meth:`~skcontrast.losses.FalseNegativeGuard.content_ids`)."""
    from ..losses import FalseNegativeGuard
    from ._data import TensorViews

    if not isinstance(data, TensorViews) or any(v is None for v in data.views):
        raise ValueError("FalseNegativeGuard(same_content=True) compares the rows' content, "
                         "which needs text or array input (not a Dataset)")
    columns: list[Any] = []
    for i, view in enumerate(data.views):
        assert view is not None
        if i == 2:  # the hard negatives, (n, k, ...): a column each
            k = next(iter(view.values())).shape[1] if isinstance(view, dict) else view.shape[1]
            columns += [{name: t[:, c] for name, t in view.items()}
                        if isinstance(view, dict) else view[:, c] for c in range(k)]
        else:
            columns.append(view)
    return FalseNegativeGuard.content_ids(columns)

