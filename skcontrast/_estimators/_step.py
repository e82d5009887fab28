"""The training step of the net: device, augmentation, mixed precision, backward.

:class:`TrainingStep` is the part of :class:`~._net.SelectorNet` that runs one batch.
``train_step_single`` moves a batch to the training device (asynchronously from pinned
memory), applies the augmentation there, runs the module under ``torch.autocast`` for
mixed precision and back-propagates (through a ``GradScaler`` for float16);
``train_step`` adds the scaler's unscale/step/update around it. With
``micro_batch_size`` the step caches gradients (GradCache): see
:meth:`TrainingStep.cached_step`. ``get_loss`` evaluates the criterion (the estimator's
loss object) in float32 and keeps its positive and entropy terms.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch
from skorch import NeuralNet
from skorch.utils import TeeGenerator

from .._batch import take_rows
from .._validation import describe
from ..selectors import CurationBatch

PRECISIONS = {"float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16}


def seed_torch(seed: int) -> None:
    """``torch.manual_seed`` without its cost where a backend is not in use: the CPU
    generator, the CUDA ones once CUDA is initialised, Apple's MPS where it exists
    (``torch.manual_seed`` records a stack trace for every lazily seeded backend, about
    0.3 ms, which an epoch of a small model notices)."""
    torch.default_generator.manual_seed(seed)
    if torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)
    if torch.backends.mps.is_available():
        torch.mps.manual_seed(seed)


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


def batch_length(x: Any) -> int:
    if isinstance(x, tuple | list):
        return batch_length(x[0])
    return len(next(iter(x.values()))) if isinstance(x, Mapping) else len(x)


def plain_temperature(criterion: Any) -> str:
    return f"{float(torch.as_tensor(criterion.temperature).detach()):.6g}"


if TYPE_CHECKING:  # a mixin of skorch's NeuralNet, whose attributes it uses
    from skorch import NeuralNet as _Net
else:
    _Net = object


class TrainingStep(_Net):
    """One training or held-out batch (mixed into the net)."""

    _checked_augmentation: bool  # whether this fit looked at its augmentation yet

    def autocast(self) -> Any:
        dtype = PRECISIONS[self.precision]
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.compute_device.type, dtype=dtype)

    def infer(self, x: Any, **fit_params: Any) -> torch.Tensor:
        """The module's output for a batch :func:`to_device` has prepared (a tensor or a
        tuple of them): skorch's ``infer`` would convert it again, a cost per step that a
        small model notices. Keyword views and fit parameters take skorch's way."""
        tensors = isinstance(x, torch.Tensor) or (
            isinstance(x, tuple) and all(isinstance(t, torch.Tensor) for t in x))
        if tensors and not fit_params:
            return self.module_(x)
        return super().infer(x, **fit_params)

    def _set_training(self, training: bool = True) -> None:
        """skorch's, walked only when needed: every step asks for training mode, and
        walking the module trees each time costs a small model's step about 1%. The walk
        is skipped while the same modules all still hold the mode the last walk left
        them in (anything that switches one, e.g. the selection pass or a callback,
        makes the next call walk again)."""
        tops = tuple(getattr(self, name + "_") for name in self._modules + self._criteria)
        snapshot = getattr(self, "_mode_snapshot", None)
        if (snapshot is not None and snapshot[0] == training
                and all(a is b for a, b in zip(snapshot[1], tops, strict=True))
                and all(m.training is mode for m, mode in snapshot[2])):
            return
        super()._set_training(training)
        modes = [(m, m.training) for top in tops if isinstance(top, torch.nn.Module)
                 for m in top.modules()]
        self._mode_snapshot = (training, tops, modes)

    def train_step_single(self, batch: Any, **fit_params: Any) -> dict:
        self._set_training(True)
        Xi, yi, index = batch
        Xi = to_device(Xi, self.compute_device, self.image_normalization)
        if self.augmentation is not None:
            Xi = (self.augment(Xi), self.augment(Xi))
        kept = None
        if self.selector.curates:
            Xi, yi, index, embedded = self.curate(Xi, yi, index)
            kept = index
        micro = self.micro_batch_size
        if micro is not None and batch_length(Xi) > micro:
            loss, y_pred = self.cached_step(Xi, yi, index, micro, **fit_params)
        else:
            with self.training_autocast():
                y_pred = self.infer(Xi, **fit_params)
            loss = self.get_loss(y_pred, yi, X=Xi, training=True, index=index)
            self.backward(loss)
        terms = self._batch_terms
        step = {"loss": loss, "y_pred": y_pred, "positive": terms.positive.detach(),
                "entropy": terms.entropy.detach()}
        if kept is not None:
            step["kept"], step["selection_rows"] = kept, embedded
            self.selector.remember(kept, self.gathered(y_pred.detach()))
        return step

    def curate(self, Xi: Any, yi: Any, index: torch.Tensor
               ) -> tuple[Any, Any, torch.Tensor, int]:
        """The rows of a super-batch a curating selector keeps (``selector.curate``),
        judged by the learner's embeddings of it, computed without gradient in inference
        mode, and a reference model's: the rows this process trains on, the dataset
        indices of all kept rows, and how many rows were embedded to choose them.

        Only the rows the selector asks for are embedded (``stale_rows``: all with a
        fresh selection pass); in data-parallel training each process embeds a slice of
        them and the slices are gathered, so every process chooses from the same
        embeddings and keeps the same rows.
        """
        selector = self.selector
        stale = selector.stale_rows(index)
        embedded = len(stale)
        fresh = self.embed_for_selection(self.selection_forward, take_rows(Xi, stale))
        embeddings = selector.complete(index, stale, fresh)
        reference = None
        if selector.scores_with_model:
            stale = selector.stale_rows(index, "reference")
            embedded += len(stale)
            fresh = self.embed_for_selection(
                lambda views: selector.embed_reference(views, self.compute_device),
                take_rows(Xi, stale))
            reference = selector.complete(index, stale, fresh, "reference")
        labels = None if yi is None else yi.to(embeddings.device, non_blocking=True)
        positions = selector.curate(CurationBatch(
            embeddings, index, labels, None, self.criterion_.live_loss(), reference))
        own = self.own_positions(positions)
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
                return self.infer(Xi).float()
        finally:
            module.train(was_training)

    def embed_for_selection(self, embed: Any, part: Any) -> torch.Tensor | None:
        """``embed(part)``, or ``None`` for no rows (one process: the whole part)."""
        return embed(part) if batch_length(part) else None

    def own_positions(self, positions: torch.Tensor) -> torch.Tensor:
        """The kept positions this process trains on (one process: all)."""
        return positions

    def gathered(self, rows: torch.Tensor) -> torch.Tensor:
        """Rows of every process, in process order (one process: ``rows``)."""
        return rows

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
        assert embeddings.grad is not None  # the loss depends on every embedding
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
            seed_torch(self.seed + 3)
            if generator is not None:
                generator.manual_seed(self.seed + 3)
            try:
                yield
            finally:
                if generator is not None:
                    generator.set_state(saved)

    def train_step(self, batch: Any, **fit_params: Any) -> dict:
        """skorch's step without its closure, which only optimizers that evaluate the loss
        several times need (``LBFGS``: then skorch's own step runs): zero the gradients,
        take the loss and its gradients once, tell the callbacks that watch gradients
        (if any: building their parameter generator costs every step otherwise), step
        every optimizer (through the gradient scaler in float16)."""
        optimizers = [getattr(self, name + "_") for name in self._optimizers]
        scaler = self.grad_scaler_
        if scaler is None and any(isinstance(o, torch.optim.LBFGS) for o in optimizers):
            return super().train_step(batch, **fit_params)
        self._zero_grad_optimizer()
        step = self.train_step_single(batch, **fit_params)
        if scaler is not None:
            for optimizer in optimizers:
                scaler.unscale_(optimizer)  # callbacks (e.g. gradient clipping) see true grads
        if self._listening("on_grad_computed") or \
                type(self).on_grad_computed is not NeuralNet.on_grad_computed:
            self.notify("on_grad_computed", named_parameters=TeeGenerator(
                self.get_all_learnable_params()), batch=batch, training=True)
        for optimizer in optimizers:
            if scaler is None:
                optimizer.step()
            else:
                scaler.step(optimizer)
        if scaler is not None:
            scaler.update()
        return step

    def get_loss(self, y_pred: torch.Tensor, y_true: Any, X: Any = None,
                 training: bool = False, index: torch.Tensor | None = None) -> torch.Tensor:
        """The criterion's loss; a training batch with its dataset ``index`` also goes
        through the memory (:mod:`skcontrast.memory`), if any."""
        if y_true is not None:
            y_true = y_true.to(y_pred.device, non_blocking=True)
        terms = self.criterion_(y_pred.float(), y_true, index=index,
                                remember=training and index is not None, training=training)
        # the step reads the terms back; past skorch's __setattr__, which checks every
        # attribute set on a net for parameters and costs a small model's step about 1%
        object.__setattr__(self, "_batch_terms", terms)
        if training and index is not None:
            self.remember_embeddings(y_pred, index)
        return terms.loss
