"""Selectors as a PyTorch batch sampler (skcontrast/selectors/_sampler.py): a plain loop,
PyTorch Lightning, Hugging Face's Trainer, and data-parallel ranks."""

import importlib.util
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from _helpers import requires_cuda
from torch import nn
from torch.utils.data import DataLoader, Dataset

from skcontrast.datasets import make_paired_gaussians
from skcontrast.losses import (
    SymmetricInfoNCE,
)
from skcontrast.selectors import (
    BatchSelector,
    OSGDSelector,
    SelectorSampler,
    ShuffledBatchSelector,
    SpectralBatchSelector,
)

ROOT = Path(__file__).resolve().parents[1]


class Pairs(Dataset):
    """Items ``(index, x0, x1)``: the index lets a loop push embeddings back."""

    def __init__(self, X):
        self.X = torch.as_tensor(X, dtype=torch.float32)

    def __len__(self):
        return len(self.X)

    def __getitem__(self, i):
        return i, self.X[i, 0], self.X[i, 1]


class Encoder(nn.Module):
    def __init__(self, d=6, k=4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, 16), nn.ReLU(), nn.Linear(16, k))

    def forward(self, x0, x1):
        return torch.stack([self.net(x0), self.net(x1)], dim=1)


@pytest.fixture(scope="module")
def X():
    return make_paired_gaussians(64, 6, n_clusters=4, random_state=0)[0]


def embedder(model, X):
    data = torch.as_tensor(X, dtype=torch.float32)

    def embed(indices):
        with torch.no_grad():
            return model(data[indices, 0], data[indices, 1]).numpy()

    return embed


# --------------------------------------------------------------------------------------
# A plain loop
# --------------------------------------------------------------------------------------

def test_a_plain_loop_trains_on_the_selectors_batches_refreshed_every_epoch(X):
    torch.manual_seed(0)
    model, loss = Encoder(), SymmetricInfoNCE(0.2)
    sampler = SelectorSampler(SpectralBatchSelector(16, random_state=0), len(X),
                              embed=embedder(model, X), loss=loss)
    loader = DataLoader(Pairs(X), batch_sampler=sampler)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    seen = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for index, x0, x1 in loader:
            z = model(x0, x1)
            loss(z[:, 0], z[:, 1]).backward()
            optimizer.step()
            optimizer.zero_grad()
            seen.append(sorted(index.tolist()))
    assert sampler.refreshes == 3
    assert len(seen) == 12 and all(len(b) == 16 for b in seen)
    for epoch in range(3):  # every epoch a partition of the samples
        assert sorted(i for b in seen[4 * epoch:4 * epoch + 4] for i in b) == list(range(64))


def test_pushed_embeddings_are_what_the_next_epoch_selects_on(X):
    """The loop pushes what its steps computed; OSGD keeps a quarter of the batches, so
    the samples no step embedded are embedded by the callback."""
    torch.manual_seed(0)
    model = Encoder()
    calls = []

    def embed(indices):
        calls.append(len(indices))
        return embedder(model, X)(indices)

    sampler = SelectorSampler(OSGDSelector(8, k=4, q=1, random_state=0), len(X), embed=embed,
                              selection_pass=100)
    for _ in range(3):
        for index, x0, x1 in DataLoader(Pairs(X), batch_sampler=sampler):
            with torch.no_grad():
                sampler.update(index, model(x0, x1))
    assert calls[0] == 64 and len(calls) == 1  # pushed rows cover the rest afterwards
    assert sampler.embeddings.shape == (64, 2, 4) and sampler.epoch == 3


def test_set_epoch_replays_the_epochs_and_the_sampler_pickles(X):
    def batches(sampler, epoch):
        sampler.set_epoch(epoch)
        return [list(b) for b in sampler]

    one = SelectorSampler(ShuffledBatchSelector(16, random_state=3), len(X))
    first, second = batches(one, 0), batches(one, 1)
    again = pickle.loads(pickle.dumps(one))
    assert batches(again, 1) == second and batches(again, 0) == first != second
    assert len(one) == 4


def test_ranks_get_their_slices_of_the_same_global_batches(X):
    slices = []
    for rank in range(3):
        sampler = SelectorSampler(ShuffledBatchSelector(15, random_state=0), len(X),
                                  num_replicas=3, rank=rank)
        slices.append(list(sampler))
    whole = list(SelectorSampler(ShuffledBatchSelector(15, random_state=0), len(X)))
    for k, batch in enumerate(whole):
        assert [i for s in slices for i in s[k]][:len(batch)] == batch


