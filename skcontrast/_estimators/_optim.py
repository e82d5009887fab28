"""Adam that updates only the rows of an embedding table a batch touched.

A text view's default encoder is a bag over 2^18 hashed n-grams (33.5M parameters at
width 128), of which a batch touches a few thousand rows. With a dense gradient, every
step writes the whole table's gradient and Adam updates all of its moments: most of a
step's time. With sparse gradients (``nn.EmbeddingBag(sparse=True)``), :class:`LazyAdam`
updates the touched rows' moments and weights only, as ``torch.optim.SparseAdam`` does,
and every dense parameter (the layers after the bag) exactly as ``torch.optim.Adam``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

__all__ = ["LazyAdam", "takes_sparse_gradients", "use_sparse_gradients"]


class LazyAdam(torch.optim.Adam):
    r"""``torch.optim.Adam`` for dense gradients, lazy row-wise Adam for sparse ones.

    A parameter whose gradient is sparse (an ``nn.Embedding`` or ``nn.EmbeddingBag``
    built with ``sparse=True``) has the moments and values of the rows in its gradient
    updated, with the bias correction of the parameter's step count (the rule of
    ``torch.optim.SparseAdam`` and of TensorFlow Addons' ``LazyAdam``): for the rows
    :math:`r` of the gradient :math:`g`,

    .. math::

        m_r \leftarrow \beta_1 m_r + (1 - \beta_1) g_r, \quad
        v_r \leftarrow \beta_2 v_r + (1 - \beta_2) g_r^2, \quad
        \theta_r \leftarrow \theta_r - \frac{\eta}{1 - \beta_1^t}
        \frac{m_r}{\sqrt{v_r / (1 - \beta_2^t)} + \epsilon}

    (Kingma and Ba 2015, https://arxiv.org/abs/1412.6980, Algorithm 1, applied to the
    rows a step touched). Rows outside the gradient keep their moments: unlike dense
    Adam, a row's moments do not decay while it is unused. ``weight_decay`` (Adam's L2
    term) applies to the touched rows. Every dense gradient goes through
    ``torch.optim.Adam``'s own step, so a model without sparse gradients trains exactly
    as with Adam, and the state (``step``, ``exp_avg``, ``exp_avg_sq`` per parameter)
    has Adam's form: a saved Adam state loads into it.

    The estimators use it for ``optimizer='adam'`` (the default) and then give the
    default text encoder sparse gradients; a user's ``sparse=True`` embedding trains
    with it too. ``amsgrad`` is refused for sparse gradients.

    Parameters
    ----------
    params, lr, betas, eps, weight_decay, amsgrad, foreach, maximize, capturable,
    differentiable, fused
        As in ``torch.optim.Adam``.

    Examples
    --------
    >>> import torch
    >>> from skcontrast import LazyAdam
    >>> table = torch.nn.EmbeddingBag(1000, 8, mode="sum", sparse=True)
    >>> optimizer = LazyAdam(table.parameters(), lr=0.1)
    >>> before = table.weight.detach().clone()
    >>> table(torch.tensor([[3, 7]])).sum().backward()
    >>> optimizer.step()
    >>> sorted(torch.nonzero((table.weight != before).any(1)).ravel().tolist())
    [3, 7]
    """

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One update: Adam's on the dense gradients, the lazy rule on the sparse ones."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        sparse = [(group, p) for group in self.param_groups for p in group["params"]
                  if p.grad is not None and p.grad.is_sparse]
        held = [p.grad for _, p in sparse]
        for _, p in sparse:
            p.grad = None  # Adam skips a parameter without a gradient
        try:
            super().step()
        finally:
            for (_, p), grad in zip(sparse, held, strict=True):
                p.grad = grad
        for group, p in sparse:
            self._sparse_step(group, p)
        return loss

    def _sparse_step(self, group: dict, p: torch.Tensor) -> None:
        if group["amsgrad"]:
            raise ValueError("LazyAdam does not take amsgrad=True with sparse gradients "
                             "(an embedding built with sparse=True)")
        assert p.grad is not None
        rows, values = _row_sums(p.grad)
        state = self.state[p]
        if not state:
            state["step"] = torch.tensor(0.0, dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["step"] += 1
        step = float(state["step"])
        beta1, beta2 = group["betas"]
        lr, eps = float(group["lr"]), float(group["eps"])
        if group["maximize"]:
            values = -values
        if group["weight_decay"]:
            values = values + group["weight_decay"] * p[rows]
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        m = exp_avg[rows].mul_(beta1).add_(values, alpha=1 - beta1)
        v = exp_avg_sq[rows].mul_(beta2).addcmul_(values, values, value=1 - beta2)
        exp_avg.index_copy_(0, rows, m)
        exp_avg_sq.index_copy_(0, rows, v)
        denominator = v.sqrt_().div_(math.sqrt(1 - beta2 ** step)).add_(eps)
        p.index_add_(0, rows, m.div_(denominator), alpha=-lr / (1 - beta1 ** step))


def _row_sums(grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows a sparse gradient touches (ascending) and each row's summed gradient.

    What ``grad.coalesce()`` gives, without its sort of the whole ``(nnz, d)`` entries
    (which took 40% of a text step): a unique of the row ids and one ``index_add_``."""
    if grad.is_coalesced():
        return grad.indices()[0], grad.values()
    rows, where = torch.unique(grad._indices()[0], sorted=True, return_inverse=True)
    values = grad._values()
    sums = values.new_zeros((len(rows), *values.shape[1:])).index_add_(0, where, values)
    return rows, sums


def takes_sparse_gradients(optimizer: Any) -> bool:
    """Whether an optimizer class (or instance) updates parameters with sparse
    gradients: :class:`LazyAdam`, ``torch.optim.SparseAdam``, ``SGD`` and ``Adagrad``."""
    kind = optimizer if isinstance(optimizer, type) else \
        type(getattr(optimizer, "optimizer", optimizer))  # accelerate wraps optimizers
    return issubclass(kind, LazyAdam | torch.optim.SparseAdam | torch.optim.SGD
                      | torch.optim.Adagrad)


def sparse_tables(module: nn.Module) -> Iterable[tuple[str, nn.Module]]:
    """The embedding tables of ``module`` built with ``sparse=True``."""
    return ((name, m) for name, m in module.named_modules()
            if isinstance(m, nn.Embedding | nn.EmbeddingBag) and m.sparse)


def use_sparse_gradients(module: nn.Module, optimizer: Any) -> None:
    """Give the default text encoders of ``module`` sparse gradients where ``optimizer``
    takes them (dense otherwise), and refuse, naming it, a table a user built with
    ``sparse=True`` for an optimizer that cannot update it."""
    from ..text import NgramBagEncoder

    sparse = takes_sparse_gradients(optimizer)
    for m in module.modules():
        if isinstance(m, NgramBagEncoder) and m.sparse == "auto":
            m.bag.sparse = sparse
    if not sparse:
        name = next((name for name, _ in sparse_tables(module)), None)
        if name is not None:
            kind = optimizer if isinstance(optimizer, type) else \
                type(getattr(optimizer, "optimizer", optimizer))
            raise ValueError(
                f"the module's embedding {name!r} has sparse=True, and the optimizer "
                f"{kind.__name__} does not take sparse gradients: use optimizer='adam' "
                "(skcontrast.LazyAdam) or 'sgd', or build the embedding with sparse=False")
