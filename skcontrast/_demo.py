"""``skcontrast demo``: batch selectors compared on split-view digits."""

from __future__ import annotations

import copy
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import geometry, metrics
from ._estimators import ContrastiveEmbedder, SupConEmbedder
from .datasets import (
    SAME_SCRIPT_LANGUAGES,
    load_digit_images,
    load_digit_views,
)
from .selectors import (
    BindingSelector,
    FixedBatchSelector,
    OSGDSelector,
    ScBSelector,
    ShuffledBatchSelector,
    SpectralBatchSelector,
)

BATCH = 64
COLUMNS = ("method", "R@1 u->v", "R@1 v->u", "alignment", "uniformity", "eff. rank",
           "NCC acc.", "Delta_GM", "steps")
IMAGE_COLUMNS = ("representation", "dim", "kNN acc.", "linear probe")
TEXT_COLUMNS = ("pairs", "search", "R@1", "nDCG@10")
#: the times, which depend on the machine, apart from the results, which do not
TIME_COLUMNS = ("method", "fit s", "select s")
PCA_DIM = 32
QUICK_IMAGE_EPOCHS = 8


def _format_table(rows: list[dict], columns: tuple[str, ...]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, str):
            return value
        if isinstance(value, int | np.integer):
            return str(value)
        return "—" if value is None or np.isnan(value) else f"{value:.3f}"

    widths = [max([len(c), 9] + [len(cell(r[c])) for r in rows]) for c in columns]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(cell(row[c]).rjust(w) for c, w in zip(columns, widths,
                                                                     strict=True)))
    return "\n".join(lines)


@dataclass
class DemoResult:
    """Rows of the demo table, the fitted estimators and the figures written."""

    rows: list[dict] = field(default_factory=list)
    estimators: dict[str, Any] = field(default_factory=dict)
    figures: list[str] = field(default_factory=list)
    baseline: float = float("nan")
    image_rows: list[dict] = field(default_factory=list)
    text_rows: list[dict] = field(default_factory=list)
    text_searches: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def table(self) -> str:
        """The selector comparison on split-view digits."""
        return _format_table(self.rows, COLUMNS)

    def image_table(self) -> str:
        """Single images in, against raw pixels, PCA and the untrained default."""
        return _format_table(self.image_rows, IMAGE_COLUMNS) if self.image_rows else ""

    def summary(self) -> str:
        """Everything the demo measures but its times: what it prints and writes to
        ``table.txt``, the same on every run of a machine with the same libraries
        (README.md and the quick start show it)."""
        text = (f"{self.table()}\n\nCCA baseline (sklearn.cross_decomposition, 16 "
                f"components): test recall@1 {self.baseline:.3f}\n")
        if self.image_rows:
            text += ("\nImages in: the digit images (test split), kNN and linear-probe "
                     f"accuracy\n{self.image_table()}\n")
        if self.text_rows:
            same, other = (_languages(self.text_searches[key][1:])
                           for key in ("same script", "other scripts"))
            text += ("\n" + textwrap.fill(
                f"Text: English emoji names searching the names of held-out emoji in {same} "
                f"(same script) and in {other} (other scripts); strings in, mean over the "
                "languages", 90) + "\n" + _format_table(self.text_rows, TEXT_COLUMNS) + "\n")
        return text

    def timing(self) -> str:
        """Seconds of every fit and of its batch selection, on this machine."""
        rows = [*self.rows, *({"method": r["representation"], "fit s": r["fit s"],
                               "select s": None} for r in self.image_rows
                              if r["fit s"] is not None),
                *({"method": f"{r['search']} ({r['pairs']})", "fit s": r["fit s"],
                   "select s": None}
                  for r in self.text_rows if r["fit s"] is not None)]
        return _format_table(rows, TIME_COLUMNS)


def _split(seed: int) -> tuple[np.ndarray, ...]:
    from sklearn.model_selection import train_test_split

    X, y = load_digit_views()
    return train_test_split(X, y, test_size=0.3, random_state=seed, stratify=y)


def _contrastive_row(name: str, est: ContrastiveEmbedder, X_test: np.ndarray,
                     fit_seconds: float) -> dict:
    U, V = est.transform_pairs(X_test)
    return {"method": name,
            "R@1 u->v": metrics.recall_at_k(U, V, direction="u2v"),
            "R@1 v->u": metrics.recall_at_k(U, V, direction="v2u"),
            "alignment": geometry.alignment(U, V),
            "uniformity": geometry.uniformity(np.vstack([U, V])),
            "eff. rank": geometry.effective_rank(U),
            "NCC acc.": None, "Delta_GM": None, "steps": _steps(est), "fit s": fit_seconds,
            "select s": float(sum(est.history_[:, "select_time"]))}


