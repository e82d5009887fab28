"""Text: strings into token ids, a bag-of-n-grams encoder, hard-negative mining and
hybrid lexical + learned retrieval.

The estimators take strings directly (``ContrastiveEmbedder().fit(string_pairs)``): a
*tokenizer* turns each column of strings into a padded matrix of token ids, and a text
view's default encoder is :class:`NgramBagEncoder`, an embedding bag over those ids
(fastText's model, Joulin et al., 2017), so that text trains with no model download.
Any callable ``tokenizer(list_of_str) -> (n, L) int array`` works, and so does a Hugging
Face tokenizer (its ``input_ids``; the default encoder then bags its tokens, or give a
transformer as ``module``).
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from sklearn.base import BaseEstimator
from torch import nn

from ._validation import check_choice, check_int, describe, is_text, store_params, text_table

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


# --------------------------------------------------------------------------------------
# Chunked top-k search
# --------------------------------------------------------------------------------------

def top_k_search(scores: Any, n_queries: int, n_documents: int, k: int, *,
                 query_chunk: int = 4096, document_chunk: int = 65536
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best documents per query, in bounded memory.

    ``scores(queries, documents) -> Tensor (len(queries), len(documents))`` scores a
    block of query indices against a block of document indices (both int64 tensors); the
    blocks are at most ``query_chunk x document_chunk``, and each query keeps a running
    top ``k``, so memory is ``O(query_chunk x (document_chunk + k))`` whatever the
    corpus. Ties are broken by the smaller document index, so the result does not depend
    on the chunking as long as ``scores`` gives a document the same score in any block
    (a matrix product may not, in its last bits: :func:`mine_hard_negatives` scores
    identical rows once for that reason).

    A NaN or ``+inf`` score is refused, naming its query (``-inf`` excludes a
    document).

    Returns
    -------
    values : ndarray of shape (n_queries, k), float32
        Best first; ``-inf`` where the corpus holds fewer than ``k`` documents (a
        document scored ``-inf`` is excluded).
    indices : ndarray of shape (n_queries, k), int64
        ``-1`` where there is no (or only an excluded) document.
    """
    k, query_chunk, document_chunk = _check_blocks(k, query_chunk, document_chunk)
    values = np.full((n_queries, k), -np.inf, dtype=np.float32)
    indices = np.full((n_queries, k), -1, dtype=np.int64)
    for rows, v, i in _top_k_blocks(scores, n_queries, n_documents, k, query_chunk,
                                    document_chunk):
        values[rows], indices[rows] = v, i
    return values, indices


def _top_k_blocks(scores: Any, n_queries: int, n_documents: int, k: int, query_chunk: int,
                  document_chunk: int) -> Iterator[tuple[slice, np.ndarray, np.ndarray]]:
    """:func:`top_k_search` one block of queries at a time: ``(rows, values, indices)``
    of the queries ``rows``, so that a caller can reduce each block before the next
    (memory ``O(query_chunk x (document_chunk + k))``, nothing of size ``n_queries x
    k`` unless the caller keeps it)."""
    for q0 in range(0, n_queries, query_chunk):
        queries = torch.arange(q0, min(n_queries, q0 + query_chunk))
        values = np.full((len(queries), k), -np.inf, dtype=np.float32)
        indices = np.full((len(queries), k), -1, dtype=np.int64)
        best_v: torch.Tensor | None = None
        best_i: torch.Tensor | None = None
        for d0 in range(0, n_documents, document_chunk):
            docs = torch.arange(d0, min(n_documents, d0 + document_chunk))
            block = scores(queries, docs).float()
            v, i = _chunk_top(block, min(k, block.shape[1]))
            del block  # before the next block is made: one block alive at a time
            _check_scores(v[:, 0], queries)  # NaN and +inf rank first: each row's top
            i = i + d0
            if best_v is not None and best_i is not None:
                v, i = torch.cat([best_v, v], 1), torch.cat([best_i, i.to(best_i.device)], 1)
            best_v, best_i = _ordered(v, i, k)
        if best_v is not None and best_i is not None:
            values[:, :best_v.shape[1]] = best_v.cpu().numpy()
            indices[:, :best_i.shape[1]] = best_i.cpu().numpy()
        indices[np.isneginf(values)] = -1  # excluded (scored -inf), or no document
        yield slice(q0, q0 + len(queries)), values, indices


