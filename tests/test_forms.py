"""The table of input forms (skcontrast/_estimators/_forms.py): every form is recognised
once, and tables of columns (pandas DataFrames, Hugging Face datasets) read as the form
their columns spell."""

import warnings

import numpy as np
import pytest
from _helpers import small_mlp
from hypothesis import given, settings
from hypothesis import strategies as st

from skcontrast import ContrastiveEmbedder, SupConEmbedder
from skcontrast._estimators._forms import FORMS, form_of_input

pd = pytest.importorskip("pandas")
datasets = pytest.importorskip("datasets")

ROWS = [("thumbs up", "daumen hoch", "daumen runter"),
        ("red heart", "rotes herz", "blaues herz"),
        ("cat face", "katzengesicht", "hundegesicht"),
        ("dog face", "hundegesicht", "katzengesicht"),
        ("man running", "laufender mann", "laufende frau"),
        ("woman running", "laufende frau", "laufender mann"),
        ("flag germany", "flagge deutschland", "flagge frankreich"),
        ("flag france", "flagge frankreich", "flagge deutschland")]
COLUMNS = ["anchor", "positive", "negative"]
SMALL = {"max_epochs": 2, "random_state": 0, "n_components": 8, "hidden_layer_sizes": (16,),
         "batch_size": 4}


def frame():
    return pd.DataFrame(ROWS, columns=COLUMNS)


def hf_dataset():
    return datasets.Dataset.from_dict({c: [r[i] for r in ROWS] for i, c in enumerate(COLUMNS)})


def test_every_form_is_recognised_by_one_entry():
    import torch

    def rows():
        yield np.zeros(2), np.zeros(2)

    cases = {"stream": rows, "text": [("a b", "c d")], "table": frame(),
             "dict": {"a": np.zeros((3, 2)), "b": np.zeros((3, 2))},
             "dataset": torch.utils.data.TensorDataset(torch.zeros(3, 2)),
             "image": np.zeros((3, 1, 8, 8)), "array": np.zeros((3, 2, 4, 4)),
             "flat": np.zeros((3, 4))}
    assert [f.name for f in FORMS] == list(cases)
    for name, X in cases.items():
        assert form_of_input(X, single=False).name == name
    assert form_of_input(np.zeros((3, 2, 4)), single=False).name == "flat"  # float pairs
    assert form_of_input(np.zeros((3, 2, 4), dtype=np.int64), single=False).name == "array"


@pytest.mark.parametrize("make", [frame, hf_dataset], ids=["DataFrame", "datasets.Dataset"])
def test_a_table_of_text_columns_trains_as_its_rows_with_the_negative_column(make):
    table = make()
    est = ContrastiveEmbedder(**SMALL).fit(table)
    rows = ContrastiveEmbedder(**SMALL).fit(ROWS)
    spec = est.input_spec_
    assert spec.form == "text" and [v.name for v in spec.views] == ["anchor", "positive"]
    assert spec.negatives == 1 and spec.negative_names == ("negative",)
    anchors = [r[0] for r in ROWS]
    np.testing.assert_allclose(est.transform(anchors), rows.transform(anchors), atol=1e-6)
    # after fit: the same table, its first columns, or plain strings
    np.testing.assert_array_equal(est.transform(table), est.transform(anchors))
    np.testing.assert_array_equal(est.transform(pd.DataFrame({"anchor": anchors})),
                                  est.transform(anchors))
    positives = pd.DataFrame({"positive": [r[1] for r in ROWS]})
    np.testing.assert_array_equal(est.transform_view(positives, view="positive"),
                                  est.transform_view([r[1] for r in ROWS], view=1))
    assert est.score(table) == est.score(ROWS)


