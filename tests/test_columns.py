"""A ``datasets.Dataset`` of array columns, read by the rows a batch needs."""

import numpy as np
import pytest
import torch
from _helpers import peak_anonymous_memory

from skcontrast import ContrastiveEmbedder
from skcontrast._estimators._columns import ArrowColumns, arrow_array
from skcontrast.datasets import make_paired_gaussians
from skcontrast.selectors import SpectralBatchSelector

datasets = pytest.importorskip("datasets")

SMALL = {"n_components": 3, "hidden_layer_sizes": (8,), "max_epochs": 2, "batch_size": 16,
         "random_state": 0}


def pairs(n=64, d=4, seed=0):
    X, _ = make_paired_gaussians(n, d, random_state=seed)
    return X.astype(np.float32)


def as_dataset(X, *names):
    names = names or ("a", "b")
    return datasets.Dataset.from_dict({name: X[:, i] for i, name in enumerate(names)})


@pytest.mark.parametrize("params", [
    {},
    {"validation_fraction": 0.25},
    {"selector": SpectralBatchSelector(16), "batch_size": None},
    {"selection_pass": "cached", "selector": SpectralBatchSelector(16), "batch_size": None},
], ids=["shuffled", "held-out", "spectral", "cached"])
def test_a_dataset_of_array_columns_gives_the_model_of_the_same_arrays_in_memory(params):
    """Read batch by batch from Arrow (never whole), the rows train the model the same
    arrays train as a dict in memory, exactly."""
    X = pairs()
    arrow = ContrastiveEmbedder(**{**SMALL, **params}).fit(as_dataset(X))
    memory = ContrastiveEmbedder(**{**SMALL, **params}).fit({"a": X[:, 0], "b": X[:, 1]})
    assert arrow.input_spec_ == memory.input_spec_
    np.testing.assert_array_equal(arrow.transform(as_dataset(X)),
                                  memory.transform({"a": X[:, 0]}))
    assert arrow.history_[-1, "train_loss"] == memory.history_[-1, "train_loss"]


def test_a_selected_or_shuffled_dataset_is_read_through_its_indices():
    X = pairs()
    order = np.random.default_rng(0).permutation(len(X))
    shuffled = as_dataset(X).select(order)
    arrow = ContrastiveEmbedder(**SMALL).fit(shuffled)
    memory = ContrastiveEmbedder(**SMALL).fit({"a": X[order, 0], "b": X[order, 1]})
    np.testing.assert_array_equal(arrow.transform(shuffled), memory.transform({"a": X[order, 0]}))


def test_hard_negative_columns_and_any_column_order_after_fit():
    X = pairs()
    negatives = np.roll(X[:, 1], 1, axis=0)
    table = datasets.Dataset.from_dict({"a": X[:, 0], "b": X[:, 1], "n": negatives})
    arrow = ContrastiveEmbedder(**SMALL).fit(table)
    memory = ContrastiveEmbedder(**SMALL).fit({"a": X[:, 0], "b": X[:, 1], "n": negatives})
    assert arrow.input_spec_ == memory.input_spec_ and arrow.input_spec_.negatives == 1
    expected = memory.transform({"a": X[:, 0]})
    for columns in (["a"], ["b", "a"], ["n", "b", "a"]):
        np.testing.assert_array_equal(arrow.transform(table.select_columns(columns)),
                                      expected)
    with pytest.raises(ValueError, match="'c'"):
        arrow.transform(as_dataset(X, "c", "b"))


@pytest.mark.parametrize(("make", "match"), [
    (lambda X: {"a": np.where(np.arange(64)[:, None] == 40, np.nan, X[:, 0]), "b": X[:, 1]},
     r"column 'a' contains 4 NaN or infinite value\(s\), the first column 'a', row 40"),
    (lambda X: {"a": X[:, 0].astype(np.float64) * np.where(
        np.arange(64)[:, None] == 9, 1e300, 1), "b": X[:, 1]},
     r"column 'a', row 9 \(value 0 of the row\) is .*beyond the float32 range"),
    (lambda X: {"a": [list(r) for r in X[:63, 0]] + [[1.0]], "b": X[:, 1]},
     r"column 'a' holds arrays of shape \(4,\) \(row 0\) and \(1,\) \(row 63\)"),
    (lambda X: {"a": X[:, 0]}, r"two views"),
])
def test_bad_columns_are_refused_naming_the_column_and_the_row(make, match):
    with pytest.raises(ValueError, match=match):
        ContrastiveEmbedder(**SMALL).fit(datasets.Dataset.from_dict(make(pairs())))


