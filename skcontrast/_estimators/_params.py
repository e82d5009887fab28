"""The estimators' parameters: storing, setting and checking them.

:class:`ParameterChecks` is the part of the estimators that follows scikit-learn's
rules for parameters: ``__init__`` stores them, ``fit`` checks them here (with errors that
name the parameter, the value and what was expected), ``get_params``/``set_params`` also
handle skorch-style nested ``module__*``/``optimizer__*`` parameters and the loss
object's ``loss__*`` (also for a loss given by name), and the loss parameters the
estimators no longer have are refused with their new names.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal, get_args

import numpy as np
import torch
from sklearn.base import BaseEstimator, clone
from torch import nn

from .._constraints import Checked, InstanceOf, Interval, Options, validate_params
from .._validation import describe, param_names, resolve_seed
from ..losses import LOSSES, Loss, make_loss
from ..memory import BaseMemory
from ..selectors import BatchSelector
from ._data import InputSpec
from ._declared import Parameters, parameter
from ._encoding import check_saved
from ._modules import ENCODER_OPTIONS, input_kind
from ._monitor import check_validation_fraction
from ._optim import LazyAdam
from ._schedule import WarmupCosine

#: What the estimators' parameters hold, for the type checker (their ``__init__``
#: annotations) and the reader. Each set of options is written once, here, as a
#: ``Literal``; the checks of :attr:`ParameterChecks._parameter_constraints` (and the
#: tables keyed by option) read it with :func:`options`.
ModuleLike = nn.Module | type | Callable[..., Any] | Mapping[Any, Any] | Sequence[Any] | None
LossLike = str | Loss | Callable[..., Any]
Auto = Literal["auto"]
OptimizerName = Literal["adam", "adamw", "sgd"]
Precision = Literal["float32", "bfloat16", "float16"]
Passes = Literal["fresh", "cached"]
SelectionPass = Passes | int
Head = Literal["mlp"]
HeadLike = Head | int | nn.Module | None
Backbone = Literal["backbone"]
FreezeLike = Backbone | Sequence[str] | None
TransformFrom = Literal["head", "backbone"]
TransformViews = Literal["first", "concat", "mean"]
Seed = int | np.random.RandomState | np.random.Generator | None


def options(alias: Any) -> tuple:
    """The values of a ``Literal`` alias, in order."""
    return get_args(alias)


#: ``'adam'`` is :class:`~._optim.LazyAdam`: Adam, with lazy row updates of sparse gradients
OPTIMIZERS = dict(zip(options(OptimizerName), (LazyAdam, torch.optim.AdamW, torch.optim.SGD),
                      strict=True))

MOVED_TO_LOSS = {
    "temperature": "loss__temperature",
    "learn_temperature": "loss__learn_temperature",
    "lambda_pos": "loss__lambda_pos",
    "lambda_ent": "loss__lambda_ent",
    "loss_params": "loss__<option> (e.g. loss__chunk_size), or loss=SupCon(...)",
}

#: skorch's own nested parameters that the estimators do not take, and what to set
SKORCH_ONLY = ("iterator_train__", "iterator_valid__", "dataset__", "train_split")
SKORCH_ONLY_HINT = (
    "the selector makes the training batches (set batch_size, or the selector, e.g. "
    "selector=ShuffledBatchSelector(64) or FixedBatchSelector for an order that does not "
    "change, for iterator_train__shuffle/batch_size/drop_last/sampler); held-out batches "
    "are of the training batch size; DataLoader workers are num_workers=..., and host "
    "memory for a GPU is pinned by itself; held-out data is validation_fraction or "
    "fit(X_val=...) (for train_split)")


def moved_to_loss_message(names: list[str]) -> str:
    said = "; ".join(f"{n} -> {MOVED_TO_LOSS[n]}" for n in names)
    verb = "is now a parameter" if len(names) == 1 else "are now parameters"
    return (f"{', '.join(names)} {verb} of the loss object ({said}): e.g. "
            "ContrastiveEmbedder(loss=SymmetricInfoNCE(temperature=0.05)), or "
            "set_params(loss__temperature=0.05); grids use the loss__ names")


def describe_object(value: Any) -> Any:
    """What a structural parameter is, comparable across pickling and saving: plain
    values as they are, classes and functions by name, modules by their architecture."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {str(k): describe_object(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return tuple(describe_object(v) for v in value)
    if isinstance(value, functools.partial):
        return ("partial", describe_object(value.func), describe_object(value.args),
                describe_object(value.keywords))
    if isinstance(value, type) or inspect.isroutine(value):
        return f"{value.__module__}.{value.__qualname__}"
    if isinstance(value, torch.nn.Module):
        return f"{type(value).__module__}.{type(value).__qualname__}: {value!r}"
    return repr(value)


