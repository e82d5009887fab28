"""The skorch net the estimators build inside ``fit``.

skorch drives training; a few of its hooks are overridden, nothing more:

- ``get_iterator`` returns, for training, a ``DataLoader`` whose ``batch_sampler`` asks
  the selector for the batches of each epoch (so skorch's ``batch_size`` is not passed
  to it: a ``DataLoader`` refuses both), or, when the data is held whole on the GPU, an
  iterator that gathers the selector's batches there. Adaptive selectors first receive
  the current embeddings of the whole training set, from a no-grad pass made batch by
  batch on the training device.
- ``train_step_single`` moves a batch to the training device (asynchronously from
  pinned memory), applies the augmentation there, runs the module under
  ``torch.autocast`` for mixed precision and back-propagates (through a ``GradScaler``
  for float16); ``train_step`` adds the scaler's unscale/step/update around it. With
  ``micro_batch_size`` the step caches gradients (GradCache): see
  :meth:`SelectorNet.cached_step`.
- ``get_loss`` evaluates the criterion (a :mod:`skcontrast.losses` function) in float32
  and keeps its positive and entropy terms; ``run_single_epoch`` reads the per-batch
  values from the device once per epoch instead of once per batch (skorch's own loop
  calls ``.item()`` on every batch, which stalls the GPU queue).

The datasets (:mod:`._data`) fetch a whole batch with one ``__getitems__`` call.
"""

from __future__ import annotations

import contextlib
import copy
import fnmatch
import inspect
import linecache
import re
import sys
import time
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import skorch.callbacks
import torch
from skorch import NeuralNet
from skorch.history import History
from skorch.utils import TeeGenerator
from torch.utils.data import DataLoader, Sampler

from .._validation import describe
from ..exceptions import TrainingDivergedError
from ._data import Batch, ItemViews, Selection, TensorViews, ViewData

INFERENCE_BATCH = 1024
PRECISIONS = {"float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _as_batch(batch: Any) -> Any:
    return batch


def to_device(x: Any, device: Any, normalization: Any = None) -> Any:
    """A batch (a tensor, or a tuple of one per view) on ``device``, ready for the module.

    Copies from pinned memory overlap. On the device, floats become float32 and bytes
    (uint8 images) become floats in [0, 1]; then, with ``normalization=(mean, std)``,
    every float view becomes ``(x - mean) / std`` per channel (axis 1), so the host keeps
    the data as it was given. Integer views (token ids) stay as they are.
    """
    if isinstance(x, tuple | list):
        return tuple(to_device(t, device, normalization) for t in x)
    if isinstance(x, Mapping):  # a view of several tensors (keyword arguments)
        return {k: to_device(t, device, normalization) for k, t in x.items()}
    x = x.to(device, non_blocking=True)
    if x.dtype == torch.uint8:
        x = x.float().div_(255)
    elif x.is_floating_point() and x.dtype != torch.float32:
        x = x.float()
    if normalization is not None and x.is_floating_point():
        mean, std = (torch.as_tensor(v, dtype=torch.float32, device=x.device)
                     .reshape(1, -1, *([1] * (x.ndim - 2))) for v in normalization)
        x = (x - mean) / std
    return x


def batch_length(x: Any) -> int:
    if isinstance(x, tuple | list):
        return batch_length(x[0])
    return len(next(iter(x.values()))) if isinstance(x, Mapping) else len(x)


def _steps_recorded(history: Any) -> int:
    return sum("train_loss" in b for row in history for b in row["batches"])


def _plain_temperature(criterion: Any) -> str:
    return f"{float(torch.as_tensor(criterion.temperature).detach()):.6g}"


def _raised_on_purpose(exc: BaseException) -> bool:
    """Whether an exception was raised by a ``raise`` statement (as callbacks stop
    training) rather than by a signal (Ctrl-C interrupts whatever line runs)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    line = linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno).strip()
    return line.startswith("raise")


def _aliases(name: str) -> list[str]:
    """A parameter's name in the fitted ``module_`` (``encoders.0.layer1.weight``) and
    as ``freeze`` names it, within the user's module (``layer1.weight``)."""
    parts = name.split(".")
    if len(parts) > 2 and parts[0] in ("encoders", "heads") and parts[1].isdigit():
        return [name, ".".join(parts[2:])]
    return [name]


def _load_state(module: torch.nn.Module, state: dict, what: str,
                optional: tuple[str, ...] = ()) -> None:
    """``module.load_state_dict(state)``, with a clear error when they do not fit."""
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


def split_rows(x: Any, size: int) -> list[Any]:
    """A batch (a tensor, a dict of them for a view of several tensors, or a tuple of one
    of those per view) cut into micro-batches."""
    if isinstance(x, tuple | list):
        return list(zip(*(split_rows(t, size) for t in x), strict=True))
    if isinstance(x, Mapping):
        pieces = {k: t.split(size) for k, t in x.items()}
        return [dict(zip(pieces, row, strict=True))
                for row in zip(*pieces.values(), strict=True)]
    return list(x.split(size))


def rng_states(device: torch.device) -> tuple[Any, Any]:
    """The CPU and (on a GPU) device random-number states, to replay a forward pass."""
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


def set_rng_states(states: tuple[Any, Any], device: torch.device) -> None:
    torch.set_rng_state(states[0])
    if states[1] is not None:
        torch.cuda.set_rng_state(states[1], device)


def batch_norms(module: torch.nn.Module) -> list[torch.nn.Module]:
    """The batch-normalisation layers of ``module`` that update running statistics."""
    return [m for m in module.modules()
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats]


def takes_generator(augmentation: Any) -> bool:
    """Whether ``augmentation`` is called ``f(x, generator)`` rather than ``f(x)``.

    True when it has a parameter named ``generator`` or two required positional ones;
    an ``nn.Module`` such as a kornia pipeline (``forward(*args, ...)``) is ``f(x)``.
    """
    try:
        parameters = inspect.signature(augmentation).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in parameters
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.name == "generator" for p in parameters):
        return True
    return sum(p.default is p.empty for p in positional) >= 2


