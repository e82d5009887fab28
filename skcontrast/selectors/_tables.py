"""The tables of per-sample embeddings a :class:`~._sampler.SelectorSampler` keeps (a
mixin of it, in a module of its own): the learner's, which an adaptive selector selects
on between selection passes, and a curating selector's reference model's; which rows
are known, pushed by a training step or due for a pass, and their saved state."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch

from .._validation import as_numpy, check_choice, describe


def _reads_at_once(device: torch.device) -> bool:
    """Whether a tensor on ``device`` is read on the host without waiting for a device."""
    return device.type == "cpu"


#: The tables of per-sample embeddings a sampler holds: the learner's (what an adaptive
#: selector selects on, or a curating selector scores with) and a curating selector's
#: reference model's.
TABLES = ("learner", "reference")


class Table(NamedTuple):
    """One embedding per sample, on the device of the embeddings it was given, with
    which samples have one (``known``) and which a training step gave (``pushed``)."""

    values: torch.Tensor
    known: torch.Tensor
    pushed: torch.Tensor

    def to(self, device: torch.device) -> Table:
        return Table(*(t.to(device) for t in self))


class EmbeddingTables:
    """The embedding tables of :class:`~._sampler.SelectorSampler` (which they are a
    part of: they read its selector, its sample count and its selection pass)."""

    # what they read of the sampler
    selector: Any
    n_samples: int
    embed: Callable[[np.ndarray], Any] | None
    selection_pass: Any
    pass_every: int | None
    refreshes: Any
    _tables: dict
    _bad_update: torch.Tensor | None
    _refreshed_at: Any
    if TYPE_CHECKING:  # the sampler's property
        @property
        def epoch(self) -> int: ...

    @property
    def embeddings(self) -> np.ndarray | None:
        """One embedding per sample (zeros where none is known yet) of the learner's
        table, or ``None``."""
        self._check_updates()
        table = self._tables.get("learner")
        return None if table is None else table.values.cpu().numpy()

    def update(self, indices: Any, embeddings: Any, *, pushed: bool = True,
               table: str = "learner") -> None:
        """Record the embeddings of the samples ``indices`` (e.g. those a training step
        computed), for the next epoch's selection or the next steps of a curating
        selector that meet them. A tensor stays on its device (no copy to the host, no
        wait on a GPU). ``pushed=False``: embeddings of a pass of the network
        (:meth:`due`); a pass over every sample is the pass ``selection_pass`` asks for.
        ``table``: ``'learner'``, or ``'reference'`` for a curating selector's reference
        model.

        ``indices`` must be integers in ``[0, n_samples)`` (a negative index does not
        count from the end). Indices on the host are checked here; an index tensor on a
        GPU is checked on the GPU, and the result read where the sampler next reads its
        embeddings back (the next epoch's selection, :attr:`embeddings`,
        :meth:`embedding_state`), which then refuse them: reading it here would make every
        training step wait for the GPU."""
        check_choice(table, "table", TABLES)
        index = self._index(indices)
        self._write(table, index, embeddings, pushed)
        if not pushed and table == "learner" and len(index) == self.n_samples:
            self._refreshed_at = self.epoch  # a pass over every sample
            self.refreshes += 1

    def _write(self, name: str, index: torch.Tensor, embeddings: Any, pushed: bool) -> None:
        """Write checked indices' embeddings into table ``name``, made (or moved) on the
        embeddings' device."""
        values = embeddings.detach().float() if isinstance(embeddings, torch.Tensor) else \
            torch.from_numpy(as_numpy(embeddings, "embeddings").astype(np.float32))
        if len(values) != len(index):
            raise ValueError(f"update got {len(index)} indices but {len(values)} embeddings")
        table = self._tables.get(name)
        if table is None or table.values.shape[1:] != values.shape[1:]:
            n, device = self.n_samples, values.device
            table = Table(values.new_zeros((n, *values.shape[1:])),
                           torch.zeros(n, dtype=torch.bool, device=device),
                           torch.zeros(n, dtype=torch.bool, device=device))
        elif table.values.device != values.device:  # e.g. a loaded state
            table = table.to(values.device)
        self._tables[name] = table
        index = index.to(values.device)
        table.values[index] = values
        table.known[index] = True
        if pushed:
            table.pushed[index] = True

    def _index(self, indices: Any) -> torch.Tensor:
        """``indices`` as a flat ``int64`` tensor on its device, refused unless they are
        integers in ``[0, n_samples)``: at once on the host, through
        :meth:`_check_updates` on an accelerator (an index outside is clamped meanwhile,
        so that the write stays inside the table, which is then refused)."""
        if isinstance(indices, torch.Tensor):
            index = indices.detach().reshape(-1)
            integral = not (index.is_floating_point() or index.is_complex()
                            or index.dtype == torch.bool)
        else:
            array = as_numpy(indices, "indices").reshape(-1)
            integral = array.dtype.kind in "iu"
            index = torch.as_tensor(array if integral else np.zeros(len(array)))
        if len(index) and not integral:
            raise ValueError(f"indices must be integer sample indices; got "
                             f"{describe(indices)} (floats are not truncated silently)")
        index, n = index.long(), self.n_samples
        if not len(index):
            return index
        if _reads_at_once(index.device):
            low, high = int(index.min()), int(index.max())
            if low < 0 or high >= n:
                raise ValueError(f"indices must lie in [0, {n}); got {low}..{high} (a "
                                 "negative index does not count from the end)")
            return index
        clamped = index.clamp(0, n - 1)
        outside = (clamped != index).any()
        self._bad_update = outside if self._bad_update is None else self._bad_update | outside
        return clamped

    def _check_updates(self) -> None:
        """Refuse the embeddings once an update on an accelerator held an index outside
        ``[0, n_samples)`` (see :meth:`update`)."""
        if self._bad_update is not None and bool(self._bad_update):
            raise ValueError(
                f"sampler.update was given indices outside [0, {self.n_samples}) on "
                f"{self._bad_update.device} (a negative index does not count from the "
                "end), so the embeddings it holds are not those of their samples. Indices "
                "on a GPU are checked when the sampler next reads its embeddings, not at "
                "every step; pass the dataset indices of each batch")

    def _mask(self, name: str, which: str) -> torch.Tensor:
        """Table ``name``'s ``'known'`` or ``'pushed'`` mask (none yet: no sample)."""
        table = self._tables.get(name)
        if table is None:
            return torch.zeros(self.n_samples, dtype=torch.bool)
        return getattr(table, which)

    def refresh(self) -> None:
        """Embed every sample now with ``embed``."""
        if self.embed is None:
            raise ValueError("refresh needs embed=, a callable embed(indices) -> array")
        self.update(np.arange(self.n_samples), self.embed(np.arange(self.n_samples)),
                    pushed=False)

    def due(self) -> np.ndarray:
        """The samples whose embeddings the next epoch's selection needs anew (give them
        with ``update(indices, embeddings, pushed=False)``): every sample when a pass is
        due by ``selection_pass``, else those no step pushed (``'cached'``: every
        embedding is at most an epoch old) or, between the passes of ``k``, never
        embedded; none for a selector that looks at no embedding."""
        if not self.selector.needs_embeddings:
            return np.zeros(0, dtype=np.int64)
        last, every = self._refreshed_at, self.pass_every
        if last is None or (every is not None and self.epoch - last >= every):
            return np.arange(self.n_samples)
        stale = ~self._mask("learner", "pushed" if every is None else "known")
        return np.flatnonzero(stale.cpu().numpy())

    # -- a curating selector's step -----------------------------------------------------

    @property
    def caches_rows(self) -> bool:
        """Whether a curating selector's steps read the embeddings of rows met before from
        the tables (``selection_pass='cached'``: the selector's own, else this
        sampler's), instead of embedding every row of each super-batch."""
        own = getattr(self.selector, "selection_pass", None)
        return (self.selection_pass if own is None else own) == "cached"

    def stale_rows(self, index: torch.Tensor, table: str = "learner") -> torch.Tensor:
        """Positions (int64, on the CPU) of the rows ``index`` of a super-batch whose
        embeddings by ``table``'s model this step must compute: all of them, or with
        :attr:`caches_rows` those never embedded."""
        check_choice(table, "table", TABLES)
        everyone = torch.arange(len(index))
        entry = self._tables.get(table)
        if not self.caches_rows or entry is None:
            return everyone
        return everyone[~entry.known[index.to(entry.known.device, torch.long)].cpu()]

    def complete(self, index: torch.Tensor, positions: torch.Tensor,
                 embeddings: torch.Tensor | None, table: str = "learner") -> torch.Tensor:
        """The embeddings by ``table``'s model of the super-batch's rows ``index``:
        ``embeddings`` of the rows at ``positions`` (:meth:`stale_rows`), just computed,
        and, with :attr:`caches_rows`, the others from the table (which keeps the new
        ones)."""
        check_choice(table, "table", TABLES)
        if not self.caches_rows:
            if embeddings is None or len(embeddings) != len(index):
                raise ValueError("selection_pass='fresh' embeds the whole super-batch: "
                                 f"expected {len(index)} embeddings, got "
                                 f"{0 if embeddings is None else len(embeddings)}")
            return embeddings
        rows = index.to("cpu", torch.long)
        if embeddings is not None and len(positions):
            self._write(table, rows[positions.cpu()], embeddings, pushed=False)
        entry = self._tables.get(table)
        if entry is None or not bool(entry.known[rows.to(entry.known.device)].all()):
            raise ValueError(f"the {table}'s embeddings of some rows of this super-batch were "
                             "never computed: embed the rows stale_rows names")
        return entry.values[rows.to(entry.values.device)].clone()

    # -- state ----------------------------------------------------------------------------

    def embedding_state(self) -> dict:
        """The tables of embeddings the sampler holds (a copy, tensors on the CPU) and
        whether the first refresh was made: what a checkpoint keeps so that a resumed run
        selects (and curates) on the same numbers (see :meth:`load_embedding_state`). The
        learner's table is at the top (``'embeddings'``, ``'known'``, ``'pushed'``), any
        other under its name."""
        self._check_updates()
        state = {**self._table_state("learner"), "refreshed": self._refreshed_at}
        for name in TABLES[1:]:
            if name in self._tables:
                state[name] = self._table_state(name)
        return state

    def _table_state(self, name: str) -> dict:
        table = self._tables.get(name)
        return {"embeddings": None if table is None else table.values.cpu().clone(),
                "known": self._mask(name, "known").cpu().clone(),
                "pushed": self._mask(name, "pushed").cpu().clone()}

    def load_embedding_state(self, state: dict) -> None:
        """Continue from :meth:`embedding_state`."""
        for name in TABLES:
            saved = state if name == "learner" else state.get(name)
            if saved is not None:
                self._load_table(name, saved)
        refreshed = state.get("refreshed")
        self._refreshed_at = None if refreshed is None else int(refreshed)

    def _load_table(self, name: str, saved: dict) -> None:
        table, known, pushed = (saved.get(k) for k in ("embeddings", "known", "pushed"))
        if table is None:
            return
        if not all(isinstance(m, torch.Tensor) and m.dtype == torch.bool and
                   m.shape == (self.n_samples,) for m in (known, pushed)) or \
                len(table) != self.n_samples:
            raise ValueError(f"the saved {name} embeddings ({describe(table)}) and their "
                             f"masks ({describe(known)}, {describe(pushed)}) do not hold one "
                             f"row per sample (n_samples={self.n_samples}): the saved state "
                             "is damaged")
        assert isinstance(known, torch.Tensor) and isinstance(pushed, torch.Tensor)
        self._tables[name] = Table(table.float(), known, pushed)

    def _current_embeddings(self) -> np.ndarray:
        """One embedding per sample for the next epoch's selection: those :meth:`due`
        names asked of ``embed`` (if given), the others as pushed."""
        if self.embed is not None:
            missing = self.due()
            if len(missing):
                self.update(missing, self.embed(missing), pushed=False)
        missing = np.flatnonzero(~self._mask("learner", "known").cpu().numpy())
        if len(missing):
            raise ValueError(
                f"{type(self.selector).__name__} selects by embeddings, and "
                f"{len(missing)} of the {self.n_samples} samples have none: give "
                "SelectorSampler an embed(indices) callback, or push embeddings with "
                "sampler.update(indices, embeddings) before the epoch starts")
        embeddings = self.embeddings
        assert embeddings is not None  # every sample has one now
        return embeddings
