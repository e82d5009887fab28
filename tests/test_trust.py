"""Nothing silently wrong when parts are combined, saved, exported or interrupted: one
test or more per numbered point of the issue, each failing before its fix."""

import numpy as np
import pytest
import torch
from sklearn.base import clone

from skcontrast import ContrastiveEmbedder
from skcontrast._estimators._modules import ContrastiveCriterion
from skcontrast.datasets import make_paired_gaussians
from skcontrast.losses import (
    DCL,
    KCL,
    DebiasedNCE,
    HardNegativeNCE,
    NTXent,
    SigLIP,
    SupCon,
    SymmetricInfoNCE,
)

SMALL = {"n_components": 4, "hidden_layer_sizes": (16,), "max_epochs": 2, "lr": 1e-2,
         "random_state": 0, "device": "cpu", "batch_size": 16}


@pytest.fixture(scope="module")
def pairs():
    return make_paired_gaussians(64, 8, n_clusters=3, random_state=0)


# 6. A learned temperature keeps learning near its floor --------------------------------

def test_a_learned_temperature_has_a_gradient_down_to_its_floor():
    criterion = ContrastiveCriterion(SymmetricInfoNCE(0.07, learn_temperature=True))
    u = torch.nn.functional.normalize(torch.randn(8, 2, 5, dtype=torch.float64), dim=-1)
    (name, parameter), = criterion.named_parameters()
    with torch.no_grad():
        parameter.fill_(-12.0)  # log(t) = -12 was far below the floor, clamped, no gradient
    assert float(criterion.temperature.detach()) > 0.01
    criterion(u.float()).loss.backward()
    assert float(parameter.grad.abs()) > 0, name


@pytest.mark.parametrize("start", [0.005, 0.01])
def test_a_learned_temperature_must_start_above_its_floor(pairs, start):
    with pytest.raises(ValueError, match=rf"temperature={start} is the start of a learned "
                                         r"temperature, which stays above 0.01"):
        ContrastiveEmbedder(**SMALL, loss=SymmetricInfoNCE(start, learn_temperature=True)
                            ).fit(pairs[0])
    SymmetricInfoNCE(start).check()  # a fixed temperature may be that low


# 7. Non-finite loss settings are refused ----------------------------------------------

@pytest.mark.parametrize("loss, name", [
    (SymmetricInfoNCE(lambda_pos=float("nan")), "lambda_pos"),
    (NTXent(lambda_ent=float("inf")), "lambda_ent"),
    (SigLIP(bias=float("nan")), "bias"),
    (SigLIP(bias=float("-inf")), "bias"),
    (SymmetricInfoNCE(temperature=float("inf")), "temperature"),
    (SymmetricInfoNCE(temperature=float("inf"), learn_temperature=True), "temperature"),
    (KCL(lambda_pos=float("nan")), "lambda_pos"),
    (SupCon(lambda_ent=float("nan")), "lambda_ent"),
])
def test_non_finite_loss_settings_are_refused(pairs, loss, name):
    with pytest.raises(ValueError, match=rf"{name} must be a .*finite number"):
        loss.check()
    if not loss.labelled:
        with pytest.raises(ValueError, match=name):
            ContrastiveEmbedder(**SMALL, loss=loss).fit(pairs[0])


# 8. Every real number type is a number ------------------------------------------------

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


# 21. A warm start applies a changed start of every learned loss parameter ---------------

@pytest.mark.parametrize("change", [False, True])
def test_a_warm_start_applies_a_changed_siglip_bias(pairs, change):
    est = ContrastiveEmbedder(**{**SMALL, "lr": 0.5}, optimizer="sgd",
                              loss=SigLIP(bias=-10.0, learn_bias=True)).fit(pairs[0])
    learned = float(est.net_.criterion_.learned_bias)
    assert abs(learned + 10) > 1e-3  # it learned
    est.set_params(warm_start=True, lr=1e-9, max_epochs=1)
    if change:
        est.set_params(loss__bias=-5.0)
    est.fit(pairs[0])
    expected = -5.0 if change else learned
    assert float(est.net_.criterion_.learned_bias) == pytest.approx(expected, abs=1e-6)