class Augmentation:
    """The user's augmentation with its random source, as the net holds it.

    ``f(x, generator)`` augmentations draw from a generator on the training device;
    ``f(x)`` ones (kornia) from torch's global generator, which ``fit`` seeds. The
    wrapper also keeps an ``nn.Module`` augmentation out of skorch's sight (skorch
    would take it for a component of the network).
    """

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.takes_generator = takes_generator(fn)
        self.generator: torch.Generator | None = None

    def seed(self, device: Any, seed: int) -> Augmentation:
        """Start (again) from ``seed``, drawing on ``device``."""
        if self.takes_generator:
            self.generator = torch.Generator(device=device).manual_seed(seed)
        return self

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x, self.generator) if self.takes_generator else self.fn(x)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "generator": None}  # re-seeded by every fit


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class PrintLog(skorch.callbacks.PrintLog):
    """skorch's epoch table, with its colour codes only when output goes to a terminal
    (a log file or a notebook cell would show them as ``[35m`` garbage)."""

    def format_row(self, row: Any, key: str, color: str) -> Any:
        text = super().format_row(row, key, color)
        if isinstance(text, str) and not sys.stdout.isatty():
            return _ANSI.sub("", text)
        return text


class SelectorBatchSampler(Sampler):
    """Yields the selector's batches of each epoch (one ``__iter__`` call per epoch)."""

    def __init__(self, net: SelectorNet, n: int) -> None:
        self.net = net
        self.n = n

    def __len__(self) -> int:
        return self.net.selector.get_n_splits(self.n, self.net.labels)

    def __iter__(self) -> Iterator[list[int]]:
        # A generator: the selection runs at the first batch, not when ``iter`` is called
        # (a multi-worker DataLoader calls ``iter`` twice when it starts).
        for batch in self.net.epoch_batches():
            yield Selection(self.net.local_part(batch).tolist(), batch)


class DeviceBatches:
    """The selector's batches gathered from data held whole on the training device.

    The indices of a whole epoch are copied to the device at once, asynchronously, so a
    batch costs no host-device transfer at all.
    """

    def __init__(self, net: SelectorNet, data: TensorViews) -> None:
        self.net = net
        self.data = data

    def __len__(self) -> int:
        return self.net.selector.get_n_splits(len(self.data), self.net.labels)

    def __iter__(self) -> Iterator[Batch]:
        batches = self.net.epoch_batches()
        if not batches:
            return
        rows = [self.net.local_part(b) for b in batches]
        sliced = any(r is not b for r, b in zip(rows, batches, strict=True))
        flat = torch.from_numpy(np.concatenate(batches + rows if sliced else batches))
        device = self.data.resident_device
        if device.type == "cuda":
            flat = flat.pin_memory()
        index = flat.to(device, non_blocking=True)
        total = sum(map(len, batches))
        whole = index[:total].split([len(b) for b in batches])
        parts = index[total:].split([len(r) for r in rows]) if sliced else whole
        for part, batch in zip(parts, whole, strict=True):
            yield self.data.gather(part, batch)


