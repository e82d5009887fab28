"""Cho et al.'s Tables 1-2 at paper scale: CIFAR-100 pre-training, clean and corrupted
twin retrieval, for a user with a GPU and the data on disk.

The protocol of Cho, Sreenivasan et al., *Mini-Batch Optimization of Contrastive Loss*
(Sec. 6.2, App. D.3):

- a ResNet-18 (CIFAR variant: 3x3 stem, no max-pool) with SimCLR's two-layer projection
  head, pre-trained on the 50,000 CIFAR-100 training images, B = 32, 100 epochs;
- LARS (momentum 0.9, weight decay 1e-6, trust coefficient 1e-3; biases and
  normalisation weights neither adapted nor decayed), peak rate 0.075 * sqrt(B), 10
  epochs of linear warm-up, then a half-cycle cosine (:class:`skcontrast.WarmupCosine`);
- SimCLR's augmentations (random resized crop, horizontal flip, colour jitter 0.4 with
  p = 0.8, grey-scale with p = 0.2), two per image;
- two objectives: SimCLR (NT-Xent) and SogCLR (the DCL loss with
  :class:`skcontrast.memory.SogCLRMemory`, gamma 0.9), each crossed with three batch
  selectors: SGD (shuffled), OSGD (k = 1500, q = 150, Alg. 7) and spectral clustering
  (Alg. 3, on random chunks of k * B points with k = 40);
- Table 2: each CIFAR-100 test image is augmented twice; top-1 retrieval of its twin
  among the twins of all 10,000 test images (both directions averaged);
- Table 1: each test image under the 19 corruptions of CIFAR-100-C at severity 1, each
  corrupted image augmented twice; top-1 retrieval of a corrupted image's twin among
  the twins of the 19 corrupted versions of the same image (the corruptions are the
  hard negatives), averaged over the 10,000 images and both directions.

Data under ``--root`` (nothing is downloaded):

    ROOT/cifar-100-python/{train,test}        the CIFAR-100 "python version" pickles
    ROOT/CIFAR-100-C/<corruption>.npy         Hendrycks & Dietterich's arrays, 50,000 x
                                              32 x 32 x 3 uint8, severities 1-5 in
                                              blocks of 10,000 (severity 1 is used)

Without CIFAR-100-C only Table 2 is made. ``--quick`` writes generated stand-in files of
the same layout and image shape (random bytes, 64 training and 8 test images) to a
temporary folder and runs the whole pipeline on them for one epoch, with a narrow
ResNet-18 (first stage 4 channels wide) and OSGD's and the spectral chunks' sizes scaled
down: a smoke test of the code path, not of the results.

    python examples/reproduce_cho2023_tables.py --root DATA [--epochs 100] [--out DIR]
    python examples/reproduce_cho2023_tables.py --quick

Expect several GPU-days for all six runs at 100 epochs (the paper used one A100 each);
``--objectives`` and ``--selectors`` pick a subset.
"""

import argparse
import functools
import json
import pickle
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from skcontrast import ContrastiveEmbedder, WarmupCosine
from skcontrast.losses import DCL, NTXent
from skcontrast.memory import SogCLRMemory
from skcontrast.metrics import recall_at_k
from skcontrast.selectors import OSGDSelector, ShuffledBatchSelector, SpectralBatchSelector

CORRUPTIONS = (
    "brightness", "contrast", "defocus_blur", "elastic_transform", "fog", "frost",
    "gaussian_blur", "gaussian_noise", "glass_blur", "impulse_noise", "jpeg_compression",
    "motion_blur", "pixelate", "saturate", "shot_noise", "snow", "spatter", "speckle_noise",
    "zoom_blur")
B = 32


# --- the network --------------------------------------------------------------------

