"""Strings to token ids (:class:`HashingNgramTokenizer`) and the bag-of-n-grams encoder
of a text view (:class:`NgramBagEncoder`)."""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.base import BaseEstimator
from torch import nn

from .._validation import check_choice, check_int, describe, store_params

ANALYZERS = ("char_wb", "char", "word", "char_wb+word")
WEIGHTINGS = ("binary", "idf")


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
    r"""An embedding bag over token ids (0 is padding), then an MLP: the default encoder
    of a text view.

    The bag sums the embeddings of a text's ids, each weighted by 1 (``'binary'``) or
    by its inverse document frequency (``weighting='idf'``, learned from the training
    texts by :meth:`fit_prior`), and divides by the norm of the weights: for a text with
    id set :math:`T` the bag is :math:`\sum_{j \in T} w_j e_j / \lVert w_T \rVert_2`.
    With hidden layers a ReLU and the layers follow. Without hidden layers it is
    fastText's linear model (Joulin et al. 2017, https://arxiv.org/abs/1607.01759), and
    a **lexical prior**: the rows :math:`e_j` start as independent
    :math:`\mathcal{N}(0, I/n_{out})` draws, so the untrained embedding is a random
    projection (Johnson-Lindenstrauss) of the text's weighted n-gram vector, and the
    cosine of two untrained embeddings approximates the cosine of their n-gram sets
    (binary, or TF-IDF with ``'idf'``) within :math:`O(1/\sqrt{n_{out}})`: lexical
    search. Contrastive training then moves the rows from there.

    Binary weights are the default because they trained better: on held-out emoji
    names (same-script and cross-script pairs, and names with typos against the clean
    ones) the binary bag's recall@1 was as high or higher after training, and on the
    typos it also started higher (IDF gives a typo's rare n-grams the largest weights);
    ``docs/text.rst`` has the figures.

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
    weighting : {'binary', 'idf'}, default='binary'
        How a text's ids are weighted in the bag. ``'binary'``: each id 1. ``'idf'``:
        scikit-learn's smooth IDF, :math:`\log\frac{1 + n}{1 + \mathrm{df}_j} + 1`
        over the ``n`` texts given to :meth:`fit_prior` (the estimators give it the
        training texts; every id weighs 1 until then).
    sparse : bool or 'auto', default='auto'
        Sparse gradients for the bag (``nn.EmbeddingBag(sparse=True)``): a step updates
        only the rows its batch holds, with an optimizer whose settings update sparse
        gradients (:class:`skcontrast.LazyAdam` without ``amsgrad``, SGD without momentum
        or weight decay, Adagrad without weight decay). ``'auto'`` starts dense, and the
        estimators make it sparse when their optimizer's settings update sparse
        gradients (the default ``optimizer='adam'`` does).

    Examples
    --------
    >>> import torch
    >>> from skcontrast.text import HashingNgramTokenizer, NgramBagEncoder
    >>> tokenizer = HashingNgramTokenizer(n_features=2**12)
    >>> ids = torch.as_tensor(tokenizer(["red heart", "red hearts", "blue car"]))
    >>> encoder = NgramBagEncoder(tokenizer.vocabulary_size, 256, weighting="idf")
    >>> encoder = encoder.fit_prior([ids])
    >>> z = torch.nn.functional.normalize(encoder(ids), dim=1)
    >>> bool(z[0] @ z[1] > z[0] @ z[2])  # the lexical prior: shared n-grams, close
    True
    """

    id_weights: torch.Tensor

    def __init__(self, vocabulary_size: int, n_out: int,
                 hidden_layer_sizes: Sequence[int] = (), *, weighting: str = "binary",
                 sparse: bool | str = "auto") -> None:
        super().__init__()
        self.weighting = check_choice(weighting, "weighting", WEIGHTINGS)
        if sparse not in (True, False, "auto"):
            raise ValueError(f"sparse must be True, False or 'auto'; got {describe(sparse)}")
        self.sparse = sparse
        widths = [int(w) for w in hidden_layer_sizes] + [int(n_out)]
        # the table is drawn once (EmbeddingBag's own N(0, 1) draw of 2^18 rows would take
        # as long again)
        self.bag = nn.EmbeddingBag(int(vocabulary_size), widths[0], mode="sum",
                                   sparse=sparse is True,
                                   _weight=torch.empty(int(vocabulary_size), widths[0]))
        nn.init.normal_(self.bag.weight, std=widths[0] ** -0.5)
        #: each id's weight in the bag (its IDF once :meth:`fit_prior` has run)
        self.register_buffer("id_weights", torch.ones(int(vocabulary_size)))
        layers: list[nn.Module] = []
        for a, b in itertools.pairwise(widths):
            layers += [nn.ReLU(), nn.Linear(a, b)]
        self.layers = nn.Sequential(*layers)

    def use_sparse_gradients(self, sparse: bool) -> NgramBagEncoder:
        """With ``sparse='auto'``: whether the bag's table takes sparse gradients (the
        estimators ask for them when their optimizer's settings update sparse
        gradients); a ``sparse`` of ``True`` or ``False`` given at construction holds.
        Returns the encoder."""
        if self.sparse == "auto":
            self.bag.sparse = bool(sparse)
        return self

    @torch.no_grad()
    def fit_prior(self, texts: Sequence[Any], prepare: Any = None) -> NgramBagEncoder:
        """Set the ids' weights from training texts: ``texts`` is a sequence of token-id
        tensors ``(..., L)`` (0 is padding; each row one text, whose ids count once) or
        of a Hugging Face tokenizer's dicts (``input_ids``, ``attention_mask``), each
        read through ``prepare`` when given (what the training step does to a batch
        before the encoder sees it; it leaves token ids as they are). With
        ``weighting='binary'`` nothing changes. Returns ``self``."""
        if self.weighting == "binary":
            return self
        size = self.id_weights.numel()
        frequency = torch.zeros(size, dtype=torch.float64)
        n = 0
        for block in texts:
            ids, mask = _ids_and_mask(block if prepare is None else prepare(block))
            ids, mask = ids.reshape(-1, ids.shape[-1]).long().cpu(), \
                mask.reshape(-1, mask.shape[-1]).cpu()
            if len(ids) == 0:
                continue
            if int(ids.max()) >= size or int(ids.min()) < 0:
                raise ValueError(f"fit_prior: token ids must lie in [0, {size}); got ids "
                                 f"from {int(ids.min())} to {int(ids.max())}")
            rows = torch.arange(len(ids)).repeat_interleave(mask.sum(1))
            pairs = torch.unique(rows * size + ids[mask])  # (text, id) once each
            frequency += torch.bincount(pairs % size, minlength=size).double()
            n += len(ids)
        if n == 0:
            raise ValueError("fit_prior needs at least one text")
        idf = torch.log((1.0 + n) / (1.0 + frequency)) + 1.0
        self.id_weights.copy_(idf.to(self.id_weights))
        return self

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
        weights = self.id_weights[ids].to(self.bag.weight.dtype) * mask
        norm = weights.square().sum(dim=1, keepdim=True).sqrt().clamp(min=1e-12)
        weights = weights / norm
        table = self.bag.weight
        if self.bag.sparse and table.requires_grad and not weights.requires_grad and \
                torch.is_grad_enabled():
            return self.layers(_WeightedBag.apply(table, ids, weights))
        return self.layers(self.bag(ids, per_sample_weights=weights))


