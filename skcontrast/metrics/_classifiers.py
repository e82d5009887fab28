"""Accuracy of classifiers on frozen embeddings: nearest class centre (NCC), k nearest
neighbours and the linear probe, and the class centres themselves."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import check_int, check_labels, check_matrix, class_sums
from ._retrieval import _rows


def _class_sums(H: Any, y: Any) -> tuple[np.ndarray, ...]:
    """Unit rows ``H``, ``(classes, codes)`` of ``y``, and each class's row sum and size."""
    H = _rows(H, "H")
    return (H, *class_sums(H, y))


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
    (the classifier that neural collapse makes optimal, Kini et al. 2023, arXiv:2306.07960).

    Returns
    -------
    float in [0, 1]
    """
    classes, centres = class_centres(H_train, y_train)
    y_test = check_labels(y_test, "y_test", like=classes)
    predicted = nearest_centre(H_test, classes, centres)
    if len(predicted) != len(y_test):
        raise ValueError(f"y_test has {len(y_test)} labels but H_test has {len(predicted)} rows")
    return float(np.mean(predicted == y_test))


def _probe_data(H_train: Any, y_train: Any, H_test: Any, y_test: Any) -> tuple[np.ndarray, ...]:
    H_train = check_matrix(H_train, "H_train")
    H_test = check_matrix(H_test, "H_test")
    y_train = check_labels(y_train, "y_train")
    y_test = check_labels(y_test, "y_test", like=y_train)
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