# 1. Guards need a base whose batches are disjoint -------------------------------------

def _selectors():
    from skcontrast import selectors

    return selectors


@pytest.mark.parametrize("make_base", [
    lambda s: s.RandomBatchSelector(4, random_state=0),
    lambda s: s.ExhaustiveBatchSelector(4),
    lambda s: s.BindingSelector(s.ShuffledBatchSelector(4, random_state=0), random_state=0),
    lambda s: s.PredefinedBatchSelector([[0, 1, 2, 3], [2, 3, 4, 5]]),
    lambda s: s.OSGDSelector(4, k=4, q=2, candidates="random", random_state=0),
], ids=["random", "exhaustive", "binding", "overlapping predefined", "osgd random"])
@pytest.mark.parametrize("guard", [{"max_same_label": 1}, {"exclude_neighbours": 1},
                                   {"random_share": 0.5}])
def test_guards_refuse_a_base_that_is_not_a_partition_naming_it(make_base, guard):
    s = _selectors()
    base = make_base(s)
    X = np.random.default_rng(0).normal(size=(12, 2, 3))
    y = np.repeat([0, 1, 2], 4)
    selector = s.TemperedSelector(base, random_state=0, **guard)
    assert not base.partitions and not selector.partitions
    with pytest.raises(ValueError, match=rf"{type(base).__name__}'s batches are not one"):
        list(selector.split(X, y))
    list(s.TemperedSelector(base, refresh_every=2, random_state=0).split(X, y))  # no edits


class _ClaimsToPartition(_selectors().BatchSelector):
    """A custom selector that says its batches are disjoint, and they are not."""

    def __init__(self):
        pass

    def _select(self, X, y, groups, rng):
        return [np.arange(4), np.arange(2, 6)]

    def _n_batches(self, n, y):
        return 2


def test_guards_check_the_batches_of_a_base_that_claims_to_partition():
    s = _selectors()
    selector = s.TemperedSelector(_ClaimsToPartition(), max_same_label=1, random_state=0)
    with pytest.raises(ValueError, match=r"sample 2 is in 2 places"):
        list(selector.split(np.zeros((6, 2)), np.array([0, 0, 1, 1, 2, 2])))


def test_disjoint_predefined_batches_and_osgd_partitions_keep_their_guards():
    s = _selectors()
    y = np.repeat([0, 1], 6)
    X = np.random.default_rng(0).normal(size=(12, 2, 3))
    for base in (s.PredefinedBatchSelector([[0, 1, 2, 6], [3, 4, 5, 7], [8, 9, 10, 11]]),
                 s.OSGDSelector(4, k=3, q=2, random_state=0)):
        batches = list(s.TemperedSelector(base, max_same_label=1, random_state=0).split(X, y))
        assert all(len(set(b.tolist())) == len(b) for b in batches)
        assert max(np.bincount(y[b]).max() for b in batches) <= 2


# 4. Non-finite costs are an error in bounded time -------------------------------------

@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_balanced_assignment_refuses_non_finite_costs(bad):
    from skcontrast.selectors import balanced_assignment

    cost = np.random.default_rng(0).random((6, 3))
    cost[2, 1] = bad
    with pytest.raises(ValueError, match="NaN or infinite"):
        balanced_assignment(cost, [2, 2, 2])


def test_the_spectral_selector_names_an_overflowing_affinity():
    s = _selectors()
    X = np.random.default_rng(0).normal(size=(64, 2, 8)).astype(np.float32) * 1e18
    selector = s.SpectralBatchSelector(8, loss=SymmetricInfoNCE(1e-3, normalize=False),
                                       random_state=0)
    with pytest.raises(ValueError, match=r"SpectralBatchSelector: the pair affinity .* NaN "
                                         r"or infinite.* temperature 0.001"):
        list(selector.split(X))


