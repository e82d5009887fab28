"""Retrieval metrics and scikit-learn compatible scorers for embeddings.

Metrics take embeddings (NumPy arrays or torch tensors, rows are items) and return
floats. Scorers are plain callables ``scorer(estimator, X, y=None)`` — what
:class:`~sklearn.model_selection.GridSearchCV` accepts for ``scoring`` — because
:func:`sklearn.metrics.make_scorer` can only call ``predict``, not ``transform``.
They follow scikit-learn's sign convention: greater is better, so gaps and distances
are negated.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from . import geometry
from ._validation import as_numpy, check_choice, check_int, describe

_BLOCK = 1024  # query rows per block: similarity memory is O(block * n), never O(n^2)


def _rows(x: Any, name: str) -> np.ndarray:
    """Checked float64 rows of ``x``, unit-normalised (zero rows stay zero)."""
    return geometry._unit_rows(geometry._matrix(x, name))


def _pair(U: Any, V: Any) -> tuple[np.ndarray, np.ndarray]:
    U, V = _rows(U, "U"), _rows(V, "V")
    if U.shape != V.shape:
        raise ValueError(f"U and V must have the same shape (row i of V is the match of row i "
                         f"of U); got U.shape={U.shape} and V.shape={V.shape}")
    return U, V


def _matching_ranks(queries: np.ndarray, gallery: np.ndarray) -> np.ndarray:
    """Rank of gallery[i] among all gallery items for query i (0 = first).

    Ties count against the query (pessimistic), so collapsed embeddings score 0, not 1.
    """
    ranks = np.empty(len(queries), dtype=np.int64)
    for start in range(0, len(queries), _BLOCK):
        block = queries[start:start + _BLOCK] @ gallery.T
        rows = np.arange(len(block))
        correct = block[rows, start + rows]
        ranks[start:start + len(block)] = (block >= correct[:, None]).sum(1) - 1
    return ranks


def recall_at_k(U: Any, V: Any, k: int = 1, direction: str = "both") -> float:
    """Pair-retrieval recall@k: how often the true partner is among the ``k`` nearest.

    Query ``u_i`` searches the gallery ``V`` by cosine similarity and succeeds if
    ``v_i`` ranks in the top ``k`` (and the other way round for ``v_i``). Ties are
    counted against the query.

    Parameters
    ----------
    U, V : array-like of shape (n, d)
        Embeddings of the two views; row ``i`` of ``V`` is the match of row ``i`` of ``U``.
    k : int, default=1
    direction : {'both', 'u2v', 'v2u'}, default='both'
        ``'both'`` averages the two directions (image-to-text and text-to-image).

    Returns
    -------
    float in [0, 1]

    Examples
    --------
    >>> import numpy as np
    >>> from skcontrast.metrics import recall_at_k
    >>> X = np.random.default_rng(0).normal(size=(50, 8))
    >>> recall_at_k(X, X)
    1.0
    """
    U, V = _pair(U, V)
    k = check_int(k, "k", minimum=1)
    check_choice(direction, "direction", ("both", "u2v", "v2u"))
    u2v = float(np.mean(_matching_ranks(U, V) < k)) if direction != "v2u" else None
    v2u = float(np.mean(_matching_ranks(V, U) < k)) if direction != "u2v" else None
    if direction == "u2v":
        return u2v
    if direction == "v2u":
        return v2u
    return 0.5 * (u2v + v2u)


def _ranked_relevance(H: np.ndarray, codes: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """For each query, the relevance (same class) of the other items in ranked order."""
    n = len(H)
    relevant_counts = np.bincount(codes)[codes] - 1
    ranked = []
    for start in range(0, n, _BLOCK):
        sims = H[start:start + _BLOCK] @ H.T
        for row, i in enumerate(range(start, min(start + _BLOCK, n))):
            others = np.delete(np.arange(n), i)
            relevant = codes[others] == codes[i]
            # by decreasing similarity; among ties the irrelevant items first (pessimistic)
            order = np.lexsort((relevant, -sims[row, others]))
            ranked.append(relevant[order])
    return ranked, relevant_counts


def _precision_sums(H: Any, y: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per query with R >= 1: (sum_{k<=R} P(k) rel(k), R, #relevant in the top R)."""
    H, _, codes, _, _ = _class_sums(H, y)
    ranked, counts = _ranked_relevance(H, codes)
    sums, hits = np.zeros(len(H)), np.zeros(len(H))
    for i, relevant in enumerate(ranked):
        r = counts[i]
        top = relevant[:r]
        precision = np.cumsum(top) / np.arange(1, r + 1)
        sums[i] = (precision * top).sum()
        hits[i] = top.sum()
    keep = counts >= 1
    if not keep.any():
        raise ValueError("no query has another item of its class; mAP@R is undefined")
    return sums[keep], counts[keep].astype(float), hits[keep]


