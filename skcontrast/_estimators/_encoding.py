"""The parameters of a saved estimator as JSON, and back: each value is written as plain
data or named (:func:`encode_params`), and read back constructing nothing that is not on
the allow-list (:func:`allowed_objects`); what the file can only name is an
:class:`Unsaved` placeholder until the caller passes it to ``load``.
:mod:`._persist` writes and reads the files."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator


class Unsaved:
    """What a loaded model holds for a parameter a saved file could not hold (an object
    of your own: an augmentation, callbacks, a scorer) and ``load`` was not given.

    The model transforms without it; whatever would use it (``fit``, a warm start,
    ``transform_pairs`` of single views) refuses, naming the parameter and how to pass
    it back, rather than train silently with something else (a default augmentation
    in place of yours). ``set_params`` (or ``load(path, name=...)``) replaces it; set
    ``None`` to go on without it.
    """

    def __init__(self, name: str, was: str) -> None:
        self.name = name
        self.was = was

    def refusal(self) -> str:
        """The error's message: what is missing and how to give it back."""
        return (f"{self.name} was {self.was} when the model was saved, which a saved file "
                f"does not hold: pass it back before this model trains again, "
                f"skcontrast.load(path, {self.name}=...) or set_params({self.name}=...) "
                f"({self.name}=None goes on without it)")

    def __repr__(self) -> str:
        return f"<not saved: {self.was}>"


def check_saved(value: Any) -> Any:
    """``value``, unless it is an :class:`Unsaved` placeholder, which is refused (with
    what to pass back)."""
    if isinstance(value, Unsaved):
        raise ValueError(value.refusal())
    return value


#: Keys of an optimizer's param group that are data, not settings.
GROUP_DATA = ("params",)


def path_of(obj: Any) -> str:
    """``module.qualname`` of a class or function: how the file names it."""
    return f"{obj.__module__}.{obj.__qualname__}"


#: The modules that held the losses in skcontrast 0.2.0, whose saved files name them by
#: those paths (each loss is now one module of its own): such a file still loads.
LOSS_MODULES_0_2 = {
    "_objects": ("InfoNCE", "SymmetricInfoNCE", "NTXent", "DCL", "DHEL", "KCL", "SigLIP",
                 "HardNegativeNCE", "DebiasedNCE", "SupCon", "ContrastiveMargin"),
    "_infonce": ("info_nce", "symmetric_info_nce", "nt_xent", "dcl", "dhel"),
    "_kernel": ("kcl",),
    "_sigmoid": ("siglip",),
    "_hard": ("hard_negative_nce", "debiased_nce"),
    "_supervised": ("supcon", "contrastive_margin"),
}
#: Selectors a saved file names by the module that held them when it was written (the
#: curating selectors were in ``_curation``, now ``_curators``): such a file still loads.
SELECTOR_MODULES_BEFORE = {"_curation": ("JESTSelector", "RhoLossSelector")}


def recipes() -> tuple[type, ...]:
    """Classes whose objects take no parameter: stored by name, made again by calling
    them (read when a model is saved or loaded, so the datasets are imported then)."""
    from ..datasets import DigitAugmentation

    return (DigitAugmentation,)


