"""Adam that updates only the rows of an embedding table a batch touched.

A text view's default encoder is a bag over 2^18 hashed n-grams (33.5M parameters at
width 128), of which a batch touches a few thousand rows. With a dense gradient, every
step writes the whole table's gradient and Adam updates all of its moments: most of a
step's time. With sparse gradients (``nn.EmbeddingBag(sparse=True)``), :class:`LazyAdam`
updates the touched rows' moments and weights only, as ``torch.optim.SparseAdam`` does,
and every dense parameter (the layers after the bag) exactly as ``torch.optim.Adam``.

Also the optimizer's parameter groups as a fit builds them (:func:`param_groups`).
"""

from __future__ import annotations

import fnmatch
import math
import sys
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.optim.adam import adam

__all__ = ["SPARSE_OPTIMIZERS", "LazyAdam", "param_groups", "sparse_refusal",
           "use_sparse_gradients"]


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
    Adam, a row's moments do not decay while it is unused. ``weight_decay`` applies to
    the touched rows: Adam's L2 term, or with ``decoupled_weight_decay=True`` AdamW's
    decay of the rows' values (Loshchilov and Hutter 2019,
    https://arxiv.org/abs/1711.05101, Algorithm 2). Every dense gradient goes through
    Adam's own update, ``torch.optim.adam.adam`` (the functional form of
    ``torch.optim.Adam.step``), on state made as Adam makes it, so a model without
    sparse gradients trains exactly as with Adam, with every option, and the state
    (``step``, ``exp_avg``, ``exp_avg_sq`` per parameter) has Adam's form: a saved Adam
    state loads into it. ``step`` does not call ``Adam.step`` (torch wraps it with the
    step hooks of ``Optimizer.register_step_pre_hook`` and
    ``Optimizer.register_step_post_hook`` once any Adam exists): each hook runs once a
    step.

    The estimators use it for ``optimizer='adam'`` (the default) and then give the
    default text encoder sparse gradients where the settings allow it; a user's
    ``sparse=True`` embedding trains with it too. ``amsgrad`` is refused for sparse
    gradients.

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

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One update: Adam's on the dense gradients, the lazy rule on the sparse ones."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            with_grad = [p for p in group["params"] if p.grad is not None]
            dense = [p for p in with_grad if not p.grad.is_sparse]
            if dense:
                self._dense_step(group, dense, [p.grad for p in dense])
            for p in with_grad:
                if p.grad.is_sparse:
                    self._sparse_step(group, p)
        return loss

    def _adam_state(self, group: dict, p: torch.Tensor) -> dict:
        """``p``'s state, made on its first step as ``torch.optim.Adam`` makes it (the
        step count on the CPU, in the default float type, unless ``capturable`` or
        ``fused`` keep it, in float32, beside the parameter)."""
        state = self.state[p]
        if not state:
            beside = group["capturable"] or group["fused"]
            wide = torch.get_default_dtype() == torch.float64 and not group["fused"]
            state["step"] = torch.zeros((), dtype=torch.float64 if wide else torch.float32,
                                        device=p.device if beside else "cpu")
            moments = ["exp_avg", "exp_avg_sq"] + ["max_exp_avg_sq"] * bool(group["amsgrad"])
            for name in moments:
                state[name] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    def _dense_step(self, group: dict, params: list[torch.Tensor],
                    grads: list[torch.Tensor]) -> None:
        """Adam's update of ``params`` by their dense gradients ``grads`` under
        ``group``'s settings: what ``torch.optim.Adam.step`` computes, by the same
        function."""
        states = [self._adam_state(group, p) for p in params]
        beta1, beta2 = group["betas"]
        with torch.set_grad_enabled(bool(self.defaults["differentiable"])):
            adam(
                params, grads, [s["exp_avg"] for s in states],
                [s["exp_avg_sq"] for s in states],
                [s["max_exp_avg_sq"] for s in states] if group["amsgrad"] else [],
                [s["step"] for s in states], foreach=group["foreach"],
                capturable=group["capturable"], differentiable=group["differentiable"],
                fused=group["fused"], grad_scale=getattr(self, "grad_scale", None),
                found_inf=getattr(self, "found_inf", None),
                has_complex=any(torch.is_complex(p) for p in params),
                decoupled_weight_decay=group["decoupled_weight_decay"],
                amsgrad=group["amsgrad"], beta1=beta1, beta2=beta2, lr=group["lr"],
                weight_decay=group["weight_decay"], eps=group["eps"],
                maximize=group["maximize"])

    @torch.no_grad()
    def _sparse_step(self, group: dict, p: torch.Tensor) -> None:
        if group["amsgrad"]:
            raise ValueError("LazyAdam does not take amsgrad=True with sparse gradients "
                             "(an embedding built with sparse=True)")
        assert p.grad is not None
        rows, values = _row_sums(p.grad)
        state = self._adam_state(group, p)
        state["step"] += 1
        step = float(state["step"])
        beta1, beta2 = group["betas"]
        lr, eps, decay = float(group["lr"]), float(group["eps"]), group["weight_decay"]
        if group["maximize"]:
            values = -values
        # the rows are gathered with index_select: the same values as ``p[rows]``, whose
        # general indexing kernel took five times as long (7.4 against 1.4 ms for 10k
        # rows of a 2^18 x 128 table), half of a step's time
        if decay and group["decoupled_weight_decay"]:
            p.index_copy_(0, rows, p.index_select(0, rows).mul_(1 - lr * decay))
        elif decay:
            values = values + decay * p.index_select(0, rows)
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        m = exp_avg.index_select(0, rows).mul_(beta1).add_(values, alpha=1 - beta1)
        v = exp_avg_sq.index_select(0, rows).mul_(beta2).addcmul_(values, values,
                                                                   value=1 - beta2)
        exp_avg.index_copy_(0, rows, m)
        exp_avg_sq.index_copy_(0, rows, v)
        denominator = v.sqrt_().div_(math.sqrt(1 - beta2 ** step)).add_(eps)
        p.index_add_(0, rows, m.div_(denominator), alpha=-lr / (1 - beta1 ** step))