@pytest.mark.parametrize("kind", ["DataFrame", "datasets.Dataset"])
def test_supcon_takes_a_table_of_one_text_column_and_the_labels(kind):
    names = [r[0] for r in ROWS] + [r[1] for r in ROWS]
    texts = pd.DataFrame({"name": names}) if kind == "DataFrame" else \
        datasets.Dataset.from_dict({"name": names})
    y = np.tile(np.arange(8), 2)
    est = SupConEmbedder(**SMALL).fit(texts, y)
    assert est.transform(texts).shape == (16, 8)
    np.testing.assert_array_equal(est.transform(texts), est.transform(names))
    assert est.score(texts, y) == est.score(names, y)
    with pytest.raises(ValueError, match=r"takes single texts: a table of one text column; "
                                         r"got columns \['anchor', 'positive', 'negative'\]"):
        SupConEmbedder(**SMALL).fit(frame(), np.arange(8))


@pytest.mark.parametrize(("edit", "match"), [
    (lambda t: t.assign(score=np.arange(8.0)), r"column 'score' is numeric but column "
                                               r"'anchor' is text"),
    (lambda t: t.assign(label=np.arange(8)), r"has a label column 'label': pass the labels"),
    (lambda t: t.assign(negative=[None, *t["negative"][1:]]),
     r"column 'negative' mixes strings with a missing value \(row 0\)"),
    (lambda t: t.assign(anchor=[*t["anchor"][:3], "  ", *t["anchor"][4:]]),
     r"X\[3, 0\] is an empty string"),
])
def test_a_bad_column_is_refused_by_name(edit, match):
    with pytest.raises(ValueError, match=match):
        ContrastiveEmbedder(**SMALL).fit(edit(frame()))


def test_later_tables_must_have_the_columns_seen_in_fit():
    est = ContrastiveEmbedder(**SMALL).fit(frame())
    with pytest.raises(ValueError, match=r"X must have the text columns seen in fit, "
                                         r"\['anchor', 'positive'\], then optionally "
                                         r"the hard-negative columns \['negative'\] .*got "
                                         r"\['positive'\]: missing \['anchor'\]"):
        est.transform(frame()[["positive"]])
    # read by name: in another order, the same columns
    np.testing.assert_array_equal(est.transform(frame()[["positive", "anchor"]]),
                                  est.transform(frame()[["anchor", "positive"]]))
    with pytest.raises(ValueError, match=r"fitted on flat input, not text; got a table of "
                                         r"text columns \['anchor', 'positive', 'negative'\]"):
        ContrastiveEmbedder(**SMALL).fit(np.random.default_rng(0).normal(
            size=(8, 2, 3))).transform(frame())


def test_a_numeric_dataframe_stays_scikit_learns_features():
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(16, 6)), columns=[f"f{i}" for i in range(6)])
    est = ContrastiveEmbedder(**SMALL).fit(X)
    assert est.input_spec_.form == "flat" and est.n_features_in_ == 6
    assert list(est.feature_names_in_) == list(X.columns)
    np.testing.assert_array_equal(est.transform(X), est.transform(X.to_numpy()))


def test_a_dataset_of_vector_columns_is_two_views_and_negatives():
    rng = np.random.default_rng(1)
    image, text = rng.normal(size=(12, 5)), rng.normal(size=(12, 3))
    data = datasets.Dataset.from_dict({"image": image.tolist(), "text": text.tolist(),
                                       "hard": text[::-1].tolist()})
    est = ContrastiveEmbedder(**SMALL).fit(data)
    assert est.input_spec_.form == "dict" and est.input_spec_.negative_names == ("hard",)
    as_dict = {"image": image.astype(np.float32), "text": text.astype(np.float32)}
    np.testing.assert_allclose(est.transform(data), est.transform(as_dict), atol=1e-6)


SMALL_EDGES = small_mlp()


def test_nested_lists_of_pairs_are_the_array_they_spell():
    from skcontrast.datasets import load_digit_views

    X, _ = load_digit_views()
    X = X[:64]
    as_lists = ContrastiveEmbedder(**SMALL_EDGES).fit(X.tolist())
    as_array = ContrastiveEmbedder(**SMALL_EDGES).fit(X)
    np.testing.assert_allclose(as_lists.transform(X.tolist()), as_array.transform(X),
                               atol=1e-6)


def test_an_odd_width_is_split_with_a_warning():
    X = np.random.default_rng(0).normal(size=(64, 63))
    with pytest.warns(UserWarning, match=r"odd number of columns \(63\).*view 0 gets columns "
                                         r"\[:31\] and view 1 the other 32.*view_split"):
        ContrastiveEmbedder(**SMALL_EDGES).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ContrastiveEmbedder(view_split=31, **SMALL_EDGES).fit(X)


