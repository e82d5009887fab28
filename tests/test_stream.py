"""Streams read a window at a time (skcontrast._estimators._stream, the stream form)."""

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from skorch.callbacks import Callback

from skcontrast import ContrastiveEmbedder, Stream, SupConEmbedder
from skcontrast._estimators._forms import read_fit_input, read_input
from skcontrast._estimators._stream import StreamViews, _shuffled
from skcontrast.memory import CrossBatchMemory, SogCLRMemory
from skcontrast.selectors import (
    CommunityBatchSelector,
    ExhaustiveBatchSelector,
    FixedBatchSelector,
    FullBatchSelector,
    JESTSelector,
    OSGDSelector,
    PredefinedBatchSelector,
    RandomWalkBatchSelector,
    SelectorSampler,
    ShuffledBatchSelector,
    SpectralBatchSelector,
    TemperedSelector,
)

pytest.importorskip("datasets")


def pairs(n=128, d=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2, d)).astype(np.float32)
    X[:, 1] += X[:, 0]
    return X


def rows_of(X):
    """A generator function over the rows of ``X``, as pairs."""
    def rows():
        for row in X:
            yield row[0], row[1]
    return rows


class TorchRows(torch.utils.data.IterableDataset):
    def __init__(self, X):
        self.X = X

    def __iter__(self):
        for row in self.X:
            yield torch.from_numpy(row[0]), torch.from_numpy(row[1])


def hf_rows(X):
    import datasets

    return datasets.Dataset.from_dict({"a": X[:, 0], "b": X[:, 1]}).to_iterable_dataset()


class Batches(Callback):
    """The training batches' row positions, per epoch."""

    def initialize(self):
        self.epochs = []
        return self

    def on_epoch_begin(self, net, **kwargs):
        self.epochs.append([])

    def on_batch_begin(self, net, batch=None, training=None, **kwargs):
        if training:
            self.epochs[-1].append(batch.index.numpy().copy())


def fit(X, X_val=None, **params):
    params = {"max_epochs": 2, "batch_size": 16, "random_state": 0, **params}
    return ContrastiveEmbedder(**params).fit(X, X_val=X_val)


# --------------------------------------------------------------------------------------
# a stream whose window holds every row is the same rows in memory
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("source", ["generator", "torch", "hf"])
@pytest.mark.parametrize("window", [8, 20])  # the rows exactly, and more
def test_a_stream_in_one_window_gives_the_model_of_the_same_rows_in_memory(source, window):
    X = pairs()
    given = {"generator": rows_of(X), "torch": TorchRows(X), "hf": hf_rows(X)}[source]
    memory = {"a": X[:, 0], "b": X[:, 1]} if source == "hf" else X
    streamed = fit(Stream(given, window=window))
    held = fit(memory)
    np.testing.assert_array_equal(streamed.transform(memory), held.transform(memory))
    assert [r["train_loss"] for r in streamed.history_] == \
        [r["train_loss"] for r in held.history_]


@pytest.mark.parametrize("selector", [
    SpectralBatchSelector(16), OSGDSelector(16, k=20, q=4), CommunityBatchSelector(16),
    RandomWalkBatchSelector(16), TemperedSelector(SpectralBatchSelector(16), random_share=0.5),
], ids=lambda s: type(s).__name__)
def test_an_adaptive_selector_on_one_window_chooses_as_on_the_rows_in_memory(selector):
    X = pairs(96)
    streamed = fit(Stream(rows_of(X), window=6), selector=selector)
    held = fit(X, selector=selector)
    np.testing.assert_array_equal(streamed.transform(X), held.transform(X))


# --------------------------------------------------------------------------------------
# windows
# --------------------------------------------------------------------------------------

def window_epoch(X, selector, window, batch_size, seed=0):
    """One epoch's batches of a stream of ``X`` (positions in the pass) and the windows'
    bounds, selected on random embeddings, as a fit selects them."""
    est = ContrastiveEmbedder(batch_size=batch_size)
    first, spec, _ = read_fit_input(est, X[:2], single=False)
    rows = window * batch_size
    data = StreamViews(Stream(rows_of(X), window=window), spec,
                       lambda chunk: read_input(est, chunk, spec), rows, first,
                       batch_size=batch_size)
    fitted = selector(batch_size).set_params(random_state=seed)
    sampler = SelectorSampler(fitted, rows)
    rng = np.random.default_rng(seed)
    embed = lambda i, w: rng.normal(size=(len(i), 2, 4)).astype(np.float32)  # noqa: E731
    bounds = []

    def read(window_data, window_sampler):
        bounds.append(len(window_data))
        return window_data.batches(window_sampler)

    batches = [b.index.numpy() for b in data.epoch_batches(sampler, embed, read, seed)]
    return batches, np.cumsum([0, *bounds])


