"""When does a learned text search beat lexical search? Same script, typos, other scripts.

Three searches of held-out emoji names (:func:`skcontrast.datasets.load_emoji_names`,
split by emoji: 80% of the emoji train, a tenth of those held out to choose the hybrid's
weight, 20% test); a test query is found when its emoji's name ranks first (recall@1)
or high (nDCG@10), mean over the corpus languages:

- **same script**: English names against Spanish, Portuguese, Italian, French, German,
  Indonesian and Turkish ones (``SAME_SCRIPT_LANGUAGES``): the languages share letters,
  cognates and proper names with English;
- **typos**: English names with two random character edits
  (:func:`~skcontrast.datasets.add_typos`) against the clean names: where character
  n-grams match almost everything, lexical search at its strongest;
- **cross script**: English against German, Russian and Japanese
  (``CROSS_SCRIPT_LANGUAGES``): mostly nothing to match letters on.

Rows (5 epochs, batches of 64, 3 seeds; the untrained rows need no seed but the
random projection's):

- ``TF-IDF`` and ``BM25``: character 2-4-grams, no training (scikit-learn's
  ``TfidfVectorizer``; BM25 through :class:`~skcontrast.text.HybridRetriever` with
  ``weight=1``): the baselines a text user tries first;
- ``sentence-transformers static``: the peer as its users write it, a WordPiece tokenizer
  trained on the training texts, ``StaticEmbedding`` (256 dimensions) and
  ``MultipleNegativesRankingLoss`` with no-duplicates batches, learning rate 0.2;
- ``untrained (the lexical prior)``: the default text encoder before any step, a random
  projection of each name's n-gram set (256 dimensions);
- ``defaults``: ``ContrastiveEmbedder(max_epochs=5).fit(pairs)``, strings in;
- ``defaults, IDF prior``: the same with ``module__weighting='idf'``;
- ``0.2.0's defaults``: the encoder of the previous release (a bag of 128, a layer to
  32 dimensions, dense gradients and Adam), for comparison (one seed: it trains about
  15 to 18 times slower);
- ``hybrid (auto)``: the ``defaults`` model fused with TF-IDF,
  ``HybridRetriever(weight='auto')`` choosing the weight on the held-out training emoji;
- ``label guard``, ``in-loss guard``, ``HCL``: the defaults with no two pairs of one
  emoji in a batch, with the same emoji left out of the loss's negatives, with
  hard-negative InfoNCE (same-script and cross-script only).

    python examples/text_search_study.py [--quick] [--epochs E] [--seeds S] [--out DIR]

Outputs ``text_search_table.txt`` and ``text_search_runs.json`` (a rerun skips the runs
it holds).
"""

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.feature_extraction.text import TfidfVectorizer

from skcontrast import ContrastiveEmbedder
from skcontrast.datasets import (
    CROSS_SCRIPT_LANGUAGES,
    SAME_SCRIPT_LANGUAGES,
    add_typos,
    load_emoji_names,
)
from skcontrast.losses import FalseNegativeGuard, HardNegativeNCE, SymmetricInfoNCE
from skcontrast.metrics import ranking_scores
from skcontrast.selectors import ShuffledBatchSelector, TemperedSelector
from skcontrast.text import HashingNgramTokenizer, HybridRetriever, NgramBagEncoder

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _peers import static_embedding_encode, static_embedding_fit

BATCH = 64
TASKS = ("same script", "typos", "cross script")
VARIANT_TASKS = ("same script", "cross script")
#: --quick, a smoke run of every task, row and the table (its numbers mean nothing): a
#: few emoji (training, held out for the hybrid, test), one seed and epoch, and fewer
#: hash buckets for the n-gram models (the same code)
QUICK = {"emoji": (100, 20, 30), "n_features": 2**14}


