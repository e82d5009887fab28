"""Non-adaptive selectors: fixed, shuffled, random, full and exhaustive batches.
"""

from __future__ import annotations

import itertools
import math
import warnings
from typing import Any

import numpy as np
import torch

from .._validation import check_int, describe, store_params
from ._base import (
    BatchSelector,
    FitSettings,
    check_batch_size,
    check_index_batches,
    n_partition_batches,
    partition,
)


class _RandomPartition(BatchSelector):
    """A random permutation cut into consecutive batches; subclasses pick the permutation."""

    def __init__(self, batch_size: int = 32, *, drop_last: bool = False,
                 random_state: Any = None) -> None:
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.random_state = random_state

    def _permutation_rng(self, rng: np.random.Generator) -> np.random.Generator:
        raise NotImplementedError

    def _select(self, X, y, groups, rng):
        n = len(X)
        b = check_batch_size(self.batch_size, n)
        return partition(self._permutation_rng(rng).permutation(n), b, self.drop_last)

    def _n_batches(self, n, y):
        return n_partition_batches(n, check_batch_size(self.batch_size, n), self.drop_last)


class FixedBatchSelector(_RandomPartition):
    """One random partition, reused unchanged every epoch (Sreenivasan et al. 2023,
    openreview.net/forum?id=7n2dNATSHeQ, FIXED-BATCH).

    The samples are permuted once (from ``random_state``) and cut into consecutive
    batches; every epoch yields the same batches in the same order. This models data
    split across nodes that never exchange samples; Sreenivasan et al. 2023 Prop. 3 shows such a
    fixed partition generally does *not* reach the full-batch optimum.

    Parameters
    ----------
    batch_size : int, default=32
        Samples per batch (``2 <= batch_size <= n``).
    drop_last : bool, default=False
        ``False``: the last batch holds the remainder ``n mod batch_size`` (no sample is
        ever dropped; a remainder of one joins the batch before it). ``True``: the
        remainder is left out.
    random_state : int, numpy Generator or None, default=None
        Seed of the partition.

    Examples
    --------
    >>> import numpy as np
    >>> from skcontrast.selectors import FixedBatchSelector
    >>> sel = FixedBatchSelector(batch_size=3, random_state=0)
    >>> first = [b.tolist() for b in sel.split(np.zeros((7, 2, 4)))]
    >>> first == [b.tolist() for b in sel.split(np.zeros((7, 2, 4)))]
    True
    >>> [len(b) for b in first]  # a remainder of one joins the batch before it
    [3, 4]
    """

    def _permutation_rng(self, rng: np.random.Generator) -> np.random.Generator:
        return self._epoch_rng(0)  # the permutation of epoch 0, whatever the epoch

    def stream_refusal(self) -> str | None:
        return ("it reuses one partition of all the rows every epoch, and a stream's "
                "windows hold other rows each time")


class ShuffledBatchSelector(_RandomPartition):
    """A new random partition every epoch (Sreenivasan et al. 2023, SHUFFLED-BATCH): SGD without
    replacement.

    The usual way to train, and the default selector of the estimators (Cho et al. 2023,
    arXiv:2307.05906, Alg. 5).

    Parameters
    ----------
    batch_size : int, default=32
        Samples per batch (``2 <= batch_size <= n``).
    drop_last : bool, default=False
        See :class:`FixedBatchSelector`.
    random_state : int, numpy Generator or None, default=None
        Seed of the sequence of epochs.

    Examples
    --------
    >>> import numpy as np
    >>> from skcontrast.selectors import ShuffledBatchSelector
    >>> sel = ShuffledBatchSelector(batch_size=4, random_state=0)
    >>> epoch = list(sel.split(np.zeros((10, 3))))
    >>> sorted(np.concatenate(epoch).tolist()) == list(range(10))
    True
    """

    def _permutation_rng(self, rng: np.random.Generator) -> np.random.Generator:
        return rng


