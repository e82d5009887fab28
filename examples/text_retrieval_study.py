"""Text retrieval on held-out emoji names: what trains a better cross-lingual search?

Data: :func:`skcontrast.datasets.load_emoji_names`, English names paired with the German,
Russian and Japanese names of the same emoji (Latin, Cyrillic and CJK scripts), split by
emoji: 80% of the emoji train (of those, a tenth is held out to choose the hybrid's
weight), 20% test. A test query is an English name; the corpus is the test emoji's names
in one language; a query is answered when its emoji's name ranks first (recall@1) or
high (nDCG@10). Three pairs of one emoji share the English name, so a shuffled batch
can hold the same anchor twice: a false negative.

Rows, each at B = 32 and 128 rows per batch, 3 seeds, the same number of epochs. All
but the first two train the linear bag of hashed n-grams (``hidden_layer_sizes=()``,
32 dimensions) with fused Adam and dense gradients, four times cheaper per step than
0.2.0's default encoder:

- ``TF-IDF (char 2-4)``: scikit-learn's ``TfidfVectorizer`` on character 2-4-grams,
  cosine search, no training: the baseline a text user tries first;
- ``0.2.0 defaults (B=64)``: ``ContrastiveEmbedder(max_epochs=E).fit(pairs)`` as
  skcontrast 0.2.0 set it, strings in (hashed n-gram tokenizer, a bag of width 128 and a
  layer to 32 dimensions with dense gradients and Adam, symmetric InfoNCE, batches of
  64): the same figures in both columns (``examples/text_search_study.py`` measures
  today's defaults);
- ``shuffled``: the linear bag, shuffled batches of B;
- ``label guard``: no two pairs of one emoji in a batch
  (``TemperedSelector(ShuffledBatchSelector(B), max_same_label=0)``, ``y`` = the emoji);
- ``HCL``: hard-negative InfoNCE (``HardNegativeNCE(beta=1)``), and with the guard;
- ``guarded spectral``: spectral batches of hard pairs, with the guard;
- ``B3 + teacher``: B3's community batches (rank window 10-40) on a fixed teacher (LSA:
  TF-IDF of both names, 128 SVD components), with the guard;
- ``in-loss guard``: shuffled batches, the loss leaving out candidates of the same
  content or emoji (``FalseNegativeGuard(same_group=True)``);
- ``mined negatives``: two stages: the ``shuffled`` model mines one hard negative per
  pair among the training positives (``mine_hard_negatives``, ranks 1-30, never the
  same emoji), then a fresh model trains on the (anchor, positive, negative) rows; with
  NV-Retriever's filter (below 0.95 x the positive's score; pairs left without a
  negative are left out, and the table says how many were kept);
  and with the in-loss guard;
- ``hybrid``: the ``0.2.0 defaults`` (or the ``shuffled``) model's cosine fused with TF-IDF's,
  the weight chosen on the held-out training emoji (``HybridRetriever``).

    python examples/text_retrieval_study.py [--quick] [--epochs E] [--out DIR]

Outputs ``text_table.txt``, ``text_figure.png`` and ``text_runs.json`` (a rerun skips
the runs it holds).
"""

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfVectorizer

from skcontrast import ContrastiveEmbedder
from skcontrast.datasets import load_emoji_names
from skcontrast.losses import FalseNegativeGuard, HardNegativeNCE, SymmetricInfoNCE
from skcontrast.metrics import ranking_scores
from skcontrast.selectors import (
    CommunityBatchSelector,
    ShuffledBatchSelector,
    SpectralBatchSelector,
    TemperedSelector,
)
from skcontrast.text import HashingNgramTokenizer, HybridRetriever, mine_hard_negatives

LANGUAGES = ("de", "ru", "ja")
#: the text model of skcontrast 0.2.0, which this study measured (dense gradients and
#: Adam; ``examples/text_search_study.py`` compares it with today's defaults)
DEFAULTS_020 = {"hidden_layer_sizes": (128,), "n_components": 32,
                "optimizer": torch.optim.Adam}