# --------------------------------------------------------------------------------------
# Every table form, read by column name (skcontrast/_tables.py)
# --------------------------------------------------------------------------------------

TINY = {"max_epochs": 1, "random_state": 0, "n_components": 4, "hidden_layer_sizes": (8,),
        "batch_size": 8}
FEATURES = np.random.default_rng(3).normal(size=(16, 4))
NAMES = ["f0", "f1", "f2", "f3"]
VECTORS = {"image": FEATURES[:, :2], "caption": FEATURES[:, 2:]}
TEXTS = [(a, b) for a, b, _ in ROWS] * 2


def numeric_forms(columns):
    """The same numeric columns as every table form (names kept, in this order)."""
    def arrays(v):
        return [np.asarray(r) for r in v] if np.ndim(v) > 1 else list(v)

    data = {c: np.asarray(v) for c, v in columns.items()}
    dataset = datasets.Dataset.from_dict({c: v.tolist() for c, v in data.items()})
    return {"DataFrame": pd.DataFrame({c: arrays(v) for c, v in data.items()}),
            "Dataset": dataset, "Dataset (torch)": dataset.with_format("torch"),
            "Dataset (arrow)": dataset.with_format("arrow"),
            "Dataset (numpy)": dataset.with_format("numpy"),
            "row dicts": [dict(zip(data, row, strict=True))
                          for row in zip(*(arrays(v) for v in data.values()), strict=True)]}


def text_forms(columns):
    rows = list(zip(*columns.values(), strict=True))
    return {"list": rows, "array": np.array(rows), "Series": pd.Series(rows),
            "dict": {c: list(v) for c, v in columns.items()},
            "DataFrame": pd.DataFrame(columns), "Dataset": datasets.Dataset.from_dict(
                {c: list(v) for c, v in columns.items()}),
            "row dicts": [dict(zip(columns, r, strict=True)) for r in rows]}


KINDS = {
    "features": (lambda: {"array": FEATURES, **numeric_forms(dict(zip(NAMES, FEATURES.T,
                                                                      strict=True)))},
                 NAMES),
    "views": (lambda: {"dict": VECTORS, **numeric_forms(VECTORS)}, list(VECTORS)),
    "text": (lambda: text_forms({"anchor": [a for a, _ in TEXTS],
                                 "positive": [b for _, b in TEXTS]}), ["anchor", "positive"]),
}


@pytest.fixture(scope="module", params=list(KINDS))
def fitted_forms(request):
    """Each form of one kind of data, and a model fitted on each."""
    make, names = KINDS[request.param]
    forms = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # odd widths are not at stake here
        models = {form: ContrastiveEmbedder(**TINY).fit(X) for form, X in forms.items()}
    return request.param, forms, models, names


def test_the_same_data_in_every_form_gives_the_same_model(fitted_forms):
    _, forms, models, _ = fitted_forms
    reference = next(iter(forms.values()))
    expected = next(iter(models.values())).transform(reference)
    for form, model in models.items():
        np.testing.assert_allclose(model.transform(reference), expected, atol=1e-6,
                                   err_msg=form)
        for other, X in forms.items():
            np.testing.assert_allclose(model.transform(X), expected, atol=1e-6,
                                       err_msg=f"fitted on {form}, given {other}")


def reordered(X, order):
    """The table ``X`` with its columns in ``order`` (names; a new name renames)."""
    if isinstance(X, list):
        return [{c: row[c] if c in row else next(iter(row.values())) for c in order}
                for row in X]
    if isinstance(X, dict):
        return {c: X[c] if c in X else next(iter(X.values())) for c in order}
    if hasattr(X, "iloc"):
        return pd.DataFrame({c: X[c] if c in X else X.iloc[:, 0] for c in order})
    plain = X.with_format(None)
    return datasets.Dataset.from_dict({c: plain[c][:] if c in plain.column_names else
                                       plain[plain.column_names[0]][:] for c in order}
                                      ).with_format(X.format["type"])


