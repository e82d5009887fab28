"""Hybrid retrieval: a learned similarity fused with a lexical one (TF-IDF or BM25)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator

from .._tables import text_column, text_table
from .._validation import check_choice, describe, store_params
from ._mining import _unit
from ._search import top_k_search
from ._tokenize import _ngram_range

LEXICAL = ("tfidf", "bm25")
#: the weights ``weight='auto'`` chooses among: 0 (learned alone) to 1 (lexical alone)
AUTO_WEIGHTS = tuple(round(0.1 * i, 1) for i in range(11))


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
    one alone. ``weight='auto'`` (the default) chooses it for the user, on pairs held out
    from the training of the learned model (the model's own training pairs always favour
    the learned side): the weight of :data:`AUTO_WEIGHTS`, 0 and 1 among them, with the
    best recall@1 there, reported as ``weight_`` with every candidate's recall in
    ``weight_scores_``. Weights tied on recall@1 (where the lexical side matches nothing,
    as across scripts, most of them tie) are told apart by the mean reciprocal rank of
    each query's own document (``weight_mrr_``), and weights tied on both by the middle
    one: not the edge of a plateau, which the test pairs may fall off. A warning says
    when every weight ties (one held-out pair always does: its document is the only one
    searched) and when held-out pairs are pairs the model trained on (see ``X_val`` in
    :meth:`fit`). ``GridSearchCV`` tunes a numeric ``weight`` by :meth:`score` too.

    Searches run in blocks of queries and documents (:func:`top_k_search`), so a corpus
    of 1,000,000 documents needs memory for its embeddings and its sparse lexical
    matrix, not for a query-by-corpus matrix.

    Parameters
    ----------
    estimator : fitted or unfitted skcontrast estimator, or None
        The learned embedding; ``None``: lexical search alone (``weight`` must be 1 or
        ``'auto'``).
    weight : float in [0, 1] or 'auto', default='auto'
        The lexical score's share. ``'auto'``: chosen in :meth:`fit` on held-out pairs:
        ``X_val`` if given, else (for a model ``fit`` trains) a ``validation_fraction``
        of ``X``, split by group (``y``, or the pairs' first texts, so that no held-out
        query was trained on) and left out of the model's training. A ``prefit`` model
        needs ``X_val``: only its user knows which pairs it never saw.
    validation_fraction : float in (0, 1), default=0.1
        The share of ``X`` held out to choose ``weight='auto'`` when ``fit`` trains the
        model (and no ``X_val`` is given); the model trains on the rest.
    random_state : int, numpy Generator or None, default=0
        Draws that held-out split.
    lexical : {'tfidf', 'bm25'}, default='tfidf'
    analyzer : {'char_wb', 'char', 'word'}, default='char_wb'
    ngram_range : tuple, default=(2, 4)
        Character n-gram lengths (words: use ``(1, 1)`` or ``(1, 2)``).
    prefit : bool, default=False
        ``True``: ``estimator`` is fitted already and :meth:`fit` fits the lexical part
        only (``clone`` keeps the fitted estimator, so a grid search over ``weight`` does
        not retrain it). Pass the model's training pairs as ``X``: an estimator keeps no
        record of them, so ``X`` stands for them when ``weight='auto'`` checks ``X_val``.
    k1, b : float, default=1.2, 0.75
        BM25's term-frequency saturation and length normalisation.
    query_chunk, document_chunk : int, default=1024, 65536
        Block sizes of the search.

    Attributes
    ----------
    estimator_ : fitted estimator or None
        The learned model (``estimator`` itself when ``prefit``).
    weight_ : float
        The lexical share searches use: ``weight``, or the one ``'auto'`` chose.
    weight_scores_, weight_mrr_ : dict of float to float
        With ``weight='auto'``: each candidate weight's recall@1 and mean reciprocal rank
        on the held-out pairs.
    vectorizer_ : sklearn.feature_extraction.text.TfidfVectorizer
        The lexical side's vocabulary, fitted on every text of ``X``.

    Examples
    --------
    >>> from skcontrast.text import HybridRetriever
    >>> pairs = [("red heart", "rotes herz"), ("thumbs up", "daumen hoch")] * 4
    >>> lexical = HybridRetriever(weight=1.0).fit(pairs)
    >>> lexical.index(["rotes herz", "daumen hoch"]).search(["red heart"], k=1)[1]
    array([[0]])
    """

    def __init__(self, estimator: Any = None, *, weight: Any = "auto", lexical: str = "tfidf",
                 analyzer: str = "char_wb", ngram_range: tuple = (2, 4), prefit: bool = False,
                 validation_fraction: float = 0.1, random_state: Any = 0, k1: float = 1.2,
                 b: float = 0.75, query_chunk: int = 1024,
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
        """The weight searches use: ``weight``, or the one ``fit`` chose for ``'auto'``."""
        from .._validation import check_real

        check_choice(self.lexical, "lexical", LEXICAL)
        check_choice(self.analyzer, "analyzer", ("char_wb", "char", "word"))
        if self.weight == "auto":
            return float(getattr(self, "weight_", 1.0 if self.estimator is None else 0.5))
        weight = check_real(self.weight, "weight", low=0.0, high=1.0)
        if self.estimator is None and weight != 1.0:
            raise ValueError(f"weight={self.weight} gives the learned similarity a share, but "
                             "estimator is None: give an estimator, or weight=1.0 for "
                             "lexical search alone")
        return weight

    def fit(self, X: Any, y: Any = None, X_val: Any = None,
            y_val: Any = None) -> HybridRetriever:
        """Fit the learned part on the pairs ``X`` (unless ``prefit``) and the lexical
        vocabulary (and document frequencies) on all their texts; with ``weight='auto'``,
        choose the weight on held-out pairs (see ``weight``).

        Parameters
        ----------
        X : pairs of texts
        y : array-like of shape (n,) or None
            Groups of the pairs (pairs of one group are one concept: found when any of
            them ranks first), one per pair, passed on to the model's ``fit``.
        X_val : rows of two texts (query, document), or None
            Held-out pairs where ``weight='auto'`` is chosen, at least one (further
            columns, hard negatives, are not searched); never pairs the model trained on.
            A warning names how many are: pairs of ``X`` (both texts equal), which the
            model trains on, or, with ``prefit=True``, which stand for its training pairs.
            Another warning says when every weight ties on them (always for one pair).
        y_val : array-like of shape (n_val,) or None
            Groups of the held-out pairs, one per pair of ``X_val``; ``None``: pairs with
            equal documents are one group.

        Returns
        -------
        self : HybridRetriever
        """
        from sklearn.base import clone
        from sklearn.utils.validation import check_is_fitted

        from .._validation import check_real

        self._check()
        if self.weight != "auto":
            check_real(self.weight, "weight", low=0.0, high=1.0)
        table = text_table(X, "X")
        groups = _groups(y, len(table), "y", "X")
        held_out = _held_out(X_val, y_val)
        auto = self.weight == "auto" and self.estimator is not None
        if self.prefit and self.estimator is not None:
            check_is_fitted(self.estimator)
        train, train_y, trained = X, y, table
        if auto and held_out is None:
            if self.prefit:
                raise ValueError(
                    "weight='auto' chooses the weight on pairs the model never trained on; "
                    "with prefit=True only you know which: pass them, fit(X, X_val=...), "
                    "or give a numeric weight")
            kept, left = self._split(table, groups)
            train, train_y = table[kept], None if groups is None else groups[kept]
            held_out = (table[left], None if groups is None else groups[left])
            trained = table[kept]
        if auto:
            assert held_out is not None
            _warn_trained_on(held_out[0], trained, "X_val" if X_val is not None else None,
                             self.prefit)
        if self.estimator is None:
            self.estimator_ = None
        elif self.prefit:
            self.estimator_ = self.estimator
        else:
            self.estimator_ = clone(self.estimator).fit(train, train_y)
        self._fit_lexical(table)
        if self.estimator is None:
            self.weight_ = 1.0
        elif auto:
            assert held_out is not None
            self.weight_scores_, self.weight_mrr_ = self._weight_scores(*held_out)
            self.weight_ = _best_weight(self.weight_scores_, self.weight_mrr_)
            _warn_if_tied(self.weight_scores_, self.weight_mrr_, len(held_out[0]),
                          self.weight_)
        else:
            self.weight_ = float(self.weight)
        return self

    def _split(self, table: np.ndarray, y: np.ndarray | None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Rows kept for training and rows held out, whole groups on one side."""
        from sklearn.model_selection import GroupShuffleSplit

        from .._validation import check_real

        share = check_real(self.validation_fraction, "validation_fraction", low=0.0,
                           high=1.0)
        if not 0 < share < 1:
            raise ValueError(f"validation_fraction must lie in (0, 1); got "
                             f"{self.validation_fraction}")
        groups = np.unique(table[:, 0], return_inverse=True)[1] if y is None else y
        if len(np.unique(groups)) < 2:
            raise ValueError("weight='auto' holds out pairs of other groups than those it "
                             "trains on, and X holds one group: pass X_val, or give a "
                             "numeric weight")
        seed = self.random_state if not isinstance(self.random_state, np.random.Generator) \
            else int(self.random_state.integers(2**31))
        split = GroupShuffleSplit(n_splits=1, test_size=share, random_state=seed)
        kept, left = next(split.split(table, groups=groups))
        return kept, left

    def _weight_scores(self, table: np.ndarray,
                       y: Any) -> tuple[dict[float, float], dict[float, float]]:
        """Recall@1 of each weight of :data:`AUTO_WEIGHTS` on held-out pairs, as
        :meth:`score` counts it, and the mean reciprocal rank of each query's best
        document of its own group (its rank: documents of other groups scoring as high or
        higher, plus one), the two similarities computed once."""
        groups = np.unique(table[:, 1], return_inverse=True)[1] if y is None \
            else np.asarray(y)
        queries, documents = list(table[:, 0]), list(table[:, 1])
        learned_q = _unit(torch.from_numpy(self._learned(queries, 0, force=True)))
        learned_d = _unit(torch.from_numpy(self._learned(documents, 1, force=True)))
        lexical_q, lexical_d = self._lexical_queries(queries), \
            self._lexical_documents(documents)
        hits, reciprocal = np.zeros(len(AUTO_WEIGHTS)), np.zeros(len(AUTO_WEIGHTS))
        every = torch.from_numpy(groups)
        for start in range(0, len(queries), int(self.query_chunk)):
            rows = slice(start, start + int(self.query_chunk))
            learned = (learned_q[rows] @ learned_d.T).double()
            lexical = torch.from_numpy((lexical_q[rows] @ lexical_d.T).toarray())
            if self.lexical == "bm25":
                top = lexical.max(dim=1, keepdim=True).values
                lexical = lexical / torch.where(top > 0, top, torch.ones_like(top))
            own = torch.from_numpy(groups[rows])
            same = every[None, :] == own[:, None]
            for i, w in enumerate(AUTO_WEIGHTS):
                fused = (1 - w) * learned + w * lexical
                hits[i] += int((every[fused.argmax(dim=1)] == own).sum())
                found = fused.masked_fill(~same, -torch.inf).amax(dim=1, keepdim=True)
                above = ((fused >= found) & ~same).sum(dim=1)  # ties count against
                reciprocal[i] += float((1.0 / (1.0 + above.double())).sum())
        weights = [float(w) for w in AUTO_WEIGHTS]
        return ({w: float(h / len(queries)) for w, h in zip(weights, hits, strict=True)},
                {w: float(r / len(queries)) for w, r in zip(weights, reciprocal,
                                                             strict=True)})

    def _fit_lexical(self, table: np.ndarray) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer

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

    # -- the two similarities ------------------------------------------------------------

    def _learned(self, texts: list[str], view: int, force: bool = False) -> Any:
        if self.estimator_ is None or (self._check() == 1.0 and not force):  # lexical alone
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
        texts = text_column(documents, "documents")
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
        texts = text_column(queries, "queries")
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

        from ..metrics import ranking_scores

        check_is_fitted(self, "vectorizer_")
        table = text_table(X, "X")
        groups = np.unique(table[:, 1], return_inverse=True)[1] if y is None else np.asarray(y)
        ranked = self._search(self._indexed(list(table[:, 1])), list(table[:, 0]), k=1)[1]
        return ranking_scores(ranked, groups, groups, k=1)["recall@1"]


def _groups(y: Any, n: int, name: str, of: str) -> np.ndarray | None:
    """The groups ``y`` of the ``n`` pairs of ``of``, one per pair, or ``None``."""
    if y is None:
        return None
    groups = np.asarray(y)
    if groups.ndim != 1 or len(groups) != n:
        size = f"{len(groups)} entr{'y' if len(groups) == 1 else 'ies'}" \
            if groups.ndim == 1 else f"{groups.ndim}-D"
        raise ValueError(f"{name} must hold one group per pair of {of}, {n} of them; got "
                         f"{describe(y)} ({size})")
    return groups


def _held_out(X_val: Any, y_val: Any) -> tuple[np.ndarray, np.ndarray | None] | None:
    """``X_val`` as a table of held-out pairs (columns beyond the second, hard
    negatives, are not searched) with their groups ``y_val``, refused here, naming the
    argument, when they are not pairs or the groups do not match them: inside the
    search they failed with torch's and numpy's index errors."""
    if X_val is None:
        if y_val is not None:
            raise ValueError(f"y_val gives the groups of held-out pairs, but X_val is None; "
                             f"got y_val={describe(y_val)}: pass X_val with it, or leave "
                             "y_val out")
        return None
    table = text_table(X_val, "X_val")
    if table.shape[1] < 2 or not len(table):
        form = "no row" if not len(table) else \
            f"{len(table)} single texts (X_val[0] = {table[0, 0]!r})"
        raise ValueError(f"X_val must hold held-out pairs, rows of two texts (query, "
                         f"document); got {form}: pass X_val=[(query, document), ...]")
    return table, _groups(y_val, len(table), "y_val", "X_val")


def _warn_trained_on(held_out: np.ndarray, trained: np.ndarray, name: str | None,
                     prefit: bool) -> None:
    """Warn when held-out pairs (both texts) are pairs the model trained on: those
    ``fit`` trains it on, or, for a ``prefit`` model, whose estimator keeps no record of
    its training pairs, the pairs of ``X``. ``name``: ``'X_val'``, or ``None`` for the
    pairs held out of ``X``."""
    import warnings

    seen = set(map(tuple, trained[:, :2].tolist()))
    repeated = sum(tuple(row) in seen for row in held_out[:, :2].tolist())
    if not repeated:
        return
    source = f"held-out pairs ({name})" if name else "pairs held out of X"
    whose = ("pairs of X, which a prefit model is taken to have trained on (an estimator "
             "keeps no record of its training pairs; if this one never saw them, the "
             "warning does not apply)" if prefit else
             "pairs the model trained on (pairs of X)")
    warnings.warn(f"{repeated} of {len(held_out)} {source} are {whose}: weight='auto' "
                  "chosen on them favours the learned side, which has seen them. Hold "
                  "them out of X, or give a numeric weight", UserWarning, stacklevel=3)


def _warn_if_tied(recall: dict[float, float], mrr: dict[float, float], n: int,
                  chosen: float) -> None:
    """Warn when every candidate weight ties on the ``n`` held-out pairs: the weight
    chosen is then the middle one by rule, not by the data."""
    import warnings

    scores = {(recall[w], mrr[w]) for w in recall}
    if len(scores) > 1:
        return
    (r, m), = scores
    why = "one held-out pair, whose document is the only one searched and ranks first " \
        "for every weight" if n == 1 else f"{n} held-out pairs that every weight ranks alike"
    warnings.warn(f"weight='auto' chose weight_={chosen} among tied weights: {why} "
                  f"(recall@1 {r:.3f}, mean reciprocal rank {m:.3f} for each), so the data "
                  "did not choose it; hold out more (or harder) pairs (X_val, or a larger "
                  "validation_fraction), or give a numeric weight", UserWarning, stacklevel=3)


def _best_weight(recall: dict[float, float], mrr: dict[float, float]) -> float:
    """The weight of the best recall@1, ties told apart by the mean reciprocal rank, and
    weights tied on both by the middle one (the lower of two middles)."""
    best = max((recall[w], mrr[w]) for w in recall)
    tied = sorted(w for w in recall if (recall[w], mrr[w]) == best)
    return tied[(len(tied) - 1) // 2]