def _check_scores(best: torch.Tensor, queries: torch.Tensor) -> None:
    """Refuse NaN or ``+inf`` among a block's scores, naming the first query that has
    one (a row's best value shows it: ``topk`` ranks NaN above every number)."""
    bad = torch.isnan(best) | torch.isposinf(best)
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise ValueError(f"the scores of query {int(queries[row])} hold "
                         f"{float(best[row])}: scores must be finite, or -inf for an "
                         f"excluded document ({int(bad.sum())} quer(y/ies) of this block "
                         "affected)")


def _check_blocks(k: Any, query_chunk: Any, document_chunk: Any) -> tuple[int, int, int]:
    return (check_int(k, "k", minimum=1), check_int(query_chunk, "query_chunk", minimum=1),
            check_int(document_chunk, "document_chunk", minimum=1))


def _chunk_top(block: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``width`` best of each row of a block, ties broken by the smaller column
    (``topk`` picks among values tied at the boundary arbitrarily: those rows are
    sorted stably instead). A row is tied at the boundary exactly when its
    ``width + 1``-th best equals its ``width``-th, so one ``topk`` one wider finds them
    (a pass counting ``block >= boundary`` cost more than the ``topk`` itself)."""
    wide = min(width + 1, block.shape[1])
    v, i = torch.topk(block, wide, dim=1)
    if wide > width:
        tied = v[:, width] == v[:, width - 1]
        v, i = v[:, :width], i[:, :width]
        if bool(tied.any()):
            rows = tied.nonzero().flatten()
            sv, si = torch.sort(block[rows], dim=1, descending=True, stable=True)
            v[rows], i[rows] = sv[:, :width], si[:, :width]
    else:  # the whole row: order it stably
        v, i = torch.sort(block, dim=1, descending=True, stable=True)
    return v, i.long()


def _ordered(values: torch.Tensor, indices: torch.Tensor, k: int
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` best of each row, by value (descending) then index (ascending)."""
    order = torch.argsort(indices, dim=1, stable=True)
    values, indices = values.gather(1, order), indices.gather(1, order)
    order = torch.argsort(values, dim=1, descending=True, stable=True)[:, :k]
    return values.gather(1, order), indices.gather(1, order)


def _device(device: Any) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


# --------------------------------------------------------------------------------------
# Hard-negative mining
# --------------------------------------------------------------------------------------

def _embed_texts(embedding: Any, texts: Any, view: int, name: str) -> np.ndarray:
    """Embeddings of ``texts`` (strings) by a fitted estimator (its ``view``), a callable
    ``f(texts) -> array``, or the rows themselves when they are already embeddings."""
    if not is_text(texts):
        if embedding is not None:
            raise ValueError(f"{name} are embeddings already; embedding= is for texts")
        return _float_rows(texts, name)
    if embedding is None:
        raise ValueError(f"{name} are texts: give embedding= (a fitted estimator, or a "
                         "callable texts -> array) to embed them")
    texts = list(texts)
    if hasattr(embedding, "transform_view") and len(embedding.input_spec_.views) > 1:
        out = embedding.transform_view(texts, view=view)
    elif hasattr(embedding, "transform"):
        out = embedding.transform(texts)
    elif callable(embedding):
        out = embedding(texts)
    else:
        raise ValueError(f"embedding must be a fitted estimator, a callable texts -> array, or "
                         f"None; got {describe(embedding)}")
    return _float_rows(out, f"the embeddings of {name}")


def _float_rows(x: Any, name: str) -> np.ndarray:
    rows = np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x, dtype=np.float32)
    if rows.ndim != 2 or not len(rows):
        raise ValueError(f"{name} must be a non-empty 2-D array of embeddings; got "
                         f"{describe(x)}")
    if not np.isfinite(rows).all():
        raise ValueError(f"{name} contain NaN or infinite values")
    return rows


