"""Memories beyond the batch: SogCLR's moving averages and the cross-batch queue (XBM)."""

import importlib.util
import math
import pickle

import numpy as np
import pytest
import reference as ref
import torch
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV

from skcontrast import ContrastiveEmbedder, SupConEmbedder
from skcontrast.datasets import make_paired_gaussians
from skcontrast.losses import (
    LossBatch,
    LossTerms,
    dcl,
    info_nce,
    make_loss,
    nt_xent,
    supcon,
    symmetric_info_nce,
)
from skcontrast.memory import CrossBatchMemory, SogCLRMemory
from skcontrast.memory._sogclr import gamma_at
from skcontrast.selectors import ShuffledBatchSelector

PAIR_FNS = {"dcl": dcl, "nt_xent": nt_xent, "info_nce": info_nce,
            "symmetric_info_nce": symmetric_info_nce, "supcon": None}


def loss_object(name, **options):
    """The loss object of a name, with ``options`` (a tensor temperature stays aside)."""
    return make_loss(name).set_params(**{k: v for k, v in options.items()
                                         if not isinstance(v, torch.Tensor)})


def learned(options):
    return {k: v for k, v in options.items() if isinstance(v, torch.Tensor)}


def pair_step(state, loss, u, v, index, tau, **options):
    """One training batch of pairs through a memory state, as the estimators' criterion
    sends it (the loss object, and a learned temperature as an override)."""
    options = {"temperature": tau, **options}
    obj = loss_object(loss, **options)
    overrides = learned(options)
    return state(lambda **extra: obj.pair_terms(u, v, **overrides, **extra),
                 LossBatch(torch.stack([u, v], 1), "pairs", index=torch.as_tensor(index)),
                 loss=obj, overrides=overrides)


