"""The loss module of a fit (skcontrast/_estimators/_modules.py): every batch reaches the
loss through one step, ``Loss.batch_terms``, with the guard's content ids and groups of
the batch's own rows, for training batches (with or without a memory) and held-out ones."""

import numpy as np
import pytest
import torch

from skcontrast._estimators._modules import ContrastiveCriterion
from skcontrast.losses import FalseNegativeGuard, LossBatch, SymmetricInfoNCE, symmetric_info_nce
from skcontrast.memory import CrossBatchMemory


def _batch(seed=0, b=6, d=5):
    g = torch.Generator().manual_seed(seed)
    z = torch.nn.functional.normalize(torch.randn(b, 2, d, generator=g), dim=-1)
    z[3] = z[0]  # item 3 repeats item 0
    return z


def _expected(z, exclude, t=0.2):
    return symmetric_info_nce(z[:, 0], z[:, 1], temperature=t, exclude=exclude)


def test_the_guard_reads_the_batch_rows_own_content_in_training_and_held_out():
    z = _batch()
    train_keys = torch.arange(40).reshape(20, 2)  # no training row repeats another
    held_out_keys = torch.tensor([[0, 1], [2, 3], [4, 5], [0, 1], [6, 7], [8, 9]])
    criterion = ContrastiveCriterion(SymmetricInfoNCE(0.2, false_negatives=FalseNegativeGuard()),
                                     row_keys=train_keys, held_out_keys=held_out_keys)
    index = torch.arange(6)
    exclude = torch.zeros(6, 6, dtype=torch.bool)
    exclude[0, 3] = exclude[3, 0] = True  # rows 0 and 3 of the held-out data are alike
    held_out = criterion(z, None, index, training=False).loss
    torch.testing.assert_close(held_out, _expected(z, exclude))
    # the same rows as training rows share no content: nothing is left out (the
    # held-out rows' indices once read the training rows' ids)
    trained = criterion(z, None, index, training=True).loss
    torch.testing.assert_close(trained, _expected(z, torch.zeros(6, 6, dtype=torch.bool)))


def test_a_memory_does_not_switch_the_guard_off():
    # with a memory the batch's loss was computed without its rows: no content guard
    z = _batch(1)
    keys = torch.tensor([[0, 1], [2, 3], [4, 5], [0, 1], [6, 7], [8, 9]])
    loss = SymmetricInfoNCE(0.2, false_negatives=FalseNegativeGuard())
    with_memory = ContrastiveCriterion(loss, memory=CrossBatchMemory(12, weight=0.0),
                                       n_samples=6, row_keys=keys)
    plain = ContrastiveCriterion(loss, row_keys=keys)
    index = torch.arange(6)
    got = with_memory(z, None, index, remember=True).loss
    torch.testing.assert_close(got, plain(z, None, index).loss)
    exclude = torch.zeros(6, 6, dtype=torch.bool)
    exclude[0, 3] = exclude[3, 0] = True
    torch.testing.assert_close(got, _expected(z, exclude))


@pytest.mark.parametrize("structure", ["pairs", "single", "crops"])
def test_one_step_reads_every_structure(structure):
    from skcontrast.losses import SupCon

    g = torch.Generator().manual_seed(2)
    z = torch.randn(6, 2, 4, generator=g) if structure != "single" else torch.randn(6, 4)
    y = torch.tensor([0, 0, 1, 1, 2, 2])
    loss = SupCon(0.3) if structure != "pairs" else SymmetricInfoNCE(0.3)
    got = loss.batch_terms(LossBatch(z, structure, y if structure != "pairs" else None)).loss
    if structure == "pairs":
        expected = loss(z[:, 0], z[:, 1])
    elif structure == "crops":
        expected = loss(z.reshape(12, 4), y.repeat_interleave(2))
    else:
        expected = loss(z, y)
    torch.testing.assert_close(got, expected)
    assert np.isfinite(float(got))
