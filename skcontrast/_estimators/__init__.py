"""The scikit-learn estimators (private implementation; import from ``skcontrast``)."""

from ._contrastive import ContrastiveEmbedder
from ._distributed import AcceleratorCheckpoint
from ._optim import LazyAdam
from ._schedule import WarmupCosine
from ._supcon import SupConEmbedder

__all__ = ["AcceleratorCheckpoint", "ContrastiveEmbedder", "LazyAdam", "SupConEmbedder",
           "WarmupCosine"]
