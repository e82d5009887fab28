"""Tests of ``skcontrast._estimators._optim``: LazyAdam is Adam on dense gradients and
SparseAdam's row rule on sparse ones (against torch and a float64 loop), its state is
Adam's, and the estimators give the default text encoder sparse gradients where the
optimizer takes them."""

import copy

import numpy as np
import pytest
import torch
from _helpers import TEXT_FIT
from skorch.callbacks import Callback
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

from skcontrast import ContrastiveEmbedder, LazyAdam
from skcontrast.text import HashingNgramTokenizer, NgramBagEncoder


def model(seed=0, sparse=True):
    torch.manual_seed(seed)
    return nn.ModuleDict({"bag": nn.EmbeddingBag(50, 6, mode="sum", sparse=sparse),
                          "head": nn.Linear(6, 3)})


def batches(n=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 50, (8, 5), generator=g) for _ in range(n)]


def loss_of(net, ids):
    return net["head"](net["bag"](ids)).square().mean()


def train(net, optimizer, data):
    for ids in data:
        optimizer.zero_grad()
        loss_of(net, ids).backward()
        optimizer.step()


ADAM_OPTIONS = [{}, {"weight_decay": 0.1}, {"amsgrad": True}, {"maximize": True},
                {"foreach": True}, {"foreach": False}, {"fused": True},
                {"weight_decay": 0.1, "decoupled_weight_decay": True},
                {"lr": torch.tensor(0.05), "foreach": False},
                {"betas": (0.5, 0.7), "eps": 1e-3, "amsgrad": True, "weight_decay": 0.1}]


@pytest.mark.parametrize("options", ADAM_OPTIONS, ids=repr)
def test_dense_gradients_train_exactly_as_adam(options):
    a, b = model(sparse=False), model(sparse=False)
    lazy = LazyAdam(a.parameters(), **{"lr": 0.05, **options})
    adam = torch.optim.Adam(b.parameters(), **{"lr": 0.05, **options})
    train(a, lazy, batches())
    train(b, adam, batches())
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)
    for mine, theirs in zip(lazy.state_dict()["state"].values(),
                            adam.state_dict()["state"].values(), strict=True):
        assert mine.keys() == theirs.keys()
        for key, value in mine.items():  # the step count's dtype and device too
            assert value.dtype == theirs[key].dtype and value.device == theirs[key].device
            assert torch.equal(value, theirs[key])


@pytest.mark.parametrize("sparse", [False, True])
def test_step_hooks_run_once_a_step_whatever_other_optimizers_exist(sparse):
    # torch wraps Adam.step with the hooks once any Adam exists; LazyAdam.step reached
    # it through super() and ran every hook twice
    torch.optim.Adam(model(sparse=False).parameters())
    net = model(sparse=sparse)
    optimizer = LazyAdam(net.parameters(), lr=0.05)
    calls = []
    optimizer.register_step_pre_hook(lambda *_: calls.append("pre"))
    optimizer.register_step_post_hook(lambda *_: calls.append("post"))
    handle = register_optimizer_step_post_hook(
        lambda o, *_: calls.append("global") if o is optimizer else None)
    try:
        train(net, optimizer, batches(4))
    finally:
        handle.remove()
    assert calls == ["pre", "post", "global"] * 4


def test_sparse_rows_follow_sparse_adam_and_dense_ones_adam():
    """torch's SparseAdam puts eps outside the bias correction of the second moment;
    LazyAdam puts it where Adam (Kingma and Ba's Algorithm 1) does. Without eps the
    two rules are one (eps=1e-30)."""
    lazy = model()
    train(lazy, LazyAdam(lazy.parameters(), lr=0.05, eps=1e-30), batches())
    torch_sparse = model()
    optimizers = [torch.optim.SparseAdam(list(torch_sparse["bag"].parameters()), lr=0.05,
                                         eps=1e-30),
                  torch.optim.Adam(torch_sparse["head"].parameters(), lr=0.05, eps=1e-30)]
    for ids in batches():
        for o in optimizers:
            o.zero_grad()
        loss_of(torch_sparse, ids).backward()
        for o in optimizers:
            o.step()
    for p, q in zip(lazy.parameters(), torch_sparse.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-7)