class Task:
    """Training pairs (and their emoji), held-out pairs for the hybrid's weight, and the
    test searches: (queries, corpus) per corpus language."""

    def __init__(self, name, quick):
        languages = SAME_SCRIPT_LANGUAGES if name != "cross script" else CROSS_SCRIPT_LANGUAGES
        if name == "typos":
            languages = ("en", "de")  # English names only; German is not used
        data = load_emoji_names(list(languages), random_state=0)
        rng = np.random.default_rng(1)
        train = data.train_emoji.copy()
        rng.shuffle(train)
        cut = len(train) // 10
        fit, valid, test = np.sort(train[cut:]), np.sort(train[:cut]), data.test_emoji
        if quick:
            a, b, c = QUICK["emoji"]
            fit, valid, test = fit[:a], valid[:b], test[:c]
        en = data.names["en"]
        if name == "typos":
            def pairs(emoji, seed):  # three mistyped queries per name
                emoji = np.repeat(emoji, 3)
                return np.stack([add_typos(en[emoji], random_state=seed), en[emoji]], 1), emoji
            self.pairs, self.groups = pairs(fit, 0)
            self.valid, self.valid_groups = pairs(valid, 1)
            self.searches = {"en": (list(add_typos(en[test], random_state=2)),
                                    list(en[test]))}
        else:
            others = [lang for lang in languages if lang != "en"]

            def pairs(emoji):
                return (np.concatenate([np.stack([en[emoji], data.names[lang][emoji]], 1)
                                        for lang in others]), np.tile(emoji, len(others)))
            self.pairs, self.groups = pairs(fit)
            self.valid, self.valid_groups = pairs(valid)
            self.searches = {lang: (list(en[test]), list(data.names[lang][test]))
                             for lang in others}

    def evaluate(self, embed_queries, embed_corpus=None):
        """Mean recall@1 and nDCG@10 over the searches of cosine ranking."""
        embed_corpus = embed_corpus or embed_queries
        r1, ndcg = [], []
        for queries, corpus in self.searches.values():
            Q, D = embed_queries(queries), embed_corpus(corpus)
            scores = Q @ D.T
            ranked = np.argsort(-scores, axis=1, kind="stable")[:, :10]
            got = ranking_scores(ranked, np.arange(len(Q)), np.arange(len(Q)), k=10)
            r1.append(got["recall@1"])
            ndcg.append(got["ndcg@10"])
        return float(np.mean(r1)), float(np.mean(ndcg))

    def evaluate_search(self, search):
        r1, ndcg = [], []
        for queries, corpus in self.searches.values():
            ranked = search.index(corpus).search(queries, k=10)[1]
            got = ranking_scores(ranked, np.arange(len(queries)), np.arange(len(queries)),
                                 k=10)
            r1.append(got["recall@1"])
            ndcg.append(got["ndcg@10"])
        return float(np.mean(r1)), float(np.mean(ndcg))


def dense(array):
    return array.toarray() if hasattr(array, "toarray") else np.asarray(array)


def run(task, row, seed, epochs, quick=False):
    """One (task, row, seed): recall@1, nDCG@10, fit seconds and notes."""
    start = time.perf_counter()
    tokenizer = HashingNgramTokenizer(n_features=QUICK["n_features"]) if quick else None
    if row in ("TF-IDF", "BM25"):
        if row == "TF-IDF":
            vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4),
                                         sublinear_tf=True).fit(task.pairs.reshape(-1))
            r1, ndcg = task.evaluate(lambda texts: dense(vectorizer.transform(texts)))
        else:
            search = HybridRetriever(weight=1.0, lexical="bm25").fit(task.pairs)
            r1, ndcg = task.evaluate_search(search)
        return {"r1": r1, "ndcg": ndcg, "fit_s": time.perf_counter() - start}
    if row == "sentence-transformers static":
        model, train_s, whole_s = static_embedding_fit(task.pairs, batch_size=BATCH,
                                                       epochs=epochs, seed=seed)
        r1, ndcg = task.evaluate(lambda texts: static_embedding_encode(model, texts))
        return {"r1": r1, "ndcg": ndcg, "fit_s": whole_s, "train_s": train_s}
    if row == "untrained (the lexical prior)":
        tokenizer = tokenizer or HashingNgramTokenizer()
        torch.manual_seed(seed)
        encoder = NgramBagEncoder(tokenizer.vocabulary_size, 256)

        def embed(texts):
            with torch.no_grad():
                return encoder(torch.as_tensor(tokenizer(texts))).numpy()
        r1, ndcg = task.evaluate(embed)
        return {"r1": r1, "ndcg": ndcg, "fit_s": 0.0}
    settings, fit_kw = {"max_epochs": epochs, "batch_size": BATCH, "random_state": seed,
                        "tokenizer": tokenizer}, {}
    if row == "defaults, IDF prior":
        settings["module__weighting"] = "idf"
    elif row == "0.2.0's defaults":
        settings.update(hidden_layer_sizes=(128,), n_components=32, optimizer=torch.optim.Adam)
    elif row == "label guard":
        settings.update(batch_size=None, selector=TemperedSelector(
            ShuffledBatchSelector(BATCH), max_same_label=0))
        fit_kw["y"] = task.groups
    elif row == "in-loss guard":
        settings["loss"] = SymmetricInfoNCE(false_negatives=FalseNegativeGuard(same_group=True))
        fit_kw["y"] = task.groups
    elif row == "HCL":
        settings["loss"] = HardNegativeNCE(beta=1.0)
    est = ContrastiveEmbedder(**settings).fit(task.pairs, **fit_kw)
    seconds = time.perf_counter() - start
    if row == "hybrid (auto)":
        search = HybridRetriever(est, prefit=True).fit(task.pairs, X_val=task.valid,
                                                       y_val=task.valid_groups)
        r1, ndcg = task.evaluate_search(search)
        return {"r1": r1, "ndcg": ndcg, "fit_s": seconds, "weight": search.weight_}
    r1, ndcg = task.evaluate(est.transform, lambda texts: est.transform_view(texts, view=1))
    return {"r1": r1, "ndcg": ndcg, "fit_s": seconds}


