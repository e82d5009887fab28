"""The table of input forms (skcontrast/_estimators/_forms.py): every form is recognised
once, and tables of columns (pandas DataFrames, Hugging Face datasets) read as the form
their columns spell."""

import warnings

import numpy as np
import pytest

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

    cases = {"text": [("a b", "c d")], "table": frame(), "dict": {"a": np.zeros((3, 2)),
                                                                  "b": np.zeros((3, 2))},
             "dataset": torch.utils.data.TensorDataset(torch.zeros(3, 2)),
             "array": np.zeros((3, 2, 4, 4)), "flat": np.zeros((3, 4))}
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
    with pytest.raises(ValueError, match=r"X must have the text columns seen in fit, in "
                                         r"order: \['anchor', 'positive'\], then optionally "
                                         r"the hard-negative columns \['negative'\] .*got "
                                         r"\['positive', 'anchor'\]"):
        est.transform(frame()[["positive", "anchor"]])
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


SMALL_EDGES = {"n_components": 4, "hidden_layer_sizes": (16,), "max_epochs": 2, "lr": 1e-2,
         "random_state": 0, "device": "cpu"}


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