class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch normalisation and an identity (or 1x1) shortcut."""

    def __init__(self, n_in, n_out, stride):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(n_in, n_out, 3, stride, 1, bias=False), nn.BatchNorm2d(n_out),
            nn.ReLU(inplace=True),
            nn.Conv2d(n_out, n_out, 3, 1, 1, bias=False), nn.BatchNorm2d(n_out))
        self.shortcut = nn.Identity() if stride == 1 and n_in == n_out else nn.Sequential(
            nn.Conv2d(n_in, n_out, 1, stride, bias=False), nn.BatchNorm2d(n_out))

    def forward(self, x):
        return torch.relu(self.body(x) + self.shortcut(x))


def resnet18(n_in=3, n_out=128, width=64):
    """ResNet-18 for 32x32 images (He et al., 2016; CIFAR stem) with SimCLR's projection
    head 512 -> 512 -> ``n_out``. A module factory ``f(n_in, n_out)`` for the estimator
    (``n_in``, the flattened input size, is not needed); ``width`` is the first stage's
    (64 in the paper; the smoke run uses a narrow one)."""
    widths = [width * 2 ** i for i in range(4)]
    layers, channels = [], width
    for out, stride in zip(widths, (1, 2, 2, 2), strict=True):
        layers += [BasicBlock(channels, out, stride), BasicBlock(out, out, 1)]
        channels = out
    return nn.Sequential(
        nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width),
        nn.ReLU(inplace=True), *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(channels, channels), nn.ReLU(inplace=True), nn.Linear(channels, n_out))


# --- the optimiser ------------------------------------------------------------------

class Lars(torch.optim.Optimizer):
    """LARS (You et al., 2017) as SimCLR and SogCLR use it: for weight matrices and
    kernels, weight decay is added to the gradient and the step is rescaled by
    ``trust * |w| / |g|``; vectors (biases, normalisation weights) take plain momentum
    SGD steps."""

    def __init__(self, params, lr, momentum=0.9, weight_decay=1e-6, trust=1e-3):
        super().__init__(params, {"lr": lr, "momentum": momentum,
                                  "weight_decay": weight_decay, "trust": trust})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:  # skorch steps with a closure that computes the loss
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                step = p.grad
                if p.ndim > 1:
                    step = step.add(p, alpha=group["weight_decay"])
                    w, g = p.norm(), step.norm()
                    ratio = torch.where((w > 0) & (g > 0), group["trust"] * w / g,
                                        torch.ones_like(w))
                    step = step.mul(ratio)
                state = self.state[p]
                if "momentum" not in state:
                    state["momentum"] = torch.zeros_like(p)
                buffer = state["momentum"].mul_(group["momentum"]).add_(step)
                p.add_(buffer, alpha=-group["lr"])
        return loss


def simclr_augmentation():
    """SimCLR's CIFAR augmentations on batches of float images in [0, 1] (kornia)."""
    import kornia.augmentation as K

    return K.AugmentationSequential(
        K.RandomResizedCrop((32, 32), scale=(0.08, 1.0)),
        K.RandomHorizontalFlip(),
        K.ColorJitter(0.4, 0.4, 0.4, 0.1, p=0.8),
        K.RandomGrayscale(p=0.2))


# --- the data -----------------------------------------------------------------------

def load_cifar100(root):
    """(train, test) uint8 images of shape (n, 3, 32, 32) from the python pickles."""
    folder = Path(root) / "cifar-100-python"
    if not folder.is_dir():
        raise SystemExit(f"no CIFAR-100 under --root: expected {folder}/train and "
                         f"{folder}/test (the 'python version' from the CIFAR page)")
    out = []
    for part in ("train", "test"):
        with open(folder / part, "rb") as file:
            batch = pickle.load(file, encoding="bytes")
        out.append(np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
    return tuple(out)


def load_cifar100c(root, n_test):
    """uint8 images (19, n_test, 3, 32, 32): severity 1 of each corruption, or None."""
    folder = Path(root) / "CIFAR-100-C"
    if not folder.is_dir():
        return None
    images = []
    for name in CORRUPTIONS:
        array = np.load(folder / f"{name}.npy", mmap_mode="r")[:n_test]  # severity 1
        images.append(np.ascontiguousarray(array.transpose(0, 3, 1, 2)))
    return np.stack(images)


def write_stand_in(root, n_train=64, n_test=8, seed=0):
    """Random images in the on-disk layout of CIFAR-100 and CIFAR-100-C."""
    rng = np.random.default_rng(seed)
    folder = Path(root) / "cifar-100-python"
    folder.mkdir(parents=True)
    for part, n in (("train", n_train), ("test", n_test)):
        batch = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                 b"fine_labels": rng.integers(0, 100, n).tolist()}
        with open(folder / part, "wb") as file:
            pickle.dump(batch, file)
    corrupted = Path(root) / "CIFAR-100-C"
    corrupted.mkdir()
    for name in CORRUPTIONS:
        np.save(corrupted / f"{name}.npy",
                rng.integers(0, 256, (5 * n_test, 32, 32, 3), dtype=np.uint8))
    np.save(corrupted / "labels.npy", np.tile(rng.integers(0, 100, n_test), 5))


