"""Tests of ``skcontrast.metrics``: retrieval recall, nDCG, ranking scores and the other
measures, against brute-force definitions."""

import math

import numpy as np
import pytest
import reference as ref
import torch
from _helpers import paired_gaussians, small_mlp
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.model_selection import GridSearchCV

from skcontrast import ContrastiveEmbedder, SupConEmbedder
from skcontrast import geometry as G
from skcontrast import metrics as M
from skcontrast.metrics import get_scorer
from skcontrast.metrics._retrieval import _Screen, _top


class NoisyPairEmbedder(TransformerMixin, BaseEstimator):
    """A stand-in for a trained pair embedder: view 1 is view 0 plus noise."""

    def __init__(self, noise=0.1):
        self.noise = noise

    def fit(self, X, y=None):
        self.n_features_in_ = X.shape[1]
        return self

    def transform(self, X):
        return X[:, : X.shape[1] // 2]

    def transform_pairs(self, X):
        half = X.shape[1] // 2
        rng = np.random.default_rng(0)
        return X[:, :half], X[:, :half] + self.noise * rng.normal(size=(len(X), half))


def _ranking_brute_force(ranked, query_groups, document_groups, k):
    """recall@1, recall@k, nDCG@k and MRR@k, one query at a time."""
    out = {"recall@1": [], f"recall@{k}": [], f"ndcg@{k}": [], f"mrr@{k}": []}
    for row, group in zip(ranked, query_groups, strict=True):
        hits = [j >= 0 and document_groups[j] == group for j in row[:k]]
        relevant = sum(g == group for g in document_groups)
        ideal = sum(1 / math.log2(r + 2) for r in range(min(relevant, k)))
        out["recall@1"].append(float(hits[0]))
        out[f"recall@{k}"].append(float(any(hits)))
        out[f"ndcg@{k}"].append(sum(h / math.log2(r + 2) for r, h in enumerate(hits)) / ideal)
        out[f"mrr@{k}"].append(next((1 / (r + 1) for r, h in enumerate(hits) if h), 0.0))
    return {key: float(np.mean(v)) for key, v in out.items()}


def test_recall_identical_views_is_one_and_random_is_chance():
    x = np.random.default_rng(0).normal(size=(400, 16))
    assert M.recall_at_k(x, x) == 1.0
    assert M.recall_at_k(x, x, direction="u2v") == 1.0
    perm = np.random.default_rng(1).permutation(400)
    chance = np.mean([M.recall_at_k(x, x[np.random.default_rng(s).permutation(400)])
                      for s in range(5)])
    assert chance < 5 / 400
    assert M.recall_at_k(x, x[perm], k=400) == 1.0


def test_recall_counts_ties_against_the_query():
    collapsed = np.ones((10, 3))
    assert M.recall_at_k(collapsed, collapsed) == 0.0


def test_recall_blocks_agree_with_a_direct_computation(monkeypatch):
    rng = np.random.default_rng(3)
    u, v = rng.normal(size=(50, 4)), rng.normal(size=(50, 4))
    full = M.recall_at_k(u, v, k=3)
    monkeypatch.setattr(G, "BLOCK_ELEMENTS", 7 * 50)  # blocks of 7 queries
    assert M.recall_at_k(u, v, k=3) == full
    un, vn = (a / np.linalg.norm(a, axis=1, keepdims=True) for a in (u, v))
    s = un @ vn.T
    hits = [(s[i] >= s[i, i]).sum() - 1 < 3 for i in range(50)]
    hits += [(s[:, i] >= s[i, i]).sum() - 1 < 3 for i in range(50)]
    assert full == pytest.approx(np.mean(hits))


def test_map_at_r_and_r_map_hand_computed():
    # query 0 (class a, R=2) ranks: item1 (a), item2 (b), item3 (a), ...
    H = np.array([[1.0, 0.0], [0.9, 0.1], [0.8, 0.3], [0.5, 0.5], [-1.0, 0.2]])
    y = np.array(["a", "a", "b", "a", "b"])
    H = H / np.linalg.norm(H, axis=1, keepdims=True)
    sims = H @ H.T
    per_map, per_rmap = [], []
    for i in range(5):
        others = [j for j in np.argsort(-sims[i]) if j != i]
        r = sum(y[j] == y[i] for j in others)
        rel = [y[j] == y[i] for j in others][:r]
        prec = [sum(rel[:k + 1]) / (k + 1) for k in range(r)]
        total = sum(p for p, hit in zip(prec, rel, strict=True) if hit)
        per_map.append(total / r)
        per_rmap.append(total / sum(rel) if sum(rel) else 0.0)
    assert M.map_at_r(H, y) == pytest.approx(np.mean(per_map))
    assert M.r_map(H, y) == pytest.approx(np.mean(per_rmap))
    # query 0 by hand: top-2 = (1: a, 2: b) -> P(1) = 1 -> AP@R = 1/2, R-mAP = 1/1
    assert per_map[0] == pytest.approx(0.5) and per_rmap[0] == pytest.approx(1.0)


def test_ncc_accuracy():
    y = np.repeat([0, 1, 2], 5)
    h = np.eye(3)[y] + 0.05 * np.random.default_rng(0).normal(size=(15, 3))
    assert M.ncc_accuracy(h, y, h, y) == 1.0
    assert M.leave_one_out_ncc(h, y) == 1.0
    assert M.ncc_accuracy(h, y, h, np.roll(y, 5)) == 0.0


def test_knn_and_linear_probe_accuracy_against_brute_force():
    rng = np.random.default_rng(0)
    H_train, H_test = rng.normal(size=(40, 3)), rng.normal(size=(15, 3))
    y_train, y_test = rng.integers(0, 3, 40), rng.integers(0, 3, 15)
    for k in (1, 5):
        predicted = []
        for h in H_test:
            nearest = np.argsort(((H_train - h) ** 2).sum(1), kind="stable")[:k]
            votes = np.bincount(y_train[nearest], minlength=3)
            predicted.append(votes.argmax())
        expected = np.mean(np.array(predicted) == y_test)
        assert M.knn_accuracy(H_train, y_train, H_test, y_test, k=k) == pytest.approx(expected)
    separable = np.repeat(np.eye(3), 10, axis=0) + 0.01 * rng.normal(size=(30, 3))
    labels = np.repeat([0, 1, 2], 10)
    assert M.linear_probe_accuracy(separable, labels, separable, labels) == 1.0
    assert M.linear_probe_accuracy(separable, labels, separable, np.roll(labels, 10)) == 0.0
    with pytest.raises(ValueError, match="y_test has 3 labels but H_test has 15 rows"):
        M.knn_accuracy(H_train, y_train, H_test, y_test[:3])
    with pytest.raises(ValueError, match="same width; got 3 and 2"):
        M.linear_probe_accuracy(H_train, y_train, H_test[:, :2], y_test)
    with pytest.raises(ValueError, match="k must be <= 40"):
        M.knn_accuracy(H_train, y_train, H_test, y_test, k=41)


def test_metric_bad_input():
    with pytest.raises(ValueError, match="same shape"):
        M.recall_at_k(np.ones((4, 2)), np.ones((5, 2)))
    with pytest.raises(ValueError, match="direction"):
        M.recall_at_k(np.ones((4, 2)), np.ones((4, 2)), direction="up")
    with pytest.raises(ValueError, match="y has 3 labels but H has 4 rows"):
        M.map_at_r(np.ones((4, 2)), [0, 1, 1])
    with pytest.raises(ValueError, match="unknown scorer"):
        M.get_scorer("accuracy")


def test_scorers_drive_grid_search_without_labels():
    X = np.random.default_rng(4).normal(size=(120, 16))
    search = GridSearchCV(NoisyPairEmbedder(), {"noise": [5.0, 0.01, 1.0]},
                          scoring=M.get_scorer("recall@1"), cv=3)
    search.fit(X)
    assert search.best_params_ == {"noise": 0.01}
    multi = GridSearchCV(NoisyPairEmbedder(), {"noise": [5.0, 0.01]}, cv=3, refit="r1",
                         scoring={"r1": M.get_scorer("recall@1"),
                                  "align": M.get_scorer("alignment"),
                                  "map": M.get_scorer("map@r")})
    multi.fit(X)
    assert multi.best_params_ == {"noise": 0.01}
    assert (multi.cv_results_["mean_test_align"] <= 0).all()


def test_scorer_signs():
    est = NoisyPairEmbedder(0.0).fit(np.ones((4, 4)))
    X = np.hstack([G.simplex_etf(4, 3), G.simplex_etf(4, 3)])
    assert M.get_scorer("etf_gap")(est, X) == pytest.approx(0, abs=1e-12)
    assert M.get_scorer("recall@1")(est, X) == 1.0
    assert M.get_scorer("alignment")(est, X) == 0.0
    assert M.get_scorer("uniformity")(est, X) > 0
    y = np.array([0, 1, 2, 3])
    assert M.get_scorer("orthogonal_frame_gap")(est, np.hstack([np.eye(4), np.eye(4)]), y) \
        == pytest.approx(0, abs=1e-12)
    with pytest.raises(ValueError, match="needs labels y"):
        M.get_scorer("ncc_accuracy")(est, X)


@pytest.mark.parametrize("ties", [False, True])
def test_class_retrieval_metrics_against_a_brute_force_loop(monkeypatch, ties):
    """mAP@R, R-mAP, R-precision and precision@1, with and without a separate reference
    set, in blocks of 7 queries; with ties (quantised embeddings) counted against the
    query, also across the cut of the top R."""
    rng = np.random.default_rng(5)
    H, y = rng.normal(size=(40, 3)), rng.integers(0, 4, size=40)
    R, r = rng.normal(size=(30, 3)), rng.integers(0, 4, size=30)
    if ties:  # signed axis vectors: similarities are exactly -1, 0 or 1
        H, R = (np.eye(3)[rng.integers(0, 3, size=len(x))] * rng.choice([-1, 1], (len(x), 1))
                for x in (H, R))
    monkeypatch.setattr(G, "BLOCK_ELEMENTS", 7 * 40)
    metrics = (M.map_at_r, M.r_map, M.r_precision, M.precision_at_1)
    for args, expected in (((H, y), ref.retrieval(H, y)),
                           ((H, y, R, r), ref.retrieval(H, y, R, r))):
        got = [metric(*args) for metric in metrics]
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
        together = M.class_retrieval(*args)
        np.testing.assert_allclose([together[k] for k in ("map_at_r", "r_map", "r_precision",
                                                          "precision_at_1")],
                                   expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("data", ["random", "whole", "ties", "near", "collapsed"])
def test_the_bfloat16_screen_ranks_exactly_like_the_brute_force_loop(monkeypatch, data):
    """The screened path (forced at this small n, starting from 4 candidates per query so
    that it has to widen) gives the float64 loop's values: on random data (also with
    every column a candidate, where the query itself must stay out), on quantised data
    where most similarities tie (signed 4-of-8 vectors: multiples of 1/4, exact in
    bfloat16), on references whose order bfloat16 scrambles (so the error bound decides
    the candidates), and on collapsed data, where the block falls back to the dense
    product."""
    monkeypatch.setattr(_Screen, "MIN_COLUMNS", 1)
    monkeypatch.setattr(_Screen, "_faster", True)
    monkeypatch.setattr(_Screen, "WIDTH", 1000 if data == "whole" else 4)
    monkeypatch.setattr(_Screen, "SHARE", 8 if data in ("random", "collapsed") else 1)
    monkeypatch.setattr(G, "BLOCK_ELEMENTS", 10 * 300)
    rng = np.random.default_rng(7)
    if data in ("random", "whole"):  # whole: every column a candidate, the query's too
        H, R = rng.normal(size=(300, 64)), rng.normal(size=(200, 64))
    elif data == "ties":
        H, R = (np.stack([np.isin(np.arange(8), rng.choice(8, 4, replace=False))
                          * rng.choice([-1.0, 1.0], 8) for _ in range(m)]) for m in (300, 200))
    elif data == "near":  # every query is q; the references' similarities to it are
        # spread over [0.3, 0.31], 5e-5 apart, where bfloat16 errs by about 1e-3
        q = rng.normal(size=8)
        q /= np.linalg.norm(q)
        side = rng.normal(size=(200, 8))
        side -= np.outer(side @ q, q)
        side /= np.linalg.norm(side, axis=1, keepdims=True)
        c = rng.permutation(np.linspace(0.3, 0.31, 200))[:, None]
        H, R = np.tile(q, (300, 1)), c * q + np.sqrt(1 - c**2) * side
    else:
        H, R = np.ones((300, 8)), np.ones((200, 8))
    y, r = rng.integers(0, 60, size=300), rng.integers(0, 60, size=200)
    seen = []
    original = _Screen.candidates

    def spy(self, *args):
        found = original(self, *args)
        seen.append((found is not None, self.width))
        return found

    monkeypatch.setattr(_Screen, "candidates", spy)
    for args in ((H, y), (H, y, R, r)):
        together = M.class_retrieval(*args)
        np.testing.assert_allclose([together[k] for k in ("map_at_r", "r_map", "r_precision",
                                                          "precision_at_1")],
                                   ref.retrieval(*args), rtol=1e-12, atol=1e-12)
    screened = [ok for ok, _ in seen]
    assert len(seen) == 8 + 5  # 40 queries per block against 300, 60 against 200
    assert not any(screened) if data == "collapsed" else all(screened)
    if data not in ("collapsed", "whole"):
        assert max(width for _, width in seen) > 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("width", [1, 5, 37])
def test_the_grouped_top_k_gives_top_ks_values(dtype, width):
    """The screen's grouped top-k (group maxima, their own group maxima while wide, then
    the best groups' entries) returns torch.topk's values, and columns that hold them, on
    rows with many ties (bfloat16 rounding of few distinct values) and with -inf entries.
    8**4 * width columns: three levels of groups."""
    rng = np.random.default_rng(width)
    x = torch.from_numpy(rng.integers(0, 50, size=(9, 8**4 * width)) / 7.0).to(dtype)
    x[:, ::5] = -torch.inf
    values, columns = _top(x, width, 8)
    expected, _ = x.topk(width, dim=1)
    assert torch.equal(values, expected)
    assert torch.equal(x.gather(1, columns), values)
    assert all(len(set(row.tolist())) == width for row in columns)


def test_collapsed_embeddings_retrieve_nothing():
    collapsed, y = np.ones((12, 3)), np.repeat([0, 1, 2], 4)
    assert M.map_at_r(collapsed, y) == M.r_precision(collapsed, y) == 0.0
    assert M.precision_at_1(collapsed, y) == M.r_map(collapsed, y) == 0.0


def test_class_retrieval_equals_pytorch_metric_learning_accuracy_calculator():
    pytest.importorskip("pytorch_metric_learning")
    from pytorch_metric_learning.distances import CosineSimilarity
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
    from pytorch_metric_learning.utils.inference import CustomKNN

    rng = np.random.default_rng(6)
    H, y = rng.normal(size=(300, 8)).astype(np.float32), rng.integers(0, 6, size=300)
    G, g = rng.normal(size=(200, 8)).astype(np.float32), rng.integers(0, 6, size=200)
    calculator = AccuracyCalculator(
        include=("precision_at_1", "r_precision", "mean_average_precision_at_r"),
        knn_func=CustomKNN(CosineSimilarity()))
    for args, same in (((H, y), True), ((H, y, G, g), False)):
        reference = args[2:] or args
        theirs = calculator.get_accuracy(torch.from_numpy(args[0]), torch.from_numpy(args[1]),
                                         torch.from_numpy(reference[0]),
                                         torch.from_numpy(reference[1]),
                                         ref_includes_query=same)
        assert M.precision_at_1(*args) == pytest.approx(theirs["precision_at_1"], abs=1e-6)
        assert M.r_precision(*args) == pytest.approx(theirs["r_precision"], abs=1e-6)
        assert M.map_at_r(*args) == pytest.approx(theirs["mean_average_precision_at_r"],
                                                  abs=1e-6)


@pytest.mark.slow
def test_metrics_at_scale_stay_in_blocks():
    """n = 12,000, d = 128 in a subprocess: class retrieval (one code path serves mAP@R,
    R-mAP, R-precision and precision@1), pair recall and uniformity stay well under the
    1.15 GB of one n x n float64 matrix (at n = 20,000 the previous uniformity peaked at 10.7 GB,
    mAP@R at 673 MB). The bound is on the growth of the peak over what the interpreter,
    torch and the data already hold (about 360 MB, more on some BLAS builds), so it
    measures the metrics alone; benchmarks/bench_metrics.py measures n = 100,000."""
    import json
    import subprocess
    import sys

    script = """
import json, resource, numpy as np
from skcontrast import geometry, metrics
rng = np.random.default_rng(0)
H = rng.normal(size=(12_000, 128)).astype(np.float32)
y = rng.integers(0, 200, size=12_000)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
values = [metrics.map_at_r(H, y), metrics.recall_at_k(H[:6_000], H[6_000:]),
          geometry.uniformity(H)]
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps([grown * 1024, values]))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    grown, values = json.loads(done.stdout.strip().splitlines()[-1])
    assert grown < 400 * 2**20, grown / 2**20
    assert all(np.isfinite(values))


def test_class_retrieval_device_auto_and_bad_devices():
    rng = np.random.default_rng(0)
    H, y = rng.normal(size=(60, 8)), rng.integers(0, 5, size=60)
    assert M.class_retrieval(H, y, device="auto") == M.class_retrieval(H, y)
    with pytest.raises(ValueError, match="device must be 'cpu', 'cuda\\[:N\\]' or 'auto'"):
        M.map_at_r(H, y, device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU is usable here"):
            M.map_at_r(H, y, device="cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is usable here")
def test_class_retrieval_on_the_gpu_equals_the_cpu():
    rng = np.random.default_rng(0)
    H, y = rng.normal(size=(3000, 16)), rng.integers(0, 30, size=3000)
    H[1500:] = H[:1500] * 2  # ties across the halves
    cpu, gpu = M.class_retrieval(H, y), M.class_retrieval(H, y, device="cuda")
    for key in cpu:
        assert gpu[key] == pytest.approx(cpu[key], abs=1e-12)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_ranking_scores_equal_their_formulas_and_stay_in_the_unit_interval(k):
    rng = np.random.default_rng(k)
    document_groups = rng.integers(0, 4, size=12)
    query_groups = rng.integers(0, 4, size=9)
    ranked = np.stack([rng.permutation(12)[:6] for _ in range(9)])
    ranked[0, 4:] = -1  # fewer results than asked for
    got = M.ranking_scores(ranked, query_groups, document_groups, k=k)
    expected = _ranking_brute_force(ranked, query_groups, document_groups, k)
    assert got.keys() == expected.keys()
    for key, value in got.items():
        assert value == pytest.approx(expected[key], abs=1e-12) and 0 <= value <= 1


def test_ranking_scores_refuse_a_document_listed_twice():
    # a repeat counted its gain twice: nDCG@3 read 2.131
    with pytest.raises(ValueError, match="ranked lists document 0 more than once for "
                                         "query 0"):
        M.ranking_scores([[0, 0, 0], [1, 2, -1]], [0, 1], [0, 1, 1], k=3)
    assert M.ranking_scores([[0, -1, -1], [1, 2, -1]], [0, 1], [0, 1, 1],
                            k=3)["ndcg@3"] == pytest.approx(1.0)


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


SMALL = small_mlp()
pairs = paired_gaussians(96)


def test_scorer_preconditions_are_checked_before_fitting(pairs):
    from skorch.helper import SliceDict

    from skcontrast.model_selection import BalanceSearchCV, check_search_input

    X, _ = pairs
    with pytest.raises(ValueError, match="'recall@1' scorer compares the two views"):
        get_scorer("recall@1", SupConEmbedder())
    with pytest.raises(ValueError, match="'ncc_accuracy' scorer needs labels y"):
        BalanceSearchCV(ContrastiveEmbedder(**SMALL),
                        param_names=("loss__lambda_pos", "loss__lambda_ent"),
                        scoring=get_scorer("ncc_accuracy"), budget=2, cv=2).fit(X)
    views = {"a": X[:, 0], "b": X[:, 1]}
    with pytest.raises(ValueError, match=r"wrap it: skorch\.helper\.SliceDict"):
        check_search_input(ContrastiveEmbedder(), views, None, None)
    check_search_input(ContrastiveEmbedder(), SliceDict(**views), None,
                       {"r1": get_scorer("recall@1")})