def _row_ids(arrays: list[np.ndarray], chunk: int = 65536) -> np.ndarray:
    """Ids of the rows of float32 arrays of one width, taken as one stack: equal rows
    (by value) get equal ids. A 64-bit hash per row, grouped, then every row checked
    against its group's first row, so the ids are exact; memory stays ``O(n)`` beyond
    the rows (``np.unique(axis=0)`` on the stack sorts copies of all of them: 550 MB
    for three arrays of 200,000 x 64, against 100 MB here). A collision, which the check
    would catch, falls back to that sort."""
    width = arrays[0].shape[1]
    offsets = np.cumsum([0] + [len(a) for a in arrays])
    weights = np.random.default_rng(0).integers(1, 2**63, size=width, dtype=np.uint64) | 1

    def hashes(a: np.ndarray) -> np.ndarray:
        out = np.empty(len(a), np.uint64)
        for i in range(0, len(a), chunk):
            bits = (a[i:i + chunk] + np.float32(0)).view(np.uint32)  # -0.0 as 0.0
            out[i:i + chunk] = (bits.astype(np.uint64) * weights).sum(1)  # mod 2**64
        return out

    def rows(index: np.ndarray) -> np.ndarray:
        part = np.searchsorted(offsets, index, side="right") - 1
        out = np.empty((len(index), width), np.float32)
        for k, a in enumerate(arrays):
            at = part == k
            out[at] = a[index[at] - offsets[k]]
        return out

    _, first, ids = np.unique(np.concatenate([hashes(a) for a in arrays]),
                              return_index=True, return_inverse=True)
    ids = ids.reshape(-1)
    for i in range(0, len(ids), chunk):
        index = np.arange(i, min(len(ids), i + chunk))
        if not np.array_equal(rows(index), rows(first[ids[index]])):
            return np.unique(np.concatenate(arrays), axis=0, return_inverse=True)[1].reshape(-1)
    return ids


class _Units(NamedTuple):
    """Corpus rows grouped into units of identical rows: each unit is searched once (by
    its first row) and stands for all its rows, in index order."""

    first: np.ndarray  # (u,) each unit's smallest row index, ascending
    members: np.ndarray  # the rows, unit by unit, each unit's in ascending order
    starts: np.ndarray  # (u,) where each unit's rows begin in ``members``
    sizes: np.ndarray  # (u,)

    @property
    def merged(self) -> bool:
        """Whether some unit holds more than one row."""
        return len(self.first) < len(self.members)

    @classmethod
    def of(cls, keys: np.ndarray) -> _Units:
        """Units of the rows with equal ``keys``."""
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        position = np.empty_like(order)
        position[order] = np.arange(len(order))
        unit = position[inverse.reshape(-1)]
        members = np.argsort(unit, kind="stable")
        sizes = np.bincount(unit, minlength=len(order))
        return cls(first[order], members, np.cumsum(sizes) - sizes, sizes)

    def expand(self, values: np.ndarray, ranked: np.ndarray, width: int, slack: int,
               allowed: Any) -> tuple[np.ndarray, np.ndarray]:
        """Ranked units (``-inf``/``-1`` where none) as ranked rows: every row of a unit
        takes its score; the rows ``allowed(queries, rows)`` keeps (at most ``slack`` of
        a query's first ``width + slack`` rows are not), ordered by score (descending)
        then row index, the first ``width`` per query (``-inf``/``-1`` padding).

        Exact for identical rows, which share their unit's one score: a unit left out
        of a query's top units scores at most the last one kept and its rows have larger
        indices than the first rows of the kept units of that score."""
        valid = np.isfinite(values) & (ranked >= 0)
        need = width + max(0, slack)
        counts = np.where(valid, np.minimum(self.sizes[np.clip(ranked, 0, None)], need), 0)
        # the units that can reach a query's first ``need`` rows: those before the one
        # where the count reaches ``need``, and any of its score
        reach = np.cumsum(counts, axis=1) - counts < need
        boundary = np.where(reach, values, np.inf).min(1, keepdims=True)
        counts = np.where(reach | (values == boundary), counts, 0)
        flat = counts.reshape(-1)
        entry = np.repeat(np.arange(flat.size), flat)
        offset = np.arange(entry.size) - np.repeat(np.cumsum(flat) - flat, flat)
        rows = self.members[self.starts[ranked.reshape(-1)[entry]] + offset]
        scores = values.reshape(-1)[entry]
        query = entry // values.shape[1]
        keep = allowed(query, rows)
        query, rows, scores = query[keep], rows[keep], scores[keep]
        order = np.lexsort((rows, -scores, query))
        query, rows, scores = query[order], rows[order], scores[order]
        place = np.arange(len(query)) - np.searchsorted(query, query)
        kept = place < width
        out_values = np.full((len(values), width), -np.inf, dtype=values.dtype)
        out_rows = np.full((len(values), width), -1, dtype=np.int64)
        out_values[query[kept], place[kept]] = scores[kept]
        out_rows[query[kept], place[kept]] = rows[kept]
        return out_values, out_rows


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)