def test_bad_input_is_refused_by_name(X):
    with pytest.raises(ValueError, match="selector must be a BatchSelector"):
        SelectorSampler("spectral", 10)
    with pytest.raises(ValueError, match="have none: give SelectorSampler an embed"):
        list(SelectorSampler(SpectralBatchSelector(4), 8))
    with pytest.raises(ValueError, match="num_replicas and rank go together"):
        SelectorSampler(ShuffledBatchSelector(4), 8, num_replicas=2)
    with pytest.raises(ValueError, match=r"indices must lie in \[0, 8\)"):
        SelectorSampler(ShuffledBatchSelector(4), 8).update([9], np.zeros((1, 3)))


def test_update_refuses_indices_outside_the_table_for_tensors_too():
    sampler = SelectorSampler(ShuffledBatchSelector(4), 8)
    sampler.update(np.arange(8), np.zeros((8, 3)))
    for bad in (torch.tensor([-1]), torch.tensor([8]), np.array([-1])):
        with pytest.raises(ValueError, match=r"indices must lie in \[0, 8\); got .*\(a "
                                             r"negative index does not count from the end"):
            sampler.update(bad, torch.ones(1, 3))
    for bad in (torch.tensor([1.0]), np.array([1.5]), torch.tensor([True])):
        with pytest.raises(ValueError, match="indices must be integer sample indices"):
            sampler.update(bad, torch.ones(1, 3))
    assert not sampler.embeddings.any(), "no row was written"
    sampler.update([], np.zeros((0, 3)))  # an empty update is nothing to refuse


def test_an_index_outside_the_table_on_a_device_is_refused_when_the_table_is_read(monkeypatch):
    """On a GPU the check stays on the device (no wait at every step): the table is
    refused where the sampler reads it back, at the next selection at the latest."""
    from skcontrast.selectors import _tables

    monkeypatch.setattr(_tables, "_reads_at_once", lambda device: False)
    sampler = SelectorSampler(OSGDSelector(4, k=2, q=1, random_state=0), 8)
    sampler.update(torch.arange(8), torch.zeros(8, 3))
    assert sampler.embeddings.shape == (8, 3)
    sampler.update(torch.tensor([2, -1]), torch.ones(2, 3))
    for read in (lambda: sampler.embeddings, sampler.embedding_state, lambda: list(sampler)):
        with pytest.raises(ValueError, match=r"update was given indices outside \[0, 8\)"):
            read()


@requires_cuda
@pytest.mark.gpu
def test_an_index_tensor_on_the_gpu_outside_the_table_is_refused_at_the_next_selection():
    sampler = SelectorSampler(OSGDSelector(4, k=2, q=1, random_state=0), 8)
    sampler.update(torch.arange(8, device="cuda"), torch.zeros(8, 3, device="cuda"))
    sampler.update(torch.tensor([-1, 8], device="cuda"), torch.ones(2, 3, device="cuda"))
    with pytest.raises(ValueError, match=r"update was given indices outside \[0, 8\) on cuda"):
        list(sampler)


class OwnSelector(BatchSelector):
    """A selector of one's own: the batches it is given, every epoch."""

    def __init__(self, batches=(), disjoint=True):
        self.batches = batches
        self.disjoint = disjoint

    @property
    def partitions(self):
        return self.disjoint

    def _select(self, X, y, groups, rng):
        return list(self.batches)

    def _n_batches(self, n, y):
        return len(self.batches)


@pytest.mark.parametrize("batches, message", [
    ([], r"OwnSelector made no batch for epoch 0 of n=10 samples: an epoch needs at least "
         "one batch of two samples"),
    ([[0], [1]], r"OwnSelector made 2 batch\(es\) of fewer than two samples for epoch 0"),
    ([[0, 1], [2, 3, 2, 4]], r"batch 1 of OwnSelector's epoch 0 repeats sample\(s\) \[2\]"),
    ([[0, 1], [4, 10]], r"batch 1 of OwnSelector's epoch 0 holds indices outside \[0, 10\): "
                        r"\[4, 10\]$"),
    ([[-1, 2]], r"batch 0 of OwnSelector's epoch 0 holds indices outside \[0, 10\): "
                r"\[-1, 2\] \(a negative index does not count from the end\)"),
    ([np.array([0.0, 1.0])], r"batch 0 of OwnSelector's epoch 0 must hold integer indices "
                             r"of samples, as a 1-D array; got ndarray .*float64 \(floats "
                             r"are not"),
    ([np.array([[0, 1]])], r"batch 0 of OwnSelector's epoch 0 must hold integer indices "
                           r"of samples, as a 1-D array"),
], ids=["empty epoch", "only lone batches", "repeat", "beyond n", "negative", "float",
        "2-D"])
