"""The estimators' ``__init__``, made from the parameters their classes declare.

Both estimators share most of their parameters. Each is declared once, as an annotated
class attribute with its default (``max_epochs: int = 20``), in the class that has it:
the shared ones in :class:`~._params.ParameterChecks`, an estimator's own in its class,
which may also redeclare a shared one to change its default (``SupConEmbedder``'s
``loss``). :class:`Parameters` makes each class's ``__init__`` from them, as
:mod:`dataclasses` would: it stores every argument unchanged (nothing is checked before
``fit``, as scikit-learn asks) and takes skorch-style nested parameters
(``module__*``, ``optimizer__*``) as keywords. scikit-learn reads the parameters from
the ``__init__``'s signature, type checkers and editors from the declarations
(``typing.dataclass_transform``, PEP 681).
"""

from __future__ import annotations

import inspect
import sys
from typing import Any, ClassVar

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # torch requires typing_extensions
    from typing_extensions import dataclass_transform


class Parameter:
    """A parameter's declaration beyond its default (see :func:`parameter`)."""

    def __init__(self, default: Any, kw_only: bool) -> None:
        self.default = default
        self.kw_only = kw_only


def parameter(*, default: Any, kw_only: bool = True) -> Any:
    """Declare a parameter that may also be given by position (``kw_only=False``;
    the others are keyword-only)."""
    return Parameter(default, kw_only)


@dataclass_transform(kw_only_default=True, field_specifiers=(parameter,))
class Parameters:
    """A class whose ``__init__`` stores the parameters it and its bases declare.

    A parameter is an annotated class attribute with a default (``ClassVar``
    annotations are not parameters), in the order the classes declare them (a base's
    first); a redeclaration keeps the parameter's place and changes its default. The
    ``__init__`` takes the parameters by keyword (those declared with
    ``parameter(kw_only=False)`` by position too, first) and any other keyword (a
    nested parameter such as ``module__dropout``), and stores each as an attribute of
    the same name, unchanged.
    """

    #: The parameters by name: (default, keyword only, annotation), in the signature's
    #: order.
    __parameters__: ClassVar[dict[str, tuple[Any, bool, Any]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = dict(getattr(cls, "__parameters__", {}))
        for name, annotation in vars(cls).get("__annotations__", {}).items():
            if str(annotation).startswith(("ClassVar", "typing.ClassVar")):
                continue
            if name not in vars(cls):
                raise TypeError(f"{cls.__name__}.{name} is annotated without a default: "
                                "a parameter declares its default (use ClassVar for a class "
                                "attribute)")
            value = vars(cls)[name]
            default, kw_only = (value.default, value.kw_only) if isinstance(
                value, Parameter) else (value, declared.get(name, (None, True, None))[1])
            setattr(cls, name, default)
            declared[name] = (default, kw_only, annotation)
        cls.__parameters__ = declared
        cls.__init__ = _storing_init(cls, declared)  # type: ignore[method-assign]


def _storing_init(cls: type, declared: dict[str, tuple[Any, bool, Any]]) -> Any:
    """An ``__init__`` with the signature ``declared`` gives (the declarations'
    annotations, as written), which stores its arguments and any other keyword as they
    are."""
    kind = inspect.Parameter
    positional = [kind(name, kind.POSITIONAL_OR_KEYWORD, default=default, annotation=note)
                  for name, (default, kw_only, note) in declared.items() if not kw_only]
    keywords = [kind(name, kind.KEYWORD_ONLY, default=default, annotation=note)
                for name, (default, kw_only, note) in declared.items() if kw_only]
    signature = inspect.Signature(
        [kind("self", kind.POSITIONAL_OR_KEYWORD), *positional, *keywords,
         kind("kwargs", kind.VAR_KEYWORD, annotation="Any")], return_annotation="None")

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        arguments = bound.arguments
        for name in declared:
            setattr(self, name, arguments[name])
        for name, value in arguments["kwargs"].items():  # nested: checked in fit
            setattr(self, name, value)

    __init__.__signature__ = signature  # type: ignore[attr-defined]
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__module__ = cls.__module__
    __init__.__doc__ = f"Store the parameters of :class:`{cls.__name__}` (see the class)."
    return __init__