def map_at_r(H: Any, y: Any) -> float:
    """mAP@R (Musgrave et al., 2020), as defined in seed 001 supplement C, Eq. 15.

    Each item queries all the others by cosine similarity; with ``R`` the number of
    other items of its class, ``AP@R = (1/R) sum_{k<=R} P(k) rel(k)``. Queries whose
    class has no other item are left out.

    Parameters
    ----------
    H : array-like of shape (n, d)
    y : array-like of shape (n,)

    Returns
    -------
    float in [0, 1]
    """
    sums, r, _ = _precision_sums(H, y)
    return float(np.mean(sums / r))


def r_map(H: Any, y: Any) -> float:
    """R-mAP of seed 001 (supplement C, Eq. 13-14): average precision within the top R.

    Like :func:`map_at_r`, but the average is over the relevant items that made it into
    the top ``R`` (``AP(x_q, D[1:R])``), not over all ``R``; a query with none scores 0.

    Parameters
    ----------
    H : array-like of shape (n, d)
    y : array-like of shape (n,)

    Returns
    -------
    float in [0, 1]
    """
    sums, _, hits = _precision_sums(H, y)
    return float(np.mean(np.divide(sums, hits, out=np.zeros_like(sums), where=hits > 0)))


def _class_sums(H: Any, y: Any) -> tuple[np.ndarray, ...]:
    """Unit rows ``H``, ``(classes, codes)`` of ``y``, and each class's row sum and size."""
    H = _rows(H, "H")
    return (H, *geometry._class_sums(H, y))