SELECTORS = {  # by batch size
    "shuffled": ShuffledBatchSelector,
    "spectral": SpectralBatchSelector,
    "osgd": lambda b: OSGDSelector(b, k=12, q=3),
    "community": lambda b: CommunityBatchSelector(b, p=0, q=1),
    "walk": RandomWalkBatchSelector,
    "tempered": lambda b: TemperedSelector(SpectralBatchSelector(b), random_share=0.3),
}
COVERS_ALL = {"shuffled", "spectral", "community", "tempered"}


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(sorted(SELECTORS)), n=st.integers(9, 90),
       window=st.integers(1, 4), batch_size=st.integers(2, 9), seed=st.integers(0, 99))
def test_each_windows_batches_keep_the_selectors_invariants_within_the_window(
        name, n, window, batch_size, seed):
    """Every batch lies inside one window; a partitioning selector's batches of a window
    are disjoint, and cover it where the selector covers the set (the whole-set
    properties, per window); no row of the stream is lost between windows."""
    batches, bounds = window_epoch(pairs(n, 3, seed), SELECTORS[name], window,
                                   batch_size, seed)
    assert bounds[-1] == n  # every row read, a short tail joined to the window before
    assert all(bounds[1:] - bounds[:-1] >= batch_size)
    for lo, hi in itertools.pairwise(bounds):
        inside = [b for b in batches if lo <= b.min() < hi]
        assert all(b.max() < hi for b in inside)
        flat = np.concatenate(inside)
        assert len(np.unique(flat)) == len(flat)
        if name in COVERS_ALL:
            np.testing.assert_array_equal(np.sort(flat), np.arange(lo, hi))


def test_a_tail_shorter_than_a_batch_joins_the_window_before():
    batches, bounds = window_epoch(pairs(39, 3), ShuffledBatchSelector, 2, 8)
    assert bounds.tolist() == [0, 16, 39]
    np.testing.assert_array_equal(np.sort(np.concatenate(batches)), np.arange(39))


def test_a_fit_reads_at_most_a_window_ahead_of_training():
    """The memory a stream's fit holds is a window, whatever the stream's length: the
    rows read never run more than a window (and the batch of rows that tells whether a
    short tail is left) ahead of the batch training."""
    X = pairs(400, 4)
    read = [0]

    def rows():
        read[0] = 0  # rows read in this pass
        for row in X:
            read[0] += 1
            yield row[0], row[1]

    class Ahead(Callback):
        def initialize(self):
            self.most = 0
            return self

        def on_batch_begin(self, net, batch=None, training=None, **kwargs):
            if training:
                self.most = max(self.most, read[0] - int(batch.index.min()))

    ahead = Ahead()
    fit(Stream(rows, window=2), callbacks=[ahead], max_epochs=1)
    assert 0 < ahead.most <= 2 * 16 + 16


def test_steps_per_epoch_continues_the_stream_and_reads_an_endless_one():
    X = pairs(200, 4)
    record = Batches()
    fit(Stream(rows_of(X), window=1, steps_per_epoch=3), callbacks=[record], max_epochs=2)
    first, second = (np.concatenate(e) for e in record.epochs)
    assert len(first) == len(second) == 48
    assert not set(first) & set(second)  # the second epoch goes on where the first stopped

    def endless():
        return itertools.cycle((row[0], row[1]) for row in X)

    est = fit(Stream(endless, window=2, steps_per_epoch=5), max_epochs=3)
    assert [r["n_batches"] for r in est.history_] == [5, 5, 5]


def test_a_shuffle_buffer_permutes_the_rows_seeded():
    rows = list(range(50))
    once = list(_shuffled(iter(rows), 10, np.random.default_rng([0, 1])))
    assert sorted(once) == rows and once != rows
    assert once == list(_shuffled(iter(rows), 10, np.random.default_rng([0, 1])))
    record = Batches()
    X = pairs(64, 4)
    fit(Stream(rows_of(X), window=4, shuffle_buffer=32), callbacks=[record])
    a, b = record.epochs
    assert not all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_a_warm_start_continues_the_selection_rounds():
    X = pairs(64, 4)
    est = ContrastiveEmbedder(max_epochs=2, batch_size=16, random_state=0, warm_start=True)
    est.fit(Stream(rows_of(X), window=2))
    rounds = est.net_.selector.current_epoch
    est.fit(Stream(rows_of(X), window=2))
    assert len(est.history_) == 4 and est.net_.selector.current_epoch == 2 * rounds == 8