# 5. Every rank gets a non-empty slice of one size --------------------------------------

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


# 9. A resumed refresh period continues as an uninterrupted run -------------------------

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


def test_a_selectors_state_travels_with_a_saved_model_and_a_warm_start(pairs, tmp_path):
    import skcontrast
    from skcontrast.selectors import SpectralBatchSelector, TemperedSelector

    selector = TemperedSelector(SpectralBatchSelector(8), refresh_every=3,
                                exclude_neighbours=1)
    est = ContrastiveEmbedder(**{**SMALL, "batch_size": None}, selector=selector).fit(pairs[0])
    state = est.net_.selector.state_dict()
    assert state["chosen"]["epoch"] == 0 and state["neighbours"]["m"] == 1
    loaded = skcontrast.load(est.save(tmp_path / "m"))
    assert loaded.net_.selector.state_dict() == state
    warm = ContrastiveEmbedder(**{**SMALL, "batch_size": None, "max_epochs": 4},
                               selector=selector).fit(pairs[0])
    est.set_params(warm_start=True).fit(pairs[0])  # 2 + 2 epochs, the period resumed
    np.testing.assert_allclose(est.transform(pairs[0]), warm.transform(pairs[0]), atol=1e-6)


# 2, 3. Exports load and equal transform, or are refused --------------------------------

class _TokenMean(torch.nn.Module):
    def __init__(self, n_out=4):
        super().__init__()
        self.embedding = torch.nn.Embedding(50, n_out)  # the exporter names a value so

    def forward(self, x):
        return self.embedding(x).mean(1)


class _Branchy(torch.nn.Module):
    """Data-dependent branching that TorchScript can script."""

    def __init__(self, n_in=5, n_out=4):
        super().__init__()
        self.a, self.b = torch.nn.Linear(n_in, n_out), torch.nn.Linear(n_in, n_out)

    def forward(self, x):
        if bool(x.sum() > 0):
            return self.a(x)
        return self.b(x)


class _UnscriptableBranchy(_Branchy):
    """The same branch through NumPy, which TorchScript cannot script."""

    def forward(self, x):
        return self.a(x) if np.sign(float(x.sum())) > 0 else self.b(x)


@pytest.mark.slow
@pytest.mark.parametrize("module", [_TokenMean, torch.nn.EmbeddingBag], ids=["Embedding",
                                                                             "EmbeddingBag"])
