"""Which selector, when: batch selection measured on the bundled digits, 3 seeds.

Four experiments, each at equal epochs and (1, 3) at equal wall-clock time, mean +- std
over seeds 0, 1, 2 (models, selectors, augmentations and folds; the train/test split is
fixed):

1. Batch size. Pair retrieval between the left and right halves of the digits
   (1,257 training pairs, 540 held out), an MLP encoder, B in {8, 16, 32, 64}: shuffled,
   OSGD, spectral, BcS and ScB batches. Held-out recall@1 and fit time.
2. SupCon under class imbalance (Kini et al. 2023's (arXiv:2306.07960) set-up): the training set
   keeps digits 0-4
   whole and 1/R of each of 5-9 (at least 2), R in {1, 10, 100}; an MLP on the 64
   pixels; shuffled, fixed, shuffled + binding and fixed + binding batches (Kini et al. 2023
   Alg. 1). Delta_GM of the held-out class means to an orthogonal frame, minority-class
   and balanced nearest-class-centre accuracy, and whether one epoch's batches meet
   Corollary 2.1.
3. SimCLR on the 8x8 images with a small CNN and kornia augmentations: shuffled against
   OSGD, spectral and ScB batches; kNN and linear-probe accuracy.
4. Balance search (Sors et al. 2021, arXiv:2112.11743): BalanceSearchCV from the box centre and from
   an
   off-diagonal point, GridSearchCV and RandomizedSearchCV at the same budget of
   configurations, scored by R-mAP of the digit classes (cross-validated).

    python examples/selector_study.py [--quick | --full] [--out DIR]

The default run takes under 10 minutes on a 2-core CPU and gives the tables of the
user guide's page "Which selector, when"; --quick is a smoke run (seconds, used by the
test suite); --full trains longer with larger budgets, for a GPU.
"""

import argparse
import time
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
from sklearn.model_selection import train_test_split
from skorch.callbacks import Callback

from skcontrast import ContrastiveEmbedder, SupConEmbedder
from skcontrast.datasets import (
    digit_augmentation,
    digit_cnn,
    load_digit_images,
    load_digit_views,
)
from skcontrast.geometry import orthogonal_frame_gap
from skcontrast.losses import SupCon, SymmetricInfoNCE
from skcontrast.metrics import (
    class_centres,
    get_scorer,
    knn_accuracy,
    linear_probe_accuracy,
    nearest_centre,
    recall_at_k,
)
from skcontrast.model_selection import balance_searches, best_levels, search_curves
from skcontrast.selectors import (
    BcSSelector,
    BindingSelector,
    FixedBatchSelector,
    OSGDSelector,
    ScBSelector,
    ShuffledBatchSelector,
    SpectralBatchSelector,
    check_corollary_2_1,
)

MODES = {  # epochs, batch sizes, seeds, SimCLR epochs and batch size, ratios, search
    # budget, folds and batch size; quick, a smoke run of every experiment, table and
    # figure (its numbers mean nothing), also takes the first n digits only and at most
    # time_epochs epochs at equal time (its first fit's one-time costs set the budget)
    "quick": {"epochs": 1, "sizes": (16,), "seeds": (0,), "simclr": 1, "simclr_batch": 32,
              "ratios": (1, 10), "budget": 2, "folds": 2, "search_batch": 32, "n": 128,
              "time_epochs": 2},
    "default": {"epochs": 12, "sizes": (8, 16, 32, 64), "seeds": (0, 1, 2), "simclr": 10,
                "simclr_batch": 128, "ratios": (1, 10, 100), "budget": 9, "folds": 2,
                "search_batch": 64},
    "full": {"epochs": 40, "sizes": (8, 16, 32, 64), "seeds": (0, 1, 2), "simclr": 60,
             "simclr_batch": 128, "ratios": (1, 10, 100), "budget": 16, "folds": 3,
             "search_batch": 64},
}
PAIR_SELECTORS = {
    "shuffled": lambda b: ShuffledBatchSelector(b),
    "OSGD": lambda b: OSGDSelector(b, k=8, q=4),
    "spectral": lambda b: SpectralBatchSelector(b),
    "BcS": lambda b: BcSSelector(b),
    "ScB": lambda b: ScBSelector(b),
}