@functools.cache
def allowed_objects() -> dict[str, Any]:
    """Every class and function :func:`load` may name or construct, by its path.

    - estimators (constructed from their saved parameters): the loss objects of
      :mod:`skcontrast.losses`, the selectors of :mod:`skcontrast.selectors`, the
      memories of :mod:`skcontrast.memory` and :class:`~skcontrast.WarmupCosine`;
    - augmentation objects of :mod:`skcontrast.datasets` (restored field by field) and
      its factories ``digit_cnn`` and ``digit_augmentation``; the image augmentation
      (made again from its arguments) and encoder of :mod:`skcontrast.images`;
    - the loss functions of :mod:`skcontrast.losses`;
    - every ``torch.nn.Module`` class in ``torch.nn`` and every optimizer class in
      ``torch.optim`` (called with plain values only).
    """
    from .. import datasets, images, losses, memory, selectors, text
    from ._schedule import WarmupCosine

    chosen: list[Any] = [WarmupCosine, text.HashingNgramTokenizer, text.NgramBagEncoder,
                         images.ImageEncoder, images.ImageAugmentation,
                         datasets.GaussianNoise, datasets.RandomFeatureMask,
                         datasets.RandomShift, datasets.Compose, datasets.digit_cnn,
                         datasets.digit_augmentation, *recipes()]
    chosen += [getattr(selectors, name) for name in selectors.__all__
               if isinstance(getattr(selectors, name), type)
               and issubclass(getattr(selectors, name), selectors.BatchSelector)]
    chosen += [getattr(memory, name) for name in memory.__all__
               if isinstance(getattr(memory, name), type)
               and issubclass(getattr(memory, name), memory.BaseMemory)]
    chosen += [*losses.PAIR_LOSSES.values(), *losses.LABEL_LOSSES.values(),
               losses.FalseNegativeGuard]
    chosen += [*losses.LOSSES.values(), losses.FunctionLoss]
    chosen += [obj for obj in vars(torch.nn).values()
               if isinstance(obj, type) and issubclass(obj, torch.nn.Module)]
    chosen += [obj for obj in vars(torch.optim).values()
               if isinstance(obj, type) and issubclass(obj, torch.optim.Optimizer)
               and obj is not torch.optim.Optimizer]
    paths = {path_of(obj): obj for obj in chosen}
    paths.update({f"skcontrast.losses.{module}.{name}": getattr(losses, name)
                  for module, names in LOSS_MODULES_0_2.items() for name in names})
    paths.update({f"skcontrast.selectors.{module}.{name}": getattr(selectors, name)
                  for module, names in SELECTOR_MODULES_BEFORE.items() for name in names})
    return paths


def _allowed(path: Any, entry: str) -> Any:
    if not isinstance(path, str) or path not in allowed_objects():
        raise ValueError(f"the saved configuration names {path!r} for {entry}, which "
                         "skcontrast.load does not construct (it builds only skcontrast's "
                         "own objects and torch.nn/torch.optim classes); if the model "
                         f"really was built from it, pass it to load by keyword")
    return allowed_objects()[path]


#: Modules of skcontrast's own made again from their constructor's arguments, each
#: stored as the attribute of its name (the image augmentation).
def _init_objects() -> tuple[type, ...]:
    from .. import images

    return (images.ImageAugmentation,)


def _init_arguments(value: Any) -> dict:
    """The constructor's arguments of an :func:`_init_objects` object, as it holds them."""
    return {name: getattr(value, name)
            for name in inspect.signature(type(value)).parameters}


#: Objects of skcontrast's own whose fields are plain data (augmentations).
def field_objects() -> tuple[type, ...]:
    from .. import datasets

    return (datasets.GaussianNoise, datasets.RandomFeatureMask, datasets.RandomShift,
            datasets.Compose)


class Unstorable(Exception):
    """A value the file cannot hold; ``args[0]`` says what it is."""


