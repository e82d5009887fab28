"""The text form: strings, a list of them or rows of them (anchor, positive,
negatives...), tokenized by the estimator's ``tokenizer`` (hashed character n-grams by
default, any callable, or a Hugging Face tokenizer)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..._tables import text_table
from ..._validation import describe, is_text
from .._data import InputSpec, TensorViews, View, ViewData, index_rows, side_by_side
from ._form import NO_FEATURES, InputForm, form_of


class TextForm(InputForm):
    name = "text"

    def detect(self, X: Any) -> bool:
        return is_text(X)

    def fit(self, estimator: Any, X: Any, *, single: bool, labelled: bool,
            view_split: Any, names: Sequence | None = None
            ) -> tuple[ViewData, InputSpec, dict]:
        tokenizer = resolve_tokenizer(getattr(estimator, "tokenizer", None))
        data, spec = _read_text(tokenizer, X, None, single=single, names=names)
        return data, spec, {**NO_FEATURES, "tokenizer_": tokenizer}

    def read(self, estimator: Any, X: Any, spec: InputSpec) -> ViewData:
        if not is_text(X):
            raise ValueError(f"{type(estimator).__name__} was fitted on text; got "
                             f"{form_of(X)} (pass a list of strings, or rows of strings as "
                             "in fit)")
        return _read_text(estimator.tokenizer_, X, spec, single=True)[0]

    def read_view(self, X: Any, view: View, name: str, tokenizer: Any) -> ViewData:
        if not is_text(X):
            raise ValueError(f"{name} for {view.describe()} must be a list of strings; got "
                             f"{form_of(X)}")
        return _read_text(tokenizer, X, InputSpec("text", (view,)), single=True,
                          name=name)[0]


TEXT = TextForm()


def _read_text(tokenizer: Any, X: Any, spec: InputSpec | None, *, single: bool,
               name: str = "X", names: Sequence | None = None) -> tuple[TensorViews, InputSpec]:
    """Strings: each column of ``X`` tokenized (all columns in one call, so that they
    share one padded length and a shared encoder embeds them in one batch). ``names``:
    the columns' names (a table's), the views' and hard-negative columns' names."""
    table = text_table(X, name)
    n, columns = table.shape
    if spec is None and single and columns != 1:
        raise ValueError(f"{name} holds rows of {columns} texts, but this fit takes single "
                         "texts (a list of strings)")
    if spec is not None and columns > len(spec.views):
        if columns == len(spec.views) + spec.negatives:  # negatives are for training
            table = table[:, :len(spec.views)]
            columns = table.shape[1]
        else:
            raise ValueError(f"{name} has rows of {columns} texts; the model was fitted on "
                             f"{len(spec.views)} per item")
    if spec is None and columns == 1 and not single:
        raise ValueError(f"{name} is a list of single strings; contrastive training takes "
                         "pairs of texts (rows of two strings: an anchor and its positive)")
    tokens = token_reader(tokenizer, spec)(
        list(table.T.reshape(-1)), lambda f: f"{name}[{f % n}]" if table.shape[1] == 1
        else f"{name}[{f % n}, {f // n}]")
    parts = [index_rows(tokens, torch.arange(c * n, (c + 1) * n)) for c in range(columns)]
    if columns > 2:  # (n, k, L) per tensor: the negatives of each row, side by side
        parts = [*parts[:2], side_by_side(parts[2:])]
    labels = list(names) if names is not None else list(range(columns))
    return (TensorViews(tuple(parts), names=tuple(labels[:2]) if names else ()),
            text_spec(parts, labels, vocabulary_of(tokenizer), names is not None))


def token_reader(tokenizer: Any, spec: InputSpec | None) -> Callable[..., Any]:
    """``read(texts, where) -> ids``: :func:`tokenize` with ``tokenizer``, its ids
    checked against its vocabulary (and, after fit, the vocabulary of ``spec``); what
    the text form reads texts with, all at once or a batch at a time
    (:class:`~.._columns.ArrowColumns`)."""
    vocabulary = vocabulary_of(tokenizer)
    if spec is not None and vocabulary != spec.views[0].vocabulary:
        raise ValueError(f"the tokenizer now makes {vocabulary} token ids; the model was "
                         f"fitted with {spec.views[0].vocabulary}")

    def read(texts: list[str], where: Callable[[int], str]) -> Any:
        tokens = tokenize(tokenizer, texts, where=where)
        if vocabulary is not None and len(texts):
            largest = max(int(t.max()) for t in (
                tokens.values() if isinstance(tokens, Mapping) else [tokens]))
            if largest >= vocabulary:
                raise ValueError(f"the tokenizer made token id {largest}, beyond its "
                                 f"vocabulary of {vocabulary} ids")
        return tokens

    return read


def text_spec(parts: Sequence[Any], labels: list, vocabulary: int | None,
              named: bool = True, length: int | None = None) -> InputSpec:
    """The spec of texts read into ``parts`` (token ids per view, then the hard
    negatives side by side), with the columns' ``labels`` (names, when ``named``);
    ``length``: the ids' padded length over every text, when ``parts`` are some."""
    columns = min(len(parts), 2)

    def shape(t: torch.Tensor) -> tuple:
        return tuple(t.shape[1:]) if length is None else (length,)

    views = []
    for c in range(columns):
        tokens = parts[c]
        if isinstance(tokens, Mapping):
            inner = tuple(View(k, shape(t), True) for k, t in tokens.items())
            views.append(View(labels[c], (), True, inner, vocabulary))
        else:
            views.append(View(labels[c], shape(tokens), True, (), vocabulary))
    return InputSpec("text", tuple(views), items_paired=columns == 2,
                     negatives=len(labels) - columns,
                     negative_names=tuple(labels[2:]) if named else ())


