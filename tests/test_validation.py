"""Input checks shared by every entry point (skcontrast/_validation.py)."""

import numpy as np
import pytest

from skcontrast import SupConEmbedder
from skcontrast._validation import check_labels, label_kind


def test_bytes_and_str_labels_are_different_kinds():
    assert label_kind(np.array([b"a"])) == "bytes"
    assert label_kind(np.array([b"a"], dtype=object)) == "bytes"
    assert label_kind(np.array(["a"])) == "str"
    with pytest.raises(ValueError, match=r"holds str labels but .* fitted on bytes labels"):
        check_labels(np.array(["a", "b"]), like=np.array([b"a", b"b"]))


def test_a_model_fitted_on_bytes_refuses_str_labels_instead_of_scoring_zero():
    rng = np.random.default_rng(0)
    y = np.array([b"x", b"y"] * 20)
    X = rng.normal(size=(40, 4)).astype(np.float32) + (y == b"x")[:, None]
    est = SupConEmbedder(n_components=3, hidden_layer_sizes=(8,), max_epochs=2,
                         random_state=0, device="cpu").fit(X, y)
    assert est.score(X, y) > 0.5
    with pytest.raises(ValueError, match="fitted on bytes labels"):
        est.score(X, y.astype(str))
