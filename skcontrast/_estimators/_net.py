"""The skorch net the estimators build inside ``fit``.

skorch drives training; a few of its hooks are overridden, nothing more. The net is
three parts along its seams: :class:`~._supply.BatchSupply` (which batches, from the
selector, and the embedding pass adaptive selectors see), :class:`~._step.TrainingStep`
(one batch: device, augmentation, mixed precision, gradient caching, the loss) and,
here, the hooks around them: ``run_single_epoch`` reads the per-batch values from the
device once per epoch instead of once per batch (skorch's own loop calls ``.item()`` on
every batch, which stalls the GPU queue), stops a diverging fit, tells a Ctrl-C from a
callback's stop, and the state a warm start or a saved model continues from.
"""

from __future__ import annotations

import copy
import fnmatch
import linecache
import re
import sys
import warnings
from typing import Any

import numpy as np
import skorch.callbacks
import torch
from skorch import NeuralNet
from skorch.history import History

from .._validation import first_non_finite
from ..exceptions import TrainingDivergedError, TrainingInterrupted
from ._modules import ContrastiveCriterion
from ._optim import use_sparse_gradients
from ._step import TrainingStep, batch_length, batch_norms, plain_temperature, seed_torch
from ._supply import BatchSupply


def _steps_recorded(history: Any) -> int:
    return sum("train_loss" in b for row in history for b in row["batches"])


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


#: skorch's hooks of a net that do nothing and run every step: skipped unless overridden.
_EMPTY_HOOKS = frozenset({"on_batch_end", "on_grad_computed"})


def _stream(*key: int) -> int:
    """A 63-bit seed drawn from ``key`` (independent streams for different keys)."""
    return int(np.random.SeedSequence(list(key)).generate_state(1, dtype=np.uint64)[0]
               % 2**63)


def _check_optimizer_state(state: dict, parameters: list) -> None:
    """Refuse a saved optimizer state that does not fit the parameters it is for (a
    moment of another shape, or of a parameter that does not exist), naming it."""
    for index, values in state.items():
        if not 0 <= int(index) < len(parameters):
            raise ValueError(f"the saved optimizer state has an entry for parameter {index}, "
                             f"but the optimizer has {len(parameters)} parameters")
        shape = tuple(parameters[int(index)].shape)
        for key, value in values.items():
            if isinstance(value, torch.Tensor) and value.ndim and tuple(value.shape) != shape:
                raise ValueError(f"the saved optimizer state 'optimizer.{index}.{key}' has "
                                 f"shape {tuple(value.shape)}, but parameter {index} has "
                                 f"shape {shape}: it is not this model's optimizer state")


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


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class PrintLog(skorch.callbacks.PrintLog):
    """skorch's epoch table, with its colour codes only when output goes to a terminal
    (a log file or a notebook cell would show them as ``[35m`` garbage)."""

    def format_row(self, row: Any, key: str, color: str) -> Any:
        text = super().format_row(row, key, color)
        if isinstance(text, str) and not sys.stdout.isatty():
            return _ANSI.sub("", text)
        return text


