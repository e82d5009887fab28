"""Any selector as a PyTorch batch sampler, for training loops of one's own."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import Sampler

from .._batch import world_size
from .._validation import as_numpy, check_int, describe
from ..losses import Loss
from ._base import BatchSelector, index_arrays
from ._tables import EmbeddingTables, Table

#: ``refresh_every`` not given (its deprecated alias of ``selection_pass``)
_UNSET: Any = object()

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


class SelectorSampler(EmbeddingTables, Sampler[list[int]]):
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
    loss : Loss, callable or None, default=None
        What an adaptive selector whose own ``loss`` is ``None`` scores with: your
        training loss object (:mod:`skcontrast.losses`), with its current temperature,
        or a function of no arguments that returns it as it is when the sampler selects
        (a loss whose temperature is learned changes between epochs).
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
        self._said: set[str] = set()  # the warnings given once ('padding', 'lone', ...)
        # whether an update on an accelerator held an index outside [0, n), on its device
        self._bad_update: torch.Tensor | None = None
        self._tables: dict[str, Table] = {}  # by name (TABLES), as first given
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

    def for_rows(self, n_samples: int, *, embed: Callable[[np.ndarray], Any] | None = None
                 ) -> SelectorSampler:
        """A sampler of the same selector (whose epochs it advances) over ``n_samples``
        other rows, with the same loss, processes and settings, a fresh selection pass
        (embeddings by ``embed``) and the warnings already given: a stream's window,
        whose rows the selector chooses among as a selection round of its own
        (:class:`skcontrast.Stream`)."""
        rows = SelectorSampler(self.selector, n_samples, embed=embed, loss=self.loss,
                               num_replicas=self.num_replicas, rank=self.rank,
                               drop_last=self.drop_last, even=self.even)
        rows._said = self._said
        return rows

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
        if "padding" not in self._said:
            self._said.add("padding")
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
            batches = self.selector.epoch_batches(X, self.labels, loss=self.current_loss())
        checked = self._checked(batches, epoch)
        self.select_time = time.perf_counter() - start
        return checked

    def current_loss(self) -> Any:
        """The ``loss`` as it is now (a function's answer, read each time)."""
        loss = self.loss
        return loss() if callable(loss) and not isinstance(loss, Loss) else loss

    def _checked(self, batches: Any, epoch: int) -> list[np.ndarray]:
        """``batches`` checked, without those of fewer than two samples (a warning says
        so, once); an epoch left without a batch is refused."""
        name = type(self.selector).__name__
        n = self.n_samples
        arrays, flat = index_arrays(batches, n, distinct=self.selector.partitions,
                                    name=f"batch {{}} of {name}'s epoch {epoch}")
        kept = [a for a in arrays if len(a) >= 2]
        if len(kept) < len(arrays) and kept and "lone" not in self._said:
            self._said.add("lone")
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
        if "coverage" not in self._said:
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
            self._said.add("coverage")
            note = self.selector.coverage()
            detail = f" ({note})" if note else ""
            warnings.warn(
                f"{type(self.selector).__name__}'s batches of this epoch cover {seen} of the "
                f"{n} training samples ({seen / n:.0%}){detail}: an epoch trains on a fraction "
                "of the data, so compare selectors at equal steps (an estimator's history "
                "'n_batches'), not equal epochs, or raise the fraction kept", UserWarning,
                stacklevel=4)

    def _replicas(self) -> tuple[int, int]:
        if self.num_replicas is not None and self.rank is not None:
            return self.num_replicas, self.rank
        return world_size()

    def __repr__(self) -> str:
        return (f"SelectorSampler({self.selector!r}, n_samples={self.n_samples}, "
                f"epoch={self.epoch})")
