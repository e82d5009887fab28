"""When do hard batches pay? A measured map over data, selectors, hardness and guards.

SimCLR-style training, 3 seeds, scored by kNN accuracy (k=5, test embeddings against
the training ones) and twin top-1 (each test item's other view retrieved among all test
items' other views: Cho et al. 2023's (arXiv:2307.05906) Table 2 metric); every number is the gain
over shuffled batches with the same seed.

Data
    - ``digits``: scikit-learn's 8x8 digit images (10 classes), 70/30 split, the small
      CNN of :func:`skcontrast.datasets.digit_cnn` (group normalisation) with the digit
      augmentations (two augmented views per image);
    - ``synthetic-C``: :func:`skcontrast.datasets.make_paired_gaussians` pairs with C in
      {10, 50, 200} classes (latent clusters, spread ``cluster_std``), 2,400 pairs,
      2/3 for training; an MLP on the 32-wide views.

Settings (B = 32, NT-Xent at temperature 0.2, Adam 1e-3, same epochs for all)
    - shuffled (the reference);
    - spectral (Cho et al. 2023), OSGD (hardest of 4 random batches, Cho et al. 2023, Alg. 6, as
      many steps as shuffled), community (B3) and random walk (ProSampler), each tempered by
      ``TemperedSelector`` at three hardness settings, ``random_share`` 0 (the
      selector's own batches), 0.5 and 0.8, without and with the false-negative guard
      ``exclude_neighbours=5``;
    - loss-side hardness: shuffled batches with the HCL loss
      (:class:`~skcontrast.losses.HardNegativeNCE`, beta 0.5 and 1, tau_plus 0.1).

Outputs (``--out``): ``hardness_map.png`` (heat maps of the gains, data against
settings), ``hardness_table.txt`` (mean +- std over seeds) and ``hardness_runs.json``
(every run; a rerun skips the runs it holds).

    python examples/hardness_map.py [--quick] [--epochs E] [--out DIR]

The default run takes about half an hour on a 2-core CPU; --quick is a smoke run (seconds,
used by the test suite).
"""

import argparse
import functools
import json
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
from sklearn.base import clone
from sklearn.model_selection import train_test_split

from skcontrast import ContrastiveEmbedder
from skcontrast.datasets import (
    digit_augmentation,
    digit_cnn,
    load_digit_images,
    make_paired_gaussians,
)
from skcontrast.losses import HardNegativeNCE, NTXent
from skcontrast.metrics import knn_accuracy
from skcontrast.selectors import (
    CommunityBatchSelector,
    OSGDSelector,
    RandomWalkBatchSelector,
    ShuffledBatchSelector,
    SpectralBatchSelector,
    TemperedSelector,
)

B = 32
SHARES = (0.0, 0.5, 0.8)
#: --quick, a smoke run of every setting, the table and the figure at tiny sizes (its
#: numbers mean nothing): rows per batch (the guard needs about ten batches to keep each
#: sample away from its 5 neighbours, B3 more than q=40 training rows), digit images
#: (training, test), synthetic pairs and their classes
QUICK = {"B": 4, "digits": (48, 32), "pairs": 72, "classes": (10,)}
HARD = {
    "spectral": lambda: SpectralBatchSelector(B),
    "OSGD": lambda: OSGDSelector(B, k=4, q=1, candidates="random"),
    "community": lambda: CommunityBatchSelector(B),
    "walk": lambda: RandomWalkBatchSelector(B),
}


def settings():
    """name -> estimator parameters, in the order of the figure's columns."""
    out = {"shuffled": {"selector": ShuffledBatchSelector(B)}}
    for name, make in HARD.items():
        for guard in (False, True):
            for share in SHARES:
                if not make().partitions and (guard or share):
                    continue  # the dial and the guard need disjoint batches (OSGD's random
                    # candidates share samples): TemperedSelector refuses them
                label = f"{name} r={share:g}{' +guard' if guard else ''}"
                out[label] = {"selector": TemperedSelector(
                    make(), random_share=share, exclude_neighbours=5 if guard else 0)}
    for beta in (0.5, 1.0):
        out[f"HCL beta={beta:g}"] = {"selector": ShuffledBatchSelector(B),
                                     "loss": HardNegativeNCE(0.2, beta=beta, tau_plus=0.1)}
    return out


def datasets(quick):
    """name -> (X_train, y_train, X_test, y_test, augmentation or None)."""
    out = {}
    images, y = load_digit_images()
    tr, te, ytr, yte = train_test_split(images, y, test_size=0.3, random_state=0, stratify=y)
    n, all_classes = 2400, (10, 50, 200)
    if quick:
        n, all_classes = QUICK["pairs"], QUICK["classes"]
        a, b = QUICK["digits"]
        tr, ytr, te, yte = tr[:a], ytr[:a], te[:b], yte[:b]
    out["digits"] = (tr, ytr, te, yte, digit_augmentation())
    for classes in all_classes:
        X, y = make_paired_gaussians(n, 32, n_clusters=classes, cluster_std=1.0, noise=0.2,
                                     random_state=0)
        cut = 2 * n // 3
        out[f"synthetic-{classes}"] = (X[:cut], y[:cut], X[cut:], y[cut:], None)
    return out


