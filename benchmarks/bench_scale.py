"""Data bigger than memory: fit and transform of a memory-mapped array (and of an Arrow
dataset on disk, and of a stream), peak anonymous memory above the process before the
call and time per epoch, side by side with a plain PyTorch loop over the same file.

Run:  python benchmarks/bench_scale.py [--sizes 250000 1000000 4000000] [--arrow]
                                       [--stream] [--text 1000000] [--dir DIR]
                                       [--threads 2]

Pairs of 32-d float32 features ``(n, 2, 32)`` (a noisy copy of a Gaussian vector) are
written once, chunk by chunk, to ``DIR`` as ``.npy`` files (and, with ``--arrow``, as
``datasets`` folders saved to disk), then read memory-mapped (``np.load(...,
mmap_mode='r')``, ``datasets.Dataset.load_from_disk``). One epoch of
``ContrastiveEmbedder(max_epochs=1, batch_size=1024)`` (shuffled batches) is measured
against one epoch of the loop a user writes over the same file: a ``DataLoader`` of
shuffled batch indices reading those rows, the estimator's own network (a copy), Adam
and symmetric InfoNCE as ``F.cross_entropy`` on one logits matrix. Memory is the
process's anonymous memory (``RssAnon``, sampled every 5 ms) above where it was before
the call, each form and size in a process of its own, its files read once before (the
page cache warm for both loops): the file's pages, which the kernel can drop, are not
counted. The bar of the
issue is 200 MB + a quarter of the data's size; ``transform``'s is its output + 200 MB.

With ``--stream``, the Arrow dataset is read as a stream (``Dataset.to_iterable_dataset``,
rows in the file's order, as ``load_dataset(..., streaming=True)`` reads them), trained
in windows of ``40 × 1024`` rows (``skcontrast.Stream``'s default) with shuffled
batches, spectral batches (Cho et al. 2023) and JEST curation (``score='hard'``, one
chunk), each fit in a process of its own, against the plain loop a user writes over a
stream: consecutive batches of 1,024 rows, read as Arrow; ``transform`` of the stream
writes into an output made for its rows (``out=``). A stream's fit should hold a window,
whatever the stream's length: its memory at 4M rows is compared with its memory at 1M.

With ``--text N``, ``N`` pairs of short English-like sentences (an anchor of 3-12 words
drawn from a bundled word list, its positive the same words shuffled with one
replaced) are saved as a ``datasets`` folder of two string columns and trained for one
epoch with the default text encoder (hashed character n-grams, the text bag with its IDF
prior), against the plain loop over the same file: batches of rows read as strings,
tokenized by the same tokenizer, the same network, Adam (``SparseAdam`` for the text
bag's table, whose gradients are sparse) and ``F.cross_entropy``. Its bar adds the
network and Adam's moments (the text bag's table of hashed n-grams, 256 MiB whatever
the data) to the bar of the others; "before it" is the time the fit spends before its
epoch (a pass that checks every text and counts the IDF prior).
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from _harness import peak_anonymous, set_threads, table
from torch.utils.data import BatchSampler, DataLoader, RandomSampler

from skcontrast import ContrastiveEmbedder

WIDTH, BATCH, TEMPERATURE, CHUNK = 32, 1024, 0.1, 100_000
#: epochs of the fit and of the plain loop timed, in turn; the fastest of each counts
REPEATS = 2


def pairs_file(folder: Path, n: int) -> Path:
    """``(n, 2, 32)`` float32 pairs in an ``.npy`` file, written chunk by chunk."""
    path = folder / f"pairs_{n}.npy"
    if not path.exists():
        out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32,
                                        shape=(n, 2, WIDTH))
        rng = np.random.default_rng(0)
        for start in range(0, n, CHUNK):
            z = rng.normal(size=(min(CHUNK, n - start), WIDTH)).astype(np.float32)
            out[start:start + len(z), 0] = z
            out[start:start + len(z), 1] = z + np.float32(0.1) * rng.normal(
                size=z.shape).astype(np.float32)
        out.flush()
        del out
    return path


def arrow_folder(folder: Path, n: int, pairs: np.ndarray) -> Path:
    """The same pairs as a ``datasets.Dataset`` saved to disk (columns ``a`` and ``b``)."""
    import datasets
    import pyarrow as pa

    path = folder / f"pairs_{n}_arrow"
    if not path.exists():
        def column(view: int, start: int) -> pa.Array:
            values = np.ascontiguousarray(pairs[start:start + CHUNK, view]).reshape(-1)
            return pa.FixedSizeListArray.from_arrays(pa.array(values), WIDTH)

        tables = [pa.table({"a": column(0, s), "b": column(1, s)})
                  for s in range(0, n, CHUNK)]
        datasets.Dataset(pa.concat_tables(tables)).save_to_disk(str(path))
    return path


def plain_steps(module: torch.nn.Module, batches, optimizers: list | None = None) -> None:
    """The loop a user writes over ``batches`` of view pairs ``(x0, x1)``: symmetric
    InfoNCE as cross-entropy on one logits matrix, stepped by Adam (or ``optimizers``)."""
    optimizers = optimizers or [torch.optim.Adam(module.parameters(), lr=1e-3)]
    for x0, x1 in batches:
        z = module((x0, x1))
        u, v = F.normalize(z[:, 0], dim=-1), F.normalize(z[:, 1], dim=-1)
        logits = u @ v.T / TEMPERATURE
        labels = torch.arange(len(z))
        loss = F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)
        for optimizer in optimizers:
            optimizer.zero_grad()
        loss.backward()
        for optimizer in optimizers:
            optimizer.step()


def plain_epoch(module: torch.nn.Module, read) -> None:
    """One epoch of the loop a user writes (:func:`plain_steps`): shuffled batch
    indices, the rows read from the file by a DataLoader (``read[rows]``)."""
    batches = BatchSampler(RandomSampler(range(read.n), generator=torch.Generator()
                                         .manual_seed(0)), BATCH, drop_last=False)
    plain_steps(module, ((pairs[:, 0], pairs[:, 1]) for pairs in
                         DataLoader(read, sampler=batches, batch_size=None)))


class ReadArray:
    """The rows of a batch, from a memory-mapped array (sorted: the file is read in
    order)."""

    def __init__(self, X: np.ndarray) -> None:
        self.X, self.n = X, len(X)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, rows: list[int]) -> torch.Tensor:
        return torch.from_numpy(self.X[np.sort(rows)])


class ReadArrow:
    """The rows of a batch, from an Arrow dataset on disk, as a user who knows Arrow
    reads them: ``datasets``' Arrow format (a table of the rows, sorted) flattened to
    NumPy (its NumPy format, a Python value per row, is about four times slower)."""

    def __init__(self, dataset) -> None:
        self.data, self.n = dataset.with_format("arrow"), len(dataset)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, rows: list[int]) -> torch.Tensor:
        batch = self.data[sorted(rows)]
        views = [batch.column(c).combine_chunks().flatten().to_numpy().reshape(len(rows), -1)
                 for c in ("a", "b")]
        return torch.from_numpy(np.stack(views, 1))


def rows_for(kind: str, n: int, data, read, data_mib: float,
             repeats: int = REPEATS) -> list[list[str]]:
    """Memory of the first fit and plain loop; time: the fastest of ``repeats`` epochs
    of each, run in turn (one epoch's time on a shared 2-core machine varies by a
    third)."""
    estimator = ContrastiveEmbedder(max_epochs=1, batch_size=BATCH, random_state=0)
    memory, _, est = peak_anonymous(lambda: estimator.fit(data))
    epochs = [float(est.history_[-1, "dur"])]
    module = copy.deepcopy(est.net_.module_)
    plain_memory, plain_seconds, _ = peak_anonymous(lambda: plain_epoch(module, read))
    plains = [plain_seconds]
    for _ in range(repeats - 1):
        again = ContrastiveEmbedder(max_epochs=1, batch_size=BATCH, random_state=0).fit(data)
        epochs.append(float(again.history_[-1, "dur"]))
        start = time.perf_counter()
        plain_epoch(copy.deepcopy(est.net_.module_), read)
        plains.append(time.perf_counter() - start)
    epoch, plain_seconds = min(epochs), min(plains)
    bar = 200 + data_mib / 4
    rows = [[kind, f"{n:,}", f"{data_mib:,.0f} MiB", "fit, 1 epoch", f"{memory:,.0f} MiB",
             f"{bar:,.0f} MiB", f"{epoch:.1f} s", f"{epoch / plain_seconds:.2f}x"],
            ["", "", "", "plain loop, 1 epoch", f"{plain_memory:,.0f} MiB", "",
             f"{plain_seconds:.1f} s", "1.00x"]]
    out_memory, seconds, out = peak_anonymous(lambda: est.transform(data))
    output = out.nbytes / 2**20
    rows.append(["", "", "", f"transform ({output:,.0f} MiB out)", f"{out_memory:,.0f} MiB",
                 f"{output + 200:,.0f} MiB", f"{seconds:.1f} s", ""])
    return rows


class StreamBatches:
    """The plain loop's batches of a stream: consecutive batches of its rows, as Arrow
    flattened to NumPy (its own batches, in the stream's order)."""

    def __init__(self, stream, n: int) -> None:
        self.stream, self.n = stream, n

    def __iter__(self):
        for batch in self.stream.with_format("arrow").iter(batch_size=BATCH):
            views = [batch.column(c).combine_chunks().flatten().to_numpy()
                     .reshape(len(batch), -1) for c in ("a", "b")]
            yield torch.from_numpy(np.stack(views, 1))


def plain_stream_epoch(module: torch.nn.Module, batches: StreamBatches) -> None:
    """:func:`plain_steps` over a stream's consecutive batches."""
    plain_steps(module, ((pairs[:, 0], pairs[:, 1]) for pairs in batches))


#: the selectors a stream is trained with, each in a process of its own
STREAM_SELECTORS = ("shuffled", "spectral", "JEST (hard, 1 chunk)")


def stream_rows(n: int, stream, data_mib: float, name: str) -> list[list[str]]:
    """A stream's fit with the selector ``name`` (memory, time, select time); with
    shuffled batches also the plain loop over the stream (time: the fastest of
    ``REPEATS`` epochs of each, run in turn) and ``transform`` of the stream into an
    output made for it (its rows known)."""
    from skcontrast.selectors import JESTSelector, SpectralBatchSelector

    selector = {"shuffled": None, "spectral": SpectralBatchSelector(),
                "JEST (hard, 1 chunk)": JESTSelector(score="hard", n_chunks=1)}[name]
    make = lambda: ContrastiveEmbedder(  # noqa: E731
        max_epochs=1, batch_size=BATCH, random_state=0, selector=selector).fit(stream)
    memory, _, fitted = peak_anonymous(make)
    epoch = float(fitted.history_[-1, "dur"])
    select = float(fitted.history_[-1, "select_time"])
    first = name == STREAM_SELECTORS[0]
    row = ["stream (Arrow)" if first else "", f"{n:,}" if first else "",
           f"{data_mib:,.0f} MiB" if first else "", f"fit, {name} ({select:.1f} s selecting)",
           f"{memory:,.0f} MiB", f"{200 + data_mib / 4:,.0f} MiB", f"{epoch:.1f} s", ""]
    if not first:
        return [row]
    module = copy.deepcopy(fitted.net_.module_)
    plain_memory, plain_seconds, _ = peak_anonymous(
        lambda: plain_stream_epoch(module, StreamBatches(stream, n)))
    epochs, plains = [epoch], [plain_seconds]
    for _ in range(REPEATS - 1):
        epochs.append(float(make().history_[-1, "dur"]))
        start = time.perf_counter()
        plain_stream_epoch(copy.deepcopy(fitted.net_.module_), StreamBatches(stream, n))
        plains.append(time.perf_counter() - start)
    epoch, plain_seconds = min(epochs), min(plains)
    row[6], row[7] = f"{epoch:.1f} s", f"{epoch / plain_seconds:.2f}x"
    width = fitted.n_components_
    out_memory, seconds, out = peak_anonymous(
        lambda: fitted.transform(stream, out=np.empty((n, width), np.float32)))
    output = out.nbytes / 2**20
    return [row, ["", "", "", "plain loop, 1 epoch", f"{plain_memory:,.0f} MiB", "",
                  f"{plain_seconds:.1f} s", "1.00x"],
            ["", "", "", f"transform, out= ({output:,.0f} MiB)", f"{out_memory:,.0f} MiB",
             f"{output + 200:,.0f} MiB", f"{seconds:.1f} s", ""]]


def text_folder(folder: Path, n: int) -> Path:
    """``n`` pairs of sentences as a ``datasets.Dataset`` of two string columns, saved."""
    import datasets

    path = folder / f"texts_{n}_arrow"
    if not path.exists():
        from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

        words = np.array(sorted(ENGLISH_STOP_WORDS))
        rng = np.random.default_rng(0)

        def chunks():
            for start in range(0, n, CHUNK):
                m = min(CHUNK, n - start)
                lengths = rng.integers(3, 13, size=m)
                anchors, positives = [], []
                for length in lengths:
                    picked = rng.choice(words, size=length)
                    anchors.append(" ".join(picked))
                    picked = rng.permutation(picked)
                    picked[0] = rng.choice(words)
                    positives.append(" ".join(picked))
                yield {"anchor": anchors, "positive": positives}

        parts = [datasets.Dataset.from_dict(c) for c in chunks()]
        datasets.concatenate_datasets(parts).save_to_disk(str(path))
    return path


def plain_text_epoch(module: torch.nn.Module, dataset, tokenizer) -> None:
    """:func:`plain_steps` over a text dataset: shuffled batches of rows read as strings,
    tokenized (both columns in one call) and embedded by the fitted network's copy, the
    text bag's table stepped by ``SparseAdam`` (its gradients are sparse), the rest by
    Adam."""
    sparse = [p for m in module.modules() if isinstance(m, torch.nn.EmbeddingBag) and m.sparse
              for p in m.parameters()]  # the text bag's table: sparse gradients
    dense = [p for p in module.parameters() if all(p is not q for q in sparse)]
    optimizers = [kind(group, lr=1e-3) for kind, group in
                  ((torch.optim.SparseAdam, sparse), (torch.optim.Adam, dense)) if group]
    data = dataset.with_format("arrow")
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0))

    def batches():
        for rows in order.split(BATCH):
            batch = data[np.sort(rows.numpy()).tolist()]
            texts = batch.column("anchor").to_pylist() + batch.column("positive").to_pylist()
            ids = torch.as_tensor(tokenizer(texts))
            yield ids[:len(rows)], ids[len(rows):]

    plain_steps(module, batches(), optimizers)