def _steps(est: Any) -> int:
    """Optimizer steps taken (OSGD keeps q of every k batches, so it takes fewer)."""
    return int(sum(est.history_[:, "n_batches"]))


def _supcon_row(name: str, est: SupConEmbedder, X_test: np.ndarray, y_test: np.ndarray,
                fit_seconds: float) -> dict:
    H = est.transform(X_test)
    return {"method": name, "R@1 u->v": None, "R@1 v->u": None, "alignment": None,
            "uniformity": geometry.uniformity(H), "eff. rank": geometry.effective_rank(H),
            "NCC acc.": est.score(X_test, y_test),
            "Delta_GM": geometry.orthogonal_frame_gap(H, y_test), "steps": _steps(est),
            "fit s": fit_seconds, "select s": float(sum(est.history_[:, "select_time"]))}


def run_demo(out: str | Path = "skcontrast-demo", *, quick: bool = False, seed: int = 0,
             report: Any = print) -> DemoResult:
    """Train every selector on split-view digits and write the table and figures.

    Parameters
    ----------
    out : path, default='skcontrast-demo'
        Folder for the figures (and ``table.txt``).
    quick : bool, default=False
        A small budget, for CI: fewer epochs, and the text search over one language of
        English's script (not seven) and one of another (not two).
    seed : int, default=0
        Train/test split, network initialisation and selectors.
    report : callable, default=print
        Where progress lines go.

    Returns
    -------
    DemoResult
    """
    from sklearn.cross_decomposition import CCA

    epochs = 8 if quick else 40
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    X_train, X_test, y_train, y_test = _split(seed)
    report(f"split-view digits (left / right image halves): {len(X_train)} train pairs, "
           f"{len(X_test)} test pairs, 32 pixels per view; {epochs} epochs, batch {BATCH}")
    result = DemoResult()
    cca = CCA(n_components=16, max_iter=1000).fit(X_train[:, 0], X_train[:, 1])
    result.baseline = metrics.recall_at_k(*cca.transform(X_test[:, 0], X_test[:, 1]))
    # the default losses, SymmetricInfoNCE and SupCon, at temperature 0.1
    common: dict[str, Any] = {"n_components": 16, "hidden_layer_sizes": (128,),
                              "max_epochs": epochs, "random_state": seed, "device": "cpu"}
    contrastive = {
        "shuffled": ShuffledBatchSelector(BATCH),
        "fixed": FixedBatchSelector(BATCH),
        "OSGD (k=8, q=4)": OSGDSelector(BATCH, k=8, q=4),
        "spectral": SpectralBatchSelector(BATCH),
        "ScB": ScBSelector(BATCH),
    }
    supervised = {
        "SupCon, shuffled": ShuffledBatchSelector(BATCH),
        "SupCon, fixed + binding": BindingSelector(FixedBatchSelector(BATCH)),
    }
    total = len(contrastive) + len(supervised) + 2  # and SimCLR, and text
    for i, (name, selector) in enumerate(contrastive.items(), start=1):
        report(f"[{i}/{total}] ContrastiveEmbedder, {name} batches ...")
        start = time.perf_counter()
        est = ContrastiveEmbedder(selector=selector, **common).fit(X_train)
        row = _contrastive_row(name, est, X_test, time.perf_counter() - start)
        report(f"      test R@1 {0.5 * (row['R@1 u->v'] + row['R@1 v->u']):.3f} "
               f"in {row['fit s']:.1f} s")
        result.rows.append(row)
        result.estimators[name] = est
    flat_train = X_train.reshape(len(X_train), -1)
    flat_test = X_test.reshape(len(X_test), -1)
    for i, (name, selector) in enumerate(supervised.items(), start=len(contrastive) + 1):
        report(f"[{i}/{total}] SupConEmbedder, {name.split(', ')[1]} batches ...")
        start = time.perf_counter()
        est = SupConEmbedder(selector=selector, **common).fit(flat_train, y_train)
        row = _supcon_row(name, est, flat_test, y_test, time.perf_counter() - start)
        report(f"      test NCC accuracy {row['NCC acc.']:.3f} in {row['fit s']:.1f} s")
        result.rows.append(row)
        result.estimators[name] = est
    report(f"[{total - 1}/{total}] Images: ContrastiveEmbedder on the digit images, "
           "its default image recipe ...")
    result.image_rows = image_demo(QUICK_IMAGE_EPOCHS if quick else None, seed, report)
    report(f"[{total}/{total}] Text: ContrastiveEmbedder on emoji names in several languages, "
           "strings in ...")
    try:
        result.text_searches = QUICK_TEXT_SEARCHES if quick else TEXT_SEARCHES
        result.text_rows = text_demo(1 if quick else 5, seed, report, result.text_searches)
    except ImportError as exc:
        report(f"      skipped: {exc}")
    result.figures = _figures(result, X_train, X_test, y_test, out)
    (out / "table.txt").write_text(result.summary())
    return result


