"""The skorch net the estimators build inside ``fit``: the one owner of training.

skorch drives the loop (``fit_loop``: epochs, callbacks, history); the net extends it
through skorch's public hooks only, and a reader finds all of training here, top to
bottom:

- **building**: ``initialize_optimizer`` (parameter groups, and sparse gradients for
  the default text encoders where the optimizer's settings take them) and
  ``get_default_callbacks`` (skorch's, with :class:`FitStreams`, which gives each epoch
  its random streams, and a :class:`PrintLog` without colour codes off a terminal);
- **batches**: skorch's ``get_iterator`` builds the net's ``iterator_train``, which
  iterates the fit's public :class:`~skcontrast.selectors.SelectorSampler`, and its
  ``iterator_valid`` (:mod:`._batches`); ``get_params_for`` hands them the plan, the
  device and the sampler. The sampler owns everything about batches (the selector, its
  checks, slicing for several processes); before each epoch the net gives it the
  embeddings its adaptive selector needs (:meth:`prepare_selection`);
- **the epoch**: ``run_single_epoch`` reads the batch values from the device once per
  epoch (skorch's loop reads each batch, which stalls a GPU's queue) and stops a
  diverging fit;
- **the step**: ``train_step`` (skorch's, or the float16 scaler's), ``train_step_single``
  (device, augmentation, curation, gradient caching, the loss, backward) and
  ``validation_step``; each returns the batch's loss terms in its result (``'terms'``)
  and ``get_loss`` is the criterion's loss;
- ``__getstate__``: what a pickle keeps.

Its other methods are its own: the embedding passes (:meth:`embed`) and the parts of a
step. What the fit worked out once is its plan (:class:`~._plan.FitPlan`), which the net
reads; where several processes train, the plan's :mod:`._replicas` answer what differs
(the gathered rows, the backward pass, the wrapped module). What a later fit continues
from is :mod:`._state`.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import re
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import skorch.callbacks
import torch
from skorch import NeuralNet
from skorch.utils import TeeGenerator

from .._batch import take_rows
from .._validation import describe
from ..exceptions import TrainingDivergedError
from ..losses import LossTerms
from ..selectors import CurationBatch, SelectorSampler
from ._batches import inference_batches
from ._data import Batch, ViewData, batch_length, to_device
from ._optim import use_sparse_gradients
from ._plan import FitPlan
from ._step import (
    PRECISIONS,
    batch_norms,
    rng_states,
    seed_torch,
    set_rng_states,
    split_rows,
    stream_seed,
)


def _aliases(name: str) -> list[str]:
    """A parameter's name in the fitted ``module_`` (``encoders.0.layer1.weight``) and
    as ``freeze`` names it, within the user's module (``layer1.weight``)."""
    parts = name.split(".")
    if len(parts) > 2 and parts[0] in ("encoders", "heads") and parts[1].isdigit():
        return [name, ".".join(parts[2:])]
    return [name]


def param_groups(named: list[tuple[str, torch.nn.Parameter]], patterns: list) -> list[dict]:
    """skorch's ``optimizer__param_groups`` rule, with two changes: a pattern may name
    parameters as ``freeze`` names parts of the module (without the ``encoders.<i>.``
    prefix of the fitted ``module_``), and a pattern that matches no parameter is an
    error, not silently ignored."""
    params = list(named)
    groups = []
    for pattern, group in patterns:
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
    return groups


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class PrintLog(skorch.callbacks.PrintLog):
    """skorch's epoch table, with its colour codes only when output goes to a terminal
    (a log file or a notebook cell would show them as ``[35m`` garbage)."""

    def format_row(self, row: Any, key: str, color: str) -> Any:
        text = super().format_row(row, key, color)
        if isinstance(text, str) and not sys.stdout.isatty():
            return _ANSI.sub("", text)
        return text


