"""Decoupled contrastive loss, DCL (Yeh et al., 2022): NT-Xent (``_nt_xent``) with the
positive left out of each anchor's denominator; with a SogCLR memory, SogCLR's global
contrastive loss.
"""

from __future__ import annotations

from typing import Any

import torch

from ._core import LossTerms
from ._nt_xent import NTXent, _two_view_loss


def dcl(u: Any, v: Any, *, temperature: Any = 0.1, lambda_pos: float = 1.0,
        lambda_ent: float = 1.0, normalize: bool = True, reduction: str = "mean",
        return_terms: bool = False, denominator: Any = None,
        chunk_size: Any = None, hard_negatives: Any = None, share_negatives: bool = True,
        exclude: Any = None, exclude_negatives: Any = None) -> torch.Tensor | LossTerms:
    r"""Decoupled contrastive loss (Yeh et al., 2022; Koromilas et al. 2024 "DCL").

    :func:`nt_xent` with the positive removed from the denominator, which removes the
    coupling between the positive and negative gradients:

    .. math::

        \ell_a = -z_a^\top z_{p(a)}/\tau
                 + \log \sum_{b \ne a,\, b \ne p(a)} e^{z_a^\top z_b/\tau}

    Parameters and returns are those of :func:`nt_xent` (each anchor has ``2B - 2``
    candidates). With :class:`skcontrast.memory.SogCLRMemory` this is SogCLR's global
    contrastive loss (LibAUC's ``GCLoss_v1``).
    """
    return _two_view_loss(u, v, temperature, lambda_pos, lambda_ent, normalize, reduction,
                          return_terms, denominator, chunk_size, decoupled=True,
                          extras=(hard_negatives, share_negatives, exclude, exclude_negatives))


class DCL(NTXent):
    r"""Decoupled contrastive loss (Yeh et al., 2022): :func:`dcl`. With
    :class:`~skcontrast.memory.SogCLRMemory` it is SogCLR's global contrastive loss.

    Parameters as in :class:`InfoNCE`.
    """

    function = staticmethod(dcl)
    decoupled = True