class RandomBatchSelector(BatchSelector):
    """Batches drawn independently and uniformly from all size-B subsets (Cho et al. 2023, Alg. 4).

    SGD *with* replacement: each batch holds ``batch_size`` distinct samples, but batches
    are independent, so within an epoch a sample can appear several times or not at all.
    Not a partition.

    Parameters
    ----------
    batch_size : int, default=32
        Samples per batch.
    n_batches : int or None, default=None
        Batches per epoch; ``None`` gives ``ceil(n / batch_size)``, the number of steps
        of a partition epoch.
    random_state : int, numpy Generator or None, default=None
    """

    def __init__(self, batch_size: int = 32, *, n_batches: int | None = None,
                 random_state: Any = None) -> None:
        self.batch_size = batch_size
        self.n_batches = n_batches
        self.random_state = random_state

    partitions = False  # batches are drawn with replacement

    def largest_batch_size(self, n: int, y: Any = None) -> int | None:
        """Every batch holds ``batch_size`` samples (no remainder to join)."""
        return self.nominal_batch_size(n)

    def _select(self, X, y, groups, rng):
        n = len(X)
        b = check_batch_size(self.batch_size, n)
        return [np.sort(rng.choice(n, size=b, replace=False)).astype(np.int64)
                for _ in range(self._n_batches(n, y))]

    def _n_batches(self, n, y):
        if self.n_batches is not None:
            return check_int(self.n_batches, "n_batches", minimum=1)
        return n_partition_batches(n, check_batch_size(self.batch_size, n), False)


class FullBatchSelector(BatchSelector):
    """One batch holding all ``n`` samples (full-batch gradient descent).

    Examples
    --------
    >>> import numpy as np
    >>> from skcontrast.selectors import FullBatchSelector
    >>> [b.tolist() for b in FullBatchSelector().split(np.zeros((4, 2)))]
    [[0, 1, 2, 3]]
    """

    def __init__(self) -> None:
        pass

    def nominal_batch_size(self, n: int) -> int:
        return n

    def _select(self, X, y, groups, rng):
        check_batch_size(len(X), len(X), name="n (the full batch)")
        return [np.arange(len(X), dtype=np.int64)]

    def stream_refusal(self) -> str | None:
        return "its one batch is every row of the data, which a stream never holds at once"

    def _n_batches(self, n, y):
        return 1


class ExhaustiveBatchSelector(BatchSelector):
    """All ``C(n, B)`` batches of size ``B`` every epoch (Sreenivasan et al. 2023, Theorem 1).

    Training on every size-B subset has the same minimiser as the full batch (the
    simplex ETF for ``n <= d + 1``); this selector is for small, theoretical set-ups.

    Parameters
    ----------
    batch_size : int, default=2
        ``B``.
    max_batches : int, default=100_000
        Refuse (``ValueError``) when ``C(n, B)`` exceeds this bound, rather than
        exhaust memory.
    shuffle : bool, default=True
        Visit the batches in a new random order each epoch (lexicographic otherwise).
    random_state : int, numpy Generator or None, default=None
    """

    def __init__(self, batch_size: int = 2, *, max_batches: int = 100_000,
                 shuffle: bool = True, random_state: Any = None) -> None:
        store_params(self, locals())

    partitions = False  # a sample is in many of the C(n, B) batches

    def largest_batch_size(self, n: int, y: Any = None) -> int | None:
        """Every batch holds ``batch_size`` samples."""
        return self.nominal_batch_size(n)

    def _select(self, X, y, groups, rng):
        n = len(X)
        count = self._n_batches(n, y)
        batches = np.fromiter(itertools.chain.from_iterable(
            itertools.combinations(range(n), self.batch_size)), dtype=np.int64,
            count=count * self.batch_size).reshape(count, self.batch_size)
        if self.shuffle:
            batches = batches[rng.permutation(count)]
        return list(batches)

    def stream_refusal(self) -> str | None:
        return ("it trains on every B-subset of all the rows, which a stream never holds "
                "at once")

    def _n_batches(self, n, y):
        b = check_batch_size(self.batch_size, n)
        bound = check_int(self.max_batches, "max_batches", minimum=1)
        count = math.comb(n, b)
        if count > bound:
            raise ValueError(
                f"ExhaustiveBatchSelector would yield C({n}, {b}) = {count:,} batches per "
                f"epoch, more than max_batches={bound:,}; raise max_batches or use a "
                f"sampling selector")
        return count


