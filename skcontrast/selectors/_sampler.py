"""Any selector as a PyTorch batch sampler, for training loops of one's own."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import Sampler

from .._batch import world_size
from .._validation import as_numpy, check_choice, check_int, describe
from ._base import BatchSelector, index_arrays


def _reads_at_once(device: torch.device) -> bool:
    """Whether a tensor on ``device`` is read on the host without waiting for a device."""
    return device.type == "cpu"


#: ``refresh_every`` not given (its deprecated alias of ``selection_pass``)
_UNSET: Any = object()

#: The tables of per-sample embeddings a sampler holds: the learner's (what an adaptive
#: selector selects on, or a curating selector scores with) and a curating selector's
#: reference model's.
TABLES = ("learner", "reference")


class _Table(NamedTuple):
    """One embedding per sample, on the device of the embeddings it was given, with
    which samples have one (``known``) and which a training step gave (``pushed``)."""

    values: torch.Tensor
    known: torch.Tensor
    pushed: torch.Tensor

    def to(self, device: torch.device) -> _Table:
        return _Table(*(t.to(device) for t in self))


class SampledBatch(list):
    """One batch of :class:`SelectorSampler`: the sample indices this process loads (a
    list, as a ``DataLoader`` takes them), ``batch``, the whole selected batch (an
    ``int64`` array; the same indices with one process), and ``epoch``, the selector's
    epoch it was drawn in (what seeds the random numbers of its items, whichever
    DataLoader worker loads them)."""

    __slots__ = ("batch", "epoch")

    def __init__(self, rows: Any, batch: np.ndarray, epoch: int | None = None) -> None:
        super().__init__(rows)
        self.batch = batch
        self.epoch = epoch

    def __reduce__(self) -> tuple:  # a DataLoader worker receives it pickled
        return (SampledBatch, (list(self), self.batch, self.epoch))


class SelectorSampler(Sampler[list[int]]):
    """The batches of a batch selector as a ``torch.utils.data`` batch sampler.

    Give it to a ``DataLoader`` as ``batch_sampler=``: each pass over the loader (one
    ``iter``) is one epoch of the selector's batches, so any training loop, plain
    PyTorch, PyTorch Lightning or Hugging Face ``Trainer``, trains on them.

    An adaptive selector (OSGD, spectral, greedy, ...) chooses by embeddings. The
    sampler holds one embedding per sample and refreshes it either

    - by **callback**: ``embed(indices) -> array`` of the samples' current embeddings
      (``(len(indices), 2, d)`` pairs or ``(len(indices), d)`` single views), called
      when an epoch starts for the samples :meth:`due` names;
    - or by **push**: ``sampler.update(indices, embeddings)`` from the training loop:
      before an epoch, the embeddings of the samples :meth:`due` names (a pass of the
      network over them, ``pushed=False``), and at each step, if you like, the
      embeddings the step computed anyway (what the next epoch then selects on, up to an
      epoch old; a tensor stays on its device, so a step costs no copy to the host).

    ``selection_pass`` says when a pass over every sample is due: ``'fresh'`` before
    every epoch; ``'cached'`` once, before the first, and then only for the samples no
    step pushed (so every embedding is at most an epoch old); an int ``k`` every ``k``
    epochs, with the pushed embeddings (or the last pass's) between. The estimators'
    ``selection_pass`` is this very setting.

    **Epochs** follow the selector: ``set_epoch(e)`` (as ``DistributedSampler``) makes
    the next pass epoch ``e``, so a resumed run draws the batches it would have drawn.
    Without ``set_epoch`` successive passes are successive epochs.

    **Data-parallel training** (``torch.distributed`` initialised, or ``num_replicas``
    and ``rank`` given): every process computes the same global batches (the selector
    must be seeded, ``random_state``, and the embeddings the same on every process) and
    iterates over its own contiguous slice of each, so the global batch is the
    selector's batch (gather the embeddings across processes for a loss over the whole
    batch, as the estimators do). With ``even=True`` (the default) every rank gets a
    non-empty slice of the same size at every step (what a gather of equal shapes
    needs): a global batch whose size is not a multiple of the number of processes
    ``R`` is padded with its own first samples (``drop_last=False``, a warning says how
    many repeat, since a repeated sample is its own negative) or loses its last
    ``len % R`` samples (``drop_last=True``; a batch of fewer than ``R`` samples, which
    would leave a rank nothing, is padded instead, so that every rank takes the same
    number of steps); with ``even=False`` the slices differ by at most one sample and
    none is repeated or dropped (for a gather of rows of any count, as the estimators'
    is). A selector whose batch size is below ``R`` is refused.

    A **curating selector** (:class:`~skcontrast.selectors.JESTSelector`,
    :class:`~skcontrast.selectors.RhoLossSelector`) yields whole super-batches on every
    process: each process embeds the super-batch (or a slice of it, gathered), calls
    ``selector.curate`` (same seed, same embeddings: the same kept rows everywhere) and
    trains on :meth:`rank_slice` of the kept rows.

    **Every table of per-sample embeddings is here**: the learner's (``table='learner'``:
    what an adaptive selector selects on, or a curating selector scores a super-batch
    with) and a curating selector's reference model's (``'reference'``). With
    :attr:`caches_rows` (a curating selector's ``selection_pass='cached'``) a step embeds
    only the rows of its super-batch that :meth:`stale_rows` names, and
    :meth:`complete` reads the others from the table; :meth:`update` keeps what a
    training step computed. :meth:`embedding_state` holds every table.

    **Every epoch's batches are checked here**, whichever selector made them and
    whichever loop iterates them (the estimators' or yours): each is a 1-D array of
    integer indices in ``[0, n_samples)`` (no float truncated, no negative index counted
    from the end) and, for a selector whose batches are disjoint
    (:attr:`~skcontrast.selectors.BatchSelector.partitions`), holds no sample twice; an
    error names the selector, the epoch and the batch. A batch of fewer than two samples
    has nothing to contrast: it is skipped, with a warning (once). An epoch left without
    a batch is refused, and one whose batches cover fewer than half of the samples is
    said (once). The checks cost milliseconds on an epoch of a million samples.

    It pickles (into ``DataLoader`` workers, or with a checkpoint): the embeddings and the
    selector's epoch travel; ``embed`` must itself be picklable to be kept. For a
    checkpoint of your own, :meth:`state_dict` holds the epoch and what the selector
    carries between epochs (:meth:`BatchSelector.state_dict`), and
    :meth:`embedding_state` the tables of embeddings.

    Parameters
    ----------
    selector : BatchSelector
        Any selector of :mod:`skcontrast.selectors` (used as it is: its epochs advance).
    n_samples : int
        Number of samples of the dataset (indices ``0 .. n_samples - 1``).
    embed : callable or None, default=None
        ``embed(indices) -> array``: the current embeddings of those samples.
    labels : array-like of shape (n_samples,), optional
        For selectors that use labels (``BindingSelector``, label losses).
    loss : Loss or None, default=None
        What an adaptive selector whose own ``loss`` is ``None`` scores with: your
        training loss object (:mod:`skcontrast.losses`), with its current temperature.
    selection_pass : {'fresh', 'cached'} or int, default='fresh'
        When a pass over every sample is due (see above): before every epoch, once
        (then the samples no step pushed), or every ``k`` epochs.
    refresh_every : int or None
        Deprecated alias of ``selection_pass`` (``1``: ``'fresh'``, ``None``:
        ``'cached'``, ``k``: ``k``).
    num_replicas, rank : int or None, default=None
        Data-parallel processes and this one's rank; ``None``: from ``torch.distributed``
        if it is initialised, else one process.
    drop_last : bool, default=False
        With several processes: drop the samples of a global batch beyond a multiple of
        the number of processes, instead of padding it.
    even : bool, default=True
        With several processes: slices of one size (padded or dropped as above), or
        ``False``: ``numpy.array_split`` slices.

    Examples
    --------
    >>> import numpy as np, torch
    >>> from torch.utils.data import DataLoader, TensorDataset
    >>> from skcontrast.selectors import SelectorSampler, ShuffledBatchSelector
    >>> data = TensorDataset(torch.randn(10, 3))
    >>> sampler = SelectorSampler(ShuffledBatchSelector(4, random_state=0), 10)
    >>> [len(b) for (b,) in DataLoader(data, batch_sampler=sampler)]
    [4, 4, 2]

    Each batch it yields is a list of this process's sample indices (a
    :class:`SampledBatch`); its ``batch`` attribute holds the whole selected batch,
    which differs from the list only in data-parallel training.
    """

    def __init__(self, selector: BatchSelector, n_samples: int, *,
                 embed: Callable[[np.ndarray], Any] | None = None, labels: Any = None,
                 loss: Any = None, selection_pass: str | int = "fresh",
                 refresh_every: Any = _UNSET, num_replicas: int | None = None,
                 rank: int | None = None, drop_last: bool = False, even: bool = True
                 ) -> None:
        if not isinstance(selector, BatchSelector):
            raise ValueError(f"selector must be a BatchSelector from skcontrast.selectors; "
                             f"got {describe(selector)}")
        self.selector = selector
        self.n_samples = check_int(n_samples, "n_samples", minimum=2)
        if embed is not None and not callable(embed):
            raise ValueError(f"embed must be a callable embed(indices) -> array, or None; "
                             f"got {describe(embed)}")
        self.embed = embed
        self.labels = None if labels is None else as_numpy(labels, "labels")
        if self.labels is not None and len(self.labels) != self.n_samples:
            raise ValueError(f"labels has {len(self.labels)} entries but n_samples is "
                             f"{self.n_samples}")
        self.loss = loss
        if refresh_every is not _UNSET:
            selection_pass = self.deprecated_refresh_every(refresh_every, "SelectorSampler")
        self.selection_pass = selection_pass
        self.pass_every = self.pass_period(selection_pass)
        if (num_replicas is None) != (rank is None):
            raise ValueError("num_replicas and rank go together: give both or neither")
        if num_replicas is not None:
            check_int(num_replicas, "num_replicas", minimum=1)
            check_int(rank, "rank", minimum=0, maximum=num_replicas - 1)
        self.num_replicas, self.rank = num_replicas, rank
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last must be True or False; got {describe(drop_last)}")
        self.drop_last = drop_last
        if not isinstance(even, bool):
            raise ValueError(f"even must be True or False; got {describe(even)}")
        self.even = even
        self._check_batch_size(self._replicas()[0])
        self._warned_padding = self._warned_lone = self._warned_coverage = False
        # whether an update on an accelerator held an index outside [0, n), on its device
        self._bad_update: torch.Tensor | None = None
        self._tables: dict[str, _Table] = {}  # by name (TABLES), as first given
        self._refreshed_at: int | None = None
        self.refreshes = 0
        self.select_time = 0.0  # seconds the last epoch's selection took

    @staticmethod
    def deprecated_refresh_every(refresh_every: Any, owner: str) -> str | int:
        """The ``selection_pass`` that ``refresh_every``, its deprecated alias, names
        (``1``: ``'fresh'``, ``None``: ``'cached'``, ``k``: ``k``), with a
        ``FutureWarning``; any other value is refused naming ``refresh_every``, the
        argument given (the sampler's and the sentence-transformers ``batch_sampler``'s)."""
        warnings.warn(f"{owner}(refresh_every=...) is deprecated: it is selection_pass "
                      "(refresh_every=1 is selection_pass='fresh', None is 'cached', k is k)",
                      FutureWarning, stacklevel=3)
        if refresh_every is None:
            return "cached"
        if isinstance(refresh_every, bool) or not isinstance(refresh_every, int | np.integer) \
                or refresh_every < 1:
            raise ValueError(f"refresh_every must be None or an int >= 1 (it is deprecated: "
                             f"use selection_pass='fresh', 'cached' or an int >= 1); got "
                             f"{describe(refresh_every)}")
        return "fresh" if refresh_every == 1 else int(refresh_every)

    @staticmethod
    def pass_period(selection_pass: Any, name: str = "selection_pass") -> int | None:
        """Epochs between two passes over every sample: 1 for ``'fresh'``, ``None`` for
        ``'cached'`` (one, before the first epoch), ``k`` for an int ``k >= 1``; anything
        else is refused, naming ``name``."""
        if selection_pass == "fresh":
            return 1
        if selection_pass == "cached":
            return None
        if isinstance(selection_pass, str):
            raise ValueError(f"{name} must be 'fresh', 'cached' or an int >= 1; got "
                             f"{describe(selection_pass)}")
        return check_int(selection_pass, name, minimum=1)

    # -- epochs -----------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass over the loader epoch ``epoch`` (0-based)."""
        self.selector.set_epoch(epoch)

    @property
    def epoch(self) -> int:
        """The epoch the next pass yields."""
        return self.selector.current_epoch

    def __len__(self) -> int:
        return self.selector.get_n_splits(self.n_samples, self.labels)

    def __iter__(self) -> Iterator[SampledBatch]:
        epoch = self.epoch
        for rows, batch in self.selections():
            yield SampledBatch(rows.tolist(), batch, epoch)

    def selections(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The next epoch: for each batch, the ``int64`` indices this process loads and
        the whole selected batch (what iterating the sampler yields, as arrays). Every
        process gets the same batches, each its slice of them (a curating selector's
        super-batch whole: every process curates it)."""
        self._check_batch_size(self._replicas()[0])
        batches = self.epoch_batches()
        if self.selector.curates or self._replicas()[0] == 1:
            return [(batch, batch) for batch in batches]
        return [(self.rank_slice(batch), batch) for batch in batches]

    def rank_slice(self, rows: Any) -> np.ndarray:
        """This process's contiguous slice of ``rows`` (e.g. the positions a curating
        selector kept), evened over the processes as the global batches are (one
        process: all of them)."""
        world, rank = self._replicas()
        rows = np.asarray(rows.cpu() if isinstance(rows, torch.Tensor) else rows)
        if world == 1:
            return rows
        if not self.even:
            return np.array_split(rows, world)[rank]
        return self._even(rows, world).reshape(world, -1)[rank]

    def _even(self, batch: np.ndarray, world: int) -> np.ndarray:
        """``batch`` cut or padded to a non-zero multiple of ``world`` samples."""
        extra = len(batch) % world
        if not extra:
            return batch
        if self.drop_last and len(batch) > world:
            return batch[:len(batch) - extra]
        pad = world - extra
        if not self._warned_padding:
            self._warned_padding = True
            warnings.warn(
                f"a global batch of {len(batch)} samples is padded with {pad} of its own "
                f"samples so that each of the {world} processes gets {len(batch) // world + 1}"
                " (a repeated sample is its own negative in a contrastive loss); "
                "SelectorSampler(drop_last=True) drops samples instead, and a batch size "
                f"that is a multiple of {world} needs neither", UserWarning, stacklevel=3)
        return np.concatenate([batch, np.resize(batch, pad)])

    def _check_batch_size(self, world: int) -> None:
        size = self.selector.nominal_batch_size(self.n_samples)
        if world > 1 and size is not None and size < world:
            raise ValueError(f"{type(self.selector).__name__}'s batch size {size} is below the "
                             f"number of processes {world}: some process would get no sample "
                             f"in every step; use a batch size of at least {world} (a "
                             f"multiple of {world} splits evenly)")

    def state_dict(self) -> dict:
        """The epoch the next pass yields and the selector's state (plain values), for a
        checkpoint: :meth:`load_state_dict` on a new sampler continues exactly."""
        return {"epoch": self.epoch, "selector": self.selector.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Continue from :meth:`state_dict`."""
        if not isinstance(state, dict) or "epoch" not in state:
            raise ValueError(f"a SelectorSampler state is a dict with 'epoch'; got "
                             f"{describe(state)}")
        self.set_epoch(state["epoch"])
        self.selector.load_state_dict(state.get("selector", {}))

    def epoch_batches(self) -> list[np.ndarray]:
        """The global batches of the next epoch (every process gets the same), checked:
        ``int64`` arrays of two samples or more (see the class's description). The time
        it took, the embedding pass through ``embed`` included, is ``select_time``."""
        start = time.perf_counter()
        epoch = self.epoch
        if not self.selector.needs_embeddings:
            placeholder = np.zeros((self.n_samples, 1), dtype=np.float32)
            batches = self.selector.epoch_batches(placeholder, self.labels)
        else:
            X = self._current_embeddings()
            batches = self.selector.epoch_batches(X, self.labels, loss=self.loss)
        checked = self._checked(batches, epoch)
        self.select_time = time.perf_counter() - start
        return checked

    def _checked(self, batches: Any, epoch: int) -> list[np.ndarray]:
        """``batches`` checked, without those of fewer than two samples (a warning says
        so, once); an epoch left without a batch is refused."""
        name = type(self.selector).__name__
        n = self.n_samples
        arrays, flat = index_arrays(batches, n, distinct=self.selector.partitions,
                                    name=f"batch {{}} of {name}'s epoch {epoch}")
        kept = [a for a in arrays if len(a) >= 2]
        if len(kept) < len(arrays) and kept and not self._warned_lone:
            self._warned_lone = True
            warnings.warn(
                f"{name} made {len(arrays) - len(kept)} batch(es) of a single sample (or "
                f"none) in epoch {epoch} of n={n} samples: one sample has nothing to "
                "contrast, so such batches are skipped. The built-in selectors let a "
                "remainder of one sample join the batch before it; a selector of your "
                "own can do the same (skcontrast.selectors.BatchSelector's partition "
                "rule), or leave it out (drop_last)", UserWarning, stacklevel=3)
        if not kept:
            made = f"{len(arrays)} batch(es) of fewer than two samples" if arrays else \
                "no batch"
            raise ValueError(f"{name} made {made} for epoch {epoch} of n={n} samples: an "
                             "epoch needs at least one batch of two samples or more to "
                             "train on")
        if not self._warned_coverage:
            self._warn_coverage(flat if len(kept) == len(arrays) else np.concatenate(kept))
        return kept

    def _warn_coverage(self, flat: np.ndarray) -> None:
        """Say so, once, when an epoch's batches (their concatenated indices ``flat``)
        leave most samples out."""
        n = self.n_samples
        covered = np.zeros(n, dtype=bool)  # a mask, not np.unique: no sort every epoch
        covered[flat] = True
        seen = int(np.count_nonzero(covered))
        if seen < n / 2:
            self._warned_coverage = True
            note = self.selector.coverage()
            detail = f" ({note})" if note else ""
            warnings.warn(
                f"{type(self.selector).__name__}'s batches of this epoch cover {seen} of the "
                f"{n} training samples ({seen / n:.0%}){detail}: an epoch trains on a fraction "
                "of the data, so compare selectors at equal steps (an estimator's history "
                "'n_batches'), not equal epochs, or raise the fraction kept", UserWarning,
                stacklevel=4)

    # -- embeddings -------------------------------------------------------------------

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
            table = _Table(values.new_zeros((n, *values.shape[1:])),
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
        self._tables[name] = _Table(table.float(), known, pushed)

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

    def _replicas(self) -> tuple[int, int]:
        if self.num_replicas is not None and self.rank is not None:
            return self.num_replicas, self.rank
        return world_size()

    def __repr__(self) -> str:
        return (f"SelectorSampler({self.selector!r}, n_samples={self.n_samples}, "
                f"epoch={self.epoch})")
