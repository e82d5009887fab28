"""Input checks shared by every entry point (skcontrast/_validation.py)."""

import numpy as np
import pytest

from skcontrast import SupConEmbedder
from skcontrast._validation import check_labels, label_kind
from skcontrast.losses import (
    DCL,
    DebiasedNCE,
    HardNegativeNCE,
    SigLIP,
    SymmetricInfoNCE,
)


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


@pytest.mark.parametrize("kind", [np.float32, np.float64, np.float16, np.int64])
def test_numpy_scalars_are_accepted_for_float_settings(kind):
    from skcontrast.selectors import (
        BcSSelector,
        CommunityBatchSelector,
        RandomWalkBatchSelector,
        ShuffledBatchSelector,
        TemperedSelector,
    )

    X = np.random.default_rng(0).normal(size=(16, 2, 4))
    half = kind(0.5) if kind is not np.int64 else kind(0)
    DebiasedNCE(tau_plus=half if kind is not np.int64 else kind(0)).check()
    HardNegativeNCE(beta=kind(1), tau_plus=half).check()
    SymmetricInfoNCE(temperature=kind(1), lambda_pos=kind(1)).check()
    DCL(lambda_ent=kind(2)).check()
    SigLIP(bias=kind(-3)).check()
    for selector in (TemperedSelector(ShuffledBatchSelector(4, random_state=0),
                                      random_share=half, random_state=0),
                     RandomWalkBatchSelector(4, n_candidates=5, n_neighbours=2,
                                             restart=half, random_state=0),
                     CommunityBatchSelector(4, p=1, q=3, resolution=kind(1), random_state=0),
                     BcSSelector(4, random_fraction=half, random_state=0)):
        assert sorted(np.concatenate(list(selector.split(X))).tolist()) == list(range(16))


@pytest.mark.parametrize("bad", [True, "0.5", None, float("nan")])
def test_what_is_not_a_finite_number_is_still_refused_by_name(bad):
    from skcontrast.selectors import ShuffledBatchSelector, TemperedSelector

    with pytest.raises(ValueError, match="tau_plus must be a number in"):
        DebiasedNCE(tau_plus=bad).check()
    with pytest.raises(ValueError, match="random_share must be a number in"):
        list(TemperedSelector(ShuffledBatchSelector(4), random_share=bad).split(np.zeros((8, 2))))
