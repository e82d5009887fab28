"""The skorch net the estimators build inside ``fit``: the one owner of training.

skorch drives the loop (``fit_loop``: epochs, callbacks, history); the net extends it
through skorch's public hooks only. Training reads, top to bottom:

- **building** (here): ``initialize_optimizer`` (parameter groups, and sparse gradients
  for the default text encoders where the optimizer's settings take them) and
  ``get_default_callbacks`` (skorch's, with :mod:`._callbacks`' ``FitStreams``, which
  gives each epoch its random streams, and a ``PrintLog`` without colour codes off a
  terminal);
- **batches**: skorch's ``get_iterator`` builds the net's ``iterator_train``, which
  iterates the fit's public :class:`~skcontrast.selectors.SelectorSampler`, and its
  ``iterator_valid`` (:mod:`._batches`); ``get_params_for`` (here) hands them the plan,
  the device and the sampler. The sampler owns everything about batches (the selector,
  its checks, slicing for several processes);
- **the epoch** (:mod:`._epoch`): ``run_single_epoch`` first has the embedding passes
  (:mod:`._passes`) give the sampler what its adaptive selector needs, reads the batch
  values from the device once per epoch (skorch's loop reads each batch, which stalls
  a GPU's queue) and stops a diverging fit;
- **the step** (here): ``train_step`` (skorch's, or the float16 scaler's),
  ``train_step_single`` (device, augmentation, curation, gradient caching, the loss,
  backward) and ``validation_step`` (skorch's, on the prepared batch); each returns the
  batch's loss terms in its result (``'terms'``) and ``get_loss`` is the criterion's
  loss;
- ``__getstate__``: what a pickle keeps.

What the fit worked out once is its plan (:class:`~._plan.FitPlan`), which the net
reads; where several processes train, the plan's :mod:`._replicas` answer what differs
(the gathered rows, the backward pass, the wrapped module). What a later fit continues
from is :mod:`._state`.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from typing import Any

import torch
from skorch import NeuralNet
from skorch.utils import TeeGenerator

from .._validation import describe
from ..losses import LossTerms
from ..selectors import SelectorSampler
from ._callbacks import FitState, FitStreams, PrintLog
from ._columns import ArrowColumns
from ._data import Batch, RowTargets, batch_length, to_device
from ._epoch import EpochLoop
from ._optim import param_groups, use_sparse_gradients
from ._passes import SelectionPasses
from ._plan import FitPlan
from ._state import ContinuedTraining
from ._step import (
    PRECISIONS,
    batch_norms,
    rng_states,
    set_rng_states,
    split_rows,
)


class ChunkViews:
    """Every view of every chunk of an Arrow dataset of texts
    (:meth:`~._columns.ArrowColumns.chunks`), read anew on each pass: the blocks of token
    ids a text encoder's prior counts (its ``fit_prior`` takes any iterable of them)."""

    def __init__(self, data: ArrowColumns) -> None:
        self.data = data

    def __bool__(self) -> bool:
        return len(self.data) > 0

    def __iter__(self) -> Any:
        return (view for _, views in self.data.chunks() for view in views
                if view is not None)


