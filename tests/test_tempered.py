"""Tests of ``skcontrast.selectors._tempered``: the hardness dial (share of hard batches),
warm-up and refresh, a teacher in place of the embeddings, and exact resumption."""


import numpy as np
import pytest
import torch
from _helpers import brute_top, clustered_data, random_data
from sklearn.base import clone

from skcontrast import ContrastiveEmbedder
from skcontrast.datasets import make_paired_embeddings
from skcontrast.losses import (
    SymmetricInfoNCE,
)
from skcontrast.selectors import (
    CommunityBatchSelector,
    ShuffledBatchSelector,
    SpectralBatchSelector,
    TemperedSelector,
)


def _selectors():
    from skcontrast import selectors

    return selectors


@pytest.mark.parametrize("adaptive", [False, True])
def test_a_tempered_refresh_period_resumes_exactly(adaptive):
    s = _selectors()
    X = np.random.default_rng(0).normal(size=(48, 2, 6))
    base = s.SpectralBatchSelector(8, random_state=0) if adaptive else \
        s.ShuffledBatchSelector(8, random_state=0)

    def make():
        return s.TemperedSelector(clone(base), refresh_every=3, warmup_epochs=1,
                                  random_share=0.25, exclude_neighbours=2, random_state=0)

    whole = make()
    epochs = [[b.tolist() for b in whole.split(X)] for _ in range(7)]
    for stop in (2, 3, 5):  # the middle of a period, its last epoch, the middle of the next
        first = make()
        for _ in range(stop):
            list(first.split(X))
        resumed = make().set_epoch(stop)
        if adaptive:  # an adaptive base's choice travels with the state
            resumed.load_state_dict(first.state_dict())
        assert [[b.tolist() for b in resumed.split(X)] for _ in range(stop, 7)] == \
            epochs[stop:]


B = 16


def test_zero_share_is_the_selector_and_the_share_sets_the_hardness():
    X, _ = clustered_data(768)
    plain = SpectralBatchSelector(batch_size=B, random_state=0).epoch_batches(X)
    same = TemperedSelector(SpectralBatchSelector(batch_size=B, random_state=0),
                            random_state=1).epoch_batches(X)
    assert all(np.array_equal(p, q) for p, q in zip(plain, same, strict=True))

    means, moved = [], []
    for share in (0.0, 0.5, 1.0):
        sel = TemperedSelector(SpectralBatchSelector(batch_size=B, random_state=0),
                               random_share=share, random_state=1)
        batches = sel.epoch_batches(X)
        means.append(np.mean(SymmetricInfoNCE().score_batches(X, batches)))
        moved.append(np.mean([np.mean(p != q) for p, q in zip(plain, batches, strict=True)]))
    assert means[0] > means[1] > means[2]
    assert moved[0] == 0 and abs(moved[1] - 0.5) < 0.08 and moved[2] > 0.9


def test_warmup_and_refresh_need_embeddings_only_when_choosing():
    X, y = clustered_data()
    sel = TemperedSelector(SpectralBatchSelector(batch_size=B, random_state=0),
                           warmup_epochs=2, refresh_every=3, random_state=0)
    needs, epochs = [], []
    for _ in range(7):
        needs.append(sel.needs_embeddings)
        epochs.append(sel.epoch_batches(X if needs[-1] else np.zeros((len(X), 1)), y))
    assert needs == [False, False, True, False, False, True, False]
    as_sets = [{frozenset(b.tolist()) for b in e} for e in epochs]
    assert as_sets[2] == as_sets[3] == as_sets[4] != as_sets[5]
    assert as_sets[0] != as_sets[1]  # warm-up epochs are fresh shuffles
    assert sel.get_n_splits(X) == len(epochs[-1])


def test_a_teacher_chooses_instead_of_the_embeddings():
    X, _ = clustered_data()
    teacher = clustered_data(seed=4)[0][:, 0]
    sel = TemperedSelector(SpectralBatchSelector(batch_size=B, random_state=0),
                           teacher=teacher, exclude_neighbours=2)
    assert not sel.needs_embeddings
    got = sel.epoch_batches(np.zeros((len(X), 1)))
    want = SpectralBatchSelector(batch_size=B, random_state=0).epoch_batches(teacher)
    top = brute_top(teacher[:, None].repeat(2, 1), 2)
    where = np.empty(len(X), int)
    for i, b in enumerate(got):
        where[b] = i
    assert all(where[j] != where[i] for i in range(len(X)) for j in top[i])
    unguarded = TemperedSelector(SpectralBatchSelector(batch_size=B, random_state=0),
                                 teacher=teacher).epoch_batches(X)
    assert all(np.array_equal(p, q) for p, q in zip(unguarded, want, strict=True))
    with pytest.raises(ValueError, match="teacher embeds 10 samples"):
        TemperedSelector(ShuffledBatchSelector(), teacher=teacher[:10]).epoch_batches(X)


