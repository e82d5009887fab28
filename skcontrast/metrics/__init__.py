"""Retrieval metrics and scikit-learn compatible scorers for embeddings.

Metrics take embeddings (NumPy arrays or torch tensors, rows are items) and return
floats. Scorers are plain callables ``scorer(estimator, X, y=None)`` — what
:class:`~sklearn.model_selection.GridSearchCV` accepts for ``scoring`` — because
:func:`sklearn.metrics.make_scorer` can only call ``predict``, not ``transform``.
They follow scikit-learn's sign convention: greater is better, so gaps and distances
are negated.
"""

from ._classifiers import (
    class_centres,
    knn_accuracy,
    leave_one_out_ncc,
    linear_probe_accuracy,
    ncc_accuracy,
    nearest_centre,
)
from ._ranking import (
    REFERENCE_DOC,
    class_retrieval,
    map_at_r,
    precision_at_1,
    r_map,
    r_precision,
    ranking_scores,
)
from ._retrieval import recall_at_k, tie_tolerance
from ._scorers import (
    SCORERS,
    EmbeddingScorer,
    get_scorer,
    is_scorer_name,
    pair_embeddings,
    resolve_scoring,
)

__all__ = [
    "REFERENCE_DOC",
    "SCORERS",
    "EmbeddingScorer",
    "class_centres",
    "class_retrieval",
    "get_scorer",
    "is_scorer_name",
    "knn_accuracy",
    "leave_one_out_ncc",
    "linear_probe_accuracy",
    "map_at_r",
    "ncc_accuracy",
    "nearest_centre",
    "pair_embeddings",
    "precision_at_1",
    "r_map",
    "r_precision",
    "ranking_scores",
    "recall_at_k",
    "resolve_scoring",
    "tie_tolerance",
]
