"""The plan of a fit: what the estimator's parameters and the data decide, worked out
once per fit (and once per :func:`skcontrast.load`) by
:meth:`~._build.NetBuilder._plan_fit`, and read, never derived again, by the net
(:class:`~._net.SelectorNet`), its epochs' streams and the state a later fit continues
from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._replicas import Replicas


@dataclass(frozen=True, eq=False)
class FitPlan:
    """What one fit works out once.

    Parameters
    ----------
    selector : BatchSelector
        The fit's selector (a configured clone of the estimator's,
        :meth:`~skcontrast.selectors.BatchSelector.for_fit`); its sampler is the loss
        module's (``criterion__sampler``, :attr:`SelectorNet.sampler_
        <skcontrast._estimators._net.SelectorNet.sampler_>`).
    structure : {'pairs', 'crops', 'single'}
        How a training batch's rows reach the loss (the criterion's ``structure``): an
        adaptive selector sees both views of ``'pairs'``, one view per item otherwise.
    seed : int
        Seeds the epochs' random streams, a Dataset's random items and the held-out
        views.
    augmentation : Augmentation or None
        One random view of a batch already on the training device; applied twice per
        training batch.
    precision : {'float32', 'bfloat16', 'float16'}
        ``torch.autocast`` dtype of the forward passes; the loss stays float32.
    num_workers : int
        DataLoader worker processes (a Dataset's items).
    micro_batch_size : int or None
        Gradient caching: embed each batch this many items at a time.
    image_normalization : (mean, std) or None
        Applied to image views on the device (uint8 ones once they are floats in [0, 1]).
    held_out_rows : ndarray or None
        The rows of the estimator's ``X`` held out of training (``validation_fraction``),
        kept so that every warm start holds out the same rows.
    replicas : Replicas
        The processes that train (:mod:`._replicas`): one, or an accelerator's.
    """

    selector: Any
    structure: str
    seed: int
    augmentation: Any = None
    precision: str = "float32"
    num_workers: int = 0
    micro_batch_size: int | None = None
    image_normalization: Any = None
    held_out_rows: np.ndarray | None = None
    replicas: Replicas = field(default_factory=Replicas)
