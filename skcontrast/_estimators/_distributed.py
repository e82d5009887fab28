"""Checkpoints of data-parallel training through Hugging Face Accelerate
(:class:`AcceleratorCheckpoint`); the training itself is :mod:`._replicas`."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import torch
from skorch.callbacks import Callback

from .._validation import check_int
from ._modules import ContrastiveCriterion
from ._persist import write_replacing
from ._state import restore

META = "skcontrast_state.json"
CRITERION = "skcontrast_criterion.pt"
#: the selector's state and the selection embeddings of the training rows (tensors)
SELECTION = "skcontrast_selection.pt"

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
        accelerator = net.plan.replicas.accelerator
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
            state = {"selector_epoch": net.plan.selector.current_epoch,
                     "history": net.history.to_list()}
            write_replacing(folder / META, json.dumps(state, default=_plain).encode())
            for name, value in ((CRITERION, net.loss_module().state_dict()),
                               (SELECTION, {"selector_state": net.plan.selector.state_dict(),
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
