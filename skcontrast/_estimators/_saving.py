"""Saving a fitted estimator and loading it back, without pickle: the part of
:class:`~._base.BaseEmbedder` that writes its folder (:meth:`SavedModel.save`, through
:mod:`._persist`) or exports one view's encoder, and the module-level :func:`load`,
which reads a saved model back into the class that saved it."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import torch
from sklearn.utils.validation import check_is_fitted

from .._validation import param_names
from ._encoding import Unsaved, encode_params, path_of
from ._persist import (
    choose_params,
    decode_attributes,
    decode_model,
    encode_attributes,
    encode_model,
    entry_errors,
    read_model,
    read_spec,
    write_model,
    write_spec,
)
from ._state import files_training_state, training_state_files

#: The fitted attributes ``save`` keeps besides the net's state.
SAVED_ATTRIBUTES = ("n_features_in_", "feature_names_in_", "view_split_", "classes_",
                    "class_centres_", "temperature_", "n_components_", "tokenizer_")
#: Where a pickle of a fitted estimator holds its model's files.
_PICKLED_MODEL = "_saved_model"


def _fitted(name: str) -> bool:
    """Whether an attribute is fitted state (scikit-learn's trailing underscore)."""
    return name.endswith("_") and not name.startswith("__")


#: The estimator classes by qualified name (``module.QualName``), each registered by
#: defining it: what ``load`` builds.
_KINDS: dict[str, type[SavedModel]] = {}


class SavedModel:
    """``save``, ``export`` and what :func:`load` builds, of
    :class:`~._base.BaseEmbedder` (which they are a part of: they read its parameters,
    its fitted net and attributes)."""

    net_: Any
    input_spec_: Any
    n_samples_: Any
    if TYPE_CHECKING:  # the estimator's (scikit-learn's, and its parameters')
        _nested_prefixes: tuple[str, str]

        def get_params(self, deep: bool = True) -> dict: ...

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _KINDS[path_of(cls)] = cls  # what load builds, by the name a saved model holds

    def save(self, path: Any) -> Any:
        """Save the fitted estimator to the folder ``path`` without pickle.

        The weights, a memory's state and the optimizer's state go in safetensors (data
        only); the parameters and the fitted state (input form, classes, history, seed,
        selector epoch, held-out rows) in JSON, with the versions of skcontrast, torch
        and skorch. Both files are written beside their final name and renamed over it,
        so a symbolic link there is replaced, never written through. Read it with
        :func:`skcontrast.load`, which runs no code from the files.

        Returns
        -------
        pathlib.Path
            The folder.
        """
        check_is_fitted(self, "net_")
        params, named, fitted, tensors = self._model_files()
        objects = {name: getattr(self, name) for name in named}

        def check(config: dict, tensors: dict) -> None:  # reads back as load would
            type(self)._read_saved(config, tensors, objects)

        return write_model(path, path_of(type(self)), params, named, fitted, tensors, check)

    def _model_files(self) -> tuple[dict, dict, dict, dict]:
        """What a saved model holds: the encoded parameters, those the file only names,
        the fitted state (the training state, the input spec, the fitted attributes)
        and the tensors."""
        params, named = encode_params(self)
        tensors, fitted = training_state_files(self.net_.training_state())
        fitted.update(input_spec=write_spec(self.input_spec_), n_samples=self.n_samples_,
                      shared=self.net_.module.shared,
                      attributes=encode_attributes(self, SAVED_ATTRIBUTES))
        return params, named, fitted, tensors

    def __getstate__(self) -> dict:
        """A fitted estimator pickles its model as :meth:`save` writes it (the same two
        files, as bytes, beside its parameters); the parameters pickle as objects."""
        state = super().__getstate__()  # type: ignore[misc]
        if "net_" not in state:
            return state
        files = encode_model(path_of(type(self)), *self._model_files())
        state = {k: v for k, v in state.items() if not _fitted(k)}
        state[_PICKLED_MODEL] = (*files, str(self.net_.compute_device))
        return state

    def __setstate__(self, state: dict) -> None:
        """The parameters as pickled; a fitted model rebuilt from its files as
        :func:`load` rebuilds it, on the device it was on (the CPU, with a warning, when
        that device is not available here)."""
        saved = state.pop(_PICKLED_MODEL, None)
        super().__setstate__(state)  # type: ignore[misc]
        if saved is None:
            return
        text, weights, device = saved
        if device.startswith("cuda") and not torch.cuda.is_available():
            warnings.warn(f"the {type(self).__name__} was pickled on {device}, which is not "
                          "available here: it is loaded on the CPU", UserWarning,
                          stacklevel=2)
            device = "cpu"
        config, tensors = decode_model(text, weights, f"the pickled {type(self).__name__}")
        model = self._from_saved(config, tensors, self.get_params(deep=False), device)
        self.__dict__.update({k: v for k, v in vars(model).items() if _fitted(k)})

    def export(self, path: Any, format: str = "onnx", *, view: Any = 0,
               example: Any = None) -> Any:
        """Export what :meth:`transform` computes for one view to ONNX or TorchScript.

        The exported model takes a batch of the view's items as ``transform`` does (it
        scales bytes to [0, 1] and applies ``image_normalization`` itself) and returns
        the same embeddings: the encoder's, through the projection head or not as
        ``transform_from`` says, unit-normalised when the loss normalises.

        Parameters
        ----------
        path : str or path
            The file to write (``.onnx`` or ``.pt``).
        format : {'onnx', 'torchscript'}, default='onnx'
            ONNX (``torch.onnx.export``, a dynamic batch size; run it with onnxruntime)
            or a traced TorchScript module (``torch.jit.load``).
        view : int or str, default=0
            Which view's encoder (for two modalities, the index or the name).
        example : array or tensor, optional
            A batch of inputs to trace with, of the dtype you will feed (e.g. uint8
            images); by default zeros of the view's shape (float, or int64 token ids).

        Returns
        -------
        pathlib.Path

        Raises
        ------
        ValueError
            For a view made of several tensors (keyword arguments), or a module the
            tracer or the ONNX exporter cannot handle (their message is kept).
        """
        from ._export import export

        check_is_fitted(self, "net_")
        return export(self, path, format, self.input_spec_.view_index(view), example)

    @classmethod
    def _read_saved(cls, config: dict, tensors: dict, objects: dict) -> tuple:
        """Everything a saved model holds, read and checked, before anything is built:
        the estimator (its parameters), the input spec, the training state, the number of
        samples, whether the encoder is shared, and the fitted attributes."""
        names = [*param_names(cls),
                 *(k for k in config["params"] if k.startswith(cls._nested_prefixes))]
        estimator = cls(**choose_params(config, objects, names))
        fitted = config["fitted"]
        with entry_errors("input_spec"):
            spec = read_spec(fitted.get("input_spec"))
        with entry_errors("the training state"):
            state = files_training_state(tensors, fitted)
        n_samples, shared = fitted.get("n_samples"), fitted.get("shared")
        if not isinstance(n_samples, int) or isinstance(n_samples, bool) or n_samples < 1 \
                or not isinstance(shared, bool):
            raise ValueError("malformed saved configuration: n_samples and shared")
        attributes = decode_attributes(fitted, SAVED_ATTRIBUTES)
        return estimator, spec, state, n_samples, shared, attributes

    @classmethod
    def _from_saved(cls, config: dict, tensors: dict, objects: dict,
                    device: str) -> Any:
        """The estimator a saved model describes (see :func:`load`)."""
        estimator, spec, state, n_samples, shared, attributes = cls._read_saved(
            config, tensors, {**objects})
        # what the file could not hold is not needed to build the net that transforms;
        # the estimator keeps its placeholders, so that training refuses until it is back
        unsaved = {name: value for name, value in estimator.get_params(deep=False).items()
                   if isinstance(value, Unsaved)}
        estimator.set_params(device=device, **dict.fromkeys(unsaved))
        estimator._check_params()
        plan = estimator._plan_fit(spec, n_samples, state["seed"],
                              held_out_rows=state["held_out_rows"])
        estimator._check_saved_shapes(plan, spec, n_samples, shared, state)
        net = estimator._build_net(plan, spec, n_samples, shared, device)
        estimator.set_params(**unsaved)
        net.restore(state)
        estimator.net_ = net
        estimator.input_spec_ = spec
        estimator.history_ = net.history
        estimator.n_samples_ = n_samples
        for name, value in attributes.items():
            setattr(estimator, name, value)
        return estimator


def load(path: Any, *, device: str = "cpu", **objects: Any) -> Any:
    """Load an estimator written by ``estimator.save(path)``, without pickle.

    Weights come from ``model.safetensors`` (data only) and everything else from
    ``config.json``. Nothing is imported and no code from the folder runs: the only
    objects constructed are those of an explicit allow-list (skcontrast's loss objects,
    selectors, memories, schedule and augmentations, ``torch.nn`` layers and
    ``torch.optim`` optimizers), with plain values. Objects the file only names (your
    encoder, unless it is skcontrast's or torch's; a callable loss; an optimizer of
    another package) are passed here by the name of their parameter; a missing one is
    an error that lists them all. ``augmentation``, ``callbacks``, ``scoring`` and
    ``random_state`` are not needed to transform: without them the loaded model has
    ``None`` there, with a warning. A version of skcontrast, torch or skorch other than
    the one that saved the model gives a warning.

    Parameters
    ----------
    path : str or path
        The folder ``save`` wrote.
    device : str, default='cpu'
        Where the network is placed (``set_params(device=...)`` applies to later fits).
    **objects
        Parameters of the estimator by name (``module=MyEncoder``, ``loss=my_loss``,
        ``optimizer=Lars``, ``augmentation=...``), when the file could only name them.
        A value given here replaces the saved one.

    Returns
    -------
    ContrastiveEmbedder or SupConEmbedder
        Fitted: it transforms and scores, and keeps training with ``warm_start=True``
        exactly where it stopped (optimizer state, selector epoch and seed included).
    """
    config, tensors = read_model(path)
    kind = _KINDS.get(config["class"])
    if kind is None:
        raise ValueError(f"unknown estimator class {config['class']!r} in the saved model "
                         f"{path}; known: {sorted(_KINDS)}")
    return kind._from_saved(config, tensors, objects, device)