class PredefinedBatchSelector(BatchSelector):
    """The same user-given batches every epoch (like sklearn's ``PredefinedSplit``).

    For replaying batches, training on a chosen set of batches (e.g. a strict subset of
    all ``C(n, B)``, Sreenivasan et al. 2023, Theorem 2) or on per-node shards.

    Parameters
    ----------
    batches : sequence of 1-D int arrays
        The batches of every epoch; they need not partition the samples.

    Examples
    --------
    >>> import numpy as np
    >>> from skcontrast.selectors import PredefinedBatchSelector
    >>> sel = PredefinedBatchSelector([[0, 1], [2, 3], [1, 2]])
    >>> [b.tolist() for b in sel.split(np.zeros((4, 2)))]
    [[0, 1], [2, 3], [1, 2]]
    """

    def __init__(self, batches: Any = ()) -> None:
        self.batches = batches

    @property
    def partitions(self) -> bool:
        """Whether the given batches are disjoint."""
        flat = np.concatenate([np.asarray(b, dtype=np.int64).ravel() for b in self.batches]
                              or [np.zeros(0, np.int64)])
        return len(np.unique(flat)) == len(flat)

    def _fit_params(self, settings: FitSettings) -> dict:
        """The batches name rows of ``X``: a fit that holds some rows out trains on the
        others, so they become positions among those."""
        out = super()._fit_params(settings)
        if settings.rows is not None and settings.n_rows is not None:
            out["batches"] = _batches_on_rows(self.batches, settings.rows, settings.n_rows)
        return out

    def largest_batch_size(self, n: int, y: Any = None) -> int | None:
        """The longest of the given batches."""
        return max(map(len, check_index_batches(self.batches, n, min_size=2)))

    def _select(self, X, y, groups, rng):
        return check_index_batches(self.batches, len(X), min_size=2)

    def stream_refusal(self) -> str | None:
        return "its batches name rows of the whole data, which a stream has no index of"

    def _n_batches(self, n, y):
        return len(check_index_batches(self.batches, n, min_size=2))


def _batches_on_rows(batches: Any, rows: np.ndarray, n_rows: int) -> list[np.ndarray]:
    """Predefined batches of rows of ``X`` as positions among the training ``rows``
    (``rows[i]`` is the row of ``X`` at training position ``i``).

    Rows held out of training are left out of the batches, with a warning; an index
    that is no row of ``X`` at all, or a batch left with fewer than 2 training rows, is
    an error.
    """
    position = np.full(int(rows.max()) + 1 if len(rows) else 0, -1, dtype=np.int64)
    position[rows] = np.arange(len(rows))
    out, dropped = [], 0
    for i, batch in enumerate(batches):
        batch = np.asarray(batch.cpu() if isinstance(batch, torch.Tensor) else batch).ravel()
        if batch.dtype.kind not in "iu" or (batch.size and (batch.min() < 0 or
                                                           batch.max() >= n_rows)):
            raise ValueError(f"PredefinedBatchSelector batches[{i}] must hold row indices of "
                             f"X, in [0, {n_rows}); got {describe(batch)}")
        mapped = position[batch[batch < len(position)]]
        kept = mapped[mapped >= 0]
        dropped += len(batch) - len(kept)
        if len(kept) < 2:
            raise ValueError(f"PredefinedBatchSelector batches[{i}] keeps {len(kept)} training "
                             f"row(s) once the held-out rows (validation_fraction) are left "
                             "out; a batch needs at least 2")
        out.append(kept.astype(np.int64))
    if dropped:
        warnings.warn(f"{dropped} entries of the PredefinedBatchSelector's batches are rows "
                      "held out of training (validation_fraction); they are left out of the "
                      "training batches, whose indices name rows of X",
                      UserWarning, stacklevel=5)
    return out
