"""Strings to token ids (:class:`HashingNgramTokenizer`) and the bag-of-n-grams encoder
of a text view (:class:`NgramBagEncoder`)."""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator
from torch import nn

from .._validation import check_choice, check_int, describe, store_params

ANALYZERS = ("char_wb", "char", "word", "char_wb+word")


class HashingNgramTokenizer(BaseEstimator):
    """Strings to hashed n-gram ids: the default tokenizer of text views (no vocabulary,
    no download, nothing to fit).

    Each string becomes the set of its character n-grams (and, with ``'char_wb+word'``,
    its words), each hashed into ``n_features`` buckets with scikit-learn's
    ``HashingVectorizer`` (MurmurHash3), as ids
    ``1 .. n_features``; the rows are padded with ``0`` to the longest row of the call.
    A string's n-grams are counted once (a binary bag).

    Parameters
    ----------
    analyzer : {'char_wb+word', 'char_wb', 'char', 'word'}, default='char_wb+word'
        ``'char_wb'``: character n-grams inside word boundaries (padded with a space),
        which match across inflections and spelling variants; ``'+word'`` adds whole
        words; ``'char'`` crosses word boundaries; ``'word'``: words alone.
    ngram_range : tuple (min_n, max_n), default=(2, 4)
        Lengths of the character n-grams (words: always 1).
    n_features : int, default=2**18
        Hash buckets (the encoder's vocabulary is ``n_features + 1``, with padding).
    lowercase : bool, default=True

    Examples
    --------
    >>> from skcontrast.text import HashingNgramTokenizer
    >>> ids = HashingNgramTokenizer()(["thumbs up", "daumen hoch"])
    >>> ids.shape[0], int(ids.min()) >= 0, int(ids.max()) <= 2**18
    (2, True, True)
    """

    def __init__(self, analyzer: str = "char_wb+word", ngram_range: tuple = (2, 4),
                 n_features: int = 2**18, lowercase: bool = True) -> None:
        store_params(self, locals())

    @property
    def vocabulary_size(self) -> int:
        """Ids a text may hold, padding (0) included."""
        return check_int(self.n_features, "n_features", minimum=2) + 1

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """Token ids of ``texts``, shape ``(n, L)``, int64, padded with 0."""
        from sklearn.feature_extraction.text import HashingVectorizer

        analyzer = check_choice(self.analyzer, "analyzer", ANALYZERS)
        n_features = self.vocabulary_size - 1
        low, high = _ngram_range(self.ngram_range)
        texts = list(texts)
        matrices = []
        for kind in analyzer.split("+"):
            vectorizer = HashingVectorizer(
                analyzer=kind, ngram_range=(1, 1) if kind == "word" else (low, high),
                n_features=n_features, alternate_sign=False, norm=None, binary=True,
                lowercase=bool(self.lowercase),
                token_pattern=r"(?u)\b\w+\b" if kind == "word" else None)
            matrices.append(vectorizer.transform(texts))
        counts = matrices[0]
        for m in matrices[1:]:
            counts = counts + m
        counts = counts.tocsr()
        counts.sum_duplicates()
        lengths = np.diff(counts.indptr)
        ids = np.zeros((len(texts), max(1, int(lengths.max(initial=0)))), dtype=np.int64)
        rows = np.repeat(np.arange(len(texts)), lengths)
        cols = np.arange(counts.nnz) - np.repeat(counts.indptr[:-1], lengths)
        ids[rows, cols] = counts.indices.astype(np.int64) + 1
        return ids


def _ngram_range(value: Any) -> tuple[int, int]:
    ok = (isinstance(value, tuple | list) and len(value) == 2
          and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in value)
          and 1 <= value[0] <= value[1])
    if not ok:
        raise ValueError(f"ngram_range must be (min_n, max_n) with 1 <= min_n <= max_n; got "
                         f"{describe(value)}")
    return int(value[0]), int(value[1])


class NgramBagEncoder(nn.Module):
    """An embedding bag over token ids (0 is padding), then an MLP: the default encoder
    of a text view.

    The bag sums the embeddings of a text's ids and divides by the square root of their
    number (so that long and short texts have comparable norms); with hidden layers a
    ReLU and the layers follow. Without hidden layers it is fastText's linear model
    (Joulin et al., *Bag of tricks for efficient text classification*, EACL 2017), whose
    embeddings start as random projections of the texts' n-gram sets: at
    initialisation, the cosine of two texts approximates the cosine of their binary
    n-gram vectors.

    Parameters
    ----------
    vocabulary_size : int
        Number of ids (padding included); id 0, and with a Hugging Face tokenizer's
        ``attention_mask`` every masked position, is padding.
    n_out : int
        Output width.
    hidden_layer_sizes : sequence of int, default=()
        Width of the bag (the first) and of the layers after it; ``()``: the bag is the
        output.
    """

    def __init__(self, vocabulary_size: int, n_out: int,
                 hidden_layer_sizes: Sequence[int] = ()) -> None:
        super().__init__()
        widths = [int(w) for w in hidden_layer_sizes] + [int(n_out)]
        self.bag = nn.EmbeddingBag(int(vocabulary_size), widths[0], mode="sum")
        nn.init.normal_(self.bag.weight, std=widths[0] ** -0.5)
        layers: list[nn.Module] = []
        for a, b in itertools.pairwise(widths):
            layers += [nn.ReLU(), nn.Linear(a, b)]
        self.layers = nn.Sequential(*layers)

    def forward(self, ids: torch.Tensor | None = None, *,
                input_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, **unused: Any) -> torch.Tensor:
        """Embeddings of a batch of token ids ``(B, L)`` (0 is padding), or of a Hugging
        Face tokenizer's ``input_ids`` with its ``attention_mask``."""
        ids = input_ids if ids is None else ids
        if ids is None:
            raise ValueError("NgramBagEncoder takes token ids (or input_ids=...)")
        ids = ids.long()
        mask = ids != 0 if attention_mask is None else attention_mask.bool()
        weights = mask.to(self.bag.weight.dtype)
        count = weights.sum(dim=1, keepdim=True).clamp(min=1.0)
        return self.layers(self.bag(ids, per_sample_weights=weights) / count.sqrt())