class TimeBudget(Callback):
    """Stop training before an epoch that would end past ``seconds`` (judged by the mean
    epoch so far): no method gets more time than the budget, beyond its first epoch."""

    def __init__(self, seconds):
        self.seconds = seconds

    def on_train_begin(self, net, **kwargs):
        self.start_ = time.perf_counter()

    def on_epoch_end(self, net, **kwargs):
        elapsed = time.perf_counter() - self.start_
        if elapsed * (1 + 1 / len(net.history)) > self.seconds:
            raise KeyboardInterrupt  # skorch ends the fit cleanly


def timed_fit(est, *args):
    start = time.perf_counter()
    est.fit(*args)
    return est, time.perf_counter() - start


def mean_std(values):
    values = np.asarray(values, dtype=float)
    return f"{values.mean():.3f} ± {values.std():.3f}"


def table(rows, header):
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def batch_size_study(cfg, device):
    """Experiment 1: held-out pair recall@1 against B, at equal epochs and equal time."""
    X, y = load_digit_views()
    X, y = X[:cfg.get("n")], y[:cfg.get("n")]
    train, test = train_test_split(X, test_size=0.3, random_state=0, stratify=y)
    runs = {}  # (selector, B, budget) -> list of (recall, seconds, epochs)
    for b in cfg["sizes"]:
        for seed in cfg["seeds"]:
            budget_s = None
            for name, make in PAIR_SELECTORS.items():
                for budget in ("epochs", "time"):
                    if budget == "time" and name == "shuffled":
                        runs.setdefault((name, b, budget), []).append(
                            runs[(name, b, "epochs")][-1])
                        continue
                    extra = {} if budget == "epochs" else {
                        "max_epochs": cfg.get("time_epochs", 50 * cfg["epochs"]),
                        "callbacks": [TimeBudget(budget_s)]}
                    est = ContrastiveEmbedder(**{
                        "n_components": 16, "hidden_layer_sizes": (128,),
                        "loss": SymmetricInfoNCE(0.1),
                        "max_epochs": cfg["epochs"], "selector": make(b), "random_state": seed,
                        "device": device, **extra})
                    est, seconds = timed_fit(est, train)
                    recall = recall_at_k(*est.transform_pairs(test), k=1)
                    runs.setdefault((name, b, budget), []).append(
                        (recall, seconds, len(est.history_)))
                    if name == "shuffled":
                        budget_s = seconds
    rows = []
    for (name, b, budget), values in runs.items():
        recall, seconds, epochs = np.array(values).T
        rows.append([f"B={b}", name, budget, mean_std(recall), f"{seconds.mean():.1f}",
                     f"{epochs.mean():.0f}"])
    rows.sort(key=lambda r: (int(r[0][2:]), r[2], list(PAIR_SELECTORS).index(r[1])))
    return rows, runs


def imbalanced(y_train, ratio, rng):
    """Indices of a step-imbalanced training set: digits 5-9 keep 1/ratio (at least 2)."""
    keep = []
    for c in np.unique(y_train):
        members = np.flatnonzero(y_train == c)
        count = len(members) if c < 5 else max(2, round(len(members) / ratio))
        keep.append(rng.choice(members, size=count, replace=False))
    return np.sort(np.concatenate(keep))


def supcon_study(cfg, device):
    """Experiment 2: SupCon with and without batch-binding under step imbalance."""
    images, y = load_digit_images()
    images, y = images[:cfg.get("n")], y[:cfg.get("n")]
    flat = images.reshape(len(images), -1)
    train, test, y_train, y_test = train_test_split(flat, y, test_size=0.3, random_state=0,
                                                    stratify=y)
    schemes = {"shuffled": lambda: ShuffledBatchSelector(32),
               "fixed": lambda: FixedBatchSelector(32),
               "shuffled + binding": lambda: BindingSelector(ShuffledBatchSelector(32)),
               "fixed + binding": lambda: BindingSelector(FixedBatchSelector(32))}
    minority = y_test >= 5
    rows = []
    for ratio in cfg["ratios"]:
        for name, make in schemes.items():
            gaps, minor, balanced, corollary = [], [], [], []
            for seed in cfg["seeds"]:
                keep = imbalanced(y_train, ratio, np.random.default_rng(seed))
                est = SupConEmbedder(n_components=16, hidden_layer_sizes=(128,),
                                     max_epochs=2 * cfg["epochs"], selector=make(),
                                     loss=SupCon(0.1), random_state=seed, device=device)
                est.fit(train[keep], y_train[keep])
                H_train, H = est.transform(train[keep]), est.transform(test)
                classes, centres = class_centres(H_train, y_train[keep])
                right = nearest_centre(H, classes, centres) == y_test
                gaps.append(orthogonal_frame_gap(H, y_test))
                minor.append(right[minority].mean())
                balanced.append(np.mean([right[y_test == c].mean() for c in classes]))
                selector = est.net_.selector.set_epoch(0)
                epoch = selector.epoch_batches(np.zeros((len(keep), 1)),
                                               est.net_.sampler_.labels)
                corollary.append(bool(check_corollary_2_1(epoch, y_train[keep])))
            rows.append([f"R={ratio}", name, str(len(keep)), mean_std(gaps), mean_std(minor),
                         mean_std(balanced), f"{sum(corollary)}/{len(corollary)}"])
    return rows