#: --quick, a smoke run of every row, the table and the figure (its numbers mean
#: nothing): a few emoji (training, held out for the hybrid, test), B = 32 only, one seed
#: and epoch, and fewer hash buckets (the same code)
QUICK = {"emoji": (60, 20, 40), "n_features": 2**14}


def load(quick):
    data = load_emoji_names(["en", *LANGUAGES], random_state=0)
    rng = np.random.default_rng(1)
    train = data.train_emoji.copy()
    rng.shuffle(train)
    cut = len(train) // 10
    fit_emoji, valid_emoji = np.sort(train[cut:]), np.sort(train[:cut])
    test = data.test_emoji
    if quick:
        a, b, c = QUICK["emoji"]
        fit_emoji, valid_emoji, test = fit_emoji[:a], valid_emoji[:b], test[:c]
    pairs = np.concatenate([np.stack([data.names["en"][fit_emoji], data.names[lang][fit_emoji]],
                                     axis=1) for lang in LANGUAGES])
    groups = np.tile(fit_emoji, len(LANGUAGES))
    return data, pairs, groups, valid_emoji, test


def evaluate(search, data, emoji):
    """recall@1 and nDCG@10 per language: English queries, that language's names."""
    out = {}
    for lang in LANGUAGES:
        ranked = search(list(data.names["en"][emoji]), list(data.names[lang][emoji]))
        scores = ranking_scores(ranked, np.arange(len(emoji)), np.arange(len(emoji)), k=10)
        out[lang] = {"r1": scores["recall@1"], "ndcg": scores["ndcg@10"]}
    return out


def tfidf_search(pairs):
    vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), sublinear_tf=True)
    vectorizer.fit(pairs.reshape(-1))

    def search(queries, documents):
        S = (vectorizer.transform(queries) @ vectorizer.transform(documents).T).toarray()
        return np.argsort(-S, axis=1, kind="stable")[:, :10]
    return search


def model_search(est):
    def search(queries, documents):
        Q, D = est.transform(queries), est.transform_view(documents, view=1)
        return np.argsort(-(Q @ D.T), axis=1, kind="stable")[:, :10]
    return search


def hybrid_search(est, pairs, data, valid):
    """The fused search, its weight the best recall@1 on the held-out training emoji."""
    best = None
    for weight in (0.1, 0.2, 0.3, 0.5, 0.7):
        hybrid = HybridRetriever(est, weight=weight, prefit=True).fit(pairs)

        def search(queries, documents, hybrid=hybrid):
            return hybrid.index(documents).search(queries, k=10)[1]
        got = np.mean([v["r1"] for v in evaluate(search, data, valid).values()])
        if best is None or got > best[0]:
            best = (got, weight, search)
    assert best is not None
    return best[2], best[1]


def teacher(pairs):
    """LSA (TF-IDF of both names of each pair, 128 SVD components): B3's fixed teacher
    (its embeddings of the pairs) and the miner's (a function of texts)."""
    tfidf = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), sublinear_tf=True)
    Z = tfidf.fit_transform(pairs[:, 0] + " | " + pairs[:, 1])
    svd = TruncatedSVD(128, random_state=0).fit(Z)

    def embed(texts):
        return svd.transform(tfidf.transform(texts)).astype(np.float32)
    return svd.transform(Z).astype(np.float32), embed


def mined(pairs, groups, miner, margin):
    """Each pair with one negative mined among the training positives by ``miner`` (a
    fitted model), and the share of pairs that found one."""
    with warnings.catch_warnings():  # pairs without a negative: counted in the table
        warnings.simplefilter("ignore", UserWarning)
        out = mine_hard_negatives(list(pairs[:, 0]), list(pairs[:, 1]), embedding=miner,
                                  n_negatives=1, rank_window=(0, 30), relative_margin=margin,
                                  groups=groups, device="cpu")
    return out.table, groups[out.complete], float(out.complete.mean())


