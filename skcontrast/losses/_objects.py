"""The losses as objects: the base class :class:`Loss` of every loss's object,
:class:`FunctionLoss`, a bare callable as one, and :class:`LossBatch`, a batch as a loss
sees it.

A loss object holds the loss's parameters (its temperature, fixed or learned, the
balance weights of Sors et al. 2021, arXiv:2112.11743, Eq. 5, ``chunk_size`` and its own options)
and computes the loss by calling its function of :mod:`skcontrast.losses`, so nothing is computed
twice. It is what training, selection and memory share: an estimator trains with it, an
adaptive selector scores batches with the *live* copy of it (the learned temperature
of the moment), and a memory asks it how its anchors meet a queue or where its
log-sum-exps are.

What each loss declares:

``labelled``
    ``False``: it takes two views ``(u, v)``; ``True``: embeddings and labels ``(z, y)``
    (on paired data each pair is then its own class).
``tileable``
    It takes ``chunk_size`` (tiled log-sum-exps or sums, O(B) memory).
``lse_layout(structure)``
    Where its per-anchor log-sum-exps are, as its function hands them to a
    ``denominator`` (what SogCLR's moving averages replace), or ``None``.
:attr:`Loss.queue_terms`
    Its anchors against a queue of stored embeddings (XBM), or ``None``.
:meth:`Loss.affinity`
    The pair weights that selection clusters on (Cho et al. 2023, arXiv:2307.05906, Eq. 5 for the
    InfoNCE family).

A custom loss is a subclass: set ``function`` (a function ``f(a, b, **params)`` that
returns the loss, or :class:`~skcontrast.losses.LossTerms` with ``return_terms=True``)
and write an ``__init__`` that stores its parameters. See the user guide, "Losses".

Each built-in loss is one module holding its function and its class (``_info_nce.py``:
:func:`info_nce` and :class:`InfoNCE`, ...); the softmax losses derive from
``_softmax._SoftmaxLoss``. A new built-in loss is one such module, its class added to
``REGISTERED`` in ``_registry.py`` and its names exported in ``__init__.py``.

**A batch's layout travels in one object.** :class:`LossBatch` holds a batch's
embeddings with its ``structure`` (pairs and their hard-negative columns, single
labelled views, two crops), its labels, its rows of the training data, the content ids
of its items and their groups. Everything that computes a loss on a batch takes one,
built once by whoever knows the batch (the estimators' criterion, the simulation, a
curating selector from its super-batch, :meth:`Loss.score_batches` from selection
embeddings), and reads the layout from it alone: :meth:`Loss.batch_terms` (training,
curation's row losses, the memories' batch term), :meth:`Loss.sub_batch_losses` (many
index subsets of one batch: batch scoring and curation's sub-batches),
:meth:`LossBatch.anchor_rows` (what a memory's queue stores) and
:meth:`LossBatch.pair_views` (where a single view is its own positive).
"""

from __future__ import annotations

import copy
import functools
import inspect
import numbers
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple, TypeVar

import numpy as np
import torch
from sklearn.base import BaseEstimator

from .._validation import describe, param_names, store_params
from ._batched import batch_values, pair_affinity
from ._core import LossTerms, as_label_tensor, pair_labels

#: A learned temperature stays above this (CLIP caps its inverse at 100).
MIN_LEARNED_TEMPERATURE = 0.01

#: How a batch's rows reach a loss (:attr:`LossBatch.structure`): two views per item (and
#: hard-negative columns), one view per labelled item, or two augmented crops of each
#: labelled item.
STRUCTURES = ("pairs", "single", "crops")

_Rows = TypeVar("_Rows", torch.Tensor, np.ndarray)


