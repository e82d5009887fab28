"""Kernel contrastive loss (KCL) of Koromilas et al. (2024), Koromilas et al. 2024,
arXiv:2405.18045.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .._validation import as_float_tensor, describe, store_params
from ._core import (
    LossTerms,
    check_loss_options,
    check_views,
    combine_last,
    eye_mask,
    finish,
    maybe_normalize,
    reduce_terms,
    resolve_chunk_size,
    squared_distances,
)
from ._objects import Loss
from ._tiled import tiled_kernel_row_sums


def _gaussian(sq_dist: torch.Tensor, temperature: Any) -> torch.Tensor:
    return torch.exp(-sq_dist / temperature)


def _inverse_multiquadric(sq_dist: torch.Tensor, temperature: Any) -> torch.Tensor:
    return torch.rsqrt(1 + sq_dist / temperature)


KERNELS: dict[str, Callable[[torch.Tensor, Any], torch.Tensor]] = {
    "gaussian": _gaussian,
    "imq": _inverse_multiquadric,
}


def _resolve_kernel(kernel: Any) -> Callable[[torch.Tensor, Any], torch.Tensor]:
    if callable(kernel):
        return kernel
    if kernel not in KERNELS:
        options = ", ".join(repr(k) for k in KERNELS)
        raise ValueError(f"kernel must be one of {options} or a callable; got {describe(kernel)}")
    return KERNELS[kernel]


def kcl(u: Any, v: Any, *, kernel: str | Callable = "gaussian", temperature: Any = 0.5,
        lambda_pos: float = 1.0, lambda_ent: float = 16.0, normalize: bool = True,
        reduction: str = "mean", return_terms: bool = False,
        chunk_size: int | str | None = None) -> torch.Tensor | LossTerms:
    r"""Kernel contrastive loss (Koromilas et al., 2024; Koromilas et al. 2024 "KCL").

    Alignment and uniformity are kernel averages, with no softmax coupling them:

    .. math::

        \mathcal{L} = -\lambda_p \sum_{\text{views}} \frac{1}{B}\sum_i K(u_i, v_i)
              + \lambda_e \sum_{x \in \{u, v\}} \frac{1}{B(B-1)} \sum_{i \ne j} K(x_i, x_j)

    Because the uniformity term is a U-statistic (a mean over distinct pairs), the
    batch loss is an *unbiased* estimator of its population value whatever the batch
    size (Koromilas et al. 2024, Proposition): averaged over all size-``M`` subsets of a set it
    equals the value on the whole set.

    Parameters
    ----------
    u, v : array-like of shape (..., B, d)
        The paired embeddings (see :func:`info_nce`).
    kernel : {'gaussian', 'imq'} or callable, default='gaussian'
        ``'gaussian'``: :math:`K = \exp(-\|x-y\|^2/\tau)`, so ``temperature=0.5`` is the
        authors' ``t = 2``; ``'imq'``: :math:`K = (1 + \|x-y\|^2/\tau)^{-1/2}`. A
        callable receives ``(squared_distances, temperature)`` and returns the kernel.
    temperature : float or scalar tensor, default=0.5
        Kernel bandwidth :math:`\tau > 0`.
    lambda_pos : float, default=1.0
        Weight of the alignment term.
    lambda_ent : float, default=16.0
        Weight of the uniformity term; the authors' :math:`\gamma` (16 in their code).
    normalize, return_terms
        As in :func:`info_nce`.
    reduction : {'mean', 'sum', 'none'}, default='mean'
        Over the ``B`` anchors of each view; views are summed (the authors' scaling).
        ``'none'`` returns per-anchor values of shape ``(..., 2, B)``, where anchor
        ``i``'s uniformity is its mean kernel to the other rows of its view.
    chunk_size : int, 'auto' or None, default=None
        Build each view's ``B x B`` kernel matrix ``chunk_size`` rows at a time, with
        the blocks recomputed in the backward pass (activation checkpointing), so memory
        is O(B (d + chunk_size)); the same value and gradient as the dense loss, for any
        kernel. ``'auto'`` tiles once one ``B x B`` float32 matrix would exceed 256 MiB
        (see :func:`info_nce`).

    Returns
    -------
    torch.Tensor or LossTerms
    """
    check_loss_options(temperature, lambda_pos, lambda_ent, reduction)
    k = _resolve_kernel(kernel)
    u, v = check_views(u, v, normalize=normalize)
    b = u.shape[-2]
    positive = -k(((u - v) ** 2).sum(-1), temperature)

    chunk = resolve_chunk_size(chunk_size, b, b)

    def energy(x: torch.Tensor) -> torch.Tensor:
        if chunk is not None:
            return tiled_kernel_row_sums(x, k, temperature, chunk) / (b - 1)
        kernel_matrix = k(squared_distances(x, x), temperature).masked_fill(
            eye_mask(b, x.device), 0.0)
        return kernel_matrix.sum(-1) / (b - 1)

    terms = reduce_terms(torch.stack([positive, positive], dim=-2),
                         torch.stack([energy(u), energy(v)], dim=-2), lambda_pos=lambda_pos,
                         lambda_ent=lambda_ent, reduction=reduction)
    if reduction != "none":
        terms = combine_last(terms, "sum")
    return finish(terms, return_terms)


class KCL(Loss):
    r"""Kernel contrastive loss (Koromilas et al., 2024; Koromilas et al. 2024): :func:`kcl`.

    Parameters
    ----------
    temperature : float, default=0.5
        Kernel bandwidth.
    learn_temperature : bool, default=False
    lambda_pos : float, default=1.0
    lambda_ent : float, default=16.0
        The authors' :math:`\gamma`.
    normalize, chunk_size
        As in :class:`InfoNCE`.
    kernel : {'gaussian', 'imq'} or callable, default='gaussian'
    """

    function = staticmethod(kcl)

    def __init__(self, temperature: float = 0.5, *, learn_temperature: bool = False,
                 lambda_pos: float = 1.0, lambda_ent: float = 16.0, normalize: bool = True,
                 kernel: Any = "gaussian", chunk_size: Any = "auto") -> None:
        store_params(self, locals())

    def affinity(self, u: Any, v: Any, batch_size: int, **overrides: Any) -> torch.Tensor:
        """The uniformity energy two pairs add when they share a batch: the kernel
        between their ``u``'s plus the kernel between their ``v``'s (exact: KCL's
        uniformity is a sum of pair terms)."""
        o = self.options(**overrides)
        kernel = KERNELS[o["kernel"]] if isinstance(o["kernel"], str) else o["kernel"]
        out: Any = 0
        for x, name in ((u, "u"), (v, "v")):
            x = maybe_normalize(as_float_tensor(x, name), o["normalize"])
            out = out + kernel(squared_distances(x, x), o["temperature"])
        out.diagonal(dim1=-2, dim2=-1).zero_()
        return out
