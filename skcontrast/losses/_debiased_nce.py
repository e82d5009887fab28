r"""Debiased contrastive loss (Chuang et al., NeurIPS 2020, Eq. 9): the hard-negative loss
of ``_hard_negative_nce`` with :math:`\beta = 0`.
"""

from __future__ import annotations

from typing import Any

import torch

from .._validation import store_params
from ._core import LossTerms
from ._hard_negative_nce import HardNegativeNCE, hard_negative_nce


def debiased_nce(u: Any, v: Any, *, temperature: Any = 0.1, tau_plus: float = 0.1,
                 lambda_pos: float = 1.0, lambda_ent: float = 1.0, normalize: bool = True,
                 reduction: str = "mean", negatives: str = "both views",
                 return_terms: bool = False,
                 chunk_size: Any = None, hard_negatives: Any = None,
                 share_negatives: bool = True, exclude: Any = None,
                 exclude_negatives: Any = None) -> torch.Tensor | LossTerms:
    r"""Debiased contrastive loss (Chuang et al., NeurIPS 2020, Eq. 9): :func:`hard_negative_nce`
    with :math:`\beta = 0`. Its negative term subtracts the expected share
    :math:`\tau^+` of false negatives; at :math:`\tau^+ = 0` it is NT-Xent (or, with
    ``negatives='other view'``, InfoNCE). Parameters as in :func:`hard_negative_nce`.
    """
    return hard_negative_nce(u, v, temperature=temperature, beta=0.0, tau_plus=tau_plus,
                             lambda_pos=lambda_pos, lambda_ent=lambda_ent,
                             normalize=normalize, reduction=reduction, negatives=negatives,
                             return_terms=return_terms, chunk_size=chunk_size,
                             hard_negatives=hard_negatives, share_negatives=share_negatives,
                             exclude=exclude, exclude_negatives=exclude_negatives)


class DebiasedNCE(HardNegativeNCE):
    r"""Debiased contrastive loss (Chuang et al., 2020): :func:`debiased_nce`, i.e.
    :class:`HardNegativeNCE` with ``beta=0``.

    Parameters as in :class:`HardNegativeNCE`, without ``beta``.
    """

    function = staticmethod(debiased_nce)  # type: ignore[assignment]  # no beta

    def __init__(self, temperature: float = 0.1, *, tau_plus: float = 0.1,
                 learn_temperature: bool = False, lambda_pos: float = 1.0,
                 lambda_ent: float = 1.0, normalize: bool = True,
                 negatives: str = "both views", chunk_size: Any = "auto",
                 share_negatives: bool = True, false_negatives: Any = None) -> None:
        store_params(self, locals())