# --- the protocol -------------------------------------------------------------------

def selectors(quick):
    k, q, chunk = (2, 1, 2 * B) if quick else (1500, 150, 40 * B)
    return {"SGD": ShuffledBatchSelector(B),
            "OSGD": OSGDSelector(B, k=k, q=q),
            "SC": SpectralBatchSelector(B, chunk_size=chunk)}


def objectives():
    return {"SimCLR": {"loss": NTXent(0.1)},
            "SogCLR": {"loss": DCL(0.1), "memory": SogCLRMemory(gamma=0.9)}}


def corrupted_top1(est, corrupted):
    """Table 1's score: each corrupted image's twin among the twins of the 19 corrupted
    versions of the same image, averaged over images and both directions."""
    n_kinds, n = corrupted.shape[:2]
    U, V = est.transform_pairs(corrupted.reshape(n_kinds * n, *corrupted.shape[2:]))
    U = torch.nn.functional.normalize(torch.as_tensor(U).reshape(n_kinds, n, -1), dim=-1)
    V = torch.nn.functional.normalize(torch.as_tensor(V).reshape(n_kinds, n, -1), dim=-1)
    similarity = torch.einsum("kid,lid->ikl", U, V)  # (n, 19, 19) per image
    truth = torch.arange(n_kinds)
    hits = ((similarity.argmax(2) == truth).float().mean()
            + (similarity.argmax(1) == truth).float().mean()) / 2
    return float(hits)


def run(train, test, corrupted, objective, selector, epochs, seed, device, width):
    est = ContrastiveEmbedder(
        module=functools.partial(resnet18, width=width), n_components=128,
        augmentation=simclr_augmentation(),
        selector=selector, optimizer=Lars, lr=0.075 * B ** 0.5,
        optimizer_params={"momentum": 0.9, "weight_decay": 1e-6},
        lr_schedule=WarmupCosine(warmup_epochs=min(10, epochs)), max_epochs=epochs,
        random_state=seed, device=device, **objective)
    start = time.perf_counter()
    est.fit(train)
    row = {"seconds": time.perf_counter() - start,
           "clean top-1": recall_at_k(*est.transform_pairs(test), k=1)}
    if corrupted is not None:
        row["corrupted top-1"] = corrupted_top1(est, corrupted)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", help="folder holding cifar-100-python/ (and CIFAR-100-C/)")
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--objectives", nargs="+", default=["SimCLR", "SogCLR"],
                        choices=["SimCLR", "SogCLR"])
    parser.add_argument("--selectors", nargs="+", default=["SGD", "OSGD", "SC"],
                        choices=["SGD", "OSGD", "SC"])
    parser.add_argument("--out", default="examples/output")
    parser.add_argument("--quick", action="store_true",
                        help="one epoch on generated stand-in files (a smoke test)")
    args = parser.parse_args()
    if args.root is None and not args.quick:
        parser.error("--root is required (or --quick)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with tempfile.TemporaryDirectory() as scratch:
        root = args.root
        if args.quick:
            root = scratch
            write_stand_in(root)
        train, test = load_cifar100(root)
        corrupted = load_cifar100c(root, len(test))
    epochs = 1 if args.quick else args.epochs
    print(f"{len(train)} training and {len(test)} test images; CIFAR-100-C "
          f"{'found' if corrupted is not None else 'not found (Table 1 skipped)'}; "
          f"{epochs} epochs on {device}", flush=True)
    results = {}
    for objective in args.objectives:
        for name in args.selectors:
            row = run(train, test, corrupted, objectives()[objective],
                      selectors(args.quick)[name], epochs, args.seed, device,
                      width=4 if args.quick else 64)
            results[f"{objective} + {name}"] = row
            print(f"{objective:>7} + {name:<5}" + "".join(
                f"  {k} {v:.4f}" if k != "seconds" else f"  ({v:.0f} s)"
                for k, v in row.items()), flush=True)
    (out / "cho2023_tables.json").write_text(json.dumps(results, indent=1))
    columns = [c for c in ("clean top-1", "corrupted top-1")
               if all(c in r for r in results.values())]
    lines = [f"{'method':<16}" + "".join(f"{c:>18}" for c in columns)]
    lines += [f"{name:<16}" + "".join(f"{100 * row[c]:>17.2f}%" for c in columns)
              for name, row in results.items()]
    print("\n".join(lines))
    (out / "cho2023_tables.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
