"""skcontrast: contrastive representation learning as a scikit-learn citizen.

Which samples share a mini-batch is a first-class, pluggable choice: batch selectors
(:mod:`skcontrast.selectors`) follow scikit-learn's cross-validator protocol and drive
the training of the estimators.

The estimators and :func:`load` are imported when first used (PEP 562), so that the
``skcontrast`` command answers ``--help`` without loading torch.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {"AcceleratorCheckpoint": "._estimators", "ContrastiveEmbedder": "._estimators",
         "SupConEmbedder": "._estimators", "WarmupCosine": "._estimators",
         "load": "._estimators._base"}

__all__ = ["AcceleratorCheckpoint", "ContrastiveEmbedder", "SupConEmbedder", "WarmupCosine",
           "__version__", "load"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'skcontrast' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
