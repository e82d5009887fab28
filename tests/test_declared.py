"""The estimators' ``__init__``, made from the parameters their classes declare."""

import inspect
from typing import ClassVar

import pytest
from sklearn.base import BaseEstimator, clone

from skcontrast import ContrastiveEmbedder, SupConEmbedder
from skcontrast._estimators._declared import Parameters, parameter
from skcontrast._estimators._params import ParameterChecks


class Base(Parameters, BaseEstimator):
    first: object = parameter(default=None, kw_only=False)
    size: int = 3
    kind: str = "a"
    counted: ClassVar[int] = 0  # a class attribute, not a parameter


class Child(Base):
    kind: str = "b"  # a new default, the same place
    extra: float = 0.5


def test_the_signature_lists_the_declarations_in_order_a_redeclaration_in_place():
    signature = inspect.signature(Child)
    assert list(signature.parameters) == ["first", "size", "kind", "extra", "kwargs"]
    assert signature.parameters["first"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert signature.parameters["size"].kind is inspect.Parameter.KEYWORD_ONLY
    assert signature.parameters["kind"].default == "b"
    assert signature.parameters["size"].annotation is int
    assert inspect.signature(Base).parameters["kind"].default == "a"
    assert Child._get_param_names() == ["extra", "first", "kind", "size"]


def test_init_stores_every_argument_unchanged_and_nested_keywords_too():
    value = object()
    made = Child(value, size=9, nested__depth=2)
    assert made.first is value and made.size == 9 and made.kind == "b"
    assert made.nested__depth == 2
    assert Child().get_params() == {"first": None, "size": 3, "kind": "b", "extra": 0.5}
    assert clone(Child(size=4)).size == 4
    with pytest.raises(TypeError):
        Child(1, 2)  # only the first parameter is positional


def test_an_annotation_without_a_default_is_refused_naming_it():
    with pytest.raises(TypeError, match=r"Broken\.size is annotated without a default"):
        class Broken(Parameters):
            size: int


def test_the_estimators_declare_each_parameter_once_and_write_no_init():
    """Both estimators' ``__init__`` were written out, parameter by parameter, and the
    shared parameters declared a third time for the type checker: each is now
    declared once, and ``__init__`` is made from the declarations."""
    shared = ParameterChecks.__parameters__
    for cls, own in ((ContrastiveEmbedder, {"view_split", "shared_encoder",
                                            "transform_views"}),
                     (SupConEmbedder, set())):
        assert "def __init__" not in inspect.getsource(cls)
        assert set(cls.__parameters__) == set(shared) | own
        assert list(cls.__parameters__)[:len(shared)] == list(shared)
    redeclared = {name for name in vars(SupConEmbedder).get("__annotations__", {})
                  if name in shared}
    assert redeclared == {"loss"} and SupConEmbedder().loss == "supcon"
    assert ContrastiveEmbedder().loss == "symmetric_info_nce"