def shuffled_epochs(n, b, epochs, seed=0):
    rng = np.random.default_rng(seed)
    return [np.array_split(rng.permutation(n), n // b) for _ in range(epochs)]


# --------------------------------------------------------------------------------------
# SogCLR
# --------------------------------------------------------------------------------------

def test_sogclr_with_dcl_is_libauc_gcloss_v1_on_the_same_batches():
    """Three shuffled epochs of SGD on free embeddings: at every step the gradient is
    LibAUC's divided by 2 tau (its loss is tau times the GCL objective and sums the two
    views), and the stored u agree at the end (float64 re-derivation of GCLoss_v1)."""
    n, b, d, tau, gamma = 12, 4, 5, 0.2, 0.7
    rng = np.random.default_rng(0)
    X = torch.tensor(rng.normal(size=(n, 2, d)))
    state = SogCLRMemory(gamma=gamma).build(n, make_loss("dcl")).double()
    libauc = ref.LibAUCGCLossV1(n, tau, gamma)
    for epoch, batches in enumerate(shuffled_epochs(n, b, 3)):
        state.set_epoch(epoch)
        libauc.adjust_gamma(epoch)
        for batch in batches:
            ours = X[batch].clone().requires_grad_()
            pair_step(state, "dcl", ours[:, 0], ours[:, 1], batch, tau).loss.backward()
            theirs = X[batch].clone().requires_grad_()
            libauc(theirs[:, 0], theirs[:, 1], batch).backward()
            torch.testing.assert_close(theirs.grad, 2 * tau * ours.grad, rtol=1e-10,
                                       atol=1e-12)
            X[batch] -= 0.5 * ours.grad
    np.testing.assert_allclose(state.log_u[:, 0].exp().numpy(), libauc.u, rtol=1e-10)
    assert state.visited.all()


@pytest.mark.skipif(importlib.util.find_spec("libauc") is None,
                    reason="libauc is not installed (pip install --no-deps libauc)")
def test_the_float64_reference_is_libauc_itself():
    from libauc.losses.contrastive import GCLoss_v1

    n, b, d, tau = 10, 5, 4, 0.3
    rng = np.random.default_rng(1)
    X = torch.tensor(rng.normal(size=(n, 2, d)), dtype=torch.float32)
    theirs = GCLoss_v1(N=n, tau=tau, gamma=0.8, device=torch.device("cpu"))
    mine = ref.LibAUCGCLossV1(n, tau, 0.8)
    for epoch, batches in enumerate(shuffled_epochs(n, b, 3, seed=2)):
        theirs.adjust_gamma(epoch)
        mine.adjust_gamma(epoch)
        for batch in batches:
            x1 = X[batch].clone().requires_grad_()
            theirs(x1[:, 0], x1[:, 1], torch.as_tensor(batch)).backward()
            x2 = X[batch].double().requires_grad_()
            mine(x2[:, 0], x2[:, 1], batch).backward()
            torch.testing.assert_close(x1.grad.double(), x2.grad, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(theirs.u[:, 0].numpy(), mine.u, rtol=1e-5)


@pytest.mark.parametrize("loss", ["dcl", "nt_xent", "info_nce", "symmetric_info_nce", "supcon"])
def test_at_gamma_one_the_update_is_the_plain_mini_batch_update(loss):
    """gamma = 1 keeps no history: gradients (embeddings and a learned temperature) and
    value equal the loss's own, for every supported loss."""
    rng = np.random.default_rng(3)
    state = SogCLRMemory(gamma=1.0).build(20, make_loss(loss)).double()
    for batch in shuffled_epochs(20, 5, 2)[1]:
        x = torch.tensor(rng.normal(size=(5, 2, 6)), requires_grad=True)
        tau = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
        got = pair_step(state, loss, x[:, 0], x[:, 1], batch, tau, lambda_ent=0.7)
        gx, gt = torch.autograd.grad(got.loss, (x, tau))
        fn = PAIR_FNS[loss] or (lambda u, v, **kw: supcon(torch.cat([u, v]),
                                                          torch.arange(5).repeat(2), **kw))
        want = fn(x[:, 0], x[:, 1], temperature=tau, lambda_ent=0.7, return_terms=True)
        wx, wt = torch.autograd.grad(want.loss, (x, tau))
        torch.testing.assert_close(got.loss, want.loss)
        torch.testing.assert_close(gx, wx)
        torch.testing.assert_close(gt, wt)


def test_a_learned_temperature_gets_the_compositional_gradient():
    """d/dtau of the positive term plus (1/u_i) d g_i/dtau, with u_i the mixed estimate
    (LibAUC's surrogate gives tau no gradient at all); written out anchor by anchor."""
    n, b, gamma, t0 = 8, 4, 0.6, 0.25
    rng = np.random.default_rng(4)
    X = rng.normal(size=(n, 2, 3))
    X /= np.linalg.norm(X, axis=2, keepdims=True)
    state = SogCLRMemory(gamma=gamma).build(n, make_loss("dcl")).double()
    batches = shuffled_epochs(n, b, 2, seed=5)
    for epoch, epoch_batches in enumerate(batches):
        state.set_epoch(epoch)
        for batch in epoch_batches:
            old = state.log_u[:, 0].exp().numpy().copy()
            seen = state.visited[:, 0].numpy().copy()
            tau = torch.tensor(t0, dtype=torch.float64, requires_grad=True)
            x = torch.tensor(X[batch])
            got = pair_step(state, "dcl", x[:, 0], x[:, 1], batch, tau)
            (grad,) = torch.autograd.grad(got.loss, tau)
            Z = np.concatenate([X[batch, 0], X[batch, 1]])
            expected = 0.0
            for a in range(2 * b):
                partner = (a + b) % (2 * b)
                expected += Z[a] @ Z[partner] / t0**2
                s = np.array([Z[a] @ Z[c] for c in range(2 * b) if c not in (a, partner)])
                g = np.mean(np.exp(s / t0))
                i = batch[a % b]
                u = (1 - gamma) * old[i] + gamma * g if seen[i] else g
                expected += np.mean(np.exp(s / t0) * -s / t0**2) / u
            assert float(grad) == pytest.approx(expected / (2 * b), rel=1e-10)


def test_symmetric_info_nce_keeps_one_estimate_per_sample_and_direction():
    n, b, tau, gamma = 9, 3, 0.5, 0.8
    rng = np.random.default_rng(6)
    X = rng.normal(size=(n, 2, 4))
    X /= np.linalg.norm(X, axis=2, keepdims=True)
    state = SogCLRMemory(gamma=gamma).build(n, make_loss("symmetric_info_nce")).double()
    expected = np.full((n, 2), np.nan)
    for epoch, batches in enumerate(shuffled_epochs(n, b, 2, seed=7)):
        state.set_epoch(epoch)
        for batch in batches:
            x = torch.tensor(X[batch])
            pair_step(state, "symmetric_info_nce", x[:, 0], x[:, 1], batch, tau)
            for direction, (A, C) in enumerate(((X[batch, 0], X[batch, 1]),
                                                (X[batch, 1], X[batch, 0]))):
                for r, i in enumerate(batch):
                    g = np.mean(np.exp(A[r] @ C.T / tau))  # positive included, as the loss
                    old = expected[i, direction]
                    expected[i, direction] = g if np.isnan(old) else (1 - gamma) * old + gamma * g
    np.testing.assert_allclose(state.log_u.exp().numpy(), expected, rtol=1e-12)


def test_supcon_with_two_crops_shares_one_estimate_per_item():
    """Labelled SupCon on two crops: the crops of an item (stacked item by item) are
    averaged into its one u; single views keep one u each."""
    n, tau = 6, 0.4
    rng = np.random.default_rng(8)
    z = torch.tensor(rng.normal(size=(n, 2, 3)))
    y = torch.tensor([0, 0, 1, 1, 2, 2])
    loss = make_loss("supcon").set_params(temperature=tau)
    state = SogCLRMemory().build(n, loss, "crops").double()
    flat, labels = z.reshape(-1, 3), y.repeat_interleave(2)
    state(lambda **extra: supcon(flat, labels, return_terms=True, temperature=tau, **extra),
          LossBatch(z, "crops", y, torch.arange(n)), loss=loss, overrides={})
    unit = torch.nn.functional.normalize(flat, dim=1).numpy()
    g = np.array([np.mean([np.exp(unit[a] @ unit[c] / tau) for c in range(2 * n) if c != a])
                  for a in range(2 * n)])
    np.testing.assert_allclose(state.log_u[:, 0].exp().numpy(), g.reshape(n, 2).mean(1),
                               rtol=1e-12)


def test_log_space_state_is_finite_at_temperature_001_in_float32():
    """exp(1/0.01) = e^100 overflows float32 (LibAUC's v1 keeps u itself); the log-space
    state and the loss stay finite."""
    n = 8
    x = torch.nn.functional.normalize(torch.ones(n, 2, 4) + 0.01 * torch.randn(n, 2, 4), dim=2)
    with np.errstate(over="ignore"):
        assert not math.isfinite(np.exp(np.float32(1 / 0.01)))
    state = SogCLRMemory(gamma=0.5).build(n, make_loss("dcl"))
    for epoch in range(3):
        state.set_epoch(epoch)
        xb = x.clone().requires_grad_()
        terms = pair_step(state, "dcl", xb[:, 0], xb[:, 1], np.arange(n), 0.01)
        terms.loss.backward()
        assert torch.isfinite(terms.loss) and torch.isfinite(xb.grad).all()
    assert torch.isfinite(state.log_u).all() and state.log_u.max() > 90


def test_cosine_schedule_matches_libauc():
    libauc = ref.LibAUCGCLossV1(4, 0.1, 0.6, "cosine", 5)
    for epoch in range(8):
        libauc.adjust_gamma(epoch)
        assert gamma_at(epoch, 0.6, "cosine", 5) == pytest.approx(libauc.gamma)
        assert gamma_at(epoch, 0.6, "constant", None) == 0.6


@pytest.mark.parametrize("memory, message", [
    (SogCLRMemory(gamma=0.0), "gamma must be a number in \\(0, 1\\]"),
    (SogCLRMemory(gamma=1.5), "gamma must be a number in \\(0, 1\\]"),
    (SogCLRMemory(gamma_schedule="cosine"), "needs gamma_decay_epochs"),
    (SogCLRMemory(gamma_schedule="linear"), "gamma_schedule must be one of"),
    (CrossBatchMemory(size=1), "size must be >= 2"),
    (CrossBatchMemory(weight=-1.0), "weight must be a non-negative, finite number"),
    (CrossBatchMemory(start_step=-2), "start_step must be >= 0"),
])
def test_bad_memory_parameters(memory, message):
    with pytest.raises(ValueError, match=message):
        memory.build(10, make_loss("dcl"))


def test_unsupported_losses_are_refused_with_the_supported_ones_named():
    with pytest.raises(ValueError, match=r"each anchor's log-sum-exp, which KCL does not "
                                         r"have; it works with .*DCL"):
        SogCLRMemory().build(10, make_loss("kcl"))
    with pytest.raises(ValueError, match=r"form against a queue, which DHEL does not have; "
                                         r"it works with .*SupCon"):
        CrossBatchMemory().build(10, make_loss("dhel"))
    X, _ = make_paired_gaussians(40, 4, random_state=0)
    with pytest.raises(ValueError, match="which ContrastiveMargin does not have"):
        ContrastiveEmbedder(loss="contrastive_margin", memory=SogCLRMemory(),
                            max_epochs=1).fit(X)
    with pytest.raises(ValueError, match="which FunctionLoss does not have"), \
            pytest.warns(UserWarning, match="bare callable"):
        ContrastiveEmbedder(loss=lambda u, v, temperature: (u - v).pow(2).sum(),
                            memory=SogCLRMemory(), max_epochs=1).fit(X)
    with pytest.raises(ValueError, match="memory must be None or a memory"):
        ContrastiveEmbedder(memory="sogclr", max_epochs=1).fit(X)


# --------------------------------------------------------------------------------------
# Cross-batch memory
# --------------------------------------------------------------------------------------

def zero_loss(**extra):
    zero = torch.zeros((), dtype=torch.float64)
    return LossTerms(zero, zero, zero)


def labelled_stream(steps, b, d, n_classes, seed):
    rng = np.random.default_rng(seed)
    return [(torch.tensor(rng.normal(size=(b, d)), requires_grad=True),
             torch.as_tensor(rng.integers(n_classes, size=b))) for _ in range(steps)]


@pytest.mark.parametrize("loss, options", [
    ("supcon", {}),
    ("contrastive_margin", {"margin": 0.9}),
    ("contrastive_margin", {"margin": 0.9, "averaging": "anchor"}),
])
def test_xbm_against_a_brute_force_loop_through_wrap_around(loss, options):
    """Queue contents after the FIFO wraps, the anchor's own slot left out, value and
    gradients of the memory term, step by step (labelled single views)."""
    size, tau = 10, 0.5
    state = CrossBatchMemory(size=size).build(30, make_loss(loss), "single").double()
    stream = labelled_stream(5, 4, 3, 3, seed=9)
    written = []
    for step, (z, y) in enumerate(stream):
        kwargs = {"temperature": tau, **options} if loss == "supcon" else dict(options)
        got = state(zero_loss, LossBatch(z, "single", y, torch.arange(4)),
                    loss=loss_object(loss, **kwargs), overrides={})
        written.append([(z[r].detach(), int(y[r])) for r in range(4)])
        queue = ref.xbm_queue(written, size)
        assert sorted(queue) == list(range(min(4 * (step + 1), size)))
        for slot, (row, key) in queue.items():
            torch.testing.assert_close(state.bank[slot], row)
            assert int(state.keys[slot]) == key
        bank = {s: r for s, (r, _) in queue.items()}
        keys = {s: k for s, (_, k) in queue.items()}
        self_slots = [(4 * step + r) % size for r in range(4)]
        z_ref = z.detach().clone().requires_grad_()
        if loss == "supcon":
            want = ref.memory_supcon(z_ref, y.tolist(), self_slots, bank, keys, tau)
        else:
            want = ref.memory_margin(z_ref, y.tolist(), self_slots, bank, keys,
                                     options["margin"], options.get("averaging", "separate"))
        torch.testing.assert_close(got.loss, want)
        (g_got,) = torch.autograd.grad(got.loss, z)
        (g_want,) = torch.autograd.grad(want, z_ref)
        torch.testing.assert_close(g_got, g_want)


@pytest.mark.parametrize("loss", ["nt_xent", "dcl", "info_nce", "symmetric_info_nce"])
def test_xbm_with_pairs_uses_sample_ids_and_views(loss):
    """Pairs enqueue both views keyed by sample id; a sample's own earlier embeddings are
    positives, never negatives. nt_xent/dcl anchors meet every entry; info_nce (view 0
    anchors) and the symmetric loss (both directions, summed) meet the other view only."""
    size, tau, b = 12, 0.5, 3
    state = CrossBatchMemory(size=size).build(5, make_loss(loss)).double()
    rng = np.random.default_rng(10)
    written = []
    for step, index in enumerate([[0, 1, 2], [3, 4, 0], [1, 2, 3]]):
        x = torch.tensor(rng.normal(size=(b, 2, 3)), requires_grad=True)
        got = pair_step(state, loss, x[:, 0], x[:, 1], index, tau) if loss != "info_nce" \
            else state(zero_loss, LossBatch(torch.stack([x[:, 0], x[:, 1]], 1), "pairs",
                                            index=torch.as_tensor(index)),
                       loss=loss_object(loss, temperature=tau), overrides={})
        if loss != "info_nce":  # remove the batch term to compare the memory term
            fn = PAIR_FNS[loss]
            got = LossTerms(*(g - w for g, w in zip(got, fn(x[:, 0], x[:, 1], temperature=tau,
                                                             return_terms=True),
                                                    strict=True)))
        rows = [(x[r, v].detach(), (index[r], v)) for v in (0, 1) for r in range(b)]
        written.append(rows)
        queue = ref.xbm_queue(written, size)
        slots = [(2 * b * step + k) % size for k in range(2 * b)]
        anchors = torch.cat([x[:, 0], x[:, 1]])
        ids = [i for _, (i, _) in rows]
        views = [v for _, (_, v) in rows]

        def term(selected, *, decoupled=False, queue=queue, anchors=anchors, ids=ids,
                 views=views, slots=slots):
            bank = {s: r for s, (r, (_, v)) in queue.items() if v in selected}
            keys = {s: i for s, (_, (i, _)) in queue.items()}
            return ref.memory_supcon(anchors, ids, slots, bank, keys, tau, decoupled)

        if loss in ("nt_xent", "dcl"):
            want = term((0, 1), decoupled=loss == "dcl")
        else:
            want_u = ref.memory_supcon(anchors[:b], ids[:b], slots[:b],
                                       {s: r for s, (r, (_, v)) in queue.items() if v == 1},
                                       {s: i for s, (_, (i, _)) in queue.items()}, tau)
            want = want_u
            if loss == "symmetric_info_nce":
                want = want + ref.memory_supcon(
                    anchors[b:], ids[b:], slots[b:],
                    {s: r for s, (r, (_, v)) in queue.items() if v == 0},
                    {s: i for s, (_, (i, _)) in queue.items()}, tau)
        torch.testing.assert_close(got.loss, want)


def test_xbm_first_step_term_is_the_batch_loss():
    """With only the current batch in the queue, nt_xent's memory term is nt_xent."""
    x = torch.randn(6, 2, 4, dtype=torch.float64)
    state = CrossBatchMemory(size=64).build(6, make_loss("nt_xent")).double()
    got = pair_step(state, "nt_xent", x[:, 0], x[:, 1], np.arange(6), 0.3)
    batch = nt_xent(x[:, 0], x[:, 1], temperature=0.3)
    torch.testing.assert_close(got.loss, 2 * batch)


def test_xbm_matches_pytorch_metric_learning_cross_batch_memory():
    """SupCon against the queue equals PML's CrossBatchMemory(SupConLoss) step by step,
    through the wrap-around of the queue (same FIFO, same self-comparison removal)."""
    pml = pytest.importorskip("pytorch_metric_learning")
    from pytorch_metric_learning.losses import CrossBatchMemory as PMLMemory
    from pytorch_metric_learning.losses import SupConLoss

    del pml
    size, tau = 20, 0.2
    theirs = PMLMemory(SupConLoss(temperature=tau), embedding_size=5, memory_size=size)
    loss = make_loss("supcon").set_params(temperature=tau)
    state = CrossBatchMemory(size=size).build(100, loss, "single")
    for z, y in labelled_stream(6, 8, 5, 4, seed=11):
        z = z.float().detach().requires_grad_()
        got = state(lambda **extra: LossTerms(*(torch.zeros(()),) * 3),
                    LossBatch(z, "single", y, torch.arange(8)), loss=loss, overrides={})
        (g_got,) = torch.autograd.grad(got.loss, z)
        z2 = z.detach().clone().requires_grad_()
        want = theirs(z2, y)
        (g_want,) = torch.autograd.grad(want, z2)
        torch.testing.assert_close(got.loss, want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(g_got, g_want, rtol=1e-4, atol=1e-6)


def test_xbm_starts_at_start_step():
    loss = make_loss("supcon").set_params(temperature=0.5)
    state = CrossBatchMemory(size=32, start_step=2).build(10, loss, "single").double()
    for step, (z, y) in enumerate(labelled_stream(3, 4, 3, 2, seed=12)):
        got = state(lambda z=z, y=y, **extra: supcon(z, y, temperature=0.5, return_terms=True),
                    LossBatch(z, "single", y, torch.arange(4)), loss=loss, overrides={})
        plain = supcon(z, y, temperature=0.5)
        if step < 2:
            torch.testing.assert_close(got.loss, plain)
            assert state.filled == 0
        else:
            assert state.filled == 4 and not torch.allclose(got.loss, plain)


# --------------------------------------------------------------------------------------
# In the estimators
# --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pairs():
    return make_paired_gaussians(96, 6, n_clusters=3, random_state=0)


def small(kind=ContrastiveEmbedder, **params):
    defaults = {"n_components": 4, "hidden_layer_sizes": (16,), "lr": 1e-2,
                "selector": ShuffledBatchSelector(16), "random_state": 0, "device": "cpu"}
    return kind(**{**defaults, **params})


def memory_of(est):
    return {k: v.clone() for k, v in est.net_.memory_state.state_dict().items()
            if isinstance(v, torch.Tensor)}


@pytest.mark.parametrize("memory, loss", [(SogCLRMemory(gamma=0.8), "dcl"),
                                          (CrossBatchMemory(size=48), "nt_xent")],
                         ids=["sogclr", "xbm"])
def test_pickle_and_warm_start_equal_uninterrupted_training(pairs, memory, loss):
    X, _ = pairs
    straight = small(loss=loss, memory=memory, max_epochs=4).fit(X)
    first = small(loss=loss, memory=memory, max_epochs=2, warm_start=True).fit(X)
    resumed = pickle.loads(pickle.dumps(first)).fit(X)
    for name, value in straight.net_.module_.state_dict().items():
        torch.testing.assert_close(resumed.net_.module_.state_dict()[name], value)
    for name, value in memory_of(straight).items():
        torch.testing.assert_close(memory_of(resumed)[name], value)
    assert resumed.net_.memory_state.get_extra_state() == \
        straight.net_.memory_state.get_extra_state()


def test_memory_changes_training_clone_resets_and_the_users_object_is_untouched(pairs):
    X, _ = pairs
    memory = SogCLRMemory(gamma=0.5)
    est = small(loss="dcl", memory=memory, max_epochs=2).fit(X)
    plain = small(loss="dcl", max_epochs=2).fit(X)
    assert est.history_[-1, "train_loss"] != plain.history_[-1, "train_loss"]
    assert est.net_.memory_state.visited.all()
    assert not hasattr(memory, "log_u") and memory.get_params()["gamma"] == 0.5
    assert not hasattr(clone(est), "net_")
    refit = clone(est).fit(X)  # a fresh fit starts from an empty state: same result
    torch.testing.assert_close(refit.net_.memory_state.log_u, est.net_.memory_state.log_u)


def test_grid_search_tunes_memory_parameters(pairs):
    X, _ = pairs
    search = GridSearchCV(small(loss="dcl", memory=SogCLRMemory(), max_epochs=1),
                          {"memory__gamma": [0.5, 1.0]}, cv=2).fit(X)
    assert search.best_params_["memory__gamma"] in (0.5, 1.0)
    assert len(search.cv_results_["mean_test_score"]) == 2


def test_supcon_with_xbm_and_sogclr_train(pairs):
    X, y = pairs
    for memory in (CrossBatchMemory(size=64), SogCLRMemory()):
        est = small(SupConEmbedder, memory=memory, max_epochs=3).fit(X[:, 0], y)
        assert est.score(X[:, 0], y) > 0.5
    margin = small(SupConEmbedder, loss="contrastive_margin", memory=CrossBatchMemory(64),
                   max_epochs=2).fit(X[:, 0], y)
    assert np.isfinite(margin.history_[:, "train_loss"]).all()


def test_bad_memory_settings_in_fit(pairs):
    X, _ = pairs
    with pytest.raises(ValueError, match=r"size=20\) cannot hold one batch: a batch adds 32"):
        small(memory=CrossBatchMemory(size=20), max_epochs=1).fit(X)
    est = small(loss="dcl", memory=SogCLRMemory(), max_epochs=1, warm_start=True).fit(X)
    with pytest.raises(ValueError, match="remembers 96 samples by their index; got X with 50"):
        est.fit(X[:50])


def test_the_training_step_sees_the_dataset_indices_of_its_batch(pairs):
    """Indices travel with the rows: through a Dataset with two DataLoader workers, and
    through the on-device path (forced here on the CPU); labels stay aligned."""
    from _helpers import RecordingSelector
    from skorch.callbacks import Callback

    from skcontrast._estimators._data import TensorViews

    class Seen(Callback):
        def initialize(self):
            self.rows = []
            return self

        def on_batch_begin(self, net, batch=None, training=None, **kwargs):
            if training:
                self.rows.append((batch.index.tolist(), batch.views[0][:, 0].tolist()))

    X, _ = pairs
    dataset = torch.utils.data.TensorDataset(torch.tensor(X[:, 0]), torch.tensor(X[:, 1]))
    for data, workers in ((dataset, 2), (X, 0)):
        seen, selector = Seen(), RecordingSelector(ShuffledBatchSelector(16, random_state=3))
        est = small(selector=selector, callbacks=[seen], num_workers=workers, max_epochs=2,
                    memory=SogCLRMemory()).fit(data)
        chosen = [b for epoch in est.net_.selector.seen_ for b in epoch]
        assert [index for index, _ in seen.rows] == chosen
        for index, first_column in seen.rows:  # the rows are those of the indices
            np.testing.assert_allclose(first_column, X[index, 0, 0], rtol=1e-6)
    device_path = pytest.MonkeyPatch()
    device_path.setattr(TensorViews, "resident_device", property(lambda self: torch.device("cpu")))
    try:
        seen, selector = Seen(), RecordingSelector(ShuffledBatchSelector(16, random_state=3))
        est = small(selector=selector, callbacks=[seen], max_epochs=1).fit(X)
    finally:
        device_path.undo()
    assert [index for index, _ in seen.rows] == est.net_.selector.seen_[0]