class SelectorNet(BatchSupply, TrainingStep, NeuralNet):
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
    selection_pass : {'fresh', 'cached'}
        What adaptive selectors see: a fresh no-grad pass over the training set at the
        start of every epoch, or the embeddings the training steps computed.
    """

    interrupted: Any  # None, or how far an interrupted fit got
    _stopped_by: str | None  # the callback that stopped training, if one did
    _mode_snapshot: Any
    optimizer_: Any
    grad_scaler_: Any

    def __init__(self, *args: Any, selector: Any = None, labels: Any = None,
                 augmentation: Any = None, seed: int = 0, precision: str = "float32",
                 num_workers: int = 0, labelled: bool = False,
                 micro_batch_size: int | None = None, valid_batch_size: int | None = None,
                 image_normalization: Any = None, held_out_rows: Any = None,
                 selection_pass: str = "fresh", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.selection_pass = selection_pass
        self.held_out_rows = held_out_rows
        self.image_normalization = image_normalization
        self.micro_batch_size = micro_batch_size
        self.valid_batch_size = valid_batch_size
        self.selector = selector
        self.labels = labels
        self.augmentation = augmentation
        self.seed = seed
        # the training rows' digest, and the steps' embeddings of them: training state
        # (a warm start on the same rows continues from them)
        self.data_fingerprint: str | None = None
        self.sampler_ = self._pending_selection = None
        self.precision = precision
        self.num_workers = num_workers
        self.labelled = labelled

    def get_default_callbacks(self) -> list:
        return [(name, PrintLog() if name == "print_log" else callback)
                for name, callback in super().get_default_callbacks()]

    @property
    def compute_device(self) -> torch.device:
        """Where the module computes (the accelerator's device in distributed training)."""
        return torch.device(self.device)

    def initialize_optimizer(self, *args: Any, **kwargs: Any) -> SelectorNet:
        """skorch's optimizer; then the default text encoders get sparse gradients where
        its settings for them (``optimizer__*``, a param group's own) update them
        (:func:`~._optim.use_sparse_gradients`)."""
        super().initialize_optimizer(*args, **kwargs)
        use_sparse_gradients(self.module_, self.optimizer_)
        return self

    def fit_priors(self, data: Any) -> None:
        """Encoders that start from statistics of the training data (the text bag's IDF
        weights, :meth:`~skcontrast.text.NgramBagEncoder.fit_prior`) take them from
        ``data``, every text column of it, before the first step of a fresh fit."""
        views = [v for v in getattr(data, "views", ()) if v is not None]
        for module in self.module_.modules():
            if callable(getattr(module, "fit_prior", None)) and views:
                module.fit_prior(views)

    def on_train_begin(self, net: Any, X: Any = None, y: Any = None, **kwargs: Any) -> None:
        super().on_train_begin(net, X=X, y=y, **kwargs)
        self._mode_snapshot = None  # the next step walks the module trees
        self._checked_augmentation = False
        if self.micro_batch_size is not None and batch_norms(self.module_):
            warnings.warn(
                "the module has batch-normalisation layers: with micro_batch_size each "
                "micro-batch is normalised with its own statistics, so the update differs "
                "from the plain step on the whole batch (running statistics are updated "
                "once per micro-batch, by the pass with gradients). Use layer or group "
                "normalisation for the exact full-batch update", UserWarning, stacklevel=2)
        device_type = self.compute_device.type
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
        (skorch's callbacks stop it by raising ``KeyboardInterrupt``). The net's own hook
        runs unless it is one of skorch's empty per-step hooks (:data:`_EMPTY_HOOKS`)."""
        if method_name not in _EMPTY_HOOKS or \
                getattr(type(self), method_name) is not getattr(NeuralNet, method_name):
            getattr(self, method_name)(self, **cb_kwargs)
        for name, callback in self._listening(method_name):
            try:
                getattr(callback, method_name)(self, **cb_kwargs)
            except KeyboardInterrupt as exc:
                if _raised_on_purpose(exc):
                    self._stopped_by = name
                raise

    def _listening(self, method_name: str) -> list[tuple[str, Any]]:
        """The callbacks that override ``method_name`` (skorch's base methods do nothing):
        the per-batch hooks then cost nothing for callbacks that only act per epoch. The
        cache holds the list it was made from, so a new or changed list rebuilds it."""
        callbacks = self.callbacks_
        made_from, size, cache = self.__dict__.get("_listeners", (None, 0, {}))
        if made_from is not callbacks or size != len(callbacks):
            cache = {}
            self._listeners = (callbacks, len(callbacks), cache)
        if method_name not in cache:
            base = getattr(skorch.callbacks.Callback, method_name, None)
            cache[method_name] = [(name, cb) for name, cb in callbacks
                                  if getattr(type(cb), method_name, None) is not base
                                  or method_name in vars(cb)]
        return cache[method_name]

    def check_finite_weights(self) -> None:
        """Refuse a trained network with a NaN or infinite weight or buffer (batch-norm
        statistics, a memory's state), naming it (one device read when all are finite).
        Called at every exit of a fit: its end, an early stop, an interrupt."""
        state = {f"module.{k}": v for k, v in self.inference_module().state_dict().items()}
        state.update({f"criterion.{k}": v for k, v in self.criterion_.state_dict().items()})
        bad = first_non_finite({k: v.detach() for k, v in state.items()
                                if isinstance(v, torch.Tensor)})
        if bad is None:
            return
        message = (
            f"after {len(self.history)} epoch(s) the network's {bad!r} holds NaN or "
            f"infinite values, so its embeddings would be NaN; the model was not kept (the "
            f"estimator is as it was before this fit). Lower the learning rate "
            f"(lr={self.lr}), raise the temperature "
            f"(temperature={plain_temperature(self.criterion_)}), or check that the "
            "module does not output NaN or inf")
        if self.interrupted is not None:  # the interrupt goes on, without the NaN model
            raise TrainingInterrupted(f"{self.interrupted}; and {message}")
        raise TrainingDivergedError(f"training diverged in its last steps: {message}")

    def check_finite_outputs(self, data: Any, rows: int = 8) -> None:
        """Refuse a trained network whose embeddings of a few training rows (``rows``,
        spread over ``data``) are NaN or infinite, or overflow when normalised: finite
        weights can still overflow the activations (a last update of lr=1e30). Called
        at every exit of a fit, after :meth:`check_finite_weights`."""
        n = len(data)
        if n == 0:
            return
        index = np.unique(np.linspace(0, n - 1, min(rows, n)).astype(np.int64))
        out = self.embed(data.select(0), view=0, indices=index) if self.labelled else \
            self.embed(data, indices=index)
        if bool(torch.isfinite(out.reshape(len(out), -1, out.shape[-1]).norm(dim=-1)).all()):
            return
        message = (
            f"after {len(self.history)} epoch(s) the network embeds training rows as NaN or "
            f"infinite values (its weights are finite, its activations overflow), so "
            f"transform would return them; the model was not kept (the estimator is as it "
            f"was before this fit). Lower the learning rate (lr={self.lr}), raise the "
            f"temperature (temperature={plain_temperature(self.criterion_)}), or check that "
            "the module does not output NaN or inf")
        if self.interrupted is not None:
            raise TrainingInterrupted(f"{self.interrupted}; and {message}")
        raise TrainingDivergedError(f"training diverged in its last steps: {message}")

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
                "selector_state": self.selector.state_dict(),
                "selection": self.selection_state(),
                "held_out_rows": None if self.held_out_rows is None
                else np.asarray(self.held_out_rows).tolist(),
                "seed": self.seed,
                "grad_scaler": None if getattr(self, "grad_scaler_", None) is None
                else self.grad_scaler_.state_dict()}

    def load_training_state(self, state: dict, restart: tuple[str, ...] = (),
                            rows: str | bool | None = True) -> None:
        """Continue from :meth:`training_state` (of this net's structure).

        The optimizer's state is taken when the optimizer is of the same class and
        holds the same parameter groups; its settings (learning rate, ...) stay this
        net's own. A learned loss parameter (temperature, SigLIP's bias) is taken when
        this net learns it too and it is not in ``restart`` (the parameters whose
        starting value the loss changed); otherwise it is this net's start. The
        embeddings of the training rows that ``selection_pass='cached'`` keeps (the
        net's, and a selector's under ``'cache'``) are taken when ``rows``, the digest of
        the rows this net trains on (:meth:`ViewData.fingerprint`), is the one they were
        computed on (``True``: as they are, for a loaded model); a fit on other rows
        starts without them.
        """
        if rows is not True and (rows is None or
                                 (state.get("selection") or {}).get("rows") != rows):
            state = without_row_caches(state)
        _load_state(self.inference_module(), state["module"], "the network")
        criterion = dict(state["criterion"])
        learned = tuple(ContrastiveCriterion.PARAMETERS.values())
        for name, key in ContrastiveCriterion.PARAMETERS.items():
            value = criterion.pop(key, None)
            if value is not None and name not in restart and hasattr(self.criterion_, key):
                criterion[key] = value
        _load_state(self.criterion_, criterion, "the loss module", optional=learned)
        self._load_optimizer(state.get("optimizer"), state.get("optimizer_class"))
        self.history = History(copy.deepcopy(state["history"]))
        self.selector.set_epoch(state["selector_epoch"])
        self.selector.load_state_dict(state.get("selector_state", {}))
        self.load_selection_state(state.get("selection"))
        rows = state.get("held_out_rows")
        self.held_out_rows = None if rows is None else np.asarray(rows, dtype=np.int64)
        scaler = state.get("grad_scaler")
        if scaler and self.precision == "float16":
            self.grad_scaler_ = torch.amp.GradScaler(self.compute_device.type)
            self.grad_scaler_.load_state_dict(scaler)

    def _load_optimizer(self, saved: dict | None, kind: type | str | None) -> None:
        """Take a saved optimizer state into an optimizer of the class it was saved from
        (``kind``: the class, or its dotted name as a saved model holds it)."""
        optimizer = getattr(self.optimizer_, "optimizer", self.optimizer_)
        own = type(optimizer)
        if saved is None or kind not in (None, own, f"{own.__module__}.{own.__qualname__}"):
            return
        fresh = optimizer.state_dict()
        sizes = [len(g["params"]) for g in saved["param_groups"]]
        if sizes != [len(g["params"]) for g in fresh["param_groups"]]:
            warnings.warn("the optimizer's parameter groups changed (optimizer__param_groups "
                          "or the parameters that train), so its state (e.g. Adam's moments) "
                          "starts afresh", UserWarning, stacklevel=3)
            return
        _check_optimizer_state(saved["state"], [p for g in optimizer.param_groups
                                                for p in g["params"]])
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
        """Each epoch draws its random numbers (dropout, augmentations, the selection
        pass) from streams seeded by ``(seed, epoch)``: torch's generators and the
        augmentation's own. So an epoch is the same whether the fit runs on or stops
        and continues (a warm start, a saved and loaded model, a pickle): 2 + 2 epochs
        are 4, on any device."""
        super().on_epoch_begin(net, dataset_train=dataset_train, dataset_valid=dataset_valid,
                               **kwargs)
        epoch = len(self.history) - 1  # skorch has opened this epoch's row
        seed_torch(_stream(self.seed, 5, epoch))
        if self.augmentation is not None:
            self.augmentation.seed(self.compute_device, _stream(self.seed, 2, epoch))
        memory = self.memory_state
        if memory is not None:  # e.g. SogCLR's schedule of gamma counts epochs
            memory.set_epoch(epoch)

    @property
    def memory_state(self) -> Any:
        """The memory's state (:mod:`skcontrast.memory`) inside the criterion, or None."""
        return getattr(getattr(self, "criterion_", None), "memory_state", None)

    def on_train_end(self, net: Any, X: Any = None, y: Any = None, **kwargs: Any) -> None:
        super().on_train_end(net, X=X, y=y, **kwargs)
        self.training_data = None


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
        pending: list[torch.Tensor] = []
        sizes: list[int] = []
        kept: list[tuple[int, torch.Tensor]] = []  # rows a curating selector kept
        try:
            for batch in iterator:
                self.notify("on_batch_begin", batch=batch, training=training)
                step = step_fn(batch, **fit_params)
                values = (step["loss"].detach(), step["positive"], step["entropy"])
                if "kept" in step:  # rows embedded to choose, and the rows that trained
                    kept.append((step["selection_rows"], step["kept"]))
                sizes.append(len(step["kept"]) if "kept" in step
                             else batch_length(batch.views))
                if per_batch:
                    self._record_batch(torch.stack(values).tolist(), sizes[-1], prefix,
                                       first + len(sizes) - 1)
                    self.check_finite(prefix, first + len(sizes) - 1)
                else:
                    pending.extend(values)  # read from the device once, after the epoch
                self.notify("on_batch_end", batch=batch, training=training, **step)
        finally:
            if pending:
                rows = torch.stack(pending).view(-1, 3).tolist()
                records = self.history[-1]["batches"]  # skorch's lookup, once per epoch
                for i, row in enumerate(rows):
                    self._record_batch(row, sizes[i], prefix, first + i, records)
            if kept:
                self._record_curation(kept, first)
        self.history.record(prefix + "_batch_count", len(sizes))
        self.check_finite(prefix, first, first + len(sizes))

    def _record_curation(self, kept: list[tuple[int, torch.Tensor]], first: int) -> None:
        """Per step of a curating selector: the training rows kept (``'kept'``) and the
        rows embedded to choose them (``'selection_rows'``: with a fresh selection pass,
        the super-batch, once by the learner and once more by a reference model; with a
        cached one, the rows never met before), read from the device once."""
        records = self.history[-1]["batches"]
        rows = torch.cat([k for _, k in kept]).tolist()
        start = 0
        for i, (embedded, k) in enumerate(kept):
            row = records[first + i]
            row["kept"] = rows[start:start + len(k)]
            row["selection_rows"] = embedded
            start += len(k)
        self.history.record("selection_rows", sum(embedded for embedded, _ in kept))

    def _record_batch(self, values: list[float], size: int, prefix: str, position: int,
                      records: list | None = None) -> None:
        row = (self.history[-1]["batches"] if records is None else records)[position]
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
                    f"temperature (temperature={plain_temperature(self.criterion_)}), keep "
                    "the embeddings normalised (loss__normalize=True), or check that "
                    "the module does not output NaN or inf")



    def __getstate__(self) -> dict:
        state = super().__getstate__()
        for transient in ("_batch_terms", "training_data", "_checked_augmentation",
                          "_stopped_by", "_listeners", "_mode_snapshot"):
            state.pop(transient, None)  # rebuilt by every fit
        # the sampler is made anew by the next fit, from the embeddings it held
        state["_pending_selection"] = self.selection_state()
        state["sampler_"] = None
        state["train_split"] = None  # the held-out data stays out of the pickle
        return state



def without_row_caches(state: dict) -> dict:
    """A training state without the embeddings of training rows it carries (the net's
    selection embeddings, and every selector's ``'cache'`` entry)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "cache"}
        return value

    return {**state, "selection": None, "selector_state": strip(state.get("selector_state", {}))}