def resolve_device(device: Any) -> str:
    """``'auto'`` -> ``'cuda'`` when a GPU is usable, else ``'cpu'``; ``'cuda[:N]'`` and
    ``'mps'`` (Apple GPUs) only where torch can use them, with a clear error otherwise."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if isinstance(device, str) and device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"device={device!r} was requested but no CUDA GPU is usable here; "
                             "use device='auto' to fall back to the CPU, or device='cpu' "
                             "(a model fitted on a GPU keeps training on the CPU so)")
        return device
    if device == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ValueError("device='mps' was requested but no Apple GPU (MPS) is usable "
                             "here; use device='auto' to fall back to the CPU, or "
                             "device='cpu'")
        return device
    if device == "cpu":
        return device
    raise ValueError(f"device must be 'auto', 'cpu', 'cuda[:N]' or 'mps'; got {describe(device)}")


def _check_normalization(normalization: Any, name: str = "image_normalization") -> None:
    if normalization is None:
        return
    try:
        mean, std = (np.atleast_1d(np.asarray(v, dtype=float)) for v in normalization)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be None or (mean, std); got "
                         f"{describe(normalization)}") from exc
    if mean.ndim != 1 or mean.shape != std.shape or not (std > 0).all() or \
            not np.isfinite(mean).all():
        raise ValueError(f"{name} must be (mean, std) with one value or one per "
                         f"channel each, std > 0; got {describe(normalization)}")


#: skorch callbacks that have nothing to act on here, and what to use instead
REFUSED_CALLBACKS = {
    "InputShapeSetter": "the estimators build the module from the data's shapes "
                        "themselves: set the widths with n_components, hidden_layer_sizes "
                        "or module__* (or pass a module built as you want it)",
}


def _check_callbacks(callbacks: Any, name: str = "callbacks") -> None:
    """skorch callbacks: instances or classes, optionally as ``(name, callback)``; those
    of :data:`REFUSED_CALLBACKS` refused, naming what to use."""
    from skorch import callbacks as skorch_callbacks
    from skorch.callbacks import Callback

    if callbacks is None:
        return
    if not isinstance(callbacks, list | tuple):
        raise ValueError(f"{name} must be a list of skorch callbacks; got "
                         f"{describe(callbacks)}")
    for i, item in enumerate(callbacks):
        callback = item[1] if isinstance(item, tuple) and len(item) == 2 and \
            isinstance(item[0], str) else item
        is_class = isinstance(callback, type) and issubclass(callback, Callback)
        if not (isinstance(callback, Callback) or is_class):
            raise ValueError(f"{name}[{i}] must be a skorch callback (an instance of "
                             f"skorch.callbacks.Callback, or (name, callback)); got "
                             f"{describe(item)}")
        for refused, instead in REFUSED_CALLBACKS.items():
            kind = getattr(skorch_callbacks, refused, None)
            if kind is not None and (callback is kind or isinstance(callback, kind)):
                raise ValueError(f"{name}[{i}] is skorch's {refused}, which has nothing to "
                                 f"act on here: {instead}")


def _check_module(module: Any, name: str = "module") -> None:
    """An encoder as ``module`` takes it: a module, a module class, a factory, or one of
    those per view (a dict by view name, or a sequence in view order)."""
    def one(value: Any) -> bool:
        return isinstance(value, nn.Module) or callable(value)

    parts = list(module.values()) if isinstance(module, Mapping) else list(module) \
        if isinstance(module, list | tuple) else [module]
    if not parts or not all(one(p) for p in parts):
        raise ValueError(f"{name} must be None, an nn.Module, an nn.Module class, a factory "
                         f"f(n_in, n_out), or a dict or sequence of those per view; got "
                         f"{describe(module)}")


def _check_loss(loss: Any, name: str = "loss") -> None:
    """A loss object, a loss's name (or alias), or a callable loss."""
    make_loss(loss, what=name)


def _check_device(device: Any, name: str = "device") -> None:
    """A device's name (whether it is usable is checked when the fit places the net)."""
    if device in ("auto", "cpu", "mps") or (isinstance(device, str) and re.fullmatch(
            r"cuda(:\d+)?", device)):
        return
    raise ValueError(f"{name} must be 'auto', 'cpu', 'cuda[:N]' or 'mps'; got "
                     f"{describe(device)}")