def text_case(folder: Path, n: int) -> list[list[str]]:
    """One epoch on ``n`` text pairs from Arrow on disk, and the plain loop's."""
    import datasets

    dataset = datasets.Dataset.load_from_disk(str(text_folder(folder, n)))
    warm([f["filename"] for f in dataset.cache_files])
    data_mib = sum(Path(f["filename"]).stat().st_size for f in dataset.cache_files) / 2**20
    estimator = ContrastiveEmbedder(max_epochs=1, batch_size=BATCH, random_state=0)
    memory, seconds, est = peak_anonymous(lambda: estimator.fit(dataset))
    epoch = float(est.history_[-1, "dur"])
    module = copy.deepcopy(est.net_.module_)
    plain_memory, plain_seconds, _ = peak_anonymous(
        lambda: plain_text_epoch(module, dataset, est.tokenizer_))
    # the network and Adam's two moments: what any loop over it holds (the text bag's
    # table of hashed n-grams is most of it, whatever the data)
    model_mib = 3 * sum(p.numel() * p.element_size() for p in module.parameters()) / 2**20
    return [["texts (Arrow)", f"{n:,}", f"{data_mib:,.0f} MiB",
             f"fit, 1 epoch ({seconds - epoch:.0f} s before it)", f"{memory:,.0f} MiB",
             f"{model_mib + 200 + data_mib / 4:,.0f} MiB (model + Adam "
             f"{model_mib:,.0f})", f"{epoch:.1f} s", f"{epoch / plain_seconds:.2f}x"],
            ["", "", "", "plain loop, 1 epoch", f"{plain_memory:,.0f} MiB", "",
             f"{plain_seconds:.1f} s", "1.00x"]]


