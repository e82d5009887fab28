"""Where a fit's processes are: one (:class:`Replicas`) or several under Hugging Face
Accelerate (:class:`AcceleratedReplicas`). The fit's plan (:class:`~._plan.FitPlan`)
holds one of them and the net asks it at each point where data-parallel training
differs from a single process; the net has no subclass for it.

With several processes **the global batch is the selector's batch**:

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
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from .._batch import take_rows, world_size
from ._data import batch_length

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


class Replicas:
    """One process: every answer is the plain one (the rows as they are, the module as
    it is, torch's backward)."""

    accelerator: Any = None

    def world(self) -> tuple[int, int]:
        """The number of processes and this one's rank."""
        return 1, 0

    def device(self, default: str) -> torch.device:
        """Where the module computes."""
        return torch.device(default)

    def prepare(self, module: Any, optimizer: Any) -> tuple[Any, Any]:
        """The module and the optimizer as training steps them."""
        return module, optimizer

    def release(self, module: Any, optimizer: Any) -> tuple[Any, Any]:
        """The module and the optimizer after training, as a plain net holds them."""
        return module, optimizer

    def unwrap(self, module: Any) -> Any:
        """The network as trained, any wrapper taken off."""
        return module

    def step(self, module: Any) -> Any:
        """The context of one optimizer step."""
        return contextlib.nullcontext()

    def autocast(self, default: Any) -> Any:
        """The mixed-precision context of the training forward pass."""
        return default

    def gather(self, rows: torch.Tensor) -> torch.Tensor:
        """Rows of every process, in process order."""
        return rows

    def gather_objects(self, value: Any) -> list:
        """``value`` of every process (any picklable object), in process order."""
        return [value]

    def backward(self, loss: torch.Tensor, scaler: Any, criterion: Any) -> None:
        """Backpropagate a training step's loss (through the float16 ``scaler``)."""
        if scaler is not None:
            scaler.scale(loss).backward()
        else:
            loss.backward()

    def backward_embeddings(self, embeddings: torch.Tensor, grad: torch.Tensor, last: bool,
                            module: Any) -> None:
        """Backpropagate a micro-batch's embeddings with their cached gradient."""
        embeddings.backward(grad)

    def embed_shared(self, embed: Callable[[Any], torch.Tensor], part: Any
                     ) -> torch.Tensor | None:
        """``embed(part)`` as every process needs it, or ``None`` for no rows."""
        return embed(part) if batch_length(part) else None

    def share(self, rows: np.ndarray) -> np.ndarray:
        """The rows of ``rows`` this process embeds for a selection pass."""
        return rows

    def own_positions(self, positions: torch.Tensor, sampler: Any,
                      device: torch.device) -> torch.Tensor:
        """Of the kept positions of a curated super-batch, those this process trains on."""
        return positions


class AcceleratedReplicas(Replicas):
    """The processes of an ``accelerate.Accelerator``: it prepares the module and the
    optimizer (DDP underneath, device placement; the loss module, which every process
    computes on the whole gathered batch, is only moved to the device: DDP refuses a
    module without trainable parameters), steps run under its gradient accumulation,
    and :meth:`release` unwraps them after training. A pickle keeps a single-process
    :class:`Replicas`: the accelerator is a handle of the processes that trained."""

    def __init__(self, accelerator: Any) -> None:
        self.accelerator = accelerator

    def __reduce__(self) -> Any:
        return Replicas, ()

    def world(self) -> tuple[int, int]:
        return world_size()

    def device(self, default: str) -> torch.device:
        return torch.device(self.accelerator.device)

    def prepare(self, module: Any, optimizer: Any) -> tuple[Any, Any]:
        prepared = self.accelerator.prepare(module, optimizer)
        return prepared[0], prepared[1]

    def release(self, module: Any, optimizer: Any) -> tuple[Any, Any]:
        """Unwrap what the accelerator prepared (the optimizer too, so that the fitted
        estimator pickles) and let it drop its references to them
        (``accelerator.free_memory()``, as Accelerate asks between two trainings): the
        next fit (another estimator, or a warm start) then saves and loads checkpoints
        of its own objects only. Also after a fit that failed, whose ``on_train_end``
        skorch skips."""
        accelerator = self.accelerator
        accelerator.wait_for_everyone()
        module = accelerator.unwrap_model(module)
        optimizer = getattr(optimizer, "optimizer", optimizer)
        accelerator.free_memory()
        return module, optimizer

    def unwrap(self, module: Any) -> Any:
        return self.accelerator.unwrap_model(module)

    def step(self, module: Any) -> Any:
        return self.accelerator.accumulate(module)

    def autocast(self, default: Any) -> Any:
        return self.accelerator.autocast()

    def gather(self, rows: torch.Tensor) -> torch.Tensor:
        return gather_rows(rows)

    def gather_objects(self, value: Any) -> list:
        world, _ = world_size()
        if world == 1:
            return [value]
        out: list = [None] * world
        dist.all_gather_object(out, value)
        return out

    def backward(self, loss: torch.Tensor, scaler: Any, criterion: Any) -> None:
        """The accelerator's backward of the loss times the number of processes: DDP
        averages the module's gradients, and the sum of the processes' partial gradients
        is the gradient of the global batch's loss. The loss module's parameters (a
        learned temperature) see the whole batch on every process already: their
        gradient is divided back."""
        world, _ = world_size()
        self.accelerator.backward(loss * world)
        for parameter in criterion.parameters():
            if parameter.grad is not None:
                parameter.grad.div_(world)

    def backward_embeddings(self, embeddings: torch.Tensor, grad: torch.Tensor, last: bool,
                            module: Any) -> None:
        # the cached gradients already carry the factor `world` (see backward); DDP
        # averages once, when the last micro-batch is back-propagated
        context = contextlib.nullcontext() if last else self.accelerator.no_sync(module)
        with context:
            embeddings.backward(grad)

    def embed_shared(self, embed: Callable[[Any], torch.Tensor], part: Any
                     ) -> torch.Tensor | None:
        """Each process embeds a slice of ``part``; the slices are gathered."""
        world, rank = world_size()
        n = batch_length(part)
        if world == 1 or n < world:
            return super().embed_shared(embed, part)
        own = torch.as_tensor(np.array_split(np.arange(n), world)[rank])
        return gather_rows(embed(take_rows(part, own)).float())

    def share(self, rows: np.ndarray) -> np.ndarray:
        world, rank = world_size()
        return rows if world == 1 or len(rows) < world else np.array_split(rows, world)[rank]

    def own_positions(self, positions: torch.Tensor, sampler: Any,
                      device: torch.device) -> torch.Tensor:
        """Process 0's kept positions (the same everywhere), this process's slice."""
        if world_size()[0] == 1:
            return positions
        chosen = positions.to(device).clone()
        dist.broadcast(chosen, src=0)
        positions.copy_(chosen.to(positions.device))
        return positions[torch.as_tensor(sampler.rank_slice(np.arange(len(positions))))]