class LossBatch(NamedTuple):
    """One batch as a loss sees it: the one carrier of a batch's layout.

    Attributes
    ----------
    embeddings : torch.Tensor
        ``(B, 2 + k, d)`` for ``'pairs'`` (anchor, positive, ``k`` hard-negative
        columns), or ``(B, d)`` pairs of single views, each its own positive;
        ``(B, d)`` for ``'single'``; ``(B, 2, d)`` for ``'crops'``.
    structure : {'pairs', 'single', 'crops'}, default='pairs'
    labels : torch.Tensor or None
        ``(B,)`` labels of a label loss's items (``'single'`` and ``'crops'``).
    index : torch.Tensor or None
        ``(B,)`` the items' rows of the training data (a guide's embeddings are indexed by
        them; a memory remembers by them).
    content : torch.Tensor or None
        ``(B, 2 + k)`` content ids of each item's columns
        (:meth:`~skcontrast.losses.FalseNegativeGuard.content_ids`), for a
        ``same_content`` guard.
    groups : torch.Tensor or None
        ``(B,)`` each item's group, for a ``same_group`` guard.
    """

    embeddings: torch.Tensor
    structure: str = "pairs"
    labels: torch.Tensor | None = None
    index: torch.Tensor | None = None  # type: ignore[assignment]  # a field, not tuple.index
    content: torch.Tensor | None = None
    groups: torch.Tensor | None = None

    @classmethod
    def of(cls, embeddings: torch.Tensor, labels: torch.Tensor | None, labelled: bool,
           **fields: Any) -> LossBatch:
        """The batch of embeddings laid out as selection and curation hand them over,
        ``(B, 2, d)`` or ``(B, d)``: with ``labels`` and a label loss (``labelled``,
        :attr:`Loss.labelled`) two crops or single views of labelled items, else pairs
        (a single view then its own positive)."""
        if labels is not None and labelled:
            structure = "crops" if embeddings.ndim == 3 else "single"
            return cls(embeddings, structure, labels, **fields)
        return cls(embeddings, "pairs", None, **fields)

    @staticmethod
    def pair_views(x: _Rows) -> tuple[_Rows, _Rows]:
        """The two views of pairs ``x`` (a tensor or an array, no copy): columns 0 and 1
        of ``(n, 2 + k, d)``, or ``(n, d)`` single views twice, each its own positive.
        The one place where a single view is paired with itself."""
        if x.ndim == 3:
            return x[:, 0], x[:, 1]
        return x, x

    def anchor_rows(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every anchor row of the batch in the loss's order, each with its key (rows of
        one key are positives of each other) and its view: ``[view 0; view 1]`` keyed by
        the items' rows of the training data for pairs (their hard-negative columns
        aside); the items' labels for single views, and for two crops stacked item by
        item. What a memory's queue stores."""
        z = self.embeddings
        device = z.device
        if self.structure == "pairs":
            assert self.index is not None  # pairs are keyed by their rows
            u, v = self.pair_views(z)
            keys = self.index.to(device, torch.long).repeat(2)
            views = torch.arange(2, device=device, dtype=torch.int8).repeat_interleave(len(z))
            return torch.cat([u, v]), keys, views
        a, labels, _, _ = loss_inputs(self)
        assert labels is not None  # single views and crops come with labels
        return a, labels.to(device, torch.long), torch.zeros(len(a), dtype=torch.int8,
                                                             device=device)


class LossInputs(NamedTuple):
    """What a loss function takes for a :class:`LossBatch`: ``(a, b)`` two views (``b``
    the labels of a label loss), hard negatives, and how many of its rows one item
    makes."""

    a: torch.Tensor
    b: torch.Tensor | None
    negatives: torch.Tensor | None
    rows_per_item: int


def loss_inputs(batch: LossBatch) -> LossInputs:
    """The inputs a loss function takes for ``batch``: single views with their labels,
    two crops of an item as two rows of its label, or the two views of pairs and their
    hard-negative columns (a label loss sees each pair as its own class)."""
    z, structure = batch.embeddings, batch.structure
    if structure == "pairs":
        u, v = LossBatch.pair_views(z)
        return LossInputs(u, v, z[:, 2:] if z.ndim == 3 and z.shape[1] > 2 else None, 1)
    if structure == "single":
        return LossInputs(z, batch.labels, None, 1)
    if structure == "crops":
        assert batch.labels is not None  # crops are of labelled items
        return LossInputs(z.reshape(-1, z.shape[-1]), batch.labels.repeat_interleave(2),
                          None, 2)
    raise ValueError(f"structure must be one of {STRUCTURES}; got {describe(structure)}")


