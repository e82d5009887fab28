"""Text at scale: training throughput, hard-negative mining and hybrid search.

Training (``--training``): pairs per second of ``ContrastiveEmbedder().fit(pairs)``, the
defaults (the linear bag of hashed n-grams with sparse gradients and LazyAdam), beside
sentence-transformers' static embedding model trained as its users train it
(``StaticEmbedding`` over a WordPiece tokenizer trained on the texts,
``MultipleNegativesRankingLoss``, no-duplicates batches; see ``_peers.py``), on the same
pairs (same-script emoji names, about 22,000 pairs) at the same batch size, and
skcontrast with the dense gradients and Adam a user would get without sparse updates.
Each is timed at two fit lengths, so that set-up (tokenizer training, the first
allocation) is apart: throughput is the pairs of the extra epochs over their seconds;
peak memory is the longer fit's.

Mining: time and peak memory of :func:`mine_hard_negatives`.

Synthetic pairs (``n`` anchors, positives = anchors + noise, d = 64, the positives as the
corpus: an ``n x n`` search), 4 negatives per anchor in the rank window (0, 30], below
0.95 of the positive's score (NV-Retriever's filter). Beside it, at the sizes where it
fits, the dense search a user writes first: the whole ``n x n`` similarity matrix and
``torch.topk`` (no filters), whose memory grows as ``n^2``.

    python benchmarks/bench_text.py [--sizes 10000 100000] [--device cpu|cuda]
        [--queries 10000]  # a sample of the anchors against the whole corpus
    python benchmarks/bench_text.py --search 1000000 [--queries 1000]  # HybridRetriever
        # beside scikit-learn's TfidfVectorizer and a sparse product, as a user writes it
    python benchmarks/bench_text.py --training [--batch-size 64] [--fit-lengths 1 3]
    python benchmarks/bench_text.py --negative-column [--threads 1] [--runs 3]
        # what one hard-negative column per pair costs, each trainer against its pairs

A hard-negative column (``--negative-column``): the time per epoch of the same pairs
with a third text per row (the positive of another row, drawn at random: the cost of a
mined negative, whose texts are as long), against the pairs alone, for skcontrast's
defaults and for sentence-transformers' static model with MultipleNegativesRankingLoss
(which takes a third column as each anchor's hard negative); the training seconds of
fits of two lengths (the epochs' own seconds, ``history_[:, 'dur']``, and the seconds
of ``trainer.train()``: set-up, the tokenizer's included, is left out, whose run-to-run
spread hid the epochs' cost in the fits' wall times), interleaved, ``--runs`` times,
medians. A third text per row embeds 1.5 times the texts and gives the loss
``B x 2B`` logits instead of ``B x B``.

Peak memory: resident memory added on the CPU, allocated GPU memory on a GPU (see
``_harness``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import fmt_mib, gpu_peak_mib, peak_memory_mib, table

from skcontrast.text import mine_hard_negatives

D = 64


def pairs(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    anchors = rng.standard_normal((n, D), dtype=np.float32)
    positives = anchors + 0.5 * rng.standard_normal((n, D), dtype=np.float32)
    return anchors, positives


def dense_top_k(anchors: np.ndarray, corpus: np.ndarray, k: int, device: str) -> np.ndarray:
    a = torch.nn.functional.normalize(torch.from_numpy(anchors).to(device), dim=1)
    c = torch.nn.functional.normalize(torch.from_numpy(corpus).to(device), dim=1)
    return torch.topk(a @ c.T, k, dim=1).indices.cpu().numpy()


def run(sizes: list[int], device: str, dense_limit: int, queries: int | None = None) -> str:
    cuda = device.startswith("cuda")
    peak = gpu_peak_mib if cuda else peak_memory_mib
    rows = []
    anchors, positives = pairs(2000)
    mine_hard_negatives(anchors, positives, n_negatives=4, rank_window=(0, 30),
                        relative_margin=0.95, device=device)  # warm-up
    for n in sizes:
        anchors, positives = pairs(n)
        corpus = None
        if queries is not None and queries < n:  # a sample of the pairs searches them all
            corpus, anchors, positives = positives, anchors[:queries], positives[:queries]
        result: dict = {}

        def mine(anchors=anchors, positives=positives, corpus=corpus, result=result) -> None:
            start = time.perf_counter()
            mined = mine_hard_negatives(anchors, positives, corpus, n_negatives=4,
                                        rank_window=(0, 30), relative_margin=0.95,
                                        device=device)
            if cuda:
                torch.cuda.synchronize()
            result["seconds"] = time.perf_counter() - start
            result["complete"] = float(mined.complete.mean())

        memory = peak(mine)
        rows.append([f"{len(anchors):,} x {n:,}", "mine_hard_negatives (chunked)",
                     f"{result['seconds']:.1f} s", fmt_mib(memory),
                     f"{result['complete']:.3f}"])
        if n <= dense_limit and corpus is None:
            timing: dict = {}

            def dense(anchors=anchors, positives=positives, timing=timing) -> None:
                start = time.perf_counter()
                dense_top_k(anchors, positives, 31, device)
                if cuda:
                    torch.cuda.synchronize()
                timing["seconds"] = time.perf_counter() - start

            memory = peak(dense)
            rows.append([f"{n:,} x {n:,}", "dense n x n matrix + topk (no filters)",
                         f"{timing['seconds']:.1f} s", fmt_mib(memory), ""])
    header = ["search", "method", "time", "peak memory", "pairs with 4 negatives"]
    where = torch.cuda.get_device_name() if cuda else "CPU"
    return (f"Hard-negative mining, d={D}, 4 negatives in ranks (0, 30] below 0.95 x the "
            f"positive's score ({where}, torch {torch.__version__})\n" + table(rows, header))


def synthetic_names(n: int, seed: int = 0) -> list[str]:
    """``n`` names of 2-5 words drawn from the emoji package's English vocabulary."""
    import emoji

    words = sorted({w for row in emoji.EMOJI_DATA.values()
                    for w in row["en"].strip(":").split("_") if w.isalpha()})
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 6, size=n)
    picks = rng.integers(0, len(words), size=int(lengths.sum()))
    out, start = [], 0
    for length in lengths:
        out.append(" ".join(words[i] for i in picks[start:start + length]))
        start += length
    return out


