"""Bigger batches or smarter batches? Closing the mini-batch gap on the digit images.

Full-batch training reaches the optimal geometry (Sreenivasan et al. 2023,
openreview.net/forum?id=7n2dNATSHeQ, Thm 1, Cho et al. 2023, arXiv:2307.05906, Thms 3-5);
mini-batches of B do not. Three ways to close the gap, measured on the same SimCLR set-up
(scikit-learn's 8x8 digits, 70/30 split; the small CNN of skcontrast.datasets.digit_cnn with group
normalisation; kornia augmentations; NT-Xent, temperature 0.2, Adam 1e-3), 3 seeds, mean +- std:

- smarter batches at B = 32: spectral (SC) and OSGD batches against shuffled ones;
- a memory beyond the batch at B = 32: SogCLR's moving averages (loss 'dcl') and a
  cross-batch queue of 8 batches (XBM), started after two epochs as XBM's authors
  start it after a warm-up;
- bigger batches: B = 256, 1,024 and the full training set (1,257), through gradient
  caching (micro_batch_size=64), so the encoder never holds more than 64 images' worth
  of activations (the loss tiles its similarities by itself when they grow large).

Each row is trained for the same number of epochs, and again for the same wall-clock
time as shuffled B = 32 (its epochs = that time / the row's own epoch time). Scores: kNN
accuracy (k=5) of the test embeddings and top-1 retrieval of each test image's
augmented twin (Cho et al. 2023's Table 2 metric).

    python examples/bigger_or_smarter.py [--quick] [--epochs E] [--out DIR]  (needs 'vision')
"""

import argparse
import functools
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.model_selection import train_test_split

from skcontrast import ContrastiveEmbedder
from skcontrast.datasets import digit_augmentation, digit_cnn, load_digit_images
from skcontrast.losses import NTXent
from skcontrast.memory import CrossBatchMemory, SogCLRMemory
from skcontrast.metrics import knn_accuracy
from skcontrast.selectors import (
    FullBatchSelector,
    OSGDSelector,
    ShuffledBatchSelector,
    SpectralBatchSelector,
)

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--quick", action="store_true")
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--out", default="examples/output")
args = parser.parse_args()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
device = "cuda" if torch.cuda.is_available() else "cpu"
# quick: a smoke run of every row and the table on a few images (one epoch: XBM's memory,
# which starts after two, stays empty), micro-batches of 16 so that big batches are cached
epochs, seeds, micro = (1, (0,), 16) if args.quick else (args.epochs, (0, 1, 2), 64)

images, y = load_digit_images()
train, test, y_train, y_test = train_test_split(images, y, test_size=0.3, random_state=0,
                                                stratify=y)
if args.quick:
    train, y_train, test, y_test = train[:64], y_train[:64], test[:32], y_test[:32]
ROWS = {  # name -> estimator settings
    "B=32 shuffled": {"selector": ShuffledBatchSelector(32)},
    "B=32 spectral": {"selector": SpectralBatchSelector(32)},
    "B=32 OSGD": {"selector": OSGDSelector(32, k=10, q=1, candidates="random")},
    "B=32 + SogCLR": {"selector": ShuffledBatchSelector(32), "loss": "dcl",
                      "memory": SogCLRMemory(gamma=0.9)},
    "B=32 + XBM": {"selector": ShuffledBatchSelector(32),  # after two epochs' warm-up
                   "memory": CrossBatchMemory(size=8 * 64, start_step=2 * -(-len(train) // 32))},
    "B=256, cached": {"selector": ShuffledBatchSelector(min(256, len(train))),
                      "micro_batch_size": micro},
    "B=1024, cached": {"selector": ShuffledBatchSelector(min(1024, len(train))),
                       "micro_batch_size": micro},
    "full batch, cached": {"selector": FullBatchSelector(), "micro_batch_size": micro},
}


def run(settings, seed, n_epochs):
    est = ContrastiveEmbedder(**{
        "module": functools.partial(digit_cnn, norm="group"),
        "augmentation": digit_augmentation(), "loss": NTXent(0.2),
        "optimizer": "adam", "lr": 1e-3, "max_epochs": n_epochs, "random_state": seed,
        "device": device, **settings})
    start = time.perf_counter()
    est.fit(train)
    seconds = time.perf_counter() - start
    knn = knn_accuracy(est.transform(train), y_train, est.transform(test), y_test)
    return knn, est.score(test), seconds


def summary(values):
    values = np.asarray(values)
    return f"{values.mean():.3f} ± {values.std():.3f}"


print(f"{len(train)} training images, {len(test)} test images, {epochs} epochs, "
      f"{len(seeds)} seed(s), device {device}")
run(ROWS["B=32 shuffled"], 0, 1)  # one-time costs (imports, first kernels) out of the timing
results, budget = {}, None
for name, settings in ROWS.items():
    same_epochs = [run(settings, seed, epochs) for seed in seeds]
    per_epoch = np.mean([r[2] for r in same_epochs]) / epochs
    if budget is None:  # shuffled B=32 sets the time budget
        budget = per_epoch * epochs
    timed_epochs = max(1, int(budget / per_epoch))
    same_time = same_epochs if timed_epochs == epochs else \
        [run(settings, seed, timed_epochs) for seed in seeds]
    results[name] = (same_epochs, same_time, per_epoch, timed_epochs)
    print(f"  {name:<19} equal epochs: kNN {summary([r[0] for r in same_epochs])}, "
          f"twin R@1 {summary([r[1] for r in same_epochs])}; {per_epoch:.2f} s/epoch",
          flush=True)

lines = [f"SimCLR on the digit images, {epochs} epochs or {budget:.0f} s of training "
         f"(shuffled B=32's time), {len(seeds)} seed(s), {device}",
         f"{'batches':<19} {'kNN, epochs':>15} {'R@1, epochs':>15} {'s/epoch':>8} "
         f"{'kNN, time':>15} {'R@1, time':>15} {'epochs':>7}"]
for name, (same_epochs, same_time, per_epoch, timed_epochs) in results.items():
    lines.append(f"{name:<19} {summary([r[0] for r in same_epochs]):>15} "
                 f"{summary([r[1] for r in same_epochs]):>15} {per_epoch:>8.2f} "
                 f"{summary([r[0] for r in same_time]):>15} "
                 f"{summary([r[1] for r in same_time]):>15} {timed_epochs:>7}")
text = "\n".join(lines)
print()
print(text)
(out / "bigger_or_smarter.txt").write_text(text + "\n")
print(f"table: {out / 'bigger_or_smarter.txt'}")
