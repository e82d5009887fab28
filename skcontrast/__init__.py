"""skcontrast: contrastive representation learning as a scikit-learn citizen.

Which samples share a mini-batch is a first-class, pluggable choice: batch selectors
(:mod:`skcontrast.selectors`) follow scikit-learn's cross-validator protocol and drive
the training of the estimators.
"""

from ._estimators import AcceleratorCheckpoint, ContrastiveEmbedder, SupConEmbedder, WarmupCosine
from ._estimators._base import load

__version__ = "0.1.0"

__all__ = ["AcceleratorCheckpoint", "ContrastiveEmbedder", "SupConEmbedder", "WarmupCosine",
           "__version__", "load"]