def test_onnx_export_of_an_embedding_encoder_loads_and_equals_transform(module, tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    X = np.random.default_rng(0).integers(0, 50, size=(64, 2, 6))
    encoder = _TokenMean if module is _TokenMean else \
        (lambda n_in, n_out: torch.nn.EmbeddingBag(50, n_out))
    est = ContrastiveEmbedder(encoder, **{**SMALL, "max_epochs": 1}).fit(X)
    path = est.export(tmp_path / "tokens.onnx")
    session = onnxruntime.InferenceSession(str(path))
    assert [o.name for o in session.get_outputs()] == ["embedding"]
    out = session.run(None, {"x": X[:9, 0]})[0]
    np.testing.assert_allclose(out, est.transform_view(X[:9, 0], view=0), atol=1e-5)


def test_torchscript_keeps_the_branches_of_a_scriptable_encoder(tmp_path):
    X = np.random.default_rng(0).normal(size=(64, 2, 5)).astype(np.float32)
    est = ContrastiveEmbedder(_Branchy, **SMALL).fit(X)
    module = torch.jit.load(str(est.export(tmp_path / "branchy.pt", "torchscript")))
    for x in (np.abs(X[:6, 0]), -np.abs(X[:6, 0])):
        with torch.no_grad():
            out = module(torch.as_tensor(x)).numpy()
        np.testing.assert_allclose(out, est.transform_view(x, view=0), atol=1e-5)


def test_a_trace_that_records_one_branch_is_refused_and_not_written(tmp_path):
    X = np.random.default_rng(0).normal(size=(64, 2, 5)).astype(np.float32)
    est = ContrastiveEmbedder(_UnscriptableBranchy, **SMALL).fit(X)
    path = tmp_path / "branchy.pt"
    with pytest.raises(ValueError, match="torchscript export of view 0 differs from "
                                         "transform on an input unlike the example"):
        est.export(path, "torchscript")
    assert not path.exists()


# 10. Ties are decided one documented way, whatever the order of the data ---------------

def test_class_retrieval_ties_do_not_depend_on_the_order_of_the_data():
    import reference as ref

    from skcontrast import metrics

    rng = np.random.default_rng(0)
    base = rng.normal(size=(20, 32)).astype(np.float32)
    # rescaled copies of 20 directions: their cosine similarities tie exactly, but are
    # computed to different last bits depending on where the copies stand
    H = base[rng.integers(0, 20, size=200)] * rng.uniform(0.5, 2, (200, 1)).astype(np.float32)
    y = rng.integers(0, 4, size=200)
    expected = ref.retrieval(H.astype(np.float64), y)
    assert expected[3] < 0.05  # a query's copies of other labels tie with its own
    for seed in range(5):
        order = np.random.default_rng(seed).permutation(200)
        got = metrics.class_retrieval(H[order], y[order])
        np.testing.assert_allclose([got[k] for k in ("map_at_r", "r_map", "r_precision",
                                                     "precision_at_1")], expected,
                                   rtol=1e-12, atol=1e-12)


def test_recall_counts_a_rescaled_copy_of_the_partner_as_a_tie():
    from skcontrast.metrics import recall_at_k, tie_tolerance

    rng = np.random.default_rng(0)
    U = rng.normal(size=(60, 16))
    V = U + 0.01 * rng.normal(size=(60, 16))
    V[30:] = V[:30] * rng.uniform(0.5, 3, (30, 1))  # partner i and i + 30 point alike
    for seed in range(5):
        order = np.random.default_rng(seed).permutation(60)
        assert recall_at_k(U[order], V[order], direction="u2v") == 0.0
    assert tie_tolerance(32) == pytest.approx(4 * 34 * 2.0**-53)


# 19. 2 + 2 warm epochs are 4 epochs, with dropout and augmentations --------------------

class _Dropout(torch.nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(n_in, 32), torch.nn.Dropout(0.3),
                                       torch.nn.Linear(32, n_out))

    def forward(self, x):
        return self.net(x)


def _noise_with_generator(x, generator):
    return x + 0.1 * torch.randn(x.shape, generator=generator, device=x.device)


def _noise_from_torch(x):
    return x + 0.1 * torch.randn_like(x)


@pytest.mark.parametrize("augmentation", [None, _noise_with_generator, _noise_from_torch],
                         ids=["dropout", "f(x, generator)", "f(x)"])
@pytest.mark.parametrize("resume", ["warm start", "save and load"])
def test_two_plus_two_warm_epochs_are_four_epochs(augmentation, resume, tmp_path):
    import skcontrast

    rng = np.random.default_rng(0)
    X = rng.normal(size=(96, 2, 8)).astype(np.float32)
    if augmentation is not None:
        X = X[:, 0]
    kw = {**SMALL, "augmentation": augmentation}
    whole = ContrastiveEmbedder(_Dropout, **{**kw, "max_epochs": 4}).fit(X)
    half = ContrastiveEmbedder(_Dropout, **kw).fit(X)
    if resume == "save and load":
        half.save(tmp_path / "half")
        half = skcontrast.load(tmp_path / "half", module=_Dropout,
                               augmentation=augmentation)
    half.set_params(warm_start=True).fit(X)
    np.testing.assert_allclose(half.transform(X), whole.transform(X), atol=1e-6)


# 20. Weights and buffers are checked at every exit of fit ------------------------------

class _Norm(torch.nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.linear, self.norm = torch.nn.Linear(n_in, n_out), torch.nn.BatchNorm1d(n_out)

    def forward(self, x):
        return self.norm(self.linear(x))


class _PoisonAfter:
    """A skorch callback that makes a buffer or a weight NaN after the last step of an
    epoch (the loss of every step stays finite), optionally then pressing Ctrl-C."""

    def __new__(cls, what, epoch, interrupt=False):
        from skorch.callbacks import Callback

        class Poison(Callback):
            def on_batch_end(self, net, training=False, **kwargs):
                batches = net.history[-1]["batches"]
                if not training or len(net.history) != epoch or len(batches) != 2:
                    return
                module = net.module_.encoders[0]
                target = module.norm.running_var if what == "buffer" else module.linear.weight
                with torch.no_grad():
                    target.view(-1)[0] = float("nan")
                if interrupt:
                    import signal

                    signal.raise_signal(signal.SIGINT)

        return Poison()


@pytest.mark.parametrize("what", ["buffer", "weight"])
@pytest.mark.parametrize("estimator", ["contrastive", "supcon"])
def test_a_non_finite_model_at_the_end_of_fit_is_refused_and_not_kept(pairs, what,
                                                                       estimator):
    from skcontrast import SupConEmbedder
    from skcontrast.exceptions import TrainingDivergedError

    X, y = pairs
    kw = {**SMALL, "batch_size": 32, "callbacks": [_PoisonAfter(what, 2)]}
    est = ContrastiveEmbedder(_Norm, **kw) if estimator == "contrastive" else \
        SupConEmbedder(_Norm, **kw)
    data = (X,) if estimator == "contrastive" else (X[:, 0], y)
    with pytest.raises(TrainingDivergedError, match=r"'module\.encoders\.0\.(norm\.running_var|"
                                                    r"linear\.weight)' holds NaN"):
        est.fit(*data)
    assert not hasattr(est, "net_")


def test_an_interrupt_after_a_nan_does_not_keep_the_nan_model(pairs):
    from skcontrast.exceptions import TrainingInterrupted

    X, _ = pairs
    est = ContrastiveEmbedder(_Norm, **{**SMALL, "max_epochs": 5, "batch_size": 16}).fit(X)
    before = est.transform(X)
    est.set_params(warm_start=True, callbacks=[_PoisonAfter("buffer", 7, interrupt=True)])
    with pytest.raises(TrainingInterrupted, match=r"running_var' holds NaN.*not kept"):
        est.fit(X)
    np.testing.assert_array_equal(est.transform(X), before)  # the model before this fit


# 22. A stratified split holds out what was asked, and warm-starts on it ----------------

def test_singleton_classes_give_their_held_out_places_to_the_others():
    import warnings

    from skcontrast import SupConEmbedder

    rng = np.random.default_rng(0)
    y = np.r_[np.arange(40), np.repeat([100, 101, 102], 8)]  # 40 singletons, 3 x 8
    X = rng.normal(size=(64, 6)).astype(np.float32)
    est = SupConEmbedder(**{**SMALL, "max_epochs": 1}, validation_fraction=0.2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # single-member classes
        est.fit(X, y)
        rows = est.net_.held_out_rows
        assert len(rows) == 13 and set(y[rows]) <= {100, 101, 102}
        est.set_params(warm_start=True).fit(X, y)  # the identical warm start is accepted
    np.testing.assert_array_equal(est.net_.held_out_rows, rows)


def test_held_out_counts_reach_the_fraction_whenever_the_classes_have_room():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from skcontrast._estimators._monitor import held_out_counts

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.integers(1, 30), min_size=1, max_size=25),
           st.floats(0.05, 0.6))
    def check(sizes, fraction):
        sizes = np.array(sizes)
        n = int(sizes.sum())
        want = round(n * fraction)
        if want < 2 or n - want < 2:
            return
        counts = held_out_counts(n, fraction, sizes)
        assert (counts <= sizes - 1).all() and (counts >= 0).all()
        assert counts.sum() == min(want, int((sizes - 1).sum()))

    check()


def test_classes_with_no_room_hold_out_fewer_and_say_so():
    from skcontrast._estimators._monitor import split_indices

    labels = np.r_[np.arange(30), [50, 50, 51, 51]]  # room for 2 of round(34 * .2) = 7
    with pytest.warns(UserWarning, match="holds out 2 of 34 samples, not 7"):
        train, valid = split_indices(34, 0.2, 0, labels)
    assert len(valid) == 2 and len(train) == 32


# 11-18. Saving and loading --------------------------------------------------------------

@pytest.fixture(scope="module")
def saved_model(pairs, tmp_path_factory):
    folder = tmp_path_factory.mktemp("trust") / "model"
    est = ContrastiveEmbedder(**SMALL).fit(pairs[0])
    est.save(folder)
    return est, folder


def _copy(folder, tmp_path, edit=None, weights=None):
    """A copy of a saved model whose config ``edit`` changed and whose weights are
    ``weights(tensors)`` (the checksum kept in step, as a careful forger would)."""
    import hashlib
    import json

    from safetensors.torch import load_file, save

    out = tmp_path / "copy"
    out.mkdir(exist_ok=True)
    config = json.loads((folder / "config.json").read_text())
    data = (folder / "model.safetensors").read_bytes()
    if weights is not None:
        tensors = load_file(str(folder / "model.safetensors"))
        weights(tensors)
        data = save(tensors)
        config["weights_sha256"] = hashlib.sha256(data).hexdigest()
    (out / "model.safetensors").write_bytes(data)
    if edit is not None:
        edit(config)
    (out / "config.json").write_text(json.dumps(config))
    return out


@pytest.mark.parametrize("name", ["__class__", "transform", "net_", "fit", "history_",
                                  "__dict__"])
def test_load_restores_only_the_documented_fitted_attributes(saved_model, tmp_path, name):
    import skcontrast

    _, folder = saved_model
    value = {"estimator": "skcontrast.selectors._basic.ShuffledBatchSelector",
             "params": {"dict": {}}}
    copy = _copy(folder, tmp_path, lambda c: c["fitted"]["attributes"].update({name: value}))
    with pytest.raises(ValueError, match=rf"sets \['{name}'\], which are not fitted "
                                         "attributes load restores"):
        skcontrast.load(copy)


def test_a_save_that_cannot_complete_writes_nothing(pairs, tmp_path):
    from skorch.callbacks import Callback

    class Records(Callback):  # puts an object JSON cannot hold into the history
        def on_epoch_end(self, net, **kwargs):
            net.history.record("odd", object())

    est = ContrastiveEmbedder(**SMALL, callbacks=[Records()]).fit(pairs[0])
    with pytest.raises(ValueError, match="cannot save the training history"):
        est.save(tmp_path / "never")
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize("keys", [(0.5, 1.5), ((1,), (2,)), (None, "b")],
                         ids=["float", "tuple", "None"])
def test_view_names_a_file_cannot_hold_are_refused_before_writing(tmp_path, keys):
    rng = np.random.default_rng(0)
    X = {k: rng.normal(size=(32, 4)).astype(np.float32) for k in keys}
    est = ContrastiveEmbedder(**{**SMALL, "max_epochs": 1}).fit(X)
    with pytest.raises(ValueError, match="needs a string or integer name"):
        est.save(tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_numpy_integer_view_names_save_and_load(tmp_path):
    import skcontrast

    rng = np.random.default_rng(0)
    X = {np.int64(k): rng.normal(size=(32, 4)).astype(np.float32) for k in (0, 1)}
    est = ContrastiveEmbedder(**{**SMALL, "max_epochs": 1}).fit(X)
    loaded = skcontrast.load(est.save(tmp_path / "m"))
    np.testing.assert_array_equal(loaded.transform_view(X[0], view=0),
                                  est.transform_view(X[0], view=0))


class _Kill(Exception):
    pass


@pytest.mark.parametrize("step", ["stage weights", "stage config", "rename weights",
                                  "rename config"])
def test_a_save_killed_at_any_write_leaves_the_old_model_or_a_clear_refusal(
        pairs, tmp_path, monkeypatch, step):
    import os

    import skcontrast
    from skcontrast._estimators import _persist

    folder = tmp_path / "m"
    old = ContrastiveEmbedder(**SMALL).fit(pairs[0])
    old.save(folder)
    new = ContrastiveEmbedder(**{**SMALL, "random_state": 1}).fit(pairs[0])
    calls = {"stage": 0, "rename": 0}
    stage, rename = _persist.stage_file, os.replace
    kind, index = step.split()[0], {"weights": 1, "config": 2}[step.split()[1]]

    def counted(real, name):
        def call(*args):
            calls[name] += 1
            if name == kind and calls[name] == index:
                raise _Kill(step)
            return real(*args)
        return call

    monkeypatch.setattr(_persist, "stage_file", counted(stage, "stage"))
    monkeypatch.setattr(_persist.os, "replace", counted(rename, "rename"))
    with pytest.raises(_Kill):
        new.save(folder)
    monkeypatch.undo()
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    if step == "rename config":  # new weights beside the old configuration
        with pytest.raises(ValueError, match="interrupted save, or two saves"):
            skcontrast.load(folder)
    else:
        np.testing.assert_array_equal(skcontrast.load(folder).transform(pairs[0]),
                                      old.transform(pairs[0]))


def test_two_saves_racing_never_load_as_a_mixed_model(pairs, tmp_path):
    import json

    import skcontrast

    a = ContrastiveEmbedder(**SMALL).fit(pairs[0])
    b = ContrastiveEmbedder(**{**SMALL, "random_state": 1}).fit(pairs[0])
    a.save(tmp_path / "a")
    b.save(tmp_path / "b")
    mixed = tmp_path / "mixed"  # a's weights published, then b's configuration
    mixed.mkdir()
    (mixed / "model.safetensors").write_bytes((tmp_path / "a" / "model.safetensors")
                                              .read_bytes())
    (mixed / "config.json").write_text((tmp_path / "b" / "config.json").read_text())
    assert json.loads((mixed / "config.json").read_text())["weights_sha256"]
    with pytest.raises(ValueError, match="checksums differ"):
        skcontrast.load(mixed)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_load_refuses_non_finite_weights_naming_the_tensor(saved_model, tmp_path, value):
    import skcontrast

    _, folder = saved_model

    def poison(tensors):
        name = next(k for k in sorted(tensors) if k.startswith("module."))
        tensors[name].view(-1)[0] = value

    with pytest.raises(ValueError, match=r"the saved tensor 'module\..*' holds NaN or "
                                         "infinite"):
        skcontrast.load(_copy(folder, tmp_path, weights=poison))


def test_load_refuses_optimizer_state_of_the_wrong_shape(saved_model, tmp_path):
    import skcontrast

    _, folder = saved_model

    def reshape(tensors):
        name = next(k for k in sorted(tensors) if k.startswith("optimizer.") and
                    k.endswith("exp_avg"))
        tensors[name] = torch.zeros(tensors[name].numel() + 3)

    with pytest.raises(ValueError, match=r"saved optimizer state 'optimizer\.\d+\.exp_avg' "
                                         r"has shape"):
        skcontrast.load(_copy(folder, tmp_path, weights=reshape))


@pytest.mark.parametrize("edit", [
    lambda c: c["params"].update(hidden_layer_sizes={"tuple": [2**31]}),
    lambda c: c["params"].update(n_components=2**30),
    lambda c: c["fitted"].update(n_samples=2**40),
], ids=["hidden width", "n_components", "memory size"])
def test_declared_sizes_are_compared_before_anything_is_allocated(pairs, tmp_path, edit):
    import resource
    import time

    import skcontrast
    from skcontrast.memory import SogCLRMemory

    folder = tmp_path / "m"
    ContrastiveEmbedder(**SMALL, memory=SogCLRMemory()).fit(pairs[0]).save(folder)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"the saved tensor '(module|criterion)\..*' has "
                                         r"shape .* but the saved parameters build it"):
        skcontrast.load(_copy(folder, tmp_path, edit))
    assert time.perf_counter() - start < 5
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 500


def test_the_estimator_class_is_found_by_its_qualified_name(saved_model, tmp_path):
    import skcontrast

    _, folder = saved_model

    class ContrastiveEmbedder(skcontrast.ContrastiveEmbedder):  # same bare name, later
        pass

    loaded = skcontrast.load(folder)
    assert type(loaded) is skcontrast.ContrastiveEmbedder
    copy = _copy(folder, tmp_path, lambda c: c.update({"class": "ContrastiveEmbedder"}))
    with pytest.raises(ValueError, match="unknown estimator class 'ContrastiveEmbedder'"):
        skcontrast.load(copy)


@pytest.mark.parametrize("name", ["config.json", "model.safetensors"])
def test_links_that_leave_the_folder_are_refused(saved_model, tmp_path, name):
    import skcontrast

    _, folder = saved_model
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    copy = tmp_path / "linked"
    copy.mkdir()
    for file in ("config.json", "model.safetensors"):
        (outside if file == name else copy).joinpath(file).write_bytes(
            (folder / file).read_bytes())
    (copy / name).symlink_to(outside / name)
    with pytest.raises(ValueError, match="outside the model folder"):
        skcontrast.load(copy)
    inside = tmp_path / "inside"  # a link within the folder is fine
    inside.mkdir()
    for file in ("config.json", "model.safetensors"):
        (inside / file).write_bytes((folder / file).read_bytes())
    (inside / name).rename(inside / f"real-{name}")
    (inside / name).symlink_to(inside / f"real-{name}")
    skcontrast.load(inside)


@pytest.mark.parametrize("where, value, named", [
    (("params", "selector"), {"estimator": "skcontrast.selectors._basic."
                              "ShuffledBatchSelector", "params": {"dict": {"bogus": 1}}},
     "selector"),
    (("params", "selector"), {"tuple": [[[[[[[[[[1]]]]]]]]]] * 1}, "selector"),
    (("fitted", "attributes", "classes_"), {"array": ["zz"], "dtype": "|S1",
                                            "encoding": "hex"}, "classes_"),
    (("fitted", "attributes", "classes_"), {"array": [1, 2, 3], "dtype": "<i8",
                                            "shape": [2, 2]}, "classes_"),
    (("fitted", "attributes", "classes_"), {"array": [2**80], "dtype": "<i8"}, "classes_"),
    (("params", "lr"), {"float": "a lot"}, "lr"),
    (("params", "lr"), "deep", "lr"),
])
def test_malformed_entries_are_errors_that_name_them(saved_model, tmp_path, where, value,
                                                     named):
    import skcontrast

    _, folder = saved_model

    def edit(config):
        target = config
        for key in where[:-1]:
            target = target.setdefault(key, {})
        target[where[-1]] = value

    copy = _copy(folder, tmp_path, edit)
    if value == "deep":  # nested lists beyond what a JSON reader recurses through
        text = (copy / "config.json").read_text()
        (copy / "config.json").write_text(text.replace('"deep"', "[" * 5000 + "]" * 5000))
    with pytest.raises(ValueError, match=rf"{named}|too deeply"):
        skcontrast.load(copy)
