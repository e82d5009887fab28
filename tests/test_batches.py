"""The iterators of a fit and of its passes over every row."""

import numpy as np
import torch

from skcontrast._estimators._data import TensorViews
from skcontrast.selectors import ShuffledBatchSelector


def test_passes_over_every_row_make_each_batch_when_it_is_read():
    """The consecutive batches of an inference or held-out pass were a list of every
    batch, handed to the loader as Python lists of ints (about 36 bytes a row: 144 MiB
    above the output for 4M rows); they are now made one at a time, the same batches."""
    from skcontrast._estimators._batches import RowBatches, inference_batches
    from skcontrast._estimators._plan import FitPlan

    for n, size in [(10, 3), (10, 5), (1, 3), (7, 2), (9, 4)]:
        old = [np.arange(i, min(i + size, n)) for i in range(0, n, size)]
        if len(old) > 1 and len(old[-1]) == 1:
            old[-2:] = [np.concatenate(old[-2:])]
        assert [b.tolist() for b in RowBatches(n, size, join_lone=True)] == \
            [b.tolist() for b in old]
    rows = np.array([5, 3, 8, 1, 0])
    assert [b.tolist() for b in RowBatches(5, 2, rows)] == [[5, 3], [8, 1], [0]]
    data = TensorViews((torch.arange(12.0).reshape(6, 2),))
    plan = FitPlan(ShuffledBatchSelector(2), "single", 0)
    loader = inference_batches(data, plan, torch.device("cpu"))
    assert isinstance(loader.batch_sampler.batches, RowBatches)
    assert [b.index.tolist() for b in loader] == [list(range(6))]
