"""Batch selectors: which samples share a mini-batch, one epoch per ``split`` call.

Every selector follows scikit-learn's splitter protocol (``split``, ``get_n_splits``,
``get_params``/``set_params``, :func:`sklearn.base.clone`). ``X`` is what a selector
looks at: paired embeddings ``(n, 2, d)`` or single-view embeddings ``(n, d)``;
non-adaptive selectors only use ``len(X)``.

===========================  ============================================================
``FixedBatchSelector``       one random partition reused every epoch (Sreenivasan et al.)
``ShuffledBatchSelector``    a new random partition every epoch (the default)
``RandomBatchSelector``      independent random batches, with replacement (Cho et al.)
``FullBatchSelector``        one batch of all samples
``ExhaustiveBatchSelector``  all C(n, B) batches (Sreenivasan et al., Theorem 1)
``OSGDSelector``             the q largest-loss of every k candidates (Cho et al.)
``BcSSelector``              greedy batch-chooses-sample (Sreenivasan et al., Alg. 1)
``ScBSelector``              greedy sample-chooses-batch (Sreenivasan et al., Alg. 2)
``SpectralBatchSelector``    equal-size spectral clustering (Cho et al., Alg. 3)
``CommunityBatchSelector``   communities of a rank-window graph, cut to size (B3)
``RandomWalkBatchSelector``  random walks with restart on a proximity graph (ProSampler)
``BindingSelector``          one binding example per class in every batch (Kini et al.)
``ClassBalancedSelector``    P classes x K samples per batch (label losses)
``JESTSelector``             keep the most learnable sub-batch of each super-batch (JEST)
``RhoLossSelector``          keep the rows of largest reducible loss (RHO-LOSS)
``TemperedSelector``         hardness dial, curriculum, false-negative guards, teacher
``PredefinedBatchSelector``  the same given batches every epoch
===========================  ============================================================

:class:`SelectorSampler` makes any of them a ``torch.utils.data`` batch sampler, for
training loops of one's own (plain PyTorch, Lightning, Hugging Face ``Trainer``).
:func:`jest_select` keeps the most learnable rows of a super-batch at a training step
(JEST), for loops of one's own.
"""

from ._adaptive import BcSSelector, OSGDSelector, ScBSelector
from ._assignment import balanced_assignment
from ._balanced import ClassBalancedSelector
from ._base import BatchSelector, FitSettings
from ._basic import (
    ExhaustiveBatchSelector,
    FixedBatchSelector,
    FullBatchSelector,
    PredefinedBatchSelector,
    RandomBatchSelector,
    ShuffledBatchSelector,
)
from ._binding import BindingSelector, Corollary21, batch_interaction_graph, check_corollary_2_1
from ._community import CommunityBatchSelector
from ._curation import CuratingSelector, CurationBatch
from ._curators import JESTSelector, RhoLossSelector
from ._jest import jest_select
from ._sampler import SampledBatch, SelectorSampler
from ._spectral import SpectralBatchSelector, spectral_batches
from ._tempered import TemperedSelector
from ._walk import RandomWalkBatchSelector

__all__ = [
    "BatchSelector",
    "BcSSelector",
    "BindingSelector",
    "ClassBalancedSelector",
    "CommunityBatchSelector",
    "Corollary21",
    "CuratingSelector",
    "CurationBatch",
    "ExhaustiveBatchSelector",
    "FitSettings",
    "FixedBatchSelector",
    "FullBatchSelector",
    "JESTSelector",
    "OSGDSelector",
    "PredefinedBatchSelector",
    "RandomBatchSelector",
    "RandomWalkBatchSelector",
    "RhoLossSelector",
    "SampledBatch",
    "ScBSelector",
    "SelectorSampler",
    "ShuffledBatchSelector",
    "SpectralBatchSelector",
    "TemperedSelector",
    "balanced_assignment",
    "batch_interaction_graph",
    "check_corollary_2_1",
    "jest_select",
    "spectral_batches",
]
