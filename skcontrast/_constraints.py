"""Declared parameter constraints, as scikit-learn's ``_parameter_constraints`` declares
them: each parameter's accepted kinds of value (:class:`Constraint`), checked when
``fit`` starts by :func:`validate_params`, with a message that names the parameter, what
was expected and what it got."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._validation import check_int, check_real, describe, interval_text


class Constraint:
    """One accepted kind of value for a parameter; a parameter's constraints are a list
    of these (or ``None``, a string, ``callable``, or a class, as scikit-learn writes
    them), checked by :func:`validate_params`."""

    def accepts(self, value: Any) -> bool:
        raise NotImplementedError

    def check(self, value: Any, name: str) -> None:
        """Raise the message of this constraint alone when it refuses ``value``."""
        if not self.accepts(value):
            raise ValueError(f"{name} must be {self}; got {describe(value)}")


class CheckFirst(Constraint):
    """A constraint whose :meth:`check` says what it refuses; it accepts what that
    check lets pass."""

    def accepts(self, value: Any) -> bool:
        try:
            self.check(value, "value")
        except ValueError:
            return False
        return True


class Interval(CheckFirst):
    """An integer (``kind=int``) or real number (``kind=float``) between ``low`` and
    ``high`` (``None``: unbounded); a real interval may be open at either end."""

    def __init__(self, kind: type, low: float | None = None, high: float | None = None, *,
                 closed: str = "both") -> None:
        self.kind, self.low, self.high, self.closed = kind, low, high, closed

    def check(self, value: Any, name: str) -> None:
        if self.kind is int:
            check_int(value, name, minimum=self.low, maximum=self.high)  # type: ignore[arg-type]
        else:
            check_real(value, name, low=self.low, high=self.high,
                       low_open=self.closed in ("neither", "right"),
                       high_open=self.closed in ("neither", "left"))

    def __str__(self) -> str:
        kind = "an integer" if self.kind is int else "a real number"
        if self.kind is int:
            bounds = [f">= {self.low}" if self.low is not None else "",
                      f"<= {self.high}" if self.high is not None else ""]
            return " ".join([kind, *[b for b in bounds if b]])
        return kind + interval_text(self.low, self.high, self.closed in ("neither", "right"),
                                self.closed in ("neither", "left"))


class Options(Constraint):
    """One of a fixed set of values (strings, or ``True``/``False``)."""

    def __init__(self, *options: Any) -> None:
        self.options = options

    def accepts(self, value: Any) -> bool:
        return any(value is o or (isinstance(value, str) and value == o)
                   for o in self.options)

    def check(self, value: Any, name: str) -> None:
        if not self.accepts(value):
            raise ValueError(f"{name} must be {self}; got {describe(value)}")

    def __str__(self) -> str:
        if len(self.options) == 1:
            return repr(self.options[0])
        return "one of " + ", ".join(repr(o) for o in self.options)


class InstanceOf(Constraint):
    """An instance of ``kind`` (a class or a tuple of them), described as ``what``."""

    def __init__(self, kind: Any, what: str) -> None:
        self.kind, self.what = kind, what

    def accepts(self, value: Any) -> bool:
        return isinstance(value, self.kind)

    def __str__(self) -> str:
        return self.what


class Checked(CheckFirst):
    """A value that ``check(value, name)`` accepts (a rule a declaration cannot say,
    e.g. a tuple of positive widths); its own message is the refusal."""

    def __init__(self, check: Any, what: str) -> None:
        self.check_value, self.what = check, what

    def check(self, value: Any, name: str) -> None:
        self.check_value(value, name)

    def __str__(self) -> str:
        return self.what


def _constraint(spec: Any) -> Constraint:
    """A constraint as scikit-learn writes it: ``None``, a string option, ``callable``,
    a class, or a :class:`Constraint`."""
    if isinstance(spec, Constraint):
        return spec
    if spec is None or isinstance(spec, str | bool):
        return Options(spec)
    if spec is callable:
        return Checked(_check_callable, "a callable")
    if spec is bool:
        return InstanceOf(bool | np.bool_, "True or False")
    if isinstance(spec, type):
        return InstanceOf(spec, f"a {spec.__name__}")
    raise TypeError(f"not a parameter constraint: {spec!r}")


def _check_callable(value: Any, name: str) -> None:
    if not callable(value):
        raise ValueError(f"{name} must be a callable; got {describe(value)}")


def validate_params(estimator: Any) -> None:
    """Check every parameter of ``estimator`` against its class's declared
    ``_parameter_constraints`` (``{name: [constraint, ...]}``, any one of which a value
    may satisfy), as scikit-learn's ``fit`` does: the error names the parameter, what
    was expected (the constraints in their declared order) and what it got. A range or
    a rule that is the only constraint besides ``None`` gives its own, more precise,
    message (``micro_batch_size must be >= 1; got 0``)."""
    for name, specs in type(estimator)._parameter_constraints.items():
        value = getattr(estimator, name)
        constraints = [_constraint(s) for s in specs]
        if any(c.accepts(value) for c in constraints):
            continue
        others = [c for c, spec in zip(constraints, specs, strict=True) if spec is not None]
        if len(constraints) == 1 or (len(others) == 1 and
                                     isinstance(others[0], Interval | Checked)):
            others[0].check(value, name)  # its own message, the most precise
        raise ValueError(f"{name} must be {' or '.join(map(str, constraints))}; got "
                         f"{describe(value)}")