class Loss(BaseEstimator):
    """Base class of the loss objects (see the module docstring).

    Subclasses set ``function`` and store their parameters in ``__init__``; the
    parameters named ``learn_<p>`` say which of ``learnable`` an estimator learns.
    """

    function: ClassVar[Callable[..., Any]]
    #: whether the loss reads class labels (a supervised loss such as SupCon): its
    #: batches are crops or single views of labelled items, not pairs
    labelled: ClassVar[bool] = False
    #: parameters an estimator can learn (``learn_<name>=True``); a temperature is
    #: learned as ``MIN_LEARNED_TEMPERATURE + exp(theta)``, above the floor and with a
    #: gradient everywhere
    learnable: ClassVar[tuple[str, ...]] = ("temperature",)
    #: parameters that are not the function's options (the false-negative guard, which
    #: the estimator turns into masks for each batch)
    not_options: ClassVar[tuple[str, ...]] = ("false_negatives",)

    @property
    def takes_negatives(self) -> bool:
        """Whether it takes hard-negative columns and exclusions (``hard_negatives``,
        ``exclude``): the InfoNCE family but DHEL, and HCL and the debiased loss."""
        return "hard_negatives" in inspect.signature(type(self).function).parameters

    # -- the loss --------------------------------------------------------------------

    @classmethod
    @functools.cache
    def _option_names(cls) -> tuple[str, ...]:
        # read once per class: get_params inspects the signature on every call, and a
        # training step asks for the options every batch
        return tuple(n for n in param_names(cls)
                     if not n.startswith("learn_") and n not in cls.not_options)

    def options(self, **overrides: Any) -> dict:
        """The keyword arguments of ``function``: the parameters (without the
        ``learn_*`` flags), with ``overrides`` (e.g. a learned temperature tensor)."""
        params = {name: getattr(self, name) for name in self._option_names()}
        params.update(overrides)
        return params

    def __call__(self, a: Any, b: Any, **overrides: Any) -> Any:
        """The loss of one batch (or of stacked batches, ``(..., B, d)``): ``(u, v)`` for a
        paired loss, ``(z, y)`` for a labelled one. ``overrides`` go to the function
        (``return_terms=True``, ``reduction='none'``, a tensor ``temperature``, ...)."""
        return type(self).function(a, b, **self.options(**overrides))

    def pair_terms(self, u: torch.Tensor, v: torch.Tensor, **overrides: Any) -> LossTerms:
        """:class:`LossTerms` of paired embeddings; a labelled loss sees each pair as its
        own class (the views stacked, ``[u; v]``)."""
        if self.labelled:
            z = torch.cat([u, v], dim=-2)
            return self(z, pair_labels(u.shape[-2], u.shape[:-2], u.device),
                        return_terms=True, **overrides)
        return self(u, v, return_terms=True, **overrides)

    def batch_inputs(self, batch: LossBatch) -> LossInputs:
        """What this loss's function takes for a batch (its views, or its rows and their
        labels, and hard-negative columns): see :func:`loss_inputs`."""
        return loss_inputs(batch)

    def batch_terms(self, batch: LossBatch, **overrides: Any) -> LossTerms:
        """:class:`LossTerms` of one batch of any structure: the one step from a batch to
        the loss. Single views and crops go to :meth:`label_terms`; pairs to
        :meth:`pair_terms` with their hard-negative columns and the masks of the
        ``false_negatives`` guard (if the loss has one), built from the batch's content
        ids, groups and rows. ``overrides`` go to the function (learned values,
        ``reduction``, a memory's ``denominator``)."""
        inputs = self.batch_inputs(batch)
        if batch.structure != "pairs":
            assert inputs.b is not None  # single views and crops come with labels
            return self.label_terms(inputs.a, inputs.b, **overrides)
        extra: dict[str, Any] = {}
        if inputs.negatives is not None:
            if not self.takes_negatives:
                raise ValueError(f"{type(self).__name__} does not take hard-negative columns")
            extra["hard_negatives"] = inputs.negatives
        guard = getattr(self, "false_negatives", None)
        if guard is not None:
            extra.update(guard.masks(inputs.a, inputs.b, inputs.negatives, batch.index,
                                     batch.content, batch.groups,
                                     share=bool(getattr(self, "share_negatives", True))))
        assert inputs.b is not None  # pairs have a second view
        return self.pair_terms(inputs.a, inputs.b, **overrides, **extra)

    def label_terms(self, z: torch.Tensor, y: torch.Tensor, **overrides: Any) -> LossTerms:
        """:class:`LossTerms` of labelled embeddings (labelled losses only)."""
        if not self.labelled:
            raise ValueError(f"{type(self).__name__} contrasts two views, not labelled "
                             "samples: use a label loss (SupCon, ContrastiveMargin)")
        return self(z, y, return_terms=True, **overrides)

    # -- what the rest of the library asks of a loss -----------------------------------

    @property
    def tileable(self) -> bool:
        """Whether it takes ``chunk_size`` (tiled, O(B) memory)."""
        return "chunk_size" in self.get_params(deep=False)

    def lse_layout(self, structure: str) -> str | None:
        """How the per-anchor log-sum-exps its function hands a ``denominator`` are laid
        out for a batch of ``structure`` (``'pairs'``, ``'single'`` or ``'crops'``):

        - ``'anchors'``: one per item, shape ``(B,)``;
        - ``'directions'``: two directions of one item each, ``(2, B)``;
        - ``'views'``: the two views' anchors stacked, ``(2B,)`` (``[u; v]``);
        - ``'crops'``: two crops per item, stacked item by item, ``(2B,)``;
        - ``None``: it has no such log-sum-exps (no ``denominator``).
        """
        return None

    #: ``queue_terms(rows, views, bank, bank_views, candidates, positives, **overrides)
    #: -> LossTerms``: the loss of a batch's anchors ``rows`` against a queue ``bank`` of
    #: stored embeddings (XBM), with ``(A, M)`` masks of each anchor's ``candidates`` (its
    #: own entry never is one) and ``positives``, and the view of each row and entry; or
    #: ``None`` for a loss with no such form.
    queue_terms: ClassVar[Callable[..., LossTerms] | None] = None

    #: ``pair_losses(u, v, **overrides) -> (..., B, B)``: for a loss that is a sum of
    #: pair terms (SigLIP), each pair's term as the loss is trained (balance weights
    #: included), so that a sub-batch's summed loss is the sum of its block; ``None``
    #: for a loss whose terms couple the pairs (a log-sum-exp).
    pair_losses: ClassVar[Callable[..., torch.Tensor] | None] = None

    def affinity(self, u: Any, v: Any, batch_size: int, **overrides: Any) -> torch.Tensor:
        """Pair weights ``w(k, l)`` of ``n`` candidate pairs, ``(..., n, n)``: how much
        pairs ``k`` and ``l`` add to the loss when they share a batch of ``batch_size``
        (what :class:`~skcontrast.selectors.SpectralBatchSelector` clusters on).

        The default is the Jensen bound of Cho et al. 2023, Eq. 5 (the affinity of
        :math:`\\mathcal{L}^{con}`) at this loss's temperature.
        """
        params = self.options(**overrides)
        return pair_affinity(u, v, batch_size, temperature=params["temperature"],
                             normalize=params.get("normalize", True))

    def batch_losses(self, u: Any, v: Any = None, batches: Any = None, *, y: Any = None,
                     **overrides: Any) -> torch.Tensor:
        """The loss of each of many index batches in vectorised calls (see
        :func:`~skcontrast.losses.batch_losses`), under this loss's parameters."""
        params = self.options(**overrides)
        if y is not None:
            return batch_values(u, None, batches, y=y, fn=type(self).function, **params)
        fn = type(self).function
        if self.labelled:
            def fn(a: Any, b: Any, **kw: Any) -> Any:
                return self.pair_terms(a, b, **kw).loss
            params = overrides
        return batch_values(u, v, batches, fn=fn, **params)

    def sub_batch_losses(self, batch: LossBatch, subsets: Any,
                         **overrides: Any) -> torch.Tensor:
        """The loss of each sub-batch of ``batch``, ``(m,)``: ``subsets`` are index arrays
        into its items (a list, of any sizes, or an ``(m, T)`` array), scored in
        vectorised calls (:meth:`batch_losses`) in the form its structure says: the two
        views of pairs, single views with their labels, both crops of each item with
        its label (hard-negative columns are not scored). Gradients flow."""
        a, b, _, per_item = loss_inputs(batch)
        if per_item > 1:  # the rows of each item's crops, side by side
            subsets = [(per_item * np.asarray(s)[:, None] + np.arange(per_item)).reshape(-1)
                       for s in subsets]
        if batch.structure == "pairs":
            return self.batch_losses(a, b, subsets, **overrides)
        return self.batch_losses(a, batches=subsets, y=b, **overrides)

    def score_batches(self, X: Any, batches: Any, y: Any = None,
                      **overrides: Any) -> np.ndarray:
        """The loss of each index batch of embeddings ``X``, without gradients: what
        batch selection ranks and measures batches by.

        ``X`` is ``(n, 2, d)`` pairs, or ``(n, d)`` single views: with labels ``y`` and a
        label loss, labelled views (each batch in the label form), else pairs of single
        views, each its own positive (:meth:`sub_batch_losses` of the one
        :class:`LossBatch` of ``X``). A batch of a single sample has nothing to
        contrast: its score is NaN.
        """
        from .._validation import check_embeddings

        X = check_embeddings(X)
        batches = list(batches)
        scorable = [i for i, b in enumerate(batches) if len(b) >= 2]
        out = np.full(len(batches), np.nan)
        if not scorable:
            return out
        rows = torch.from_numpy(X)
        batch = LossBatch(rows, "single", as_label_tensor(y)) \
            if X.ndim == 2 and y is not None and self.labelled else LossBatch(rows)
        with torch.no_grad():
            values = self.sub_batch_losses(batch, [batches[i] for i in scorable], **overrides)
        out[scorable] = values.cpu().numpy()
        return out

    @property
    def name(self) -> str:
        """The name of the loss function (``'symmetric_info_nce'``), for messages and for
        what a memory records it was built for."""
        fn = getattr(type(self), "function", None)
        return getattr(fn, "__name__", type(self).__name__)

    def live(self, **values: Any) -> Loss:
        """A copy holding ``values`` (e.g. the temperature an estimator has learned so
        far, as a float): what a selector scores with during a fit."""
        out = copy.copy(self)
        for name, value in values.items():
            setattr(out, name, value)
        return out

    def check(self) -> Loss:
        """Check the parameters (by computing the loss of a tiny batch); returns self."""
        for name in self.learnable:
            flag = getattr(self, f"learn_{name}", False)
            if not isinstance(flag, bool):
                raise ValueError(f"{type(self).__name__}: learn_{name} must be True or "
                                 f"False; got {describe(flag)}")
        floor = MIN_LEARNED_TEMPERATURE
        if getattr(self, "learn_temperature", False) and \
                isinstance(self.temperature, numbers.Real) and self.temperature <= floor:
            raise ValueError(f"{type(self).__name__}: temperature={self.temperature!r} is the "
                             f"start of a learned temperature, which stays above {floor}; "
                             f"start above {floor} (e.g. 0.07, CLIP's), or fix it "
                             "(learn_temperature=False) to train at this temperature")
        u = torch.eye(2, 3, dtype=torch.float64)
        try:
            self.pair_terms(u, u.flip(0))
        except ValueError as exc:
            raise ValueError(f"{type(self).__name__}: {exc}") from None
        return self