def test_the_sampler_checks_the_batches_of_a_selector_of_ones_own(batches, message):
    with pytest.raises(ValueError, match=message):
        list(SelectorSampler(OwnSelector(batches), 10))


def test_a_selector_that_says_its_batches_overlap_may_repeat_a_sample():
    batches = [[0, 1, 1, 2], [2, 3]]  # as ClassBalancedSelector(small_classes='repeat')
    assert list(SelectorSampler(OwnSelector(batches, disjoint=False), 4)) == batches
    assert list(SelectorSampler(OwnSelector([[0, 1], [1, 2]]), 4)) == [[0, 1], [1, 2]]


def test_a_fit_names_the_batch_a_selector_of_ones_own_got_wrong():
    from skcontrast import ContrastiveEmbedder

    X, _ = make_paired_gaussians(10, 4, random_state=0)
    est = ContrastiveEmbedder(n_components=2, hidden_layer_sizes=(4,), max_epochs=1,
                              selector=OwnSelector([[0, 1, 2], [3, 4, 12]]))
    with pytest.raises(ValueError, match=r"batch 1 of OwnSelector's epoch 0 holds indices "
                                         r"outside \[0, 10\)"):
        est.fit(X)


def test_a_loop_of_ones_own_skips_lone_batches_and_hears_of_low_coverage_once(X):
    sampler = SelectorSampler(OwnSelector([[0, 1, 2], [3], []]), len(X))
    with pytest.warns(UserWarning) as seen:
        epochs = [list(sampler) for _ in range(2)]
    assert epochs == [[[0, 1, 2]]] * 2
    messages = [str(w.message) for w in seen]
    assert len(messages) == 2
    assert "OwnSelector made 2 batch(es) of a single sample (or none) in epoch 0 of n=64" \
        in messages[0]
    assert "OwnSelector's batches of this epoch cover 3 of the 64 training samples" \
        in messages[1]


# --------------------------------------------------------------------------------------
# PyTorch Lightning and Hugging Face's Trainer
# --------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("lightning") is None,
                    reason="needs PyTorch Lightning (pip install lightning)")
def test_a_lightning_module_trains_on_the_selectors_batches(X, tmp_path):
    import lightning as L

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.encoder, self.loss = Encoder(), SymmetricInfoNCE(0.2)
            self.sampler = SelectorSampler(SpectralBatchSelector(16, random_state=0),
                                           len(X), embed=embedder(self.encoder, X))

        def training_step(self, batch, _):
            _, x0, x1 = batch
            z = self.encoder(x0, x1)
            return self.loss(z[:, 0], z[:, 1])

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-2)

        def train_dataloader(self):
            return DataLoader(Pairs(X), batch_sampler=self.sampler)

    module = Module()
    trainer = L.Trainer(max_epochs=3, accelerator="cpu", logger=False, enable_progress_bar=False,
                        enable_checkpointing=False, enable_model_summary=False,
                        use_distributed_sampler=False, default_root_dir=tmp_path)
    trainer.fit(module)
    assert trainer.global_step == 12 and module.sampler.refreshes == 3


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                    reason="needs transformers (pip install transformers)")
def test_a_hugging_face_trainer_trains_on_the_selectors_batches(X, tmp_path):
    from transformers import Trainer, TrainingArguments

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder, self.loss = Encoder(), SymmetricInfoNCE(0.2)

        def forward(self, index, x0, x1):
            z = self.encoder(x0, x1)
            return {"loss": self.loss(z[:, 0], z[:, 1])}

    def collate(items):
        index, x0, x1 = zip(*items, strict=True)
        return {"index": torch.tensor(index), "x0": torch.stack(x0), "x1": torch.stack(x1)}

    model = Model()
    sampler = SelectorSampler(SpectralBatchSelector(16, random_state=0), len(X),
                              embed=embedder(model.encoder, X))

    class SelectorTrainer(Trainer):
        def get_train_dataloader(self):
            return DataLoader(Pairs(X), batch_sampler=sampler, collate_fn=collate)

    args = TrainingArguments(output_dir=str(tmp_path), num_train_epochs=3, report_to=[],
                             use_cpu=True, save_strategy="no", logging_strategy="no",
                             disable_tqdm=True, learning_rate=1e-2)
    state = SelectorTrainer(model=model, args=args, train_dataset=Pairs(X)).train()
    assert state.global_step == 12 and sampler.refreshes == 3


