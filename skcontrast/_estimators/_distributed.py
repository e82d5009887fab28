"""Data-parallel training on several processes through Hugging Face Accelerate.

The net (:class:`DistributedSelectorNet`) has the ``accelerate.Accelerator`` prepare
the module and the optimizer (DDP underneath, mixed precision, device placement), and
changes what a step sees so that **the global batch is the selector's batch**:

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

from .._batch import take_rows, world_size
from .._validation import check_int
from ..losses import LossTerms
from ._data import batch_length
from ._modules import ContrastiveCriterion
from ._net import SelectorNet
from ._persist import write_replacing
from ._state import restore

META = "skcontrast_state.json"
CRITERION = "skcontrast_criterion.pt"
#: the selector's state and the selection embeddings of the training rows (tensors)
SELECTION = "skcontrast_selection.pt"

PRECISION_OF_ACCELERATE = {"no": "float32", "bf16": "bfloat16", "fp16": "float16"}


def gather_rows(local: torch.Tensor) -> torch.Tensor:
    """Rows of every process's ``local``, concatenated in process order.

    Processes may hold different numbers of rows; the own rows keep their autograd
    history, the others are received without gradient (their process backpropagates
    through them).
    """
    world, rank = world_size()
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


class DistributedSelectorNet(SelectorNet):
    """:class:`SelectorNet` trained data-parallel by an ``accelerate.Accelerator``.

    The accelerator prepares the module and the optimizer when the optimizer is built
    (DDP underneath, device placement; the loss module, which every process computes on
    the whole gathered batch, is only moved to the device: DDP refuses a module without
    trainable parameters), steps run under its gradient accumulation, and
    :meth:`release_accelerator` unwraps them after training. skorch's
    ``AccelerateMixin`` would also prepare the loss module, and keeping it out needs an
    override of the mixin's private method; Accelerate's public API, through the net's
    public hooks, does the same. The net keeps its own iterator (accelerate would deal
    whole batches out to the processes) and changes what the step's hooks do: the
    accelerator's autocast and backward, and the embeddings of the whole global batch
    gathered for the loss.
    """

    def __init__(self, *args: Any, accelerator: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.accelerator = accelerator

    def initialize_optimizer(self, triggered_directly: Any = None) -> DistributedSelectorNet:
        """:class:`SelectorNet`'s optimizer, then the module and the optimizer prepared
        by the accelerator, the loss module (a learned temperature, a memory) moved to
        its device."""
        super().initialize_optimizer()
        accelerator = self.accelerator
        if accelerator is not None:
            self.module_, self.optimizer_ = accelerator.prepare(self.module_, self.optimizer_)
            self.criterion_ = self.criterion_.to(accelerator.device)
        return self

    def train_step(self, batch: Any, **fit_params: Any) -> dict:
        """:class:`SelectorNet`'s step, under the accelerator's gradient accumulation."""
        with self.accelerator.accumulate(self.module_):
            return super().train_step(batch, **fit_params)

    @property
    def compute_device(self) -> torch.device:
        if self.accelerator is None:  # unpickled: the net is a plain, trained one
            return torch.device(self.device)
        return torch.device(self.accelerator.device)

    def inference_module(self) -> torch.nn.Module:
        if self.accelerator is None:
            return self.module_
        return self.accelerator.unwrap_model(self.module_)

    def embed_for_selection(self, embed: Any, part: Any) -> torch.Tensor | None:
        """Each process embeds a slice of ``part``; the slices are gathered."""
        world, rank = world_size()
        n = batch_length(part)
        if world == 1 or n < world:
            return super().embed_for_selection(embed, part)
        own = torch.as_tensor(np.array_split(np.arange(n), world)[rank])
        return gather_rows(embed(take_rows(part, own)).float())

    def own_positions(self, positions: torch.Tensor) -> torch.Tensor:
        """Process 0's kept positions (the same everywhere), this process's slice."""
        if world_size()[0] == 1:
            return positions
        chosen = positions.to(self.compute_device).clone()
        dist.broadcast(chosen, src=0)
        positions.copy_(chosen.to(positions.device))
        assert self.sampler_ is not None
        return positions[torch.as_tensor(self.sampler_.rank_slice(np.arange(len(positions))))]

    def gathered(self, rows: torch.Tensor) -> torch.Tensor:
        return gather_rows(rows)

    def selection_embeddings(self, indices: np.ndarray | None = None) -> np.ndarray:
        """Each process embeds its shard of the rows and the shards are gathered: every
        process selects on the same embeddings (so the sampler draws the same batches)."""
        world, rank = world_size()
        assert self.fit_ is not None
        rows = np.arange(len(self.fit_.data)) if indices is None else np.asarray(indices)
        if world == 1 or len(rows) < world:
            return super().selection_embeddings(indices)
        shard = np.array_split(rows, world)[rank]
        local = torch.from_numpy(super().selection_embeddings(shard))
        return gather_rows(local.to(self.compute_device)).cpu().numpy()

    def release_accelerator(self) -> None:
        """Unwrap what the accelerator prepared (the optimizer too, so that the fitted
        estimator pickles) and let it drop its references to them
        (``accelerator.free_memory()``, as Accelerate asks between two trainings): the
        next fit (another estimator, or a warm start) then saves and loads checkpoints
        of its own objects only. Also after a fit that failed, whose ``on_train_end``
        skorch skips."""
        accelerator = self.accelerator
        if accelerator is None:
            return
        accelerator.wait_for_everyone()
        self.module_ = accelerator.unwrap_model(self.module_)
        self.optimizer_ = getattr(self.optimizer_, "optimizer", self.optimizer_)
        accelerator.free_memory()

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
        """The accelerator's backward of the loss times the number of processes: DDP
        averages the module's gradients, and the sum of the processes' partial gradients
        is the gradient of the global batch's loss. The loss module's parameters (a
        learned temperature) see the whole batch on every process already: their
        gradient is divided back."""
        world, _ = world_size()
        self.accelerator.backward(loss * world)
        for parameter in self.loss_module().parameters():
            if parameter.grad is not None:
                parameter.grad.div_(world)

    def loss_terms(self, y_pred: torch.Tensor, y_true: Any, index: torch.Tensor | None = None,
                   training: bool = False) -> LossTerms:
        """The loss of the whole global batch: the embeddings (and labels) of every
        process gathered; ``index`` already describes the gathered batch (see
        :class:`~._data.Batch`). Held-out batches are computed whole on every process,
        so they are not gathered."""
        if not training:
            return super().loss_terms(y_pred, y_true, index=index, training=training)
        if y_true is not None:
            y_true = gather_rows(y_true.to(y_pred.device))
        return super().loss_terms(gather_rows(y_pred.float()), y_true, index=index,
                                  training=training)

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
        memory = net.memory_state
        saved = (criterion.get(ContrastiveCriterion.MEMORY_COUNTERS) or {}).get("n_samples")
        if (memory is None) != (saved is None) or (memory is not None and
                                                   saved != memory.n_samples):
            have = "no memory" if saved is None else f"a memory of {saved} samples"
            want = "no memory" if memory is None else f"a memory of {memory.n_samples} samples"
            raise ValueError(f"AcceleratorCheckpoint(resume=True): {folder / CRITERION} holds "
                             f"{have}, but this fit has {want}; a memory remembers samples by "
                             "their index, so resume on the same training set and memory, "
                             "or start afresh without resume=True")
        accelerator.load_state(str(folder))  # the module, the optimizer, the streams
        selection = {"selector_state": state.get("selector_state", {}), "selection": None}
        if (folder / SELECTION).is_file():
            selection.update(torch.load(folder / SELECTION, map_location="cpu",
                                        weights_only=True))
        # the rest of the training state, restored as a warm start restores it
        restore(net, {**selection, "criterion": criterion, "history": state["history"],
                      "selector_epoch": state["selector_epoch"]},
                rows=getattr(X, "fingerprint", lambda: None)(),
                parts=("criterion", "history", "selector", "selection"))

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
            for name, value in ((CRITERION, net.loss_module().state_dict()),
                               (SELECTION, {"selector_state": net.selector.state_dict(),
                                            "selection":
                                                net.loss_module().progress.selection()})):
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