class FunctionLoss(Loss):
    """A bare callable ``f(u, v, temperature=...)`` (or ``f(z, y, temperature=...)`` with
    ``labelled=True``) as a loss object.

    It gives up what a loss class declares: no ``chunk_size='auto'`` (the callable is
    called as it is), no memory (its anchors are unknown), positive and entropy terms
    recorded as NaN unless it returns :class:`LossTerms` for ``return_terms=True``, and
    selection scores its value but clusters on the :math:`\\mathcal{L}^{con}` bound at
    its temperature. Subclass :class:`Loss` to declare them.

    Parameters
    ----------
    function : callable
    temperature : float, default=0.1
    learn_temperature : bool, default=False
    labelled : bool, default=False
    """

    def __init__(self, function: Callable[..., Any] | None = None, *,
                 temperature: float = 0.1, learn_temperature: bool = False,
                 labelled: bool = False) -> None:
        store_params(self, locals())

    def options(self, **overrides: Any) -> dict:
        return {"temperature": self.temperature, **overrides}

    def check(self) -> FunctionLoss:
        """Check the parameters without calling the function (it may have effects)."""
        if not callable(self.function):
            raise ValueError(f"FunctionLoss needs a callable function; got "
                             f"{describe(self.function)}")
        return self

    def __call__(self, a: Any, b: Any, **overrides: Any) -> Any:
        if not callable(self.function):
            raise ValueError(f"FunctionLoss needs a callable function; got "
                             f"{describe(self.function)}")
        wants_terms = overrides.pop("return_terms", False)
        overrides.pop("denominator", None)
        kwargs = self.options(**overrides)
        accepted = _accepted(self.function)
        if accepted is not None:
            kwargs = {k: v for k, v in kwargs.items() if k in accepted}
        out = self.function(a, b, **kwargs)
        if isinstance(out, LossTerms) or not wants_terms:
            return out
        nan = torch.full_like(out, float("nan"))
        return LossTerms(out, nan, nan)

    def batch_losses(self, u: Any, v: Any = None, batches: Any = None, *, y: Any = None,
                     **overrides: Any) -> torch.Tensor:
        def fn(a: Any, b: Any, **kw: Any) -> Any:
            return self(a, b, **kw)

        return batch_values(u, v, batches, y=y, fn=fn, **overrides)


def _accepted(function: Callable) -> set[str] | None:
    """The keyword names ``function`` takes (``None``: any, it has ``**kwargs``)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind == p.VAR_KEYWORD for p in parameters):
        return None
    return {p.name for p in parameters}
