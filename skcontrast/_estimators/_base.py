"""What the two estimators share: parameter checks, the skorch net, inference, tags."""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import numbers
import threading
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin, clone
from sklearn.utils.validation import check_is_fitted
from skorch.callbacks import PassthroughScoring, ProgressBar
from skorch.helper import predefined_split

from .._validation import (
    check_choice,
    check_int,
    check_labels,
    check_positive,
    describe,
    encode_labels,
    plain_label,
)
from ..exceptions import TrainingInterrupted
from ..losses import LOSSES, Loss, make_loss
from ..losses._objects import loss_name
from ..memory import BaseMemory
from ..selectors import (
    BatchSelector,
    FullBatchSelector,
    PredefinedBatchSelector,
    ShuffledBatchSelector,
)
from ..selectors._base import resolve_seed
from ._data import InputSpec, TensorViews, ViewData, read_input, with_labels
from ._modules import ContrastiveCriterion, EncoderFactory
from ._monitor import ValidScore, check_monitors, check_validation_fraction, split_indices
from ._net import SelectorNet
from ._schedule import ScheduleCallback, WarmupCosine
from ._step import PRECISIONS, Augmentation

OPTIMIZERS = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
DEFAULT_BATCH_SIZE = 64


@dataclass
class HeldOut:
    """Data held out of training: what the held-out loss and score see each epoch."""

    data: ViewData
    y: np.ndarray | None  # the labels as given, for the scorer
    loss_labels: np.ndarray | None  # class codes for a label loss
    rows: np.ndarray | None = None  # the rows of X held out (validation_fraction)


#: The loss parameters the estimators had before the loss became an object.
MOVED_TO_LOSS = {
    "temperature": "loss__temperature",
    "learn_temperature": "loss__learn_temperature",
    "lambda_pos": "loss__lambda_pos",
    "lambda_ent": "loss__lambda_ent",
    "loss_params": "loss__<option> (e.g. loss__chunk_size), or loss=SupCon(...)",
}


def moved_to_loss_message(names: list[str]) -> str:
    said = "; ".join(f"{n} -> {MOVED_TO_LOSS[n]}" for n in names)
    verb = "is now a parameter" if len(names) == 1 else "are now parameters"
    return (f"{', '.join(names)} {verb} of the loss object ({said}): e.g. "
            "ContrastiveEmbedder(loss=SymmetricInfoNCE(temperature=0.05)), or "
            "set_params(loss__temperature=0.05); grids use the loss__ names")


_TURNS = threading.RLock()
_warned_turns = False


@contextlib.contextmanager
def global_rng_turn() -> Iterator[None]:
    """Hold torch's global random generator for one fit or random transform.

    torch has one generator per process, so fits running at once in threads of one
    process (``GridSearchCV`` with the threading backend, a Dask worker with several
    threads) would draw from each other's streams. They take turns instead, so each
    gives the result it gives alone; the first time a fit has to wait, a warning says
    so (use processes for parallel fits).
    """
    global _warned_turns
    if not _TURNS.acquire(blocking=False):
        if not _warned_turns:
            _warned_turns = True
            warnings.warn(
                "skcontrast fits running in threads of one process take turns: torch's "
                "random number generator is shared by the whole process, so concurrent "
                "fits would not be reproducible. For fits in parallel use processes "
                "(joblib's default 'loky' backend, or Dask workers with one thread each)",
                UserWarning, stacklevel=3)
        _TURNS.acquire()
    try:
        yield
    finally:
        _TURNS.release()


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


