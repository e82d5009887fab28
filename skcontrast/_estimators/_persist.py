"""Saving a fitted estimator without pickle: weights in safetensors, the rest in JSON.

A pickle (or joblib) file runs code when it is loaded, so it must come from a source
you trust. :meth:`BaseEmbedder.save` writes a folder instead:

- ``model.safetensors``: the tensors of the network, of the loss module (a learned
  temperature, a memory's state) and of the optimizer's state, in the safetensors
  format, which holds data only;
- ``config.json``: the estimator's class and parameters, what it learned besides the
  weights (input form, classes, training history, the seed and epoch to continue
  from, ...), and the versions of skcontrast, torch and skorch that wrote it.

:func:`load` reads them back and **constructs nothing that is not on an explicit
allow-list** (:func:`allowed_objects`): skcontrast's selectors, memories, schedule,
augmentations and encoder factories, and the layer classes of ``torch.nn`` and the
optimizers of ``torch.optim``, called with plain values (numbers, strings, lists)
only. A name is looked up in that list as a whole, never walked attribute by
attribute, and never imported. Anything else the model was built from (your encoder
class or instance, a callable loss, an optimizer from another package) is named in
the file and must be passed to ``load`` by keyword; the error says which.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import json
import math
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator

from .._validation import first_non_finite

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
FORMAT = "skcontrast-model"
FORMAT_VERSION = 3
#: Parameters a loaded model does not need to transform: when the file could only name
#: them, ``load`` puts an :class:`Unsaved` placeholder there with a warning instead of
#: refusing (training refuses until they are passed back); ``random_state``, which a
#: warm start does not read (it continues from the saved seed), becomes ``None``.
OPTIONAL_AT_LOAD = ("augmentation", "callbacks", "scoring", "random_state")
#: Of those, the ones a further fit does not use
NOT_USED_BY_TRAINING = ("random_state",)


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
_GROUP_DATA = ("params",)


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
def _field_objects() -> tuple[type, ...]:
    from .. import datasets

    return (datasets.GaussianNoise, datasets.RandomFeatureMask, datasets.RandomShift,
            datasets.Compose)


# --------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------

class Unstorable(Exception):
    """A value the file cannot hold; ``args[0]`` says what it is."""


def _encode(value: Any) -> Any:
    """A parameter value as JSON, or :class:`Unstorable`."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return {"float": repr(value)}
        return value
    if isinstance(value, np.integer | np.floating | np.bool_):
        return _encode(value.item())
    if isinstance(value, tuple):
        return {"tuple": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise Unstorable(f"a dict with keys {list(value)[:3]}")
        return {"dict": {k: _encode(v) for k, v in value.items()}}
    if isinstance(value, np.ndarray):
        return _encode_array(value)
    allowed = allowed_objects()
    if isinstance(value, BaseEstimator) and path_of(type(value)) in allowed:
        params = {}
        for name, inner in value.get_params(deep=False).items():
            try:
                params[name] = _encode(inner)
            except Unstorable as exc:  # say where it is: the whole object is passed back
                raise Unstorable(f"a {type(value).__name__} whose {name} is "
                                 f"{exc.args[0]}") from None
        return {"estimator": path_of(type(value)), "params": {"dict": params}}
    if isinstance(value, _field_objects()):
        return {"object": path_of(type(value)), "state": _encode(dict(vars(value)))}
    if type(value) in _init_objects():
        return {"init": path_of(type(value)), "params": _encode(_init_arguments(value))}
    if type(value) in recipes():  # made again by calling its class
        return {"call": path_of(type(value))}
    if isinstance(value, functools.partial) and _named(value.func) in allowed:
        return {"partial": _named(value.func), "args": _encode(list(value.args)),
                "keywords": _encode(dict(value.keywords))}
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
            params[name] = _encode(value)
        except Unstorable as exc:
            params[name] = {"supplied": name, "was": exc.args[0]}
            named[name] = exc.args[0]
    return params, named


def _plain_json(value: Any, where: str) -> Any:
    """``value`` as plain JSON (NumPy and torch scalars unwrapped), or a clear error."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, np.generic) or (isinstance(value, torch.Tensor) and value.numel() == 1):
        return _plain_json(value.item(), where)
    if isinstance(value, list | tuple):
        return [_plain_json(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _plain_json(v, f"{where}[{k!r}]") for k, v in value.items()}
    raise ValueError(f"cannot save {where}: it holds {_named(type(value))}, which a saved "
                     "file (JSON) cannot hold. Remove the callback that records it, or "
                     "pickle the estimator instead (trusted sources only)")


# --------------------------------------------------------------------------------------
# Decoding: plain values, allow-listed objects, or what the caller passed
# --------------------------------------------------------------------------------------

def _decode(value: Any, entry: str) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list):
        return [_decode(v, entry) for v in value]
    if not isinstance(value, dict) or len(value) == 0:
        raise ValueError(f"unreadable value of {entry} in the saved configuration: "
                         f"{value!r:.80}")
    if "float" in value:
        return float(_expect(value["float"], str, entry))
    if "tuple" in value:
        return tuple(_decode(v, entry) for v in _expect(value["tuple"], list, entry))
    if "dict" in value:
        return {str(k): _decode(v, f"{entry}[{k!r}]")
                for k, v in _expect(value["dict"], dict, entry).items()}
    if "array" in value:
        return _decode_array(value, entry)
    if "estimator" in value:
        cls = _allowed(value["estimator"], entry)
        if not (isinstance(cls, type) and issubclass(cls, BaseEstimator)):
            raise ValueError(f"{value['estimator']!r} ({entry}) is not an estimator class")
        kwargs = _decode_kwargs(value.get("params"), entry)
        try:
            return cls(**kwargs)
        except TypeError as exc:
            raise ValueError(f"malformed saved configuration: {entry} gives "
                             f"{value['estimator']} arguments it does not take ({exc})") from None
    if "object" in value:
        cls = _allowed(value["object"], entry)
        if cls not in _field_objects():
            raise ValueError(f"{value['object']!r} ({entry}) is not restored field by field")
        obj = cls.__new__(cls)  # no __init__: the saved fields, as they were
        obj.__dict__.update(_decode_kwargs(value.get("state"), entry))
        return obj
    if "init" in value:
        cls = _allowed(value["init"], entry)
        if cls not in _init_objects():
            raise ValueError(f"{value['init']!r} ({entry}) is not made from its arguments")
        kwargs = _decode_kwargs(value.get("params"), entry)
        try:
            return cls(**kwargs)
        except TypeError as exc:
            raise ValueError(f"malformed saved configuration: {entry} gives "
                             f"{value['init']} arguments it does not take ({exc})") from None
    if "call" in value:
        factory = _allowed(value["call"], entry)
        if factory not in _factories():
            raise ValueError(f"{value['call']!r} ({entry}) is not a factory load calls")
        return factory()
    if "partial" in value:
        func = _allowed(value["partial"], entry)
        return functools.partial(func, *_decode(_expect(value.get("args"), list, entry), entry),
                                 **_decode_kwargs(value.get("keywords"), entry))
    if "import" in value:
        return _allowed(value["import"], entry)
    raise ValueError(f"unreadable value of {entry} in the saved configuration: "
                     f"{value!r:.80}")


def _factories() -> tuple[Callable, ...]:
    """What load may call without arguments: the recipes (and 0.2.0's name of one)."""
    from .. import datasets

    return (datasets.digit_augmentation, *recipes())


def _decode_kwargs(value: Any, entry: str) -> dict:
    decoded = _decode(value, entry)
    if not isinstance(decoded, dict) or not all(isinstance(k, str) and k.isidentifier()
                                                for k in decoded):
        raise ValueError(f"the saved arguments of {entry} are not keyword arguments")
    return decoded


def _decode_array(value: dict, entry: str) -> np.ndarray:
    dtype = np.dtype(_expect(value.get("dtype"), str, entry))
    if dtype.kind not in "biufUSO":
        raise ValueError(f"{entry}: arrays of dtype {dtype} are not read")
    items = _expect(value["array"], list, entry)
    if value.get("encoding") == "hex":
        items = [bytes.fromhex(_expect(v, str, entry)) for v in items]
    elif value.get("encoding") is not None:
        raise ValueError(f"{entry}: unknown array encoding {value['encoding']!r}")
    if dtype.kind == "O":
        for v in items:
            _expect(v, bytes | str | int | float, entry)
        out = np.empty(len(items), dtype=object)
        out[:] = items
    elif dtype.kind in "US":
        # strings at their own width: the declared one is never allocated (a 40-byte edit
        # could ask for gigabytes) nor allowed to cut a value short
        out = np.asarray(items, dtype=dtype.kind)
    else:
        out = np.asarray(items, dtype=dtype)
    shape = value.get("shape")
    return out if shape is None else out.reshape([_expect(s, int, entry) for s in shape])


def _natural(value: Any, entry: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"malformed saved configuration: {entry} must be a non-negative "
                         f"integer; got {value!r:.60}")
    return value


def _expect(value: Any, kind: Any, entry: str) -> Any:
    if (isinstance(value, bool) and kind is int) or not isinstance(value, kind):
        raise ValueError(f"malformed saved configuration: {entry} holds {value!r:.60}")
    return value


def _read_view(spec: Any, entry: str) -> Any:
    from ._data import View

    _expect(spec, dict, entry)
    name = spec.get("name")
    _expect(name, str | int, f"{entry} name")
    shape = _expect(spec.get("shape"), list, f"{entry} shape")
    if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
        raise ValueError(f"malformed saved configuration: the shape of {entry} must be a list "
                         f"of non-negative integers; got {shape!r:.80}")
    parts = tuple(_read_view(p, f"{entry} part") for p in _expect(spec.get("parts", []), list,
                                                                  entry))
    vocabulary = spec.get("vocabulary")
    if vocabulary is not None:
        vocabulary = _natural(vocabulary, f"{entry} vocabulary")
    return View(name, tuple(shape), _expect(spec.get("integer"), bool, entry), parts,
                vocabulary, _expect(spec.get("image", False), bool, f"{entry} image"))


def _write_view(view: Any) -> dict:
    name = view.name
    if isinstance(name, np.integer):
        name = int(name)
    if isinstance(name, bool) or not isinstance(name, str | int):
        raise ValueError(f"cannot save: the view (or part) named {name!r} needs a string or "
                         "integer name in a saved file; fit with string keys to save the "
                         "model (nothing was written)")
    return {"name": name, "shape": [int(s) for s in view.shape], "integer": view.integer,
            "parts": [_write_view(p) for p in view.parts], "vocabulary": view.vocabulary,
            "image": view.image}


# --------------------------------------------------------------------------------------
# save and load
# --------------------------------------------------------------------------------------

def _versions() -> dict:
    """The versions of skcontrast, torch and skorch, as the modules say (also when they
    run from a source tree rather than an installed package)."""
    import importlib

    return {name: str(importlib.import_module(name).__version__)
            for name in ("skcontrast", "torch", "skorch")}


def stage_file(path: Path, data: bytes) -> str:
    """Write ``data`` to a new, flushed file beside ``path``; returns its name (rename it
    over ``path`` to publish it)."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return temporary


def write_replacing(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file beside ``path`` and rename it over ``path``: a
    symbolic link at ``path`` is replaced, never written through, and a reader never
    sees a half-written file."""
    temporary = stage_file(path, data)
    try:
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


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
                extra[f"{part}.{key}"] = _plain_json(value, f"the {part} state {key!r}")
    optimizer = state["optimizer"]
    for index, values in optimizer["state"].items():
        for key, value in values.items():
            tensors[f"optimizer.{index}.{key}"] = _optimizer_tensor(
                value, f"the {state['optimizer_class'].__name__} state {key!r}")
    groups = [{k: v for k, v in g.items() if k not in _GROUP_DATA} | {"size": len(g["params"])}
              for g in optimizer["param_groups"]]
    selection = {"selector": state["selector_state"], "net": state.get("selection")}
    selection = _plain_json(_tensors_out(selection, "selection", tensors),
                            "the selector's state")
    fitted = {"seed": state["seed"], "selector_epoch": state["selector_epoch"],
              "selector_state": selection["selector"], "selection": selection["net"],
              "held_out_rows": state["held_out_rows"],
              "optimizer": {"class": path_of(state["optimizer_class"]),
                            "param_groups": _plain_json(groups, "the optimizer's settings")},
              "history": _plain_json(state["history"], "the training history"),
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
    saved = _expect(fitted.get("optimizer"), dict, "optimizer")
    return {"module": _prefixed(tensors, fitted, "module."),
            "criterion": _prefixed(tensors, fitted, "criterion."),
            "optimizer": _optimizer_state(tensors, saved),
            "optimizer_class": _expect(saved.get("class"), str, "the optimizer's class"),
            "history": _expect(fitted.get("history"), list, "history"),
            "selector_epoch": _natural(fitted.get("selector_epoch"), "selector_epoch"),
            "selector_state": _tensors_in(_expect(fitted.get("selector_state"), dict,
                                                  "selector_state"), tensors),
            "selection": _tensors_in(fitted.get("selection"), tensors),
            "held_out_rows": _rows(fitted.get("held_out_rows")),
            "seed": _natural(fitted.get("seed"), "seed")}


def write_spec(spec: Any) -> dict:
    """An ``InputSpec`` as JSON."""
    return {"form": spec.form, "split": spec.split, "items_paired": spec.items_paired,
            "item_labels": spec.item_labels, "views": [_write_view(v) for v in spec.views],
            "negatives": spec.negatives, "negative_names": list(spec.negative_names)}


def read_spec(value: Any) -> Any:
    """The ``InputSpec`` of :func:`write_spec`, every field checked."""
    from ._data import InputSpec

    s = _expect(value, dict, "input_spec")
    spec = InputSpec(_expect(s.get("form"), str, "input form"),
                     tuple(_read_view(v, "a view") for v in _expect(s.get("views"), list,
                                                                    "views")),
                     s.get("split"), _expect(s.get("items_paired"), bool, "items_paired"),
                     _expect(s.get("item_labels"), bool, "item_labels"),
                     _natural(s.get("negatives", 0), "negatives"),
                     tuple(_expect(s.get("negative_names", []), list, "negative_names")))
    if spec.split is not None:
        _expect(spec.split, int, "split")
    return spec


def encode_attributes(estimator: Any, names: tuple[str, ...]) -> dict:
    """The fitted attributes ``names`` the estimator has, as JSON (or a clear error)."""
    out = {}
    for name in names:
        if hasattr(estimator, name):
            try:
                out[name] = _encode(getattr(estimator, name))
            except Unstorable as exc:
                raise ValueError(f"cannot save {name}: it holds {exc.args[0]}, which a saved "
                                 "file cannot hold") from None
    return out


def decode_attributes(fitted: dict, allowed: tuple[str, ...]) -> dict:
    """The saved fitted attributes, which must be among ``allowed`` (the ones ``save``
    writes): a configuration cannot set any other attribute of the loaded estimator."""
    saved = _expect(fitted.get("attributes"), dict, "attributes")
    unknown = sorted(set(saved) - set(allowed))
    if unknown:
        raise ValueError(f"malformed saved configuration: it sets {unknown[:5]}, which are "
                         f"not fitted attributes load restores (only {list(allowed)})")
    out = {}
    for name, value in saved.items():
        with entry_errors(f"the fitted attribute {name!r}"):
            out[name] = check_slot(name, _decode(value, name))
    return out


@contextlib.contextmanager
def entry_errors(entry: str) -> Iterator[None]:
    """Report what goes wrong while reading ``entry`` of a saved configuration as a
    ``ValueError`` that names it (a bad hex string, a number out of range, values
    nested too deeply, arguments a class does not take, ...)."""
    try:
        yield
    except RecursionError:
        raise ValueError(f"malformed saved configuration: {entry} nests its values too "
                         "deeply") from None
    except (TypeError, ValueError, OverflowError, KeyError, AttributeError) as exc:
        if "saved configuration" in str(exc) or "saved model" in str(exc):
            raise
        raise ValueError(f"malformed saved configuration: {entry} could not be read "
                         f"({type(exc).__name__}: {exc})") from None


def write_model(path: Any, kind: str, params: dict, named: dict, fitted: dict,
                tensors: dict, check: Callable[[dict, dict], Any]) -> Path:
    """Write a model folder, all or nothing.

    Everything is encoded in memory and ``check(config, tensors)`` reads it back as
    ``load`` would before anything is written (a model that would not load is an error
    here, and nothing is written). Then the weights and the configuration, which holds
    the weights' SHA-256, are each written beside their final name and renamed over it:
    a save that fails before the renames leaves the previous model as it was, and one
    that fails between them (or two saves racing into one folder) leaves a folder that
    ``load`` refuses as an interrupted save, never a mix of two models.
    """
    from safetensors.torch import load as from_bytes
    from safetensors.torch import save as to_bytes

    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"cannot save into {folder}: it is a file, not a folder")
    weights = to_bytes(tensors)
    config = {"format": FORMAT, "format_version": FORMAT_VERSION, "versions": _versions(),
              "class": kind, "params": params, "fitted": fitted, "supplied_at_load": named,
              "weights_sha256": hashlib.sha256(weights).hexdigest()}
    try:
        text = json.dumps(config, indent=1, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"cannot save: the configuration holds a value JSON cannot hold "
                         f"({exc}); nothing was written") from None
    check(_checked_config(json.loads(text), "the configuration to save"), from_bytes(weights))
    folder.mkdir(parents=True, exist_ok=True)
    staged = [stage_file(folder / WEIGHTS, weights)]
    try:
        staged.append(stage_file(folder / CONFIG, text))
        os.replace(staged[0], folder / WEIGHTS)
        os.replace(staged[1], folder / CONFIG)
    finally:
        for name in staged:
            Path(name).unlink(missing_ok=True)
    return folder


def read_model(path: Any) -> tuple[dict, dict]:
    """The checked configuration and the tensors of a model folder; a version of
    skcontrast, torch or skorch other than the one that wrote it gives a warning."""
    from safetensors.torch import load as from_bytes

    folder = Path(path)
    config_bytes, weights = (_read_inside(folder, name) for name in (CONFIG, WEIGHTS))
    config = _read_config(folder, config_bytes)
    if hashlib.sha256(weights).hexdigest() != config["weights_sha256"]:
        raise ValueError(f"{folder / WEIGHTS} is not the weights {folder / CONFIG} was saved "
                         "with (their checksums differ): the folder holds an interrupted "
                         "save, or two saves that ran at once; save the model again")
    try:
        tensors = from_bytes(weights)
    except Exception as exc:  # safetensors' own error for a damaged file
        raise ValueError(f"{folder / WEIGHTS} is not a readable safetensors file: "
                         f"{exc}") from None
    bad = first_non_finite(tensors)
    if bad is not None:
        raise ValueError(f"{folder / WEIGHTS}: the saved tensor {bad!r} holds NaN or "
                         "infinite values; a model with them would embed everything as NaN")
    now = _versions()
    differ = {k: (v, now.get(k)) for k, v in config["versions"].items() if now.get(k) != v}
    if differ:
        said = ", ".join(f"{k} {old} (now {new})" for k, (old, new) in differ.items())
        warnings.warn(f"the model was saved with {said}; it may load or behave differently",
                      UserWarning, stacklevel=3)
    return config, tensors


def _read_inside(folder: Path, name: str) -> bytes:
    """The bytes of ``folder / name``: a file of the folder (a link is followed only
    when it stays inside the folder)."""
    path = folder / name
    if not path.is_file():
        raise FileNotFoundError(f"{folder} holds no saved skcontrast model (expected {CONFIG} "
                                f"and {WEIGHTS})")
    if path.is_symlink() and not path.resolve().is_relative_to(folder.resolve()):
        raise ValueError(f"{path} is a link to {path.resolve()}, outside the model folder; "
                         "load reads only the folder's own files")
    return path.read_bytes()


def _read_config(folder: Path, data: bytes) -> dict:
    try:
        config = json.loads(data)
    except RecursionError:
        raise ValueError(f"{folder / CONFIG} nests its values too deeply to be a saved "
                         "model") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{folder / CONFIG} is not valid JSON ({exc}); the folder may hold "
                         "an interrupted or damaged save") from None
    return _checked_config(config, str(folder / CONFIG))


def _checked_config(config: Any, where: str) -> dict:
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise ValueError(f"{where} is not a saved skcontrast model")
    if config.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{where} was written in format version "
                         f"{config.get('format_version')!r}; this skcontrast reads version "
                         f"{FORMAT_VERSION}: save the model again with the skcontrast that "
                         "wrote it, or load it there")
    for key, kind in (("versions", dict), ("class", str), ("params", dict), ("fitted", dict),
                      ("weights_sha256", str)):
        _expect(config.get(key), kind, key)
    return config


