"""What an input form is (:class:`InputForm`, see :mod:`._forms`), and how messages name
any input."""

from __future__ import annotations

from typing import Any, ClassVar

from torch.utils.data import Dataset

from ..._tables import is_table, table_columns
from ..._validation import describe, is_view_dict
from .._data import InputSpec, View, ViewData

#: what a fit records about its input besides the spec (``None`` where it has none)
NO_FEATURES: dict[str, Any] = {"n_features_in_": None, "feature_names_in_": None,
                               "tokenizer_": None}


class InputForm:
    """One input form (see :mod:`._forms`); subclasses implement its readers."""

    #: the ``InputSpec.form`` its ``fit`` makes (a table makes another form's)
    name: ClassVar[str]
    #: a container of another form's data (a table): its ``read`` takes later input
    #: whatever form its fit made; other forms' later input is read by the fit's form
    container: ClassVar[bool] = False

    def detect(self, X: Any) -> bool:
        raise NotImplementedError

    def fit(self, estimator: Any, X: Any, *, single: bool, labelled: bool,
            view_split: Any) -> tuple[ViewData, InputSpec, dict]:
        raise NotImplementedError

    def read(self, estimator: Any, X: Any, spec: InputSpec) -> ViewData:
        raise NotImplementedError

    def read_view(self, X: Any, view: View, name: str, tokenizer: Any) -> ViewData:
        raise NotImplementedError

    def view_form(self, view: View) -> InputForm:
        """The form that reads one ``view`` of input recognised as this form."""
        return self


def stand_in(estimator: Any, fitted: dict | None = None) -> Any:
    """A stand-in of ``estimator`` for its readers: its class name, tags and
    ``tokenizer``, and the attributes a fit records about its input (``fitted``: the
    features and the tokenizer, ``None`` for none), none of its state. ``fit`` reads its
    input on one (what ``validate_data`` records, the estimator itself set only once
    the fit succeeds), and held-out data is read on one holding the training input's
    record (the estimator is not fitted yet). It holds the tags, not the estimator: a
    class is a reference cycle, which would keep a fitted model's tensors until
    Python's next full garbage collection."""
    from sklearn.base import BaseEstimator

    tags = estimator.__sklearn_tags__()
    known = {name: value for name, value in (fitted or {}).items() if value is not None}
    kind = type(type(estimator).__name__, (BaseEstimator,), {
        "__sklearn_tags__": lambda self: tags,
        "tokenizer": getattr(estimator, "tokenizer", None), **known})
    return kind()


def is_dataset(X: Any) -> bool:
    """A torch ``Dataset`` or skorch's ``SliceDataset`` (what ``GridSearchCV`` can split)."""
    from skorch.helper import SliceDataset

    return isinstance(X, Dataset | SliceDataset)


def form_of(X: Any) -> str:
    """What ``X`` is, for messages."""
    if is_table(X):
        return f"a {type(X).__name__} with columns {list(table_columns(X))}"
    if is_view_dict(X):
        return f"a dict with keys {list(X)}"
    if is_dataset(X):
        return f"a {type(X).__name__} (Dataset)"
    return describe(X)