def encode_value(value: Any) -> Any:
    """A parameter value as JSON, or :class:`Unstorable`."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return {"float": repr(value)}
        return value
    if isinstance(value, np.integer | np.floating | np.bool_):
        return encode_value(value.item())
    if isinstance(value, tuple):
        return {"tuple": [encode_value(v) for v in value]}
    if isinstance(value, list):
        return [encode_value(v) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise Unstorable(f"a dict with keys {list(value)[:3]}")
        return {"dict": {k: encode_value(v) for k, v in value.items()}}
    if isinstance(value, np.ndarray):
        return _encode_array(value)
    allowed = allowed_objects()
    if isinstance(value, BaseEstimator) and path_of(type(value)) in allowed:
        params = {}
        for name, inner in value.get_params(deep=False).items():
            try:
                params[name] = encode_value(inner)
            except Unstorable as exc:  # say where it is: the whole object is passed back
                raise Unstorable(f"a {type(value).__name__} whose {name} is "
                                 f"{exc.args[0]}") from None
        return {"estimator": path_of(type(value)), "params": {"dict": params}}
    if isinstance(value, field_objects()):
        return {"object": path_of(type(value)), "state": encode_value(dict(vars(value)))}
    if type(value) in _init_objects():
        return {"init": path_of(type(value)), "params": encode_value(_init_arguments(value))}
    if type(value) in recipes():  # made again by calling its class
        return {"call": path_of(type(value))}
    if isinstance(value, functools.partial) and _named(value.func) in allowed:
        return {"partial": _named(value.func), "args": encode_value(list(value.args)),
                "keywords": encode_value(dict(value.keywords))}
    if _named(value) in allowed and allowed[_named(value)] is value:
        return {"import": _named(value)}
    named = isinstance(value, type) or inspect.isroutine(value)
    raise Unstorable(f"{'' if named else 'an object of '}"
                     f"{_named(value if named else type(value))}")


def _named(obj: Any) -> str:
    try:
        return path_of(obj)
    except AttributeError:
        return type(obj).__name__


def _encode_array(value: np.ndarray) -> dict:
    kind = value.dtype.kind
    if kind in "biufU":
        return {"array": value.tolist(), "dtype": value.dtype.str}
    if kind == "S":
        return {"array": [v.hex() for v in value.ravel().tolist()], "dtype": value.dtype.str,
                "shape": list(value.shape), "encoding": "hex"}
    if kind == "O":
        items = value.ravel().tolist()
        if all(isinstance(v, str) for v in items) or all(
                isinstance(v, int | float) and not isinstance(v, bool) for v in items):
            return {"array": items, "dtype": "O", "shape": list(value.shape)}
        if all(isinstance(v, bytes) for v in items):
            return {"array": [v.hex() for v in items], "dtype": "O", "shape": list(value.shape),
                    "encoding": "hex"}
    raise Unstorable(f"an array of {value.dtype}")


def encode_params(estimator: Any) -> tuple[dict, dict]:
    """The estimator's parameters as JSON, and ``{name: what it was}`` for those the file
    can only name (to be passed to :func:`load` by keyword)."""
    params, named = {}, {}
    for name, value in estimator.get_params(deep=False).items():
        if name == "accelerator":  # a process-local handle, never restored
            continue
        try:
            params[name] = encode_value(value)
        except Unstorable as exc:
            params[name] = {"supplied": name, "was": exc.args[0]}
            named[name] = exc.args[0]
    return params, named


def plain_json(value: Any, where: str) -> Any:
    """``value`` as plain JSON (NumPy and torch scalars unwrapped), or a clear error."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, np.generic) or (isinstance(value, torch.Tensor) and value.numel() == 1):
        return plain_json(value.item(), where)
    if isinstance(value, list | tuple):
        return [plain_json(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: plain_json(v, f"{where}[{k!r}]") for k, v in value.items()}
    raise ValueError(f"cannot save {where}: it holds {_named(type(value))}, which a saved "
                     "file (JSON) cannot hold. Remove the callback that records it, or "
                     "pickle the estimator instead (trusted sources only)")


def decode_value(value: Any, entry: str) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list):
        return [decode_value(v, entry) for v in value]
    if not isinstance(value, dict) or len(value) == 0:
        raise ValueError(f"unreadable value of {entry} in the saved configuration: "
                         f"{value!r:.80}")
    if "float" in value:
        return float(expect_type(value["float"], str, entry))
    if "tuple" in value:
        return tuple(decode_value(v, entry) for v in expect_type(value["tuple"], list, entry))
    if "dict" in value:
        return {str(k): decode_value(v, f"{entry}[{k!r}]")
                for k, v in expect_type(value["dict"], dict, entry).items()}
    if "array" in value:
        return _decode_array(value, entry)
    if "estimator" in value:
        cls = _allowed(value["estimator"], entry)
        if not (isinstance(cls, type) and issubclass(cls, BaseEstimator)):
            raise ValueError(f"{value['estimator']!r} ({entry}) is not an estimator class")
        return _made(cls, value["estimator"], value.get("params"), entry)
    if "object" in value:
        cls = _allowed(value["object"], entry)
        if cls not in field_objects():
            raise ValueError(f"{value['object']!r} ({entry}) is not restored field by field")
        obj = cls.__new__(cls)  # no __init__: the saved fields, as they were
        obj.__dict__.update(_decode_kwargs(value.get("state"), entry))
        return obj
    if "init" in value:
        cls = _allowed(value["init"], entry)
        if cls not in _init_objects():
            raise ValueError(f"{value['init']!r} ({entry}) is not made from its arguments")
        return _made(cls, value["init"], value.get("params"), entry)
    if "call" in value:
        factory = _allowed(value["call"], entry)
        if factory not in _factories():
            raise ValueError(f"{value['call']!r} ({entry}) is not a factory load calls")
        return factory()
    if "partial" in value:
        func = _allowed(value["partial"], entry)
        args = decode_value(expect_type(value.get("args"), list, entry), entry)
        return functools.partial(func, *args, **_decode_kwargs(value.get("keywords"), entry))
    if "import" in value:
        return _allowed(value["import"], entry)
    raise ValueError(f"unreadable value of {entry} in the saved configuration: "
                     f"{value!r:.80}")