def _slot_kinds() -> dict[str, Callable[[Any], bool]]:
    """What each restored slot (a parameter or fitted attribute) may hold besides plain
    values: a tokenizer slot a tokenizer, a selector slot a selector, ... A slot not
    named here holds plain values only (numbers, strings, arrays and their lists)."""
    from torch import nn

    from .. import datasets, memory, selectors, text
    from ..losses import Loss
    from ._schedule import WarmupCosine

    def module_class(v: Any) -> bool:  # a module class or factory (or a partial of one)
        if isinstance(v, functools.partial):
            return module_class(v.func)
        return (isinstance(v, type) and issubclass(v, nn.Module)) or v is datasets.digit_cnn

    def augmentation(v: Any) -> bool:  # an augmentation object, or what a factory makes
        if isinstance(v, functools.partial):
            return isinstance(v.func, type) and issubclass(v.func, _field_objects())
        return isinstance(v, (*_field_objects(), nn.Module))

    tokenizer = (lambda v: isinstance(v, text.HashingNgramTokenizer))  # noqa: E731
    return {"tokenizer": tokenizer, "tokenizer_": tokenizer,
            "selector": lambda v: isinstance(v, selectors.BatchSelector),
            "loss": lambda v: isinstance(v, Loss),
            "memory": lambda v: isinstance(v, memory.BaseMemory),
            "lr_schedule": lambda v: isinstance(v, WarmupCosine),
            "optimizer": lambda v: isinstance(v, type) and issubclass(v, torch.optim.Optimizer),
            "module": module_class, "projection_head": module_class,
            "augmentation": augmentation}


