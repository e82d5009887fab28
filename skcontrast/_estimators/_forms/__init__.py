"""Every input form the estimators accept, as one table of forms.

An input form is one entry of :data:`FORMS`, a class in a module of its own here that
holds its readers: how to recognise it (``detect``), how to read it for ``fit``
(``fit``: a :class:`ViewData` and an :class:`InputSpec`, and what
scikit-learn records about the input), how to read later input against the spec of the
fit (``read``), and how to read one view of it alone (``read_view``, for
``transform_view``, with ``view_form`` naming the form that reads one view). A container
of another form's data (a table) says so (``container``): it reads later input whatever
form its fit made. :func:`read_fit_input`, :func:`read_input` and :func:`read_view` go
through the table; nothing else in the estimators branches on the form. Adding a form is
one module here (its :class:`~._form.InputForm` subclass and its readers), its place in
:data:`FORMS` and its tests.

The forms, in the order they are recognised:

- streams (:mod:`._stream`), a :class:`~skcontrast.Stream`, an ``IterableDataset`` or a
  generator function: read a window at a time, each window by the form it spells;
- ``'text'`` (:mod:`._text`): strings, a list of them or rows of them (anchor, positive,
  negatives...), and their tokenisation;
- tables of columns (:mod:`._table`), a pandas ``DataFrame`` or a Hugging Face
  ``datasets.Dataset``: text columns are text views by name (the first two the views,
  further ones hard-negative columns, as a dict's keys), numeric columns scikit-learn's
  features (a DataFrame) or views of per-row arrays (a ``datasets.Dataset``);
- ``'dict'`` (:mod:`._dict`): two modalities of any shapes, ``{name: array}``, then
  hard-negative keys;
- ``'dataset'`` (:mod:`._dataset`): a map-style ``torch.utils.data.Dataset``;
- ``'image'`` (:mod:`._image`): single images, by the rule of :mod:`skcontrast.images`
  (``(n, C, H, W)`` with 1 or 3 channels, channels last, ``(n, H, W)`` bytes, PIL
  images);
- ``'array'`` (:mod:`._array`): N-D arrays or tensors, ``(n, 2, *view_shape)`` pairs or
  single views;
- ``'flat'`` (:mod:`._flat`): scikit-learn's 2-D form (and ``(n, 2, d)`` pairs, flattened
  to it).

What the readers share is one level up, in ``_estimators``: the checks of values
(``_checks.py``), a Dataset's items (``_items.py``), and the specs and datasets every
form is read into (``_data.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..._tables import is_series, series_values
from .._checks import check_length
from .._data import InputSpec, View, ViewData
from ._array import ARRAY
from ._dataset import DATASET
from ._dict import DICT
from ._flat import FLAT
from ._form import InputForm, is_dataset
from ._image import IMAGE
from ._stream import StreamForm
from ._table import TABLE
from ._text import TEXT

__all__ = ["FORMS", "InputForm", "form_named", "form_of_input", "is_dataset", "read_fit_input",
           "read_input", "read_view", "spelled_array"]


def spelled_array(X: Any) -> Any:
    """A pandas ``Series`` is the sequence of its values; nested lists or tuples that no
    form reads as such (only the catch-all flat form would) are the array they spell."""
    if is_series(X):
        X = series_values(X)
    if isinstance(X, list | tuple) and not any(form.detect(X) for form in FORMS[:-1]):
        return np.asarray(X)
    return X


def form_named(name: str) -> InputForm:
    """The form a fit of ``InputSpec.form`` ``name`` reads later input with."""
    return next(form for form in FORMS if form.name == name)


def form_of_input(X: Any, single: bool = True) -> InputForm:
    """The first form of :data:`FORMS` that recognises ``X``. An ``(n, 2, d)`` float
    array is scikit-learn's pairs (flat); integers and bytes keep their N-D form."""
    form = next(form for form in FORMS if form.detect(X))
    if form is ARRAY and not single and X.ndim == 3 and not _whole_numbers(X):
        return FLAT
    return form


def read_fit_input(estimator: Any, X: Any, y: Any = None, *, single: bool,
                   view_split: Any = None, labelled: bool = False
                   ) -> tuple[ViewData, InputSpec, dict]:
    """Turn training input of any accepted form into a dataset and its spec.

    Nothing is set on ``estimator``: what scikit-learn records about the input
    (``n_features_in_``, ``feature_names_in_``) and the tokenizer of text are returned
    instead, ``None`` where the input has none, for the estimator to set once its fit
    has succeeded (a refused or failed fit leaves a fitted estimator as it was).

    Parameters
    ----------
    single : bool
        Items are single views (an augmentation makes the pairs, or labels supervise);
        otherwise items are pairs.
    view_split : int or None
        For paired 2-D input: the column where view 1 starts (``None``: half way).
    labelled : bool
        SupCon: a Dataset's items may be single views or two crops ``(x0, x1)``.
    """
    X = spelled_array(X)
    data, spec, features = form_of_input(X, single).fit(
        estimator, X, single=single, labelled=labelled, view_split=view_split)
    check_length(len(data), "X", minimum=2)
    return data, spec, features


def read_input(estimator: Any, X: Any, spec: InputSpec) -> ViewData:
    """Check input given after ``fit`` (same form, same view shapes) and read it; a table
    of columns reads as the form it made in fit.

    Data already read (a :class:`ViewData`, e.g. the held-out part of the training
    input that the per-epoch scorer embeds) passes through.
    """
    if isinstance(X, ViewData):
        return X
    X = spelled_array(X)
    form = form_of_input(X)
    if not form.container:
        if form is TEXT and spec.form != "text":
            raise ValueError(f"{type(estimator).__name__} was fitted on {spec.form} input, "
                             "not text; got strings")
        form = form_named(spec.form)
    data = form.read(estimator, X, spec)
    check_length(len(data), "X", minimum=1)
    return data


def read_view(X: Any, view: View, name: str = "X_view", tokenizer: Any = None) -> ViewData:
    """One view's items alone (``transform_view``): an array, tensor, Dataset, a table of
    one column, or a list of strings for a text view (tokenized by ``tokenizer``)."""
    form = form_of_input(X)
    if view.text and not form.container:
        form = TEXT
    return form.view_form(view).read_view(X, view, name, tokenizer)


def _whole_numbers(X: np.ndarray | torch.Tensor) -> bool:
    """Integer or byte values: ``(n, 2, L)`` token ids keep their integers (as in the
    dict form) and ``(n, 2, d)`` bytes are images, not scikit-learn's float features."""
    if isinstance(X, torch.Tensor):
        return not X.is_floating_point() and not X.is_complex() and X.dtype != torch.bool
    return X.dtype.kind in "iu"


#: The forms in the order they are recognised (the last one takes the rest). The stream
#: form reads each of its windows through the readers above.
FORMS: tuple[InputForm, ...] = (StreamForm(read_fit_input, read_input, read_view), TEXT,
                                TABLE, DICT, DATASET, IMAGE, ARRAY, FLAT)