@given(data=st.data())
@settings(max_examples=40)
def test_a_table_in_another_column_order_is_the_same_model_or_refused_naming_it(
        fitted_forms, data):
    kind, forms, models, names = fitted_forms
    tables = [f for f, X in forms.items() if f not in ("list", "array", "Series")]
    fitted_on = data.draw(st.sampled_from(list(models)), label="fitted on")
    given_as = data.draw(st.sampled_from(tables), label="given as")
    order = data.draw(st.lists(st.sampled_from([*names, "renamed"]), min_size=1,
                               max_size=len(names) + 1, unique=True), label="columns")
    model, X = models[fitted_on], forms[given_as]
    expected = model.transform(forms[given_as])
    table = reordered(X, order)
    # read by name in any order: views (and text) their first columns alone, features
    # every column; a column needs every column before it
    known = [c for c in order if c in names]
    needed = names if kind == "features" else names[:max(map(names.index, known)) + 1] \
        if known else names[:1]
    problems = [c for c in order if c not in names] + [c for c in needed if c not in order]
    unnamed = fitted_on in ("list", "array", "Series")
    if unnamed and kind == "text":  # fitted without names: read by position
        first = names.index(order[0]) if order[0] in names else 0
        with pytest.warns(UserWarning, match="fitted without column names"):
            if len(order) > len(names):
                with pytest.raises(ValueError, match="rows of 3 texts; the model was fitted "
                                                     "on 2 per item"):
                    model.transform(table)
            else:
                np.testing.assert_allclose(model.transform(table), model.transform(
                    [r[first] for r in TEXTS]), atol=1e-6)
    elif unnamed:  # scikit-learn's features without names: by position, warned
        with pytest.warns(UserWarning, match="feature names"):
            if len(order) == len(names):
                model.transform(table)
            else:
                with pytest.raises(ValueError, match=f"X has {len(order)} features, but "):
                    model.transform(table)
    elif not problems:
        np.testing.assert_allclose(model.transform(table), expected, atol=1e-6)
    else:
        with pytest.raises(ValueError) as info:
            model.transform(table)
        assert any(repr(c) in str(info.value) for c in problems), str(info.value)


def test_a_numeric_table_of_any_form_is_read_by_column_name():
    """A Dataset given reversed columns read them by position (embeddings differed by
    0.54), and a DataFrame's model given a Dataset only warned."""
    frame_model = ContrastiveEmbedder(**TINY).fit(pd.DataFrame(FEATURES, columns=NAMES))
    dataset = datasets.Dataset.from_dict({c: FEATURES[:, i] for i, c in enumerate(NAMES)})
    dataset_model = ContrastiveEmbedder(**TINY).fit(dataset)
    assert list(dataset_model.feature_names_in_) == NAMES
    backwards = datasets.Dataset.from_dict({c: FEATURES[:, i]
                                            for i, c in reversed(list(enumerate(NAMES)))})
    for model in (frame_model, dataset_model):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            np.testing.assert_array_equal(model.transform(backwards),
                                          model.transform(dataset))
            np.testing.assert_array_equal(model.transform(dataset),
                                          model.transform(pd.DataFrame(FEATURES,
                                                                       columns=NAMES)))
        renamed = pd.DataFrame(FEATURES, columns=["f0", "f1", "f2", "g3"])
        with pytest.raises(ValueError, match=r"must have the columns seen in fit, \['f0', "
                                             r"'f1', 'f2', 'f3'\]; got \['f0', 'f1', 'f2', "
                                             r"'g3'\]: columns not seen in fit \['g3'\] and "
                                             r"missing \['f3'\]"):
            model.transform(renamed)