class BaseEmbedder(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Common machinery of :class:`ContrastiveEmbedder` and :class:`SupConEmbedder`."""

    _labelled = False
    _nested_prefixes = ("module__", "optimizer__")

    # -- nested parameters (skorch's convention) ---------------------------------------

    def _set_nested(self, kwargs: dict) -> None:
        """Store ``**kwargs`` as they are (checked in ``fit``, as scikit-learn asks)."""
        for key, value in kwargs.items():
            setattr(self, key, value)

    def _extra_params(self) -> list[str]:
        """Names of the parameters given through ``**kwargs`` (``module__*`` etc.)."""
        declared = self._get_param_names()
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

    # -- parameter checks -------------------------------------------------------------

    def _check_params(self) -> None:
        check_int(self.n_components, "n_components", minimum=1)
        check_int(self.max_epochs, "max_epochs", minimum=1)
        check_positive(self.lr, "lr")
        if not isinstance(self.hidden_layer_sizes, tuple | list) or not all(
                isinstance(h, numbers.Integral) and h >= 1 for h in self.hidden_layer_sizes):
            raise ValueError(f"hidden_layer_sizes must be a tuple of positive ints; got "
                             f"{describe(self.hidden_layer_sizes)}")
        if self.batch_size is not None:
            check_int(self.batch_size, "batch_size")
        if self.selector is not None and not isinstance(self.selector, BatchSelector):
            raise ValueError(f"selector must be a BatchSelector from skcontrast.selectors; "
                             f"got {describe(self.selector)}")
        if self.lr_schedule is not None:
            if not isinstance(self.lr_schedule, WarmupCosine):
                raise ValueError(f"lr_schedule must be None or a WarmupCosine; got "
                                 f"{describe(self.lr_schedule)}")
            self.lr_schedule.check()
        if self.memory is not None and not isinstance(self.memory, BaseMemory):
            raise ValueError(f"memory must be None or a memory from skcontrast.memory "
                             f"(SogCLRMemory, CrossBatchMemory); got {describe(self.memory)}")
        if self.augmentation is not None and not callable(self.augmentation):
            raise ValueError(f"augmentation must be a callable f(x) or f(x, generator); got "
                             f"{describe(self.augmentation)}")
        check_choice(self.precision, "precision", tuple(PRECISIONS))
        self._check_accelerator()
        check_int(self.num_workers, "num_workers", minimum=0)
        _check_callbacks(self.callbacks)
        check_validation_fraction(self.validation_fraction)
        unknown = [k for k in self._extra_params() if not k.startswith(self._nested_prefixes)
                   or k in self._nested_prefixes]
        moved = [k for k in unknown if k in MOVED_TO_LOSS]
        if moved:
            raise ValueError(moved_to_loss_message(moved))
        if unknown:
            raise ValueError(f"unknown parameter(s) {unknown} of {type(self).__name__}; nested "
                             "parameters start with 'module__' or 'optimizer__'")
        _check_normalization(self.image_normalization)
        check_choice(self.transform_from, "transform_from", ("head", "backbone"))
        clash = set(self._nested("optimizer__")) & set(self.optimizer_params or {})
        if clash:
            raise ValueError(f"{sorted(clash)} set both as optimizer__* and in "
                             "optimizer_params; give each once")
        if self.micro_batch_size is not None:
            check_int(self.micro_batch_size, "micro_batch_size", minimum=1)
        if self.module is None and self._nested("module__"):
            raise ValueError(f"module__* parameters ({', '.join(self._nested('module__'))}) go "
                             "to a module class or factory, but module=None builds the "
                             "default MLP: set its widths with hidden_layer_sizes, or pass "
                             "module=YourEncoderClass")
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
        from ._distributed import PRECISION_OF_ACCELERATE

        if not hasattr(accelerator, "prepare") or not hasattr(accelerator, "backward"):
            raise ValueError(f"accelerator must be an accelerate.Accelerator or None; got "
                             f"{describe(accelerator)}")
        mixed = str(getattr(accelerator, "mixed_precision", "no"))
        implied = PRECISION_OF_ACCELERATE.get(mixed, mixed)
        if self.precision != "float32" and self.precision != implied:
            raise ValueError(f"precision={self.precision!r} disagrees with the accelerator's "
                             f"mixed_precision={mixed!r}: with an accelerator, set the "
                             "precision on it (Accelerator(mixed_precision='bf16'))")

    def _optimizer(self) -> Any:
        if isinstance(self.optimizer, str):
            check_choice(self.optimizer, "optimizer", tuple(OPTIMIZERS))
            return OPTIMIZERS[self.optimizer]
        if isinstance(self.optimizer, type) and issubclass(self.optimizer, torch.optim.Optimizer):
            return self.optimizer
        raise ValueError(f"optimizer must be one of {tuple(OPTIMIZERS)} or a torch.optim."
                         f"Optimizer class; got {describe(self.optimizer)}")

    def _seed(self) -> int:
        return resolve_seed(self.random_state)

    def _fitting_selector(self, seed: int, n: int, rows: np.ndarray | None = None,
                          n_rows: int | None = None) -> BatchSelector:
        """A clone of the user's selector (never mutated) with the estimator's settings.

        ``batch_size`` (when set) overrides the selector's; a selector without a seed
        gets one derived from ``random_state``. (Adaptive selectors whose ``loss`` is
        ``None`` score with the training loss as it is at each epoch, which the net hands
        them.) ``rows`` are the rows of
        ``X`` the fit trains on (some are held out): the batches of a
        :class:`~skcontrast.selectors.PredefinedBatchSelector` name rows of ``X``, and
        are translated to them.
        """
        selector = clone(self.selector) if self.selector is not None else \
            ShuffledBatchSelector(min(DEFAULT_BATCH_SIZE, n))
        params = selector.get_params()
        updates: dict[str, Any] = {}
        if self.batch_size is not None:
            key = next((k for k in ("batch_size", "base_selector__batch_size") if k in params),
                       None)
            if key is None:
                raise ValueError(f"batch_size={self.batch_size} cannot be applied: "
                                 f"{type(selector).__name__} has no batch size")
            updates[key] = self.batch_size
        for key, value in params.items():
            name = key.rsplit("__", 1)[-1]
            if name == "random_state" and value is None:
                updates[key] = seed + 1
            elif name == "batches" and rows is not None and isinstance(
                    params[key.rpartition("__")[0]] if "__" in key else selector,
                    PredefinedBatchSelector):
                updates[key] = predefined_on_rows(value, rows, n_rows)
        return selector.set_params(**updates)

    # -- fitting ----------------------------------------------------------------------

    def _held_out(self, data: ViewData, spec: InputSpec, features: dict, X_val: Any,
                  y_val: Any, codes: np.ndarray | None, y: np.ndarray | None
                  ) -> tuple[ViewData, np.ndarray | None, HeldOut | None]:
        """The data to train on, the rows of ``data`` it keeps (``None``: all), and the
        held-out data: ``X_val`` (read like ``X``) or a ``validation_fraction`` of ``X``,
        stratified by ``codes`` when there are labels. The held-out rows never reach the
        selector or the memory; a warm start holds out the rows the first fit held out."""
        check_validation_fraction(self.validation_fraction)
        labelled = self._labelled
        previous = self._warm_held_out_rows(len(data), X_val)
        if X_val is None:
            if y_val is not None:
                raise ValueError("y_val was given without X_val")
            if self.validation_fraction is None:
                return data, None, None
            if previous is not None:
                valid = previous
                train = np.setdiff1d(np.arange(len(data)), valid)
            else:
                train, valid = split_indices(len(data), self.validation_fraction,
                                             self._seed() % 2**32, codes)
            held = HeldOut(data.subset(valid), None if y is None else y[valid],
                           None if codes is None else codes[valid], valid)
            return data.subset(train), train, held
        if self.validation_fraction is not None:
            raise ValueError("pass either X_val or validation_fraction, not both")
        if labelled and y_val is None:
            raise ValueError(f"{type(self).__name__} needs y_val with X_val: the held-out "
                             "loss is a label loss")
        reader = copy.copy(self)
        for name, value in features.items():
            if value is None:
                reader.__dict__.pop(name, None)
            else:
                setattr(reader, name, value)
        valid = read_input(reader, X_val, spec)
        if len(valid) < 2:
            raise ValueError(f"X_val holds {len(valid)} sample(s); the held-out loss "
                             "contrasts at least 2")
        labels = None if y_val is None else check_labels(y_val, "y_val", n_samples=len(valid),
                                                         like=y)
        valid_codes = None
        if labelled:
            _, valid_codes = encode_labels(labels, "y_val")
        return data, None, HeldOut(valid, labels, valid_codes)

    def _warm_held_out_rows(self, n: int, X_val: Any) -> np.ndarray | None:
        """The rows the fitted net held out, which a warm start holds out again; a
        warm start that would hold out other rows is refused (it would score the
        model on rows it trained on)."""
        net = getattr(self, "net_", None)
        if not self.warm_start or net is None:
            return None
        rows = net.held_out_rows
        fraction = self.validation_fraction
        if rows is None and fraction is None:
            return None
        if rows is None or fraction is None or X_val is not None or \
                rows.max() >= n or len(rows) != round(n * fraction):
            before = "held out rows of X (validation_fraction)" if rows is not None \
                else "trained on every row of X"
            raise ValueError(f"warm_start continues the fitted network, which {before}; a "
                             f"warm start keeps the same held-out rows, so it needs the same "
                             f"validation_fraction and X as before (got validation_fraction="
                             f"{fraction}{', X_val' if X_val is not None else ''} and "
                             f"{n} samples). Set warm_start=False to fit afresh")
        return rows

    def _check_warm_start(self, net: SelectorNet, factory: EncoderFactory, loss: Loss,
                          n: int) -> None:
        """Refuse a warm start whose parameters change the fitted network's structure."""
        old, changed = net.module, []
        for field, name in (("module", "module"), ("module_kwargs", "module__*"),
                            ("hidden_layer_sizes", "hidden_layer_sizes"),
                            ("n_components", "n_components"), ("head", "projection_head"),
                            ("shared", "shared_encoder")):
            before, now = (describe_object(getattr(f, field)) for f in (old, factory))
            if before != now:
                changed.append(f"{name} ({before!r:.60} -> {now!r:.60})")
        state = net.memory_state
        memory_now = None if self.memory is None else (
            type(self.memory).__name__, self.memory.get_params().get("size"))
        memory_before = None if state is None else (state.memory_name, getattr(state, "size",
                                                                                None))
        if memory_before != memory_now:
            changed.append(f"memory ({memory_before} -> {memory_now})")
        elif state is not None and state.loss_name != loss_name(loss):
            changed.append(f"loss, whose memory state was built for {state.loss_name!r} "
                           f"({state.loss_name!r} -> {loss_name(loss)!r})")
        if changed:
            raise ValueError(f"warm_start continues the fitted network, but these parameters "
                             f"change its structure: {'; '.join(changed)}. Set warm_start="
                             "False to fit a new network (other parameters, such as lr, "
                             "loss settings, the selector, freeze or max_epochs, apply to "
                             "a warm start)")
        if state is not None and state.n_samples != n:
            raise ValueError(f"warm_start continues the fitted memory, which remembers "
                             f"{state.n_samples} samples by their index; got X with {n} "
                             "samples. Warm-start on the same training set, or set "
                             "warm_start=False to start afresh")

    def _factory(self, spec: InputSpec, shared: bool) -> EncoderFactory:
        return EncoderFactory(self.module, spec.views, tuple(self.hidden_layer_sizes),
                              self.n_components, shared, self._nested("module__"),
                              self.projection_head, self.freeze)

    def _fit_net(self, data: ViewData, spec: InputSpec, labels: np.ndarray | None,
                 loss_labels: np.ndarray | None, shared: bool,
                 held_out: HeldOut | None = None, kept: np.ndarray | None = None
                 ) -> SelectorNet:
        """Build a skorch net and train it on ``data``; with ``warm_start``, continue the
        fitted one.

        A warm start builds a net from the current parameters and gives it the fitted
        net's state (:meth:`SelectorNet.training_state`): weights, loss state, optimizer
        state, history, selector epoch, seed and held-out rows. So parameters that can
        apply to the trained network take effect; those that would change its structure
        are refused (:meth:`_check_warm_start`). The encoders of a new net are built
        inside skorch's ``initialize``, after the torch RNG is seeded, so that their
        initialisation is reproducible from ``random_state``. Nothing fitted is changed
        here: the caller commits the returned net with :meth:`_commit` once everything
        has succeeded, so a failed fit (warm or not) leaves the estimator as it was.
        """
        self._check_params()
        self._check_input_settings(spec)
        accelerator = self.accelerator
        device = str(accelerator.device) if accelerator is not None else \
            resolve_device(self.device)
        old = getattr(self, "net_", None)
        reuse = self.warm_start and old is not None
        if reuse and spec != self.input_spec_:
            raise ValueError(f"warm_start continues the fitted network, which needs input "
                             f"of the same form and view shapes as before; got {spec}, "
                             f"fitted on {self.input_spec_}")
        factory = self._factory(spec, shared)
        loss = self._loss()
        if reuse:
            self._check_warm_start(old, factory, loss, len(data))
        seed = old.seed if reuse else self._seed()
        check_monitors(self.callbacks, held_out is not None, self.scoring is not None)
        scoring = self._scorer(held_out)
        data = with_labels(self._place(data, device), loss_labels)
        valid = None if held_out is None else \
            with_labels(self._place(held_out.data, device), held_out.loss_labels)
        cuda = torch.device(device).type == "cuda"
        devices = [torch.device(device).index or 0] if cuda else []
        n_rows = len(data) + (0 if held_out is None or held_out.rows is None
                              else len(held_out.rows))
        with global_rng_turn(), torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            extra = self._monitoring(spec, valid, held_out, scoring)
            net = self._make_net(factory, loss, labels, device, seed, len(data),
                                 spec.items_paired, valid, extra, kept=kept, n_rows=n_rows,
                                 held_out_rows=None if held_out is None else held_out.rows)
            if reuse:
                net.initialize()
                same_start = float(old.criterion_.loss.temperature) == float(loss.temperature)
                net.load_training_state(old.training_state(), keep_temperature=same_start)
                net.partial_fit(data, None, epochs=self.max_epochs)
            else:
                net.fit(data, None)
        if net.interrupted is None:
            net.check_finite_weights()
        return net

    def _finish(self, net: SelectorNet) -> None:
        """After the fitted attributes are set: an interrupted fit (Ctrl-C) keeps its
        model and goes on as an interrupt (so a search stops rather than score it)."""
        if net.interrupted is not None:
            raise TrainingInterrupted(net.interrupted)

    def _check_input_settings(self, spec: InputSpec) -> None:
        """Settings that depend on the input: ``image_normalization``'s channels."""
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

    def build_net(self, spec: InputSpec, n_samples: int, shared: bool,
                  device: str = "cpu", seed: int | None = None) -> SelectorNet:
        """An initialised, untrained net for input ``spec`` (what :func:`skcontrast.load`
        fills with saved weights)."""
        self._check_params()
        seed = self._seed() if seed is None else seed
        net = self._make_net(self._factory(spec, shared), self._loss(), None,
                             resolve_device(device), seed, n_samples, spec.items_paired)
        return net.initialize()

    def save(self, path: Any) -> Any:
        """Save the fitted estimator to the folder ``path`` without pickle: the weights
        in safetensors (data only), parameters and fitted state in JSON, with the
        versions of skcontrast, torch and skorch. Read it with :func:`skcontrast.load`,
        which runs no code from the files.

        Returns
        -------
        pathlib.Path
            The folder.
        """
        from ._persist import save

        return save(self, path)

    def _scorer(self, held_out: HeldOut | None) -> Any:
        if self.scoring is None:
            return None
        if held_out is None:
            raise ValueError("scoring records a score of held-out data each epoch: set "
                             "validation_fraction or pass X_val (and y_val) to fit")
        from ..metrics import EmbeddingScorer, get_scorer

        scorer = get_scorer(self.scoring)
        if isinstance(scorer, EmbeddingScorer):
            scorer.check(self, held_out.y, labels_known=True)
        return scorer

    def _monitoring(self, spec: InputSpec, valid: ViewData | None, held_out: Any,
                    scorer: Any) -> list:
        """Callbacks that watch the held-out data: its score, when asked for."""
        if scorer is None:
            return []
        view = copy.copy(self)
        view._unfit()
        view.input_spec_ = spec
        return [("valid_score", ValidScore(scorer, view, valid, held_out.y))]

    def _commit(self, net: SelectorNet, spec: InputSpec, **fitted: Any) -> None:
        """Set every fitted attribute at once, after a fit has fully succeeded.

        ``fitted`` holds the other attributes, and ``sample``, a few training items whose
        embedding gives the output width ``n_components_``; a value of ``None`` for
        ``n_features_in_`` or ``feature_names_in_`` removes it (input without them).
        """
        self.net_ = net
        self.input_spec_ = spec
        self.history_ = net.history
        self.n_samples_ = net.criterion__n_samples
        self.n_components_ = int(net.embed(fitted.pop("sample"), view=0,
                                           head=self.transform_from == "head").shape[1])
        temperature = net.criterion_.temperature
        self.temperature_ = float(temperature.detach() if isinstance(temperature, torch.Tensor)
                                  else temperature)
        for name, value in fitted.items():
            if value is None and name in ("n_features_in_", "feature_names_in_"):
                self.__dict__.pop(name, None)
            else:
                setattr(self, name, value)

    def _unfit(self) -> None:
        for name in [k for k in vars(self) if k.endswith("_") and not k.startswith("__")]:
            delattr(self, name)

    def _place(self, data: ViewData, device: str) -> ViewData:
        """Where the training arrays live: on the training device when asked and they fit."""
        choice = self.data_on_device
        if choice not in (True, False, "auto"):
            raise ValueError(f"data_on_device must be True, False or 'auto'; got "
                             f"{describe(choice)}")
        if not isinstance(data, TensorViews):
            if choice is True:
                raise ValueError("data_on_device=True needs array or tensor data; the items "
                                 "of a Dataset are loaded batch by batch by the DataLoader")
            return data
        target = torch.device(device)
        if data.resident_device == target or target.type != "cuda":
            return data if data.resident_device in (None, target) else data.to("cpu")
        if choice is False:
            return data.to("cpu")
        free, _ = torch.cuda.mem_get_info(target)
        size = data.nbytes()
        if choice == "auto":
            return data.to(target) if size <= free // 2 else data.to("cpu")
        if size > free:
            raise ValueError(f"data_on_device=True: the training data takes "
                             f"{size / 2**30:.2f} GiB but {free / 2**30:.2f} GiB is free on "
                             f"{target}; use data_on_device='auto' or False")
        return data.to(target)

    def _make_net(self, factory: EncoderFactory, loss: Loss, labels: Any, device: str,
                  seed: int,
                  n: int, items_paired: bool, valid: ViewData | None = None,
                  extra: list | None = None, kept: np.ndarray | None = None,
                  n_rows: int | None = None, held_out_rows: np.ndarray | None = None
                  ) -> SelectorNet:
        selector = self._fitting_selector(seed, n, kept, n_rows)
        batch = nominal_batch_size(selector, n)
        if self.micro_batch_size is not None and batch is not None and \
                self.micro_batch_size > batch:
            raise ValueError(f"micro_batch_size={self.micro_batch_size} is larger than the "
                             f"batch size {batch}: gradient caching embeds a batch in smaller "
                             "micro-batches; use micro_batch_size <= batch_size (or None)")
        if self.memory is not None and batch is not None:
            # pairs and two crops add two embeddings per item
            paired = not self._labelled or items_paired or self.augmentation is not None
            self.memory.check_batch_rows(batch * (2 if paired else 1))
        callbacks = self._callbacks(selector, n, labels, extra or [])
        optimizer_params = {f"optimizer__{k}": v for k, v in
                            {**(self.optimizer_params or {}), **self._nested("optimizer__")
                             }.items()}
        criterion = {f"criterion__{k}": v for k, v in {
            "loss": loss, "structure": self._structure(items_paired),
            "memory": self.memory, "n_samples": n}.items()}
        kind, placement = SelectorNet, {"device": device}
        if self.accelerator is not None:
            from ._distributed import DistributedSelectorNet

            # the accelerator's print shows the table on process 0 only, and only verbose
            sink = self.accelerator.print if self.verbose else print
            kind, placement = DistributedSelectorNet, {"accelerator": self.accelerator,
                                                       "callbacks__print_log__sink": sink}
        return kind(
            module=factory, criterion=ContrastiveCriterion, optimizer=self._optimizer(),
            lr=self.lr, max_epochs=self.max_epochs, batch_size=DEFAULT_BATCH_SIZE,
            train_split=None if valid is None else predefined_split(valid),
            valid_batch_size=batch, callbacks=callbacks, warm_start=self.warm_start,
            verbose=self.verbose, selector=selector, labels=labels, **placement,
            augmentation=None if self.augmentation is None else Augmentation(self.augmentation),
            seed=seed, precision=self.precision if self.accelerator is None else "float32",
            num_workers=int(self.num_workers), labelled=self._labelled,
            micro_batch_size=self.micro_batch_size, held_out_rows=held_out_rows,
            image_normalization=self.image_normalization, **criterion,
            **optimizer_params)

    def _structure(self, items_paired: bool) -> str:
        """How a training batch's rows reach the loss (see ``ContrastiveCriterion``)."""
        if not self._labelled:
            return "pairs"
        return "crops" if items_paired or self.augmentation is not None else "single"

    def _callbacks(self, selector: BatchSelector, n: int, labels: Any, extra: list) -> list:
        """The skorch callbacks of a fit: the loss terms, progress, schedule, held-out
        score, then the user's."""
        callbacks: list[Any] = [
            ("train_positive", PassthroughScoring(name="train_positive", on_train=True)),
            ("train_entropy", PassthroughScoring(name="train_entropy", on_train=True)),
        ]
        # the selector, not skorch's batch_size, knows how many batches an epoch has
        per_epoch = selector.get_n_splits(n, labels)
        if self.verbose:
            callbacks.append(("progress", ProgressBar(batches_per_epoch=per_epoch,
                                                      postfix_keys=["train_loss"])))
        if self.lr_schedule is not None:
            callbacks.append(("lr_schedule", ScheduleCallback(clone(self.lr_schedule),
                                                              per_epoch, self.max_epochs)))
        return callbacks + extra + list(self.callbacks or [])

    # -- inference --------------------------------------------------------------------

    def _embed(self, data: ViewData, view: int | None = 0, augment: Any = None,
               output: str | None = None) -> np.ndarray:
        """Embeddings of one view: ``output`` 'head' (the loss's space, unit norm when
        the loss normalises) or 'backbone' (the module's own features, as they are);
        default ``transform_from``."""
        check_is_fitted(self, "net_")
        output = self.transform_from if output is None else output
        return embed_net(self.net_, data, view, augment, output == "head")

    def _transform(self, X: Any, output: str) -> Any:
        check_is_fitted(self, "net_")
        data = read_input(self, X, self.input_spec_).select(0)
        return self._wrap_output(self._embed(data, view=0, output=output), X, output)

    def transform_head(self, X: Any) -> Any:
        """Embeddings of ``X`` (view 0) by the projection head: the space the loss
        trained, unit norm when the loss normalises. The same as :meth:`transform_backbone`
        without a ``projection_head``."""
        return self._transform(X, "head")

    def transform_backbone(self, X: Any) -> Any:
        """Features of ``X`` (view 0) from the module alone, before any projection head,
        as the module outputs them (SimCLR's representation for downstream tasks)."""
        return self._transform(X, "backbone")

    def set_params(self, **params: Any) -> BaseEmbedder:
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

    def _wrap_output(self, embedded: np.ndarray, X: Any, output: str | None = None) -> Any:
        """``embedded`` in the container ``set_output`` chose for ``transform`` (columns
        named by :meth:`get_feature_names_out` for ``transform``'s own output)."""
        from sklearn.utils._set_output import ADAPTERS_MANAGER, _get_output_config

        dense = _get_output_config("transform", self)["dense"]
        if dense == "default":
            return embedded
        output = self.transform_from if output is None else output
        if output == self.transform_from:
            names = self.get_feature_names_out
        else:
            prefix = type(self).__name__.lower()
            names = np.asarray([f"{prefix}_{output}{i}" for i in range(embedded.shape[1])],
                               dtype=object)
        return ADAPTERS_MANAGER.adapters[dense].create_container(embedded, X, names)

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """Output feature names (``<classname>0``, ``<classname>1``, ...), after ``fit``."""
        check_is_fitted(self, "net_")
        return super().get_feature_names_out(input_features)

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        if state.get("accelerator") is not None:  # a process-local handle
            state = {**state, "accelerator": None}
        return state

    @property
    def _n_features_out(self) -> int:
        return self.n_components_

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float32"]
        tags.input_tags.allow_nan = False
        # Fitting is deterministic on the CPU for a fixed random_state (module
        # initialisation, selector, augmentations and data order are all seeded).
        tags.non_deterministic = False
        return tags


def _check_normalization(normalization: Any) -> None:
    if normalization is None:
        return
    try:
        mean, std = (np.atleast_1d(np.asarray(v, dtype=float)) for v in normalization)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"image_normalization must be None or (mean, std); got "
                         f"{describe(normalization)}") from exc
    if mean.ndim != 1 or mean.shape != std.shape or not (std > 0).all() or \
            not np.isfinite(mean).all():
        raise ValueError(f"image_normalization must be (mean, std) with one value or one per "
                         f"channel each, std > 0; got {describe(normalization)}")


