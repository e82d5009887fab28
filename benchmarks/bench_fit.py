"""ContrastiveEmbedder.fit vs a hand-written PyTorch loop: time per epoch.

Run:  python benchmarks/bench_fit.py [--n 20000] [--images-n 50000] [--epochs 3]

Side by side in one process, on the GPU when one is usable (else the CPU, 2 threads).
The plain loop trains an identical module (same initial weights) on the very same
batches (drawn from the same selector) with the same optimizer and loss, so the
difference is the framework's overhead: skorch's callbacks and history, the batch
sampler and the per-batch bookkeeping. Each of the estimator's epochs is followed by a
plain loop's epoch (a callback after skorch's epoch timer), so the drift of a shared
machine's speed hits both sides of a pair alike; ``--runs`` fits give the median and
range of the pairs' ratios. Two workloads:

- **MLP**: n=20,000 pairs of d=64 features, the default MLP (64 -> 128 -> 32, shared
  by both views), Adam (lr 1e-3), symmetric InfoNCE at temperature 0.1, B=256;
- **CNN**: n=50,000 synthetic 32x32 RGB image pairs (an image and a noisy copy), a
  two-layer strided CNN, B=512, in float32 and in bfloat16 (``torch.autocast``, loss in
  float32);
- **wide MLP** (``--wide``, on by default on a GPU): n=100,000 pairs, hidden layers
  (2048, 2048), B=1024, where per-batch overhead is a larger share on a fast GPU.

On a GPU both sides hold the data on the device (``data_on_device=True`` for the
estimator) and the epoch time ends with a device synchronisation. It then times fits
with SpectralBatchSelector against a shuffled fit (``--only-selection`` for this table
alone), with a fresh embedding pass per epoch (the default), with the embeddings the
training steps computed (``selection_pass='cached'``) and choosing every fourth epoch
(``TemperedSelector(refresh_every=4)``), the selection's share of an epoch, and the
hardness the cache's staleness costs.

Gradient caching (``--caching``, on by default): the time per epoch of the CNN with
``micro_batch_size=64`` against the plain step on the same batches (B=512; the expected
cost is one more forward pass), and the largest batch whose whole training step fits a
memory budget (``--budget-gib``, default 4) with and without caching: one full-batch
step of the CNN on B image pairs per process, B doubling from 1,024, peak resident
memory (or allocated GPU memory) of the process measured.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from skorch.callbacks import Callback
from torch import nn

sys.path.insert(0, os.path.dirname(__file__))
from _harness import set_threads, table

from skcontrast import ContrastiveEmbedder
from skcontrast._estimators._data import View
from skcontrast._estimators._modules import build_encoders
from skcontrast.losses import SigLIP, SymmetricInfoNCE, symmetric_info_nce
from skcontrast.selectors import (
    FullBatchSelector,
    JESTSelector,
    RhoLossSelector,
    ShuffledBatchSelector,
    SpectralBatchSelector,
    TemperedSelector,
)

K, HIDDEN, LR, TEMPERATURE = 32, (128,), 1e-3, 0.1


def small_cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(),
                         nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, K))


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def plain_module(module: nn.Module | None, view_shape: tuple[int, ...], seed: int,
                 device: str, hidden: tuple[int, ...] = HIDDEN
                 ) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The estimator's module, initialised as ``fit`` does, and its Adam."""
    torch.manual_seed(seed)
    view = View(0, view_shape, False)
    encoders = build_encoders(module, [view, view], hidden, K, True).to(device)
    return encoders, torch.optim.Adam(encoders.parameters(), lr=LR)


def library_loss(z: torch.Tensor) -> torch.Tensor:
    """The library's symmetric InfoNCE (what the estimator computes)."""
    return symmetric_info_nce(z[:, 0], z[:, 1], temperature=TEMPERATURE)


def plain_loss(z: torch.Tensor) -> torch.Tensor:
    """Symmetric InfoNCE as a user writes it: F.cross_entropy on one logits matrix."""
    u, v = F.normalize(z[:, 0], dim=-1), F.normalize(z[:, 1], dim=-1)
    logits = u @ v.T / TEMPERATURE
    labels = torch.arange(len(z), device=z.device)
    return F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)


