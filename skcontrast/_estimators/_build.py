"""Building the skorch net of a fit (or of a loaded model) from the estimator's parameters.

:class:`NetBuilder` works out the fit's plan once (:meth:`NetBuilder._plan_fit`, which
``fit`` and :func:`skcontrast.load` both use) and turns it and the checked parameters into
a :class:`~._net.SelectorNet`: the encoders' factory, the loss module around the
estimator's loss object and memory, the sampler of the fit's clone of the selector, the
callbacks. A warm start builds a net the same way and refuses parameters that would
change the fitted network's structure.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np
import torch
from sklearn.base import clone
from skorch.callbacks import PassthroughScoring, ProgressBar
from skorch.helper import predefined_split

from ..losses import Loss
from ..selectors import BatchSelector, FitSettings, SelectorSampler, ShuffledBatchSelector
from ._batches import consecutive_batches, selected_batches
from ._data import InputSpec, TensorViews, ViewData
from ._encoding import check_saved
from ._guard_rows import NO_GUARD_ROWS, GuardRows
from ._modules import ContrastiveCriterion, EncoderFactory, embedding_width
from ._net import SelectorNet
from ._params import ParameterChecks, describe_object, resolve_device
from ._plan import FitPlan
from ._replicas import AcceleratedReplicas, Replicas
from ._schedule import ScheduleCallback
from ._step import Augmentation

DEFAULT_BATCH_SIZE = 64

class NetBuilder(ParameterChecks):
    """The net of a fit (mixed into :class:`~._base.BaseEmbedder`)."""

    def _fitting_selector(self, seed: int, n: int, rows: np.ndarray | None = None,
                          n_rows: int | None = None) -> BatchSelector:
        """The user's selector (never changed: a configured clone) as this fit uses it,
        through its :meth:`~skcontrast.selectors.BatchSelector.for_fit`: the estimator's
        ``batch_size`` (when set), a seed derived from ``random_state`` where it has none,
        ``selection_pass`` for a curating selector, and the rows of ``X`` the fit trains
        on (the others are held out)."""
        selector = self.selector if self.selector is not None else \
            ShuffledBatchSelector(min(DEFAULT_BATCH_SIZE, n))
        return selector.for_fit(FitSettings(self.batch_size, seed + 1, self.selection_pass,
                                            rows, n_rows))

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
        memory_before = None if state is None else (
            type(net.criterion__memory).__name__, getattr(state, "size", None))
        if memory_before != memory_now:
            changed.append(f"memory ({memory_before} -> {memory_now})")
        elif state is not None and state.loss_name != loss.name:
            changed.append(f"loss, whose memory state was built for {state.loss_name!r} "
                           f"({state.loss_name!r} -> {loss.name!r})")
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
        hidden = self.hidden_layer_sizes
        return EncoderFactory(self.module, spec.views,
                              hidden if hidden == "auto" else tuple(hidden),
                              embedding_width(self.n_components, spec.views), shared,
                              self._nested("module__"),
                              self.projection_head, self.freeze)

    def _build_net(self, plan: FitPlan, spec: InputSpec, n_samples: int, shared: bool,
                  device: str = "cpu") -> SelectorNet:
        """An initialised, untrained net of ``plan`` for input ``spec`` (what
        :func:`skcontrast.load` fills with saved weights)."""
        net = self._make_net(plan, self._factory(spec, shared), self._loss(), n_samples,
                             resolve_device(device), trains=False)
        return net.initialize()

    def _check_saved_shapes(self, plan: FitPlan, spec: InputSpec, n_samples: int,
                           shared: bool, state: dict) -> None:
        """Compare the sizes a saved model's parameters declare with its stored tensors
        before anything is built: the memory's sample count with the one the file says
        it remembers, and every tensor's shape with the one the parameters give it,
        each part (the loss module with its memory, the network) built on torch's
        ``meta`` device (nothing allocated), so that a configuration declaring other
        layer or memory sizes, or state the file does not hold (a memory added to a model
        saved without one), is refused. The loss module is always compared; a network
        that cannot be built there (code of your own that reads its tensors' values) is
        compared when it is built for real, after the loss module has passed."""

        def criterion() -> torch.nn.Module:
            return ContrastiveCriterion(self._loss(), structure=plan.structure,
                                        memory=self.memory, n_samples=n_samples)

        learned = tuple(ContrastiveCriterion.PARAMETERS.values())  # a net's own start
        for part, make, required, optional in (
                ("criterion", criterion, True, learned),
                ("module", self._factory(spec, shared), False, ())):
            try:
                with torch.device("meta"), warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # the fit said them already
                    module = make()
            except Exception:
                if required:
                    raise
                continue
            _compare_saved(part, module.state_dict(), state[part], optional)
        counters = state["criterion"].get(ContrastiveCriterion.MEMORY_COUNTERS)
        if isinstance(counters, dict) and counters.get("n_samples") != n_samples:
            raise ValueError(f"the saved memory remembers {counters.get('n_samples')!r} "
                             f"samples, but the configuration declares n_samples="
                             f"{n_samples}: the configuration does not describe the saved "
                             "state (edited or damaged); nothing was built")

    def _place(self, data: ViewData, device: str) -> ViewData:
        """Where the training arrays live: on the training device when asked and they fit."""
        choice = self.data_on_device  # one of its options (_parameter_constraints)
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

    def _plan_fit(self, spec: InputSpec, n: int, seed: int, *,
                  kept: np.ndarray | None = None, n_rows: int | None = None,
                  held_out_rows: np.ndarray | None = None) -> FitPlan:
        """What a fit on ``n`` training rows of input ``spec`` works out once, and what
        :func:`skcontrast.load` works out once for a saved model (:class:`~._plan.FitPlan`):
        the selector as the fit uses it (its seed from ``seed``, the rows ``kept`` of
        ``n_rows``), the batch structure, the augmentation, the precision, workers,
        micro-batches, the held-out rows and the processes that train. The net, the loss
        module and the sampler read it; nothing derives it again."""
        augmentation = self._augmentation_for(spec)
        accelerator = self.accelerator
        return FitPlan(
            self._fitting_selector(seed, n, kept, n_rows),
            self._structure(spec.items_paired, augmentation is not None), seed,
            augmentation=None if augmentation is None else Augmentation(augmentation),
            precision=self.precision if accelerator is None else "float32",
            num_workers=int(self.num_workers), micro_batch_size=self.micro_batch_size,
            image_normalization=self.image_normalization, held_out_rows=held_out_rows,
            replicas=Replicas() if accelerator is None else AcceleratedReplicas(accelerator))

    def _make_net(self, plan: FitPlan, factory: EncoderFactory, loss: Loss, n: int,
                  device: str, *, labels: Any = None, valid: ViewData | None = None,
                  extra: list | None = None, trains: bool = True,
                  guard: GuardRows = NO_GUARD_ROWS, rows: str | None = None) -> SelectorNet:
        selector = plan.selector
        # the fit's sampler over its n training rows, sliced over the processes without
        # padding (the step gathers rows of any count); the loss module makes and holds
        # it (with its loss, read live), so its state (a checkpoint's too) carries where
        # the selection stands
        world, rank = plan.replicas.world()
        sampler = functools.partial(SelectorSampler, selector, n, labels=labels,
                                    selection_pass=self.selection_pass,
                                    num_replicas=world, rank=rank, even=False)
        batch = selector.nominal_batch_size(n)
        if plan.micro_batch_size is not None and batch is not None and \
                plan.micro_batch_size > batch:
            raise ValueError(f"micro_batch_size={plan.micro_batch_size} is larger than the "
                             f"batch size {batch}: gradient caching embeds a batch in smaller "
                             "micro-batches; use micro_batch_size <= batch_size (or None)")
        if self.memory is not None and trains:  # (a loaded net trains in a later fit)
            largest = selector.largest_batch_size(n, labels)
            if largest is not None:  # pairs and two crops add two embeddings per item
                self.memory.check_batch_rows(largest * (1 if plan.structure == "single"
                                                        else 2))
        callbacks = self._callbacks(selector, n, labels, extra, trains)
        optimizer_params = {f"optimizer__{k}": v for k, v in
                            {**(self.optimizer_params or {}), **self._nested("optimizer__")
                             }.items()}
        criterion = {f"criterion__{k}": v for k, v in {
            "loss": loss, "structure": plan.structure, "memory": self.memory,
            "n_samples": n, "row_keys": guard.keys, "row_groups": guard.groups,
            "held_out_keys": guard.held_out_keys, "held_out_groups": guard.held_out_groups,
            "sampler": sampler, "rows": rows}.items()}
        placement: dict[str, Any] = {"device": device}
        if self.accelerator is not None:
            # the accelerator's print shows the table on process 0 only, and only verbose
            sink = self.accelerator.print if self.verbose else print
            placement = {"callbacks__print_log__sink": sink,
                         "device": str(self.accelerator.device)}
        return SelectorNet(
            module=factory, criterion=ContrastiveCriterion, optimizer=self._optimizer(),
            lr=self.lr, max_epochs=self.max_epochs,
            # the selector sizes the training batches; held-out and predicted data go in
            # consecutive batches of the training size (-1, as skorch reads it: whole)
            batch_size=-1 if batch is None else batch,
            iterator_train=selected_batches, iterator_valid=consecutive_batches,
            train_split=None if valid is None else predefined_split(valid),
            callbacks=callbacks, warm_start=self.warm_start, verbose=self.verbose,
            plan=plan, **placement, **criterion, **optimizer_params)

    def _structure(self, items_paired: bool, augmented: bool) -> str:
        """How a training batch's rows reach the loss (see ``ContrastiveCriterion``)."""
        if not self._labelled:
            return "pairs"
        return "crops" if items_paired or augmented else "single"

    def _augmentation_for(self, spec: InputSpec) -> Any:
        """The augmentation a fit on input ``spec`` uses: ``augmentation``, or for single
        images given without one, the default for their size and channels
        (:meth:`ImageAugmentation.for_images
        <skcontrast.images.ImageAugmentation.for_images>`)."""
        if self.augmentation is None and spec.views[0].image:
            from ..images import ImageAugmentation

            return ImageAugmentation.for_images(spec.views[0].shape)
        return check_saved(self.augmentation)

    def _callbacks(self, selector: BatchSelector, n: int, labels: Any, extra: list | None,
                   trains: bool = True) -> list:
        """The skorch callbacks of a fit: the loss terms, progress, schedule, then
        ``extra``, the ones that score, the user's among them (``None``: the user's as
        they are). A net that will not train (one :func:`skcontrast.load` fills; a warm
        start builds its own) needs no batch count, which may need the training
        labels."""
        callbacks: list[Any] = [
            ("train_positive", PassthroughScoring(name="train_positive", on_train=True)),
            ("train_entropy", PassthroughScoring(name="train_entropy", on_train=True)),
        ]
        extra = list(self.callbacks or []) if extra is None else extra
        if not trains:
            return callbacks + extra
        # the selector, not skorch's batch_size, knows how many batches an epoch has
        per_epoch = selector.get_n_splits(n, labels)
        if self.verbose:
            callbacks.append(("progress", ProgressBar(batches_per_epoch=per_epoch,
                                                      postfix_keys=["train_loss"])))
        if self.lr_schedule is not None:
            callbacks.append(("lr_schedule", ScheduleCallback(clone(self.lr_schedule),
                                                              per_epoch, self.max_epochs)))
        return callbacks + extra


def _compare_saved(part: str, built: dict, saved: dict, optional: tuple[str, ...]) -> None:
    """Refuse a saved tensor whose shape differs from the one the parameters build, and
    state the parameters build that the file does not hold (but for ``optional`` keys):
    building it would allocate what the configuration declares before ``load`` could
    say it is missing."""
    for key, value in built.items():
        stored = saved.get(key)
        if stored is None and key not in optional:
            shape = f" of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else ""
            raise ValueError(
                f"the saved parameters build '{part}.{key}'{shape}, which the saved model "
                "does not hold: the configuration does not describe these weights (edited "
                "or damaged); nothing was built")
        if not isinstance(stored, torch.Tensor) or value.numel() == 0:
            continue  # empty ones grow
        if tuple(stored.shape) != tuple(value.shape):
            raise ValueError(
                f"the saved tensor '{part}.{key}' has shape {tuple(stored.shape)}, but the "
                f"saved parameters build it with shape {tuple(value.shape)}: the "
                "configuration does not describe these weights (edited or damaged); nothing "
                "was built")