def test_a_row_in_every_step_follows_dense_adam():
    every = [torch.arange(50).view(10, 5)] * 5  # each step touches every row once
    lazy, dense = model(), model(sparse=False)
    train(lazy, LazyAdam(lazy.parameters(), lr=0.05), every)
    train(dense, torch.optim.Adam(dense.parameters(), lr=0.05), every)
    for p, q in zip(lazy.parameters(), dense.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def reference_lazy_adam(weight, steps, lr, betas, eps, weight_decay, decoupled=False):
    """The lazy rule in float64, one row at a time: ``steps`` is a list of
    {row: gradient} dicts (rows summed); ``decoupled``: AdamW's decay of the row."""
    w = weight.double().clone()
    m, v = torch.zeros_like(w), torch.zeros_like(w)
    for t, grads in enumerate(steps, 1):
        for r, g in grads.items():
            if decoupled:
                w[r] *= 1 - lr * weight_decay
                g = g.double()
            else:
                g = g.double() + weight_decay * w[r]
            m[r] = betas[0] * m[r] + (1 - betas[0]) * g
            v[r] = betas[1] * v[r] + (1 - betas[1]) * g * g
            denominator = (v[r] / (1 - betas[1] ** t)).sqrt() + eps
            w[r] -= lr / (1 - betas[0] ** t) * m[r] / denominator
    return w


@pytest.mark.parametrize("decoupled", [False, True])
def test_the_lazy_rule_with_weight_decay_and_repeated_rows_against_a_float64_loop(decoupled):
    torch.manual_seed(0)
    table = nn.Embedding(10, 4, sparse=True).double()
    start = table.weight.detach().clone()
    optimizer = LazyAdam(table.parameters(), lr=0.1, betas=(0.8, 0.9), eps=1e-6,
                         weight_decay=0.05, decoupled_weight_decay=decoupled)
    steps = []
    for ids in (torch.tensor([1, 3, 3]), torch.tensor([3, 7]), torch.tensor([0, 1, 9, 9])):
        optimizer.zero_grad()
        out = table(ids)
        coefficients = torch.arange(1.0, 1 + out.numel(), dtype=torch.float64).view_as(out)
        (out * coefficients).sum().backward()
        grads: dict = {}
        for i, r in enumerate(ids.tolist()):
            grads[r] = grads.get(r, 0) + coefficients[i]
        steps.append(grads)
        optimizer.step()
    want = reference_lazy_adam(start, steps, 0.1, (0.8, 0.9), 1e-6, 0.05, decoupled)
    torch.testing.assert_close(table.weight.detach(), want, rtol=1e-12, atol=1e-12)
    untouched = [2, 4, 5, 6, 8]
    assert torch.equal(table.weight.detach()[untouched], start[untouched])


def test_the_state_is_adams_and_round_trips():
    a = model()
    optimizer = LazyAdam(a.parameters(), lr=0.05)
    data = batches(8)
    train(a, optimizer, data[:4])
    b = copy.deepcopy(a)
    resumed = LazyAdam(b.parameters(), lr=0.05)
    resumed.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    train(a, optimizer, data[4:])
    train(b, resumed, data[4:])
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)
    state = optimizer.state_dict()["state"][0]
    assert set(state) == {"step", "exp_avg", "exp_avg_sq"}  # Adam's keys
    plain = torch.optim.Adam(model().parameters(), lr=0.05)
    plain.load_state_dict(optimizer.state_dict())  # and Adam takes it


def test_amsgrad_is_refused_for_sparse_gradients():
    net = model()
    optimizer = LazyAdam(net.parameters(), lr=0.05, amsgrad=True)
    loss_of(net, batches(1)[0]).backward()
    with pytest.raises(ValueError, match="amsgrad"):
        optimizer.step()


class FirstWeights(Callback):
    """Keeps the module's weights as training begins."""

    def on_train_begin(self, net, **kwargs):
        self.weights_ = {n: p.detach().clone() for n, p in net.module_.named_parameters()}


#: Every optimizer name the estimators take (and Adagrad, a class that takes sparse
#: gradients), with and without weight decay and momentum, and whether the default text
#: bag then trains with sparse gradients.
TEXT_OPTIMIZERS = [
    ("adam", {}, True), ("adam", {"weight_decay": 1e-4}, True),
    ("adam", {"weight_decay": 1e-4, "decoupled_weight_decay": True}, True),
    ("adam", {"amsgrad": True}, False),
    ("adamw", {}, False), ("adamw", {"weight_decay": 0}, False),
    ("sgd", {}, True), ("sgd", {"weight_decay": 1e-4}, False),
    ("sgd", {"momentum": 0.9}, False), ("sgd", {"momentum": 0.9, "nesterov": True}, False),
    ("sgd", {"momentum": 0.9, "weight_decay": 1e-4}, False),
    (torch.optim.Adagrad, {}, True), (torch.optim.Adagrad, {"weight_decay": 1e-4}, False),
]


@pytest.mark.parametrize(("optimizer", "settings", "sparse"), TEXT_OPTIMIZERS, ids=str)
def test_every_optimizer_and_its_settings_train_the_default_text_model(
        text_pairs, optimizer, settings, sparse):
    # the bag was made sparse by the optimizer's class alone: SGD and Adagrad with weight
    # decay crashed in torch, SGD's sparse momentum buffer grew every step
    first = FirstWeights()
    est = ContrastiveEmbedder(**{**TEXT_FIT, "max_epochs": 1, "n_components": 16},
                              optimizer=optimizer, lr=0.05, callbacks=[first],
                              **{f"optimizer__{k}": v for k, v in settings.items()}
                              ).fit(text_pairs)
    bag = est.net_.module_.encoders[0].bag
    assert bag.sparse is sparse
    assert np.isfinite(est.transform([a for a, _ in text_pairs])).all()
    for name, weight in est.net_.module_.named_parameters():
        assert torch.isfinite(weight).all()
        assert not torch.equal(weight, first.weights_[name]), name


