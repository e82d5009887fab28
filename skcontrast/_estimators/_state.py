"""Training state: what a later fit continues from, written and restored in one place.

:meth:`ContinuedTraining.training_state` (a part of the net) is everything a net's
training carries from one fit to the next
(weights, the loss module's state with a learned temperature and a memory, the
optimizer's moments, the history, the selector's epoch and state, the sampler's tables
of the training rows' embeddings that a cached selection pass keeps, the seed, the
held-out rows, the float16 scaler);
its :meth:`~ContinuedTraining.restore` puts it back into a fresh net of the same
structure; :func:`training_state_files` and :func:`files_training_state` are its one
format on disk (safetensors and JSON). A warm start, a saved and loaded model
(:mod:`._saving`), a pickle and :class:`~._distributed.AcceleratorCheckpoint` all go
through them, so one process and many continue alike: 2 + 2 epochs are 4.

:func:`check_trained` refuses a net whose training diverged, at every exit of a fit.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from skorch.history import History

from .._validation import first_non_finite
from ..exceptions import TrainingDivergedError
from ._encoding import GROUP_DATA, expect_type, natural, path_of, plain_json
from ._modules import ContrastiveCriterion

#: The parts of a training state, as :meth:`ContinuedTraining.training_state` names them.
#: (The seed and the held-out rows are the fit's plan, :class:`~._plan.FitPlan`, which a
#: warm start and :func:`skcontrast.load` build from the state; nothing restores them.)
PARTS = ("module", "criterion", "optimizer", "history", "selector", "selection",
         "grad_scaler")


class ContinuedTraining:
    """What a net carries from one fit to the next, and takes back (a part of
    :class:`~._net.SelectorNet`: a warm start, a saved and loaded model, a pickle and
    :class:`~._distributed.AcceleratorCheckpoint` all go through it)."""

    # what it reads of the net
    plan: Any
    history: Any
    optimizer_: Any
    grad_scaler_: Any
    loss_module: Callable[[], Any]
    inference_module: Callable[[], torch.nn.Module]
    if TYPE_CHECKING:  # the net's property
        @property
        def compute_device(self) -> torch.device: ...

    def training_state(self) -> dict:
        """Everything a later fit continues from (a copy of the optimizer's state; the
        tensors of the module and the loss module as their ``state_dict`` holds them)."""
        optimizer = getattr(self.optimizer_, "optimizer", self.optimizer_)  # accelerate wraps it
        scaler = getattr(self, "grad_scaler_", None)
        progress = self.loss_module().progress
        # the loss module's state without the selection's progress, which is its own parts
        criterion = {k: v for k, v in self.loss_module().state_dict().items()
                     if k != ContrastiveCriterion.PROGRESS}
        return {"module": self.inference_module().state_dict(),
                "criterion": criterion,
                "optimizer": copy.deepcopy(optimizer.state_dict()),
                "optimizer_class": type(optimizer),
                "history": self.history.to_list(),
                "selector_epoch": self.plan.selector.current_epoch,
                "selector_state": self.plan.selector.state_dict(),
                "selection": progress.selection(),
                "held_out_rows": None if self.plan.held_out_rows is None
                else np.asarray(self.plan.held_out_rows).tolist(),
                "seed": self.plan.seed,
                "grad_scaler": None if scaler is None else scaler.state_dict()}


    def restore(self, state: dict, *, restart: tuple[str, ...] = (),
                rows: str | bool | None = True, parts: tuple[str, ...] = PARTS) -> None:
        """Continue this net (initialised, of the structure the state was taken from) from
        :meth:`training_state`'s ``state``, or its ``parts``.

        The optimizer's state is taken when the optimizer is of the same class and holds
        the same parameter groups; its settings (learning rate, ...) stay this net's own.
        A learned loss parameter (temperature, SigLIP's bias) is taken when this net learns
        it too and it is not in ``restart`` (the parameters whose starting value the loss
        changed); otherwise it is this net's start. The embeddings of the training rows
        that ``selection_pass='cached'`` keeps (the sampler's tables, under
        ``'selection'``) are taken when ``rows``, the digest of the rows this net trains on
        (:meth:`~._data.ViewData.fingerprint`), is the one they were computed on (``True``:
        as they are, for a loaded model); a fit on other rows starts without them.
        """
        if rows is not True and (rows is None or
                                 (state.get("selection") or {}).get("rows") != rows):
            state = without_row_caches(state)
        if "module" in parts:
            _load_state(self.inference_module(), state["module"], "the network")
        if "criterion" in parts:
            criterion = dict(state["criterion"])
            learned = tuple(ContrastiveCriterion.PARAMETERS.values())
            for name, key in ContrastiveCriterion.PARAMETERS.items():
                value = criterion.pop(key, None)
                if value is not None and name not in restart and \
                        hasattr(self.loss_module(), key):
                    criterion[key] = value
            _load_state(self.loss_module(), criterion, "the loss module",
                        optional=(*learned, ContrastiveCriterion.PROGRESS))
        if "optimizer" in parts:
            _load_optimizer(self, state.get("optimizer"), state.get("optimizer_class"))
        if "history" in parts:
            self.history = History(copy.deepcopy(state["history"]))
        if "selector" in parts:
            self.plan.selector.set_epoch(state["selector_epoch"])
            self.plan.selector.load_state_dict(state.get("selector_state", {}))
        if "selection" in parts:  # of the same rows by now (dropped above otherwise)
            self.loss_module().progress.take(state.get("selection"), same_rows=rows is True)
        scaler = state.get("grad_scaler")
        if "grad_scaler" in parts and scaler and self.plan.precision == "float16":
            self.grad_scaler_ = torch.amp.GradScaler(self.compute_device.type)
            self.grad_scaler_.load_state_dict(scaler)


def without_row_caches(state: dict) -> dict:
    """A training state without the embeddings of training rows it carries: the
    sampler's tables (a curating selector's state of 0.2.0 may still hold its own
    under ``'cache'``; loading drops them, see
    :meth:`~skcontrast.selectors.CuratingSelector.load_state_dict`)."""
    return {**state, "selection": None}


def _load_state(module: torch.nn.Module, state: dict, what: str,
                optional: tuple[str, ...] = ()) -> None:
    """``module.load_state_dict(state)``, with a clear error when they do not fit."""
    memory = getattr(module, "memory_state", None)
    if memory is not None:  # buffers sized on first use take the saved sizes first
        memory.match_saved(state, "memory_state.")
    try:
        result = module.load_state_dict(state, strict=False)
    except RuntimeError as exc:
        raise ValueError(f"the saved state of {what} does not fit it ({exc}); the model "
                         "was built with other settings") from None
    missing = [k for k in result.missing_keys if k not in optional]
    if missing or result.unexpected_keys:
        raise ValueError(f"the saved state of {what} does not fit it (missing "
                         f"{missing[:5]}, unexpected {list(result.unexpected_keys)[:5]}); "
                         "the model was built with other settings")


def _load_optimizer(net: Any, saved: dict | None, kind: type | str | None) -> None:
    """Take a saved optimizer state into an optimizer of the class it was saved from
    (``kind``: the class, or its dotted name as a saved model holds it)."""
    optimizer = getattr(net.optimizer_, "optimizer", net.optimizer_)
    own = type(optimizer)
    if saved is None or kind not in (None, own, f"{own.__module__}.{own.__qualname__}"):
        return
    fresh = optimizer.state_dict()
    sizes = [len(g["params"]) for g in saved["param_groups"]]
    if sizes != [len(g["params"]) for g in fresh["param_groups"]]:
        warnings.warn("the optimizer's parameter groups changed (optimizer__param_groups "
                      "or the parameters that train), so its state (e.g. Adam's moments) "
                      "starts afresh", UserWarning, stacklevel=4)
        return
    _check_optimizer_state(saved["state"], [p for g in optimizer.param_groups
                                            for p in g["params"]])
    # the saved state under this net's own settings (lr, weight decay, ...)
    groups = [{**g, "params": list(s["params"])}
              for g, s in zip(fresh["param_groups"], saved["param_groups"], strict=True)]
    optimizer.load_state_dict({"state": saved["state"], "param_groups": groups})


def _check_optimizer_state(state: dict, parameters: list) -> None:
    """Refuse a saved optimizer state that does not fit the parameters it is for (a
    moment of a shape that does not broadcast to its parameter's, or of a parameter
    that does not exist), naming it. Factored moments (Adafactor's row and column
    statistics) broadcast to their parameter's shape."""
    for index, values in state.items():
        if not 0 <= int(index) < len(parameters):
            raise ValueError(f"the saved optimizer state has an entry for parameter {index}, "
                             f"but the optimizer has {len(parameters)} parameters")
        shape = tuple(parameters[int(index)].shape)
        for key, value in values.items():
            if not isinstance(value, torch.Tensor) or not value.ndim or \
                    tuple(value.shape) == shape:
                continue
            fits = value.ndim == len(shape) and all(
                a in (1, b) for a, b in zip(value.shape, shape, strict=True))
            if not fits:
                raise ValueError(f"the saved optimizer state 'optimizer.{index}.{key}' has "
                                 f"shape {tuple(value.shape)}, but parameter {index} has "
                                 f"shape {shape}: it is not this model's optimizer state")