@pytest.mark.parametrize("bad, match", [({"random_share": 1.5}, "random_share"),
                                        ({"refresh_every": 0}, "refresh_every"),
                                        ({"exclude_neighbours": -1}, "exclude_neighbours"),
                                        ({"base_selector": "spectral"}, "base_selector")])
def test_tempered_selector_rejects_bad_parameters(bad, match):
    X, _ = random_data(64)
    params = {"base_selector": ShuffledBatchSelector(batch_size=B), **bad}
    with pytest.raises(ValueError, match=match):
        TemperedSelector(**params).epoch_batches(X)


def test_every_knob_is_a_grid_parameter_of_an_estimator():
    from sklearn.model_selection import GridSearchCV


    X, y = make_paired_embeddings(160, 6, n_groups=4, random_state=0)
    est = ContrastiveEmbedder(
        hidden_layer_sizes=(16,), n_components=4, max_epochs=2, random_state=0,
        selector=TemperedSelector(CommunityBatchSelector(batch_size=B, p=2, q=8)))
    grid = GridSearchCV(est, {"selector__random_share": [0.0, 1.0],
                              "selector__warmup_epochs": [0, 1],
                              "selector__max_same_label": [None, 6],
                              "selector__base_selector__q": [8]}, cv=2)
    grid.fit(X, y)
    assert len(grid.cv_results_["params"]) == 8
    assert np.isfinite(grid.cv_results_["mean_test_score"]).all()


def test_a_teacher_spares_the_estimator_its_embedding_pass(monkeypatch):
    from skcontrast._estimators._net import SelectorNet

    X, _ = make_paired_embeddings(128, 6, n_groups=4, random_state=0)
    calls = []
    original = SelectorNet.selection_embeddings

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SelectorNet, "selection_embeddings", counted)
    spectral = SpectralBatchSelector(batch_size=B, random_state=0)
    common = {"hidden_layer_sizes": (16,), "n_components": 4, "max_epochs": 3,
              "random_state": 0}
    ContrastiveEmbedder(selector=TemperedSelector(clone(spectral)), **common).fit(X)
    assert len(calls) == 3
    calls.clear()
    teacher = X[:, 0] + 0.01
    fitted = ContrastiveEmbedder(selector=TemperedSelector(clone(spectral), teacher=teacher),
                                 **common).fit(X)
    assert calls == []
    assert torch.isfinite(torch.as_tensor(fitted.transform(X))).all()


def test_guarded_estimator_trains_on_every_sample(monkeypatch):

    X, y = make_paired_embeddings(128, 6, n_groups=4, random_state=0)
    seen = []
    sel = TemperedSelector(SpectralBatchSelector(batch_size=B, random_state=0),
                           max_same_label=5, exclude_neighbours=2, random_state=0)
    original = TemperedSelector.epoch_batches

    def recorded(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        seen.append(out)
        return out

    monkeypatch.setattr(TemperedSelector, "epoch_batches", recorded)
    ContrastiveEmbedder(hidden_layer_sizes=(16,), n_components=4, max_epochs=2,
                        random_state=0, selector=sel).fit(X, y)
    assert len(seen) == 2
    for batches in seen:
        assert len(np.unique(np.concatenate(batches))) == 128
        assert all(np.bincount(y[b]).max() <= 6 for b in batches)


def test_a_tempered_estimator_saves_and_loads(tmp_path):
    import skcontrast

    X, _ = make_paired_embeddings(96, 6, n_groups=4, random_state=0)
    teacher = X[:, 0].astype(np.float64)
    sel = TemperedSelector(CommunityBatchSelector(batch_size=B, p=1, q=6), random_share=0.25,
                           exclude_neighbours=2, teacher=teacher, random_state=0)
    est = ContrastiveEmbedder(hidden_layer_sizes=(8,), n_components=3, max_epochs=1,
                              random_state=0, selector=sel).fit(X)
    est.save(tmp_path / "model")
    back = skcontrast.load(tmp_path / "model")
    params = back.selector.get_params()
    assert params["random_share"] == 0.25 and params["base_selector__q"] == 6
    assert np.array_equal(params["teacher"], teacher)
    assert np.allclose(back.transform(X), est.transform(X))


def test_a_teacher_follows_the_rows_a_fit_trains_on(monkeypatch):

    X, _ = make_paired_embeddings(120, 6, n_groups=4, random_state=0)
    teacher = np.arange(120, dtype=np.float64)[:, None].repeat(3, 1)  # row i says "i"
    seen = []
    original = TemperedSelector._selection_space

    def recorded(self, X):
        out = original(self, X)
        seen.append(out)
        return out

    monkeypatch.setattr(TemperedSelector, "_selection_space", recorded)
    est = ContrastiveEmbedder(hidden_layer_sizes=(8,), n_components=3, max_epochs=1,
                              validation_fraction=0.25, random_state=0,
                              selector=TemperedSelector(ShuffledBatchSelector(B),
                                                        teacher=teacher))
    est.fit(X)
    kept = np.setdiff1d(np.arange(120), est.net_.plan.held_out_rows)
    assert len(kept) == 90
    assert np.array_equal(seen[0][:, 0], kept)
