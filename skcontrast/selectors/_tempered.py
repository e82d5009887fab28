"""How hard a selector's batches are, when they start, how often they are chosen again,
what they may never contain, and whose embeddings choose them."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import as_numpy, check_int, check_real, describe, encode_labels
from ._base import (
    BatchSelector,
    check_batch_size,
    check_embeddings,
    n_partition_batches,
    partition,
)
from ._graph import rank_window, unit_rows
from ._guards import guard_batches, mix_random, neighbour_pairs


class TemperedSelector(BatchSelector):
    """Temper any selector: a hardness dial, a curriculum, false-negative guards, a teacher.

    Wraps a selector (like :class:`BindingSelector`) and edits the batches it gives,
    keeping their sizes and their coverage of the samples:

    - **Dial** ``random_share``: a share of every batch is drawn at random from the
      epoch (0: the selector's own batches; 1: a random partition of the same sizes).
      This is the "+Rand" variant of seed 000's ScB/BcS made a knob for every selector.
    - **Curriculum** ``warmup_epochs``: the first epochs are shuffled batches (of the
      selector's ``batch_size``); hard batches start after them. ``refresh_every``: the
      selector chooses again every that many epochs; the epochs between reuse its last
      batches in a new order (with the random share drawn anew), and need no embedding
      pass.
    - **Guards**, enforced by construction in every epoch (warm-up included):
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
    >>> [len(b) for b in batches], max(np.bincount(y[b]).max() for b in batches) <= 6
    ([16, 16, 16, 16], True)
    """

    def __init__(self, base_selector: BatchSelector | None = None, *,
                 random_share: float = 0.0, warmup_epochs: int = 0, refresh_every: int = 1,
                 max_same_label: int | None = None, exclude_neighbours: int = 0,
                 teacher: Any = None, random_state: Any = None) -> None:
        self.base_selector = base_selector
        self.random_share = random_share
        self.warmup_epochs = warmup_epochs
        self.refresh_every = refresh_every
        self.max_same_label = max_same_label
        self.exclude_neighbours = exclude_neighbours
        self.teacher = teacher
        self.random_state = random_state

    # -- what this epoch needs ---------------------------------------------------------

    def _base(self) -> BatchSelector:
        if not isinstance(self.base_selector, BatchSelector):
            raise ValueError(f"base_selector must be a BatchSelector; got "
                             f"{describe(self.base_selector)}")
        return self.base_selector

    def _chooses(self, epoch: int) -> bool:
        """Whether the base selector chooses anew at ``epoch`` (else its last batches)."""
        warmup = check_int(self.warmup_epochs, "warmup_epochs", minimum=0)
        every = check_int(self.refresh_every, "refresh_every", minimum=1)
        if epoch < warmup:
            return False
        last = getattr(self, "_chosen", None)
        return last is None or (epoch - warmup) % every == 0 or last[0] > epoch

    @property
    def _adaptive(self) -> bool:  # type: ignore[override]
        """Whether the next epoch needs the network's current embeddings."""
        if self.teacher is not None:
            return False
        epoch = self.current_epoch
        base = bool(getattr(self._base(), "_adaptive", False)) and self._chooses(epoch)
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
        Z = self._selection_space(X)
        n = len(Z)
        codes = self._codes(y, n, cap)
        epoch = self.current_epoch
        uses_embeddings = self._adaptive or self.teacher is not None
        self._claim_epoch()
        rng = self._epoch_rng(epoch)

        if epoch < self.warmup_epochs:
            b, drop_last = self._shape(n)
            batches = partition(rng.permutation(n), b, drop_last)
        elif self._chooses(epoch):
            base.set_epoch(epoch)
            batches = base.epoch_batches(Z, y, groups, loss=loss)
            self._chosen = (epoch, [b.copy() for b in batches])
        else:
            chosen = self._chosen[1]
            batches = [chosen[i].copy() for i in rng.permutation(len(chosen))]
        batches = mix_random(batches, float(share), rng)

        conflicts = self._neighbour_guard(Z, m, fresh=uses_embeddings) if m else None
        if cap is not None or conflicts is not None:
            batches = guard_batches(batches, n, codes=codes, cap=cap, conflicts=conflicts,
                                    rng=rng)
        return batches

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

    def set_epoch(self, epoch: int) -> TemperedSelector:
        super().set_epoch(epoch)
        self._base().set_epoch(epoch)
        return self

    def _n_batches(self, n, y):
        if self.current_epoch < check_int(self.warmup_epochs, "warmup_epochs", minimum=0):
            b, drop_last = self._shape(n)
            return n_partition_batches(n, b, drop_last)
        return self._base().get_n_splits(n, y)
