"""skcontrast: contrastive representation learning as a scikit-learn citizen.

Which samples share a mini-batch is a first-class, pluggable choice: batch selectors
(:mod:`skcontrast.selectors`) follow scikit-learn's cross-validator protocol and drive
the training of the estimators.

The estimators and :func:`load` are imported when first used (PEP 562), so that the
``skcontrast`` command answers ``--help`` without loading torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:  # what the lazy names below are, for type checkers and editors
    from . import (
        datasets,
        exceptions,
        geometry,
        losses,
        memory,
        metrics,
        model_selection,
        plotting,
        selectors,
        selftest,
        simulation,
        text,
    )
    from ._estimators import (
        AcceleratorCheckpoint,
        ContrastiveEmbedder,
        LazyAdam,
        SupConEmbedder,
        WarmupCosine,
    )
    from ._estimators._saving import load
    from ._estimators._stream import Stream

_LAZY = {"AcceleratorCheckpoint": "._estimators", "ContrastiveEmbedder": "._estimators",
         "LazyAdam": "._estimators", "SupConEmbedder": "._estimators",
         "WarmupCosine": "._estimators",
         "load": "._estimators._saving", "Stream": "._estimators._stream"}

#: The public subpackages and modules, imported on first use like the names above.
_SUBMODULES = ("datasets", "exceptions", "geometry", "losses", "memory", "metrics",
               "model_selection", "plotting", "selectors", "selftest", "simulation", "text")


__all__ = ["AcceleratorCheckpoint", "ContrastiveEmbedder", "LazyAdam", "Stream",
           "SupConEmbedder", "WarmupCosine", "__version__", "load"]


def __getattr__(name: str) -> Any:
    import importlib

    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module 'skcontrast' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public API only (not the names this module's own code uses)."""
    return sorted([*__all__, *_SUBMODULES])