class _WeightedBag(torch.autograd.Function):
    """``nn.EmbeddingBag(mode='sum', sparse=True)`` with per-sample weights, whose
    gradient is built on the ids the batch holds, once each: a sparse gradient of ``U``
    rows (``U`` distinct ids with a non-zero weight), summed by a sparse product, and
    marked coalesced. torch's own sparse backward makes one row per id *occurrence*,
    padding included (``B x L`` rows of ``d``, tens of MB a step for 128 texts of 180
    n-gram slots), and the optimizer then coalesces them: that allocation and its sum
    were most of a text step, and grew with every text a row adds (a hard-negative
    column). The same gradient, up to the order of its float sums."""

    @staticmethod
    def forward(ctx: Any, table: torch.Tensor, ids: torch.Tensor,
                weights: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(ids, weights)
        ctx.size = table.shape
        return F.embedding_bag(ids, table, mode="sum", per_sample_weights=weights)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        ids, weights = ctx.saved_tensors
        bags, slots = weights.nonzero(as_tuple=True)
        unique, row = torch.unique(ids[bags, slots], return_inverse=True)
        spread = torch.sparse_coo_tensor(torch.stack([row, bags]), weights[bags, slots],
                                         (len(unique), len(grad)), check_invariants=False)
        values = torch.sparse.mm(spread, grad.to(weights.dtype))
        return torch.sparse_coo_tensor(unique[None], values, ctx.size,
                                       is_coalesced=True, check_invariants=False), None, None


def _ids_and_mask(block: Any) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(block, Mapping):
        ids = torch.as_tensor(block["input_ids"])
        mask = block.get("attention_mask")
        return ids, (ids != 0) if mask is None else torch.as_tensor(mask).bool()
    ids = torch.as_tensor(block)
    return ids, ids != 0