def _check_accelerator_object(accelerator: Any, name: str = "accelerator") -> None:
    if not hasattr(accelerator, "prepare") or not hasattr(accelerator, "backward"):
        raise ValueError(f"{name} must be an accelerate.Accelerator or None; got "
                         f"{describe(accelerator)}")


def _check_freeze(freeze: Any, name: str = "freeze") -> None:
    if isinstance(freeze, list | tuple) and all(isinstance(p, str) and p for p in freeze):
        return
    raise ValueError(f"{name} must be None, {options(Backbone)[0]!r} or a list of submodule "
                     f"names; got {describe(freeze)}")


def _check_widths(widths: Any, name: str) -> None:
    if not isinstance(widths, tuple | list) or not all(
            isinstance(h, numbers.Integral) and not isinstance(h, bool) and int(h) >= 1
            for h in widths):
        raise ValueError(f"{name} must be 'auto' or a tuple of positive ints; got "
                         f"{describe(widths)}")


def _check_schedule(schedule: Any, name: str) -> None:
    if not isinstance(schedule, WarmupCosine):
        raise ValueError(f"{name} must be None or a WarmupCosine; got {describe(schedule)}")
    schedule.check()


def _check_optimizer_class(optimizer: Any, name: str) -> None:
    if not (isinstance(optimizer, type) and issubclass(optimizer, torch.optim.Optimizer)):
        raise ValueError(f"{name} must be one of {tuple(OPTIMIZERS)} or a torch.optim."
                         f"Optimizer class; got {describe(optimizer)}")


def _check_augmentation(augmentation: Any, name: str) -> None:
    if not callable(augmentation):
        raise ValueError(f"{name} must be a callable f(x) or f(x, generator); got "
                         f"{describe(augmentation)}")