# --------------------------------------------------------------------------------------
# Two processes (gloo)
# --------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("accelerate") is None,
                    reason="the two-process launch needs the 'distributed' extra")
def test_two_processes_train_on_slices_of_the_same_global_batches(two_process_results):
    """In conftest's two-process launch (tests/scripts/distributed_fit.py): each
    process's sampler iterates its slices, and gathered they are one process's global
    batches, epoch after epoch."""
    assert two_process_results["world"] == 2
    assert two_process_results["results"]["sampler slices"] is True


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("world", [2, 3, 4])
def test_every_rank_gets_a_non_empty_slice_of_equal_size(world, drop_last):
    from skcontrast.selectors import SelectorSampler, ShuffledBatchSelector

    n = 22  # batches of 8, 8, 6: remainders for every world size here
    per_rank = [list(SelectorSampler(ShuffledBatchSelector(8, random_state=0), n,
                                     num_replicas=world, rank=r, drop_last=drop_last))
                for r in range(world)]
    whole = list(SelectorSampler(ShuffledBatchSelector(8, random_state=0), n))
    assert all(len(p) == len(whole) for p in per_rank)
    for step, batch in enumerate(whole):
        parts = [p[step] for p in per_rank]
        assert len({len(part) for part in parts}) == 1 and parts[0]
        joined = [i for part in parts for i in part]
        if drop_last and len(batch) >= world:
            assert joined == batch[:len(batch) - len(batch) % world]
        else:
            assert joined[:len(batch)] == batch and set(joined) == set(batch)


def test_a_batch_size_below_the_number_of_ranks_is_refused():
    from skcontrast.selectors import SelectorSampler, ShuffledBatchSelector

    with pytest.raises(ValueError, match="batch size 2 is below the number of processes 3"):
        SelectorSampler(ShuffledBatchSelector(2), 10, num_replicas=3, rank=0)


def test_refresh_every_is_a_deprecated_name_of_selection_pass(X):
    for old, new in ((1, "fresh"), (None, "cached"), (5, 5)):
        with pytest.warns(FutureWarning, match="refresh_every=.... is deprecated: it is "
                                               "selection_pass"):
            sampler = SelectorSampler(ShuffledBatchSelector(16), len(X), refresh_every=old)
        assert sampler.selection_pass == new
    for bad in (0, -1, "x", 1.5, True):  # refused by the name the user gave
        with pytest.warns(FutureWarning), pytest.raises(
                ValueError, match=r"refresh_every must be None or an int >= 1 \(it is "
                                  r"deprecated: use selection_pass="):
            SelectorSampler(ShuffledBatchSelector(16), len(X), refresh_every=bad)


def test_a_loss_given_as_a_function_is_read_each_time_the_sampler_selects():
    """A sampler given ``loss`` as a function calls it at each selection (the loss as
    it is then: a learned temperature changes between epochs), so nothing has to set
    the sampler's loss from outside."""
    X, _ = make_paired_gaussians(32, 4, random_state=0)
    seen = []

    class Recording(OSGDSelector):
        def epoch_batches(self, X, y=None, *, loss=None, **kwargs):
            seen.append(loss)
            return super().epoch_batches(X, y, loss=loss, **kwargs)

    temperatures = iter([0.5, 0.2])
    sampler = SelectorSampler(Recording(8, k=3, q=2, random_state=0), 32,
                              embed=lambda rows: X[rows, 0],
                              loss=lambda: SymmetricInfoNCE(next(temperatures)))
    for _ in range(2):
        assert len(list(sampler)) > 0
    assert [loss.temperature for loss in seen] == [0.5, 0.2]
    fixed = SymmetricInfoNCE(0.3)
    assert SelectorSampler(OSGDSelector(8), 32, loss=fixed).current_loss() is fixed