def check_trained(net: Any, data: Any, interrupted: str | None, rows: int = 8) -> None:
    """Refuse a trained network with a NaN or infinite weight or buffer (batch-norm
    statistics, a memory's state), or whose embeddings of a few training ``rows`` of
    ``data`` are not finite, or overflow when normalised (finite weights can still
    overflow the activations: a last update of lr=1e30). Called at every exit of a fit:
    its end, an early stop, an interrupt (``interrupted``: how far it got)."""
    state = {f"module.{k}": v for k, v in net.inference_module().state_dict().items()}
    state.update({f"criterion.{k}": v for k, v in net.loss_module().state_dict().items()})
    bad = first_non_finite({k: v.detach() for k, v in state.items()
                            if isinstance(v, torch.Tensor)})
    if bad is not None:
        _diverged(net, f"the network's {bad!r} holds NaN or infinite values, so its "
                       "embeddings would be NaN", interrupted)
    data = data.sample()  # (a stream's first window)
    n = len(data)
    if n == 0:
        return
    index = np.unique(np.linspace(0, n - 1, min(rows, n)).astype(np.int64))
    out = net.embed(data.select(0), view=0, indices=index) if net.structure != "pairs" else \
        net.embed(data, indices=index)
    if not bool(torch.isfinite(out.reshape(len(out), -1, out.shape[-1]).norm(dim=-1)).all()):
        _diverged(net, "the network embeds training rows as NaN or infinite values (its "
                       "weights are finite, its activations overflow), so transform would "
                       "return them", interrupted)