def settings(B, lsa):
    guard = {"max_same_label": 0}
    return {
        "shuffled": {"selector": ShuffledBatchSelector(B)},
        "label guard": {"selector": TemperedSelector(ShuffledBatchSelector(B), **guard)},
        "HCL": {"loss": HardNegativeNCE(beta=1.0), "selector": ShuffledBatchSelector(B)},
        "HCL + label guard": {"loss": HardNegativeNCE(beta=1.0),
                              "selector": TemperedSelector(ShuffledBatchSelector(B), **guard)},
        "guarded spectral": {"selector": TemperedSelector(SpectralBatchSelector(B), **guard)},
        "B3 + teacher, guarded": {"selector": TemperedSelector(
            CommunityBatchSelector(B, p=10, q=40), teacher=lsa, **guard)},
        "in-loss guard": {"selector": ShuffledBatchSelector(B), "loss": SymmetricInfoNCE(
            false_negatives=FalseNegativeGuard(same_group=True))},
        "mined negatives": {"selector": ShuffledBatchSelector(B), "mined": None},
        "mined, 95% filter": {"selector": ShuffledBatchSelector(B), "mined": 0.95},
        "mined + in-loss guard": {"selector": ShuffledBatchSelector(B), "mined": None,
                                  "loss": SymmetricInfoNCE(false_negatives=FalseNegativeGuard(
                                      same_group=True))},
    }


def run(B, seed, epochs, runs, quick):
    key = f"B={B} | {seed}"
    data, pairs, groups, valid, test = load(quick)
    out = runs.setdefault(key, {})
    out["TF-IDF (char 2-4)"] = {**evaluate(tfidf_search(pairs), data, test), "seconds": 0.0}
    defaults = f"defaults | {seed}"
    if defaults not in runs:  # the defaults but the number of epochs: once per seed
        start = time.perf_counter()
        tokenizer = HashingNgramTokenizer(n_features=QUICK["n_features"]) if quick else None
        est = ContrastiveEmbedder(max_epochs=epochs, random_state=seed, tokenizer=tokenizer,
                                  **DEFAULTS_020).fit(pairs)
        seconds = time.perf_counter() - start
        runs[defaults] = {**evaluate(model_search(est), data, test), "seconds": seconds}
        search, weight = hybrid_search(est, pairs, data, valid)
        runs[f"defaults hybrid | {seed}"] = {**evaluate(search, data, test),
                                             "weight": weight, "seconds": seconds}
        print(f"  {defaults}: {seconds:.0f} s", flush=True)
    out["0.2.0 defaults (B=64)"] = runs[defaults]
    out["hybrid (0.2.0 defaults + TF-IDF)"] = runs[f"defaults hybrid | {seed}"]
    lsa, _ = teacher(pairs)
    shuffled_model = None
    todo = [label for label in settings(B, lsa) if label not in out]
    if "hybrid" not in out or any(label.startswith("mined") for label in todo):
        todo = ["shuffled", *(label for label in todo if label != "shuffled")]
    for label in todo:
        extra = dict(settings(B, lsa)[label])
        X, y, kept = pairs, groups, 1.0
        if "mined" in extra:
            X, y, kept = mined(pairs, groups, shuffled_model, extra.pop("mined"))
        params = {"max_epochs": epochs, "random_state": seed, "hidden_layer_sizes": (),
                  "n_components": 32, "optimizer": torch.optim.Adam,
                  "optimizer_params": {"fused": True}, **extra}
        if quick:
            params["tokenizer"] = HashingNgramTokenizer(n_features=QUICK["n_features"])
        start = time.perf_counter()
        est = ContrastiveEmbedder(**params).fit(X, y)
        seconds = time.perf_counter() - start
        out[label] = {**evaluate(model_search(est), data, test), "seconds": seconds,
                      "pairs kept": kept}
        if label == "shuffled":
            shuffled_model = est
        print(f"  {key} {label}: {seconds:.0f} s", flush=True)
    if "hybrid" in out:
        return
    assert shuffled_model is not None
    search, weight = hybrid_search(shuffled_model, pairs, data, valid)
    out["hybrid (shuffled + TF-IDF)"] = {**evaluate(search, data, test), "weight": weight,
                                         "seconds": out["shuffled"]["seconds"]}
    out["hybrid"] = True