def class_centres(H: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    """Classes and the mean of the unit-normalised embeddings of each: ``(classes, centres)``."""
    _, classes, _, sums, counts = _class_sums(H, y)
    return classes, sums / counts[:, None]


def nearest_centre(H: Any, classes: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """Label of the nearest class centre (Euclidean) of each unit-normalised row of ``H``."""
    H = _rows(H, "H")
    scores = 2 * H @ centres.T - (centres * centres).sum(1)[None, :]
    return classes[scores.argmax(1)]


def ncc_accuracy(H_train: Any, y_train: Any, H_test: Any, y_test: Any) -> float:
    """Nearest-class-centre accuracy: classify test rows by the closest training class mean.

    Embeddings are unit-normalised; centres are the class means of the training rows
    (the classifier that neural collapse makes optimal, seed 003).

    Returns
    -------
    float in [0, 1]
    """
    classes, centres = class_centres(H_train, y_train)
    y_test = as_numpy(y_test, "y_test")
    predicted = nearest_centre(H_test, classes, centres)
    if len(predicted) != len(y_test):
        raise ValueError(f"y_test has {len(y_test)} labels but H_test has {len(predicted)} rows")
    return float(np.mean(predicted == y_test))


def _probe_data(H_train: Any, y_train: Any, H_test: Any, y_test: Any) -> tuple[np.ndarray, ...]:
    H_train = geometry._matrix(H_train, "H_train")
    H_test = geometry._matrix(H_test, "H_test")
    y_train, y_test = as_numpy(y_train, "y_train"), as_numpy(y_test, "y_test")
    for H, y, name in ((H_train, y_train, "train"), (H_test, y_test, "test")):
        if len(H) != len(y):
            raise ValueError(f"y_{name} has {len(y)} labels but H_{name} has {len(H)} rows")
    if H_train.shape[1] != H_test.shape[1]:
        raise ValueError(f"H_train and H_test must have the same width; got "
                         f"{H_train.shape[1]} and {H_test.shape[1]}")
    return H_train, y_train, H_test, y_test


def knn_accuracy(H_train: Any, y_train: Any, H_test: Any, y_test: Any, k: int = 5) -> float:
    """Accuracy of a k-nearest-neighbour classifier (Euclidean) fitted on the training rows.

    The usual evaluation of a self-supervised embedding (e.g. SimCLR, Chen et al. 2020)
    alongside :func:`linear_probe_accuracy`; rows are used as given, so raw features and
    PCA scores can be compared with embeddings.

    Returns
    -------
    float in [0, 1]
    """
    from sklearn.neighbors import KNeighborsClassifier

    H_train, y_train, H_test, y_test = _probe_data(H_train, y_train, H_test, y_test)
    k = check_int(k, "k", minimum=1, maximum=len(H_train))
    return float(KNeighborsClassifier(k).fit(H_train, y_train).score(H_test, y_test))


def linear_probe_accuracy(H_train: Any, y_train: Any, H_test: Any, y_test: Any) -> float:
    """Accuracy of a linear classifier trained on frozen features (the *linear probe*).

    Standardised features, multinomial logistic regression (scikit-learn's defaults,
    ``C=1``), fitted on the training rows and scored on the test rows.

    Returns
    -------
    float in [0, 1]
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    H_train, y_train, H_test, y_test = _probe_data(H_train, y_train, H_test, y_test)
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    return float(probe.fit(H_train, y_train).score(H_test, y_test))


def leave_one_out_ncc(H: Any, y: Any) -> float:
    """NCC accuracy on one labelled set, each row scored against centres without itself."""
    H, _, codes, sums, counts = _class_sums(H, y)
    centres = sums / counts[:, None]
    scores = 2 * H @ centres.T - (centres * centres).sum(1)[None, :]
    rows = np.arange(len(H))
    own = np.maximum(counts[codes] - 1, 1)
    own_centre = (sums[codes] - H) / own[:, None]
    own_score = 2 * (H * own_centre).sum(1) - (own_centre * own_centre).sum(1)
    scores[rows, codes] = np.where(counts[codes] > 1, own_score, -np.inf)
    return float(np.mean(scores.argmax(1) == codes))


# --------------------------------------------------------------------------------------
# Scorers
# --------------------------------------------------------------------------------------

def _final_step(estimator: Any, X: Any) -> tuple[Any, Any]:
    """Walk through (nested) pipelines: the last estimator and X transformed up to it."""
    from sklearn.pipeline import Pipeline

    while isinstance(estimator, Pipeline):
        if len(estimator) > 1:
            X = estimator[:-1].transform(X)
        estimator = estimator[-1]
    return estimator, X


def pair_embeddings(estimator: Any, X: Any) -> tuple[np.ndarray, np.ndarray]:
    """Embeddings ``(U, V)`` of both views of paired ``X`` from a fitted estimator.

    Works for estimators with a ``transform_pairs`` method (``ContrastiveEmbedder``)
    and pipelines ending in one.
    """
    final, Xt = _final_step(estimator, X)
    if not hasattr(final, "transform_pairs"):
        raise TypeError(f"this scorer needs paired embeddings: the estimator must have a "
                        f"transform_pairs method (e.g. ContrastiveEmbedder); got "
                        f"{type(final).__name__}")
    U, V = final.transform_pairs(Xt)
    return np.asarray(U), np.asarray(V)


def _needs_y(name: str, y: Any) -> None:
    if y is None:
        raise ValueError(f"the {name!r} scorer needs labels y")


class EmbeddingScorer:
    """A scorer ``scorer(estimator, X, y=None) -> float`` (greater is better).

    Parameters
    ----------
    name : str
    metric : callable
        ``metric(estimator, X, y) -> float`` in the metric's own sign.
    greater_is_better : bool
        ``False`` negates the metric so that scikit-learn can maximise it.
    """

    def __init__(self, name: str, metric: Callable[[Any, Any, Any], float],
                 greater_is_better: bool = True) -> None:
        self.name = name
        self.metric = metric
        self.greater_is_better = greater_is_better

    def __call__(self, estimator: Any, X: Any, y: Any = None) -> float:
        value = float(self.metric(estimator, X, y))
        return value if self.greater_is_better else -value

    def __repr__(self) -> str:
        sign = "" if self.greater_is_better else ", negated"
        return f"EmbeddingScorer({self.name!r}{sign})"


def _recall(k: int) -> Callable[[Any, Any, Any], float]:
    def metric(estimator: Any, X: Any, y: Any) -> float:
        return recall_at_k(*pair_embeddings(estimator, X), k=k)

    return metric


def _retrieval(fn: Callable[[Any, Any], float], name: str) -> Callable[[Any, Any, Any], float]:
    def metric(estimator: Any, X: Any, y: Any) -> float:
        final, _ = _final_step(estimator, X)
        if y is None and hasattr(final, "transform_pairs"):
            U, V = pair_embeddings(estimator, X)
            ids = np.arange(len(U))
            return fn(np.vstack([U, V]), np.concatenate([ids, ids]))
        _needs_y(name, y)
        return fn(estimator.transform(X), y)

    return metric


def _ncc(estimator: Any, X: Any, y: Any) -> float:
    _needs_y("ncc_accuracy", y)
    final, _ = _final_step(estimator, X)
    H = estimator.transform(X)
    if hasattr(final, "class_centres_"):
        predicted = nearest_centre(H, final.classes_, final.class_centres_)
        return float(np.mean(predicted == as_numpy(y, "y")))
    return leave_one_out_ncc(H, y)


def _of_gap(estimator: Any, X: Any, y: Any) -> float:
    _needs_y("orthogonal_frame_gap", y)
    return geometry.orthogonal_frame_gap(estimator.transform(X), y)


SCORERS: dict[str, EmbeddingScorer] = {
    "recall@1": EmbeddingScorer("recall@1", _recall(1)),
    "recall@5": EmbeddingScorer("recall@5", _recall(5)),
    "etf_gap": EmbeddingScorer(
        "etf_gap", lambda e, X, y: geometry.etf_gap(*pair_embeddings(e, X)), False),
    "alignment": EmbeddingScorer(
        "alignment", lambda e, X, y: geometry.alignment(*pair_embeddings(e, X)), False),
    "uniformity": EmbeddingScorer(
        "uniformity", lambda e, X, y: geometry.uniformity(e.transform(X)), False),
    "orthogonal_frame_gap": EmbeddingScorer("orthogonal_frame_gap", _of_gap, False),
    "ncc_accuracy": EmbeddingScorer("ncc_accuracy", _ncc),
    "map@r": EmbeddingScorer("map@r", _retrieval(map_at_r, "map@r")),
    "r_map": EmbeddingScorer("r_map", _retrieval(r_map, "r_map")),
}


def get_scorer(name: str | Callable) -> Callable[[Any, Any, Any], float]:
    """A scorer by name, for ``GridSearchCV(scoring=...)`` (greater is better).

    Parameters
    ----------
    name : str or callable
        ``'recall@1'``, ``'recall@5'`` (any ``'recall@K'``), ``'etf_gap'``,
        ``'alignment'``, ``'uniformity'``, ``'orthogonal_frame_gap'``,
        ``'ncc_accuracy'``, ``'map@r'`` or ``'r_map'``. Gaps, alignment and uniformity
        are negated. A callable is returned unchanged.

    Returns
    -------
    callable ``scorer(estimator, X, y=None) -> float``

    Examples
    --------
    >>> from skcontrast.metrics import get_scorer
    >>> get_scorer("etf_gap")
    EmbeddingScorer('etf_gap', negated)
    """
    if callable(name):
        return name
    if isinstance(name, str):
        match = re.fullmatch(r"recall@(\d+)", name)
        if match and name not in SCORERS:
            k = int(match.group(1))
            return EmbeddingScorer(name, _recall(k))
        if name in SCORERS:
            return SCORERS[name]
    options = ", ".join(repr(s) for s in SCORERS)
    raise ValueError(f"unknown scorer {describe(name)}; expected one of {options} "
                     f"(or 'recall@K')")