def _diverged(net: Any, what: str, interrupted: str | None) -> None:
    from ..exceptions import TrainingInterrupted

    message = (f"after {len(net.history)} epoch(s) {what}; the model was not kept (the "
               f"estimator is as it was before this fit). Lower the learning rate "
               f"(lr={net.lr}), raise the temperature "
               f"(temperature={net.plain_temperature()}), or check that the module does "
               "not output NaN or inf")
    if interrupted is not None:  # the interrupt goes on, without the NaN model
        raise TrainingInterrupted(f"{interrupted}; and {message}")
    raise TrainingDivergedError(f"training diverged in its last steps: {message}")


# -- the training state as files: safetensors tensors and JSON -------------------------


def training_state_files(state: dict) -> tuple[dict, dict]:
    """A net's training state (``SelectorNet.training_state``) as safetensors tensors and
    the JSON part of the configuration's ``fitted`` (a value JSON cannot hold is an
    error naming it)."""
    tensors, extra = {}, {}
    for part in ("module", "criterion"):
        for key, value in state[part].items():
            if isinstance(value, torch.Tensor):
                tensors[f"{part}.{key}"] = value.detach().cpu().contiguous()
            else:
                extra[f"{part}.{key}"] = plain_json(value, f"the {part} state {key!r}")
    optimizer = state["optimizer"]
    for index, values in optimizer["state"].items():
        for key, value in values.items():
            tensors[f"optimizer.{index}.{key}"] = _optimizer_tensor(
                value, f"the {state['optimizer_class'].__name__} state {key!r}")
    groups = [{k: v for k, v in g.items() if k not in GROUP_DATA} | {"size": len(g["params"])}
              for g in optimizer["param_groups"]]
    selection = {"selector": state["selector_state"], "net": state.get("selection")}
    selection = plain_json(_tensors_out(selection, "selection", tensors),
                            "the selector's state")
    fitted = {"seed": state["seed"], "selector_epoch": state["selector_epoch"],
              "selector_state": selection["selector"], "selection": selection["net"],
              "held_out_rows": state["held_out_rows"],
              "optimizer": {"class": path_of(state["optimizer_class"]),
                            "param_groups": plain_json(groups, "the optimizer's settings")},
              "history": plain_json(state["history"], "the training history"),
              "grad_scaler": plain_json(state.get("grad_scaler"), "the float16 scaler"),
              "extra_state": extra}
    return tensors, fitted



def _optimizer_tensor(value: Any, where: str) -> torch.Tensor:
    """An entry of an optimizer's per-parameter state as the tensor the file stores: a
    dense tensor, or a number (``SparseAdam``'s step count, read back as a tensor)."""
    if isinstance(value, torch.Tensor) and value.layout == torch.strided:
        return value.detach().cpu().contiguous()
    if isinstance(value, bool | int | float):
        return torch.as_tensor(value)
    kind = f"a {value.layout} tensor" if isinstance(value, torch.Tensor) else \
        type(value).__name__
    raise ValueError(f"cannot save {where}: it holds {kind}, which a saved file does not "
                     "hold (dense tensors and numbers only); pickle the estimator instead "
                     "(trusted sources only)")