def run(data, params, seed, epochs):
    X_train, y_train, X_test, y_test, augmentation = data
    network = ({"module": functools.partial(digit_cnn, norm="group")}
               if augmentation is not None else {"hidden_layer_sizes": (256,)})
    settings = {**network, "n_components": 32, "loss": NTXent(0.2), "optimizer": "adam",
                "lr": 1e-3, "max_epochs": epochs, "random_state": seed,
                "augmentation": augmentation, **{k: clone(v) for k, v in params.items()}}
    est = ContrastiveEmbedder(**settings)
    start = time.perf_counter()
    est.fit(X_train)
    seconds = time.perf_counter() - start
    knn = knn_accuracy(est.transform(X_train), y_train, est.transform(X_test), y_test)
    return {"knn": float(knn), "twin": float(est.score(X_test)), "seconds": seconds}


def table(runs, data_names, setting_names, seeds):
    lines = [f"{'setting':<24}" + "".join(f"{d:>34}" for d in data_names),
             f"{'':<24}" + "".join(f"{'kNN gain':>17}{'twin gain':>17}" for _ in data_names)]
    for s in setting_names:
        cells = []
        for d in data_names:
            for metric in ("knn", "twin"):
                gains = [runs[key(d, s, seed)][metric] - runs[key(d, "shuffled", seed)][metric]
                         for seed in seeds]
                cells.append(f"{np.mean(gains):+7.3f} ± {np.std(gains):.3f}")
        lines.append(f"{s:<24}" + "".join(f"{c:>17}" for c in cells))
    lines.append(f"{'shuffled (absolute)':<24}" + "".join(
        f"{np.mean([runs[key(d, 'shuffled', s)][m] for s in seeds]):>17.3f}"
        for d in data_names for m in ("knn", "twin")))
    return "\n".join(lines)


def key(data, setting, seed):
    return f"{data} | {setting} | {seed}"


def figure(runs, data_names, setting_names, seeds, path):
    fig, axes = plt.subplots(2, 1, figsize=(14, 7.5), constrained_layout=True)
    for ax, metric, title in zip(axes, ("knn", "twin"), ("kNN accuracy", "twin top-1"),
                                 strict=True):
        gain = np.array([[np.mean([runs[key(d, s, seed)][metric]
                                   - runs[key(d, "shuffled", seed)][metric]
                                   for seed in seeds]) for s in setting_names]
                         for d in data_names])
        limit = max(1e-3, np.abs(gain).max())
        image = ax.imshow(gain, cmap="RdBu", vmin=-limit, vmax=limit, aspect="auto")
        ax.set_yticks(range(len(data_names)), data_names)
        ax.set_xticks(range(len(setting_names)), setting_names, rotation=60, ha="right",
                      fontsize=8)
        for i in range(gain.shape[0]):
            for j in range(gain.shape[1]):
                ax.text(j, i, f"{100 * gain[i, j]:+.0f}", ha="center", va="center",
                        fontsize=6.5, color="black")
        ax.set_title(f"{title}: gain over shuffled batches (points; mean of "
                     f"{len(seeds)} seeds; blue = better)")
        fig.colorbar(image, ax=ax, fraction=0.02)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    global B
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of seconds")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--out", default="examples/output")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.quick:
        B = QUICK["B"]
    else:  # a smoke run keeps its caller's threads (the test suite gives it one)
        torch.set_num_threads(2)
    epochs, seeds = (1, (0,)) if args.quick else (args.epochs, (0, 1, 2))
    data = datasets(args.quick)
    chosen = settings()
    store = out / "hardness_runs.json"
    runs = json.loads(store.read_text()) if store.exists() and not args.quick else {}
    for d, dataset in data.items():
        for s, params in chosen.items():
            for seed in seeds:
                if key(d, s, seed) in runs:
                    continue
                runs[key(d, s, seed)] = run(dataset, params, seed, epochs)
                store.write_text(json.dumps(runs, indent=1))
                r = runs[key(d, s, seed)]
                print(f"{d:>14} {s:<24} seed {seed}: kNN {r['knn']:.3f} twin {r['twin']:.3f}"
                      f" ({r['seconds']:.1f} s)", flush=True)
    text = (f"Gain over shuffled batches (mean ± std over seeds {list(seeds)}), "
            f"{epochs} epochs, B={B}\n") + table(runs, list(data), list(chosen), seeds)
    (out / "hardness_table.txt").write_text(text + "\n")
    figure(runs, list(data), list(chosen), seeds, out / "hardness_map.png")
    print(text)


if __name__ == "__main__":
    main()