def table(runs, sizes, seeds):
    rows = [s for s in runs[f"B={sizes[0]} | {seeds[0]}"] if s != "hybrid"]
    rows.insert(1, rows.pop(rows.index("0.2.0 defaults (B=64)")))
    rows.insert(2, rows.pop(rows.index("hybrid (0.2.0 defaults + TF-IDF)")))
    rows.append(rows.pop(rows.index("hybrid (shuffled + TF-IDF)")))
    head = f"{'':<34}" + "".join(f"{'B=' + str(B):>52}" for B in sizes)
    sub = f"{'setting':<34}" + "".join(
        f"{'R@1 ' + '/'.join(LANGUAGES):>20}{'mean R@1':>10}{'nDCG@10':>8}{'fit s':>6}"
        f"{'(std R@1)':>10}"
        for _ in sizes)
    lines = [head, sub]
    for row in rows:
        cells = []
        for B in sizes:
            per = [runs[f"B={B} | {s}"][row] for s in seeds]
            langs = "/".join(f"{np.mean([p[lang]['r1'] for p in per]):.2f}"
                             for lang in LANGUAGES)
            r1 = [np.mean([p[lang]["r1"] for lang in LANGUAGES]) for p in per]
            ndcg = np.mean([np.mean([p[lang]["ndcg"] for lang in LANGUAGES]) for p in per])
            seconds = np.median([p["seconds"] for p in per])
            cells.append(f"{langs:>20}{np.mean(r1):>10.3f}{ndcg:>8.3f}{seconds:>6.0f}"
                         + f"  ±{np.std(r1):.3f}")
        lines.append(f"{row:<34}" + "".join(cells))
    for row in rows:
        kept = [runs[f"B={B} | {s}"][row].get("pairs kept", 1.0) for B in sizes for s in seeds]
        if min(kept) < 1.0:
            lines.append(f"{row}: trained on {np.mean(kept):.0%} of the pairs (those with a "
                         "negative below 0.95 x the positive's score)")
    weights = {B: [runs[f"B={B} | {s}"]["hybrid (shuffled + TF-IDF)"]["weight"]
                   for s in seeds] for B in sizes}
    weights["defaults"] = [runs[f"defaults hybrid | {s}"]["weight"] for s in seeds]
    lines.append(f"\nhybrid weights chosen on held-out training emoji: {weights}")
    return "\n".join(lines)


def figure(runs, sizes, seeds, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [s for s in runs[f"B={sizes[0]} | {seeds[0]}"] if s != "hybrid"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / len(sizes)
    for k, B in enumerate(sizes):
        means = [np.mean([np.mean([runs[f"B={B} | {s}"][r][lang]["r1"] for lang in LANGUAGES])
                          for s in seeds]) for r in rows]
        ax.barh(np.arange(len(rows)) + k * width, means, width, label=f"B={B}")
    ax.set_yticks(np.arange(len(rows)) + width * (len(sizes) - 1) / 2, rows)
    ax.invert_yaxis()
    ax.set_xlabel("recall@1, mean over en->de, en->ru, en->ja (held-out emoji)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run (seconds)")
    parser.add_argument("--epochs", type=int, default=None, help="default 5; quick: 1")
    parser.add_argument("--out", default="text_study", help="output folder")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    epochs = args.epochs or (1 if args.quick else 5)
    seeds = (0,) if args.quick else (0, 1, 2)
    sizes = (32,) if args.quick else (32, 128)
    path = out / "text_runs.json"
    runs = json.loads(path.read_text()) if path.exists() and not args.quick else {}
    for seed in seeds:
        for B in sizes:
            run(B, seed, epochs, runs, args.quick)
            path.write_text(json.dumps(runs, indent=1))
    text = (f"Held-out emoji, English queries against German, Russian and Japanese names "
            f"({epochs} epochs, mean over {len(seeds)} seeds; fit s: the median fit time, "
            "2-core CPU)\n" + table(runs, sizes, seeds))
    (out / "text_table.txt").write_text(text + "\n")
    figure(runs, sizes, seeds, out / "text_figure.png")
    print(text)


if __name__ == "__main__":
    main()