def _row_sums(grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows a sparse gradient touches (ascending) and each row's summed gradient:
    its coalesced form (as fast here as a unique of the row ids and one ``index_add_``
    over torch's private accessors of an uncoalesced tensor, and bit for bit the same)."""
    grad = grad.coalesce()
    return grad.indices()[0], grad.values()


#: The optimizers that update sparse gradients, each with the settings that must be off
#: (0, False or None) for it to. SGD's momentum buffer of a sparse gradient is sparse
#: and torch never coalesces it: it grows by the gradient's entries every step, past the
#: dense table (a 2^18 x 64 bag, 1,920 entries a step: 576k entries and 0.9 s a step
#: after 300 steps, against 16 ms for the first). SGD's and Adagrad's weight decay adds
#: the dense parameter to the sparse gradient, which torch refuses; their fused kernels
#: take no sparse gradients; LazyAdam has no lazy AMSGrad.
SPARSE_OPTIMIZERS: dict[type, tuple[str, ...]] = {
    LazyAdam: ("amsgrad",),
    torch.optim.SparseAdam: (),
    torch.optim.SGD: ("momentum", "weight_decay", "fused"),
    torch.optim.Adagrad: ("weight_decay", "fused"),
}


def sparse_refusal(optimizer: torch.optim.Optimizer, group: dict) -> str | None:
    """Why ``optimizer`` with the settings of its param group ``group`` cannot update a
    sparse gradient (its name and the settings in the way), or ``None`` where it can
    (:data:`SPARSE_OPTIMIZERS`)."""
    kind = type(optimizer)
    for base, off in SPARSE_OPTIMIZERS.items():
        if issubclass(kind, base):
            on = [f"{name}={group[name]!r}" for name in off if group.get(name)]
            return f"{kind.__name__} with {', '.join(on)}" if on else None
    return kind.__name__


def sparse_tables(module: nn.Module) -> Iterable[tuple[str, nn.Module]]:
    """The embedding tables of ``module`` built with ``sparse=True``."""
    return ((name, m) for name, m in module.named_modules()
            if isinstance(m, nn.Embedding | nn.EmbeddingBag) and m.sparse)


def use_sparse_gradients(module: nn.Module, optimizer: Any) -> None:
    """Give each default text encoder of ``module`` sparse gradients where the settings
    ``optimizer`` trains its bag with update them (:func:`sparse_refusal`), dense
    otherwise, and refuse, naming it and those settings, a table a user built with
    ``sparse=True`` for settings that cannot update it."""
    # the default text encoder exists only where text was read (its package is loaded)
    text = sys.modules.get("skcontrast.text")
    optimizer = getattr(optimizer, "optimizer", optimizer)  # accelerate wraps optimizers
    groups = {id(p): group for group in optimizer.param_groups for p in group["params"]}

    def refusal(table: nn.Module) -> str | None:
        group = groups.get(id(table.weight))
        return None if group is None else sparse_refusal(optimizer, group)

    bags = () if text is None else tuple(m for m in module.modules()
                                         if isinstance(m, text.NgramBagEncoder))
    for m in bags:
        m.use_sparse_gradients(id(m.bag.weight) in groups and refusal(m.bag) is None)
    for name, table in sparse_tables(module):
        why = refusal(table)
        if why is not None:
            raise ValueError(
                f"the module's embedding {name!r} has sparse=True, and the optimizer {why} "
                "does not update sparse gradients: use optimizer='adam' (skcontrast.LazyAdam, "
                "without amsgrad) or 'sgd' without momentum and weight decay, or build the "
                "embedding with sparse=False")


def _aliases(name: str) -> list[str]:
    """A parameter's name in the fitted ``module_`` (``encoders.0.layer1.weight``) and
    as ``freeze`` names it, within the user's module (``layer1.weight``)."""
    parts = name.split(".")
    if len(parts) > 2 and parts[0] in ("encoders", "heads") and parts[1].isdigit():
        return [name, ".".join(parts[2:])]
    return [name]



def param_groups(named: list[tuple[str, torch.nn.Parameter]], patterns: list) -> list[dict]:
    """skorch's ``optimizer__param_groups`` rule, with two changes: a pattern may name
    parameters as ``freeze`` names parts of the module (without the ``encoders.<i>.``
    prefix of the fitted ``module_``), and a pattern that matches no parameter is an
    error, not silently ignored."""
    params = list(named)
    groups = []
    for pattern, group in patterns:
        matches = [i for i, (name, _) in enumerate(params)
                   if any(fnmatch.fnmatch(alias, pattern) for alias in _aliases(name))]
        if not matches:
            names = sorted({a for name, _ in params for a in _aliases(name)[-1:]})
            raise ValueError(
                f"optimizer__param_groups: the pattern {pattern!r} matches no parameter "
                f"that is still unassigned; parameters are named as in the module (e.g. "
                f"{names[:6]}) or as in the fitted net_.module_ ('encoders.0.<name>', "
                "'heads.0.<name>')")
        groups.append({"params": [params.pop(i)[1] for i in reversed(matches)], **group})
    if params:
        groups.append({"params": [p for _, p in params]})
    return groups