def test_rows_come_back_in_the_order_asked_whatever_the_order_read():
    X = pairs(40)
    data = ArrowColumns(as_dataset(X), (("a",), ("b",)))
    rows = np.array([7, 3, 39, 0, 12])
    a, b = data.read(rows)
    np.testing.assert_array_equal(a.numpy(), X[rows, 0])
    np.testing.assert_array_equal(b.numpy(), X[rows, 1])
    part = data.subset(np.array([5, 1]))
    np.testing.assert_array_equal(part.read(np.array([1, 0]))[0].numpy(), X[[1, 5], 0])
    assert part.fingerprint() != data.fingerprint()
    assert data.fingerprint() == ArrowColumns(as_dataset(X), (("a",), ("b",))).fingerprint()


def test_nested_lists_read_as_one_array_per_row():
    import pyarrow as pa

    values = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    column = pa.array([[list(r) for r in item] for item in values])
    np.testing.assert_array_equal(arrow_array(column, 2, "column 'x'"), values)
    with pytest.raises(ValueError, match="must hold numbers"):
        arrow_array(pa.array([["a"], ["b"]]), 2, "column 'x'")


@pytest.mark.slow
def test_a_fit_on_an_arrow_dataset_on_disk_never_reads_it_whole(tmp_path):
    """The columns were read whole into NumPy (+392 MiB above the process for an epoch
    over 1M pairs, 244 MiB of data); now by the rows of each batch: the issue's bar,
    200 MB + a quarter of the data."""
    import pyarrow as pa

    n, width, chunk = 600_000, 32, 50_000
    rng = np.random.default_rng(0)
    tables = []
    for _ in range(0, n, chunk):
        z = rng.normal(size=(chunk, width)).astype(np.float32)
        noisy = z + np.float32(0.1) * rng.normal(size=z.shape).astype(np.float32)
        tables.append(pa.table({
            name: pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), width)
            for name, v in (("a", z), ("b", noisy))}))
    datasets.Dataset(pa.concat_tables(tables)).save_to_disk(str(tmp_path / "pairs"))
    del tables
    data = datasets.Dataset.load_from_disk(str(tmp_path / "pairs"))
    size = n * 2 * width * 4
    est = ContrastiveEmbedder(max_epochs=1, batch_size=1024, hidden_layer_sizes=(64,),
                              n_components=16, random_state=0)
    grown, _ = peak_anonymous_memory(lambda: est.fit(data))
    assert grown < 200 * 2**20 + size / 4, grown / 2**20
    grown, out = peak_anonymous_memory(lambda: est.transform(data))
    assert out.shape == (n, 16)
    assert grown < out.nbytes + 200 * 2**20, (grown / 2**20, out.nbytes / 2**20)
    assert torch.isfinite(torch.from_numpy(out)).all()


def test_transform_view_reads_a_one_column_dataset_by_batch_as_fit_does():
    X = pairs()
    est = ContrastiveEmbedder(**SMALL).fit(as_dataset(X))
    for view, i in (("a", 0), ("b", 1)):
        column = as_dataset(X).select_columns([view])
        np.testing.assert_array_equal(est.transform_view(column, view=view),
                                      est.transform_view(X[:, i], view=view))
    with pytest.raises(ValueError, match=r"must have the columns seen in fit, \['b'\]"):
        est.transform_view(as_dataset(X).select_columns(["a"]), view="b")


def test_an_encoder_with_a_prior_is_told_it_starts_from_its_defaults():
    """Its prior reads every row (the text bag's IDF weights): not taken from an Arrow
    dataset read by batch, and a warning says so rather than drop it silently."""
    from skcontrast.text import NgramBagEncoder

    ids = np.random.default_rng(0).integers(1, 50, size=(64, 2, 6))
    table = datasets.Dataset.from_dict({"a": ids[:, 0], "b": ids[:, 1]})
    est = ContrastiveEmbedder(**{**SMALL, "max_epochs": 1},
                              module=NgramBagEncoder(64, 8, weighting="idf"))
    with pytest.warns(UserWarning, match="NgramBagEncoder starts from statistics"):
        est.fit(table)
    weights = est.net_.module_.encoders[0].id_weights
    assert torch.equal(weights, torch.ones_like(weights))  # its defaults, as said