def _check_callbacks(callbacks: Any) -> None:
    """skorch callbacks: instances or classes, optionally as ``(name, callback)``."""
    from skorch.callbacks import Callback

    if callbacks is None:
        return
    if not isinstance(callbacks, list | tuple):
        raise ValueError(f"callbacks must be a list of skorch callbacks; got "
                         f"{describe(callbacks)}")
    for i, item in enumerate(callbacks):
        callback = item[1] if isinstance(item, tuple) and len(item) == 2 and \
            isinstance(item[0], str) else item
        is_class = isinstance(callback, type) and issubclass(callback, Callback)
        if not (isinstance(callback, Callback) or is_class):
            raise ValueError(f"callbacks[{i}] must be a skorch callback (an instance of "
                             f"skorch.callbacks.Callback, or (name, callback)); got "
                             f"{describe(item)}")


def predefined_on_rows(batches: Any, rows: np.ndarray, n_rows: int) -> list[np.ndarray]:
    """Predefined batches of rows of ``X`` as positions among the training ``rows``
    (``rows[i]`` is the row of ``X`` at training position ``i``).

    Rows held out of training are left out of the batches, with a warning; an index
    that is no row of ``X`` at all, or a batch left with fewer than 2 training rows, is
    an error.
    """
    position = np.full(int(rows.max()) + 1 if len(rows) else 0, -1, dtype=np.int64)
    position[rows] = np.arange(len(rows))
    out, dropped = [], 0
    for i, batch in enumerate(batches):
        batch = np.asarray(batch.cpu() if isinstance(batch, torch.Tensor) else batch).ravel()
        if batch.dtype.kind not in "iu" or (batch.size and (batch.min() < 0 or
                                                           batch.max() >= n_rows)):
            raise ValueError(f"PredefinedBatchSelector batches[{i}] must hold row indices of "
                             f"X, in [0, {n_rows}); got {describe(batch)}")
        mapped = position[batch[batch < len(position)]]
        kept = mapped[mapped >= 0]
        dropped += len(batch) - len(kept)
        if len(kept) < 2:
            raise ValueError(f"PredefinedBatchSelector batches[{i}] keeps {len(kept)} training "
                             f"row(s) once the held-out rows (validation_fraction) are left "
                             "out; a batch needs at least 2")
        out.append(kept.astype(np.int64))
    if dropped:
        warnings.warn(f"{dropped} entries of the PredefinedBatchSelector's batches are rows "
                      "held out of training (validation_fraction); they are left out of the "
                      "training batches, whose indices name rows of X",
                      UserWarning, stacklevel=4)
    return out