def simclr_study(cfg, device):
    """Experiment 3: SimCLR with a CNN, shuffled against the adaptive selectors."""
    images, y = load_digit_images()
    images, y = images[:cfg.get("n")], y[:cfg.get("n")]
    train, test, y_train, y_test = train_test_split(images, y, test_size=0.3, random_state=0,
                                                    stratify=y)
    b = cfg["simclr_batch"]
    selectors = {"shuffled": lambda: ShuffledBatchSelector(b),
                 "OSGD": lambda: OSGDSelector(b, k=4, q=2),
                 "spectral": lambda: SpectralBatchSelector(b),
                 "ScB": lambda: ScBSelector(b)}
    rows, shuffled_row, budget_s = [], None, None
    for budget in ("epochs", "time"):
        for name, make in selectors.items():
            if budget == "time" and name == "shuffled":  # its own time: the same run
                rows.append(["time", *shuffled_row[1:]])
                continue
            knn, linear, seconds, epochs = [], [], [], []
            for i, seed in enumerate(cfg["seeds"]):
                extra = {} if budget == "epochs" else {
                    "max_epochs": cfg.get("time_epochs", 20 * cfg["simclr"]),
                    "callbacks": [TimeBudget(budget_s[i])]}
                est = ContrastiveEmbedder(**{
                    "module": digit_cnn, "augmentation": digit_augmentation(),
                    "n_components": 32, "loss": SymmetricInfoNCE(0.2), "lr": 3e-3,
                    "max_epochs": cfg["simclr"], "selector": make(), "random_state": seed,
                    "device": device, **extra})
                est, fit_s = timed_fit(est, train)
                H_train, H_test = est.transform(train), est.transform(test)
                knn.append(knn_accuracy(H_train, y_train, H_test, y_test))
                linear.append(linear_probe_accuracy(H_train, y_train, H_test, y_test))
                seconds.append(fit_s)
                epochs.append(len(est.history_))
            rows.append([budget, name, mean_std(knn), mean_std(linear),
                         f"{np.mean(seconds):.1f}", f"{np.mean(epochs):.0f}"])
            if budget == "epochs" and name == "shuffled":
                budget_s, shuffled_row = seconds, rows[-1]
    return rows