ROWS = ("TF-IDF", "BM25", "sentence-transformers static", "untrained (the lexical prior)",
        "defaults", "defaults, IDF prior", "0.2.0's defaults", "hybrid (auto)",
        "label guard", "in-loss guard", "HCL")
SEEDLESS = ("TF-IDF", "BM25")
#: rows run once: the seedless ones, and 0.2.0's dense model (a reference point, 15 to
#: 18 times slower to train than the rest)
ONE_SEED = (*SEEDLESS, "0.2.0's defaults")
VARIANTS = ("label guard", "in-loss guard", "HCL")


def table(runs, epochs, seeds):
    head = "".join(f"{t:>32}" for t in TASKS)
    sub = "".join(f"{'R@1 (std)':>14}{'nDCG@10':>9}{'fit s':>7}  " for _ in TASKS)
    lines = [f"Held-out emoji names: recall@1 (std over seeds) and nDCG@10, mean over "
             f"{seeds} seeds ({epochs} epochs, batches of {BATCH}; fit s: the median, "
             "2-core CPU)", f"{'search':<30}{head}", f"{'':<30}{sub}"]
    weights = {}
    for row in ROWS:
        cells = []
        for task in TASKS:
            got = [v for k, v in runs.items() if k.startswith(f"{task}|{row}|")]
            if not got:
                cells.append(" " * 32)
                continue
            r1 = [g["r1"] for g in got]
            cell = f"{np.mean(r1):.3f}" + (f" ±{np.std(r1):.3f}" if len(got) > 1 else "")
            cells.append(f"{cell:>14}{np.mean([g['ndcg'] for g in got]):>9.3f}"
                         f"{np.median([g['fit_s'] for g in got]):>7.0f}  ")
            if "weight" in got[0]:
                weights[task] = [g["weight"] for g in got]
        lines.append(f"{row:<30}" + "".join(cells).rstrip())
    lines += ["", "hybrid weights chosen on held-out training emoji (per seed): "
              + json.dumps(weights)]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small subset, 1 seed")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("text_search_study"))
    args = parser.parse_args(argv)
    seeds = 1 if args.quick else args.seeds
    epochs = 1 if args.quick else args.epochs
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "text_search_runs.json"
    runs = json.loads(path.read_text()) if path.exists() and not args.quick else {}
    warnings.filterwarnings("ignore", category=UserWarning)
    for name in TASKS:
        task = Task(name, args.quick)
        for row in ROWS:
            if row in VARIANTS and name not in VARIANT_TASKS:
                continue
            for seed in range(1 if row in ONE_SEED else seeds):
                key = f"{name}|{row}|{seed}"
                if key in runs:
                    continue
                runs[key] = run(task, row, seed, epochs, args.quick)
                print(f"  {key}: R@1 {runs[key]['r1']:.3f} in {runs[key]['fit_s']:.0f} s",
                      flush=True)
                path.write_text(json.dumps(runs, indent=1))
    text = table(runs, epochs, seeds)
    (args.out / "text_search_table.txt").write_text(text + "\n")
    print(text)
    return text


if __name__ == "__main__":
    main()
