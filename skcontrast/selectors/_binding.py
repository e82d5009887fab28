"""Batch-binding (Kini et al. 2023, arXiv:2306.07960, Sec. 5.2, Alg. 1) and the Batch Interaction
Graph (Def. 4, Cor. 2.1).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from .._validation import check_int, describe, encode_labels, plain_label
from ._base import BatchSelector, check_index_batches, refuse_curating
from ._basic import ShuffledBatchSelector


def batch_interaction_graph(batches: Any, n: int) -> sp.csr_matrix:
    """The Batch Interaction Graph of Kini et al. 2023, Definition 4.

    Vertices are the ``n`` samples; ``u`` and ``v`` are adjacent if and only if some batch
    contains both.

    Parameters
    ----------
    batches : iterable of 1-D int arrays
        For example every batch of one or several epochs of a selector.
    n : int
        Number of samples.

    Returns
    -------
    scipy.sparse.csr_matrix of shape (n, n), bool
        Symmetric adjacency matrix without self-loops.

    Examples
    --------
    >>> from skcontrast.selectors import batch_interaction_graph
    >>> g = batch_interaction_graph([[0, 1], [1, 2]], n=4)
    >>> g.toarray().astype(int).tolist()
    [[0, 1, 0, 0], [1, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 0]]
    """
    n = check_int(n, "n", minimum=1)
    checked = check_index_batches(batches, n)
    rows = np.concatenate([np.repeat(b, b.size) for b in checked])
    cols = np.concatenate([np.tile(b, b.size) for b in checked])
    keep = rows != cols
    graph = sp.coo_matrix((np.ones(int(keep.sum()), dtype=bool), (rows[keep], cols[keep])),
                          shape=(n, n)).tocsr()
    graph.sum_duplicates()
    return graph.astype(bool)


class Corollary21(NamedTuple):
    """Outcome of :func:`check_corollary_2_1`; truthy when both conditions hold."""

    satisfied: bool
    disconnected_classes: list
    unlinked_class_pairs: list

    def __bool__(self) -> bool:
        return self.satisfied


def check_corollary_2_1(batches: Any, y: Any) -> Corollary21:
    """Check the conditions of Kini et al. 2023, Corollary 2.1, for a set of batches and labels.

    The global minimiser of mini-batch SupCon under UFM+ is unique and forms an
    orthogonal frame if and only if the Batch Interaction Graph ``G`` satisfies

    1. for every class ``c``, the subgraph ``G_c`` induced by its samples is connected;
    2. for every pair of classes, at least one edge joins ``G_c1`` and ``G_c2``.

    Parameters
    ----------
    batches : iterable of 1-D int arrays
    y : array-like of shape (n,)
        Labels of any type.

    Returns
    -------
    Corollary21
        ``(satisfied, disconnected_classes, unlinked_class_pairs)``, truthy when satisfied.

    Examples
    --------
    >>> from skcontrast.selectors import check_corollary_2_1
    >>> y = [0, 0, 1, 1, 0, 0, 2, 2]
    >>> bool(check_corollary_2_1([[0, 1, 2, 3], [4, 5, 6, 7]], y))
    False
    """
    classes, codes = encode_labels(y)
    graph = batch_interaction_graph(batches, len(codes))
    disconnected = []
    for c, label in enumerate(classes):
        members = np.flatnonzero(codes == c)
        if members.size > 1:
            n_parts, _ = connected_components(graph[members][:, members], directed=False)
            if n_parts > 1:
                disconnected.append(plain_label(label))
    one_hot = sp.csr_matrix((np.ones(len(codes)), (np.arange(len(codes)), codes)),
                            shape=(len(codes), len(classes)))
    links = (one_hot.T @ graph.astype(np.float64) @ one_hot).toarray() > 0
    unlinked = [(plain_label(classes[a]), plain_label(classes[b]))
                for a in range(len(classes)) for b in range(a + 1, len(classes))
                if not links[a, b]]
    return Corollary21(not disconnected and not unlinked, disconnected, unlinked)


class BindingSelector(BatchSelector):
    """Add one fixed *binding example* per class to every batch (Kini et al. 2023, Sec. 5.2, Alg.
    1).

    Wraps any selector. One example of each class is drawn once (from ``random_state``)
    and appended to every batch the wrapped selector yields, unless the batch already
    contains it, so every batch holds exactly one binding example per class. Whenever
    the wrapped batches cover every sample and each class has at least two samples, the
    result satisfies Corollary 2.1 in every epoch, even for a *fixed* partition: each
    class's samples are all linked through its binding example, and the binding
    examples link every pair of classes. Batches grow by at most the number of classes.

    Parameters
    ----------
    base_selector : BatchSelector, default=None
        The selector to wrap (it receives ``X`` and ``y``); ``None`` means
        ``ShuffledBatchSelector()``.
    random_state : int, numpy Generator or None, default=None
        Seed for the choice of binding examples.

    Attributes
    ----------
    binding_indices_ : ndarray
        The binding examples (set by the first ``split``), one per class in the order
        of the sorted classes.

    Examples
    --------
    >>> import numpy as np
    >>> from skcontrast.selectors import BindingSelector, FixedBatchSelector
    >>> y = np.repeat([0, 1, 2], 4)
    >>> sel = BindingSelector(FixedBatchSelector(batch_size=4, random_state=0), random_state=0)
    >>> batches = list(sel.split(np.zeros((12, 5)), y))
    >>> all(len(set(y[b])) == 3 for b in batches)
    True
    """

    def __init__(self, base_selector: BatchSelector | None = None, *,
                 random_state: Any = None) -> None:
        self.base_selector = base_selector
        self.random_state = random_state

    partitions = False  # the binding examples are in every batch

    @property
    def needs_embeddings(self) -> bool:
        return bool(self._base().needs_embeddings)

    def _base(self) -> BatchSelector:
        if self.base_selector is None:
            base = getattr(self, "_default_base", None)
            if base is None:
                base = self._default_base = ShuffledBatchSelector()
            return base
        if not isinstance(self.base_selector, BatchSelector):
            raise ValueError(f"base_selector must be a BatchSelector; got "
                             f"{describe(self.base_selector)}")
        refuse_curating(self.base_selector, self)
        return self.base_selector

    def epoch_batches(self, X: Any, y: Any = None, groups: Any = None, *,
                      loss: Any = None) -> list[np.ndarray]:
        if y is None:
            raise ValueError("BindingSelector needs the labels y: it adds one example of "
                             "every class to each batch")
        classes, codes = encode_labels(y)
        if len(codes) != len(X):
            raise ValueError(f"y has {len(codes)} labels but X has {len(X)} samples")
        self._claim_epoch()
        binding = self._binding(codes, len(classes))
        out = []
        for batch in self._base().epoch_batches(X, y, groups, loss=loss):
            extra = binding[~np.isin(binding, batch)]
            out.append(np.concatenate([batch, extra]).astype(np.int64))
        return out

    def largest_batch_size(self, n: int, y: Any = None) -> int | None:
        """The wrapped selector's largest batch plus one binding example per class of
        ``y`` (at most ``n`` over a wrapped selector whose batches hold distinct samples).

        The labels are required, as they are to make the batches: without them the number
        of classes, and so the growth, is unknown.
        """
        if y is None:
            raise ValueError("BindingSelector.largest_batch_size needs the labels y: each "
                             "batch grows by one binding example per class")
        base = self._base()
        size = base.largest_batch_size(n, y)
        if size is None:
            return None
        grown = size + len(encode_labels(y)[0])
        return min(grown, n) if base.partitions else grown

    def _binding(self, codes: np.ndarray, n_classes: int) -> np.ndarray:
        cached = getattr(self, "binding_indices_", None)
        if cached is not None and len(cached) == n_classes and \
                np.array_equal(codes[cached], np.arange(n_classes)):
            return cached
        rng = np.random.default_rng([self._seed(), 2**31])
        self.binding_indices_ = np.array(
            [rng.choice(np.flatnonzero(codes == c)) for c in range(n_classes)], dtype=np.int64)
        return self.binding_indices_

    def set_epoch(self, epoch: int) -> BindingSelector:
        super().set_epoch(epoch)
        self._base().set_epoch(epoch)
        return self

    def _n_batches(self, n, y):
        return self._base().get_n_splits(n, y)