def plain_epoch(module: nn.Module, optimizer: torch.optim.Optimizer, data: torch.Tensor,
                batches, precision: str, loss_fn=library_loss) -> None:
    """One epoch of the minimal loop: forward, symmetric InfoNCE, backward, step."""
    autocast = contextlib.nullcontext() if precision == "float32" else torch.autocast(
        data.device.type, dtype=getattr(torch, precision))
    for batch in batches:
        index = torch.from_numpy(batch).to(data.device, non_blocking=True)
        pairs = data[index]
        with autocast:
            z = module((pairs[:, 0], pairs[:, 1]))
        loss = loss_fn(z.float())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def fit_length_rows(name: str, X: torch.Tensor, module: nn.Module | None, batch_size: int,
                    device: str, lengths: tuple[int, int] = (2, 8), runs: int = 3,
                    seed: int = 0) -> list[list[str]]:
    """Whole fits of two lengths, the estimator's and two plain loops' (the library's loss,
    and F.cross_entropy on one logits matrix), each loop with its own setup (module,
    optimizer, data on the device, selector): per epoch = the difference of the two
    lengths' times over the difference of epochs, setup = what is left of the shorter
    fit. Median over ``runs`` interleaved runs, the ratio's min-max beside it."""
    def plain_fit(epochs: int, loss_fn) -> None:
        encoders, optimizer = plain_module(module, tuple(X.shape[2:]), seed, device)
        selector = ShuffledBatchSelector(batch_size, random_state=seed + 1)
        data, placeholder = X.to(device), np.zeros((len(X), 1), dtype=np.float32)
        for _ in range(epochs):
            plain_epoch(encoders, optimizer, data, selector.split(placeholder), "float32",
                        loss_fn)
        synchronize(device)

    fits = {"ContrastiveEmbedder.fit": lambda e: estimator(
                module, batch_size, e, seed, "float32", device).fit(X),
            "plain loop, the library's loss": lambda e: plain_fit(e, library_loss),
            "plain loop, F.cross_entropy": lambda e: plain_fit(e, plain_loss)}
    seconds: dict[tuple[str, int], list[float]] = {(k, e): [] for k in fits for e in lengths}
    fits["ContrastiveEmbedder.fit"](1)  # warm-up
    for _ in range(runs):
        for epochs in lengths:
            for label, fit in fits.items():
                start = time.perf_counter()
                fit(epochs)
                seconds[label, epochs].append(time.perf_counter() - start)
    short, long = lengths
    per_epoch = {label: [(b - a) / (long - short) for a, b in
                         zip(seconds[label, short], seconds[label, long], strict=True)]
                 for label in fits}
    rows = []
    plain = per_epoch["plain loop, F.cross_entropy"]
    for label in fits:
        epoch = statistics.median(per_epoch[label])
        setup = statistics.median(seconds[label, short]) - short * epoch
        ratios = [a / b for a, b in zip(per_epoch[label], plain, strict=True)]
        rows.append([name, label, f"{epoch:.3f} s", f"{setup:.2f} s",
                     f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"])
    return rows


def estimator(module: nn.Module | None, batch_size: int, epochs: int, seed: int,
              precision: str, device: str, selector=None,
              hidden: tuple[int, ...] = HIDDEN, **extra) -> ContrastiveEmbedder:
    return ContrastiveEmbedder(module=module, n_components=K, hidden_layer_sizes=hidden, lr=LR,
                               loss=SymmetricInfoNCE(TEMPERATURE), max_epochs=epochs,
                               selector=selector or ShuffledBatchSelector(batch_size),
                               precision=precision, data_on_device=device != "cpu",
                               random_state=seed, device=device, **extra)


class Staleness(Callback):
    """After each epoch: the batches the selector picks from the cached embeddings and
    from a fresh pass, each scored on the fresh embeddings, relative to a shuffled
    partition: how much hardness the cache's staleness costs, against the spread of the
    selector's own seeds."""

    def __init__(self, batch_size: int, seeds=(0, 1, 2)):
        self.batch_size, self.seeds = batch_size, seeds
        self.rows_: list[tuple[float, float]] = []

    def on_epoch_end(self, net, **kwargs):
        fresh = net.selection_embeddings()
        cached = net.cached_embeddings()
        loss = net.criterion_.live_loss()
        baseline = hardness(fresh, ShuffledBatchSelector(self.batch_size, random_state=0)
                            .split(fresh), loss)
        for seed in self.seeds:
            picks = [SpectralBatchSelector(self.batch_size, random_state=seed).epoch_batches(
                embeddings, loss=loss) for embeddings in (fresh, cached)]
            self.rows_.append(tuple(hardness(fresh, b, loss) / baseline for b in picks))


def hardness(embeddings: np.ndarray, batches, loss) -> float:
    scores = loss.batch_losses(torch.from_numpy(embeddings[:, 0]),
                               torch.from_numpy(embeddings[:, 1]), list(batches))
    return float(scores.mean())


def staleness_rows(name: str, data: torch.Tensor, module: nn.Module | None, batch_size: int,
                   epochs: int, device: str) -> list[list[str]]:
    watch = Staleness(batch_size)
    estimator(module, batch_size, epochs, 0, "float32", device,
              SpectralBatchSelector(batch_size), callbacks=[watch],
              selection_pass="cached").fit(data)
    fresh, cached = (np.array(c) for c in zip(*watch.rows_, strict=True))
    return [[name, f"{fresh.mean():.3f} ± {fresh.std():.3f}",
             f"{cached.mean():.3f} ± {cached.std():.3f}",
             f"{(cached - fresh).mean():+.3f}"]]


def selection_rows(name: str, data: torch.Tensor, module: nn.Module | None, batch_size: int,
                   epochs: int, device: str, runs: int = 5) -> list[list[str]]:
    """Fits with adaptive selectors against a shuffled fit: time per epoch (selection
    included), the selection's share of it, for SpectralBatchSelector with a fresh
    embedding pass per epoch (the default), with the embeddings the training steps
    computed (``selection_pass='cached'``), and choosing every 4th epoch only
    (``TemperedSelector(refresh_every=4)``). Times are means over the epochs after the
    first (refresh epochs included, so the cost is amortised as a user pays it); the
    ratio to shuffled is per training step (for selectors whose epochs keep part of the
    batches), the median (min-max) over ``runs`` interleaved runs."""
    cases = [("shuffled", lambda: ShuffledBatchSelector(batch_size), "cached"),
             ("spectral, fresh pass", lambda: SpectralBatchSelector(batch_size), "fresh"),
             ("spectral, cached", lambda: SpectralBatchSelector(batch_size), "cached"),
             ("spectral, cached, refresh_every=4", lambda: TemperedSelector(
                 SpectralBatchSelector(batch_size), refresh_every=4), "cached")]
    durations = {label: [] for label, _, _ in cases}
    selects = {label: [] for label, _, _ in cases}
    steps = {label: [] for label, _, _ in cases}
    for _ in range(runs):
        for label, selector, mode in cases:
            est = estimator(module, batch_size, epochs + 1, 0, "float32", device, selector(),
                            selection_pass=mode).fit(data)
            durations[label].append(statistics.mean(est.history_[1:, "dur"]))
            selects[label].append(statistics.mean(est.history_[1:, "select_time"]))
            steps[label].append(durations[label][-1]
                                / statistics.mean(est.history_[1:, "n_batches"]))
    base = steps["shuffled"]
    rows = []
    for label, _, _ in cases:
        dur, select = statistics.median(durations[label]), statistics.median(selects[label])
        ratios = [a / b for a, b in zip(steps[label], base, strict=True)]
        rows.append([name, label, f"{dur:.3f} s", f"{select:.3f} s", f"{select / dur:.0%}",
                     f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"])
    return rows


def same_training(X: torch.Tensor, module: nn.Module | None, batch_size: int, seed: int,
                  device: str) -> float:
    """Largest weight difference after one epoch of each: 0 means identical training."""
    est = estimator(module, batch_size, 1, seed, "float32", device).fit(X)
    reference, optimizer = plain_module(module, tuple(X.shape[2:]), seed, device)
    data = X.to(device)
    placeholder = np.zeros((len(X), 1), dtype=np.float32)
    plain_epoch(reference, optimizer, data,
                ShuffledBatchSelector(batch_size, random_state=seed + 1).split(placeholder),
                "float32")
    trained = est.net_.module_.state_dict()
    return max(float((trained[k] - v).abs().max()) for k, v in reference.state_dict().items())


class PlainEpochs(Callback):
    """A plain loop's epoch after each of the estimator's, timed the same way: each pair of
    epochs runs back to back, so a machine whose load drifts over seconds slows both
    sides of a pair alike (skorch's epoch timer stops before this callback runs)."""

    def __init__(self, X: torch.Tensor, module: nn.Module | None, batch_size: int, seed: int,
                 precision: str, device: str, hidden: tuple[int, ...]):
        self.args = X, module, batch_size, seed, precision, device, hidden
        self.times_: list[float] = []

    def on_train_begin(self, net, **kwargs):
        X, module, batch_size, seed, _, device, hidden = self.args
        self.encoders, self.optimizer = plain_module(module, tuple(X.shape[2:]), seed, device,
                                                     hidden)
        self.selector = ShuffledBatchSelector(batch_size, random_state=seed + 1)
        self.data, self.placeholder = X.to(device), np.zeros((len(X), 1), dtype=np.float32)

    def on_epoch_end(self, net, **kwargs):
        device = self.args[5]
        synchronize(device)
        start = time.perf_counter()
        plain_epoch(self.encoders, self.optimizer, self.data,
                    self.selector.split(self.placeholder), self.args[4])
        synchronize(device)
        self.times_.append(time.perf_counter() - start)


def compare(name: str, X: torch.Tensor, module: nn.Module | None, batch_size: int,
            epochs: int, precision: str, device: str, seed: int = 0,
            hidden: tuple[int, ...] = HIDDEN, runs: int = 5) -> tuple[list, float]:
    """``runs`` fits of ``epochs`` epochs after a warm-up one, each epoch followed by a
    plain loop's epoch on the same batches; a run's ratio is the median of its epochs'
    ratios (ours over the plain epoch right after it), and the ratio reported is the
    median of the runs' ratios with their min and max, so that a noisy machine shows its
    noise instead of one lucky or unlucky draw."""
    plain, ours, ratios, select = [], [], [], []
    for _ in range(runs):
        paired = PlainEpochs(X, module, batch_size, seed, precision, device, hidden)
        est = estimator(module, batch_size, epochs + 1, seed, precision, device,
                        hidden=hidden, callbacks=[paired]).fit(X)
        durations = list(est.history_[1:, "dur"])
        plain.append(statistics.median(paired.times_[1:]))
        ours.append(statistics.median(durations))
        select.append(statistics.median(row["select_time"] for row in est.history_))
        ratios.append(statistics.median(a / b for a, b in zip(durations, paired.times_[1:],
                                                               strict=True)))
    ratio = statistics.median(ratios)
    spread = f"{ratio:.2f}x ({min(ratios):.2f}-{max(ratios):.2f})" if runs > 1 else \
        f"{ratio:.2f}x"
    rows = [[name, precision, "plain PyTorch loop", f"{statistics.median(plain):.3f} s", "",
             "1.00x"],
            [name, precision, "ContrastiveEmbedder.fit", f"{statistics.median(ours):.3f} s",
             f"{statistics.median(select) * 1e3:.1f} ms", spread]]
    return rows, ratio


def curation_rows(X: torch.Tensor, batch_size: int, ratio: float, epochs: int, device: str,
                  runs: int) -> list[list[str]]:
    """Time per training step of curating selectors against shuffled batches of the same
    size and loss (equal steps), interleaved over ``runs`` fits: the step's cost of
    choosing which rows train, by kind of reference and of loss."""
    n = len(X)
    rng = np.random.default_rng(1)
    fixed = torch.nn.functional.normalize(torch.from_numpy(
        rng.normal(size=(n, 2, K)).astype(np.float32)), dim=-1)
    reference = estimator(None, batch_size, 1, 5, "float32", device).fit(X[:2000])
    siglip = SigLIP(temperature=0.1, bias=-10.0)
    nce = SymmetricInfoNCE(TEMPERATURE)
    cases = [
        ("shuffled", siglip, lambda: ShuffledBatchSelector(batch_size)),
        ("JEST hard", siglip, lambda: JESTSelector(batch_size, ratio, score="hard")),
        ("JEST, fixed reference", siglip,
         lambda: JESTSelector(batch_size, ratio, reference=fixed)),
        ("JEST, model reference", siglip,
         lambda: JESTSelector(batch_size, ratio, reference=reference)),
        ("RHO-LOSS, fixed reference", siglip,
         lambda: RhoLossSelector(batch_size, ratio, reference=fixed)),
        ("JEST hard, cached pass", siglip,
         lambda: JESTSelector(batch_size, ratio, score="hard", selection_pass="cached")),
        ("JEST, model reference, cached pass", siglip,
         lambda: JESTSelector(batch_size, ratio, reference=reference,
                              selection_pass="cached")),
        ("shuffled", nce, lambda: ShuffledBatchSelector(batch_size)),
        ("JEST hard", nce, lambda: JESTSelector(batch_size, ratio, score="hard")),
        ("JEST hard, 4 chunks", nce,
         lambda: JESTSelector(batch_size, ratio, n_chunks=4, score="hard")),
        ("RHO-LOSS, fixed reference", nce,
         lambda: RhoLossSelector(batch_size, ratio, reference=fixed)),
        ("RHO-LOSS, model reference, cached pass", nce,
         lambda: RhoLossSelector(batch_size, ratio, reference=reference,
                                 selection_pass="cached")),
    ]
    per_step: dict[int, list[float]] = {i: [] for i in range(len(cases))}
    embedded: dict[int, float] = {}
    for _ in range(runs):
        for i, (_, loss, make) in enumerate(cases):
            est = estimator(None, batch_size, epochs + 1, 0, "float32", device,
                            selector=make()).set_params(loss=loss).fit(X)
            steps = [len(row["batches"]) for row in est.history_[1:]]
            per_step[i].append(statistics.median(
                row["dur"] / k for row, k in zip(est.history_[1:], steps, strict=True)))
            last = est.history_[-1]
            trained = sum(b["train_batch_size"] for b in last["batches"])
            embedded[i] = last["selection_rows"] / trained if "selection_rows" in last \
                else 0.0
    rows, base = [], 0.0
    for i, (name, loss, _) in enumerate(cases):
        step = statistics.median(per_step[i])
        base = step if name == "shuffled" else base
        rows.append([type(loss).__name__, name, f"{step * 1e3:.2f} ms",
                     f"{embedded[i]:.1f}", f"{step / base:.2f}x"])
    return rows


def synthetic_images(n: int, seed: int = 0) -> torch.Tensor:
    """``n`` pairs of 3x32x32 images: an image and a noisy copy."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(n, 1, 3, 32, 32, generator=generator)
    noise = 0.1 * torch.randn(images.shape, generator=generator)
    return torch.cat([images, images + noise], dim=1)


def caching_rows(n: int, epochs: int, device: str) -> list[list[str]]:
    """Epoch time of the CNN with gradient caching against the plain step (same batches)."""
    images = synthetic_images(n)
    times = {}
    for micro in (None, 64):
        est = estimator(small_cnn(), 512, epochs + 1, 0, "float32", device)
        est.set_params(micro_batch_size=micro).fit(images)
        times[micro] = statistics.median(row["dur"] for row in est.history_[1:])
    return [["CNN", "float32", "plain step, B=512", f"{times[None]:.3f} s", "", "1.00x"],
            ["CNN", "float32", "micro_batch_size=64", f"{times[64]:.3f} s", "",
             f"{times[64] / times[None]:.2f}x"]]


def probe_step(batch_size: int, micro: int | None, device: str) -> float:
    """Peak memory (bytes) of a process that takes one full-batch CNN step on B pairs."""
    est = ContrastiveEmbedder(module=small_cnn(), n_components=K, selector=FullBatchSelector(),
                              max_epochs=1, loss="nt_xent", micro_batch_size=micro,
                              random_state=0, device=device)
    est.fit(synthetic_images(batch_size))
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def largest_batches(budget: float, device: str, threads: int) -> list[list[str]]:
    """The largest B (doubling from 1,024) whose step fits ``budget`` bytes, both ways."""
    rows = []
    for micro in (None, 256):
        fitted, peak, b = None, None, 1024
        while b <= 2**17:
            done = subprocess.run(
                [sys.executable, __file__, "--probe", str(b), str(micro or 0), device],
                capture_output=True, text=True, env={**os.environ,
                                                     "OMP_NUM_THREADS": str(threads)})
            if done.returncode != 0:
                break
            used = json.loads(done.stdout.strip().splitlines()[-1])
            if used > budget:
                break
            fitted, peak, b = b, used, 2 * b
        label = "plain step" if micro is None else f"micro_batch_size={micro}"
        rows.append([label, "none" if fitted is None else f"{fitted:,}",
                     "" if peak is None else f"{peak / 2**30:.2f} GiB"])
    return rows


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="MLP pairs")
    parser.add_argument("--images-n", type=int, default=50_000, help="CNN image pairs")
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs (after one)")
    parser.add_argument("--runs", type=int, default=5,
                        help="fits per case, each epoch paired with a plain one (median, "
                             "min, max of the runs' ratios)")
    parser.add_argument("--only-mlp", action="store_true",
                        help="only the MLP overhead row (no CNN, selection or caching)")
    parser.add_argument("--threads", type=int, default=2,
                        help="torch threads on the CPU")
    parser.add_argument("--device", default="auto",
                        help="'auto' (a GPU if usable), 'cpu' or 'cuda'")
    parser.add_argument("--skip-spectral", action="store_true",
                        help="skip the adaptive-selection and staleness tables")
    parser.add_argument("--only-selection", action="store_true",
                        help="only the adaptive-selection table")
    parser.add_argument("--selection-epochs", type=int, default=8,
                        help="timed epochs of the adaptive-selection fits (after one)")
    parser.add_argument("--selection-images", type=int, default=10_000,
                        help="CNN image pairs of the adaptive-selection fits")
    parser.add_argument("--wide", action=argparse.BooleanOptionalAction, default=None,
                        help="also a wide MLP (2048, 2048), n=100,000, B=1024 (default: on "
                             "a GPU only)")
    parser.add_argument("--caching", action=argparse.BooleanOptionalAction, default=True,
                        help="gradient caching: step time and the largest batch in budget")
    parser.add_argument("--budget-gib", type=float, default=4.0,
                        help="memory budget of the largest-batch table, GiB")
    parser.add_argument("--fit-lengths", type=int, nargs=2, default=[2, 8],
                        help="the two fit lengths (epochs) of the whole-fit table")
    parser.add_argument("--only-fit-lengths", action="store_true",
                        help="only the whole-fit table against the plain loops")
    parser.add_argument("--curation", action=argparse.BooleanOptionalAction, default=True,
                        help="curating selectors (JEST, RHO-LOSS): time per step against "
                             "shuffled batches")
    parser.add_argument("--only-curation", action="store_true",
                        help="only the curation table")
    parser.add_argument("--curation-n", type=int, default=5000,
                        help="MLP pairs of the curation table")
    parser.add_argument("--probe", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:  # one step in a fresh process (see largest_batches)
        b, micro, device = int(args.probe[0]), int(args.probe[1]) or None, args.probe[2]
        set_threads(args.threads)
        print(json.dumps(probe_step(b, micro, device)))
        return ""
    set_threads(args.threads)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" \
        else args.device
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.n, 2, 64)).astype(np.float32)
    X[:, 1] = X[:, 0] + 0.5 * rng.normal(size=(args.n, 64))
    X = torch.from_numpy(X)
    images = torch.from_numpy(rng.random((args.images_n, 1, 3, 32, 32), dtype=np.float32))
    images = torch.cat([images, images + 0.1 * torch.randn_like(images)], dim=1)
    where = torch.cuda.get_device_name() if device.startswith("cuda") else \
        f"CPU, {torch.get_num_threads()} threads"
    curation_text = ""
    focused = args.only_fit_lengths or args.only_mlp or args.only_selection
    if args.only_curation or (args.curation and not focused):
        b, ratio = 64, 0.75
        curation_text = (
            f"Curating selectors inside fit ({where}): time per training step (median of "
            f"{args.epochs} epochs after a warm-up one, median over {args.runs} "
            f"interleaved runs) on MLP pairs (n={args.curation_n:,}), B={b} rows trained "
            f"per step from super-batches of {round(b / (1 - ratio))} (filter ratio "
            f"{ratio}); 'embedded' counts rows embedded to choose per row trained; 'vs "
            "shuffled' against shuffled batches of B with the same loss (equal steps).\n")
        curation_text += table(curation_rows(X[:args.curation_n], b, ratio, args.epochs,
                                             device, args.runs),
                               ["loss", "selector", "per step", "embedded",
                                "vs shuffled"]) + "\n\n"
        print(curation_text, flush=True)
        if args.only_curation:
            return curation_text
    lengths_text = (
        f"Whole fits of {args.fit_lengths[0]} and {args.fit_lengths[1]} epochs on {{where}}, "
        "each with its own setup; per epoch from the difference of the two lengths, setup "
        "what is left of the shorter; 'vs plain' against the plain loop with "
        "F.cross_entropy, median (min-max) over 3 interleaved runs. MLP as below.\n")
    length_rows = fit_length_rows("MLP", X, None, 256, device, tuple(args.fit_lengths))
    lengths_text = lengths_text.format(where=where) + table(
        length_rows, ["model", "training", "per epoch", "setup", "vs plain"]) + "\n\n"
    print(lengths_text, flush=True)
    lengths_text = curation_text + lengths_text
    if args.only_fit_lengths:
        return lengths_text
    rows, ratios, checks = [], {}, {}
    cases = [("MLP", X, None, 256, "float32"), ("CNN", images, small_cnn(), 512, "float32"),
             ("CNN", images, small_cnn(), 512, "bfloat16")]
    if args.only_mlp:
        cases = cases[:1]
        args.skip_spectral, args.caching, args.wide = True, False, False
    if args.only_selection:
        cases, args.caching, args.wide = [], False, False
    for name, data, module, batch_size, _ in cases:
        if name not in checks:
            checks[name] = same_training(data[:2048], module, batch_size, 0, device)
    for name, data, module, batch_size, precision in cases:
        case_rows, ratios[name, precision] = compare(name, data, module, batch_size,
                                                     args.epochs, precision, device,
                                                     runs=args.runs)
        rows += case_rows
    wide = device != "cpu" if args.wide is None else args.wide
    if wide:  # the second setting of the H100 measurement that motivated the target
        W = torch.from_numpy(rng.normal(size=(100_000, 2, 64)).astype(np.float32))
        W[:, 1] = W[:, 0] + 0.5 * torch.randn_like(W[:, 0])
        case_rows, _ = compare("MLP 2048x2", W, None, 1024, args.epochs, "float32", device,
                               hidden=(2048, 2048))
        rows += case_rows
    selection, staleness = [], []
    if not args.skip_spectral:
        selection = selection_rows("MLP", X, None, 256, args.selection_epochs, device,
                                   args.runs)
        selection += selection_rows("CNN", images[:args.selection_images], small_cnn(), 512,
                                    args.selection_epochs, device, args.runs)
        if not args.only_selection:
            staleness = staleness_rows("MLP", X[:5000], None, 256, args.epochs, device)
            staleness += staleness_rows("CNN", images[:5000], small_cnn(), 256, args.epochs,
                                        device)
    if args.caching:
        rows += caching_rows(min(args.images_n, 20_000), args.epochs, device)
    text = lengths_text
    if rows:
        text += (f"Time per epoch on {where}; median of {args.epochs} epochs after a warm-up "
                 f"epoch; 'vs plain' is the median (min-max) over {args.runs} runs of the "
                 "median ratio of each epoch to a plain loop's epoch run right after it."
                 f"\nMLP: n={args.n:,} pairs, d=64, MLP 64-{HIDDEN[0]}-{K}, B=256. CNN: "
                 f"n={args.images_n:,} pairs of 3x32x32 images, 2 conv layers, B=512. Adam, "
                 f"symmetric InfoNCE.\n")
        text += table(rows, ["model", "precision", "training", "per epoch", "selection",
                             "vs plain"])
        text += ("\nsame module, optimizer, loss and batches: weights after one float32 "
                 "epoch differ by at most "
                 + ", ".join(f"{k} {v:.1e}" for k, v in checks.items()) + "\n\n")
    if selection:
        text += (f"Adaptive selectors inside fit ({where}, float32): time per epoch, "
                 f"selection included, mean of {args.selection_epochs} epochs after a "
                 f"warm-up one; 'vs shuffled' is per training step, the median (min-max) "
                 f"over {args.runs} interleaved runs. MLP as above (n={args.n:,}); CNN on "
                 f"{min(args.selection_images, args.images_n):,} image pairs, B=512\n")
        text += table(selection, ["model", "batches", "per epoch", "selection",
                                  "share", "vs shuffled"])
    if staleness:
        text += ("\n\nStaleness: spectral batches picked from the cached embeddings and from "
                 "a fresh pass, both scored on the fresh ones, relative to a shuffled "
                 f"partition (hardness; mean ± std over {args.epochs} epochs x 3 selector "
                 "seeds, n=5,000)\n")
        text += table(staleness, ["model", "fresh pass", "cached", "cached - fresh"])
    if args.caching:
        budget = args.budget_gib * 2**30
        kind = "allocated GPU" if device != "cpu" else "peak resident"
        text += (f"\n\nLargest full batch of CNN image pairs whose training step fits "
                 f"{args.budget_gib:g} GiB ({kind} memory of the whole process, data "
                 "included; NT-Xent, tiled when large):\n")
        text += table(largest_batches(budget, device, args.threads),
                      ["training step", "largest B", "peak memory"])
    print(text)
    return text


if __name__ == "__main__":
    main()
