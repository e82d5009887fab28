"""Data-parallel training on several processes through Hugging Face Accelerate.

The net mixes skorch's ``AccelerateMixin`` (which prepares the module, criterion and
optimizer with the ``accelerate.Accelerator``: DDP underneath, mixed precision, device
placement) into :class:`SelectorNet`, and changes what a step sees so that **the global
batch is the selector's batch**:

- every process draws the same global batches: the embeddings an adaptive selector
  looks at are computed shard by shard (each process embeds ``n / world`` rows) and
  gathered; process 0 selects and broadcasts the batches, the others advance their
  selector's epoch;
- each process trains on its own contiguous slice of every global batch (the
  DataLoader is *not* handed to ``accelerator.prepare``, which would deal whole batches
  out to the processes instead);
- the embeddings of the slices are gathered across processes (``all_gather``, own slice
  kept with its gradient, as open_clip's ``gather_features``), so every process
  computes the contrastive loss of the whole global batch, and the loss is multiplied
  by the number of processes before the backward pass: DDP averages the gradients, and
  the sum of the processes' partial gradients is the gradient of the global batch's
  loss. The update therefore equals the single-process update on that batch.
- a curating selector (:class:`~skcontrast.selectors.CuratingSelector`) is run by
  every process (the same seed draws the same super-batches and the same step-level
  draws); every process loads the whole super-batch, embeds a slice of the rows the
  selection needs, and the slices are gathered, so all choose from the same
  embeddings; process 0's choice is broadcast (the kept rows are the same everywhere
  by construction), and each process trains on its slice of the kept rows.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from skorch.callbacks import Callback
from skorch.hf import AccelerateMixin
from skorch.history import History

from .._validation import check_int
from ._net import SelectorNet, without_row_caches
from ._persist import write_replacing
from ._step import batch_length, take_rows

META = "skcontrast_state.json"
CRITERION = "skcontrast_criterion.pt"
#: the selector's state and the selection embeddings of the training rows (tensors)
SELECTION = "skcontrast_selection.pt"

PRECISION_OF_ACCELERATE = {"no": "float32", "bf16": "bfloat16", "fp16": "float16"}


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def gather_rows(local: torch.Tensor) -> torch.Tensor:
    """Rows of every process's ``local``, concatenated in process order.

    Processes may hold different numbers of rows; the own rows keep their autograd
    history, the others are received without gradient (their process backpropagates
    through them).
    """
    world, rank = _world()
    if world == 1:
        return local
    sizes = torch.tensor([len(local)], device=local.device)
    all_sizes = [torch.zeros_like(sizes) for _ in range(world)]
    dist.all_gather(all_sizes, sizes)
    counts = [int(s) for s in all_sizes]
    padded = local.new_zeros((max(counts), *local.shape[1:]))
    padded[:len(local)] = local.detach()
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    parts = [part[:count] for part, count in zip(parts, counts, strict=True)]
    parts[rank] = local
    return torch.cat(parts)


class DistributedSelectorNet(AccelerateMixin, SelectorNet):
    """:class:`SelectorNet` trained data-parallel by an ``accelerate.Accelerator``."""

    _criteria: list

    @property
    def compute_device(self) -> torch.device:
        if self.accelerator is None:  # unpickled: the net is a plain, trained one
            return torch.device(self.device)
        return torch.device(self.accelerator.device)

    def _initialize_accelerator(self) -> DistributedSelectorNet:
        # Every process computes the criterion on the whole gathered batch, so it is not
        # wrapped in DDP (which also refuses modules without trainable parameters); the
        # gradient of a learned temperature is corrected in backward.
        criteria, self._criteria = self._criteria, []
        try:
            super()._initialize_accelerator()
        finally:
            self._criteria = criteria
        self.criterion_.to(self.accelerator.device)  # its temperature and memory state
        return self

    def replicas(self) -> tuple[int, int]:
        return _world()

    def embed_for_selection(self, embed: Any, part: Any) -> torch.Tensor | None:
        """Each process embeds a slice of ``part``; the slices are gathered."""
        world, rank = _world()
        n = batch_length(part)
        if world == 1 or n < world:
            return super().embed_for_selection(embed, part)
        own = torch.as_tensor(np.array_split(np.arange(n), world)[rank])
        return gather_rows(embed(take_rows(part, own)).float())

    def own_positions(self, positions: torch.Tensor) -> torch.Tensor:
        """Process 0's kept positions (the same everywhere), this process's slice."""
        if _world()[0] == 1:
            return positions
        chosen = positions.to(self.compute_device).clone()
        dist.broadcast(chosen, src=0)
        positions.copy_(chosen.to(positions.device))
        return positions[torch.as_tensor(self.sampler_.rank_slice(np.arange(len(positions))))]

    def gathered(self, rows: torch.Tensor) -> torch.Tensor:
        return gather_rows(rows)

    def get_iterator(self, dataset: Any, training: bool = False) -> Any:
        # SelectorNet's iterator, not the mixin's: accelerate would shard the batch list
        return SelectorNet.get_iterator(self, dataset, training=training)

    def inference_module(self) -> torch.nn.Module:
        if self.accelerator is None:
            return self.module_
        return self.accelerator.unwrap_model(self.module_)

    def selection_embeddings(self, indices: np.ndarray | None = None) -> np.ndarray:
        """Each process embeds its shard of the rows and the shards are gathered: every
        process selects on the same embeddings (so the sampler draws the same batches)."""
        world, rank = _world()
        rows = np.arange(len(self.training_data)) if indices is None else np.asarray(indices)
        if world == 1 or len(rows) < world:
            return super().selection_embeddings(indices)
        shard = np.array_split(rows, world)[rank]
        local = torch.from_numpy(super().selection_embeddings(shard))
        return gather_rows(local.to(self.compute_device)).cpu().numpy()

    def on_train_begin(self, net: Any, X: Any = None, y: Any = None, **kwargs: Any) -> None:
        self._initialize_accelerator()  # a warm start after unwrapping prepares again
        super().on_train_begin(net, X=X, y=y, **kwargs)

    def on_train_end(self, net: Any, X: Any = None, y: Any = None, **kwargs: Any) -> None:
        """Unwrap (the mixin unwraps the module) and hand the accelerator back clean.

        The optimizer is unwrapped too, so that the fitted estimator pickles, and
        ``accelerator.free_memory()`` drops the accelerator's references to what this
        fit prepared, as Accelerate asks between two trainings: the next fit (another
        estimator, or a warm start) then saves and loads checkpoints of its own objects
        only.
        """
        super().on_train_end(net, X=X, y=y, **kwargs)
        self.release_accelerator()

    def release_accelerator(self) -> None:
        """Unwrap the optimizer and let the accelerator drop what this fit prepared."""
        with self._current_init_context("optimizer"):
            for name in self._optimizers:
                optimizer = getattr(self, name + "_", None)
                if optimizer is not None:
                    setattr(self, name + "_", getattr(optimizer, "optimizer", optimizer))
        self.accelerator.free_memory()

    def partial_fit(self, X: Any, y: Any = None, classes: Any = None,
                    **fit_params: Any) -> DistributedSelectorNet:
        """As :class:`SelectorNet`'s; a fit that fails (skorch then skips
        ``on_train_end``) still hands the user's accelerator back clean, so that a later
        fit or checkpoint never sees this one's model."""
        try:
            return super().partial_fit(X, y, classes, **fit_params)
        except BaseException:
            if self.accelerator is not None:
                self._unwrap_accelerator()
                self.release_accelerator()
            raise

    # SelectorNet's step (augmentation, terms for the history) over AccelerateMixin's,
    # with the accelerator's autocast and backward through the hooks below
    train_step_single = SelectorNet.train_step_single

    def training_autocast(self) -> Any:
        return self.accelerator.autocast()

    def backward_embeddings(self, embeddings: torch.Tensor, grad: torch.Tensor,
                            last: bool) -> None:
        # the cached gradients already carry the factor `world` (see backward); DDP
        # averages once, when the last micro-batch is back-propagated
        context = contextlib.nullcontext() if last else self.accelerator.no_sync(self.module_)
        with context:
            embeddings.backward(grad)

    def backward(self, loss: torch.Tensor) -> None:
        world, _ = _world()
        self.accelerator.backward(loss * world)
        for parameter in self.criterion_.parameters():  # not averaged by DDP: undo the scale
            if parameter.grad is not None:
                parameter.grad.div_(world)

    def get_loss(self, y_pred: torch.Tensor, y_true: Any, X: Any = None,
                 training: bool = False, index: torch.Tensor | None = None) -> torch.Tensor:
        # ``index`` already describes the gathered global batch (see ._data.Batch); every
        # process computes the held-out batches whole, so they are not gathered
        if not training:
            return super().get_loss(y_pred, y_true, X=X, training=training, index=index)
        if y_true is not None:
            y_true = gather_rows(y_true.to(y_pred.device))
        return super().get_loss(gather_rows(y_pred.float()), y_true, X=X, training=training,
                                index=index)

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["accelerator"] = None  # a process-local handle
        state["device"] = str(self.compute_device)  # where the weights are
        return state


