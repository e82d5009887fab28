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
import json
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._validation import first_non_finite
from ._encoding import (
    Unsaved,
    Unstorable,
    decode_value,
    encode_value,
    expect_type,
    field_objects,
    natural,
    path_of,
    read_view,
    write_view,
)

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


# --------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------
# Decoding: plain values, allow-listed objects, or what the caller passed
# --------------------------------------------------------------------------------------


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


def write_spec(spec: Any) -> dict:
    """An ``InputSpec`` as JSON."""
    return {"form": spec.form, "split": spec.split, "items_paired": spec.items_paired,
            "item_labels": spec.item_labels, "views": [write_view(v) for v in spec.views],
            "negatives": spec.negatives, "negative_names": list(spec.negative_names)}


def read_spec(value: Any) -> Any:
    """The ``InputSpec`` of :func:`write_spec`, every field checked."""
    from ._data import InputSpec

    s = expect_type(value, dict, "input_spec")
    spec = InputSpec(expect_type(s.get("form"), str, "input form"),
                     tuple(read_view(v, "a view") for v in expect_type(s.get("views"), list,
                                                                    "views")),
                     s.get("split"), expect_type(s.get("items_paired"), bool, "items_paired"),
                     expect_type(s.get("item_labels"), bool, "item_labels"),
                     natural(s.get("negatives", 0), "negatives"),
                     tuple(expect_type(s.get("negative_names", []), list, "negative_names")))
    if spec.split is not None:
        expect_type(spec.split, int, "split")
    return spec


def encode_attributes(estimator: Any, names: tuple[str, ...]) -> dict:
    """The fitted attributes ``names`` the estimator has, as JSON (or a clear error)."""
    out = {}
    for name in names:
        if hasattr(estimator, name):
            try:
                out[name] = encode_value(getattr(estimator, name))
            except Unstorable as exc:
                raise ValueError(f"cannot save {name}: it holds {exc.args[0]}, which a saved "
                                 "file cannot hold") from None
    return out


def decode_attributes(fitted: dict, allowed: tuple[str, ...]) -> dict:
    """The saved fitted attributes, which must be among ``allowed`` (the ones ``save``
    writes): a configuration cannot set any other attribute of the loaded estimator."""
    saved = expect_type(fitted.get("attributes"), dict, "attributes")
    unknown = sorted(set(saved) - set(allowed))
    if unknown:
        raise ValueError(f"malformed saved configuration: it sets {unknown[:5]}, which are "
                         f"not fitted attributes load restores (only {list(allowed)})")
    out = {}
    for name, value in saved.items():
        with entry_errors(f"the fitted attribute {name!r}"):
            out[name] = check_slot(name, decode_value(value, name))
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


def encode_model(kind: str, params: dict, named: dict, fitted: dict,
                 tensors: dict) -> tuple[bytes, bytes]:
    """A model's two files as bytes, ``(config.json, model.safetensors)``: what
    :func:`write_model` writes and what a pickle of a fitted estimator holds."""
    from safetensors.torch import save as to_bytes

    weights = to_bytes(tensors)
    config = {"format": FORMAT, "format_version": FORMAT_VERSION, "versions": _versions(),
              "class": kind, "params": params, "fitted": fitted, "supplied_at_load": named,
              "weights_sha256": hashlib.sha256(weights).hexdigest()}
    try:
        text = json.dumps(config, indent=1, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"cannot save: the configuration holds a value JSON cannot hold "
                         f"({exc}); nothing was written") from None
    return text, weights


def write_model(path: Any, kind: str, params: dict, named: dict, fitted: dict,
                tensors: dict, check: Callable[[dict, dict], Any]) -> Path:
    """Write a model folder, all or nothing.

    Everything is encoded in memory (:func:`encode_model`) and ``check(config,
    tensors)`` reads it back as ``load`` would before anything is written (a model that
    would not load is an error here, and nothing is written). Then the weights and the
    configuration, which holds the weights' SHA-256, are each written beside their final
    name and renamed over it: a save that fails before the renames leaves the previous
    model as it was, and one that fails between them (or two saves racing into one
    folder) leaves a folder that ``load`` refuses as an interrupted save, never a mix of
    two models.
    """
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"cannot save into {folder}: it is a file, not a folder")
    from safetensors.torch import load as from_bytes

    text, weights = encode_model(kind, params, named, fitted, tensors)
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
    folder = Path(path)
    config_bytes, weights = (_read_inside(folder, name) for name in (CONFIG, WEIGHTS))
    return decode_model(config_bytes, weights, str(folder / CONFIG), stacklevel=4)


def decode_model(config_bytes: bytes, weights: bytes, where: str, *,
                 stacklevel: int = 3) -> tuple[dict, dict]:
    """The checked configuration and the tensors of a model's two files (read from its
    folder, or held by a pickle), ``where`` naming them in messages; a version of
    skcontrast, torch or skorch other than the one that wrote them gives a warning."""
    from safetensors.torch import load as from_bytes

    config = _read_config(where, config_bytes)
    if hashlib.sha256(weights).hexdigest() != config["weights_sha256"]:
        raise ValueError(f"the weights beside {where} are not those it was saved "
                         "with (their checksums differ): the folder holds an interrupted "
                         "save, or two saves that ran at once; save the model again")
    try:
        tensors = from_bytes(weights)
    except Exception as exc:  # safetensors' own error for a damaged file
        raise ValueError(f"the weights beside {where} are not a readable safetensors "
                         f"file: {exc}") from None
    bad = first_non_finite(tensors)
    if bad is not None:
        raise ValueError(f"the weights beside {where}: the saved tensor {bad!r} holds NaN "
                         "or infinite values; a model with them would embed everything as "
                         "NaN")
    now = _versions()
    differ = {k: (v, now.get(k)) for k, v in config["versions"].items() if now.get(k) != v}
    if differ:
        said = ", ".join(f"{k} {old} (now {new})" for k, (old, new) in differ.items())
        warnings.warn(f"the model was saved with {said}; it may load or behave differently",
                      UserWarning, stacklevel=stacklevel)
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


def _read_config(where: str, data: bytes) -> dict:
    try:
        config = json.loads(data)
    except RecursionError:
        raise ValueError(f"{where} nests its values too deeply to be a saved "
                         "model") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{where} is not valid JSON ({exc}); the folder may hold "
                         "an interrupted or damaged save") from None
    return _checked_config(config, where)


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
        expect_type(config.get(key), kind, key)
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
            return isinstance(v.func, type) and issubclass(v.func, field_objects())
        return isinstance(v, (*field_objects(), nn.Module))

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
                params[name] = check_slot(name, decode_value(value, name))
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


