"""Losses of many index batches at once, and the pairwise Jensen bound of Cho et al. 2023,
arXiv:2307.05906, Eq. 5.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .._validation import as_float_tensor, check_int, describe
from ._core import as_label_tensor, check_loss_options, check_views, similarity

#: Upper bound on the number of similarity entries one vectorised call materialises.
DEFAULT_MAX_ELEMENTS = 2**24


def as_index_groups(batches: Any, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Group index batches by size: ``[(positions, index_matrix), ...]``.

    ``positions`` are the places of the batches in the input order and ``index_matrix``
    the ``(m, B)`` stack of those batches, so batches of equal size run in one call.
    """
    if isinstance(batches, np.ndarray | torch.Tensor) and np.ndim(batches) == 2:
        matrix = np.asarray(batches.cpu() if isinstance(batches, torch.Tensor) else batches)
        rows: Sequence[np.ndarray] = list(matrix)
    else:
        try:
            rows = [np.asarray(b.cpu() if isinstance(b, torch.Tensor) else b)
                    for b in batches]
        except TypeError as exc:
            raise ValueError(
                f"batches must be a 2-D index array or a sequence of 1-D index arrays; "
                f"got {describe(batches)}"
            ) from exc
    if not rows:
        raise ValueError("batches is empty; expected at least one index batch")
    sizes = np.array([r.size for r in rows])
    for i, r in enumerate(rows):
        if r.ndim != 1 or r.dtype.kind not in "iu":
            raise ValueError(f"batches[{i}] must be a 1-D integer index array; got {describe(r)}")
        if r.size and (r.min() < 0 or r.max() >= n):
            raise ValueError(f"batches[{i}] holds indices outside [0, {n}); got {r.tolist()}")
    groups = []
    for size in np.unique(sizes):
        positions = np.flatnonzero(sizes == size)
        groups.append((positions, np.stack([rows[int(p)] for p in positions]).astype(np.int64)))
    return groups