def balance_study(cfg, device):
    """Experiment 4: BalanceSearchCV against grid and random search, R-mAP."""
    X, y = load_digit_views()
    X, y = X.reshape(len(X), -1)[:cfg.get("n", 1200)], y[:cfg.get("n", 1200)]
    estimator = ContrastiveEmbedder(n_components=16, hidden_layer_sizes=(64,),
                                    optimizer="sgd", lr=1.0, loss=SymmetricInfoNCE(0.2),
                                    max_epochs=max(2, cfg["epochs"] // 2),
                                    selector=ShuffledBatchSelector(cfg["search_batch"]),
                                    device=device)
    bounds = {"loss__lambda_pos": (1e-3, 1.0), "loss__lambda_ent": (1e-3, 1.0)}
    starts = {"centre start": None,
              "off-diagonal start": {"loss__lambda_pos": 0.3, "loss__lambda_ent": 0.003}}
    searches = balance_searches(estimator, bounds=bounds, budget=cfg["budget"],
                                seeds=cfg["seeds"], starts=starts, scoring=get_scorer("r_map"),
                                cv=cfg["folds"])
    curves = search_curves(searches, X, y)
    levels = best_levels(curves)
    half = max(1, cfg["budget"] // 2)
    rows = []
    for name, c in curves.items():
        auc_half, auc_half_sd = c.auc(half)
        auc, auc_sd = c.auc(cfg["budget"])
        rows.append([name, f"{auc_half:.3f} ± {auc_half_sd:.3f}", f"{auc:.3f} ± {auc_sd:.3f}",
                     mean_std(c.curves[:, cfg["budget"] - 1]),
                     f"{c.runs_to_reach(levels):.1f}"])
    return rows, curves, half


def figures(out, runs, cfg, curves):
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, budget in zip(axes, ("epochs", "time"), strict=True):
        for name in PAIR_SELECTORS:
            means = [np.mean([r[0] for r in runs[(name, b, budget)]]) for b in cfg["sizes"]]
            stds = [np.std([r[0] for r in runs[(name, b, budget)]]) for b in cfg["sizes"]]
            ax.errorbar(cfg["sizes"], means, yerr=stds, marker="o", capsize=3, label=name)
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
        ax.set(xticks=cfg["sizes"], xticklabels=cfg["sizes"], xlabel="batch size B",
               title=f"equal {'epochs' if budget == 'epochs' else 'wall-clock time'}")
    axes[0].set_ylabel("held-out pair recall@1")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "selector_study_batch_size.png", dpi=110)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for name, c in curves.items():
        steps = np.arange(1, c.curves.shape[1] + 1)
        ax.plot(steps, c.curves.mean(0), marker="o", label=name)
        ax.fill_between(steps, c.curves.min(0), c.curves.max(0), alpha=0.15)
    ax.set(xlabel="configurations tried", ylabel="best cross-validated R-mAP so far",
           title="loss-balance search, digit halves")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "selector_study_balance.png", dpi=110)
    plt.close("all")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run (the test suite)")
    parser.add_argument("--full", action="store_true", help="longer training, for a GPU")
    parser.add_argument("--out", default="examples/output")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mode = "quick" if args.quick else "full" if args.full else "default"
    # 1,257 pairs in batches of 8 leave one pair per epoch, which the estimator skips
    # (a different one each epoch) with a warning, once per fit: shown once here
    warnings.filterwarnings("once", message="the selector made")
    cfg = MODES[mode]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    start = time.perf_counter()
    sections = [f"Which selector, when: {mode} run on {device}, seeds {list(cfg['seeds'])}, "
                f"mean ± std"]
    rows, runs = batch_size_study(cfg, device)
    sections.append(f"1. Pair retrieval on digit halves, MLP, {cfg['epochs']} epochs (equal "
                    "epochs) or the time shuffled took (equal time)\n" + table(
                        rows, ["B", "selector", "budget", "test recall@1", "fit s", "epochs"]))
    print(sections[-1], flush=True)
    sections.append(f"2. SupCon under step imbalance, MLP, {2 * cfg['epochs']} epochs, "
                    "B=32 (+ 10 binding examples)\n" + table(
                        supcon_study(cfg, device),
                        ["R", "batches", "n train", "Delta_GM", "minority NCC",
                         "balanced NCC", "Cor. 2.1"]))
    print(sections[-1], flush=True)
    sections.append(f"3. SimCLR on digit images, CNN + kornia, B={cfg['simclr_batch']}, "
                    f"{cfg['simclr']} epochs or shuffled's time\n" + table(
                        simclr_study(cfg, device),
                        ["budget", "selector", "kNN acc.", "linear probe", "fit s",
                         "epochs"]))
    print(sections[-1], flush=True)
    rows, curves, half = balance_study(cfg, device)
    sections.append(f"4. Loss-balance search, budget {cfg['budget']} configurations, "
                    f"{cfg['folds']}-fold R-mAP\n" + table(
                        rows, ["search", f"AUC@{half}", f"AUC@{cfg['budget']}",
                               f"best after {cfg['budget']}", "n-95"]))
    print(sections[-1], flush=True)
    figures(out, runs, cfg, curves)
    text = "\n\n".join(sections) + f"\n\ntotal {time.perf_counter() - start:.0f} s\n"
    (out / "selector_study.txt").write_text(text)
    print(f"total {time.perf_counter() - start:.0f} s; tables in {out / 'selector_study.txt'}")


if __name__ == "__main__":
    main()
