"""Cho et al. 2023, arXiv:2307.05906, Tables 1-2 at the scale of the bundled digits: SimCLR and
SogCLR objectives crossed with shuffled (SGD), OSGD and spectral (SC) batches.

Cho et al. 2023 (Sec. 6.2, App. D.3) pre-trains a ResNet-18 on CIFAR-100 with B = 32 and scores
top-1 retrieval of each test image's augmented twin among all test images (Table 2),
and among the augmentations of corrupted test images (Table 1). Here, at the scale of
scikit-learn's 1,797 8x8 digits (70/30 split, no download):

- encoder: a small CNN (skcontrast.datasets.digit_cnn), two kornia augmentations per
  image, made on the training device;
- objectives: SimCLR (loss=NTXent) and SogCLR (loss=DCL with SogCLRMemory, LibAUC's
  GCLoss_v1, the SogCLR code base Cho et al. 2023 builds on), temperature 0.2;
- batches, B = 32: ShuffledBatchSelector (SGD), OSGDSelector (10 random candidates per
  step, the worst kept: the paper's 1500/150 ratio), SpectralBatchSelector (chunks of
  40 B, as in App. D.3);
- schedule: linear warm-up for a tenth of the epochs, then half-cycle cosine, stepped
  per batch (the estimators' lr_schedule); Adam stands in for LARS;
- scores: recall@1 of each test image's augmented twin (both directions), on the clean
  test set and on its corrupted copy (Gaussian noise and blur, severity 1, made on the
  device; the two corrupted copies of an image are each other's hard negatives).

3 seeds (model, augmentations, batches), mean +- std.

    python examples/sogclr_digits.py [--quick] [--epochs E] [--out DIR]   (needs 'vision')
"""

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.model_selection import train_test_split

from skcontrast import ContrastiveEmbedder, WarmupCosine
from skcontrast.datasets import corrupt_images, digit_augmentation, digit_cnn, load_digit_images
from skcontrast.losses import DCL, NTXent
from skcontrast.memory import SogCLRMemory
from skcontrast.selectors import OSGDSelector, ShuffledBatchSelector, SpectralBatchSelector

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--quick", action="store_true")
parser.add_argument("--epochs", type=int, default=20)
parser.add_argument("--out", default="examples/output")
args = parser.parse_args()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
device = "cuda" if torch.cuda.is_available() else "cpu"
# quick: a smoke run of every row and both tables on a few images (two epochs: one of
# warm-up, one of the cosine)
epochs, seeds = (2, (0,)) if args.quick else (args.epochs, (0, 1, 2))

images, y = load_digit_images()
train, test = train_test_split(images, test_size=0.3, random_state=0, stratify=y)
if args.quick:
    train, test = train[:64], test[:32]
corrupted = corrupt_images(test, ("noise", "blur"), severity=1, random_state=0, device=device)
objectives = {"SimCLR": {"loss": NTXent(0.2)},
              "SogCLR": {"loss": DCL(0.2), "memory": SogCLRMemory(gamma=0.9)}}
selectors = {"SGD": ShuffledBatchSelector(32),
             "OSGD": OSGDSelector(32, k=10, q=1, candidates="random"),
             "SC": SpectralBatchSelector(32)}

print(f"{len(train)} training images, {len(test)} test images ({len(corrupted)} corrupted), "
      f"B=32, {epochs} epochs, {len(seeds)} seed(s), device {device}")
results = {}
for objective, settings in objectives.items():
    for name, selector in selectors.items():
        clean, hard, seconds = [], [], []
        for seed in seeds:
            start = time.perf_counter()
            est = ContrastiveEmbedder(
                module=digit_cnn, augmentation=digit_augmentation(), selector=selector,
                optimizer="adam", lr=3e-3, max_epochs=epochs,
                lr_schedule=WarmupCosine(warmup_epochs=max(1, epochs // 10)), random_state=seed,
                device=device, **settings).fit(train)
            seconds.append(time.perf_counter() - start)
            clean.append(est.score(test))
            hard.append(est.score(corrupted))
        results[objective, name] = (np.array(clean), np.array(hard), np.mean(seconds))
        print(f"  {objective:<7} {name:<5} clean {np.mean(clean):.3f}  corrupted "
              f"{np.mean(hard):.3f}  ({np.mean(seconds):.0f} s per fit)", flush=True)


def table(title, column):
    lines = [title, f"{'batches':<8} {'SimCLR':>15} {'SogCLR':>15}"]
    for name in selectors:
        cells = [f"{results[o, name][column].mean():.3f} ± {results[o, name][column].std():.3f}"
                 for o in objectives]
        lines.append(f"{name:<8} {cells[0]:>15} {cells[1]:>15}")
    return "\n".join(lines)


text = "\n\n".join([
    table("Table 2 at digit scale: top-1 retrieval of the augmented twin, clean test set", 0),
    table("Table 1 at digit scale: the same among corrupted copies (noise, blur)", 1)])
print()
print(text)
(out / "sogclr_digits.txt").write_text(text + "\n")
print(f"table: {out / 'sogclr_digits.txt'}")
