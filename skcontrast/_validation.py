"""Input checks shared by every public entry point.

Each check raises ``ValueError`` (or ``TypeError``) with a message that names the
argument, shows the value received and says what was expected, so that users never
have to read a traceback into library internals to learn what went wrong.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from scipy.sparse import issparse

ArrayLike = np.ndarray | torch.Tensor


def describe(value: Any) -> str:
    """Short description of ``value`` for error messages (shape for arrays)."""
    if isinstance(value, torch.Tensor | np.ndarray):
        return f"{type(value).__name__} of shape {tuple(value.shape)} and dtype {value.dtype}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def as_float_tensor(x: Any, name: str) -> torch.Tensor:
    """Return ``x`` as a floating-point torch tensor without copying where possible.

    Torch tensors pass through unchanged when already floating point (gradients and
    device are kept). NumPy arrays and nested sequences are converted: float64 stays
    float64, other dtypes become torch's default floating dtype.
    """
    if isinstance(x, torch.Tensor):
        return x if x.is_floating_point() else x.to(torch.get_default_dtype())
    try:
        array = torch_viewable(np.asarray(x))
    except Exception as exc:  # pragma: no cover - exotic objects
        raise TypeError(f"{name} must be an array or tensor; got {describe(x)}") from exc
    if array.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold numbers; got {describe(x)}")
    if array.dtype == np.float64:
        return torch.from_numpy(np.ascontiguousarray(array))
    return torch.as_tensor(array, dtype=torch.get_default_dtype())


def torch_viewable(array: np.ndarray) -> np.ndarray:
    """``array``, or its copy where it has a negative stride (``X[::-1]``,
    ``X[:, ::-1]``), which torch cannot view: every NumPy array the package hands to
    torch goes through here."""
    return array.copy() if any(stride < 0 for stride in array.strides) else array


def as_numpy(x: Any, name: str, *, dtype: Any = None) -> np.ndarray:
    """Return ``x`` (tensor, array or sequence) as a NumPy array, detached and on the
    CPU, that torch can view (:func:`torch_viewable`)."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    try:
        array = np.asarray(x, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be array-like; got {describe(x)}") from exc
    return torch_viewable(array)


def check_real(value: Any, name: str, *, low: float | None = None, high: float | None = None,
               low_open: bool = False, high_open: bool = False) -> float:
    """Require a finite real number inside the given bounds; returns it as a ``float``.

    Every real type is accepted, as scikit-learn does: Python ``int`` and ``float``, the
    NumPy scalars (``np.float32(0.5)``), a 0-d array; ``bool`` is not a number here.
    NaN and infinities are refused whatever the bounds. ``low_open``/``high_open``
    exclude the bound itself. The message names the argument, the value and the range.
    """
    if type(value) is float or type(value) is int:  # the common case, checked fast
        number = float(value)
    else:
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value[()]
        if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
            bounds = interval_text(low, high, low_open, high_open)
            raise ValueError(f"{name} must be {_kind(bounds)}; got {describe(value)}")
        number = float(value)
    if not math.isfinite(number) or \
            (low is not None and (number < low or (low_open and number == low))) or \
            (high is not None and (number > high or (high_open and number == high))):
        raise ValueError(f"{name} must be {_kind(interval_text(low, high, low_open, high_open))}; "
                         f"got {value!r}")
    return number


def _kind(bounds: str) -> str:
    if bounds.startswith(" ("):  # positive / non-negative
        return f"a {bounds[2:-1]}, finite number"
    return f"a number{bounds}" if bounds else "a finite number"


def interval_text(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is None and high is None:
        return ""
    if high is None and low == 0:
        return " (positive)" if low_open else " (non-negative)"
    if high is None:
        return f" {'>' if low_open else '>='} {low:g}"
    if low is None:
        return f" {'<' if high_open else '<='} {high:g}"
    return f" in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"


def check_positive(value: Any, name: str, *, allow_tensor: bool = False) -> float | None:
    """Require a finite real number strictly greater than zero (see :func:`check_real`).

    With ``allow_tensor=True`` a torch tensor is accepted without inspecting its value
    (a learnable temperature lives on the training device; reading it back would
    synchronise the device on every step).
    """
    if allow_tensor and isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must be a scalar; got {describe(value)}")
        return None
    return check_real(value, name, low=0, low_open=True)


def check_nonnegative(value: Any, name: str) -> float:
    """Require a finite real number greater than or equal to zero."""
    return check_real(value, name, low=0)


def check_int(value: Any, name: str, *, minimum: int | None = None,
              maximum: int | None = None) -> int:
    """Require an integer (NumPy integers accepted) inside ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer; got {describe(value)}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}; got {value}")
    return value


def check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    """Require ``value`` to be one of the strings in ``choices``."""
    if value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {options}; got {describe(value)}")
    return value


def check_finite_array(x: np.ndarray, name: str) -> None:
    """Raise if a NumPy array holds NaN or infinity, saying how many entries do."""
    if x.dtype.kind == "f" and not np.isfinite(x).all():
        bad = int(np.size(x) - np.count_nonzero(np.isfinite(x)))
        raise ValueError(
            f"{name} contains {bad} NaN or infinite value(s); clean or impute them first"
        )


def first_non_finite(tensors: Mapping[str, Any]) -> str | None:
    """The name of the first floating-point tensor of ``tensors`` holding NaN or
    infinity, or ``None`` (one device read when all are finite)."""
    named = [(k, t) for k, t in tensors.items()
             if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())]
    if not named:
        return None
    # a finite sum means every entry is finite (NaN or infinity makes it NaN or
    # infinite), and reads each tensor once without a boolean copy; a sum that overflows
    # falls back to the entry-wise test
    sums = torch.stack([t.detach().sum().abs().double().to(named[0][1].device)
                        for _, t in named])
    if bool(torch.isfinite(sums).all()):
        return None
    finite = torch.stack([torch.isfinite(t).all().to(named[0][1].device) for _, t in named])
    if bool(finite.all()):
        return None
    return named[int((~finite).nonzero()[0, 0])][0]


def label_kind(array: np.ndarray) -> str:
    """``'str'``, ``'bytes'`` or ``'number'``: what kind of labels a checked array holds
    (``b'a'`` and ``'a'`` are different labels: they never compare equal)."""
    if array.dtype.kind == "U":
        return "str"
    if array.dtype.kind == "S":
        return "bytes"
    if array.dtype.kind in "biuf":
        return "number"
    first = array.flat[0]
    return "str" if isinstance(first, str) else "bytes" if isinstance(first, bytes) \
        else "number"


def check_labels(y: Any, name: str = "y", *, n_samples: int | None = None,
                 like: np.ndarray | None = None, rows_of: str = "X") -> np.ndarray:
    """Class labels as a 1-D array, checked once for every entry point.

    1-D (an ``(n, 1)`` column is refused, not broadcast), ``n_samples`` long when given,
    no NaN, infinity or ``None``, and one kind of label throughout (all strings or all
    numbers: NumPy would order mixed ones arbitrarily or not at all). With ``like``
    (e.g. the classes seen in ``fit``), the labels must be of the same kind.
    ``rows_of`` names what ``n_samples`` counts, for the message.
    """
    array = as_numpy(y, name)
    if array.ndim != 1:
        hint = f"; use {name}.ravel()" if array.ndim == 2 and array.shape[1:] == (1,) else ""
        raise ValueError(f"{name} must be 1-D, one label per sample; got {describe(array)}"
                         f"{hint}")
    if n_samples is not None and len(array) != n_samples:
        unit = "samples" if rows_of == "X" else "rows"
        raise ValueError(f"{name} has {len(array)} labels but {rows_of} has {n_samples} {unit}")
    if not len(array):
        return array
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        bad = int(np.size(array) - np.count_nonzero(np.isfinite(array)))
        raise ValueError(f"{name} contains {bad} NaN or infinite label(s)")
    if array.dtype.kind == "O":
        kinds = set()
        for i, label in enumerate(array):
            if label is None or (isinstance(label, float | np.floating) and not np.isfinite(label)):
                raise ValueError(f"{name}[{i}] is {label!r}: labels must be actual classes "
                                 "(drop or relabel the unlabelled samples)")
            kinds.add("str" if isinstance(label, str) else "bytes" if isinstance(label, bytes)
                      else "number" if isinstance(label, numbers.Number)
                      else type(label).__name__)
        if len(kinds) > 1:
            raise ValueError(f"{name} mixes labels of different types ({', '.join(sorted(kinds))})"
                             "; use one type for every label")
    elif array.dtype.kind not in "biufUS":
        raise ValueError(f"{name} must hold class labels (numbers or strings); got "
                         f"{describe(array)}")
    if like is not None and len(like) and label_kind(array) != label_kind(np.asarray(like)):
        raise ValueError(f"{name} holds {label_kind(array)} labels but the estimator was "
                         f"fitted on {label_kind(np.asarray(like))} labels (e.g. "
                         f"{plain_label(np.asarray(like)[0])!r})")
    return array


def encode_labels(y: Any, name: str = "y") -> tuple[np.ndarray, np.ndarray]:
    """Map labels of any hashable type to ``0..k-1``; returns ``(classes, codes)``."""
    array = check_labels(y, name)
    classes, codes = np.unique(array, return_inverse=True)
    return classes, codes.astype(np.int64)


def plain_label(label: Any) -> Any:
    """A label as a plain Python value (NumPy scalars unwrapped), for messages and reports."""
    return label.item() if hasattr(label, "item") else label


def resolve_seed(random_state: Any) -> int:
    """An integer seed from ``None`` (fresh entropy), an int, or a NumPy RNG (drawn once)."""
    if random_state is None:
        return int(np.random.SeedSequence().entropy) % 2**63  # type: ignore[arg-type]
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if random_state < 0:
            raise ValueError(f"random_state must be non-negative; got {random_state}")
        return int(random_state)
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(2**63))
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(2**31))
    raise ValueError(
        f"random_state must be None, an int, or a numpy Generator/RandomState; "
        f"got {describe(random_state)}")


def is_view_dict(X: Any) -> bool:
    """A dict of views (scipy's ``dok_matrix`` is a dict too, but a sparse matrix)."""
    return isinstance(X, Mapping) and not issparse(X)


def is_text(X: Any) -> bool:
    """Whether ``X`` holds strings: a sequence or array of them, or rows of them."""
    if isinstance(X, np.ndarray):
        return X.dtype.kind in "US" or (X.dtype.kind == "O" and X.size > 0
                                        and isinstance(X.flat[0], str))
    if isinstance(X, list | tuple) and len(X) > 0:
        first = X[0]
        if isinstance(first, str):
            return True
        return isinstance(first, list | tuple | np.ndarray) and len(first) > 0 and \
            isinstance(first[0], str)
    return isinstance(X, str)


def check_embeddings(X: Any, *, name: str = "X") -> np.ndarray:
    """Validate what a selector looks at: ``(n, 2, d)`` pairs or ``(n, d)`` single views.

    Returns a float NumPy array (torch tensors are detached and brought to the CPU).
    """
    array = as_numpy(X, name)
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{name} must hold numbers; got {describe(array)}")
    if array.ndim == 3 and array.shape[1] != 2:
        raise ValueError(
            f"{name} of shape (n, 2, d) must hold two views on axis 1; got {describe(array)}")
    if array.ndim not in (2, 3):
        raise ValueError(
            f"{name} must be paired embeddings of shape (n, 2, d) or single-view embeddings "
            f"of shape (n, d); got {describe(array)}")
    if array.shape[0] < 1:
        raise ValueError(f"{name} holds no samples; got {describe(array)}")
    array = array if array.dtype.kind == "f" else array.astype(np.float64)
    check_finite_array(array, name)
    return array


def check_matrix(x: Any, name: str, *, min_rows: int = 1) -> np.ndarray:
    """A finite float64 matrix ``(n, d)`` of at least ``min_rows`` rows, or an error
    naming ``name``."""
    array = as_numpy(x, name).astype(np.float64, copy=False)
    if array.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array of shape (n, d); got {describe(array)}")
    if array.shape[0] < min_rows:
        rows = "row" if min_rows == 1 else "rows"
        raise ValueError(f"{name} needs at least {min_rows} {rows}; got {describe(array)}")
    check_finite_array(array, name)
    return array


def unit_rows(x: np.ndarray) -> np.ndarray:
    """The rows of ``x`` scaled to unit length (a zero row stays zero)."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def class_sums(H: np.ndarray, y: Any) -> tuple[np.ndarray, ...]:
    """``(classes, codes)`` of ``y`` (one label per row of ``H``), each class's row sum and size."""
    classes, codes = encode_labels(y)
    if len(codes) != len(H):
        raise ValueError(f"y has {len(codes)} labels but H has {len(H)} rows")
    sums = np.zeros((len(classes), H.shape[1]))
    np.add.at(sums, codes, H)
    return classes, codes, sums, np.bincount(codes).astype(float)


_PARAM_NAMES: dict[type, tuple[str, ...]] = {}


def param_names(cls: type) -> tuple[str, ...]:
    """The names of ``cls.__init__``'s parameters, sorted, as scikit-learn's
    ``get_params`` reads them (its signature, without ``self`` and ``*args``/
    ``**kwargs``), read once per class: a class's signature does not change, and
    reading it is about a twentieth of a small fit, which asks several times."""
    names = _PARAM_NAMES.get(cls)
    if names is None:
        variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        signature = inspect.signature(cls.__init__)  # type: ignore[misc]
        names = _PARAM_NAMES[cls] = tuple(sorted(
            p.name for p in signature.parameters.values()
            if p.name != "self" and p.kind not in variadic))
    return names


def store_params(estimator: Any, arguments: dict) -> None:
    """Store an ``__init__``'s arguments (its ``locals()``) on ``estimator`` unchanged,
    each under its parameter's name: what scikit-learn asks of ``__init__`` (nothing is
    checked before ``fit``, ``get_params`` reads them back)."""
    for name in param_names(type(estimator)):
        setattr(estimator, name, arguments[name])
