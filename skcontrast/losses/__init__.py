"""Contrastive losses as pure, differentiable torch functions.

Every loss accepts NumPy arrays or torch tensors of shape ``(..., B, d)`` (leading
dimensions index independent batches), works on any device in float32 and float64, uses
log-sum-exp so that small temperatures cannot overflow, needs O(B^2) memory (or, with
``chunk_size``, O(B (d + chunk_size)) for the losses of :data:`TILED_LOSSES`), takes the
balance weights ``lambda_pos`` and ``lambda_ent`` of seed 001 (Eq. 5) and can return its
positive and entropy terms separately (``return_terms=True``).

========================  ============================================================
``info_nce``              one-sided InfoNCE, seed 000 Eq. 3
``symmetric_info_nce``    L^con = L(U,V) + L(V,U), seed 000 Eq. 1-2 (CLIP)
``nt_xent``               SimCLR's 2B-way loss with within-view negatives
``dcl``                   decoupled contrastive loss (positive out of the denominator)
``dhel``                  decoupled hyperspherical energy loss, seed 004
``kcl``                   kernel contrastive loss, seed 004
``supcon``                supervised contrastive loss, seed 003 Eq. 3
``contrastive_margin``    pair margin loss with global/separate averaging, seed 001
========================  ============================================================

:func:`batch_losses` scores many index batches in one vectorised call;
:func:`pair_affinity` and :func:`pairwise_lower_bound` give the Jensen bound of seed 002
Eq. 5, the affinity of the spectral batch selector.
"""

from ._batched import batch_losses, pair_affinity, pairwise_lower_bound
from ._core import LossTerms
from ._infonce import dcl, dhel, info_nce, nt_xent, symmetric_info_nce
from ._kernel import kcl
from ._registry import LABEL_LOSSES, PAIR_LOSSES, TILED_LOSSES, get_label_loss, get_pair_loss
from ._supervised import contrastive_margin, supcon

__all__ = [
    "LABEL_LOSSES",
    "PAIR_LOSSES",
    "TILED_LOSSES",
    "LossTerms",
    "batch_losses",
    "contrastive_margin",
    "dcl",
    "dhel",
    "get_label_loss",
    "get_pair_loss",
    "info_nce",
    "kcl",
    "nt_xent",
    "pair_affinity",
    "pairwise_lower_bound",
    "supcon",
    "symmetric_info_nce",
]