class SelectorNet(EpochLoop, SelectionPasses, ContinuedTraining, NeuralNet):
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
        """skorch's optimizer (its groups from :meth:`get_params_for_optimizer`); then the
        default text encoders get sparse gradients where its settings take them
        (:func:`~._optim.use_sparse_gradients`) and the processes that train prepare the
        module and the optimizer (:meth:`~._replicas.Replicas.prepare`)."""
        super().initialize_optimizer(triggered_directly)
        use_sparse_gradients(self.module_, self.optimizer_)
        self.module_, self.optimizer_ = self.plan.replicas.prepare(self.module_,
                                                                   self.optimizer_)
        self.criterion_ = self.criterion_.to(self.compute_device)
        return self

    def get_params_for_optimizer(self, prefix: str, named_parameters: Any) -> tuple:
        """skorch's settings of the optimizer, its parameters grouped by
        ``optimizer__param_groups`` as :func:`~._optim.param_groups` reads them: a pattern
        may also name parameters within the user's module (without the fitted
        ``module_``'s ``encoders.<i>.`` prefix), and one that matches nothing is an error
        (skorch drops its group silently)."""
        named = list(named_parameters)
        _, kwargs = super().get_params_for_optimizer(prefix, named)
        patterns = self.get_params_for(prefix).get("param_groups", [])
        return (param_groups(named, patterns),), kwargs

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
        views: Any = [v for v in getattr(data.sample(), "views", ()) if v is not None]
        prepare = functools.partial(to_device, device=self.compute_device,
                                    normalization=self.plan.image_normalization)
        priors = [m for m in self.module_.modules() if callable(getattr(m, "fit_prior", None))]
        if priors and isinstance(data, ArrowColumns):
            if data.tokenize is not None:  # texts: one pass, a chunk of token ids at a time
                views = ChunkViews(data)
            else:
                warnings.warn(f"{type(priors[0]).__name__} starts from statistics of the "
                              "training data (fit_prior), which would read every row of an "
                              "Arrow dataset read by batch: it starts from its defaults. "
                              "Call its fit_prior on a sample yourself to give it one",
                              UserWarning, stacklevel=2)
        for module in priors:
            if views:
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

    def end_fit(self) -> None:
        """Drop what the fit held while it ran (its training rows among them)."""
        self.fit_ = None

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
            params.update(sampler=self.sampler_, embed=self.selection_embeddings)
        return params

    @property
    def sampler_(self) -> SelectorSampler:
        """The fit's :class:`~skcontrast.selectors.SelectorSampler` of its training rows,
        which the loss module holds (:class:`~._progress.SelectionProgress`), so that its
        state travels with it."""
        return self.loss_module().progress.sampler

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
                y_pred = self.infer(Xi, **fit_params)
            terms = self.loss_terms(y_pred, yi, index=index, training=True)
            self.backward(terms.loss)
        self.remember_embeddings(y_pred, index)
        step = {"loss": terms.loss, "y_pred": y_pred, "terms": terms}
        if kept is not None:
            step["kept"], step["selection_rows"] = kept, embedded
        return step

    def validation_step(self, batch: Any, **fit_params: Any) -> dict:
        """skorch's held-out step (eval mode, no gradients, :meth:`infer` and
        :meth:`get_loss`), on the batch as a training step prepares it (the device,
        pixels to [0, 1], ``image_normalization``, the augmentation's two views, the
        precision's autocast), with its rows' dataset index in its target
        (:class:`~._data.RowTargets`), so the loss's false-negative guard, which reads
        the held-out rows' content and groups, applies to ``valid_loss``. The step also
        gives the loss's ``terms``."""
        Xi = to_device(batch.views, self.compute_device, self.plan.image_normalization)
        augmentation = self.plan.augmentation
        if augmentation is not None:
            with torch.no_grad():
                Xi = (augmentation(Xi), augmentation(Xi))
        target = RowTargets(batch.labels, batch.index, [])
        with self.autocast():
            step = super().validation_step(Batch(Xi, target, batch.index), **fit_params)
        (step["terms"],) = target.terms  # from get_loss
        return step

    def evaluation_step(self, batch: Any, training: bool = False) -> Any:
        """skorch's inference step (``forward``, ``predict``, a scoring callback's
        predictions), on the batch's views prepared as a training step prepares them
        (the device, pixels to [0, 1], ``image_normalization``)."""
        views = to_device(batch.views, self.compute_device, self.plan.image_normalization)
        return super().evaluation_step(Batch(views, batch.labels, batch.index), training)

    def get_loss(self, y_pred: torch.Tensor, y_true: Any, X: Any = None,
                 training: bool = False) -> torch.Tensor:
        """The criterion's loss of a batch (without the memory: the training step, which
        knows the batch's dataset indices, calls :meth:`loss_terms`). ``y_true`` is the
        labels (``None`` for unlabelled pairs), or a held-out step's
        :class:`~._data.RowTargets`, whose rows' index reaches the false-negative guard
        and which receives the loss's terms.

        skorch's own cannot serve: it converts ``y_true`` with ``to_tensor``, which
        refuses the ``None`` of unlabelled pairs."""
        rows = y_true if isinstance(y_true, RowTargets) else RowTargets(y_true, None, [])
        terms = self.loss_terms(y_pred, rows.labels, index=rows.rows, training=training)
        rows.terms.append(terms)
        return terms.loss

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

    def infer(self, x: Any, **fit_params: Any) -> torch.Tensor:
        """skorch's inference step of a batch; a tensor or a tuple of them that
        :func:`~._data.to_device` has prepared goes straight to the module (skorch's
        converts it again, and a tuple to a list: a cost per step that a small model
        notices)."""
        tensors = isinstance(x, torch.Tensor) or (
            isinstance(x, tuple) and all(isinstance(t, torch.Tensor) for t in x))
        if tensors and not fit_params:
            return self.module_(x)
        return super().infer(x, **fit_params)

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
                    outputs.append(self.infer(part, **fit_params).float())
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
                out = self.infer(part, **fit_params)
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

    # -- state that travels: warm starts, saved models and pickles ----------------------

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["fit_"] = None  # rebuilt by every fit
        state["train_split"] = None  # the held-out data stays out of the pickle
        state["device"] = str(self.compute_device)  # where the weights are
        return state