class FitStreams(skorch.callbacks.Callback):
    """What a fit sets up once and each epoch: the per-fit state of the net when
    training begins (the float16 scaler, the batch-norm warning of gradient caching),
    and each epoch's random numbers (dropout, augmentations, the selection pass) drawn
    from streams seeded by ``(seed, epoch)``: torch's generators and the
    augmentation's own. So an epoch is the same whether the fit runs on or stops and
    continues (a warm start, a saved and loaded model, a pickle): 2 + 2 epochs are 4,
    on any device."""

    def on_train_begin(self, net: Any, X: Any = None, y: Any = None, **kwargs: Any) -> None:
        net.start_fit(X)

    def on_epoch_begin(self, net: Any, **kwargs: Any) -> None:
        epoch = len(net.history) - 1  # skorch has opened this epoch's row
        seed_torch(stream_seed(net.plan.seed, 5, epoch))
        if net.plan.augmentation is not None:
            net.plan.augmentation.seed(net.compute_device, stream_seed(net.plan.seed, 2, epoch))
        memory = net.memory_state
        if memory is not None:  # e.g. SogCLR's schedule of gamma counts epochs
            memory.set_epoch(epoch)

    def on_train_end(self, net: Any, X: Any = None, y: Any = None, **kwargs: Any) -> None:
        net.fit_ = None


class FitState:
    """What one fit of the net holds while it runs (dropped when it ends)."""

    def __init__(self, data: Any) -> None:
        self.data = data  # the training rows, which the selection pass embeds
        self.checked_augmentation = False  # whether its first output was checked
        self.modes: Any = None  # the modules' train/eval modes the last walk left
        self.listeners: dict[str, list] = {}  # the callbacks that act on a hook