# --------------------------------------------------------------------------------------
# Tokenisation
# --------------------------------------------------------------------------------------

def resolve_tokenizer(tokenizer: Any) -> Any:
    """The tokenizer a text fit uses: the given one, or the default hashed n-grams."""
    from ...text import HashingNgramTokenizer

    if tokenizer is None:
        return HashingNgramTokenizer()
    if not callable(tokenizer):
        raise ValueError(f"tokenizer must be a callable tokenizer(list_of_str) -> token ids, "
                         f"a Hugging Face tokenizer, or None (hashed character n-grams); got "
                         f"{describe(tokenizer)}")
    return tokenizer


def _is_hf_tokenizer(tokenizer: Any) -> bool:
    return hasattr(tokenizer, "model_input_names") and hasattr(tokenizer, "pad_token_id")


def vocabulary_of(tokenizer: Any) -> int | None:
    """The number of ids a tokenizer produces (``vocabulary_size``, or a Hugging Face
    tokenizer's ``len``), ``None`` if it does not say."""
    if _is_hf_tokenizer(tokenizer):
        return len(tokenizer)
    size = getattr(tokenizer, "vocabulary_size", None)
    return None if size is None else int(size)


def tokenize(tokenizer: Any, texts: list[str], name: str = "X",
             where: Callable[[int], str] | None = None) -> Any:
    """Token ids of ``texts``: a long tensor ``(n, L)``, or a dict of them (a Hugging
    Face tokenizer's ``input_ids``, ``attention_mask``, ...), padded to the longest.

    A text that yields no token (every id 0, the padding, or an all-zero
    ``attention_mask``: "!!!" for a word tokenizer, "ab" for character 3-grams) is
    refused, named by ``where(i)`` (``name[i]`` by default): it would embed to the zero
    vector, whose cosine is undefined."""
    if _is_hf_tokenizer(tokenizer):
        encoded = tokenizer(texts, padding=True, truncation=True, return_tensors="np")
        out: Any = {k: torch.from_numpy(np.asarray(encoded[k], dtype=np.int64))
                    for k in tokenizer.model_input_names if k in encoded}
    else:
        out = tokenizer(texts)
        if isinstance(out, Mapping):
            out = {k: _token_matrix(v, len(texts), f"tokenizer output {k!r} for {name}")
                   for k, v in out.items()}
        else:
            out = _token_matrix(out, len(texts), f"the tokenizer's output for {name}")
    if isinstance(out, Mapping):
        present = out.get("attention_mask", out.get("input_ids"))
    else:
        present = out
    if present is not None and len(texts):
        empty = ~(present != 0).any(1)
        if bool(empty.any()):
            i = int(empty.nonzero()[0, 0])
            label = where(i) if where is not None else f"{name}[{i}]"
            raise ValueError(f"{label} ({texts[i]!r}) yields no token with this tokenizer "
                             f"({int(empty.sum())} text(s) of {name} do): it would embed to "
                             "the zero vector, whose cosine is undefined. Leave it out, or "
                             "use a tokenizer that covers it (e.g. a character analyzer "
                             "with a shorter ngram_range)")
    return out


def _token_matrix(value: Any, n: int, label: str) -> torch.Tensor:
    ids = torch.as_tensor(np.asarray(value.cpu() if isinstance(value, torch.Tensor) else value))
    if ids.ndim != 2 or len(ids) != n or ids.is_floating_point() or ids.dtype == torch.bool:
        raise ValueError(f"{label} must be integer token ids of shape ({n}, L); got "
                         f"{describe(ids)}")
    if len(ids) and int(ids.min()) < 0:
        raise ValueError(f"{label} holds a negative token id ({int(ids.min())})")
    return ids.long()