class AcceleratorCheckpoint(Callback):
    """Save the training state with Accelerate after every epoch, and resume from it.

    ``accelerator.save_state`` stores what the accelerator prepared (the module and the
    optimizer, and the random number generators of every process); this callback adds
    the selector's epoch counter and the history, so that a resumed fit draws the very
    batches the interrupted one would have drawn next
    (:meth:`~skcontrast.selectors.BatchSelector.set_epoch`),
    and the loss module's state: a learned temperature and the memory
    (:mod:`skcontrast.memory`), identical on every process.

    Parameters
    ----------
    dirname : str or path
        Where the state is written (overwritten every ``every`` epochs).
    every : int, default=1
    resume : bool, default=False
        Load the state from ``dirname`` when training starts; a missing or malformed
        state is an error naming the file. Give the resumed estimator ``max_epochs`` =
        the epochs still to train.

    The state files are written beside their final name and renamed over it, so a
    symbolic link there is replaced, not followed, and a crash never leaves a
    half-written state. Checkpoints are pickles underneath (``torch.load``,
    ``accelerate``): load only those from a source you trust.

    Examples
    --------
    >>> from skcontrast import AcceleratorCheckpoint, ContrastiveEmbedder
    >>> est = ContrastiveEmbedder(callbacks=[AcceleratorCheckpoint("ckpt")])  # doctest: +SKIP
    """

    def __init__(self, dirname: Any = "skcontrast-checkpoint", every: int = 1,
                 resume: bool = False) -> None:
        self.dirname = dirname
        self.every = every
        self.resume = resume

    def _require_accelerator(self, net: Any) -> Any:
        accelerator = getattr(net, "accelerator", None)
        if accelerator is None:
            raise ValueError("AcceleratorCheckpoint needs an estimator with accelerator="
                             "accelerate.Accelerator(...); without one, use warm_start=True "
                             "or skorch's Checkpoint")
        return accelerator

    def on_train_begin(self, net: Any, X: Any = None, y: Any = None, **kwargs: Any) -> None:
        accelerator = self._require_accelerator(net)
        check_int(self.every, "every", minimum=1)
        if not self.resume:
            return
        folder = Path(self.dirname)
        state = read_state(folder)
        criterion = torch.load(folder / CRITERION, map_location="cpu", weights_only=True)
        memory = net.criterion_.memory_state
        saved = criterion.get("memory_state._extra_state", {}).get("n_samples")
        if (memory is None) != (saved is None) or (memory is not None and
                                                   saved != memory.n_samples):
            have = "no memory" if saved is None else f"a memory of {saved} samples"
            want = "no memory" if memory is None else f"a memory of {memory.n_samples} samples"
            raise ValueError(f"AcceleratorCheckpoint(resume=True): {folder / CRITERION} holds "
                             f"{have}, but this fit has {want}; a memory remembers samples by "
                             "their index, so resume on the same training set and memory, "
                             "or start afresh without resume=True")
        accelerator.load_state(str(folder))
        selection = {"selector_state": state.get("selector_state", {}), "selection": None}
        if (folder / SELECTION).is_file():
            selection.update(torch.load(folder / SELECTION, map_location="cpu",
                                        weights_only=True))
        rows = getattr(X, "fingerprint", lambda: None)()
        if rows is None or (selection["selection"] or {}).get("rows") != rows:
            selection = without_row_caches(selection)  # other training rows
        net.selector.set_epoch(state["selector_epoch"])
        net.selector.load_state_dict(selection["selector_state"])
        net.load_selection_state(selection["selection"])
        net.data_fingerprint = rows
        net.history = History(state["history"])
        net.criterion_.load_state_dict(criterion)

    def on_epoch_end(self, net: Any, **kwargs: Any) -> None:
        accelerator = self._require_accelerator(net)
        if len(net.history) % self.every:
            return
        folder = Path(self.dirname)
        accelerator.save_state(str(folder))
        if accelerator.is_main_process:
            state = {"selector_epoch": net.selector.current_epoch,
                     "history": net.history.to_list()}
            write_replacing(folder / META, json.dumps(state, default=_plain).encode())
            for name, value in ((CRITERION, net.criterion_.state_dict()),
                               (SELECTION, {"selector_state": net.selector.state_dict(),
                                            "selection": net.selection_state()})):
                buffer = io.BytesIO()
                torch.save(value, buffer)
                write_replacing(folder / name, buffer.getvalue())
        accelerator.wait_for_everyone()


