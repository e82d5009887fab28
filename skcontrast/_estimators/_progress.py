"""Where a fit's batch selection stands, as module state (:class:`SelectionProgress`),
which the loss module holds so that a checkpoint of it carries the selection."""

from __future__ import annotations

from typing import Any

from torch import nn


class SelectionProgress(nn.Module):
    """Where a fit's batch selection stands, as module state: the selector's epoch and
    own state, and the sampler's tables of the training rows' embeddings (a cached
    selection pass's, a curating selector's), with ``rows``, the digest of the rows
    they are of (:meth:`~._data.ViewData.fingerprint`).

    It holds the fit's :class:`~skcontrast.selectors.SelectorSampler` (the same object
    the net draws its batches from) and reads it when its ``state_dict`` is taken
    (torch's ``get_extra_state``), so nothing is copied while training runs; loading a
    state (``set_extra_state``) puts the epoch and the selector's state back, and the
    tables when they are of the same rows. So a checkpoint of the loss module resumes
    the uninterrupted fit's batches.
    """

    def __init__(self, sampler: Any, rows: str | None = None) -> None:
        super().__init__()
        self.sampler = sampler
        self.rows = rows

    def get_extra_state(self) -> dict:
        return {**self.sampler.state_dict(), "selection": self.selection()}

    def set_extra_state(self, state: Any) -> None:
        if not isinstance(state, dict):
            raise ValueError(f"the saved selection progress is not a dict; got "
                             f"{type(state).__name__}")
        self.sampler.load_state_dict(state)
        self.take(state.get("selection"), same_rows=False)

    def selection(self) -> dict:
        """The sampler's tables (a copy on the CPU) and the digest of their rows."""
        return {**self.sampler.embedding_state(), "rows": self.rows}

    def take(self, selection: dict | None, same_rows: bool = True) -> None:
        """Continue from :meth:`selection`: its tables go to the sampler when they are of
        this fit's rows (``same_rows``: known to be, as for a loaded model, whose rows
        are then theirs)."""
        if not selection or selection.get("embeddings") is None:
            return
        if same_rows:
            self.rows = selection.get("rows")
        elif self.rows is None or selection.get("rows") != self.rows:
            return
        self.sampler.load_embedding_state(selection)
