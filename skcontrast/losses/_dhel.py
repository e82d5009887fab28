"""Decoupled hyperspherical energy loss, DHEL (Koromilas et al. 2024, arXiv:2405.18045).
"""

from __future__ import annotations

from typing import Any

import torch

from .._validation import store_params
from ._core import LossTerms, check_loss_options, check_views, finish, reduce_terms
from ._negatives import self_logsumexp
from ._softmax import _SoftmaxLoss


def dhel(u: Any, v: Any, *, temperature: Any = 0.1, lambda_pos: float = 1.0,
         lambda_ent: float = 1.0, normalize: bool = True, reduction: str = "mean",
         include_positive_view: bool = True, return_terms: bool = False,
         chunk_size: Any = None) -> torch.Tensor | LossTerms:
    r"""Decoupled hyperspherical energy loss (Koromilas et al., 2024; Koromilas et al. 2024).

    The uniformity (entropy) part contrasts an anchor only with the *other anchors of
    its own view*, so it no longer involves the positive at all — alignment and
    uniformity are fully decoupled:

    .. math::

        \ell_i = -u_i^\top v_i/\tau + \log \sum_{j \ne i} e^{u_i^\top u_j/\tau}
                 \;\big[+ \log \sum_{j \ne i} e^{v_i^\top v_j/\tau}\big]

    Parameters
    ----------
    u, v : array-like of shape (..., B, d)
        The paired embeddings; ``u`` are the anchors.
    temperature, lambda_pos, lambda_ent, normalize, return_terms
        As in :func:`info_nce`.
    reduction : {'mean', 'sum', 'none'}, default='mean'
        Over the ``B`` anchors; ``'none'`` returns shape ``(..., B)``.
    include_positive_view : bool, default=True
        Add the bracketed energy of the positives' view, as the authors' reference
        code does by default (``include_augs=True``).
    chunk_size : int, 'auto' or None, default=None
        As in :func:`info_nce`.

    Returns
    -------
    torch.Tensor or LossTerms
    """
    check_loss_options(temperature, lambda_pos, lambda_ent, reduction)
    u, v = check_views(u, v, normalize=normalize)
    positive = -(u * v).sum(-1) / temperature
    entropy = self_logsumexp(u, temperature, chunk_size)
    if include_positive_view:
        entropy = entropy + self_logsumexp(v, temperature, chunk_size)
    terms = reduce_terms(positive, entropy, lambda_pos=lambda_pos, lambda_ent=lambda_ent,
                         reduction=reduction)
    return finish(terms, return_terms)


class DHEL(_SoftmaxLoss):
    r"""Decoupled hyperspherical energy loss (Koromilas et al., 2024; Koromilas et al. 2024,
    arXiv:2405.18045):
    :func:`dhel`.

    Parameters
    ----------
    temperature, learn_temperature, lambda_pos, lambda_ent, normalize, chunk_size
        As in :class:`InfoNCE`.
    include_positive_view : bool, default=True
        Add the energy of the positives' view too (the authors' default).
    """

    function = staticmethod(dhel)
    blocks = ((0, 0), (1, 1))

    def __init__(self, temperature: float = 0.1, *, learn_temperature: bool = False,
                 lambda_pos: float = 1.0, lambda_ent: float = 1.0, normalize: bool = True,
                 include_positive_view: bool = True, chunk_size: Any = "auto") -> None:
        store_params(self, locals())

    queue_terms = None  # type: ignore[assignment]  # no form against a queue