# --------------------------------------------------------------------------------------
# what trains on a stream, and what is refused
# --------------------------------------------------------------------------------------

def test_curation_and_a_cross_batch_memory_train_on_a_stream():
    X = pairs(96, 4)
    est = fit(Stream(rows_of(X), window=2), selector=JESTSelector(16, score="hard"))
    assert all(r["n_batches"] > 0 for r in est.history_)
    est = fit(Stream(rows_of(X), window=2), memory=CrossBatchMemory(32))
    assert np.isfinite(est.history_[-1]["train_loss"])


def test_held_out_rows_are_given_in_memory():
    X = pairs(96, 4)
    est = fit(Stream(rows_of(X), window=2), X_val=pairs(32, 4, seed=1))
    assert all(np.isfinite(r["valid_loss"]) for r in est.history_)


def test_text_and_dict_rows_stream():
    texts = [("a cat sat", "cat sat a"), ("dog runs fast", "fast dog runs"),
             ("blue sky", "sky blue"), ("red car", "car red")] * 8
    streamed = fit(Stream(texts, window=2))
    held = fit(texts)
    np.testing.assert_array_equal(streamed.transform(texts), held.transform(texts))
    X = pairs(64, 4)
    rows = [{"q": r[0], "d": r[1]} for r in X]
    streamed = fit(Stream(rows, window=4))
    held = fit({"q": X[:, 0], "d": X[:, 1]})
    np.testing.assert_array_equal(streamed.transform({"q": X[:, 0], "d": X[:, 1]}),
                                  held.transform({"q": X[:, 0], "d": X[:, 1]}))


def test_transform_of_a_stream_is_the_transform_of_its_rows(tmp_path):
    X = pairs(100, 4)
    est = fit(X)
    expected = est.transform(X)
    np.testing.assert_array_equal(est.transform(Stream(rows_of(X), window=1)), expected)
    out = np.lib.format.open_memmap(tmp_path / "e.npy", "w+", np.float32, expected.shape)
    assert est.transform(Stream(rows_of(X), window=1), out=out) is out
    np.testing.assert_array_equal(out, expected)
    with pytest.raises(ValueError, match="out has 99 rows; the stream holds more"):
        est.transform(Stream(rows_of(X)), out=np.zeros((99, expected.shape[1]), np.float32))
    with pytest.raises(ValueError, match="out has 101 rows; the stream holds 100"):
        est.transform(Stream(rows_of(X)), out=np.zeros((101, expected.shape[1]), np.float32))


@pytest.mark.parametrize("params, match", [
    ({"selector": FullBatchSelector()}, "FullBatchSelector cannot select inside"),
    ({"selector": ExhaustiveBatchSelector(4)}, "every B-subset"),
    ({"selector": FixedBatchSelector(16)}, "reuses one partition"),
    ({"selector": PredefinedBatchSelector([[0, 1]])}, "no index of"),
    ({"selector": TemperedSelector(ShuffledBatchSelector(16), refresh_every=2)},
     "refresh_every=2"),
    ({"memory": SogCLRMemory()}, "SogCLRMemory keeps a moving average per training row"),
    ({"selector": SpectralBatchSelector(16), "selection_pass": "cached"},
     "selection_pass='fresh'"),
    ({"validation_fraction": 0.2}, "pass held-out rows as X_val"),
])
def test_what_needs_every_row_is_refused_naming_why(params, match):
    with pytest.raises(ValueError, match=match):
        ContrastiveEmbedder(max_epochs=1, **params).fit(Stream(rows_of(pairs(32, 4))))


def test_bad_streams_are_refused_naming_what_to_pass():
    X = pairs(32, 4)
    with pytest.raises(ValueError, match="one-shot iterator"):
        ContrastiveEmbedder().fit(rows_of(X)())
    with pytest.raises(ValueError, match="stream has no y"):
        SupConEmbedder().fit(rows_of(X), np.zeros(32))
    with pytest.raises(ValueError, match="a stream trains without y"):
        ContrastiveEmbedder().fit(rows_of(X), np.zeros(32))
    with pytest.raises(ValueError, match="gave no row"):
        ContrastiveEmbedder().fit(Stream([]))
    with pytest.raises(ValueError, match="window must be"):
        Stream(rows_of(X), window=0)
    ragged = [(np.zeros(4), np.zeros(4))] * 5 + [(np.zeros(4), np.zeros(3))]
    with pytest.raises(ValueError, match="row 5 of this window"):
        ContrastiveEmbedder().fit(Stream(ragged))
