"""How hard a selector's batches are, when they start, how often they are chosen again,
what they may never contain, and whose embeddings choose them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from .._validation import as_numpy, check_int, check_real, describe, encode_labels, store_params
from ._base import (
    BatchSelector,
    FitSettings,
    batch_sizes,
    check_batch_size,
    check_embeddings,
    check_index_batches,
    n_partition_batches,
    partition,
    refuse_curating,
    training_rows,
)
from ._graph import rank_window, unit_rows
from ._guards import guard_batches, mix_random, neighbour_pairs


class TemperedSelector(BatchSelector):
    """Temper any selector: a hardness dial, a curriculum, false-negative guards, a teacher.

    Wraps a selector (like :class:`BindingSelector`) and edits the batches it gives,
    keeping their sizes and their coverage of the samples:

    - **Dial** ``random_share``: a share of every batch is drawn at random from the
      epoch (0: the selector's own batches; 1: a random partition of the same sizes).
      This is the "+Rand" variant of Sreenivasan et al. 2023's (openreview.net/forum?id=7n2dNATSHeQ)
      ScB/BcS made a knob for every selector.
    - **Curriculum** ``warmup_epochs``: the first epochs are shuffled batches (of the
      selector's ``batch_size``); hard batches start after them. ``refresh_every``: the
      selector chooses again every that many epochs; the epochs between reuse its last
      batches in a new order (with the random share drawn anew), and need no embedding
      pass. The base always chooses as at the first epoch of a period, so a run resumed
      in the middle of one (:meth:`set_epoch`) continues as an uninterrupted run would:
      exactly for a selector that does not look at embeddings (or looks at a teacher),
      and for one that does when its last choice travels too (:meth:`state_dict`, which
      the estimators keep in warm starts and saved models); without it the embeddings
      of the resumed epoch choose.
    - **Guards**, enforced by construction in every epoch (warm-up included), for a base
      whose batches are disjoint (:attr:`~BatchSelector.partitions`): a base that draws
      batches with replacement, overlaps them or adds samples to every batch
      (``RandomBatchSelector``, ``ExhaustiveBatchSelector``, ``BindingSelector``,
      overlapping predefined batches, OSGD's random candidates) is refused for the
      dial and the guards, which move samples between batches:
      ``max_same_label`` (with labels ``y``): no sample shares its batch with more than
      that many samples of its own label; ``exclude_neighbours`` (no labels needed):
      no sample shares its batch with one of its ``m`` nearest neighbours in the
      selection space (cosine similarity), B3's "top ranks are likely positives"
      (Thirukovalluru et al. 2025, Sec. 3). A sample that breaks a guard moves to a batch
      where it breaks none; when that is impossible (e.g. a class larger than
      ``(max_same_label + 1) * n_batches``) the epoch fails with a clear error.
    - **Teacher** ``teacher``: fixed embeddings of the training samples that the selector
      and the neighbour guard look at instead of the network's current ones (B3's
      teacher). The estimator then needs no embedding pass at all.

    Every parameter is a ``selector__*`` parameter for ``GridSearchCV``.

    Parameters
    ----------
    base_selector : BatchSelector
        The selector to temper (any adaptive one, or a plain one to add guards to).
    random_share : float in [0, 1], default=0.0
    warmup_epochs : int, default=0
    refresh_every : int, default=1
    max_same_label : int or None, default=None
        Needs ``y`` (the labels given to ``fit`` or ``split``).
    exclude_neighbours : int, default=0
    teacher : array-like of shape (n, d) or (n, 2, d), or None, default=None
        Row ``i`` embeds training sample ``i``.
    random_state : int, numpy Generator or None, default=None
        Seed of the warm-up shuffles, the random share and the guards' moves.

    Examples
    --------
    >>> import numpy as np
    >>> from skcontrast.selectors import SpectralBatchSelector, TemperedSelector
    >>> X = np.random.default_rng(0).normal(size=(64, 2, 8))
    >>> y = np.repeat(np.arange(4), 16)
    >>> sel = TemperedSelector(SpectralBatchSelector(batch_size=16, random_state=0),
    ...                        random_share=0.25, max_same_label=5, random_state=0)
    >>> batches = list(sel.split(X, y))
    >>> [len(b) for b in batches], bool(max(np.bincount(y[b]).max() for b in batches) <= 6)
    ([16, 16, 16, 16], True)
    """

    def __init__(self, base_selector: BatchSelector | None = None, *,
                 random_share: float = 0.0, warmup_epochs: int = 0, refresh_every: int = 1,
                 max_same_label: int | None = None, exclude_neighbours: int = 0,
                 teacher: Any = None, random_state: Any = None) -> None:
        store_params(self, locals())

    # -- what this epoch needs ---------------------------------------------------------

    def _base(self) -> BatchSelector:
        if not isinstance(self.base_selector, BatchSelector):
            raise ValueError(f"base_selector must be a BatchSelector; got "
                             f"{describe(self.base_selector)}")
        refuse_curating(self.base_selector, self)
        return self.base_selector

    def _period_start(self, epoch: int) -> int:
        """The epoch at which the base chose the batches ``epoch`` uses."""
        warmup = check_int(self.warmup_epochs, "warmup_epochs", minimum=0)
        every = check_int(self.refresh_every, "refresh_every", minimum=1)
        return warmup + (epoch - warmup) // every * every

    def _chooses(self, epoch: int) -> bool:
        """Whether the base selector chooses at ``epoch`` (else the period's batches)."""
        if epoch < check_int(self.warmup_epochs, "warmup_epochs", minimum=0):
            return False
        last = getattr(self, "_chosen", None)
        return last is None or last[0] != self._period_start(epoch)

    def _fit_params(self, settings: FitSettings) -> dict:
        """A teacher given per row of ``X`` keeps the rows the fit trains on."""
        return {**super()._fit_params(settings),
                "teacher": training_rows(self.teacher, settings)}

    def stream_refusal(self) -> str | None:
        every = check_int(self.refresh_every, "refresh_every", minimum=1)
        if every > 1:
            return (f"refresh_every={every} reuses the batches of an earlier epoch, whose "
                    "rows a stream's next window no longer holds (use refresh_every=1)")
        if self.teacher is not None:
            return ("its teacher embeds the training rows by their index, which a stream's "
                    "rows have none of")
        return super().stream_refusal()

    @property
    def partitions(self) -> bool:
        return self._base().partitions

    @property
    def needs_embeddings(self) -> bool:
        """Whether the next epoch needs the network's current embeddings."""
        if self.teacher is not None:
            return False
        epoch = self.current_epoch
        base = bool(self._base().needs_embeddings) and self._chooses(epoch)
        warmup = epoch < check_int(self.warmup_epochs, "warmup_epochs", minimum=0)
        m = check_int(self.exclude_neighbours, "exclude_neighbours", minimum=0)
        known = getattr(self, "_conflicts", None)
        guard = m > 0 and (warmup or self._chooses(epoch) or known is None
                           or known[0][:2] != (id(self.teacher), m))
        # (a guard on a reused epoch keeps the neighbours found when the batches were chosen)
        return base or guard

    # -- the epoch ---------------------------------------------------------------------

    def epoch_batches(self, X: Any, y: Any = None, groups: Any = None, *,
                      loss: Any = None) -> list[np.ndarray]:
        base = self._base()
        share = check_real(self.random_share, "random_share", low=0, high=1)
        cap = None if self.max_same_label is None else check_int(
            self.max_same_label, "max_same_label", minimum=0)
        m = check_int(self.exclude_neighbours, "exclude_neighbours", minimum=0)
        edits = [name for name, on in (("random_share", share > 0),
                                       ("max_same_label", cap is not None),
                                       ("exclude_neighbours", m > 0)) if on]
        if edits and not base.partitions:
            raise ValueError(self._not_a_partition(edits))
        Z = self._selection_space(X)
        n = len(Z)
        codes = self._codes(y, n, cap)
        epoch = self.current_epoch
        uses_embeddings = self.needs_embeddings or self.teacher is not None
        self._claim_epoch()
        rng = self._epoch_rng(epoch)

        if epoch < self.warmup_epochs:
            b, drop_last = self._shape(n)
            batches = partition(rng.permutation(n), b, drop_last)
        else:
            start = self._period_start(epoch)
            if self._chooses(epoch):
                base.set_epoch(start)
                chosen = base.epoch_batches(Z, y, groups, loss=loss)
                if edits:
                    self._check_disjoint(chosen, n, edits)
                self._chosen = (start, [b.copy() for b in chosen])
            chosen = self._chosen[1]
            order = range(len(chosen)) if epoch == start else rng.permutation(len(chosen))
            batches = [chosen[i].copy() for i in order]
        batches = mix_random(batches, share, rng)

        conflicts = self._neighbour_guard(Z, m, fresh=uses_embeddings) if m else None
        if cap is not None or conflicts is not None:
            batches = guard_batches(batches, n, codes=codes, cap=cap, conflicts=conflicts,
                                    rng=rng)
        return batches

    def _not_a_partition(self, edits: list[str]) -> str:
        base = type(self._base()).__name__
        verb = "moves" if len(edits) == 1 else "move"
        return (f"TemperedSelector's {', '.join(edits)} {verb} samples between the batches of "
                f"a partition, and {base}'s batches are not one (a sample can be in several "
                f"batches or twice in one, so the guards could not hold): temper a selector "
                f"whose batches are disjoint (ShuffledBatchSelector, FixedBatchSelector, the "
                f"adaptive and graph selectors), or use {base} without {edits[0]}")

    def _check_disjoint(self, batches: list[np.ndarray], n: int, edits: list[str]) -> None:
        """The base's batches really are disjoint (a custom selector may claim so)."""
        if not batches:
            return
        counts = np.bincount(np.concatenate(batches), minlength=n)
        if counts.max() > 1:
            raise ValueError(self._not_a_partition(edits) + f" (sample "
                             f"{int(counts.argmax())} is in {int(counts.max())} places)")

    def state_dict(self) -> dict:
        """The batches the base chose last (and the epoch they were chosen at), and the
        neighbour pairs the guard keeps apart: what reused epochs of a refresh period
        need to continue exactly."""
        state = super().state_dict()
        chosen = getattr(self, "_chosen", None)
        if chosen is not None:
            state["chosen"] = {"epoch": chosen[0], "batches": [b.tolist() for b in chosen[1]]}
        known = getattr(self, "_conflicts", None)
        if known is not None:
            pairs = known[1].tocoo()
            state["neighbours"] = {"m": known[0][1], "n": known[0][2],
                                   "rows": pairs.row.tolist(), "cols": pairs.col.tolist()}
        return state

    def load_state_dict(self, state: dict) -> TemperedSelector:
        state = dict(state)
        chosen = state.pop("chosen", None)
        neighbours = state.pop("neighbours", None)
        super().load_state_dict(state)
        if chosen is not None:
            epoch = check_int(chosen.get("epoch"), "the chosen batches' epoch", minimum=0)
            n = max((max(b) for b in chosen["batches"] if b), default=0) + 1
            self._chosen = (epoch, check_index_batches(chosen["batches"], n))
        if neighbours is not None:
            m = check_int(neighbours.get("m"), "the neighbour guard's m", minimum=1)
            n = check_int(neighbours.get("n"), "the neighbour guard's n", minimum=1)
            rows, cols = (np.asarray(neighbours.get(k), dtype=np.int64) for k in ("rows", "cols"))
            if rows.shape != cols.shape or rows.ndim != 1 or (len(rows) and (
                    min(rows.min(), cols.min()) < 0 or max(rows.max(), cols.max()) >= n)):
                raise ValueError("the neighbour guard's saved pairs are malformed")
            graph = sp.csr_matrix((np.ones(len(rows), dtype=bool), (rows, cols)), shape=(n, n))
            self._conflicts = ((id(self.teacher), m, n), graph)
        return self

    def _neighbour_guard(self, Z: np.ndarray, m: int, *, fresh: bool) -> Any:
        """The pairs the neighbour guard keeps apart: recomputed from the current
        embeddings when this epoch has them, once from a teacher, else the last ones."""
        n = len(Z)
        if m > n - 1:
            raise ValueError(f"exclude_neighbours={m} must be below the number of samples "
                             f"n={n}")
        key = (id(self.teacher), m, n)
        known = getattr(self, "_conflicts", None)
        if known is None or known[0] != key or (fresh and self.teacher is None):
            if self.teacher is None and not fresh:
                raise ValueError("exclude_neighbours needs the embeddings of this epoch "
                                 f"(n={n}): pass them to split")
            known = self._conflicts = (key, neighbour_pairs(rank_window(unit_rows(Z), 0, m), n))
        return known[1]

    def _selection_space(self, X: Any) -> np.ndarray:
        if self.teacher is None:
            return check_embeddings(X)
        teacher = check_embeddings(self.teacher, name="teacher")
        n = len(X)
        if len(teacher) != n:
            raise ValueError(f"teacher embeds {len(teacher)} samples but there are {n} "
                             "training samples; row i of teacher must embed sample i")
        return teacher

    def _codes(self, y: Any, n: int, cap: int | None) -> np.ndarray | None:
        if cap is None:
            return None
        if y is None:
            raise ValueError(
                f"max_same_label={cap} needs the labels y (fit(X, y) or split(X, y)); "
                "without labels, exclude_neighbours guards against false negatives")
        _, codes = encode_labels(as_numpy(y, "y").ravel())
        if len(codes) != n:
            raise ValueError(f"y has {len(codes)} labels but X has {n} samples")
        return codes

    def _shape(self, n: int) -> tuple[int, bool]:
        base = self._base()
        if "batch_size" not in base.get_params(deep=False):
            raise ValueError(f"warmup_epochs needs a batch size, and {type(base).__name__} "
                             "has no batch_size")
        return check_batch_size(base.batch_size, n), bool(getattr(base, "drop_last", False))

    def largest_batch_size(self, n: int, y: Any = None) -> int | None:
        """The base selector's largest batch (random mixing and the guards move samples
        between batches but keep their sizes), or a warm-up epoch's, if larger."""
        size = self._base().largest_batch_size(n, y)
        if size is None or not check_int(self.warmup_epochs, "warmup_epochs", minimum=0):
            return size
        b, drop_last = self._shape(n)
        return max(size, int(batch_sizes(n, b, drop_last).max()))

    def set_epoch(self, epoch: int) -> TemperedSelector:
        super().set_epoch(epoch)
        self._base().set_epoch(epoch)
        return self

    def _n_batches(self, n, y):
        if self.current_epoch < check_int(self.warmup_epochs, "warmup_epochs", minimum=0):
            b, drop_last = self._shape(n)
            return n_partition_batches(n, b, drop_last)
        return self._base().get_n_splits(n, y)