def sample_of(data: ViewData) -> ViewData:
    """Two training items (view 0), enough to read the output width off the net."""
    return data.select(0).subset(np.arange(min(2, len(data))))


def embed_net(net: SelectorNet, data: ViewData, view: int | None = 0, augment: Any = None,
              head: bool = True) -> np.ndarray:
    """Embeddings of ``data`` by a trained net: by the projection head, unit norm when
    the loss normalises, or the backbone's features as they are."""
    out = net.embed(data, view=view, augment=augment, head=head)
    if head and getattr(net.criterion_.loss, "normalize", True):
        out = torch.nn.functional.normalize(out, dim=-1)
    return out.numpy().astype(np.float32, copy=False)


def nominal_batch_size(selector: BatchSelector, n: int) -> int | None:
    """The batch size a selector is set to (``n`` for the full batch), if it says."""
    if isinstance(selector, FullBatchSelector):
        return n
    params = selector.get_params()
    for key in ("batch_size", "base_selector__batch_size"):
        if isinstance(params.get(key), numbers.Integral):
            return min(int(params[key]), n)
    return None


def warn_single_member_classes(y_codes: np.ndarray, classes: np.ndarray, convention: str) -> None:
    counts = np.bincount(y_codes)
    single = classes[counts == 1]
    if len(single):
        shown = ", ".join(repr(plain_label(c)) for c in single[:5])
        more = "" if len(single) <= 5 else f" and {len(single) - 5} more"
        warnings.warn(f"{len(single)} class(es) have a single sample ({shown}{more}): their "
                      f"anchors have no positive and are handled by "
                      f"anchors_without_positives={convention!r}", UserWarning, stacklevel=3)