@pytest.mark.parametrize(("optimizer", "settings", "named"), [
    ("adamw", {}, "AdamW"), ("sgd", {"momentum": 0.9}, r"SGD with momentum=0\.9"),
    ("adam", {"amsgrad": True}, "LazyAdam with amsgrad=True"),
    (torch.optim.Adagrad, {"weight_decay": 0.1}, r"Adagrad with weight_decay=0\.1")])
def test_a_users_sparse_table_with_settings_that_cannot_take_it_is_named(
        optimizer, settings, named):
    X = np.random.default_rng(0).integers(1, 40, size=(32, 2, 5))

    def encoder(n_in, n_out):
        return nn.Sequential(nn.EmbeddingBag(40, n_out, sparse=True))

    with pytest.raises(ValueError, match=rf"'encoders.0.0' has sparse=True, and the "
                                         rf"optimizer {named} does not update sparse"):
        ContrastiveEmbedder(module=encoder, optimizer=optimizer, max_epochs=1, batch_size=8,
                            **{f"optimizer__{k}": v for k, v in settings.items()}).fit(X)
    est = ContrastiveEmbedder(module=encoder, max_epochs=1, batch_size=8).fit(X)
    assert est.net_.module_.encoders[0][0].weight.grad is None or \
        est.net_.module_.encoders[0][0].sparse


def test_sparse_and_dense_text_fits_agree_for_sgd(text_pairs):
    """Sparse gradients change how the update is stored, not what it is: with SGD
    (whose rule is the same either way) both fits give the same embeddings."""
    def fit(sparse):
        def encoder(n_in, n_out):
            return NgramBagEncoder(2**12 + 1, n_out, (64,), sparse=sparse)
        return ContrastiveEmbedder(module=encoder, optimizer="sgd", lr=0.5, max_epochs=2,
                                   batch_size=8, random_state=0,
                                   tokenizer=HashingNgramTokenizer(n_features=2**12)
                                   ).fit(text_pairs)
    texts = [a for a, _ in text_pairs[:6]]
    np.testing.assert_allclose(fit(True).transform(texts), fit(False).transform(texts),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("resume", ["warm start", "save and load", "pickle"])
def test_two_plus_two_sparse_epochs_are_four(text_pairs, resume, tmp_path):
    """The default text encoder trains with sparse gradients and LazyAdam; its moments
    are training state, so 2 + 2 epochs equal 4, through a save or a pickle too."""
    import pickle

    import skcontrast

    whole = ContrastiveEmbedder(**{**TEXT_FIT, "max_epochs": 4}).fit(text_pairs)
    half = ContrastiveEmbedder(**TEXT_FIT).fit(text_pairs)
    assert half.net_.module_.encoders[0].bag.sparse
    state = half.net_.optimizer_.state_dict()["state"]
    assert any(s["exp_avg"].shape[0] == 2**12 + 1 for s in state.values())
    if resume == "save and load":
        half.save(tmp_path / "half")
        half = skcontrast.load(tmp_path / "half")
    elif resume == "pickle":
        half = pickle.loads(pickle.dumps(half))
    half.set_params(warm_start=True).fit(text_pairs)
    texts = [a for a, _ in text_pairs]
    np.testing.assert_allclose(half.transform(texts), whole.transform(texts), atol=1e-6)


def test_micro_batches_give_the_plain_sparse_update(text_pairs):
    texts = [a for a, _ in text_pairs]
    plain = ContrastiveEmbedder(**TEXT_FIT).fit(text_pairs)
    cached = ContrastiveEmbedder(**TEXT_FIT, micro_batch_size=3).fit(text_pairs)
    np.testing.assert_allclose(cached.transform(texts), plain.transform(texts), atol=1e-5)


def test_bfloat16_autocast_trains_the_sparse_bag(text_pairs):
    est = ContrastiveEmbedder(**TEXT_FIT, precision="bfloat16").fit(text_pairs)
    fresh = ContrastiveEmbedder(**{**TEXT_FIT, "max_epochs": 1, "lr": 1e-12}).fit(text_pairs)
    moved = est.net_.module_.encoders[0].bag.weight - fresh.net_.module_.encoders[0].bag.weight
    assert est.net_.module_.encoders[0].bag.sparse and bool(moved.abs().max() > 1e-4)
    assert np.isfinite(est.transform([a for a, _ in text_pairs])).all()


def test_a_resumed_checkpoint_continues_sparse_training(text_pairs, tmp_path):
    accelerate = pytest.importorskip("accelerate")
    from skcontrast import AcceleratorCheckpoint

    def fit(epochs, callbacks=None):
        return ContrastiveEmbedder(**{**TEXT_FIT, "max_epochs": epochs},
                                   accelerator=accelerate.Accelerator(cpu=True),
                                   callbacks=callbacks).fit(text_pairs)
    whole = fit(3)
    fit(2, [AcceleratorCheckpoint(tmp_path / "s")])
    resumed = fit(1, [AcceleratorCheckpoint(tmp_path / "s", resume=True)])
    texts = [a for a, _ in text_pairs]
    np.testing.assert_allclose(resumed.transform(texts), whole.transform(texts), atol=1e-6)
