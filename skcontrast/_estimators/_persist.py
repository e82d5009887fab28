"""Saving a fitted estimator without pickle: weights in safetensors, the rest in JSON.

A pickle (or joblib) file runs code when it is loaded, so it must come from a source
you trust. :meth:`BaseEmbedder.save` writes a folder instead:

- ``model.safetensors``: the tensors of the network and of the loss module (a learned
  temperature, a memory's state), in the safetensors format, which holds data only;
- ``config.json``: the estimator's class and parameters, what it learned besides the
  weights (input form, classes, training history, ...), and the versions of
  skcontrast, torch and skorch that wrote it.

:func:`load` reads them back without running code from the files: the classes it
re-creates are looked up among skcontrast's and torch's own, by name; anything else the
model was built from (your encoder class or instance, a kornia augmentation) is named in
the file but must be passed to :func:`load`, which says so.
"""

from __future__ import annotations

import importlib
import inspect
import json
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
FORMAT = "skcontrast-model"
TRUSTED_ROOTS = ("skcontrast", "torch")
#: Parameters that describe objects the file cannot rebuild, given back at load.
SUPPLIED = ("module", "augmentation", "projection_head", "callbacks")


def _path_of(obj: Any) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def _encode(value: Any, missing: list, name: str) -> Any:
    """A parameter value as JSON; what cannot be written is recorded in ``missing``."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.integer | np.floating | np.bool_):
        return value.item()
    if isinstance(value, tuple):
        return {"tuple": [_encode(v, missing, name) for v in value]}
    if isinstance(value, list):
        return [_encode(v, missing, name) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"dict": {k: _encode(v, missing, f"{name}[{k!r}]") for k, v in value.items()}}
    if isinstance(value, np.ndarray) and (value.dtype.kind in "biufUS" or (
            value.dtype.kind == "O" and all(isinstance(v, str | int | float | bool)
                                             for v in value.flat))):
        return {"array": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, BaseEstimator) and type(value).__module__.startswith("skcontrast"):
        return {"estimator": _path_of(type(value)),
                "params": _encode(value.get_params(deep=False), missing, name)}
    if type(value).__module__.split(".")[0] == "skcontrast" and hasattr(value, "__dict__"):
        trial: list = []  # an object of skcontrast's own (an augmentation): its fields
        state = _encode(vars(value), trial, name)
        if not trial:
            return {"object": _path_of(type(value)), "state": state}
    named = isinstance(value, type) or inspect.isfunction(value) or inspect.isbuiltin(value)
    if named and getattr(value, "__module__", "").split(".")[0] in TRUSTED_ROOTS:
        return {"import": _path_of(value)}
    missing.append(name)
    return {"supplied": name, "was": _path_of(value if named else type(value))}


def _decode(value: Any, supplied: dict, name: str) -> Any:
    if isinstance(value, list):
        return [_decode(v, supplied, name) for v in value]
    if not isinstance(value, dict):
        return value
    if "tuple" in value:
        return tuple(_decode(v, supplied, name) for v in value["tuple"])
    if "dict" in value:
        return {k: _decode(v, supplied, f"{name}[{k!r}]") for k, v in value["dict"].items()}
    if "array" in value:
        return np.asarray(value["array"], dtype=value["dtype"])
    if "estimator" in value:
        cls = _trusted(value["estimator"])
        if not (isinstance(cls, type) and issubclass(cls, BaseEstimator)):
            raise ValueError(f"{value['estimator']!r} is not an estimator class")
        return cls(**_decode(value["params"], supplied, name))
    if "import" in value:
        return _trusted(value["import"])
    if "object" in value:
        cls = _trusted(value["object"])
        obj = cls.__new__(cls)  # no __init__: the saved fields, as they were
        obj.__dict__.update(_decode(value["state"], supplied, name))
        return obj
    if "supplied" in value:
        top = value["supplied"].split("[")[0]
        if supplied.get(top) is None:
            raise ValueError(
                f"the saved model was built with {value['supplied']} = an object of "
                f"{value['was']}, which a saved file does not hold (that would mean running "
                f"code from it): pass it to load, e.g. skcontrast.load(path, {top}=...)")
        return supplied[top]
    raise ValueError(f"unreadable parameter {name} in the saved configuration: {value!r}")


def _trusted(path: str) -> Any:
    """A class or function of skcontrast or torch, by its dotted path (nothing else)."""
    parts = path.split(".")
    if parts[0] not in TRUSTED_ROOTS:
        raise ValueError(f"{path!r} is outside skcontrast and torch; pass it to load")
    for cut in range(len(parts) - 1, 0, -1):  # the longest importable module prefix
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            target = getattr(target, attribute, None)
        if callable(target):
            return target
        break
    raise ValueError(f"cannot find {path!r} in the installed skcontrast or torch")


def _versions() -> dict:
    import skorch

    from .. import __version__

    return {"skcontrast": __version__, "torch": torch.__version__,
            "skorch": skorch.__version__}


def save(estimator: Any, path: Any) -> Path:
    """Write a fitted estimator to the folder ``path`` (see the module docstring)."""
    from safetensors.torch import save_file
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(estimator, "net_")
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    net = estimator.net_
    tensors, extra = {}, {}
    for prefix, module in (("module.", net.inference_module()), ("criterion.", net.criterion_)):
        for key, value in module.state_dict().items():
            if isinstance(value, torch.Tensor):
                tensors[prefix + key] = value.detach().cpu().contiguous()
            else:
                extra[prefix + key] = value
    save_file(tensors, str(folder / WEIGHTS))
    missing: list = []
    params = {k: _encode(v, missing, k) for k, v in estimator.get_params(deep=False).items()
              if k != "accelerator"}
    spec = estimator.input_spec_
    fitted = {
        "input_spec": {"form": spec.form, "split": spec.split,
                       "items_paired": spec.items_paired,
                       "views": [{**asdict(v), "shape": list(v.shape)} for v in spec.views]},
        "n_samples": estimator.n_samples_,
        "shared": net.module.shared,
        "history": json.loads(json.dumps(net.history.to_list(), default=_plain)),
        "extra_state": json.loads(json.dumps(extra, default=_plain)),
        "attributes": {name: _encode(getattr(estimator, name), missing, name)
                       for name in ("n_features_in_", "feature_names_in_", "view_split_",
                                    "classes_", "class_centres_", "temperature_",
                                    "n_components_") if hasattr(estimator, name)},
    }
    config = {"format": FORMAT, "format_version": 1, "versions": _versions(),
              "class": type(estimator).__name__, "params": params, "fitted": fitted,
              "supplied_at_load": sorted(set(missing))}
    (folder / CONFIG).write_text(json.dumps(config, indent=1))
    return folder


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"cannot store {type(value).__name__}")


def load(path: Any, *, module: Any = None, augmentation: Any = None,
         projection_head: Any = None, callbacks: Any = None, device: str = "cpu") -> Any:
    """Load an estimator written by ``estimator.save(path)``, without pickle.

    Weights come from ``model.safetensors`` (data only) and everything else from
    ``config.json``; no code from the files runs. Objects the file only names (your
    encoder, unless it is skcontrast's or torch's; an augmentation; callbacks) are
    passed here; a missing one is an error that names it. A version of skcontrast,
    torch or skorch other than the one that saved the model gives a warning.

    Parameters
    ----------
    path : str or path
        The folder ``save`` wrote.
    module, augmentation, projection_head, callbacks : optional
        The objects of those parameters, when the file could only name them.
    device : str, default='cpu'
        Where the network is placed (``set_params(device=...)`` applies to later fits).

    Returns
    -------
    ContrastiveEmbedder or SupConEmbedder
        Fitted: it transforms and scores, and keeps training with ``warm_start=True``
        (with a fresh optimizer state).
    """
    from safetensors.torch import load_file

    from ._contrastive import ContrastiveEmbedder
    from ._data import InputSpec, View
    from ._supcon import SupConEmbedder

    folder = Path(path)
    if not (folder / CONFIG).is_file() or not (folder / WEIGHTS).is_file():
        raise FileNotFoundError(f"{folder} holds no saved skcontrast model (expected {CONFIG} "
                                f"and {WEIGHTS})")
    config = json.loads((folder / CONFIG).read_text())
    if config.get("format") != FORMAT:
        raise ValueError(f"{folder / CONFIG} is not a saved skcontrast model")
    now = _versions()
    differ = {k: (v, now.get(k)) for k, v in config["versions"].items() if now.get(k) != v}
    if differ:
        said = ", ".join(f"{k} {old} (now {new})" for k, (old, new) in differ.items())
        warnings.warn(f"the model was saved with {said}; it may load or behave differently",
                      UserWarning, stacklevel=2)
    kinds = {"ContrastiveEmbedder": ContrastiveEmbedder, "SupConEmbedder": SupConEmbedder}
    if config["class"] not in kinds:
        raise ValueError(f"unknown estimator class {config['class']!r} in {folder / CONFIG}")
    supplied = {"module": module, "augmentation": augmentation,
                "projection_head": projection_head, "callbacks": callbacks}
    encoded = dict(config["params"])
    for name in ("augmentation", "callbacks"):  # optional for transforming
        if "supplied" in str(encoded.get(name)) and supplied[name] is None:
            encoded[name] = None
            if name == "augmentation":
                warnings.warn("the augmentation was not restored (pass augmentation= to "
                              "load): transform works, transform_pairs and further training "
                              "of single views need it", UserWarning, stacklevel=2)
    params = {k: _decode(v, supplied, k) for k, v in encoded.items()}
    estimator = kinds[config["class"]](**{**params, "device": device})
    fitted = config["fitted"]
    s = fitted["input_spec"]
    spec = InputSpec(s["form"], tuple(View(v["name"], tuple(v["shape"]), v["integer"])
                                      for v in s["views"]), s["split"], s["items_paired"])
    attributes = {k: _decode(v, supplied, k) for k, v in fitted["attributes"].items()}
    net = estimator.build_net(spec, fitted["n_samples"], fitted["shared"], device)
    state = load_file(str(folder / WEIGHTS))
    for prefix, target in (("module.", net.module_), ("criterion.", net.criterion_)):
        part = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
        part.update({k[len(prefix):]: v for k, v in fitted["extra_state"].items()
                     if k.startswith(prefix)})
        target.load_state_dict(part)
    from skorch.history import History

    net.history = History(fitted["history"])
    estimator.net_ = net
    estimator.input_spec_ = spec
    estimator.history_ = net.history
    estimator.n_samples_ = fitted["n_samples"]
    for name, value in attributes.items():
        setattr(estimator, name, value)
    return estimator
