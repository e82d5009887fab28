"""The containers ``set_output`` chooses, for the estimators' transform methods that
scikit-learn does not wrap itself (``transform_head``, ``transform_backbone``,
``transform_pairs``, ``transform_view``): a mixin of :class:`~._base.BaseEmbedder`,
written on scikit-learn's public API only (``set_output``, ``get_config``,
``__sklearn_clone__``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn import get_config

#: The containers the estimators' output takes (scikit-learn's ``set_output``).
CONTAINERS = ("default", "pandas", "polars")


class OutputContainers:
    """``set_output`` as scikit-learn's, which also keeps the chosen container where
    the estimators' other transform methods read it (:meth:`_wrap_output`)."""

    if TYPE_CHECKING:  # the estimator's (scikit-learn's)
        def get_feature_names_out(self, input_features: Any = None) -> np.ndarray: ...

    def set_output(self, *, transform: str | None = None) -> Any:
        """Set the container of ``transform``'s output and of the other transform
        methods' (``transform_head``, ``transform_pairs``, ...).

        Parameters
        ----------
        transform : {'default', 'pandas', 'polars'} or None, default=None
            ``'default'``: NumPy arrays; ``'pandas'``/``'polars'``: DataFrames with the
            columns :meth:`get_feature_names_out` names; ``None``: unchanged (at first,
            scikit-learn's global ``transform_output``).

        Returns
        -------
        self
        """
        out = super().set_output(transform=transform)  # type: ignore[misc]
        if transform is not None:
            self._output_container = transform
        return out

    def __sklearn_clone__(self) -> Any:
        clone = super().__sklearn_clone__()  # type: ignore[misc]
        if hasattr(self, "_output_container"):
            clone.set_output(transform=self._output_container)
        return clone

    def _wrap_output(self, embedded: np.ndarray, X: Any, output: str | None = None) -> Any:
        """``embedded`` in the container ``set_output`` chose (or the global
        ``transform_output``), its columns named by :meth:`get_feature_names_out` for
        ``transform``'s own output (``output`` None or ``transform_from``), and
        ``<classname>_<output><i>`` for the other output; a DataFrame keeps the index of
        a pandas ``X``."""
        container = getattr(self, "_output_container", None) or \
            get_config()["transform_output"]
        if container == "default":
            return embedded
        transform_from = getattr(self, "transform_from", None)
        if output is None or output == transform_from:
            names = [str(n) for n in self.get_feature_names_out()]
        else:
            prefix = type(self).__name__.lower()
            names = [f"{prefix}_{output}{i}" for i in range(embedded.shape[1])]
        if container == "pandas":
            import pandas as pd

            index = X.index if isinstance(X, pd.DataFrame | pd.Series) else None
            return pd.DataFrame(embedded, index=index, columns=names, copy=False)
        if container == "polars":
            import polars as pl

            return pl.DataFrame(embedded, schema=names, orient="row")
        raise ValueError(f"set_output(transform={container!r}): the estimators' output "
                         f"takes one of {list(CONTAINERS)}")