def mine_hard_negatives(anchors: Any, positives: Any, corpus: Any = None, *,
                        embedding: Any = None, n_negatives: int = 4,
                        rank_window: tuple[int, int] = (0, 50),
                        relative_margin: float | None = None,
                        groups: Any = None, corpus_groups: Any = None,
                        query_chunk: int = 1024, document_chunk: int = 65536,
                        device: Any = "auto") -> Any:
    r"""The hardest negatives of each (anchor, positive) pair in a corpus, by cosine
    similarity of an embedding, with false-negative filters.

    For anchor :math:`a_i` with positive :math:`p_i`, the corpus is ranked by
    :math:`\cos(a_i, c_j)`; candidates that are the positive's duplicates (the same
    text, or the same embedding row when no texts are given), the anchor's duplicates,
    and members of the pair's group are never negatives. Of the rest, ranks
    :math:`p+1 .. q` form the window (``rank_window=(p, q)``: skipping the ``p`` most
    similar, as B3 does, Thirukovalluru et al. 2025, Sec. 3); with
    ``relative_margin=m`` only candidates with :math:`\cos(a_i, c_j) < m \cos(a_i, p_i)`
    stay (NV-Retriever's "TopK-PercPos",
    Moreira et al. 2024, Sec. 4.1, ``m = 0.95``); the ``n_negatives`` most similar of
    those are the negatives, hardest first.

    The search is chunked (:func:`top_k_search`): memory is ``O(query_chunk x
    document_chunk)`` whatever the corpus (``benchmarks/bench_text.py`` mines a
    1,000,000 x 1,000,000 search). The result is deterministic (ties go to the smaller
    corpus index).

    Parameters
    ----------
    anchors, positives : list of str, or array-like of shape (n, d)
        The pairs: texts (embedded by ``embedding``), or embeddings.
    corpus : list of str, array-like of shape (m, d), or None
        Where negatives come from; ``None``: the positives themselves (in-corpus
        mining).
    embedding : fitted estimator, callable or None
        What embeds texts: a fitted skcontrast estimator (anchors by view 0, positives
        and corpus by view 1 when it has two), a teacher ``f(texts) -> (n, d)``, or
        ``None`` when embeddings are given.
    n_negatives : int, default=4
    rank_window : (int, int), default=(0, 50)
        ``(p, q)``: candidate ranks ``p + 1 .. q`` (after the duplicates and the group's
        members are left out).
    relative_margin : float in (0, 1] or None, default=None
        Keep candidates scoring below ``relative_margin`` x the positive's score.
    groups, corpus_groups : array-like or None
        Group ids of the pairs and of the corpus items (e.g. the concept an item names):
        a candidate of the pair's group is never its negative. ``corpus_groups``
        defaults to ``groups`` when the corpus is the positives.
    query_chunk, document_chunk : int
        Block sizes of the search.
    device : str or torch.device, default='auto'
        Where the similarities are computed (``'auto'``: CUDA if available).

    Returns
    -------
    sklearn.utils.Bunch
        ``indices`` ``(n, n_negatives)`` corpus indices, ``-1`` where fewer were found;
        ``scores`` their similarities; ``positive_scores`` ``(n,)``; ``complete`` (the
        pairs with all their negatives); and, for texts, ``table``: an object array
        ``(n_complete, 2 + n_negatives)`` of (anchor, positive, negatives...) rows of the
        complete pairs, ready for the estimators' hard-negative columns. Pairs that found
        fewer negatives are left out of ``table`` with a warning saying how many.

    Examples
    --------
    >>> import numpy as np
    >>> from skcontrast.text import mine_hard_negatives
    >>> Z = np.eye(4)[[0, 1, 2, 3]] + 0.1
    >>> mined = mine_hard_negatives(Z, Z, n_negatives=2, rank_window=(0, 3), device="cpu")
    >>> mined.indices.shape
    (4, 2)
    """
    import warnings

    from sklearn.utils import Bunch

    from ._validation import check_real

    n_negatives = check_int(n_negatives, "n_negatives", minimum=1)
    window = rank_window
    if not (isinstance(window, tuple | list) and len(window) == 2
            and all(isinstance(w, numbers.Integral) and not isinstance(w, bool)
                    for w in window) and window[0] >= 0
            and window[0] + n_negatives <= window[1]):
        raise ValueError(f"rank_window must be (p, q) with 0 <= p and p + n_negatives <= q "
                         f"(n_negatives={n_negatives}); got {describe(rank_window)}")
    p, q = int(window[0]), int(window[1])
    if relative_margin is not None:
        relative_margin = check_real(relative_margin, "relative_margin", low=0.0, high=1.0,
                                     low_open=True)
    texts = is_text(anchors)
    if texts != is_text(positives) or (corpus is not None and is_text(corpus) != texts):
        raise ValueError("anchors, positives and corpus must all be texts or all embeddings")
    if texts:
        anchor_texts = text_table(anchors, "anchors")[:, 0]
        positive_texts = text_table(positives, "positives")[:, 0]
        corpus_texts = positive_texts if corpus is None else text_table(corpus, "corpus")[:, 0]
    A = _embed_texts(embedding, anchors, 0, "anchors")
    P = _embed_texts(embedding, positives, 1, "positives")
    C = P if corpus is None else _embed_texts(embedding, corpus, 1, "corpus")
    if len(A) != len(P):
        raise ValueError(f"anchors ({len(A)}) and positives ({len(P)}) must pair up")
    if A.shape[1] != C.shape[1]:
        raise ValueError(f"anchors have {A.shape[1]} dimensions, the corpus {C.shape[1]}")
    group_of = None if groups is None else np.asarray(groups)
    corpus_group = np.asarray(corpus_groups) if corpus_groups is not None else (
        group_of if corpus is None else None)
    if (group_of is None) != (corpus_group is None):
        raise ValueError("give groups and corpus_groups together (corpus_groups may be left "
                         "out when the corpus is the positives)")
    if group_of is not None and corpus_group is not None and (
            len(group_of) != len(A) or len(corpus_group) != len(C)):
        raise ValueError(f"groups needs one id per pair ({len(A)}) and corpus_groups one per "
                         f"corpus item ({len(C)})")
    where = _device(device)
    a = _unit(torch.from_numpy(A)).to(where)
    c = _unit(torch.from_numpy(C)).to(where)
    positive = (a * _unit(torch.from_numpy(P)).to(where)).sum(1)
    # duplicates of the positive (or of the anchor) in the corpus: the same text, or the
    # same embedding row
    if texts:
        keys = np.unique(np.concatenate([positive_texts, anchor_texts, corpus_texts]),
                         return_inverse=True)[1]
    else:
        keys = _row_ids([P, A, C])
    keys = keys.reshape(-1)
    positive_key, anchor_key, corpus_key = keys[:len(A)], keys[len(A):2 * len(A)], \
        keys[2 * len(A):]
    # the most any pair loses to duplicates and its group, so that the window stays full
    blocked = np.bincount(corpus_key, minlength=int(keys.max()) + 1)
    lost = blocked[positive_key] + blocked[anchor_key]
    if corpus_group is not None and group_of is not None:
        ids, counts = np.unique(corpus_group, return_counts=True)
        at = np.searchsorted(ids, group_of).clip(0, len(ids) - 1)
        lost = lost + np.where(ids[at] == group_of, counts[at], 0)
    depth = min(len(C), q + int(lost.max(initial=0)))
    n = len(A)
    group_key = None if group_of is None else np.unique(
        np.concatenate([group_of, corpus_group]), return_inverse=True)[1].reshape(-1)
    # identical corpus rows are one unit, scored once: a matrix product can give two
    # copies of a row different last bits in different blocks, and then the larger
    # index could rank first
    units = _Units.of(corpus_key)
    rep = units.first  # each unit's smallest corpus index, ascending
    n_units = len(rep)
    # a unit's group, or -1 when its rows are in several groups (never left out whole)
    unit_group = None
    if group_key is not None:
        rows_group = group_key[n:][units.members]
        low = np.minimum.reduceat(rows_group, units.starts)
        high = np.maximum.reduceat(rows_group, units.starts)
        unit_group = np.where(low == high, low, -1)
    # few exclusions per anchor: search the top ``depth`` and filter after; many (large
    # groups): mask them inside each block instead
    in_block = depth - q > 256
    pk, ak, ck = (torch.from_numpy(k).to(where) for k in (positive_key, anchor_key,
                                                           corpus_key[rep]))
    qg = None if group_key is None else torch.from_numpy(group_key[:n]).to(where)
    ug = None if unit_group is None else torch.from_numpy(unit_group).to(where)
    c_rep = c[torch.from_numpy(rep).to(where)] if units.merged else c

    def scores(qi: torch.Tensor, dj: torch.Tensor) -> torch.Tensor:
        qi, dj = qi.to(where), dj.to(where)
        block = a[qi] @ c_rep[dj].T  # each unit once, whatever the block
        if not in_block:
            return block
        out = (pk[qi][:, None] == ck[dj][None, :]) | (ak[qi][:, None] == ck[dj][None, :])
        if qg is not None and ug is not None:
            out |= qg[qi][:, None] == ug[dj][None, :]
        return block.masked_fill(out, float("-inf"))

    def allowed(queries: np.ndarray, corpus_rows: np.ndarray) -> np.ndarray:
        """Rows not of the pair's group (a unit may span groups)."""
        if group_key is None:
            return np.ones(len(corpus_rows), dtype=bool)
        return group_key[n + corpus_rows] != group_key[queries]

    _, query_chunk, document_chunk = _check_blocks(1, query_chunk, document_chunk)
    positive_np = positive.cpu().numpy()
    indices = np.full((n, n_negatives), -1, dtype=np.int64)
    found = np.full((n, n_negatives), np.nan, dtype=np.float32)
    for rows, values, ranked in _top_k_blocks(scores, n, n_units,
                                              min(n_units, max(1, q if in_block else depth)),
                                              query_chunk, document_chunk):
        if not in_block:  # leave out the units that repeat the positive or the anchor
            at = rep[np.clip(ranked, 0, None)]
            out = (corpus_key[at] == positive_key[rows, None]) | \
                (corpus_key[at] == anchor_key[rows, None])
            values = np.where(out, -np.inf, values)
        if units.merged or group_key is not None:  # else the ranked units are the rows
            values, ranked = units.expand(values, ranked, q, depth - q,
                                          lambda i, j, first=rows.start: allowed(i + first, j))
        valid = np.isfinite(values)
        rank = np.cumsum(valid, axis=1)  # 1-based rank among the allowed candidates
        keep = valid & (rank > p) & (rank <= q)
        if relative_margin is not None:
            keep &= values < relative_margin * positive_np[rows, None]
        width = min(n_negatives, keep.shape[1])  # a corpus smaller than n_negatives
        order = np.argsort(~keep, axis=1, kind="stable")[:, :width]
        picked = np.take_along_axis(keep, order, 1)
        indices[rows, :width] = np.where(picked, np.take_along_axis(ranked, order, 1), -1)
        found[rows, :width] = np.where(picked, np.take_along_axis(values, order, 1), np.nan)
    chosen = indices >= 0
    complete = chosen.all(1)
    out = Bunch(indices=indices, scores=found,
                positive_scores=positive_np.astype(np.float32), complete=complete)
    if not complete.all():
        warnings.warn(f"{int((~complete).sum())} of {n} pairs found fewer than {n_negatives} "
                      f"negatives in rank_window={tuple(rank_window)}"
                      + (f" below relative_margin={relative_margin}" if relative_margin
                         is not None else "")
                      + "; they are left out of the table (widen the window, lower "
                      "n_negatives or relax the margin)", UserWarning, stacklevel=2)
    if texts:
        kept = np.flatnonzero(complete)
        table = np.empty((len(kept), 2 + n_negatives), dtype=object)
        table[:, 0], table[:, 1] = anchor_texts[kept], positive_texts[kept]
        table[:, 2:] = corpus_texts[indices[kept]] if len(kept) else table[:, 2:]
        out.table = table
    return out


