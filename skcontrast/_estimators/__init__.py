"""The scikit-learn estimators (private implementation; import from ``skcontrast``)."""

from ._contrastive import ContrastiveEmbedder
from ._supcon import SupConEmbedder

__all__ = ["ContrastiveEmbedder", "SupConEmbedder"]