class SelectorNet(NeuralNet):
    """skorch ``NeuralNet`` whose training batches come from a batch selector.

    Parameters (beyond ``NeuralNet``'s)
    ------------------------------------
    plan : FitPlan
        What the fit worked out once (:class:`~._plan.FitPlan`): the selector, the
        batch structure, the augmentation, the seed, the precision, the workers,
        gradient caching, the held-out rows and the processes that train. The net reads
        it and derives none of it again.
    """

    module_: Any
    criterion_: Any
    optimizer_: Any
    grad_scaler_: Any
    fit_: FitState | None

    def __init__(self, *args: Any, plan: FitPlan, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.plan = plan
        self.grad_scaler_ = None
        self.fit_ = None

    # -- building -------------------------------------------------------------------

    def get_default_callbacks(self) -> list:
        """skorch's, after :class:`FitStreams`, with :class:`PrintLog`'s table."""
        return [("fit_streams", FitStreams())] + [
            (name, PrintLog() if name == "print_log" else callback)
            for name, callback in super().get_default_callbacks()]

    def initialize_optimizer(self, triggered_directly: Any = None) -> SelectorNet:
        """The optimizer over the learnable parameters in the groups of
        ``optimizer__param_groups`` (:func:`param_groups`); then the default text
        encoders get sparse gradients where its settings take them
        (:func:`~._optim.use_sparse_gradients`); the processes that train prepare the
        module and the optimizer (:meth:`~._replicas.Replicas.prepare`).

        skorch's own cannot serve: its ``get_params_for_optimizer`` silently drops a
        group whose pattern matches nothing, and matches names of the fitted
        ``module_`` only."""
        kwargs = self.get_params_for("optimizer")
        groups = param_groups(list(self.get_all_learnable_params()),
                              kwargs.pop("param_groups", []))
        kwargs.setdefault("lr", self.lr)
        optimizer = self.optimizer(groups, **kwargs)
        use_sparse_gradients(self.module_, optimizer)
        self.module_, self.optimizer_ = self.plan.replicas.prepare(self.module_, optimizer)
        self.criterion_ = self.criterion_.to(self.compute_device)
        return self

    def release_replicas(self) -> None:
        """After training (also a failed one): the module and the optimizer as a plain
        net holds them (:meth:`~._replicas.Replicas.release`)."""
        self.module_, self.optimizer_ = self.plan.replicas.release(self.module_,
                                                                  self.optimizer_)

    @property
    def selector(self) -> Any:
        """The fit's selector (the plan's: a configured clone of the estimator's), whose
        recorded state (``seen_``, ``losses_``, ...) a user may read."""
        return self.plan.selector

    @property
    def compute_device(self) -> torch.device:
        """Where the module computes (the accelerator's device in distributed training)."""
        return self.plan.replicas.device(self.device)

    def inference_module(self) -> torch.nn.Module:
        """The network as trained (an accelerator's wrapper taken off)."""
        return self.plan.replicas.unwrap(self.module_)

    def loss_module(self) -> Any:
        """The loss module (:class:`~._modules.ContrastiveCriterion`), its wrapper off."""
        return self.criterion_

    @property
    def structure(self) -> str:
        """How a training batch's rows reach the loss (the criterion's ``structure``):
        an adaptive selector sees both views of ``'pairs'``, one view per item
        otherwise."""
        return self.loss_module().structure

    @property
    def memory_state(self) -> Any:
        """The memory's state (:mod:`skcontrast.memory`) inside the criterion, or None."""
        criterion = getattr(self, "criterion_", None)
        return None if criterion is None else self.loss_module().memory_state

    def plain_temperature(self) -> str:
        """The loss's temperature now, for messages."""
        return f"{float(torch.as_tensor(self.loss_module().temperature).detach()):.6g}"

    def fit_priors(self, data: Any) -> None:
        """Encoders that start from statistics of the training data (the text bag's IDF
        weights, :meth:`~skcontrast.text.NgramBagEncoder.fit_prior`; the image encoder's
        pixel prior, :meth:`~skcontrast.images.ImageEncoder.fit_prior`) take them from
        ``data``, every view of it, before the first step of a fresh fit, with
        ``prepare``: what a training step does to a batch before the encoder sees it
        (:func:`~._data.to_device`: the device, pixels to [0, 1],
        ``image_normalization``), so the statistics are of exactly what the encoder
        receives."""
        views = [v for v in getattr(data, "views", ()) if v is not None]
        prepare = functools.partial(to_device, device=self.compute_device,
                                    normalization=self.plan.image_normalization)
        for module in self.module_.modules():
            if callable(getattr(module, "fit_prior", None)) and views:
                module.fit_prior(views, prepare=prepare)

    def start_fit(self, data: Any) -> None:
        """The state of a fit that begins on ``data`` (:class:`FitStreams`)."""
        self.fit_ = FitState(data)
        if self.plan.micro_batch_size is not None and batch_norms(self.module_):
            warnings.warn(
                "the module has batch-normalisation layers: with micro_batch_size each "
                "micro-batch is normalised with its own statistics, so the update differs "
                "from the plain step on the whole batch (running statistics are updated "
                "once per micro-batch, by the pass with gradients). Use layer or group "
                "normalisation for the exact full-batch update", UserWarning, stacklevel=2)
        device = self.compute_device.type
        scaler = self.grad_scaler_
        if self.plan.precision != "float16":
            self.grad_scaler_ = None
        elif scaler is None or scaler.get_scale() is None or \
                getattr(scaler, "device", device) != device:
            self.grad_scaler_ = torch.amp.GradScaler(device)

    # -- batches ----------------------------------------------------------------------

    def get_params_for(self, prefix: str) -> dict:
        """skorch's, and for its iterators (``iterator_train``: the batches the fit's
        sampler selects; ``iterator_valid``: consecutive held-out batches; see
        :mod:`._batches`) the fit's plan, the device the module computes on and, for
        training, the sampler the loss module holds, read when skorch builds the
        iterator (so they are never copies)."""
        params = super().get_params_for(prefix)
        if prefix in ("iterator_train", "iterator_valid"):
            params.update(plan=self.plan, device=self.compute_device)
        if prefix == "iterator_train":
            params["sampler"] = self.sampler_
        return params

    @property
    def sampler_(self) -> SelectorSampler:
        """The fit's :class:`~skcontrast.selectors.SelectorSampler` of its training rows,
        which the loss module holds (:class:`~._progress.SelectionProgress`), so that its
        state travels with it."""
        return self.loss_module().progress.sampler

    def prepare_selection(self) -> float:
        """Before an epoch: the sampler's adaptive selector gets the loss as it is now
        (its learned temperature, weights, options) and the network's embeddings of
        the training rows its selection needs anew (:meth:`SelectorSampler.due`: all
        of them when a pass is due by ``selection_pass``). Returns the seconds spent."""
        import time

        start = time.perf_counter()
        sampler = self.sampler_
        assert sampler is not None  # made by get_iterator
        if self.plan.selector.needs_embeddings:
            sampler.loss = self.loss_module().live_loss()
            due = sampler.due()
            if len(due):
                sampler.update(due, self.selection_embeddings(due), pushed=False)
        return time.perf_counter() - start

    # -- the epoch ----------------------------------------------------------------------

    def run_single_epoch(self, iterator: Any, training: bool, prefix: str, step_fn: Any,
                         **fit_params: Any) -> None:
        """skorch's epoch loop, reading the batch values from the device once per epoch.

        A training epoch first prepares the selection (:meth:`prepare_selection`) and
        records how long choosing its batches took (``select_time``) and how many it has
        (``n_batches``). With ``verbose``, or a callback acting on ``on_batch_end``, the
        values are recorded per batch, before the callbacks see the batch end, as skorch
        records them (a scheduler stepping per batch on ``train_loss`` reads it there).
        If the epoch is interrupted, the values of the steps already applied are still
        recorded. A non-finite loss stops training (:meth:`check_finite`).

        skorch's own cannot serve: it reads every batch's loss from the device as the
        step ends (``loss.item()``), which stalls a GPU's queue once per step, and it
        records neither the loss's terms nor the selection.
        """
        if iterator is None:
            return
        if not training:
            with self.fixed_randomness():
                self._run_epoch(iterator, training, prefix, step_fn, **fit_params)
            return
        select_time = self.prepare_selection()
        self._run_epoch(iterator, training, prefix, step_fn, **fit_params)
        assert self.sampler_ is not None  # made by get_iterator
        self.history.record("select_time", select_time + self.sampler_.select_time)
        self.history.record("n_batches", self.history[-1, "train_batch_count"])

    def _run_epoch(self, iterator: Any, training: bool, prefix: str, step_fn: Any,
                   **fit_params: Any) -> None:
        first = len(self.history[-1]["batches"])
        pending: list[torch.Tensor] = []
        sizes: list[int] = []
        kept: list[tuple[int, torch.Tensor]] = []  # rows a curating selector kept
        begin, end = (self._listening(hook) for hook in ("on_batch_begin", "on_batch_end"))
        # a callback that acts after each batch reads its values from the history (a
        # scheduler stepping on train_loss, a logger), as skorch records them: then they
        # are read from the device per batch, else once after the epoch
        per_batch = bool(self.verbose) or end
        try:
            for batch in iterator:
                if begin:
                    self.notify("on_batch_begin", batch=batch, training=training)
                else:  # the net's own hook alone (it opens the batch's history row)
                    self.on_batch_begin(self, batch=batch, training=training)
                step = step_fn(batch, **fit_params)
                terms = step["terms"]
                values = (step["loss"].detach(), terms.positive.detach(),
                          terms.entropy.detach())
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
                if end:
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

    def _listening(self, hook: str) -> bool:
        """Whether a callback acts on a per-step ``hook`` (skorch's base methods do
        nothing, and calling every callback's each step costs a small model's step;
        the net's own ``on_batch_end`` and ``on_grad_computed`` do nothing either)."""
        fit = self.fit_
        if fit is None:
            return True
        if hook not in fit.listeners:
            base = getattr(skorch.callbacks.Callback, hook, None)
            fit.listeners[hook] = [cb for _, cb in self.callbacks_
                                   if getattr(type(cb), hook, None) is not base
                                   or hook in vars(cb)]
        return bool(fit.listeners[hook])

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
                    f"temperature (temperature={self.plain_temperature()}), keep "
                    "the embeddings normalised (loss__normalize=True), or check that "
                    "the module does not output NaN or inf")

    # -- the step -----------------------------------------------------------------------

    def train_step(self, batch: Any, **fit_params: Any) -> dict:
        """skorch's step (zero the gradients, the loss and its gradients through the
        optimizer's closure, ``on_grad_computed``, the optimizer's step), under the
        processes' step context (an accelerator's gradient accumulation). In float16 the
        gradient scaler steps the optimizer, and torch's ``GradScaler.step`` takes no
        closure: there the same step is taken without one."""
        with self.plan.replicas.step(self.module_):
            scaler = self.grad_scaler_
            if scaler is None:
                return super().train_step(batch, **fit_params)
            optimizer = self.optimizer_
            optimizer.zero_grad(set_to_none=True)
            step = self.train_step_single(batch, **fit_params)
            scaler.unscale_(optimizer)  # callbacks (e.g. gradient clipping) see true grads
            self.notify("on_grad_computed", named_parameters=TeeGenerator(
                self.get_all_learnable_params()), batch=batch, training=True)
            scaler.step(optimizer)
            scaler.update()
            return step

    def train_step_single(self, batch: Any, **fit_params: Any) -> dict:
        """One training batch: to the device, augmented (twice: two views), curated, the
        loss (of the whole batch, in micro-batches with gradient caching) and its
        backward pass. Returns ``loss``, ``y_pred`` and the loss's ``terms`` (with a
        curating selector also the rows ``kept`` and ``selection_rows``, those embedded
        to choose them).

        skorch's own cannot serve: it passes the batch's views to the module as they come
        and gives the loss neither the rows' dataset indices (the memory, the
        false-negative guard) nor the two augmented views."""
        self.set_mode(True)
        (Xi, yi), index = batch, batch.index
        Xi = to_device(Xi, self.compute_device, self.plan.image_normalization)
        if self.plan.augmentation is not None:
            Xi = (self.augment(Xi), self.augment(Xi))
        kept = embedded = None
        if self.plan.selector.curates:
            Xi, yi, index, embedded = self.curate(Xi, yi, index)
            kept = index
        micro = self.plan.micro_batch_size
        if micro is not None and batch_length(Xi) > micro:
            terms, y_pred = self.cached_step(Xi, yi, index, micro, **fit_params)
        else:
            with self.training_autocast():
                y_pred = self.forward_batch(Xi, **fit_params)
            terms = self.loss_terms(y_pred, yi, index=index, training=True)
            self.backward(terms.loss)
        self.remember_embeddings(y_pred, index)
        step = {"loss": terms.loss, "y_pred": y_pred, "terms": terms}
        if kept is not None:
            step["kept"], step["selection_rows"] = kept, embedded
        return step

    def validation_step(self, batch: Any, **fit_params: Any) -> dict:
        """The loss of a held-out batch without gradients (and without the memory); its
        rows' ``index`` reaches the loss's false-negative guard, which reads the
        held-out rows' content and groups.

        skorch's own cannot serve: it hands the loss no index, so the guard could not
        apply to ``valid_loss``."""
        self.set_mode(False)
        (Xi, yi), index = batch, batch.index
        Xi = to_device(Xi, self.compute_device, self.plan.image_normalization)
        with torch.no_grad():
            if self.plan.augmentation is not None:
                Xi = (self.plan.augmentation(Xi), self.plan.augmentation(Xi))
            with self.autocast():
                y_pred = self.forward_batch(Xi, **fit_params)
            terms = self.loss_terms(y_pred, yi, index=index, training=False)
        return {"loss": terms.loss, "y_pred": y_pred, "terms": terms}

    def evaluation_step(self, batch: Any, training: bool = False) -> Any:
        """skorch's inference step (``forward``, ``predict``, a scoring callback's
        predictions), on the batch's views prepared as a training step prepares them
        (the device, pixels to [0, 1], ``image_normalization``)."""
        views = to_device(batch.views, self.compute_device, self.plan.image_normalization)
        return super().evaluation_step(Batch(views, batch.labels, batch.index), training)

    def get_loss(self, y_pred: torch.Tensor, y_true: Any, X: Any = None,
                 training: bool = False) -> torch.Tensor:
        """The criterion's loss of a batch (without the memory: the step, which knows the
        batch's dataset indices, calls :meth:`loss_terms`).

        skorch's own cannot serve: it converts ``y_true`` with ``to_tensor``, which
        refuses the ``None`` of unlabelled pairs."""
        return self.loss_terms(y_pred, y_true, training=training).loss

    def loss_terms(self, y_pred: torch.Tensor, y_true: Any, index: torch.Tensor | None = None,
                   training: bool = False) -> LossTerms:
        """The :class:`~skcontrast.losses.LossTerms` of a batch of embeddings, in float32;
        a training batch with its dataset ``index`` also goes through the memory
        (:mod:`skcontrast.memory`), if any. A training batch's embeddings and labels are
        those of every process, gathered (``index`` already describes the gathered
        batch, see :class:`~._data.Batch`); held-out batches are computed whole by every
        process."""
        if y_true is not None:
            y_true = y_true.to(y_pred.device, non_blocking=True)
        if training:  # the whole global batch, of every process
            replicas = self.plan.replicas
            y_pred = replicas.gather(y_pred.float())
            y_true = None if y_true is None else replicas.gather(y_true)
        return self.criterion_(y_pred.float(), y_true, index=index,
                               remember=training and index is not None, training=training)

    def forward_batch(self, x: Any, **fit_params: Any) -> torch.Tensor:
        """The module's output for a batch :func:`~._data.to_device` has prepared (a
        tensor or a tuple of them, straight to the module: skorch's ``infer`` would
        convert it again, a cost per step that a small model notices); keyword views and
        fit parameters take skorch's way."""
        tensors = isinstance(x, torch.Tensor) or (
            isinstance(x, tuple) and all(isinstance(t, torch.Tensor) for t in x))
        if tensors and not fit_params:
            return self.module_(x)
        return self.infer(x, **fit_params)

    def set_mode(self, training: bool) -> None:
        """Train or eval mode for the module and the loss module, walked only when
        needed: every step asks for training mode, and walking the module trees each
        time costs a small model's step about 1%. The walk is skipped while the modules
        all still hold the modes the last walk left them in (anything that switches one,
        e.g. the selection pass or a callback, makes the next call walk again)."""
        fit = self.fit_
        tops = (self.module_, self.criterion_)
        modes = None if fit is None else fit.modes
        if (modes is not None and modes[0] == training
                and all(a is b for a, b in zip(modes[1], tops, strict=True))
                and all(m.training is mode for m, mode in modes[2])):
            return
        for top in tops:
            top.train(training)
        if fit is not None:
            fit.modes = (training, tops, [(m, m.training) for top in tops
                                          for m in top.modules()])

    def remember_embeddings(self, embeddings: torch.Tensor, index: torch.Tensor) -> None:
        """Push a training batch's embeddings (detached, on the device) to the sampler,
        by dataset index: a curating selector's kept rows, for the next steps that meet
        them (:attr:`~skcontrast.selectors.SelectorSampler.caches_rows`), as the step
        computed them; else, for the selections between passes (``selection_pass``
        other than ``'fresh'``), in the form a pass gives: both views of pairs, the
        first view (or crop) of single views."""
        sampler = self.sampler_
        if sampler is None:
            return
        if self.plan.selector.curates:
            if sampler.caches_rows:
                sampler.update(index, self.plan.replicas.gather(embeddings.detach()))
            return
        if sampler.pass_every == 1 or not self.plan.selector.needs_embeddings:
            return
        embeddings = self.plan.replicas.gather(embeddings.detach())
        if self.structure != "pairs" or self.plan.augmentation is not None:
            embeddings = embeddings[:, 0] if embeddings.ndim == 3 else embeddings
        elif embeddings.ndim == 3:
            embeddings = embeddings[:, :2]  # not the hard negatives
        sampler.update(index, embeddings)

    def augment(self, x: torch.Tensor) -> torch.Tensor:
        """One random view of a batch; the first of a fit is checked to keep its shape."""
        out = self.plan.augmentation(x)
        fit = self.fit_
        if fit is not None and not fit.checked_augmentation:
            fit.checked_augmentation = True
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
                    **fit_params: Any) -> tuple[LossTerms, torch.Tensor]:
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
                    outputs.append(self.forward_batch(part, **fit_params).float())
        for layer, saved in zip(norms, statistics, strict=True):
            layer.load_state_dict(saved)  # the pass with gradients updates them, once
        after = rng_states(device)
        embeddings = torch.cat(outputs).requires_grad_()
        terms = self.loss_terms(embeddings, yi, index=index, training=True)
        self.backward(terms.loss)
        assert embeddings.grad is not None  # the loss depends on every embedding
        cached = embeddings.grad.split([len(out) for out in outputs])
        for i, (part, state, grad) in enumerate(zip(parts, states, cached, strict=True)):
            set_rng_states(state, device)
            with self.training_autocast():
                out = self.forward_batch(part, **fit_params)
            self.plan.replicas.backward_embeddings(out.float(), grad, i == len(parts) - 1,
                                                   self.module_)
        set_rng_states(after, device)
        return terms, embeddings.detach()

    def autocast(self) -> Any:
        """The mixed-precision context of a forward pass (``precision``)."""
        dtype = PRECISIONS[self.plan.precision]
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.compute_device.type, dtype=dtype)

    def training_autocast(self) -> Any:
        """The mixed-precision context of the training forward pass."""
        return self.plan.replicas.autocast(self.autocast())

    def backward(self, loss: torch.Tensor) -> None:
        """Backpropagate a training step's loss (through the float16 grad scaler)."""
        self.plan.replicas.backward(loss, self.grad_scaler_, self.criterion_)

    # -- curation -------------------------------------------------------------------------

    def curate(self, Xi: Any, yi: Any, index: torch.Tensor
               ) -> tuple[Any, Any, torch.Tensor, int]:
        """The rows of a super-batch a curating selector keeps (``selector.curate``),
        judged by the learner's embeddings of it, computed without gradient in inference
        mode, and a reference model's: the rows this process trains on, the dataset
        indices of all kept rows, and how many rows were embedded to choose them.

        The embeddings are the sampler's tables: only the rows it names are embedded
        (:meth:`~skcontrast.selectors.SelectorSampler.stale_rows`: all with a fresh
        selection pass), the others read from them; in data-parallel training each
        process embeds a slice of them and the slices are gathered, so every process
        chooses from the same embeddings and keeps the same rows.
        """
        selector, sampler = self.plan.selector, self.sampler_
        assert sampler is not None  # made by get_iterator
        stale = sampler.stale_rows(index)
        embedded = len(stale)
        fresh = self.plan.replicas.embed_shared(self.selection_forward, take_rows(Xi, stale))
        embeddings = sampler.complete(index, stale, fresh)
        reference = None
        if selector.scores_with_model:
            stale = sampler.stale_rows(index, "reference")
            embedded += len(stale)
            fresh = self.plan.replicas.embed_shared(
                lambda views: selector.embed_reference(views, self.compute_device),
                take_rows(Xi, stale))
            reference = sampler.complete(index, stale, fresh, "reference")
        labels = None if yi is None else yi.to(embeddings.device, non_blocking=True)
        positions = selector.curate(CurationBatch(
            embeddings, index, labels, None, self.loss_module().live_loss(), reference,
            sampler))
        own = self.plan.replicas.own_positions(positions, sampler, self.compute_device)
        rows = own.to(index.device)
        return take_rows(Xi, own), None if yi is None else yi[rows.to(yi.device)], \
            index[positions.to(index.device)], embedded

    def selection_forward(self, Xi: Any) -> torch.Tensor:
        """The learner's embeddings of a batch for a selection: no gradient, inference
        mode (dropout off, batch-norm statistics untouched)."""
        module = self.module_
        was_training = module.training
        module.eval()
        try:
            with torch.no_grad(), self.autocast():
                return self.forward_batch(Xi).float()
        finally:
            module.train(was_training)

    # -- embedding passes ---------------------------------------------------------------

    @contextlib.contextmanager
    def fixed_randomness(self) -> Iterator[None]:
        """The same random views of the held-out data every epoch, leaving the training
        stream of random numbers where it was."""
        device = self.compute_device
        generator = getattr(self.plan.augmentation, "generator", None)
        saved = None if generator is None else generator.get_state()
        with torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda"
                                   else []):
            seed_torch(self.plan.seed + 3)
            if generator is not None:
                generator.manual_seed(self.plan.seed + 3)
            try:
                yield
            finally:
                if generator is not None:
                    generator.set_state(saved)

    @torch.no_grad()
    def embed(self, data: ViewData, view: int | None = None, augment: Any = None,
              indices: np.ndarray | None = None, head: bool = True) -> torch.Tensor:
        """Embeddings of ``data`` in inference mode, batch by batch, on the net's device.

        ``view=None`` runs the module's own ``forward`` (both views of pairs); an int
        embeds single-view data with that view's encoder, through its projection head or
        (``head=False``) not. ``augment`` is applied to each batch on the device first;
        ``indices`` restricts the pass to those rows. Returns float32 on the CPU.
        """
        module: Any = self.inference_module()
        was_training = module.training
        module.eval()
        out = []
        try:
            for batch in inference_batches(data, self.plan, self.compute_device, indices):
                xb = to_device(batch.views, self.compute_device, self.plan.image_normalization)
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

    def selection_embeddings(self, indices: np.ndarray | None = None) -> np.ndarray:
        """What adaptive selectors look at: current embeddings of the training set (or of
        its rows ``indices``), refused when training has diverged.

        Paired data gives ``(n, 2, k)``; single views (augmented, or SupCon's) ``(n, k)``,
        from the first view of SupCon's two-crop items.
        """
        assert self.fit_ is not None  # only while a fit runs
        data = self.fit_.data
        replicas = self.plan.replicas
        rows = np.arange(len(data)) if indices is None else np.asarray(indices)
        own = replicas.share(rows)  # each process embeds its shard; they are gathered
        if self.structure != "pairs":
            out = self.embed(data.select(0), view=0, indices=own)
        else:
            out = self.embed(data, indices=own)
            out = out[:, :2] if out.ndim == 3 else out  # not the hard negatives
        if len(own) != len(rows):
            out = replicas.gather(out.to(self.compute_device)).cpu()
        embeddings = out.numpy()
        if not np.isfinite(embeddings).all():
            bad = int((~np.isfinite(embeddings)).reshape(len(embeddings), -1).any(1).sum())
            raise TrainingDivergedError(
                f"training diverged: at the start of epoch {len(self.history)} the "
                f"network embeds {bad} training sample(s) as NaN or inf, so "
                f"{type(self.plan.selector).__name__} has nothing to select on. Lower the "
                f"learning rate (lr={self.lr}) or raise the temperature "
                f"(temperature={self.plain_temperature()})")
        return embeddings

    # -- state that travels: warm starts, saved models and pickles ----------------------

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["fit_"] = None  # rebuilt by every fit
        state["train_split"] = None  # the held-out data stays out of the pickle
        state["device"] = str(self.compute_device)  # where the weights are
        return state