class SelectorNet(NeuralNet):
    """skorch ``NeuralNet`` whose training batches come from a batch selector.

    Parameters (beyond ``NeuralNet``'s)
    ------------------------------------
    selector : BatchSelector
    labels : ndarray or None
        Labels handed to the selector (and, in the dataset, to the loss).
    augmentation : Augmentation or None
        One random view of a batch already on the training device; applied twice per
        training batch.
    seed : int
        Seeds the augmentations' generator (per ``fit`` call and epoch count).
    precision : {'float32', 'bfloat16', 'float16'}
        ``torch.autocast`` dtype of the forward passes; the loss stays float32.
    num_workers : int
        DataLoader worker processes.
    labelled : bool
        Adaptive selectors see one view per item (SupCon) rather than pairs.
    micro_batch_size : int or None
        Gradient caching: embed each batch this many items at a time (see
        :meth:`cached_step`).
    valid_batch_size : int or None
        Size of the fixed batches of held-out data (``train_split`` gives that data).
    image_normalization : (mean, std) or None
        Applied to image views on the device (uint8 ones once they are floats in [0, 1]).
    held_out_rows : ndarray or None
        The rows of the estimator's ``X`` held out of training (``validation_fraction``),
        kept so that every warm start holds out the same rows.
    """

    def __init__(self, *args: Any, selector: Any = None, labels: Any = None,
                 augmentation: Any = None, seed: int = 0, precision: str = "float32",
                 num_workers: int = 0, labelled: bool = False,
                 micro_batch_size: int | None = None, valid_batch_size: int | None = None,
                 image_normalization: Any = None, held_out_rows: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.held_out_rows = held_out_rows
        self.image_normalization = image_normalization
        self.micro_batch_size = micro_batch_size
        self.valid_batch_size = valid_batch_size
        self.selector = selector
        self.labels = labels
        self.augmentation = augmentation
        self.seed = seed
        self.precision = precision
        self.num_workers = num_workers
        self.labelled = labelled

    def get_default_callbacks(self) -> list:
        return [(name, PrintLog() if name == "print_log" else callback)
                for name, callback in super().get_default_callbacks()]

    # -- data -------------------------------------------------------------------------

    @property
    def compute_device(self) -> torch.device:
        """Where the module computes (the accelerator's device in distributed training)."""
        return torch.device(self.device)

    def _on_gpu(self) -> bool:
        return self.compute_device.type == "cuda"

    def local_part(self, batch: np.ndarray) -> np.ndarray:
        """The rows of a selected batch this process trains on (all of them here)."""
        return batch

    def _loader(self, data: ViewData, batch_sampler: Any) -> DataLoader:
        # Workers load a Dataset's items; array rows are one index away, in this process.
        # Its own generator: a DataLoader draws its workers' base seed from torch's
        # global one otherwise, which would advance the caller's random stream.
        workers = self.num_workers if isinstance(data, ItemViews) else 0
        generator = torch.Generator().manual_seed(self.seed + len(self.history or ()))
        return DataLoader(data, batch_sampler=batch_sampler, collate_fn=_as_batch,
                          num_workers=workers, pin_memory=self._on_gpu(),
                          persistent_workers=workers > 0, generator=generator)

    def get_iterator(self, dataset: Any, training: bool = False) -> Any:
        if not training:  # skorch asks for it only for the held-out data
            return self.held_out_batches(dataset)
        self.training_data = dataset  # for the adaptive selectors' embedding pass
        if dataset.resident_device is not None:
            return DeviceBatches(self, dataset)
        return self._loader(dataset, SelectorBatchSampler(self, len(dataset)))

    def held_out_batches(self, data: ViewData) -> Any:
        """The same batches of the held-out data every epoch, of the training batch size
        (a last batch of one sample joins the one before)."""
        order = np.random.default_rng([self.seed, 4]).permutation(len(data))
        size = max(2, min(self.valid_batch_size or len(data), len(data)))
        batches = [order[i:i + size] for i in range(0, len(data), size)]
        if len(batches) > 1 and len(batches[-1]) == 1:
            batches[-2:] = [np.concatenate(batches[-2:])]
        device = data.resident_device
        if device is not None:
            return [data.gather(torch.as_tensor(b, device=device)) for b in batches]
        return self._loader(data, [b.tolist() for b in batches])

    def inference_batches(self, data: ViewData, indices: np.ndarray | None = None) -> Any:
        """Consecutive batches of ``data`` (or of its rows ``indices``), in order; never the
        whole set on the GPU at once."""
        indices = np.arange(len(data)) if indices is None else indices
        parts = [indices[s:s + INFERENCE_BATCH] for s in range(0, len(indices), INFERENCE_BATCH)]
        device = data.resident_device
        if device is not None:
            return (data.gather(torch.as_tensor(part, device=device)) for part in parts)
        return self._loader(data, [part.tolist() for part in parts])

    def epoch_batches(self) -> list[np.ndarray]:
        """The selector's batches of the next epoch; records the time spent choosing."""
        start = time.perf_counter()
        batches = self.select_batches()
        lone = [b for b in batches if len(b) < 2]
        if lone:
            batches = [b for b in batches if len(b) >= 2]
            if not self._warned_lone:
                self._warned_lone = True
                warnings.warn(
                    f"the selector made {len(lone)} batch(es) of a single sample in an epoch "
                    f"(e.g. n={len(self.training_data)} leaves a remainder of 1 after the "
                    "full batches): one pair has nothing to contrast, so such batches are "
                    "skipped (a shuffling selector skips a different sample each epoch, a "
                    "fixed partition always the same); choose a batch size that leaves no "
                    "remainder of 1, or drop_last=True", UserWarning, stacklevel=2)
        if self.history:
            self.history.record("select_time", time.perf_counter() - start)
            self.history.record("n_batches", len(batches))
        self._warn_coverage(batches)
        return batches

    def _warn_coverage(self, batches: list[np.ndarray]) -> None:
        """Say so, once per fit, when an epoch's batches leave most samples out."""
        n = len(self.training_data)
        if self._warned_coverage or not batches or n == 0:
            return
        seen = len(np.unique(np.concatenate(batches)))
        if seen < n / 2:
            self._warned_coverage = True
            params = self.selector.get_params()
            detail = f" (it keeps q={params['q']} of every k={params['k']} candidate batches)" \
                if {"k", "q"} <= params.keys() else ""
            warnings.warn(
                f"{type(self.selector).__name__}'s batches of this epoch cover {seen} of the "
                f"{n} training samples ({seen / n:.0%}){detail}: an epoch trains on a fraction "
                "of the data, so compare selectors at equal steps (history 'n_batches'), "
                "not equal epochs, or raise the fraction kept", UserWarning, stacklevel=3)

    def select_batches(self) -> list[np.ndarray]:
        """Ask the selector (adaptive ones get the current embeddings first, and the loss
        being trained, as it is at this epoch, to score them with)."""
        if getattr(self.selector, "_adaptive", False):
            X = self.selection_embeddings()
            if not np.isfinite(X).all():
                bad = int((~np.isfinite(X)).reshape(len(X), -1).any(1).sum())
                raise TrainingDivergedError(
                    f"training diverged: at the start of epoch {len(self.history)} the "
                    f"network embeds {bad} training sample(s) as NaN or inf, so "
                    f"{type(self.selector).__name__} has nothing to select on. Lower the "
                    f"learning rate (lr={self.lr}) or raise the temperature "
                    f"(temperature={_plain_temperature(self.criterion_)})")
            # the training loss as it is now: its learned temperature, weights, options
            return self.selector.epoch_batches(X, self.labels,
                                               loss=self.criterion_.live_loss())
        X = np.zeros((len(self.training_data), 1), dtype=np.float32)
        return self.selector.epoch_batches(X, self.labels)

    # -- training step ----------------------------------------------------------------

    def autocast(self) -> Any:
        dtype = PRECISIONS[self.precision]
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.compute_device.type, dtype=dtype)

    def on_train_begin(self, net: Any, X: Any = None, y: Any = None, **kwargs: Any) -> None:
        super().on_train_begin(net, X=X, y=y, **kwargs)
        self._warned_lone = False
        self._warned_coverage = False
        self._checked_augmentation = False
        if self.micro_batch_size is not None and batch_norms(self.module_):
            warnings.warn(
                "the module has batch-normalisation layers: with micro_batch_size each "
                "micro-batch is normalised with its own statistics, so the update differs "
                "from the plain step on the whole batch (running statistics are updated "
                "once per micro-batch, by the pass with gradients). Use layer or group "
                "normalisation for the exact full-batch update", UserWarning, stacklevel=2)
        device_type = self.compute_device.type
        # A fresh generator per fit call, seeded from the epochs trained so far, so that
        # warm starts (also after unpickling on another device) stay reproducible.
        if self.augmentation is not None:
            state = np.random.SeedSequence([self.seed, 2, len(self.history)])
            self.augmentation.seed(self.compute_device,
                                   int(state.generate_state(1, dtype=np.uint64)[0] % 2**63))
        scaler = getattr(self, "grad_scaler_", None)
        if self.precision != "float16":
            self.grad_scaler_ = None
        elif scaler is None or scaler._device != device_type:
            self.grad_scaler_ = torch.amp.GradScaler(device_type)

    def partial_fit(self, X: Any, y: Any = None, classes: Any = None,
                    **fit_params: Any) -> SelectorNet:
        """skorch's ``partial_fit``, which keeps the model of an interrupted fit; whether
        the fit was interrupted (Ctrl-C) is left in ``interrupted``, a message saying how
        far it got, or ``None`` (a fit that ran to the end, or that a callback such as
        skorch's ``EarlyStopping`` stopped)."""
        done = len(self.history) if self.initialized_ else 0
        steps = _steps_recorded(self.history) if self.initialized_ else 0
        goal = fit_params.get("epochs", self.max_epochs)
        self.interrupted = None
        super().partial_fit(X, y, classes, **fit_params)
        if self.interrupted is not None:
            epochs = sum("dur" in row for row in self.history[done:])
            self.interrupted = (
                f"fit stopped after {epochs} of {goal} epochs (interrupted); the model keeps "
                f"the weights of the {_steps_recorded(self.history) - steps} step(s) applied")
        return self

    def fit_loop(self, X: Any, y: Any = None, epochs: int | None = None,
                 **fit_params: Any) -> SelectorNet:
        """skorch's loop; an interrupt that no callback raised is recorded as one."""
        self._stopped_by = None
        try:
            return super().fit_loop(X, y, epochs=epochs, **fit_params)
        except KeyboardInterrupt:
            if self._stopped_by is None:
                self.interrupted = True
            raise

    def notify(self, method_name: str, **cb_kwargs: Any) -> None:
        """skorch's ``notify``, remembering which callback stopped training, if one did
        (skorch's callbacks stop it by raising ``KeyboardInterrupt``)."""
        getattr(self, method_name)(self, **cb_kwargs)
        for name, callback in self.callbacks_:
            try:
                getattr(callback, method_name)(self, **cb_kwargs)
            except KeyboardInterrupt as exc:
                if _raised_on_purpose(exc):
                    self._stopped_by = name
                raise

    def check_finite_weights(self) -> None:
        """Refuse a trained network with a NaN or infinite weight (one device read)."""
        parameters = [p.detach().reshape(-1) for p in self.module_.parameters()] + \
            [p.detach().reshape(-1) for p in self.criterion_.parameters()]
        if parameters and not bool(torch.isfinite(torch.cat(parameters)).all()):
            raise TrainingDivergedError(
                f"training diverged in its last steps: after {len(self.history)} epoch(s) "
                f"the network has NaN or infinite weights, so its embeddings would be NaN. "
                f"Lower the learning rate (lr={self.lr}), raise the temperature "
                f"(temperature={_plain_temperature(self.criterion_)}), or check that the "
                "module does not output NaN or inf")

    # -- state that travels: warm starts and saved models ------------------------------

    def training_state(self) -> dict:
        """Everything a later fit continues from: weights, the loss module's state (a
        learned temperature, a memory), the optimizer's state (a copy), the history, the
        selector's epoch, the seed and the held-out rows."""
        optimizer = getattr(self.optimizer_, "optimizer", self.optimizer_)
        return {"module": self.inference_module().state_dict(),
                "criterion": self.criterion_.state_dict(),
                "optimizer": copy.deepcopy(optimizer.state_dict()),
                "optimizer_class": type(optimizer),
                "history": self.history.to_list(),
                "selector_epoch": self.selector.current_epoch,
                "held_out_rows": None if self.held_out_rows is None
                else np.asarray(self.held_out_rows).tolist(),
                "seed": self.seed,
                "grad_scaler": None if getattr(self, "grad_scaler_", None) is None
                else self.grad_scaler_.state_dict()}

    def load_training_state(self, state: dict, keep_temperature: bool = True) -> None:
        """Continue from :meth:`training_state` (of this net's structure).

        The optimizer's state is taken when the optimizer is of the same class and
        holds the same parameter groups; its settings (learning rate, ...) stay this
        net's own. A learned temperature is taken when ``keep_temperature`` and this
        net learns its temperature too; otherwise the temperature is this net's.
        """
        _load_state(self.inference_module(), state["module"], "the network")
        criterion = dict(state["criterion"])
        learned = criterion.pop("log_temperature", None)
        if learned is not None and keep_temperature and self.criterion_.learn_temperature:
            criterion["log_temperature"] = learned
        _load_state(self.criterion_, criterion, "the loss module",
                    optional=("log_temperature",))
        self._load_optimizer(state.get("optimizer"), state.get("optimizer_class"))
        self.history = History(copy.deepcopy(state["history"]))
        self.selector.set_epoch(state["selector_epoch"])
        rows = state.get("held_out_rows")
        self.held_out_rows = None if rows is None else np.asarray(rows, dtype=np.int64)
        scaler = state.get("grad_scaler")
        if scaler and self.precision == "float16":
            self.grad_scaler_ = torch.amp.GradScaler(self.compute_device.type)
            self.grad_scaler_.load_state_dict(scaler)

    def _load_optimizer(self, saved: dict | None, kind: type | None) -> None:
        optimizer = getattr(self.optimizer_, "optimizer", self.optimizer_)
        if saved is None or (kind is not None and kind is not type(optimizer)):
            return
        fresh = optimizer.state_dict()
        sizes = [len(g["params"]) for g in saved["param_groups"]]
        if sizes != [len(g["params"]) for g in fresh["param_groups"]]:
            warnings.warn("the optimizer's parameter groups changed (optimizer__param_groups "
                          "or the parameters that train), so its state (e.g. Adam's moments) "
                          "starts afresh", UserWarning, stacklevel=3)
            return
        # the saved state under this net's own settings (lr, weight decay, ...)
        groups = [{**g, "params": list(s["params"])}
                  for g, s in zip(fresh["param_groups"], saved["param_groups"], strict=True)]
        optimizer.load_state_dict({"state": saved["state"], "param_groups": groups})

    def _get_params_for_optimizer(self, prefix: str, named_parameters: Any) -> tuple:
        """skorch's parameter groups (``optimizer__param_groups``), with two changes:
        a pattern may name parameters as ``freeze`` names parts of the module (without
        the ``encoders.<i>.`` prefix of the fitted ``module_``), and a pattern that
        matches no parameter is an error, not silently ignored."""
        kwargs = self.get_params_for(prefix)
        params = list(named_parameters)
        groups = []
        for pattern, group in kwargs.pop("param_groups", []):
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
        kwargs.setdefault("lr", self.lr)
        return (groups,), kwargs

    def on_epoch_begin(self, net: Any, dataset_train: Any = None, dataset_valid: Any = None,
                       **kwargs: Any) -> None:
        super().on_epoch_begin(net, dataset_train=dataset_train, dataset_valid=dataset_valid,
                               **kwargs)
        memory = self.memory_state
        if memory is not None:  # e.g. SogCLR's schedule of gamma counts epochs
            memory.set_epoch(len(self.history) - 1)

    @property
    def memory_state(self) -> Any:
        """The memory's state (:mod:`skcontrast.memory`) inside the criterion, or None."""
        return getattr(getattr(self, "criterion_", None), "memory_state", None)

    def on_train_end(self, net: Any, X: Any = None, y: Any = None, **kwargs: Any) -> None:
        super().on_train_end(net, X=X, y=y, **kwargs)
        self.training_data = None

    def train_step_single(self, batch: Any, **fit_params: Any) -> dict:
        self._set_training(True)
        Xi, yi, index = batch
        Xi = to_device(Xi, self.compute_device, self.image_normalization)
        if self.augmentation is not None:
            Xi = (self.augment(Xi), self.augment(Xi))
        micro = self.micro_batch_size
        if micro is not None and batch_length(Xi) > micro:
            loss, y_pred = self.cached_step(Xi, yi, index, micro, **fit_params)
        else:
            with self.training_autocast():
                y_pred = self.infer(Xi, **fit_params)
            loss = self.get_loss(y_pred, yi, X=Xi, training=True, index=index)
            self.backward(loss)
        terms = self._batch_terms
        return {"loss": loss, "y_pred": y_pred, "positive": terms.positive.detach(),
                "entropy": terms.entropy.detach()}

    def augment(self, x: torch.Tensor) -> torch.Tensor:
        """One random view of a batch; the first of a fit is checked to keep its shape."""
        out = self.augmentation(x)
        if not self._checked_augmentation:
            self._checked_augmentation = True
            shape = tuple(getattr(out, "shape", ()))
            if not isinstance(out, torch.Tensor) or shape != tuple(x.shape):
                hint = ""
                if len(shape) == x.ndim + 1:  # e.g. kornia on (n, H, W): (1, n, H, W)
                    hint = (" The augmentation probably expects images (n, C, H, W): give "
                            "single-channel images a channel axis, e.g. X[:, None]")
                raise ValueError(f"the augmentation must return a batch of the shape it is "
                                 f"given: it got {tuple(x.shape)} and returned "
                                 f"{shape if isinstance(out, torch.Tensor) else describe(out)}."
                                 f"{hint}")
        return out

    def cached_step(self, Xi: Any, yi: Any, index: Any, micro: int,
                    **fit_params: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Gradient caching (GradCache; Gao et al., 2021): the loss of the whole batch with
        the encoder's memory of one micro-batch.

        1. The batch is embedded ``micro`` items at a time without a graph (random
           states saved per micro-batch, batch-norm running statistics restored after).
        2. The loss of the whole batch (memory included) is back-propagated to the
           embeddings only, giving each its gradient (scaled once, for float16).
        3. Each micro-batch is embedded again with a graph, under the same random
           state (dropout draws the same masks), and back-propagated with its cached
           gradient; in data-parallel training the gradients are synchronised at the
           last micro-batch only.

        The parameter gradients are those of the plain step on the same batch, up to
        float rounding, for any encoder whose output for an item does not depend on the
        other items of its batch (not batch normalisation, which normalises each
        micro-batch with its own statistics: a warning says so).
        """
        device = self.compute_device
        parts = split_rows(Xi, micro)
        norms = batch_norms(self.module_) if self.module_.training else []
        statistics = [{k: v.clone() for k, v in m.state_dict().items()} for m in norms]
        states, outputs = [], []
        with torch.no_grad():
            for part in parts:
                states.append(rng_states(device))
                with self.training_autocast():
                    outputs.append(self.infer(part, **fit_params).float())
        for layer, saved in zip(norms, statistics, strict=True):
            layer.load_state_dict(saved)  # the pass with gradients updates them, once
        after = rng_states(device)
        embeddings = torch.cat(outputs).requires_grad_()
        loss = self.get_loss(embeddings, yi, X=Xi, training=True, index=index)
        self.backward(loss)
        cached = embeddings.grad.split([len(out) for out in outputs])
        for i, (part, state, grad) in enumerate(zip(parts, states, cached, strict=True)):
            set_rng_states(state, device)
            with self.training_autocast():
                out = self.infer(part, **fit_params)
            self.backward_embeddings(out.float(), grad, last=i == len(parts) - 1)
        set_rng_states(after, device)
        return loss, embeddings.detach()

    def backward_embeddings(self, embeddings: torch.Tensor, grad: torch.Tensor,
                            last: bool) -> None:
        """Backpropagate a micro-batch's embeddings with their cached gradient."""
        embeddings.backward(grad)

    def training_autocast(self) -> Any:
        """The mixed-precision context of the training forward pass."""
        return self.autocast()

    def backward(self, loss: torch.Tensor) -> None:
        """Backpropagate a training step's loss (through the float16 grad scaler)."""
        if self.grad_scaler_ is not None:
            self.grad_scaler_.scale(loss).backward()
        else:
            loss.backward()

    def validation_step(self, batch: Any, **fit_params: Any) -> dict:
        """The loss of a held-out batch without gradients (and without the memory)."""
        self._set_training(False)
        Xi, yi, _ = batch
        Xi = to_device(Xi, self.compute_device, self.image_normalization)
        with torch.no_grad():
            if self.augmentation is not None:
                Xi = (self.augmentation(Xi), self.augmentation(Xi))
            with self.autocast():
                y_pred = self.infer(Xi, **fit_params)
            loss = self.get_loss(y_pred, yi, X=Xi, training=False)
        terms = self._batch_terms
        return {"loss": loss, "y_pred": y_pred, "positive": terms.positive.detach(),
                "entropy": terms.entropy.detach()}

    @contextlib.contextmanager
    def fixed_randomness(self) -> Iterator[None]:
        """The same random views of the held-out data every epoch, leaving the training
        stream of random numbers where it was."""
        device = self.compute_device
        generator = getattr(self.augmentation, "generator", None)
        saved = None if generator is None else generator.get_state()
        with torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda"
                                   else []):
            torch.manual_seed(self.seed + 3)
            if generator is not None:
                generator.manual_seed(self.seed + 3)
            try:
                yield
            finally:
                if generator is not None:
                    generator.set_state(saved)

    def train_step(self, batch: Any, **fit_params: Any) -> dict:
        scaler = self.grad_scaler_
        if scaler is None:
            return super().train_step(batch, **fit_params)
        self._zero_grad_optimizer()
        step = self.train_step_single(batch, **fit_params)
        optimizers = [getattr(self, name + "_") for name in self._optimizers]
        for optimizer in optimizers:
            scaler.unscale_(optimizer)  # callbacks (e.g. gradient clipping) see true grads
        self.notify("on_grad_computed", named_parameters=TeeGenerator(
            self.get_all_learnable_params()), batch=batch, training=True)
        for optimizer in optimizers:
            scaler.step(optimizer)
        scaler.update()
        return step

    def get_loss(self, y_pred: torch.Tensor, y_true: Any, X: Any = None,
                 training: bool = False, index: torch.Tensor | None = None) -> torch.Tensor:
        """The criterion's loss; a training batch with its dataset ``index`` also goes
        through the memory (:mod:`skcontrast.memory`), if any."""
        if y_true is not None:
            y_true = y_true.to(y_pred.device, non_blocking=True)
        terms = self.criterion_(y_pred.float(), y_true, index=index,
                                remember=training and index is not None)
        self._batch_terms = terms
        return terms.loss

    def run_single_epoch(self, iterator: Any, training: bool, prefix: str, step_fn: Any,
                         **fit_params: Any) -> None:
        """skorch's epoch loop, reading the batch values from the device once per epoch.

        With ``verbose`` the values are read per batch, for the progress bar. If the
        epoch is interrupted, the values of the steps already applied are still
        recorded. A non-finite loss stops training (:meth:`check_finite`).
        """
        if iterator is None:
            return
        if not training:
            with self.fixed_randomness():
                return self._run_epoch(iterator, training, prefix, step_fn, **fit_params)
        return self._run_epoch(iterator, training, prefix, step_fn, **fit_params)

    def _run_epoch(self, iterator: Any, training: bool, prefix: str, step_fn: Any,
                   **fit_params: Any) -> None:
        per_batch = bool(self.verbose)
        first = len(self.history[-1]["batches"])
        pending, sizes = [], []
        try:
            for batch in iterator:
                self.notify("on_batch_begin", batch=batch, training=training)
                step = step_fn(batch, **fit_params)
                values = torch.stack([step["loss"].detach(), step["positive"],
                                      step["entropy"]])
                sizes.append(batch_length(batch.views))
                if per_batch:
                    self._record_batch(values.tolist(), sizes[-1], prefix, first + len(sizes) - 1)
                    self.check_finite(prefix, first + len(sizes) - 1)
                else:
                    pending.append(values)
                self.notify("on_batch_end", batch=batch, training=training, **step)
        finally:
            if pending:
                for i, row in enumerate(torch.stack(pending).tolist()):
                    self._record_batch(row, sizes[i], prefix, first + i)
        self.history.record(prefix + "_batch_count", len(sizes))
        self.check_finite(prefix, first, first + len(sizes))

    def _record_batch(self, values: list[float], size: int, prefix: str, position: int) -> None:
        row = self.history[-1]["batches"][position]
        row[prefix + "_loss"], row[prefix + "_positive"], row[prefix + "_entropy"] = values
        row[prefix + "_batch_size"] = size

    def check_finite(self, prefix: str, start: int, stop: int | None = None) -> None:
        """Stop training at the first recorded batch loss that is not finite (a held-out
        loss too: the network embeds held-out data as NaN)."""
        batches = self.history[-1]["batches"]
        stop = start + 1 if stop is None else stop
        for position in range(start, stop):
            value = batches[position].get(prefix + "_loss")
            if value is not None and not np.isfinite(value):
                raise TrainingDivergedError(
                    f"training diverged: the {'held-out ' * (prefix != 'train')}loss was "
                    f"{value} at epoch {len(self.history)}, "
                    f"batch {position + 1} of this epoch, so the weights are no longer "
                    f"finite. Lower the learning rate (lr={self.lr}), raise the "
                    f"temperature (temperature={_plain_temperature(self.criterion_)}), keep "
                    "the embeddings normalised (loss__normalize=True), or check that "
                    "the module does not output NaN or inf")

    # -- inference --------------------------------------------------------------------

    @torch.no_grad()
    def embed(self, data: ViewData, view: int | None = None, augment: Any = None,
              indices: np.ndarray | None = None, head: bool = True) -> torch.Tensor:
        """Embeddings of ``data`` in inference mode, batch by batch, on the net's device.

        ``view=None`` runs the module's own ``forward`` (both views of pairs); an int
        embeds single-view data with that view's encoder, through its projection head or
        (``head=False``) not. ``augment`` is applied to each batch on the device first;
        ``indices`` restricts the pass to those rows. Returns float32 on the CPU.
        """
        module = self.inference_module()
        was_training = module.training
        module.eval()
        out = []
        try:
            for batch in self.inference_batches(data, indices):
                xb = to_device(batch.views, self.compute_device, self.image_normalization)
                if augment is not None:
                    xb = augment(xb)
                with self.autocast():
                    z = module(xb) if view is None else module.encode(xb, view, head=head)
                out.append(z.float())
        finally:
            module.train(was_training)
        if not out:
            return torch.empty(0)
        return torch.cat(out).cpu()

    def inference_module(self) -> torch.nn.Module:
        return self.module_

    def selection_embeddings(self, indices: np.ndarray | None = None) -> np.ndarray:
        """What adaptive selectors look at: current embeddings of the training set (or of
        its rows ``indices``).

        Paired data gives ``(n, 2, k)``; single views (augmented, or SupCon's) ``(n, k)``,
        from the first view of SupCon's two-crop items.
        """
        data = self.training_data
        if self.labelled:
            return self.embed(data.select(0), view=0, indices=indices).numpy()
        return self.embed(data, indices=indices).numpy()

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        for transient in ("_batch_terms", "training_data", "_warned_lone",
                          "_warned_coverage", "_checked_augmentation", "_stopped_by"):
            state.pop(transient, None)  # rebuilt by every fit
        state["train_split"] = None  # the held-out data stays out of the pickle
        return state

