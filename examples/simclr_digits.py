"""SimCLR on the bundled digit images: a small CNN, kornia batch augmentations made on the
training device, and the embedding scored by kNN and a linear probe.

scikit-learn's 1,797 8x8 digits (no download), 70/30 stratified split. ContrastiveEmbedder
takes the single images (n, 1, 8, 8) with an augmentation: every batch is moved to the
training device (the GPU when there is one), augmented twice there with per-sample random
crops, affine moves and noise (kornia), and the two views are contrasted with NT-Xent's
symmetric cousin, symmetric InfoNCE. The table compares the learned 32-d embedding with
raw pixels and PCA, and the same recipe on flattened pixels with an MLP and the library's
flat-feature augmentations; the figure follows kNN accuracy during training.

    python examples/simclr_digits.py [--quick] [--out DIR]    (needs the 'vision' extra)
"""

import argparse
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
from sklearn.decomposition import PCA
from sklearn.model_selection import train_test_split

from skcontrast import ContrastiveEmbedder
from skcontrast.datasets import (
    Compose,
    GaussianNoise,
    RandomShift,
    digit_augmentation,
    digit_cnn,
    load_digit_images,
)
from skcontrast.losses import SymmetricInfoNCE
from skcontrast.metrics import knn_accuracy, linear_probe_accuracy

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--quick", action="store_true")
parser.add_argument("--out", default="examples/output")
args = parser.parse_args()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
# quick: a smoke run of every row and the figure, on a few images in small batches
epochs, every, batch_size = (2, 1, 32) if args.quick else (60, 10, 256)
device = "cuda" if torch.cuda.is_available() else "cpu"

images, y = load_digit_images()
train, test, y_train, y_test = train_test_split(images, y, test_size=0.3, random_state=0,
                                                stratify=y)
if args.quick:
    train, test, y_train, y_test = train[:64], test[:32], y_train[:64], y_test[:32]
flat_train, flat_test = train.reshape(len(train), -1), test.reshape(len(test), -1)
common = {"n_components": 32, "batch_size": batch_size, "loss": SymmetricInfoNCE(0.2),
          "lr": 3e-3, "random_state": 0, "device": device}


def row(name, H_train, H_test, seconds=None):
    knn = knn_accuracy(H_train, y_train, H_test, y_test)
    linear = linear_probe_accuracy(H_train, y_train, H_test, y_test)
    fit = "" if seconds is None else f"{seconds:.1f}"
    print(f"{name:>40} {H_train.shape[1]:>4} {knn:>9.3f} {linear:>13.3f} {fit:>7}")
    return knn


print(f"{len(train)} training and {len(test)} test images, {epochs} epochs, device {device}")
print(f"{'representation':>40} {'dim':>4} {'kNN acc.':>9} {'linear probe':>13} {'fit s':>7}")
row("raw pixels", flat_train, flat_test)
pca = PCA(32, random_state=0).fit(flat_train)
row("PCA", pca.transform(flat_train), pca.transform(flat_test))

start = time.perf_counter()
mlp = ContrastiveEmbedder(augmentation=Compose(RandomShift((8, 8)), GaussianNoise(0.1)),
                          max_epochs=epochs, **common).fit(flat_train)
row("SimCLR, MLP on flat pixels (shift+noise)", mlp.transform(flat_train),
    mlp.transform(flat_test), time.perf_counter() - start)

curves = {}
for precision in ("float32", "bfloat16"):
    est = ContrastiveEmbedder(module=digit_cnn, augmentation=digit_augmentation(),
                              precision=precision, max_epochs=every, warm_start=True,
                              **common)
    seconds, curve = 0.0, []
    for _ in range(epochs // every):
        start = time.perf_counter()
        est.fit(train)
        seconds += time.perf_counter() - start
        curve.append(knn_accuracy(est.transform(train), y_train, est.transform(test), y_test))
    curves[precision] = curve
    row(f"SimCLR, CNN + kornia ({precision})", est.transform(train), est.transform(test),
        seconds)

fig, ax = plt.subplots(figsize=(5.5, 3.6))
steps = np.arange(every, epochs + 1, every)
for precision, curve in curves.items():
    ax.plot(steps, curve, marker="o", label=f"CNN, {precision}")
ax.axhline(knn_accuracy(flat_train, y_train, flat_test, y_test), color="grey", ls="--",
           label="raw pixels")
ax.set(xlabel="epoch", ylabel="test kNN accuracy (k=5)", title="SimCLR on 8x8 digits")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(out / "simclr_digits.png", dpi=110)
print(f"figure: {out / 'simclr_digits.png'}")
