"""Batch selectors: which samples share a mini-batch, one epoch per ``split`` call.

Every selector follows scikit-learn's splitter protocol (``split``, ``get_n_splits``,
``get_params``/``set_params``, :func:`sklearn.base.clone`). ``X`` is what a selector
looks at: paired embeddings ``(n, 2, d)`` or single-view embeddings ``(n, d)``;
non-adaptive selectors only use ``len(X)``.

===========================  ======================================================
``FixedBatchSelector``       one random partition reused every epoch (seed 000)
``ShuffledBatchSelector``    a new random partition every epoch (the default)
``RandomBatchSelector``      independent random batches, with replacement (seed 002)
``FullBatchSelector``        one batch of all samples
``ExhaustiveBatchSelector``  all C(n, B) batches (seed 000 Theorem 1)
``OSGDSelector``             the q largest-loss of every k candidates (seed 002)
``BcSSelector``              greedy batch-chooses-sample (seed 000 Alg. 1)
``ScBSelector``              greedy sample-chooses-batch (seed 000 Alg. 2)
``SpectralBatchSelector``    equal-size spectral clustering (seed 002 Alg. 3)
``BindingSelector``          one binding example per class in every batch (seed 003)
``PredefinedBatchSelector``  the same given batches every epoch
===========================  ======================================================

:class:`SelectorSampler` makes any of them a ``torch.utils.data`` batch sampler, for
training loops of one's own (plain PyTorch, Lightning, Hugging Face ``Trainer``).
"""

from ._adaptive import BcSSelector, OSGDSelector, ScBSelector
from ._assignment import balanced_assignment
from ._base import BatchSelector
from ._basic import (
    ExhaustiveBatchSelector,
    FixedBatchSelector,
    FullBatchSelector,
    PredefinedBatchSelector,
    RandomBatchSelector,
    ShuffledBatchSelector,
)
from ._binding import BindingSelector, Corollary21, batch_interaction_graph, check_corollary_2_1
from ._sampler import SelectorSampler
from ._spectral import SpectralBatchSelector, spectral_batches

__all__ = [
    "BatchSelector",
    "BcSSelector",
    "BindingSelector",
    "Corollary21",
    "ExhaustiveBatchSelector",
    "FixedBatchSelector",
    "FullBatchSelector",
    "OSGDSelector",
    "PredefinedBatchSelector",
    "RandomBatchSelector",
    "ScBSelector",
    "SelectorSampler",
    "ShuffledBatchSelector",
    "SpectralBatchSelector",
    "balanced_assignment",
    "batch_interaction_graph",
    "check_corollary_2_1",
    "spectral_batches",
]