def _factories() -> tuple[Callable, ...]:
    """What load may call without arguments: the recipes (and 0.2.0's name of one)."""
    from .. import datasets

    return (datasets.digit_augmentation, *recipes())


def _made(cls: Any, path: str, params: Any, entry: str) -> Any:
    """``cls`` called with its saved ``params``; arguments it does not take are a
    malformed configuration, naming the entry."""
    kwargs = _decode_kwargs(params, entry)
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ValueError(f"malformed saved configuration: {entry} gives {path} arguments "
                         f"it does not take ({exc})") from None


def _decode_kwargs(value: Any, entry: str) -> dict:
    decoded = decode_value(value, entry)
    if not isinstance(decoded, dict) or not all(isinstance(k, str) and k.isidentifier()
                                                for k in decoded):
        raise ValueError(f"the saved arguments of {entry} are not keyword arguments")
    return decoded


def _decode_array(value: dict, entry: str) -> np.ndarray:
    dtype = np.dtype(expect_type(value.get("dtype"), str, entry))
    if dtype.kind not in "biufUSO":
        raise ValueError(f"{entry}: arrays of dtype {dtype} are not read")
    items = expect_type(value["array"], list, entry)
    if value.get("encoding") == "hex":
        items = [bytes.fromhex(expect_type(v, str, entry)) for v in items]
    elif value.get("encoding") is not None:
        raise ValueError(f"{entry}: unknown array encoding {value['encoding']!r}")
    if dtype.kind == "O":
        for v in items:
            expect_type(v, bytes | str | int | float, entry)
        out = np.empty(len(items), dtype=object)
        out[:] = items
    elif dtype.kind in "US":
        # strings at their own width: the declared one is never allocated (a 40-byte edit
        # could ask for gigabytes) nor allowed to cut a value short
        out = np.asarray(items, dtype=dtype.kind)
    else:
        out = np.asarray(items, dtype=dtype)
    shape = value.get("shape")
    return out if shape is None else out.reshape([expect_type(s, int, entry) for s in shape])


def natural(value: Any, entry: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"malformed saved configuration: {entry} must be a non-negative "
                         f"integer; got {value!r:.60}")
    return value


def expect_type(value: Any, kind: Any, entry: str) -> Any:
    if (isinstance(value, bool) and kind is int) or not isinstance(value, kind):
        raise ValueError(f"malformed saved configuration: {entry} holds {value!r:.60}")
    return value


def read_view(spec: Any, entry: str) -> Any:
    from ._data import View

    expect_type(spec, dict, entry)
    name = spec.get("name")
    expect_type(name, str | int, f"{entry} name")
    shape = expect_type(spec.get("shape"), list, f"{entry} shape")
    if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
        raise ValueError(f"malformed saved configuration: the shape of {entry} must be a list "
                         f"of non-negative integers; got {shape!r:.80}")
    parts = tuple(read_view(p, f"{entry} part") for p in expect_type(spec.get("parts", []), list,
                                                                  entry))
    vocabulary = spec.get("vocabulary")
    if vocabulary is not None:
        vocabulary = natural(vocabulary, f"{entry} vocabulary")
    return View(name, tuple(shape), expect_type(spec.get("integer"), bool, entry), parts,
                vocabulary, expect_type(spec.get("image", False), bool, f"{entry} image"))


def write_view(view: Any) -> dict:
    name = view.name
    if isinstance(name, np.integer):
        name = int(name)
    if isinstance(name, bool) or not isinstance(name, str | int):
        raise ValueError(f"cannot save: the view (or part) named {name!r} needs a string or "
                         "integer name in a saved file; fit with string keys to save the "
                         "model (nothing was written)")
    return {"name": name, "shape": [int(s) for s in view.shape], "integer": view.integer,
            "parts": [write_view(p) for p in view.parts], "vocabulary": view.vocabulary,
            "image": view.image}