def batch_values(u: Any, v: Any, batches: Any, *, y: Any = None,
                 fn: Callable[..., Any], max_elements: int = DEFAULT_MAX_ELEMENTS,
                 **loss_kwargs: Any) -> torch.Tensor:
    """:func:`~skcontrast.losses.batch_losses` for a loss function already chosen: ``fn``
    takes ``(u, v)`` (``y is None``) or ``(z, y)``. What the loss objects and the public
    function (which also looks losses up by name) share."""
    if batches is None:
        raise ValueError("batches is required: a 2-D index array or a list of index arrays")
    check_int(max_elements, "max_elements", minimum=1)
    u = as_float_tensor(u, "u")
    if u.ndim != 2:
        raise ValueError(f"u must have shape (n, d); got {describe(u)}")
    if y is not None:
        if v is not None:
            raise ValueError("give either v (paired loss) or y (label loss), not both")
        y = as_label_tensor(y, device=u.device)
        if y.shape != (u.shape[0],):
            raise ValueError(f"y must have shape ({u.shape[0]},); got {describe(y)}")
        second = y
    else:
        if v is None:
            raise ValueError("v is required for a paired loss")
        v = as_float_tensor(v, "v")
        if v.shape != u.shape:
            raise ValueError(
                f"u and v must have the same shape; got u.shape={tuple(u.shape)} and "
                f"v.shape={tuple(v.shape)}"
            )
        second = v
    positions, values = [], []
    for group_positions, index in as_index_groups(batches, u.shape[0]):
        size = index.shape[1]
        per_call = max(1, max_elements // (4 * size * size))
        for start in range(0, len(index), per_call):
            idx = torch.as_tensor(index[start:start + per_call], device=u.device)
            values.append(fn(u[idx], second[idx], **loss_kwargs))
            positions.append(group_positions[start:start + per_call])
    order = torch.as_tensor(np.argsort(np.concatenate(positions)), device=u.device)
    return torch.cat(values)[order]


def pair_affinity(u: Any, v: Any, batch_size: int, *, temperature: Any = 1.0,
                  normalize: bool = True) -> torch.Tensor:
    r"""Pair weights :math:`w(k, l)` of the Jensen bound of Cho et al. 2023, Eq. 5.

    .. math::

        p_{ij} = \log\big(1 + (B-1)e^{u_i^\top(v_j - v_i)/\tau}\big)
               + \log\big(1 + (B-1)e^{v_i^\top(u_j - u_i)/\tau}\big), \qquad
        w(k, l) = p_{kl} + p_{lk}

    computed as ``softplus(a + log(B-1))``, which cannot overflow at any temperature.
    ``w`` is the affinity on which :class:`~skcontrast.selectors.SpectralBatchSelector`
    clusters: a large :math:`w(k, l)` means pairs ``k`` and ``l`` make a high loss when
    they share a batch.

    Parameters
    ----------
    u, v : array-like of shape (..., n, d)
        Paired embeddings of ``n`` candidate pairs.
    batch_size : int
        The batch size ``B`` of the bound (``B >= 2``); it need not equal ``n``.
    temperature : float, default=1.0
        Loss temperature applied to the inner products.
    normalize : bool, default=True
        L2-normalise rows first.

    Returns
    -------
    torch.Tensor of shape (..., n, n)
        Symmetric, non-negative, zero diagonal.
    """
    check_int(batch_size, "batch_size", minimum=2)
    check_loss_options(temperature, 1.0, 1.0)
    u, v = check_views(u, v, normalize=normalize)
    logits = similarity(u, v, temperature)
    positive = torch.diagonal(logits, dim1=-2, dim2=-1).clone()
    shifted = logits.add_(math.log(batch_size - 1))
    # With x = u v^T / t and s = log(B-1), p_ij = sp(x_ij - x_ii + s) + sp(x_ji - x_ii + s).
    # Grouping the four terms of w_ij = p_ij + p_ji by x_ij and x_ji gives w = f + f^T with
    # f_ij = sp(x_ij - x_ii + s) + sp(x_ij - x_jj + s): one transposed pass instead of two.
    # In-place steps only touch tensors that no backward pass reads (the matmul's and
    # the additions' outputs), which saves full-size allocations on large chunks.
    f = F.softplus(shifted - positive[..., :, None])
    f = f.add_(F.softplus(shifted - positive[..., None, :]))
    w = f + f.transpose(-1, -2)
    w.diagonal(dim1=-2, dim2=-1).zero_()
    return w


def pairwise_lower_bound(u: Any, v: Any, batch_size: int | None = None, *,
                         temperature: Any = 1.0, normalize: bool = True) -> torch.Tensor:
    r"""Jensen lower bound of the batch loss :math:`\mathcal{L}^{con}` (Cho et al. 2023, Eq. 5).

    .. math::

        \mathcal{L}^{con}(U_\mathcal{B}, V_\mathcal{B}) \ge \frac{1}{B(B-1)}
        \sum_{i} \sum_{j \ne i} \Big[\log\big(1 + (B-1)e^{u_i^\top(v_j-v_i)/\tau}\big)
        + \log\big(1 + (B-1)e^{v_i^\top(u_j-u_i)/\tau}\big)\Big]

    (the per-anchor :math:`\log(1 + \sum_j x_j)` is concave in the mean of the
    :math:`x_j`). Its pair terms are :func:`pair_affinity`, which is why minimising
    the cut of that graph approximately maximises the batch losses.

    Parameters
    ----------
    u, v : array-like of shape (..., B, d)
        One batch (or several along leading dimensions).
    batch_size : int, optional
        ``B`` in the bound; defaults to the number of rows.
    temperature, normalize
        As in :func:`symmetric_info_nce` (``directions='sum'`` is the bounded loss).

    Returns
    -------
    torch.Tensor of shape (...)
    """
    u = as_float_tensor(u, "u")
    if u.ndim < 2:
        raise ValueError(f"u must have shape (..., B, d); got {describe(u)}")
    b = u.shape[-2] if batch_size is None else batch_size
    w = pair_affinity(u, v, b, temperature=temperature, normalize=normalize)
    return w.sum((-1, -2)) / (2 * b * (b - 1))