#: How a tensor inside a selector's or the selection's state is named in the JSON: the
#: key of its entry in the safetensors file.
TENSOR_ENTRY = "__tensor__"



def _tensors_out(value: Any, key: str, tensors: dict) -> Any:
    """``value`` with each tensor moved into ``tensors`` (under a key made from its
    place) and replaced by ``{TENSOR_ENTRY: key}``: state that JSON alone cannot hold
    (a selector's embeddings of the training rows)."""
    if isinstance(value, torch.Tensor) and value.numel() != 1:
        tensors[key] = value.detach().cpu().contiguous()
        return {TENSOR_ENTRY: key}
    if isinstance(value, dict):
        return {k: _tensors_out(v, f"{key}.{k}", tensors) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_tensors_out(v, f"{key}.{i}", tensors) for i, v in enumerate(value)]
    return value



def _tensors_in(value: Any, tensors: dict) -> Any:
    """The inverse of :func:`_tensors_out`: a named tensor the file lacks is an error."""
    if isinstance(value, dict):
        if set(value) == {TENSOR_ENTRY}:
            key = value[TENSOR_ENTRY]
            if not isinstance(key, str) or key not in tensors:
                raise ValueError(f"malformed saved configuration: the state names tensor "
                                 f"{key!r}, which the weights file does not hold")
            return tensors[key]
        return {k: _tensors_in(v, tensors) for k, v in value.items()}
    if isinstance(value, list):
        return [_tensors_in(v, tensors) for v in value]
    return value



def files_training_state(tensors: dict, fitted: dict) -> dict:
    """The inverse of :func:`training_state_files`; the optimizer's class is its saved
    name (a net takes the optimizer state only into an optimizer of that class)."""
    saved = expect_type(fitted.get("optimizer"), dict, "optimizer")
    return {"module": _prefixed(tensors, fitted, "module."),
            "criterion": _prefixed(tensors, fitted, "criterion."),
            "optimizer": _optimizer_state(tensors, saved),
            "optimizer_class": expect_type(saved.get("class"), str, "the optimizer's class"),
            "history": expect_type(fitted.get("history"), list, "history"),
            "selector_epoch": natural(fitted.get("selector_epoch"), "selector_epoch"),
            "selector_state": _tensors_in(expect_type(fitted.get("selector_state"), dict,
                                                  "selector_state"), tensors),
            "selection": _tensors_in(fitted.get("selection"), tensors),
            "held_out_rows": _rows(fitted.get("held_out_rows")),
            "seed": natural(fitted.get("seed"), "seed"),
            "grad_scaler": _scaler(fitted.get("grad_scaler"))}


def _scaler(value: Any) -> dict | None:
    """A float16 scaler's saved state: its numbers by name (or none)."""
    if value is None:
        return None
    numbers = expect_type(value, dict, "grad_scaler")
    if not all(isinstance(v, int | float) and not isinstance(v, bool)
               for v in numbers.values()):
        raise ValueError("malformed saved configuration: grad_scaler must hold numbers")
    return numbers



def _prefixed(tensors: dict, fitted: dict, prefix: str) -> dict:
    part = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
    extra = expect_type(fitted.get("extra_state", {}), dict, "extra_state")
    part.update({k[len(prefix):]: v for k, v in extra.items() if k.startswith(prefix)})
    return part



def _rows(value: Any) -> np.ndarray | None:
    if value is None:
        return None
    rows = expect_type(value, list, "held_out_rows")
    if not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in rows):
        raise ValueError("malformed saved configuration: held_out_rows must be row indices")
    return np.asarray(rows, dtype=np.int64)



def _optimizer_state(tensors: dict, saved: dict) -> dict:
    """The saved optimizer state in ``torch.optim`` form."""
    groups, start = [], 0
    for group in expect_type(saved.get("param_groups"), list, "param_groups"):
        group = dict(expect_type(group, dict, "a param group"))
        size = natural(group.pop("size", None), "a param group's size")
        if start + size > len(tensors):  # each parameter the optimizer trains is stored
            raise ValueError(f"malformed saved configuration: the optimizer's param groups "
                             f"declare {start + size} or more parameters, but the saved "
                             f"model holds {len(tensors)} tensors; nothing was built")
        groups.append({**group, "params": list(range(start, start + size))})
        start += size
    state: dict[int, dict] = {}
    for key, value in tensors.items():
        if key.startswith("optimizer."):
            _, index, name = key.split(".", 2)
            state.setdefault(int(index), {})[name] = value
    return {"state": state, "param_groups": groups}