# --------------------------------------------------------------------------------------
# Hybrid retrieval: learned + lexical
# --------------------------------------------------------------------------------------

LEXICAL = ("tfidf", "bm25")


class HybridRetriever(BaseEstimator):
    r"""Search that fuses a learned similarity with a lexical one.

    The score of document :math:`d` for query :math:`q` is

    .. math:: s(q, d) = (1 - w) \cos(f(q), f(d)) + w\, \ell(q, d)

    with :math:`f` the ``estimator``'s embedding (queries by view 0, documents by view 1
    for a paired model) and :math:`\ell` a lexical score: the cosine of TF-IDF vectors
    (``'tfidf'``, sublinear term frequency) or BM25 (``'bm25'``, Robertson & Zaragoza,
    2009, with ``k1`` and ``b``; divided by each query's best score so that it lies in
    [0, 1]), on character n-grams (``analyzer='char_wb'``) or words. ``weight=1`` is the
    lexical search alone (the baseline a text user tries first), ``weight=0`` the learned
    one alone; ``GridSearchCV`` tunes ``weight`` by :meth:`score`.

    Searches run in blocks of queries and documents (:func:`top_k_search`), so a corpus
    of 1,000,000 documents needs memory for its embeddings and its sparse lexical
    matrix, not for a query-by-corpus matrix.

    Parameters
    ----------
    estimator : fitted or unfitted skcontrast estimator, or None
        The learned embedding; ``None``: lexical search alone (``weight`` must be 1).
    weight : float in [0, 1], default=0.5
        The lexical score's share.
    lexical : {'tfidf', 'bm25'}, default='tfidf'
    analyzer : {'char_wb', 'char', 'word'}, default='char_wb'
    ngram_range : tuple, default=(2, 4)
        Character n-gram lengths (words: use ``(1, 1)`` or ``(1, 2)``).
    prefit : bool, default=False
        ``True``: ``estimator`` is fitted already and :meth:`fit` fits the lexical part
        only (``clone`` keeps the fitted estimator, so a grid search over ``weight`` does
        not retrain it).
    k1, b : float, default=1.2, 0.75
        BM25's term-frequency saturation and length normalisation.
    query_chunk, document_chunk : int, default=1024, 65536
        Block sizes of the search.

    Examples
    --------
    >>> from skcontrast.text import HybridRetriever
    >>> pairs = [("red heart", "rotes herz"), ("thumbs up", "daumen hoch")] * 4
    >>> lexical = HybridRetriever(weight=1.0).fit(pairs)
    >>> lexical.index(["rotes herz", "daumen hoch"]).search(["red heart"], k=1)[1]
    array([[0]])
    """

    def __init__(self, estimator: Any = None, *, weight: float = 0.5, lexical: str = "tfidf",
                 analyzer: str = "char_wb", ngram_range: tuple = (2, 4), prefit: bool = False,
                 k1: float = 1.2, b: float = 0.75, query_chunk: int = 1024,
                 document_chunk: int = 65536) -> None:
        store_params(self, locals())

    def __sklearn_clone__(self) -> HybridRetriever:
        from sklearn.base import clone

        params = self.get_params(deep=False)
        estimator = params.pop("estimator")
        if not self.prefit and estimator is not None:
            estimator = clone(estimator)
        return type(self)(estimator=estimator, **params)

    def _check(self) -> float:
        from ._validation import check_real

        weight = check_real(self.weight, "weight", low=0.0, high=1.0)
        check_choice(self.lexical, "lexical", LEXICAL)
        check_choice(self.analyzer, "analyzer", ("char_wb", "char", "word"))
        if self.estimator is None and weight != 1.0:
            raise ValueError(f"weight={self.weight} gives the learned similarity a share, but "
                             "estimator is None: give an estimator, or weight=1.0 for "
                             "lexical search alone")
        return weight

    def fit(self, X: Any, y: Any = None) -> HybridRetriever:
        """Fit the learned part on the pairs ``X`` (unless ``prefit``) and the lexical
        vocabulary (and document frequencies) on all their texts."""
        from sklearn.base import clone
        from sklearn.feature_extraction.text import TfidfVectorizer

        self._check()
        table = text_table(X, "X")
        if self.estimator is not None:
            if self.prefit:
                from sklearn.utils.validation import check_is_fitted

                check_is_fitted(self.estimator)
                self.estimator_ = self.estimator
            else:
                self.estimator_ = clone(self.estimator).fit(X, y)
        else:
            self.estimator_ = None
        low, high = _ngram_range(self.ngram_range)
        self.vectorizer_ = TfidfVectorizer(
            analyzer=self.analyzer, ngram_range=(low, high), sublinear_tf=True,
            norm="l2" if self.lexical == "tfidf" else None,
            use_idf=self.lexical == "tfidf").fit(table.reshape(-1))
        if self.lexical == "bm25":
            counts = self.vectorizer_.transform(table.reshape(-1))
            frequency = np.bincount(counts.indices, minlength=counts.shape[1])
            n = counts.shape[0]
            self.idf_ = np.log1p((n - frequency + 0.5) / (frequency + 0.5))
        return self

    # -- the two similarities ------------------------------------------------------------

    def _learned(self, texts: list[str], view: int) -> np.ndarray | None:
        if self.estimator_ is None or self._check() == 1.0:  # lexical alone
            return None
        est = self.estimator_
        if view == 1 and hasattr(est, "transform_view") and len(est.input_spec_.views) > 1:
            out = est.transform_view(texts, view=1)
        else:
            out = est.transform(texts)
        return np.asarray(out, dtype=np.float32)

    def _lexical_queries(self, texts: list[str]) -> Any:
        matrix = self.vectorizer_.transform(texts)
        if self.lexical == "bm25":
            matrix = matrix.copy()
            matrix.data = self.idf_[matrix.indices].astype(np.float64)  # binary query terms
        return matrix.tocsr()

    def _lexical_documents(self, texts: list[str]) -> Any:
        if self.lexical == "tfidf":
            return self.vectorizer_.transform(texts).tocsr()
        # BM25's saturated term frequencies of raw counts
        from sklearn.feature_extraction.text import CountVectorizer

        counts = CountVectorizer(analyzer=self.analyzer, ngram_range=self.vectorizer_.ngram_range,
                                 vocabulary=self.vectorizer_.vocabulary_).transform(texts)
        counts = counts.tocsr().astype(np.float64)
        lengths = np.asarray(counts.sum(1)).ravel()
        average = lengths.mean() if len(lengths) else 1.0
        row_length = np.repeat(lengths, np.diff(counts.indptr))
        k1, b = float(self.k1), float(self.b)
        counts.data = counts.data * (k1 + 1) / (
            counts.data + k1 * (1 - b + b * row_length / max(average, 1e-12)))
        return counts

    def index(self, documents: Any) -> HybridRetriever:
        """Embed and store the corpus that :meth:`search` searches."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "vectorizer_")
        self.documents_ = self._indexed(documents)
        return self

    def _indexed(self, documents: Any) -> tuple[torch.Tensor | None, Any]:
        """The corpus as searched: unit learned embeddings (or ``None``) and the sparse
        lexical rows."""
        texts = list(text_table(documents, "documents")[:, 0])
        learned = self._learned(texts, view=1)
        return (None if learned is None else _unit(torch.from_numpy(learned)),
                self._lexical_documents(texts))

    def search(self, queries: Any, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best documents of the indexed corpus for each query: their fused
        scores and indices, best first (ties: the smaller index)."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "documents_")
        return self._search(self.documents_, queries, k)

    def _search(self, documents: tuple[torch.Tensor | None, Any], queries: Any, k: int
                ) -> tuple[np.ndarray, np.ndarray]:
        weight = self._check()
        texts = list(text_table(queries, "queries")[:, 0])
        learned = self._learned(texts, view=0)
        q_dense = None if learned is None else _unit(torch.from_numpy(learned))
        q_sparse = self._lexical_queries(texts)
        d_dense, d_sparse = documents
        if weight < 1 and d_dense is None:
            raise ValueError(f"the corpus was indexed for lexical search alone (weight=1.0); "
                             f"weight={self.weight} needs the learned embeddings: call index "
                             "again")
        best: torch.Tensor | None = None
        if self.lexical == "bm25" and weight > 0:  # each query's best BM25 score
            top = top_k_search(lambda qi, dj: torch.from_numpy(
                (q_sparse[qi.numpy()] @ d_sparse[dj.numpy()].T).toarray()),
                len(texts), d_sparse.shape[0], 1, query_chunk=int(self.query_chunk),
                document_chunk=int(self.document_chunk))[0][:, 0]
            best = torch.from_numpy(np.where(top > 0, top, 1.0))

        def scores(qi: torch.Tensor, dj: torch.Tensor) -> torch.Tensor:
            out = torch.zeros(len(qi), len(dj))
            if weight < 1 and q_dense is not None and d_dense is not None:
                out += (1 - weight) * (q_dense[qi] @ d_dense[dj].T)
            if weight > 0:
                lexical = torch.from_numpy(
                    (q_sparse[qi.numpy()] @ d_sparse[dj.numpy()].T).toarray()).float()
                if best is not None:
                    lexical = lexical / best[qi][:, None].float()
                out += weight * lexical
            return out

        return top_k_search(scores, len(texts), d_sparse.shape[0], k,
                            query_chunk=int(self.query_chunk),
                            document_chunk=int(self.document_chunk))

    def score(self, X: Any, y: Any = None) -> float:
        """Recall@1 of the pairs ``X``: each first text searches the second texts of all
        pairs; a pair is found when its own second text (or one equal to it, or of its
        group ``y``) ranks first. The corpus given to :meth:`index` stays indexed."""
        from sklearn.utils.validation import check_is_fitted

        from .metrics import ranking_scores

        check_is_fitted(self, "vectorizer_")
        table = text_table(X, "X")
        groups = np.unique(table[:, 1], return_inverse=True)[1] if y is None else np.asarray(y)
        ranked = self._search(self._indexed(list(table[:, 1])), list(table[:, 0]), k=1)[1]
        return ranking_scores(ranked, groups, groups, k=1)["recall@1"]
