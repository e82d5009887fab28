"""Checkpoints of data-parallel training through Hugging Face Accelerate
(:class:`AcceleratorCheckpoint`); the training itself is :mod:`._replicas`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from skorch.callbacks import Callback

from .._validation import check_int
from ._modules import ContrastiveCriterion
from ._persist import write_replacing
from ._state import files_training_state, training_state_files

META = "skcontrast_state.json"
TENSORS = "skcontrast_state.safetensors"


class AcceleratorCheckpoint(Callback):
    """Save the training state after every epoch of data-parallel training, and resume
    from it.

    The state is the one every other way of continuing a fit carries (a warm start, a
    saved model, a pickle): the weights, the loss
    module's state (a learned temperature, a memory, :mod:`skcontrast.memory`), the
    optimizer's moments, the history, the selector's epoch and state (so that a resumed
    fit draws the very batches the interrupted one would have drawn next), the
    selection embeddings a cached selection pass keeps, and the float16 scaler. It is
    written as :meth:`~skcontrast.ContrastiveEmbedder.save` writes it: tensors in
    safetensors, the rest in JSON; nothing is pickled. Process 0 writes, every process
    reads; each epoch's random streams come from ``(seed, epoch)``, so none is saved.

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
    half-written state.

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
        accelerator = net.plan.replicas.accelerator
        if accelerator is None:
            raise ValueError("AcceleratorCheckpoint needs an estimator with accelerator="
                             "accelerate.Accelerator(...); without one, use warm_start=True "
                             "or skorch's Checkpoint")
        return accelerator

    def on_train_begin(self, net: Any, X: Any = None, y: Any = None, **kwargs: Any) -> None:
        self._require_accelerator(net)
        check_int(self.every, "every", minimum=1)
        if not self.resume:
            return
        folder = Path(self.dirname)
        state = read_state(folder)
        memory = net.memory_state
        counters = state["criterion"].get(ContrastiveCriterion.MEMORY_COUNTERS)
        saved = counters.get("n_samples") if isinstance(counters, dict) else None
        if (memory is None) != (saved is None) or (memory is not None and
                                                   saved != memory.n_samples):
            have = "no memory" if saved is None else f"a memory of {saved} samples"
            want = "no memory" if memory is None else f"a memory of {memory.n_samples} samples"
            raise ValueError(f"AcceleratorCheckpoint(resume=True): {folder / TENSORS} holds "
                             f"{have}, but this fit has {want}; a memory remembers samples by "
                             "their index, so resume on the same training set and memory, "
                             "or start afresh without resume=True")
        net.restore(state, rows=getattr(X, "fingerprint", lambda: None)())

    def on_epoch_end(self, net: Any, **kwargs: Any) -> None:
        from safetensors.torch import save as to_bytes

        accelerator = self._require_accelerator(net)
        if len(net.history) % self.every:
            return
        folder = Path(self.dirname)
        if accelerator.is_main_process:
            folder.mkdir(parents=True, exist_ok=True)
            tensors, fitted = training_state_files(net.training_state())
            write_replacing(folder / TENSORS, to_bytes(tensors))
            write_replacing(folder / META, json.dumps(fitted).encode())
        accelerator.wait_for_everyone()


def read_state(folder: Path) -> dict:
    """The checked training state of a checkpoint folder, or a clear error naming the
    file."""
    from safetensors.torch import load as from_bytes

    meta, weights = folder / META, folder / TENSORS
    if not meta.is_file():
        raise FileNotFoundError(f"AcceleratorCheckpoint(resume=True): {meta} does not exist, "
                                "so there is nothing to resume; train without resume=True to "
                                "start afresh (or point dirname at a checkpoint)")
    if not weights.is_file():
        raise FileNotFoundError(f"AcceleratorCheckpoint(resume=True): {weights} is missing; "
                                "the checkpoint is incomplete")
    try:
        fitted = json.loads(meta.read_text())
        if not isinstance(fitted, dict):
            raise ValueError("expected an object")
        return files_training_state(from_bytes(weights.read_bytes()), fitted)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{meta} is not a valid checkpoint state: {exc}") from None