def warm(paths: list[str]) -> None:
    """Read the files once, so that the fit and the plain loop both find them in the
    page cache (the first to read a file cold would pay the disk for both)."""
    for path in paths:
        with open(path, "rb") as file:
            while file.read(64 * 2**20):
                pass


def one_case(folder: Path, kind: str, n: int) -> list[list[str]]:
    """The rows of one form and size (run in a process of its own, so that no case
    starts from memory an earlier one left to the allocator), from warm files."""
    if kind == "text":
        return text_case(folder, n)
    kind, _, selector = kind.partition(":")
    path = pairs_file(folder, n)
    X = np.load(path, mmap_mode="r")
    data_mib = X.nbytes / 2**20
    if kind == "array":
        warm([str(path)])
        return rows_for("memory-mapped .npy", n, X, ReadArray(X), data_mib)
    import datasets

    dataset = datasets.Dataset.load_from_disk(str(arrow_folder(folder, n, X)))
    warm([f["filename"] for f in dataset.cache_files])
    if kind == "stream":
        return stream_rows(n, dataset.to_iterable_dataset(num_shards=64), data_mib, selector)
    return rows_for("Arrow on disk", n, dataset, ReadArrow(dataset), data_mib)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+",
                        default=[250_000, 1_000_000, 4_000_000])
    parser.add_argument("--arrow", action="store_true", help="also Arrow datasets on disk")
    parser.add_argument("--stream", action="store_true", help="also streams")
    parser.add_argument("--text", type=int, default=None, help="also N text pairs")
    parser.add_argument("--only", nargs="+", choices=("array", "arrow", "stream"),
                        help="only these forms")
    parser.add_argument("--dir", default=None, help="where the files go (default: a "
                        "temporary folder, removed after)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--case", nargs=2, help=argparse.SUPPRESS)  # kind, n: one process
    args = parser.parse_args(argv)
    set_threads(args.threads)
    if args.case:
        print(json.dumps(one_case(Path(args.dir), args.case[0], int(args.case[1]))))
        return ""
    holder = None if args.dir else tempfile.TemporaryDirectory()
    folder = Path(args.dir or holder.name)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    kinds = args.only or ["array"] + ["arrow"] * args.arrow + ["stream"] * args.stream
    cases = [(f"stream:{s}" if kind == "stream" else kind, n) for n in args.sizes
             for kind in kinds for s in (STREAM_SELECTORS if kind == "stream" else [""])]
    if args.text:
        cases.append(("text", args.text))
    try:
        for kind, n in cases:
            if kind != "text":
                pairs_file(folder, n)
            done = subprocess.run(
                [sys.executable, __file__, "--case", kind, str(n), "--dir", str(folder),
                 "--threads", str(args.threads)], capture_output=True, text=True,
                check=True)
            rows += json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        if holder is not None:
            holder.cleanup()
    text = (f"One epoch of ContrastiveEmbedder(max_epochs=1, batch_size={BATCH}) on pairs "
            f"of {WIDTH}-d float32, {args.threads} CPU threads; memory: anonymous memory "
            "above the process before the call, at its peak (the first run); time: the "
            f"fastest of {REPEATS} epochs of each, run in turn; 'vs plain': the epoch's "
            "time against the plain loop's over the same file (for a stream, over the same "
            "stream).\n")
    text += table(rows, ["data", "pairs", "size", "what", "peak memory", "bar", "time",
                         "vs plain"])
    print(text)
    return text


if __name__ == "__main__":
    main()