def test_array_features_read_as_n_d_arrays_per_row():
    """datasets' ``Array2D`` columns (an Arrow extension type) were refused as not
    numbers; they read as one (3, 4) array per row, the model of the same arrays."""
    X = np.random.default_rng(0).normal(size=(32, 2, 3, 4)).astype(np.float32)
    features = datasets.Features({c: datasets.Array2D((3, 4), "float32") for c in "ab"})
    table = datasets.Dataset.from_dict({"a": X[:, 0], "b": X[:, 1]}, features=features)
    arrow = ContrastiveEmbedder(**SMALL).fit(table)
    memory = ContrastiveEmbedder(**SMALL).fit({"a": X[:, 0], "b": X[:, 1]})
    assert arrow.input_spec_.views[0].shape == (3, 4)
    np.testing.assert_array_equal(arrow.transform(table), memory.transform({"a": X[:, 0]}))


def test_one_column_of_arrays_is_single_views_in_every_table_form():
    """A table of one column of arrays was refused for single views (SupCon's, or
    augmented ones): it is the array of them, read by batch from Arrow, by name after
    fit; the same model from the array, a DataFrame or a dataset."""
    import pandas as pd

    from skcontrast import SupConEmbedder

    X, y = make_paired_gaussians(64, 4, n_clusters=4, random_state=0)
    X = X[:, 0].astype(np.float32)
    table = datasets.Dataset.from_dict({"a": X})
    frame = pd.DataFrame({"a": list(X)})
    models = [SupConEmbedder(**SMALL).fit(data, y) for data in (X, frame, table)]
    assert models[2].input_spec_.views[0].name == "a"
    for model, data in zip(models, (X, frame, table), strict=True):
        np.testing.assert_array_equal(model.transform(data), models[0].transform(X))
    with pytest.raises(ValueError, match=r"columns seen in fit, \['a'\]; got \['b'\]"):
        models[2].transform(table.rename_column("a", "b"))
    with pytest.raises(ValueError, match=r"single views: a table of one column of arrays; "
                                         r"got columns \['a', 'b'\]"):
        SupConEmbedder(**SMALL).fit(as_dataset(pairs()), y)


def test_training_batches_are_read_one_ahead_in_the_selectors_order():
    """On the CPU an Arrow dataset's training batches are read one batch ahead in a
    thread (its reads overlap the step): the same batches, in the same order, as the
    sampler's epoch read in turn; a read that fails fails the epoch."""
    from skcontrast._estimators._batches import selected_batches
    from skcontrast._estimators._columns import ReadAhead
    from skcontrast.selectors import SelectorSampler, ShuffledBatchSelector

    X = pairs(50)
    data = ArrowColumns(as_dataset(X), (("a",), ("b",)))
    sampler = SelectorSampler(ShuffledBatchSelector(8, random_state=0), 50)
    batches = selected_batches(data, 8, plan=None, device=torch.device("cpu"),
                               sampler=sampler)
    assert isinstance(batches, ReadAhead) and len(batches) == 7
    twin = SelectorSampler(ShuffledBatchSelector(8, random_state=0), 50)
    for _ in range(2):  # each pass the next epoch
        expected = [data.gather_rows(rows, batch) for rows, batch in twin.selections()]
        got = list(batches)
        assert [b.index.tolist() for b in got] == [b.index.tolist() for b in expected]
        for a, b in zip(got, expected, strict=True):
            assert torch.equal(a.views[0], b.views[0]) and torch.equal(a.views[1], b.views[1])
            np.testing.assert_array_equal(a.views[0].numpy(), X[a.index.numpy(), 0])

    class Failing(ArrowColumns):
        def gather_rows(self, rows, batch):
            if 0 in rows:
                raise ValueError("row 0 is unreadable")
            return super().gather_rows(rows, batch)

    failing = Failing(as_dataset(X), (("a",), ("b",)))
    with pytest.raises(ValueError, match="row 0 is unreadable"):
        list(failing.batches(SelectorSampler(ShuffledBatchSelector(8, random_state=0), 50)))


