"""ContrastiveEmbedder.fit vs a hand-written PyTorch loop: time per epoch.

Run:  python benchmarks/bench_fit.py [--n 20000] [--epochs 3]

Side by side in one process, CPU, 2 threads: n=20,000 pairs of d=64 features, the
default MLP (64 -> 128 -> 32, shared by both views), Adam (lr 1e-3), symmetric InfoNCE
at temperature 0.1, B=256, ShuffledBatchSelector. The plain loop trains an identical
module (same initial weights) on the very same batches (it draws them from the same
selector), so the difference is the framework's overhead: skorch's callbacks and
history, the DataLoader and the per-batch bookkeeping. It then reports the selection
time per epoch of SpectralBatchSelector inside fit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from _harness import set_threads, table

from skcontrast import ContrastiveEmbedder
from skcontrast._estimators._modules import build_encoders
from skcontrast.losses import symmetric_info_nce
from skcontrast.selectors import ShuffledBatchSelector, SpectralBatchSelector

D, K, HIDDEN, BATCH, LR, TEMPERATURE = 64, 32, (128,), 256, 1e-3, 0.1


def plain_module(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The estimator's default module, initialised as ``fit`` does, and its Adam."""
    torch.manual_seed(seed)
    module = build_encoders(None, [D, D], HIDDEN, K, True, D)
    return module, torch.optim.Adam(module.parameters(), lr=LR)


def plain_epoch(module: torch.nn.Module, optimizer: torch.optim.Optimizer,
                data: torch.Tensor, batches) -> None:
    """One epoch of the minimal loop: forward, symmetric InfoNCE, backward, step."""
    for batch in batches:
        z = module(data[torch.from_numpy(batch)])
        loss = symmetric_info_nce(z[:, 0], z[:, 1], temperature=TEMPERATURE)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def plain_loop(X: np.ndarray, epochs: int, seed: int) -> list[float]:
    """Per-epoch seconds of a minimal training loop on the same module and batches."""
    module, optimizer = plain_module(seed)
    selector = ShuffledBatchSelector(BATCH, random_state=seed + 1)
    data = torch.from_numpy(X.reshape(len(X), -1))
    placeholder = np.zeros((len(X), 1), dtype=np.float32)
    times = []
    for _ in range(epochs):
        start = time.perf_counter()
        plain_epoch(module, optimizer, data, selector.split(placeholder))
        times.append(time.perf_counter() - start)
    return times


def estimator_epochs(X: np.ndarray, epochs: int, seed: int, selector) -> list[dict]:
    est = ContrastiveEmbedder(n_components=K, hidden_layer_sizes=HIDDEN, lr=LR,
                              temperature=TEMPERATURE, max_epochs=epochs, selector=selector,
                              random_state=seed, device="cpu")
    est.fit(X)
    return list(est.history_)


def same_training(X: np.ndarray, seed: int) -> float:
    """Largest weight difference after one epoch of each: 0 means identical training."""
    est = ContrastiveEmbedder(n_components=K, hidden_layer_sizes=HIDDEN, lr=LR,
                              temperature=TEMPERATURE, max_epochs=1,
                              selector=ShuffledBatchSelector(BATCH), random_state=seed,
                              device="cpu").fit(X)
    reference, optimizer = plain_module(seed)
    data = torch.from_numpy(X.reshape(len(X), -1))
    plain_epoch(reference, optimizer, data,
                ShuffledBatchSelector(BATCH, random_state=seed + 1).split(data))
    trained = est.net_.module_.state_dict()
    return max(float((trained[k] - v).abs().max()) for k, v in reference.state_dict().items())


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    set_threads(args.threads)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.n, 2, D)).astype(np.float32)
    X[:, 1] = X[:, 0] + 0.5 * rng.normal(size=(args.n, D))
    seed = 0
    difference = same_training(X[:2048], seed)
    plain_loop(X[:2048], 1, seed)  # warm-up of both paths
    estimator_epochs(X[:2048], 1, seed, ShuffledBatchSelector(BATCH))
    plain = plain_loop(X, args.epochs, seed)
    ours = estimator_epochs(X, args.epochs, seed, ShuffledBatchSelector(BATCH))
    ours_dur = [row["dur"] for row in ours]
    ratio = statistics.median(ours_dur) / statistics.median(plain)
    rows = [["plain PyTorch loop", f"{statistics.median(plain):.3f} s", "", "1.00x"],
            ["ContrastiveEmbedder.fit", f"{statistics.median(ours_dur):.3f} s",
             f"{statistics.median(r['select_time'] for r in ours) * 1e3:.1f} ms",
             f"{ratio:.2f}x"]]
    spectral = estimator_epochs(X, 2, seed, SpectralBatchSelector(BATCH))
    rows.append(["fit with SpectralBatchSelector", f"{spectral[-1]['dur']:.3f} s",
                 f"{spectral[-1]['select_time']:.3f} s", ""])
    text = (f"Time per epoch, n={args.n:,}, d={D}, MLP {D}-{HIDDEN[0]}-{K}, B={BATCH}, "
            f"Adam, CPU, {torch.get_num_threads()} threads; median of {args.epochs} epochs\n")
    text += table(rows, ["training", "per epoch", "selection", "vs plain"])
    text += (f"\nsame module, optimizer, loss and batches: weights after one epoch differ "
             f"by at most {difference:.1e}")
    print(text)
    return text


if __name__ == "__main__":
    main()