def check_slot(name: str, value: Any) -> Any:
    """``value``, read from a saved configuration for the slot ``name``, if every object
    in it is of the slot's kind (:func:`_slot_kinds`); else an error naming the slot,
    before anything is built from it (an edited file could put any allow-listed class,
    ``torch.nn.Linear`` say, in a tokenizer's place)."""
    accepts = _slot_kinds().get(name)

    def walk(v: Any) -> None:
        if v is None or isinstance(v, bool | int | float | str | np.ndarray | np.generic):
            return
        if isinstance(v, list | tuple):
            for item in v:
                walk(item)
        elif isinstance(v, dict):
            for item in v.values():
                walk(item)
        elif accepts is None or not accepts(v):
            kind = path_of(v if isinstance(v, type) else type(v))
            raise ValueError(f"malformed saved configuration: {name} holds {kind}, which "
                             f"is not what {name} takes" + ("" if accepts is not None else
                                                          " (plain values only)"))

    walk(value)
    return value


def choose_params(config: dict, given: dict, names: list[str]) -> dict:
    """The estimator's parameters: decoded from the file, or passed to ``load``."""
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ValueError(f"load got {unknown}, which are not parameters of "
                         f"{config['class']}; pass parameters such as module=..., "
                         "loss=..., optimizer=...")
    params, missing = {}, {}
    for name, value in config["params"].items():
        if name not in names or not name.isidentifier():
            raise ValueError(f"the saved configuration has a parameter {name!r}, which "
                             f"{config['class']} does not have")
        if name in given:
            params[name] = given[name]
        elif isinstance(value, dict) and "supplied" in value:
            if name in OPTIONAL_AT_LOAD:
                was = str(value.get("was"))
                unused = name in NOT_USED_BY_TRAINING
                params[name] = None if unused else Unsaved(name, was)
                now = "it is None in the loaded model" if unused else \
                    "the loaded model transforms without it, and refuses to train until " \
                    "it is passed back"
                warnings.warn(f"{name} was {was}, which a saved file does not hold: {now} "
                              f"(pass {name}=... to load to restore it)"
                              f"{_OPTIONAL_NOTE.get(name, '')}", UserWarning, stacklevel=3)
            else:
                missing[name] = value.get("was")
        else:
            with entry_errors(f"the parameter {name!r}"):
                params[name] = check_slot(name, _decode(value, name))
    if missing:
        listed = ", ".join(f"{k}=<{v}>" for k, v in missing.items())
        raise ValueError(f"the saved model was built from objects a saved file does not hold "
                         f"(that would mean running code from it): pass them to load, "
                         f"skcontrast.load(path, {listed})")
    return params


_OPTIONAL_NOTE = {
    "augmentation": "; transform_pairs of single views needs it too",
    "random_state": "; warm starts continue from the saved seed",
}


def _prefixed(tensors: dict, fitted: dict, prefix: str) -> dict:
    part = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
    extra = _expect(fitted.get("extra_state", {}), dict, "extra_state")
    part.update({k[len(prefix):]: v for k, v in extra.items() if k.startswith(prefix)})
    return part


def _rows(value: Any) -> np.ndarray | None:
    if value is None:
        return None
    rows = _expect(value, list, "held_out_rows")
    if not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in rows):
        raise ValueError("malformed saved configuration: held_out_rows must be row indices")
    return np.asarray(rows, dtype=np.int64)


def _optimizer_state(tensors: dict, saved: dict) -> dict:
    """The saved optimizer state in ``torch.optim`` form."""
    groups, start = [], 0
    for group in _expect(saved.get("param_groups"), list, "param_groups"):
        group = dict(_expect(group, dict, "a param group"))
        size = _natural(group.pop("size", None), "a param group's size")
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

