"""Contrastive losses: pure, differentiable torch functions, and one object per function.

Every loss function accepts NumPy arrays or torch tensors of shape ``(..., B, d)``
(leading dimensions index independent batches), works on any device in float32 and
float64, uses log-sum-exp (or softplus) so that small temperatures cannot overflow,
needs O(B^2) memory (or, with ``chunk_size``, O(B (d + chunk_size)) for the losses of
:data:`TILED_LOSSES`), takes the balance weights ``lambda_pos`` and ``lambda_ent`` of
Sors et al. 2021, arXiv:2112.11743 (Eq. 5) and can return its positive and entropy
terms separately (``return_terms=True``).

======================  ==========================  ========================================
function                object                      definition
======================  ==========================  ========================================
``info_nce``            :class:`InfoNCE`            InfoNCE (Sreenivasan et al. 2023, Eq. 3)
``symmetric_info_nce``  :class:`SymmetricInfoNCE`   L(U,V) + L(V,U) (the same, Eq. 1-2)
``nt_xent``             :class:`NTXent`             SimCLR's 2B-way loss
``dcl``                 :class:`DCL`                decoupled contrastive loss
``dhel``                :class:`DHEL`               decoupled energy (Koromilas et al. 2024)
``kcl``                 :class:`KCL`                kernel loss (Koromilas et al. 2024)
``siglip``              :class:`SigLIP`             pairwise sigmoid loss (Zhai et al. 2023)
``hard_negative_nce``   :class:`HardNegativeNCE`    HCL (Robinson et al. 2021)
``debiased_nce``        :class:`DebiasedNCE`        debiased loss (Chuang et al. 2020)
``supcon``              :class:`SupCon`             SupCon (Kini et al. 2023, Eq. 3)
``contrastive_margin``  :class:`ContrastiveMargin`  pair margin loss (Sors et al. 2021)
======================  ==========================  ========================================

(Sreenivasan et al. 2023: openreview.net/forum?id=7n2dNATSHeQ; Koromilas et al. 2024:
arXiv:2405.18045; Kini et al. 2023: arXiv:2306.07960.)

The objects (:class:`Loss` and its subclasses) are scikit-learn-style: their parameters
are the function's (temperature, fixed or learned, balance weights, ``chunk_size`` and
their own options), and an estimator's ``loss=`` takes one (grids tune
``loss__temperature``). They are what training, batch selection and memories share.

:func:`batch_losses` scores many index batches in one vectorised call;
:func:`pair_affinity` and :func:`pairwise_lower_bound` give the Jensen bound of Cho et al. 2023,
arXiv:2307.05906 Eq. 5, the affinity of the spectral batch selector.
"""

from ._batched import pair_affinity, pairwise_lower_bound
from ._contrastive_margin import ContrastiveMargin, contrastive_margin
from ._core import LossTerms
from ._dcl import DCL, dcl
from ._debiased_nce import DebiasedNCE, debiased_nce
from ._dhel import DHEL, dhel
from ._guard import FalseNegativeGuard
from ._hard_negative_nce import HardNegativeNCE, hard_negative_nce
from ._incremental import GrowingBatches
from ._info_nce import InfoNCE, info_nce
from ._kcl import KCL, kcl
from ._nt_xent import NTXent, nt_xent
from ._objects import (
    MIN_LEARNED_TEMPERATURE,
    STRUCTURES,
    FunctionLoss,
    Loss,
    LossBatch,
    LossInputs,
    loss_inputs,
)
from ._registry import (
    LABEL_LOSSES,
    LOSSES,
    PAIR_LOSSES,
    TILED_LOSSES,
    batch_losses,
    get_label_loss,
    get_pair_loss,
    make_loss,
)
from ._siglip import SigLIP, siglip, sigmoid_pair_losses
from ._supcon import SupCon, supcon
from ._symmetric_info_nce import SymmetricInfoNCE, symmetric_info_nce

__all__ = [
    "DCL",
    "DHEL",
    "KCL",
    "LABEL_LOSSES",
    "LOSSES",
    "MIN_LEARNED_TEMPERATURE",
    "PAIR_LOSSES",
    "STRUCTURES",
    "TILED_LOSSES",
    "ContrastiveMargin",
    "DebiasedNCE",
    "FalseNegativeGuard",
    "FunctionLoss",
    "GrowingBatches",
    "HardNegativeNCE",
    "InfoNCE",
    "Loss",
    "LossBatch",
    "LossInputs",
    "LossTerms",
    "NTXent",
    "SigLIP",
    "SupCon",
    "SymmetricInfoNCE",
    "batch_losses",
    "contrastive_margin",
    "dcl",
    "debiased_nce",
    "dhel",
    "get_label_loss",
    "get_pair_loss",
    "hard_negative_nce",
    "info_nce",
    "kcl",
    "loss_inputs",
    "make_loss",
    "nt_xent",
    "pair_affinity",
    "pairwise_lower_bound",
    "siglip",
    "sigmoid_pair_losses",
    "supcon",
    "symmetric_info_nce",
]
