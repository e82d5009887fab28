"""Tests of ``skcontrast.selectors._curation``: the curating selectors (JEST, RHO-LOSS),
the summed, subset and per-row losses they score, their references and selection caches."""

import math
import pickle

import numpy as np
import pytest
import torch
from reference import jest_generic_brute_force, summed_pair_loss
from sklearn.base import clone

from skcontrast.datasets import make_paired_gaussians
from skcontrast.losses import (
    DCL,
    DHEL,
    KCL,
    ContrastiveMargin,
    DebiasedNCE,
    HardNegativeNCE,
    InfoNCE,
    LossBatch,
    NTXent,
    SigLIP,
    SupCon,
    SymmetricInfoNCE,
)
from skcontrast.selectors import (
    BindingSelector,
    CurationBatch,
    JESTSelector,
    RhoLossSelector,
    SelectorSampler,
    TemperedSelector,
    jest_select,
)
from skcontrast.selectors._curators import leave_one_out, row_losses, subset_losses
from skcontrast.selectors._jest import chunk_sizes


def scored(z, y, loss):
    """A super-batch's embeddings (and labels) as the LossBatch curation scores."""
    return LossBatch.of(z, y, loss.labelled)


# --------------------------------------------------------------------------------------
# Curating selectors: super-batches, the step hook, references
# --------------------------------------------------------------------------------------

def unit_pairs(n, k=4, seed=0):
    z = torch.randn(n, 2, k, generator=torch.Generator().manual_seed(seed))
    return torch.nn.functional.normalize(z, dim=-1)


def copy_generator(selector):
    g = torch.Generator()
    g.set_state(selector._generator.get_state())
    return g


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize(("n", "b", "f"), [(100, 8, 0.5), (64, 16, 0.75), (37, 4, 0.9),
                                           (20, 5, 0.0)])