def read_state(folder: Path) -> dict:
    """The checked state of a checkpoint folder, or a clear error naming the file."""
    meta = folder / META
    if not meta.is_file():
        raise FileNotFoundError(f"AcceleratorCheckpoint(resume=True): {meta} does not exist, "
                                "so there is nothing to resume; train without resume=True to "
                                "start afresh (or point dirname at a checkpoint)")
    if not (folder / CRITERION).is_file():
        raise FileNotFoundError(f"AcceleratorCheckpoint(resume=True): {folder / CRITERION} is "
                                "missing; the checkpoint is incomplete")
    try:
        state = json.loads(meta.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{meta} is not a valid checkpoint state (JSON): {exc}") from exc
    valid = isinstance(state, dict) and isinstance(state.get("selector_epoch"), int) and \
        state["selector_epoch"] >= 0 and isinstance(state.get("history"), list) and \
        all(isinstance(row, dict) and isinstance(row.get("batches", []), list)
            for row in state["history"])
    if not valid:
        raise ValueError(f"{meta} is not a valid checkpoint state: expected an object with "
                         "'selector_epoch' (a non-negative int) and 'history' (a list of "
                         "epoch records)")
    return state


def _plain(value: Any) -> Any:
    """NumPy scalars in the history as Python numbers, for JSON."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"cannot store {type(value).__name__} in a checkpoint")