def image_demo(epochs: int | None, seed: int = 0, report: Any = print) -> list[dict]:
    """Single images in: ``ContrastiveEmbedder().fit(images)`` on the 8x8 digit images
    with its default recipe (:class:`~skcontrast.images.ImageEncoder`, a pixel prior
    beside a small CNN, trained on :class:`~skcontrast.images.ImageAugmentation`; torch
    alone), scored by kNN and a linear probe against raw pixels, PCA and the untrained
    default's pixel prior (train/test split of the demo). ``epochs=None`` keeps the
    estimator's default."""
    from sklearn.decomposition import PCA
    from sklearn.model_selection import train_test_split

    images, y = load_digit_images()
    train, test, y_train, y_test = train_test_split(images, y, test_size=0.3,
                                                    random_state=seed, stratify=y)
    flat_train, flat_test = train.reshape(len(train), -1), test.reshape(len(test), -1)
    pca = PCA(PCA_DIM, random_state=seed).fit(flat_train)
    est = ContrastiveEmbedder(random_state=seed)
    if epochs is not None:
        est.set_params(max_epochs=epochs)
    start = time.perf_counter()
    est.fit(train)
    seconds = time.perf_counter() - start
    prior = est.net_.module_.encoders[0].prior  # the fitted pixel prior alone

    def untrained(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return prior(torch.as_tensor(x)).numpy()

    rows = []
    for name, H_train, H_test, fit_seconds in (
            ("raw pixels", flat_train, flat_test, None),
            (f"PCA ({PCA_DIM})", pca.transform(flat_train), pca.transform(flat_test), None),
            ("untrained default (pixel prior)", untrained(train), untrained(test), None),
            (f"ContrastiveEmbedder(), {est.max_epochs} epochs", est.transform(train),
             est.transform(test), seconds)):
        rows.append({"representation": name, "dim": H_train.shape[1],
                     "kNN acc.": metrics.knn_accuracy(H_train, y_train, H_test, y_test),
                     "linear probe": metrics.linear_probe_accuracy(H_train, y_train, H_test,
                                                                   y_test),
                     "fit s": fit_seconds})
    report(f"      test kNN accuracy {rows[-1]['kNN acc.']:.3f} (raw pixels "
           f"{rows[0]['kNN acc.']:.3f}) in {seconds:.1f} s")
    return rows


#: the demo's two text searches: English names against names in the same script, and
#: in other scripts (Cyrillic, Japanese)
TEXT_SEARCHES = {"same script": SAME_SCRIPT_LANGUAGES, "other scripts": ("en", "ru", "ja")}
#: the quick demo's (CI's): one language of each kind (the same steps on a third of the
#: names: 9 s, where three of the same script and two others took 19 s)
QUICK_TEXT_SEARCHES: dict[str, tuple[str, ...]] = {"same script": ("en", "es"),
                                                 "other scripts": ("en", "ru")}
LANGUAGE_NAMES = {"es": "Spanish", "pt": "Portuguese", "it": "Italian", "fr": "French",
                  "de": "German", "id": "Indonesian", "tr": "Turkish", "ru": "Russian",
                  "ja": "Japanese"}


def _languages(codes: tuple[str, ...]) -> str:
    names = [LANGUAGE_NAMES.get(code, code) for code in codes]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def text_demo(epochs: int, seed: int = 0, report: Any = print,
              searches: dict[str, tuple[str, ...]] = TEXT_SEARCHES) -> list[dict]:
    """Search of held-out emoji names (:func:`~skcontrast.datasets.load_emoji_names`),
    English queries against each other language's names, for languages in the same
    script as English and in other scripts: TF-IDF on character n-grams (no training),
    a ContrastiveEmbedder fitted on the training emoji's string pairs (its defaults),
    and the two fused (:class:`~skcontrast.text.HybridRetriever`, its weight chosen on
    emoji held out from the model's training), for each search of ``searches`` (its
    name: English, then the other languages). Needs the ``emoji`` package."""
    from .datasets import load_emoji_names
    from .text import HybridRetriever

    rows = []
    for pairs_name, languages in searches.items():
        data = load_emoji_names(list(languages), random_state=seed)
        test = data.test_emoji
        start = time.perf_counter()
        hybrid = HybridRetriever(ContrastiveEmbedder(max_epochs=epochs, random_state=seed),
                                 random_state=seed).fit(data.pairs_train, data.groups_train)
        seconds = time.perf_counter() - start
        # TF-IDF alone and the model alone are the fitted hybrid at weight 1 and 0: its
        # vocabulary was fitted on all the training texts, as HybridRetriever(weight=1.0)
        # would fit it (copies: index() keeps the documents on the retriever)
        methods = (("TF-IDF, character 2-4-grams", copy.copy(hybrid).set_params(weight=1.0),
                    None),
                   (f"ContrastiveEmbedder, {epochs} epoch{'s' * (epochs != 1)}",
                    copy.copy(hybrid).set_params(weight=0.0), seconds),
                   (f"hybrid, weight {hybrid.weight_:.1f} (auto)", hybrid, None))
        for name, search, fit_seconds in methods:
            scores = [metrics.ranking_scores(
                search.index(list(data.names[lang][test])).search(
                    list(data.names["en"][test]), k=10)[1],
                np.arange(len(test)), np.arange(len(test)), k=10) for lang in languages[1:]]
            rows.append({"pairs": pairs_name, "search": name,
                         "R@1": float(np.mean([s["recall@1"] for s in scores])),
                         "nDCG@10": float(np.mean([s["ndcg@10"] for s in scores])),
                         "fit s": fit_seconds})
        report(f"      text, {pairs_name}: R@1 {rows[-2]['R@1']:.3f} (TF-IDF "
               f"{rows[-3]['R@1']:.3f}, hybrid {rows[-1]['R@1']:.3f}) in {seconds:.1f} s")
    return rows


def _figures(result: DemoResult, X_train: np.ndarray, X_test: np.ndarray, y_test: np.ndarray,
             out: Path) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from .plotting import plot_batch_losses, plot_gram
    except ImportError:
        return []
    paths = []
    order = np.argsort(y_test[:60], kind="stable")
    shown = ["shuffled", "spectral"]
    fig, axes = plt.subplots(1, len(shown), figsize=(5.2 * len(shown), 4.4))
    for ax, name in zip(axes, shown, strict=True):
        U, V = result.estimators[name].transform_pairs(X_test[:60][order])
        plot_gram(U, V, ax=ax, title=f"{name}: test pairs (sorted by digit)")
    fig.tight_layout()
    paths.append(out / "gram_test_pairs.png")
    fig.savefig(paths[-1], dpi=110)
    reference = result.estimators["shuffled"]
    U, V = reference.transform_pairs(X_train)
    embedded = np.stack([U, V], axis=1)
    fig, ax = plt.subplots(figsize=(7, 4))
    # each selector its own seed: the first epoch of a fixed partition is a shuffled
    # partition too, and with one seed the two would draw the very same batches
    plot_batch_losses(embedded, {
        "shuffled": ShuffledBatchSelector(BATCH, random_state=0),
        "fixed": FixedBatchSelector(BATCH, random_state=1),
        "OSGD (k=8, q=4)": OSGDSelector(BATCH, k=8, q=4, random_state=2),
        "ScB": ScBSelector(BATCH, random_state=3),
        "spectral": SpectralBatchSelector(BATCH, random_state=4)}, ax=ax)
    ax.set_title("loss of each selector's batches of the training pairs, all embedded by\n"
                 "the model trained with shuffled batches (Cho et al. 2023, arXiv:2307.05906, "
                 "Fig. 3)", fontsize=10)
    fig.tight_layout()
    paths.append(out / "batch_losses.png")
    fig.savefig(paths[-1], dpi=110)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, est in result.estimators.items():
        ax = axes[1] if name.startswith("SupCon") else axes[0]
        losses = est.history_[:, "train_loss"]
        ax.plot(np.arange(1, len(losses) + 1), losses, label=name)
    axes[0].set(title="ContrastiveEmbedder (symmetric InfoNCE)", xlabel="epoch",
                ylabel="mean training loss")
    axes[1].set(title="SupConEmbedder", xlabel="epoch", ylabel="mean training loss")
    for ax in axes:
        ax.legend(fontsize=8)
    fig.text(0.5, 0.01, "Each curve is the mean loss of a method's own batches: harder batches "
             "(OSGD, spectral, ScB) have a higher loss by design, so a higher curve does not "
             "mean worse training. Compare them by the held-out scores of the table.",
             ha="center", va="bottom", fontsize=8, wrap=True)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    paths.append(out / "learning_curves.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close("all")
    return [str(p) for p in paths]