def test_super_batches_partition_the_epoch(n, b, f, drop_last):
    sel = JESTSelector(b, f, score="hard", drop_last=drop_last, random_state=0)
    batches = list(sel.split(np.zeros((n, 1))))
    size = sel.super_batch_size(n)
    assert size == min(n, max(b, round(b / (1 - f))))
    assert len(batches) == sel.get_n_splits(n)
    assert all(len(batch) == size for batch in batches[:-1])
    flat = np.concatenate(batches)
    assert len(set(flat.tolist())) == len(flat)
    if not drop_last:
        assert sorted(flat.tolist()) == list(range(n))
    assert sel.nominal_batch_size(n) == b
    assert sel.kept_rows(size, n) == b  # a whole super-batch keeps batch_size rows
    assert sel.kept_rows(size // 2, n) == max(2, round(size // 2 * b / size))


def test_jest_curate_keeps_distinct_rows_reproducibly():
    z = unit_pairs(32)
    runs = []
    for seed in (0, 0, 1):
        sel = JESTSelector(8, 0.75, score="hard", random_state=seed)
        batch = next(iter(sel.split(np.zeros((32, 1)))))
        kept = sel.curate(CurationBatch(z, torch.as_tensor(batch)))
        assert kept.dtype == torch.int64 and len(set(kept.tolist())) == 8
        runs.append(kept.tolist())
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_jest_with_siglip_is_the_papers_sampler_on_the_two_models_logits():
    loss = SigLIP(temperature=0.5, bias=-2.0)
    z, zr = unit_pairs(24, seed=0), unit_pairs(24, seed=1)
    sel = JESTSelector(8, 2 / 3, n_chunks=4, reference=zr.numpy(), loss=loss,
                       random_state=0)
    batch = torch.as_tensor(next(iter(sel.split(np.zeros((24, 1))))))
    g = copy_generator(sel)
    kept = sel.curate(CurationBatch(z, batch))
    L = z[:, 0] @ z[:, 1].T / 0.5 - 2.0
    R = zr[batch, 0] @ zr[batch, 1].T / 0.5 - 2.0
    assert kept.tolist() == jest_select(L, R, 8, 4, g).tolist()


@pytest.mark.parametrize(("lambda_pos", "lambda_ent"), [(3.0, 1.0), (1.0, 0.25)])
@pytest.mark.parametrize("symmetric", [False, True])
def test_jest_with_siglip_scores_the_loss_as_it_is_trained(lambda_pos, lambda_ent, symmetric):
    # the balance weights are part of the loss: a sub-batch's score is the difference of
    # the two models' summed losses under them (lambda_pos=3 read 0.98 for 2.63)

    loss = SigLIP(temperature=0.5, bias=-2.0, lambda_pos=lambda_pos, lambda_ent=lambda_ent,
                  symmetric=symmetric, chunk_size=None)
    n, keep, sizes = 24, 8, chunk_sizes(8, 4)
    z, zr = unit_pairs(n, seed=0), unit_pairs(n, seed=1)
    sel = JESTSelector(keep, 2 / 3, n_chunks=4, reference=zr.numpy(), loss=loss,
                       random_state=0)
    batch = torch.as_tensor(next(iter(sel.split(np.zeros((n, 1))))))
    g = copy_generator(sel)
    kept = sel.curate(CurationBatch(z, batch))
    learner, reference = z.double(), zr[batch].double()

    def score(rows):  # JEST's learnability of a sub-batch, straight from the loss
        rows = sorted(rows)
        if len(rows) == 1:  # one pair: its positive term alone (no batch to call it on)
            return sum(sign * lambda_pos * math.log1p(math.exp(
                -(float(x[rows[0], 0] @ x[rows[0], 1]) / 0.5 - 2.0)))
                for x, sign in ((learner, 1), (reference, -1)))
        return len(rows) * float(loss(learner[rows, 0], learner[rows, 1])
                                 - loss(reference[rows, 0], reference[rows, 1]))

    rng = np.random.default_rng(0)
    for size in (2, 5, 11):
        rows = rng.choice(n, size, replace=False)
        block = (loss.pair_losses(learner[:, 0], learner[:, 1])
                 - loss.pair_losses(reference[:, 0], reference[:, 1]))[rows][:, rows].sum()
        assert float(block) == pytest.approx(score(rows), rel=1e-9)
    chosen: list[int] = []
    for size in sizes:
        draws = torch.rand(n, generator=g).tolist()
        base = score(chosen) if chosen else 0.0
        keys = {k: score([*chosen, k]) - base - math.log(-math.log(draws[k]))
                for k in range(n) if k not in chosen}
        chosen += sorted(keys, key=keys.get, reverse=True)[:size]
    assert kept.tolist() == chosen


@pytest.mark.parametrize("score", ["learnability", "hard"])
def test_jest_with_any_loss_equals_a_brute_force_sampler(score):
    loss = SymmetricInfoNCE(temperature=0.3)
    n, keep, n_chunks = 12, 6, 3
    z, zr = unit_pairs(n, seed=2).double(), unit_pairs(n, seed=3).double()
    reference = zr.numpy() if score == "learnability" else None
    sel = JESTSelector(keep, 0.5, n_chunks=n_chunks, score=score, reference=reference,
                       loss=loss, random_state=0)
    batch = torch.as_tensor(next(iter(sel.split(np.zeros((n, 1))))))
    g = copy_generator(sel)
    kept = sel.curate(CurationBatch(z, batch))
    sizes = chunk_sizes(keep, n_chunks)
    uniforms = [torch.rand(n, generator=g).tolist() for _ in sizes]
    ref_pair = (zr[batch, 0], zr[batch, 1]) if reference is not None else None
    expected = jest_generic_brute_force(loss, (z[:, 0], z[:, 1]), ref_pair, keep, sizes,
                                        uniforms)
    assert kept.tolist() == expected


def test_subset_losses_and_leave_one_out_are_summed_losses():
    loss = SymmetricInfoNCE(temperature=0.2)
    z = unit_pairs(7, seed=4).double()
    rows = np.array([[0, 1, 2], [3, 5, 6]])
    got = subset_losses(scored(z, None, loss), loss, rows)
    for r, value in zip(rows, got, strict=True):
        assert float(value) == pytest.approx(summed_pair_loss(loss, z[:, 0], z[:, 1], r))
    share = leave_one_out(scored(z, None, loss), loss)
    whole = summed_pair_loss(loss, z[:, 0], z[:, 1], range(7))
    for i in range(7):
        rest = [j for j in range(7) if j != i]
        assert float(share[i]) == pytest.approx(whole - summed_pair_loss(loss, z[:, 0],
                                                                         z[:, 1], rest))
    assert subset_losses(scored(z, None, loss), loss, np.array([[3]])).tolist() == [0.0]


def test_subset_losses_of_a_label_loss_count_both_crops():
    loss = SupCon(temperature=0.5)
    z = unit_pairs(6, seed=5).double()  # two crops of six items
    y = torch.tensor([0, 0, 1, 1, 2, 2])
    rows = np.array([[0, 1, 2, 3]])
    crops = z[rows[0]].reshape(-1, 4)
    direct = float(loss(crops, y[rows[0]].repeat_interleave(2))) * 4
    assert float(subset_losses(scored(z, y, loss), loss, rows)[0]) == pytest.approx(direct)


@pytest.mark.parametrize("loss", [SymmetricInfoNCE(0.3), InfoNCE(0.3), NTXent(0.3), DCL(0.3),
                                  SigLIP(0.5, bias=-2.0), HardNegativeNCE(0.3),
                                  DebiasedNCE(0.3), KCL(), DHEL(0.3), SupCon(0.3),
                                  ContrastiveMargin(0.5)],
                         ids=lambda loss: type(loss).__name__)
def test_row_losses_add_up_to_the_summed_loss(loss):
    z = unit_pairs(9, seed=9).double()
    rows = row_losses(scored(z, None, loss), loss)
    assert rows.shape == (9,)
    whole = float(subset_losses(scored(z, None, loss), loss, np.arange(9)[None])[0])
    if isinstance(loss, ContrastiveMargin):  # no per-anchor terms: leave-one-out shares
        everyone = np.arange(9)
        without = np.stack([np.delete(everyone, i) for i in range(9)])
        expected = whole - subset_losses(scored(z, None, loss), loss, without)
        torch.testing.assert_close(rows, expected)
    else:
        assert float(rows.sum()) == pytest.approx(whole, rel=1e-9, abs=1e-9)


def test_row_losses_of_two_crops_with_labels_add_up_too():
    z, y = unit_pairs(8, seed=10).double(), torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    rows = row_losses(scored(z, y, SupCon(0.5)), SupCon(0.5))
    whole = float(subset_losses(scored(z, y, SupCon(0.5)), SupCon(0.5), np.arange(8)[None])[0])
    assert float(rows.sum()) == pytest.approx(whole, rel=1e-9)
    # a crop's terms belong to its own item: crops of item 5 pointing apart make row 5
    # the largest (each item its own class, so its crops are each other's positive)
    apart = z.clone()
    apart[5, 1] = -apart[5, 0]
    assert int(row_losses(scored(apart, torch.arange(8), SupCon(0.5)), SupCon(0.5)).argmax()) == 5


def test_rho_loss_keeps_the_largest_reducible_losses():
    loss = SymmetricInfoNCE(temperature=0.3)
    z, zr = unit_pairs(16, seed=6).double(), unit_pairs(16, seed=7).double()
    sel = RhoLossSelector(4, 0.75, reference=zr, loss=loss, random_state=0)
    batch = torch.as_tensor(next(iter(sel.split(np.zeros((16, 1))))))
    kept = sel.curate(CurationBatch(z, batch))
    reducible = row_losses(scored(z, None, loss), loss) - \
        row_losses(scored(zr[batch], None, loss), loss)
    assert set(kept.tolist()) == set(torch.topk(reducible, 4).indices.tolist())
    # without a reference: the learner's loss alone
    alone = RhoLossSelector(4, 0.75, loss=loss, random_state=0)
    list(alone.split(np.zeros((16, 1))))
    assert set(alone.curate(CurationBatch(z, batch)).tolist()) == \
        set(torch.topk(row_losses(scored(z, None, loss), loss), 4).indices.tolist())


def test_a_reference_model_embeds_the_views_on_a_copy():
    encoder = torch.nn.Linear(3, 4)
    encoder.train()
    views = (torch.randn(8, 3), torch.randn(8, 3))
    sel = JESTSelector(4, 0.5, reference=encoder, random_state=0)
    list(sel.split(np.zeros((8, 1))))
    out = sel.reference_embeddings(CurationBatch(unit_pairs(8), torch.arange(8), None, views))
    with torch.no_grad():
        expected = torch.stack([encoder(views[0]), encoder(views[1])], dim=1)
    torch.testing.assert_close(out, expected)
    assert encoder.training and encoder.weight.requires_grad  # the user's object untouched
    assert sel.scores_with_model
    with pytest.raises(ValueError, match="views=None"):
        sel.reference_embeddings(CurationBatch(unit_pairs(8), torch.arange(8)))


def test_fixed_reference_embeddings_are_read_by_row():
    table = unit_pairs(20, seed=8)
    sel = JESTSelector(4, 0.5, reference=table.numpy(), random_state=0)
    index = torch.tensor([3, 17, 5, 0])
    out = sel.reference_embeddings(CurationBatch(unit_pairs(4), index))
    torch.testing.assert_close(out, table[index])
    assert not sel.scores_with_model
    short = JESTSelector(4, 0.5, reference=table[:10].numpy())
    with pytest.raises(ValueError, match="reference embeddings hold 10 rows"):
        short.reference_embeddings(CurationBatch(unit_pairs(4), index))


def test_clone_and_pickle_keep_the_reference():
    from skcontrast import ContrastiveEmbedder

    fitted = ContrastiveEmbedder(n_components=2, hidden_layer_sizes=(4,), max_epochs=1,
                                 random_state=0).fit(make_paired_gaussians(20, 4)[0])
    sel = JESTSelector(4, 0.5, reference=fitted, random_state=0)
    twin = clone(sel)
    assert twin.reference is fitted and twin.get_params()["batch_size"] == 4
    restored = pickle.loads(pickle.dumps(sel))
    assert hasattr(restored.reference, "net_")
    with pytest.raises(ValueError, match="reference ContrastiveEmbedder is not fitted"):
        list(JESTSelector(4, reference=ContrastiveEmbedder()).split(np.zeros((8, 1))))


def test_curating_selectors_are_refused_where_rows_cannot_be_kept():
    sel = JESTSelector(4, 0.5, score="hard", random_state=0)
    with pytest.raises(ValueError, match="TemperedSelector cannot wrap JESTSelector"):
        list(TemperedSelector(sel).split(np.zeros((16, 1))))
    with pytest.raises(ValueError, match="BindingSelector cannot wrap JESTSelector"):
        list(BindingSelector(sel).split(np.zeros((16, 1)), np.repeat([0, 1], 8)))
    with pytest.raises(ValueError, match="call split"):
        JESTSelector(4, score="hard").curate(CurationBatch(unit_pairs(8), torch.arange(8)))
    with pytest.raises(ValueError, match="score='learnability' needs a reference"):
        list(JESTSelector(4).split(np.zeros((8, 1))))
    with pytest.raises(ValueError, match="filter_ratio"):
        list(JESTSelector(4, 1.0, score="hard").split(np.zeros((8, 1))))
    with pytest.raises(ValueError, match="reference must be a fitted estimator"):
        list(RhoLossSelector(4, reference="model.pt").split(np.zeros((8, 1))))


def test_a_plain_loop_curates_the_super_batches_of_a_selector_sampler():
    sel = JESTSelector(4, 0.5, score="hard", random_state=0)
    sampler = SelectorSampler(sel, 16)
    seen = []
    for batch in sampler:
        z = unit_pairs(len(batch), seed=len(seen))
        kept = sel.curate(CurationBatch(z, torch.as_tensor(batch)))
        seen.append(np.asarray(batch)[kept.numpy()])
    assert [len(s) for s in seen] == [4, 4]
    assert len(set(np.concatenate(seen).tolist())) == 8


def test_every_process_curates_the_whole_super_batch_and_trains_on_its_slice():
    # the same seed and embeddings: the same kept rows on each of two ranks, which
    # slice them evenly between them
    kept_by_rank = []
    for rank in (0, 1):
        sel = JESTSelector(4, 0.5, score="hard", random_state=0)
        sampler = SelectorSampler(sel, 16, num_replicas=2, rank=rank)
        rows = []
        for step, batch in enumerate(sampler):
            assert len(batch) == 8  # the whole super-batch
            kept = sel.curate(CurationBatch(unit_pairs(8, seed=step), torch.as_tensor(batch)))
            rows.append(np.asarray(batch)[sampler.rank_slice(kept)])
        kept_by_rank.append(rows)
    whole = JESTSelector(4, 0.5, score="hard", random_state=0)
    for step, batch in enumerate(SelectorSampler(whole, 16)):
        kept = whole.curate(CurationBatch(unit_pairs(8, seed=step), torch.as_tensor(batch)))
        expected = np.asarray(batch)[kept.numpy()]
        np.testing.assert_array_equal(
            np.concatenate([kept_by_rank[0][step], kept_by_rank[1][step]]), expected)


def test_a_cached_selection_pass_embeds_only_rows_never_met():
    sel = JESTSelector(4, 0.5, score="hard", selection_pass="cached", random_state=0)
    batches = list(sel.split(np.zeros((16, 1))))
    index = torch.as_tensor(batches[0])
    assert sel.stale_rows(index).tolist() == list(range(8))  # nothing met yet
    z = unit_pairs(8)
    got = sel.complete(index, torch.arange(8), z)
    torch.testing.assert_close(got, z.float())
    sel.curate(CurationBatch(got, index))
    assert len(sel.stale_rows(index)) == 0  # met: read from the table
    newer = unit_pairs(2, seed=5)
    sel.remember(index[:2], newer)  # the training step's embeddings of two rows
    torch.testing.assert_close(sel.complete(index, torch.arange(0), None)[:2], newer.float())
    mixed = torch.as_tensor(np.concatenate([batches[0][:3], batches[1][:3]]))
    assert sel.stale_rows(mixed).tolist() == [3, 4, 5]
    with pytest.raises(ValueError, match="never computed"):
        sel.complete(mixed, torch.arange(0), None)
    fresh = JESTSelector(4, 0.5, score="hard", random_state=0)
    list(fresh.split(np.zeros((16, 1))))
    assert fresh.stale_rows(index).tolist() == list(range(8))
    with pytest.raises(ValueError, match="embeds the whole super-batch"):
        fresh.complete(index, torch.arange(2), z[:2])
    with pytest.raises(ValueError, match="selection_pass must be one of"):
        list(JESTSelector(4, score="hard", selection_pass="stale").split(np.zeros((8, 1))))
    # the table is training state: a pickled selector continues with it
    again = pickle.loads(pickle.dumps(sel))
    torch.testing.assert_close(again.complete(index, torch.arange(0), None),
                               sel.complete(index, torch.arange(0), None))


def test_a_cached_reference_model_embeds_each_row_once():
    calls = []

    class Counting(torch.nn.Module):
        def forward(self, x):
            calls.append(len(x))
            return x[:, :3]

    sel = RhoLossSelector(4, 0.5, reference=Counting(), selection_pass="cached",
                          random_state=0)
    X = torch.randn(16, 6)
    for _ in range(2):  # two epochs
        for batch in sel.split(np.zeros((16, 1))):
            index = torch.as_tensor(batch)
            views = (X[index], X[index] + 0.1)
            sel.curate(CurationBatch(unit_pairs(len(batch)), index, views=views))
    assert sum(calls) == 2 * 16  # each row's two views, once, in the first epoch


@pytest.mark.parametrize("loss", [NTXent(0.3), SymmetricInfoNCE(0.3), InfoNCE(0.3),
                                  SupCon(0.3)], ids=lambda loss: type(loss).__name__)
def test_a_rows_loss_is_its_own(loss):
    z = unit_pairs(10, seed=11).double()
    z[:, 1] = z[:, 0]  # aligned views, a small loss everywhere ...
    z[3, 1] = -z[3, 0]  # ... except pair 3's, which point apart
    assert int(row_losses(scored(z, None, loss), loss).argmax()) == 3


def test_fixed_reference_embeddings_need_one_row_per_sample_in_the_views_layout():
    # 500 rows for 32 trained on misaligned scores; (n, k) rows for pairs were taken too
    from skcontrast import ContrastiveEmbedder

    X, _ = make_paired_gaussians(32, 4, random_state=0)
    small = {"n_components": 3, "hidden_layer_sizes": (8,), "max_epochs": 1,
             "random_state": 0}
    for reference, match in ((np.zeros((500, 2, 3)), r"n = 32; got shape \(500, 2, 3\)"),
                             (np.zeros((32, 3, 3)), r"n = 32; got shape \(32, 3, 3\)")):
        with pytest.raises(ValueError, match=match):
            ContrastiveEmbedder(**small, selector=JESTSelector(8, reference=reference)).fit(X)
    with pytest.raises(ValueError, match=r"do not match the learner's \(n, 2, k\) pairs"):
        ContrastiveEmbedder(**small, selector=RhoLossSelector(
            8, reference=np.ones((32, 3), dtype=np.float32))).fit(X)
    rows = np.ones((32, 2, 5), dtype=np.float32)  # another model's width is fine
    ContrastiveEmbedder(**small, selector=RhoLossSelector(8, reference=rows)).fit(X)