def test_a_model_fitted_without_names_reads_a_dataset_by_position_as_a_frame():
    """The in-memory table warned that a model fitted on an array reads a table's
    columns by position; the Arrow read took the column silently. Both warn now."""
    import pandas as pd

    from skcontrast import SupConEmbedder

    X, y = make_paired_gaussians(64, 4, n_clusters=4, random_state=0)
    X = X[:, 0].astype(np.float32).reshape(64, 2, 2)  # N-D single views: the array form
    est = SupConEmbedder(**SMALL).fit(X, y)
    assert est.input_spec_.form == "array" and est.input_spec_.views[0].name == 0
    for table in (datasets.Dataset.from_dict({"a": X}), pd.DataFrame({"a": list(X)})):
        with pytest.warns(UserWarning, match="fitted without column names"):
            np.testing.assert_array_equal(est.transform(table), est.transform(X))


# --------------------------------------------------------------------------------------
# text columns, tokenized a batch at a time
# --------------------------------------------------------------------------------------

WORDS = ["cat", "dog", "sky", "blue", "red", "car", "runs", "fast", "sat", "tree"]


def texts(n=96, seed=0):
    rng = np.random.default_rng(seed)
    anchors = [" ".join(rng.choice(WORDS, size=rng.integers(2, 7))) for _ in range(n)]
    return {"anchor": anchors, "positive": [a + " " + rng.choice(WORDS) for a in anchors],
            "negative": [" ".join(rng.choice(WORDS, size=3)) for _ in range(n)]}


@pytest.mark.parametrize("columns", [("anchor", "positive"), ("anchor", "positive",
                                                              "negative")])
@pytest.mark.parametrize("params", [{}, {"validation_fraction": 0.25},
                                    {"selector": SpectralBatchSelector(16),
                                     "batch_size": None}], ids=["shuffled", "held-out",
                                                                "spectral"])
def test_text_columns_give_the_model_of_the_same_texts_in_memory(columns, params,
                                                                 monkeypatch):
    """Texts are tokenized by batch and never read whole (the table's reader of whole
    columns is not called), the text bag's IDF prior counted in one pass a chunk at a
    time: the same spec and the same model as the same table in memory."""
    import pandas as pd

    import skcontrast._estimators._forms._table as table

    rows = texts()
    memory = pd.DataFrame({c: rows[c] for c in columns})
    params = {**SMALL, "hidden_layer_sizes": (), **params}
    held = ContrastiveEmbedder(**params).fit(memory)
    dataset = datasets.Dataset.from_dict({c: rows[c] for c in columns})
    with monkeypatch.context() as patch:
        patch.setattr(table, "table_columns", lambda *a, **k: pytest.fail("read whole"))
        est = ContrastiveEmbedder(**params).fit(dataset)
        assert est.input_spec_ == held.input_spec_
        np.testing.assert_array_equal(est.transform(dataset), held.transform(rows["anchor"]))
        reordered = dataset.select_columns(["positive", "anchor"])
        np.testing.assert_array_equal(est.transform(reordered), est.transform(dataset))
        one = datasets.Dataset.from_dict({"positive": rows["positive"]})
        np.testing.assert_array_equal(est.transform_view(one, view="positive"),
                                      held.transform_view(rows["positive"], view="positive"))
    assert [r["train_loss"] for r in est.history_] == [r["train_loss"] for r in held.history_]


@pytest.mark.parametrize(("anchors", "match"), [
    (["a cat"] * 5 + [None] + ["a dog"] * 10, r"column 'anchor' holds a missing text at row 5"),
    (["a cat"] * 6 + [""] + ["a dog"] * 9, r"column 'anchor', row 6 \(''\) yields no token"),
])
def test_a_bad_text_is_refused_naming_the_column_and_row(anchors, match):
    dataset = datasets.Dataset.from_dict({"anchor": anchors, "positive": ["a b c"] * 16})
    with pytest.raises(ValueError, match=match):
        ContrastiveEmbedder(**SMALL).fit(dataset)