def plain_tfidf_search(documents: list[str], texts: list[str], k: int,
                       chunk: int = 100) -> tuple[float, float, np.ndarray]:
    """The peer a user writes first: scikit-learn's ``TfidfVectorizer`` on character
    2-4-grams fitted on the documents, then the queries' sparse rows times the documents'
    (in chunks of queries, densified) and ``argpartition`` for the top ``k``."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    start = time.perf_counter()
    vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4))
    matrix = vectorizer.fit_transform(documents)
    indexed = time.perf_counter() - start
    start = time.perf_counter()
    ranked = []
    for i in range(0, len(texts), chunk):
        scores = (vectorizer.transform(texts[i:i + chunk]) @ matrix.T).toarray()
        top = np.argpartition(-scores, k, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(scores, top, 1), axis=1, kind="stable")
        ranked.append(np.take_along_axis(top, order, 1))
    return indexed, time.perf_counter() - start, np.concatenate(ranked)


def search_rows(n: int, queries: int) -> list[list[str]]:
    """HybridRetriever over ``n`` synthetic documents: index, then ``queries`` searches
    (each query a document with its last word dropped; found when that document ranks
    first), lexical (TF-IDF) alone and fused with a small learned model; beside them the
    plain scikit-learn TF-IDF search of :func:`plain_tfidf_search`."""
    from skcontrast import ContrastiveEmbedder
    from skcontrast.metrics import ranking_scores
    from skcontrast.text import HybridRetriever

    documents = synthetic_names(n)
    asked = np.arange(0, n, max(1, n // queries))[:queries]
    texts = [documents[i].rsplit(" ", 1)[0] for i in asked]
    pairs = [(documents[i].rsplit(" ", 1)[0], documents[i]) for i in range(min(n, 20_000))]
    model = ContrastiveEmbedder(hidden_layer_sizes=(), n_components=32, max_epochs=1,
                                random_state=0, optimizer_params={"fused": True}).fit(pairs)
    rows = []
    for name, weight in (("TF-IDF alone", 1.0), ("hybrid, weight 0.5", 0.5)):
        hybrid = HybridRetriever(model, weight=weight, prefit=True).fit(pairs)
        result: dict = {}

        def run(hybrid=hybrid, result=result) -> None:
            start = time.perf_counter()
            hybrid.index(documents)
            result["index"] = time.perf_counter() - start
            start = time.perf_counter()
            result["ranked"] = hybrid.search(texts, k=10)[1]
            result["search"] = time.perf_counter() - start

        memory = peak_memory_mib(run)
        recall = ranking_scores(result["ranked"], asked, np.arange(n), k=10)["recall@1"]
        rows.append([f"{n:,} documents", name, f"{result['index']:.1f} s",
                     f"{result['search']:.1f} s ({queries:,} queries)", fmt_mib(memory),
                     f"{recall:.3f}"])
    plain: dict = {}

    def peer(plain=plain) -> None:
        plain["index"], plain["search"], plain["ranked"] = plain_tfidf_search(documents,
                                                                             texts, 10)

    memory = peak_memory_mib(peer)
    recall = ranking_scores(plain["ranked"], asked, np.arange(n), k=10)["recall@1"]
    rows.append([f"{n:,} documents", "peer: TfidfVectorizer + sparse product",
                 f"{plain['index']:.1f} s", f"{plain['search']:.1f} s ({queries:,} queries)",
                 fmt_mib(memory), f"{recall:.3f}"])
    return rows


def training_rows(batch_size: int, lengths: tuple[int, int], threads: int) -> list[list[str]]:
    """Pairs per second of each trainer, from two fit lengths (see the module docstring)."""
    from _peers import static_embedding_fit

    from skcontrast import ContrastiveEmbedder
    from skcontrast.datasets import SAME_SCRIPT_LANGUAGES, load_emoji_names

    torch.set_num_threads(threads)
    pairs = load_emoji_names(list(SAME_SCRIPT_LANGUAGES), random_state=0).pairs_train

    def ours(**settings: object):
        def fit(epochs: int) -> float:
            start = time.perf_counter()
            ContrastiveEmbedder(max_epochs=epochs, batch_size=batch_size, random_state=0,
                                **settings).fit(pairs)
            return time.perf_counter() - start
        return fit

    def peer(epochs: int) -> float:
        return static_embedding_fit(pairs, batch_size=batch_size, epochs=epochs)[2]

    trainers = {"skcontrast defaults (sparse, LazyAdam)": ours(),
                "sentence-transformers StaticEmbedding + MNRL": peer,
                "skcontrast defaults, dense gradients (module__sparse=False)":
                    ours(module__sparse=False)}
    rows, rates = [], {}
    for name, fit in trainers.items():
        short, timed = fit(lengths[0]), {}
        memory = peak_memory_mib(
            lambda fit=fit, timed=timed: timed.setdefault("long", fit(lengths[1])))
        per_epoch = (timed["long"] - short) / (lengths[1] - lengths[0])
        rates[name] = len(pairs) / per_epoch
        rows.append([name, f"{per_epoch:.1f} s", f"{short - lengths[0] * per_epoch:.1f} s",
                     f"{rates[name]:,.0f}", fmt_mib(memory)])
    peer_rate = rates["sentence-transformers StaticEmbedding + MNRL"]
    for row, rate in zip(rows, rates.values(), strict=True):
        row.append(f"{rate / peer_rate:.2f}x")
    return rows


def negative_column_rows(batch_size: int, lengths: tuple[int, int], threads: int,
                         runs: int) -> list[list[str]]:
    """Seconds per epoch of pairs and of pairs with a hard-negative column, per trainer,
    and their ratio (see the module docstring)."""
    import statistics

    from _peers import static_embedding_fit

    from skcontrast import ContrastiveEmbedder
    from skcontrast.datasets import SAME_SCRIPT_LANGUAGES, load_emoji_names

    torch.set_num_threads(threads)
    pairs = load_emoji_names(list(SAME_SCRIPT_LANGUAGES), random_state=0).pairs_train
    other = np.random.default_rng(0).permutation(len(pairs))
    data = {"pairs": np.asarray(pairs, dtype=object),
            "+ 1 negative": np.asarray([(a, b, pairs[j][1])
                                        for (a, b), j in zip(pairs, other, strict=True)],
                                       dtype=object)}

    def ours(rows: np.ndarray, epochs: int) -> float:  # the epochs' own seconds
        est = ContrastiveEmbedder(max_epochs=epochs, batch_size=batch_size, random_state=0)
        return float(sum(est.fit([tuple(r) for r in rows]).history_[:, "dur"]))

    def peer(rows: np.ndarray, epochs: int) -> float:  # trainer.train()'s seconds
        return static_embedding_fit(rows, batch_size=batch_size, epochs=epochs)[1]

    trainers = {"skcontrast defaults": ours,
                "sentence-transformers StaticEmbedding + MNRL": peer}
    seconds: dict[tuple[str, str], list[float]] = {}
    for _ in range(runs):
        for trainer, fit in trainers.items():
            for kind, rows in data.items():
                short, long = (fit(rows, epochs) for epochs in lengths)
                seconds.setdefault((trainer, kind), []).append(
                    (long - short) / (lengths[1] - lengths[0]))
    out = []
    for trainer in trainers:
        alone, more = (statistics.median(seconds[trainer, kind]) for kind in data)
        out.append([trainer, f"{alone:.2f} s", f"{more:.2f} s", f"{more / alone:.2f}x"])
    return out


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dense-limit", type=int, default=50_000,
                        help="largest n for the dense n x n comparison")
    parser.add_argument("--queries", type=int, default=None,
                        help="search with this many anchors only (the corpus stays n)")
    parser.add_argument("--search", type=int, default=None,
                        help="instead: HybridRetriever over this many documents")
    parser.add_argument("--training", action="store_true",
                        help="instead: training throughput beside sentence-transformers")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--fit-lengths", type=int, nargs=2, default=[1, 3])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--negative-column", action="store_true",
                        help="instead: the cost of a hard-negative column per trainer")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    if args.negative_column:
        rows = negative_column_rows(args.batch_size, tuple(args.fit_lengths), args.threads,
                                    args.runs)
        text = (f"A hard-negative column: same-script emoji name pairs, batches of "
                f"{args.batch_size}, CPU ({args.threads} thread(s)); per epoch from the "
                f"training seconds of fits of {args.fit_lengths[0]} and "
                f"{args.fit_lengths[1]} epochs, median of {args.runs} interleaved runs\n"
                + table(rows, ["trainer", "pairs", "pairs + 1 negative", "x its pairs"]))
        print(text)
        return text
    if args.training:
        rows = training_rows(args.batch_size, tuple(args.fit_lengths), args.threads)
        text = (f"Training on same-script emoji name pairs, batches of {args.batch_size}, CPU "
                f"({args.threads} threads); per epoch from fits of {args.fit_lengths[0]} and "
                f"{args.fit_lengths[1]} epochs, set-up what is left of the shorter\n"
                + table(rows, ["trainer", "per epoch", "set-up", "pairs / s",
                               "peak memory", "vs sentence-transformers"]))
        print(text)
        return text
    if args.search is not None:
        rows = search_rows(args.search, args.queries or 1000)
        text = ("Hybrid search (CPU): index the documents, then search them, peak memory of "
                "both\n" + table(rows, ["corpus", "search", "index", "search time",
                                         "peak memory", "recall@1"]))
        print(text)
        return text
    text = run(args.sizes, args.device, args.dense_limit, args.queries)
    print(text)
    return text


if __name__ == "__main__":
    main()