def test_rows_of_dicts_a_series_and_any_dataset_format_are_read():
    rows = [{"anchor": a, "positive": b} for a, b in TEXTS]
    est = ContrastiveEmbedder(**TINY).fit(rows)
    assert [v.name for v in est.input_spec_.views] == ["anchor", "positive"]
    np.testing.assert_allclose(est.transform(pd.Series([a for a, _ in TEXTS])),
                               ContrastiveEmbedder(**TINY).fit(TEXTS).transform(
                                   [a for a, _ in TEXTS]), atol=1e-6)
    names = pd.Series([a for a, _ in TEXTS] + [b for _, b in TEXTS])
    y = np.tile(np.arange(len(TEXTS)), 2)
    assert SupConEmbedder(**TINY).fit(names, y).transform(names).shape == (len(names), 4)
    vectors = datasets.Dataset.from_dict({c: v.tolist() for c, v in VECTORS.items()})
    for fmt in ("torch", "arrow", "numpy", "pandas"):
        ContrastiveEmbedder(**TINY).fit(vectors.with_format(fmt))


@pytest.mark.parametrize(("make", "match"), [
    (lambda: datasets.Dataset.from_dict({"a": [[1.0, 2.0]] * 7 + [[1.0]],
                                         "b": [[1.0, 2.0]] * 8}),
     r"column 'a' holds arrays of shape \(2,\) \(row 0\) and \(1,\) \(row 7\)"),
    (lambda: datasets.Dataset.from_dict({"a": [1.0] * 8}).to_iterable_dataset(),
     r"needs two views, but X has 1 feature"),  # a stream of one column of numbers
    (lambda: [{"anchor": "a b", "positive": "c d"}] * 3 + [{"anchor": "a b"}],
     r"X\[3\] has the columns \['anchor'\], X\[0\] has \['anchor', 'positive'\] \(it lacks "
     r"\['positive'\]\)"),
    (lambda: pd.DataFrame({"a": [np.zeros(2)] * 3 + [None], "b": [np.zeros(2)] * 4}),
     r"column 'a' holds a missing value at row 3"),
])
def test_a_table_no_form_reads_is_refused_naming_the_column_or_row(make, match):
    with pytest.raises(ValueError, match=match):
        ContrastiveEmbedder(**TINY).fit(make())


def test_transform_view_reads_a_one_column_table_of_arrays_as_fit_does():
    frame = pd.DataFrame({c: list(v) for c, v in VECTORS.items()})
    est = ContrastiveEmbedder(**TINY).fit(frame)
    for view, values in VECTORS.items():
        np.testing.assert_array_equal(est.transform_view(frame[[view]], view=view),
                                      est.transform_view(values, view=view))
    with pytest.raises(ValueError, match=r"X_view must have the columns seen in fit, "
                                         r"\['image'\]; got \['caption'\]"):
        est.transform_view(frame[["caption"]], view="image")


def _reversed_views():
    """Arrays that are views with negative strides, beside their contiguous copies: rows
    or columns reversed, as ``X[::-1]``, ``X[:, ::-1]`` and ``df[cols[::-1]].to_numpy()``
    give them (torch cannot view them)."""
    rng = np.random.default_rng(0)
    flat = rng.normal(size=(16, 6)).astype(np.float32)
    pairs = rng.normal(size=(16, 2, 3)).astype(np.float32)
    images = rng.integers(0, 256, size=(16, 1, 8, 8), dtype=np.uint8)
    frame = pd.DataFrame(flat, columns=[f"f{i}" for i in range(6)])
    return {"rows of a 2-D array": flat[::-1], "columns of a 2-D array": flat[:, ::-1],
            "rows of pairs": pairs[::-1], "features of pairs": pairs[:, :, ::-1],
            "image rows": images[::-1], "image columns": images[..., ::-1],
            "a DataFrame's columns": frame[list(frame.columns)[::-1]].to_numpy(),
            "a dict's views": {"a": flat[::-1, :3], "b": flat[::-1, 3:]}}


@pytest.mark.parametrize("name", list(_reversed_views()))
def test_arrays_with_negative_strides_read_as_their_contiguous_copies(name):
    X = _reversed_views()[name]
    copy = {k: np.ascontiguousarray(v) for k, v in X.items()} if isinstance(X, dict) \
        else np.ascontiguousarray(X)
    est = ContrastiveEmbedder(**TINY).fit(X)
    np.testing.assert_array_equal(est.transform(X),
                                  ContrastiveEmbedder(**TINY).fit(copy).transform(copy))