class ParameterChecks(Parameters, BaseEstimator):
    """Parameters of the estimators (a base of :class:`~._base.BaseEmbedder`)."""

    _labelled: ClassVar[bool] = False
    _nested_prefixes: ClassVar[tuple[str, str]] = ("module__", "optimizer__")

    # The parameters both estimators take, each declared once with its default (their
    # ``__init__`` is made from them: :class:`~._declared.Parameters`); an estimator
    # declares its own in its class.
    module: ModuleLike = parameter(default=None, kw_only=False)
    tokenizer: Callable[..., Any] | None = None
    n_components: int | Auto = "auto"
    hidden_layer_sizes: tuple[int, ...] | Auto = "auto"
    loss: LossLike = "symmetric_info_nce"
    batch_size: int | None = None
    selector: BatchSelector | None = None
    memory: BaseMemory | None = None
    max_epochs: int = 20
    lr: float = 1e-3
    lr_schedule: WarmupCosine | None = None
    validation_fraction: float | None = None
    scoring: str | Callable[..., float] | None = None
    optimizer: OptimizerName | type[torch.optim.Optimizer] = "adam"
    optimizer_params: dict[str, Any] | None = None
    augmentation: Callable[..., Any] | None = None
    precision: Precision = "float32"
    num_workers: int = 0
    data_on_device: bool | Auto = False
    micro_batch_size: int | None = None
    image_normalization: tuple[Any, Any] | None = None
    selection_pass: SelectionPass = "fresh"
    accelerator: Any = None
    device: str = "auto"
    random_state: Seed = None
    verbose: int = 0
    callbacks: list[Any] | None = None
    warm_start: bool = False
    projection_head: HeadLike = None
    transform_from: TransformFrom = "head"
    freeze: FreezeLike = None

    def _set_nested(self, kwargs: dict) -> None:
        """Store ``**kwargs`` as they are (checked in ``fit``, as scikit-learn asks)."""
        for key, value in kwargs.items():
            setattr(self, key, value)

    def _extra_params(self) -> list[str]:
        """Names of the parameters given through ``**kwargs`` (``module__*`` etc.)."""
        declared = param_names(type(self))
        return [k for k in vars(self) if k not in declared and not k.startswith("_")
                and not k.endswith("_")]

    def _nested(self, prefix: str) -> dict:
        """The ``prefix*`` parameters set on the estimator, without the prefix."""
        return {k[len(prefix):]: getattr(self, k) for k in self._extra_params()
                if k.startswith(prefix)}

    def get_params(self, deep: bool = True) -> dict:
        """The parameters; with ``deep``, those of a loss given by name too (its object's,
        ``loss__temperature``, ...), which :meth:`set_params` can set."""
        params = super().get_params(deep=deep)
        params.update({k: getattr(self, k) for k in self._extra_params()})
        if deep and isinstance(self.loss, str) and self.loss in LOSSES:
            params.update({f"loss__{k}": v for k, v in
                           LOSSES[self.loss]().get_params(deep=False).items()})
        return params

    def set_params(self, **params: Any) -> ParameterChecks:
        """Set parameters; ``selector__*``, ``memory__*`` and ``lr_schedule__*`` need an
        object there first (their defaults are ``None``); ``loss__*`` on a loss given by
        name sets the parameters of its object (``loss__temperature=0.05``);
        ``module__*`` and ``optimizer__*`` are stored as they are."""
        moved = [k for k in params if k in MOVED_TO_LOSS]
        if moved:
            raise ValueError(moved_to_loss_message(moved))
        if any(k.startswith("loss__") for k in params):
            loss = params.get("loss", self.loss)
            if not isinstance(loss, Loss):  # a name: its object, whose parameters are set
                params["loss"] = make_loss(loss)
        extra = set(self._extra_params())
        self._set_nested({k: params.pop(k) for k in list(params)
                          if k.startswith(self._nested_prefixes) or k in extra})
        for key in params:
            owner, _, rest = key.partition("__")
            if rest and owner in ("selector", "memory", "lr_schedule") and \
                    params.get(owner, getattr(self, owner, None)) is None:
                hint = {"selector": "e.g. selector=ShuffledBatchSelector(64) (the default "
                                    "selector is only made inside fit), or set batch_size",
                        "memory": "e.g. memory=SogCLRMemory()",
                        "lr_schedule": "e.g. lr_schedule=WarmupCosine()"}[owner]
                raise ValueError(f"{key} sets a parameter of {owner}, but {owner}=None: set "
                                 f"{owner} first ({hint})")
        return super().set_params(**params)

    #: What each parameter may be (scikit-learn's ``_parameter_constraints``: a value
    #: satisfies one of the list), checked by :func:`~skcontrast._validation.
    #: validate_params` when ``fit`` starts; every parameter of both estimators is here
    #: (a test says so). What needs the data (a device's availability, the module's
    #: fit to the views, ``view_split``'s column) is checked where it is read; rules
    #: between parameters in :meth:`_check_params`.
    _parameter_constraints: ClassVar[dict[str, list]] = {
        "module": [None, Checked(_check_module, "an encoder, or one per view")],
        "tokenizer": [None, callable],
        "n_components": [*options(Auto), Interval(int, 1)],
        "hidden_layer_sizes": [*options(Auto),
                               Checked(_check_widths, "a tuple of positive ints")],
        "loss": [Checked(_check_loss, "a loss object, a loss name or a callable loss")],
        "batch_size": [None, Interval(int)],
        "selector": [InstanceOf(BatchSelector, "a BatchSelector from skcontrast.selectors"),
                     None],
        "memory": [None, InstanceOf(BaseMemory, "a memory from skcontrast.memory "
                                                "(SogCLRMemory, CrossBatchMemory)")],
        "max_epochs": [Interval(int, 1)],
        "lr": [Interval(float, 0, closed="right")],
        "lr_schedule": [None, Checked(_check_schedule, "a WarmupCosine")],
        "validation_fraction": [Checked(check_validation_fraction,
                                        "None or a number in (0, 1)")],
        "scoring": [None, str, callable],
        "optimizer": [Options(*OPTIMIZERS), Checked(_check_optimizer_class,
                                                    "a torch.optim.Optimizer class")],
        "optimizer_params": [None, dict],
        "augmentation": [None, Checked(_check_augmentation,
                                       "a callable f(x) or f(x, generator)")],
        "precision": [Options(*options(Precision))],
        "num_workers": [Interval(int, 0)],
        "data_on_device": [Options(True, False, *options(Auto))],
        "micro_batch_size": [None, Interval(int, 1)],
        "image_normalization": [Checked(_check_normalization, "None or (mean, std)")],
        "selection_pass": [Options(*options(Passes)), Interval(int, 1)],
        "accelerator": [None, Checked(_check_accelerator_object, "an accelerate.Accelerator")],
        "device": [Checked(_check_device, "'auto', 'cpu', 'cuda[:N]' or 'mps'")],
        "random_state": [None, Interval(int, 0),
                         InstanceOf((np.random.RandomState, np.random.Generator),
                                    "a NumPy RandomState or Generator")],
        "callbacks": [Checked(_check_callbacks, "a list of skorch callbacks")],
        "projection_head": [None, Options(*options(Head)), Interval(int, 1),
                            InstanceOf(nn.Module, "an nn.Module")],
        "transform_from": [Options(*options(TransformFrom))],
        "freeze": [None, Options(*options(Backbone)), Checked(_check_freeze,
                                                              "a list of submodule names")],
        "verbose": [Interval(int, 0), bool],
        "warm_start": [bool],
    }

    def _check_params(self) -> None:
        """Parameters a loaded model could not get back from its file
        (:class:`~._encoding.Unsaved`), the declared constraints
        (:attr:`_parameter_constraints`), then the rules between parameters."""
        for value in self.get_params(deep=False).values():
            check_saved(value)
        validate_params(self)
        self._check_accelerator()
        unknown = [k for k in self._extra_params() if not k.startswith(self._nested_prefixes)
                   or k in self._nested_prefixes]
        moved = [k for k in unknown if k in MOVED_TO_LOSS]
        if moved:
            raise ValueError(moved_to_loss_message(moved))
        skorchs = [k for k in unknown if k.startswith(SKORCH_ONLY)]
        if skorchs:
            raise ValueError(f"{skorchs}: parameters of skorch's NeuralNet that the "
                             f"estimators set themselves: {SKORCH_ONLY_HINT}")
        if unknown:
            raise ValueError(f"unknown parameter(s) {unknown} of {type(self).__name__}; nested "
                             "parameters start with 'module__' or 'optimizer__'")
        clash = set(self._nested("optimizer__")) & set(self.optimizer_params or {})
        if clash:
            raise ValueError(f"{sorted(clash)} set both as optimizer__* and in "
                             "optimizer_params; give each once")
        if self.freeze == "backbone" and self.projection_head is None:
            raise ValueError("freeze='backbone' fixes the whole module, and without a "
                             "projection_head nothing would train: add a projection_head "
                             "(e.g. 'mlp' or an int, a probe on the frozen features), or "
                             "freeze only some parts (freeze=['layer1', ...])")

    def _loss(self) -> Loss:
        """The loss object this fit trains with: ``loss`` made an object (a name is its
        class with defaults) and cloned, so the user's object is never changed."""
        loss = clone(make_loss(self.loss, labelled=self._labelled), safe=False)
        loss.check()
        if self._labelled and not loss.labelled:
            raise ValueError(f"{type(self).__name__} trains with a label loss (SupCon, "
                             f"ContrastiveMargin, or one of your own with labelled=True); "
                             f"got {type(loss).__name__}, which contrasts two views")
        return loss

    def _check_accelerator(self) -> None:
        """An ``accelerate.Accelerator`` whose mixed precision agrees with ``precision``."""
        accelerator = self.accelerator
        if accelerator is None:
            return
        from ._replicas import PRECISION_OF_ACCELERATE

        mixed = str(getattr(accelerator, "mixed_precision", "no"))
        implied = PRECISION_OF_ACCELERATE.get(mixed, mixed)
        if self.precision != "float32" and self.precision != implied:
            raise ValueError(f"precision={self.precision!r} disagrees with the accelerator's "
                             f"mixed_precision={mixed!r}: with an accelerator, set the "
                             "precision on it (Accelerator(mixed_precision='bf16'))")

    def _optimizer(self) -> Any:
        """The optimizer class: a name's (:data:`OPTIMIZERS`), or the class given."""
        return OPTIMIZERS[self.optimizer] if isinstance(self.optimizer, str) else self.optimizer

    def _seed(self) -> int:
        return resolve_seed(self.random_state)

    def _check_input_settings(self, spec: InputSpec) -> None:
        """Settings that depend on the input: ``image_normalization``'s channels, and
        ``module__*`` with the default encoders (a text view's bag and the image encoder
        take options; the MLP takes none)."""
        nested = self._nested("module__")
        if self.module is None and nested:
            kind = input_kind(spec.views)
            if kind not in ENCODER_OPTIONS:
                raise ValueError(
                    f"module__* parameters ({', '.join(nested)}) go to a module class or "
                    "factory, but module=None builds the default MLP: set its widths with "
                    "hidden_layer_sizes, or pass module=YourEncoderClass")
            default, options = ENCODER_OPTIONS[kind]
            unknown = sorted(set(nested) - set(options))
            if unknown:
                raise ValueError(
                    f"module__* parameters {unknown} are not options of the default "
                    f"{default}, which takes {list(options)}")
        if self.image_normalization is None:
            return
        mean = np.atleast_1d(np.asarray(self.image_normalization[0], dtype=float))
        for view in spec.views:
            if view.integer or view.parts:
                continue
            channels = view.shape[0] if view.shape else 1
            if len(mean) not in (1, channels):
                raise ValueError(f"image_normalization has {len(mean)} values per channel, "
                                 f"but {view.describe()} has {channels} channels on axis 1 "
                                 "(give one value, or one per channel)")
