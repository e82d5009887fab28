"""The losses as objects: one small scikit-learn-style object per loss function.

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
"""

from __future__ import annotations

import copy
import functools
import inspect
import math
import numbers
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.base import BaseEstimator

from .._validation import as_float_tensor, check_choice, describe, store_params
from ._batch import LossBatch, LossInputs, loss_inputs
from ._batched import batch_values, pair_affinity
from ._core import (
    LossTerms,
    combine_last,
    maybe_normalize,
    pair_labels,
    reduce_terms,
    scale_terms,
)
from ._hard_negative_nce import NEGATIVES, debiased_nce, hard_negative_nce
from ._info_nce import DIRECTION_MODES, dcl, dhel, info_nce, nt_xent, symmetric_info_nce
from ._kcl import KERNELS, kcl
from ._references import (
    AVERAGING_MODES,
    average_margin_terms,
    margin_pair_terms,
    reference_softmax_terms,
)
from ._siglip import siglip, sigmoid_pair_losses
from ._supcon import DISTANCES, NO_POSITIVE_CONVENTIONS, contrastive_margin, supcon

#: A learned temperature stays above this (CLIP caps its inverse at 100).
MIN_LEARNED_TEMPERATURE = 0.01



class Loss(BaseEstimator):
    """Base class of the loss objects (see the module docstring).

    Subclasses set ``function`` and store their parameters in ``__init__``; the
    parameters named ``learn_<p>`` say which of ``learnable`` an estimator learns.
    """

    function: ClassVar[Callable[..., Any]]
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
        return tuple(n for n in cls._get_param_names()
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

    def score_batches(self, X: Any, batches: Any, y: Any = None,
                      **overrides: Any) -> np.ndarray:
        """The loss of each index batch of embeddings ``X``, without gradients: what
        batch selection ranks and measures batches by.

        ``X`` is ``(n, 2, d)`` pairs, scored in the paired form of
        :meth:`batch_losses`, or ``(n, d)`` single views: with labels ``y`` and a label
        loss in the label form, else each row its own positive. A batch of a single
        sample has nothing to contrast: its score is NaN.
        """
        from .._validation import check_embeddings

        X = check_embeddings(X)
        u, v = (X[:, 0], X[:, 1]) if X.ndim == 3 else (X, X)
        batches = list(batches)
        scorable = [i for i, b in enumerate(batches) if len(b) >= 2]
        out = np.full(len(batches), np.nan)
        if not scorable:
            return out
        chosen = [batches[i] for i in scorable]
        with torch.no_grad():
            if X.ndim == 2 and y is not None and self.labelled:
                values = self.batch_losses(torch.from_numpy(u), batches=chosen, y=y,
                                           **overrides)
            else:
                values = self.batch_losses(torch.from_numpy(u), torch.from_numpy(v), chosen,
                                           **overrides)
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


# --------------------------------------------------------------------------------------
# The InfoNCE family: softmax losses, with a log-sum-exp per anchor
# --------------------------------------------------------------------------------------

class _SoftmaxLoss(Loss):
    """Shared by the losses whose entropy term is a log-sum-exp over candidates: their
    form against a queue and their affinity (Cho et al. 2023, Eq. 5, generalised)."""

    #: the (anchor view, candidate view) blocks of the similarity matrix it contrasts
    blocks: ClassVar[tuple[tuple[int, int], ...]] = ((0, 1), (1, 0))
    #: queue entries of the anchor's own view are not candidates
    cross_view: ClassVar[bool] = False
    #: positives are left out of the log-sum-exp
    decoupled: ClassVar[bool] = False

    def _negatives(self, batch_size: int) -> int:
        return batch_size - 1

    def affinity(self, u: Any, v: Any, batch_size: int, **overrides: Any) -> torch.Tensor:
        r"""The Jensen bound of Cho et al. 2023, Eq. 5 for this loss's candidates: with
        :math:`x = a_k^\top c_l / \tau` for every block (anchor view, candidate view) it
        contrasts and :math:`p_k = u_k^\top v_k / \tau`,
        :math:`w(k, l) = \sum_{blocks} f_{kl} + f_{lk}`,
        :math:`f_{kl} = \log(1 + N e^{x_{kl} - p_k})`, ``N`` its negatives per anchor.
        For :class:`SymmetricInfoNCE` this is :func:`pair_affinity`."""
        params = self.options(**overrides)
        if type(self).blocks == SymmetricInfoNCE.blocks:
            return pair_affinity(u, v, batch_size, temperature=params["temperature"],
                                 normalize=params.get("normalize", True))
        t = params["temperature"]
        views = [maybe_normalize(as_float_tensor(x, name), params.get("normalize", True))
                 for x, name in ((u, "u"), (v, "v"))]
        positive = (views[0] * views[1]).sum(-1) / t
        shift = math.log(max(1, self._negatives(batch_size)))
        w: Any = 0
        for a, c in type(self).blocks:
            f = F.softplus(torch.matmul(views[a] / t, views[c].transpose(-1, -2))
                           - positive[..., :, None] + shift)
            w = w + f + f.transpose(-1, -2)
        w.diagonal(dim1=-2, dim2=-1).zero_()
        return w

    def queue_terms(self, rows: torch.Tensor, views: torch.Tensor, bank: torch.Tensor,
                    bank_views: torch.Tensor, candidates: torch.Tensor,
                    positives: torch.Tensor, **overrides: Any) -> LossTerms:
        o = self.options(**overrides)
        if self.cross_view:
            candidates = candidates & (bank_views[None, :] != views[:, None])
        positive, entropy, weight = reference_softmax_terms(
            rows, bank, candidates, candidates & positives, temperature=o["temperature"],
            decoupled=self.decoupled, normalize=o["normalize"])
        return self._reduce_queue(positive, entropy, weight, o)

    def _reduce_queue(self, positive: torch.Tensor, entropy: torch.Tensor,
                      weight: torch.Tensor, o: dict) -> LossTerms:
        return reduce_terms(positive, entropy, lambda_pos=o["lambda_pos"],
                            lambda_ent=o["lambda_ent"], reduction="mean", weight=weight)


class InfoNCE(_SoftmaxLoss):
    r"""One-sided InfoNCE :math:`\mathcal{L}(U, V)` (Sreenivasan et al. 2023,
    openreview.net/forum?id=7n2dNATSHeQ, Eq. 3):
    :func:`info_nce`.

    Parameters
    ----------
    temperature : float, default=0.1
        :math:`\tau`; the starting value when ``learn_temperature``.
    learn_temperature : bool, default=False
        Learn the temperature (kept above 0.01, smoothly) when an estimator trains with
        this loss, as CLIP does.
    lambda_pos, lambda_ent : float, default=1.0
        Balance of the positive and entropy terms (Sors et al. 2021, Eq. 5).
    normalize : bool, default=True
        L2-normalise the embeddings first.
    chunk_size : int, 'auto' or None, default='auto'
        Tiled log-sum-exps (O(B) memory); ``'auto'`` tiles only when one dense ``B x B``
        float32 matrix would exceed 256 MiB; ``None`` keeps it dense.
    share_negatives : bool, default=True
        With hard-negative columns (``(anchor, positive, negative_1 ... negative_k)``
        rows): every anchor contrasts with all the batch's hard negatives
        (sentence-transformers' convention); ``False``: with its own.
    false_negatives : FalseNegativeGuard or None, default=None
        Candidates left out of every anchor's sum: the same content, the same group, or
        what a guide ranks above the positive (:class:`FalseNegativeGuard`).
    same_view_negatives : bool, default=False
        The batch's other anchors are candidates too (GTE's query-query negatives; with
        :class:`SymmetricInfoNCE`, document-document too).

    Examples
    --------
    >>> import torch
    >>> from skcontrast.losses import InfoNCE
    >>> round(float(InfoNCE(temperature=1.0)(torch.eye(3), torch.eye(3))), 4)
    0.5514
    """

    function = staticmethod(info_nce)
    blocks = ((0, 1),)
    cross_view = True

    def __init__(self, temperature: float = 0.1, *, learn_temperature: bool = False,
                 lambda_pos: float = 1.0, lambda_ent: float = 1.0, normalize: bool = True,
                 chunk_size: Any = "auto",
                 share_negatives: bool = True, false_negatives: Any = None,
                 same_view_negatives: bool = False) -> None:
        store_params(self, locals())

    def lse_layout(self, structure: str) -> str | None:
        return "anchors"

    def queue_terms(self, rows: torch.Tensor, views: torch.Tensor, bank: torch.Tensor,
                    bank_views: torch.Tensor, candidates: torch.Tensor,
                    positives: torch.Tensor, **overrides: Any) -> LossTerms:
        anchors = views == 0  # one-sided: the anchors of view 0 only
        return super().queue_terms(rows[anchors], views[anchors], bank, bank_views,
                                   candidates[anchors], positives[anchors], **overrides)


class SymmetricInfoNCE(_SoftmaxLoss):
    r"""The symmetric loss :math:`\mathcal{L}^{con} = \mathcal{L}(U,V) + \mathcal{L}(V,U)`
    of Sreenivasan et al. 2023 (Eq. 1-2) and CLIP: :func:`symmetric_info_nce`.

    Parameters
    ----------
    temperature, learn_temperature, lambda_pos, lambda_ent, normalize, chunk_size
        As in :class:`InfoNCE`.
    share_negatives, false_negatives, same_view_negatives
        As in :class:`InfoNCE`.
    directions : {'sum', 'mean'}, default='sum'
        ``'sum'``: :math:`\mathcal{L}^{con}` of the papers; ``'mean'``: CLIP's convention,
        half of it.
    """

    function = staticmethod(symmetric_info_nce)
    cross_view = True

    def __init__(self, temperature: float = 0.1, *, learn_temperature: bool = False,
                 lambda_pos: float = 1.0, lambda_ent: float = 1.0, normalize: bool = True,
                 directions: str = "sum", chunk_size: Any = "auto",
                 share_negatives: bool = True, false_negatives: Any = None,
                 same_view_negatives: bool = False) -> None:
        store_params(self, locals())

    def lse_layout(self, structure: str) -> str | None:
        return "directions"

    def _reduce_queue(self, positive: torch.Tensor, entropy: torch.Tensor,
                      weight: torch.Tensor, o: dict) -> LossTerms:
        check_choice(o["directions"], "directions", DIRECTION_MODES)
        positive, entropy, weight = (t.reshape(2, -1) for t in (positive, entropy, weight))
        return combine_last(super()._reduce_queue(positive, entropy, weight, o),
                            o["directions"])


class NTXent(_SoftmaxLoss):
    r"""NT-Xent, SimCLR's ``2B``-way loss with within-view negatives: :func:`nt_xent`.

    Parameters as in :class:`InfoNCE`.
    """

    function = staticmethod(nt_xent)
    blocks = ((0, 1), (0, 0), (1, 0), (1, 1))

    def __init__(self, temperature: float = 0.1, *, learn_temperature: bool = False,
                 lambda_pos: float = 1.0, lambda_ent: float = 1.0, normalize: bool = True,
                 chunk_size: Any = "auto",
                 share_negatives: bool = True, false_negatives: Any = None) -> None:
        store_params(self, locals())

    def _negatives(self, batch_size: int) -> int:
        return 2 * batch_size - 2

    def lse_layout(self, structure: str) -> str | None:
        return "views"


class DCL(NTXent):
    r"""Decoupled contrastive loss (Yeh et al., 2022): :func:`dcl`. With
    :class:`~skcontrast.memory.SogCLRMemory` it is SogCLR's global contrastive loss.

    Parameters as in :class:`InfoNCE`.
    """

    function = staticmethod(dcl)
    decoupled = True


class DHEL(_SoftmaxLoss):
    r"""Decoupled hyperspherical energy loss (Koromilas et al., 2024; Koromilas et al. 2024,
    arXiv:2405.18045):
    :func:`dhel`.

    Parameters
    ----------
    temperature, learn_temperature, lambda_pos, lambda_ent, normalize, chunk_size
        As in :class:`InfoNCE`.
    include_positive_view : bool, default=True
        Add the energy of the positives' view too (the authors' default).
    """

    function = staticmethod(dhel)
    blocks = ((0, 0), (1, 1))

    def __init__(self, temperature: float = 0.1, *, learn_temperature: bool = False,
                 lambda_pos: float = 1.0, lambda_ent: float = 1.0, normalize: bool = True,
                 include_positive_view: bool = True, chunk_size: Any = "auto") -> None:
        store_params(self, locals())

    queue_terms = None  # type: ignore[assignment]  # no form against a queue


class KCL(Loss):
    r"""Kernel contrastive loss (Koromilas et al., 2024; Koromilas et al. 2024): :func:`kcl`.

    Parameters
    ----------
    temperature : float, default=0.5
        Kernel bandwidth.
    learn_temperature : bool, default=False
    lambda_pos : float, default=1.0
    lambda_ent : float, default=16.0
        The authors' :math:`\gamma`.
    normalize, chunk_size
        As in :class:`InfoNCE`.
    kernel : {'gaussian', 'imq'} or callable, default='gaussian'
    """

    function = staticmethod(kcl)

    def __init__(self, temperature: float = 0.5, *, learn_temperature: bool = False,
                 lambda_pos: float = 1.0, lambda_ent: float = 16.0, normalize: bool = True,
                 kernel: Any = "gaussian", chunk_size: Any = "auto") -> None:
        store_params(self, locals())

    def affinity(self, u: Any, v: Any, batch_size: int, **overrides: Any) -> torch.Tensor:
        """The uniformity energy two pairs add when they share a batch: the kernel
        between their ``u``'s plus the kernel between their ``v``'s (exact: KCL's
        uniformity is a sum of pair terms)."""
        o = self.options(**overrides)
        kernel = KERNELS[o["kernel"]] if isinstance(o["kernel"], str) else o["kernel"]
        from ._core import squared_distances

        out: Any = 0
        for x, name in ((u, "u"), (v, "v")):
            x = maybe_normalize(as_float_tensor(x, name), o["normalize"])
            out = out + kernel(squared_distances(x, x), o["temperature"])
        out.diagonal(dim1=-2, dim2=-1).zero_()
        return out


# --------------------------------------------------------------------------------------
# Label losses
# --------------------------------------------------------------------------------------

class SupCon(_SoftmaxLoss):
    r"""Supervised contrastive loss (Khosla et al., 2020; Kini et al. 2023, arXiv:2306.07960, Eq.
    3): :func:`supcon`.

    Parameters
    ----------
    temperature, learn_temperature, lambda_pos, lambda_ent, normalize, chunk_size
        As in :class:`InfoNCE`.
    base_temperature : float or None, default=None
        ``None``: no factor (Kini et al. 2023); a number multiplies the loss by
        ``temperature / base_temperature`` (Khosla et al.'s code, 0.07).
    anchors_without_positives : {'exclude', 'zero'}, default='exclude'
        How an anchor whose class has no other member in the batch counts.
    """

    function = staticmethod(supcon)
    labelled = True
    blocks = ((0, 1), (0, 0), (1, 0), (1, 1))

    def __init__(self, temperature: float = 0.1, *, learn_temperature: bool = False,
                 lambda_pos: float = 1.0, lambda_ent: float = 1.0, normalize: bool = True,
                 base_temperature: float | None = None,
                 anchors_without_positives: str = "exclude",
                 chunk_size: Any = "auto") -> None:
        store_params(self, locals())

    def _negatives(self, batch_size: int) -> int:
        return 2 * batch_size - 2

    def lse_layout(self, structure: str) -> str | None:
        return {"pairs": "views", "single": "anchors", "crops": "crops"}[structure]

    def _reduce_queue(self, positive: torch.Tensor, entropy: torch.Tensor,
                      weight: torch.Tensor, o: dict) -> LossTerms:
        check_choice(o["anchors_without_positives"], "anchors_without_positives",
                     NO_POSITIVE_CONVENTIONS)
        if o["anchors_without_positives"] == "zero":
            weight = torch.ones_like(weight)
        terms = super()._reduce_queue(positive, entropy, weight, o)
        if o["base_temperature"] is not None:
            terms = scale_terms(terms, o["temperature"] / o["base_temperature"])
        return terms


class ContrastiveMargin(Loss):
    r"""Contrastive margin loss with global/separate averaging (Sors et al. 2021, Sec. 3.2.1 and
    4.1): :func:`contrastive_margin`.

    Parameters
    ----------
    margin : float, default=0.5
    temperature : float, default=1.0
        Distances and margin are divided by it.
    learn_temperature : bool, default=False
    lambda_pos, lambda_ent : float, default=1.0
    averaging : {'separate', 'global', 'anchor'}, default='separate'
    distance : {'euclidean', 'cosine'}, default='euclidean'
    power : int, default=1
    normalize : bool, default=True
    """

    function = staticmethod(contrastive_margin)
    labelled = True

    def __init__(self, margin: float = 0.5, *, temperature: float = 1.0,
                 learn_temperature: bool = False, lambda_pos: float = 1.0,
                 lambda_ent: float = 1.0, averaging: str = "separate",
                 distance: str = "euclidean", power: int = 1,
                 normalize: bool = True) -> None:
        store_params(self, locals())

    def __call__(self, a: Any, b: Any, **overrides: Any) -> Any:
        overrides.pop("reduction", None)  # one value per batch, whatever the reduction
        return super().__call__(a, b, **overrides)

    def queue_terms(self, rows: torch.Tensor, views: torch.Tensor, bank: torch.Tensor,
                    bank_views: torch.Tensor, candidates: torch.Tensor,
                    positives: torch.Tensor, **overrides: Any) -> LossTerms:
        o = self.options(**overrides)
        check_choice(o["averaging"], "averaging", AVERAGING_MODES)
        check_choice(o["distance"], "distance", DISTANCES)
        sums = margin_pair_terms(rows, bank, candidates & positives, candidates & ~positives,
                                 margin=o["margin"], temperature=o["temperature"],
                                 distance=o["distance"], power=o["power"],
                                 normalize=o["normalize"])
        return LossTerms(*average_margin_terms(sums, len(rows), o["averaging"],
                                               o["lambda_pos"], o["lambda_ent"]))


# --------------------------------------------------------------------------------------
# SigLIP and the hard-negative losses
# --------------------------------------------------------------------------------------

class SigLIP(Loss):
    r"""The pairwise sigmoid loss of SigLIP (Zhai et al., 2023, Eq. 1): :func:`siglip`.

    Parameters
    ----------
    temperature : float, default=0.1
        :math:`\tau`: the paper's logit scale :math:`t = 1/\tau` starts at 10.
    bias : float, default=-10.0
        :math:`b`, the paper's starting value.
    learn_temperature, learn_bias : bool, default=False
        Learn :math:`\tau` (as a log) and :math:`b` during a fit, as SigLIP does.
    lambda_pos, lambda_ent, normalize
        As in :class:`InfoNCE`.
    symmetric : bool, default=False
        Anchors of both views (see :func:`siglip`).
    chunk_size : int, 'auto' or None, default='auto'
        Tiled, forward *and* backward in O(B (d + chunk_size)) memory.
    """

    function = staticmethod(siglip)
    learnable = ("temperature", "bias")

    def __init__(self, temperature: float = 0.1, *, bias: float = -10.0,
                 learn_temperature: bool = False, learn_bias: bool = False,
                 lambda_pos: float = 1.0, lambda_ent: float = 1.0, normalize: bool = True,
                 symmetric: bool = False, chunk_size: Any = "auto") -> None:
        store_params(self, locals())

    def pair_losses(self, u: Any, v: Any, **overrides: Any) -> torch.Tensor:
        """The ``(..., B, B)`` matrix of each pair's term in the loss as it is trained:
        ``lambda_pos * softplus(-l_ii)`` on the diagonal, ``lambda_ent *
        softplus(l_ij)`` off it (Zhai et al. 2023, Eq. 1, with the balance of Sors et al.
        2021, Eq. 5). The sum of its block over any sub-batch is the sub-batch's summed
        loss (mean x size; the same with ``symmetric``): what JEST samples over (Evans
        et al. 2024, Sec. 2)."""
        o = self.options(**overrides)
        u, v = (maybe_normalize(as_float_tensor(x, n), o["normalize"])
                for x, n in ((u, "u"), (v, "v")))
        logits = torch.matmul(u / o["temperature"], v.transpose(-1, -2)) + o["bias"]
        terms = sigmoid_pair_losses(logits)
        own = torch.eye(terms.shape[-2], terms.shape[-1], dtype=torch.bool,
                        device=terms.device)
        return terms * torch.where(own, torch.as_tensor(float(o["lambda_pos"])),
                                   torch.as_tensor(float(o["lambda_ent"]))).to(terms)

    def affinity(self, u: Any, v: Any, batch_size: int, **overrides: Any) -> torch.Tensor:
        """Exactly what two pairs add to the loss when they share a batch: the negative
        terms :math:`-\\log\\sigma(-l_{kl}) - \\log\\sigma(-l_{lk})` (SigLIP's loss is a
        sum of pair terms, so this is no bound)."""
        o = self.options(**overrides)
        u, v = (maybe_normalize(as_float_tensor(x, n), o["normalize"])
                for x, n in ((u, "u"), (v, "v")))
        f = F.softplus(torch.matmul(u / o["temperature"], v.transpose(-1, -2)) + o["bias"])
        w = f + f.transpose(-1, -2)
        w.diagonal(dim1=-2, dim2=-1).zero_()
        return w

    def queue_terms(self, rows: torch.Tensor, views: torch.Tensor, bank: torch.Tensor,
                    bank_views: torch.Tensor, candidates: torch.Tensor,
                    positives: torch.Tensor, **overrides: Any) -> LossTerms:
        """Each anchor against the other view's entries of the queue: the sigmoid terms
        of its positives (their mean) and of its negatives (their sum)."""
        o = self.options(**overrides)
        candidates = candidates & (bank_views[None, :] != views[:, None])
        a = maybe_normalize(rows, o["normalize"])
        m = maybe_normalize(bank.to(a.dtype), o["normalize"])
        logits = torch.matmul(a / o["temperature"], m.T) + o["bias"]
        pos_mask, neg_mask = candidates & positives, candidates & ~positives
        n_pos = pos_mask.sum(-1)
        positive = (F.softplus(-logits) * pos_mask).sum(-1) / n_pos.clamp_min(1)
        entropy = (F.softplus(logits) * neg_mask).sum(-1)
        weight = (n_pos > 0).to(a.dtype)
        return reduce_terms(positive * weight, entropy * weight, lambda_pos=o["lambda_pos"],
                            lambda_ent=o["lambda_ent"], reduction="mean", weight=weight)


class HardNegativeNCE(_SoftmaxLoss):
    r"""Hard-negative contrastive loss, HCL (Robinson et al., 2021): :func:`hard_negative_nce`.

    The loss-side way to make negatives hard, beside the batch selectors: each negative
    is weighted by :math:`e^{\beta s/\tau}` and the false negatives expected under the
    class prior :math:`\tau^+` are subtracted. ``beta=0, tau_plus=0`` is NT-Xent
    (``negatives='other view'``: InfoNCE).

    Parameters
    ----------
    temperature, learn_temperature, lambda_pos, lambda_ent, normalize, chunk_size
        As in :class:`InfoNCE`.
    share_negatives, false_negatives
        As in :class:`InfoNCE` (hard negatives are reweighted like the others).
    beta : float >= 0, default=1.0
        Hardness.
    tau_plus : float in [0, 1), default=0.1
        Class prior of false negatives.
    negatives : {'both views', 'other view'}, default='both views'
    """

    function = staticmethod(hard_negative_nce)
    blocks = ((0, 1), (0, 0), (1, 0), (1, 1))

    def __init__(self, temperature: float = 0.1, *, beta: float = 1.0,
                 tau_plus: float = 0.1, learn_temperature: bool = False,
                 lambda_pos: float = 1.0, lambda_ent: float = 1.0, normalize: bool = True,
                 negatives: str = "both views", chunk_size: Any = "auto",
                 share_negatives: bool = True, false_negatives: Any = None) -> None:
        store_params(self, locals())

    def _negatives(self, batch_size: int) -> int:
        return 2 * batch_size - 2 if self.negatives == NEGATIVES[0] else batch_size - 1

    queue_terms = None  # type: ignore[assignment]  # no form against a queue


class DebiasedNCE(HardNegativeNCE):
    r"""Debiased contrastive loss (Chuang et al., 2020): :func:`debiased_nce`, i.e.
    :class:`HardNegativeNCE` with ``beta=0``.

    Parameters as in :class:`HardNegativeNCE`, without ``beta``.
    """

    function = staticmethod(debiased_nce)  # type: ignore[assignment]  # no beta

    def __init__(self, temperature: float = 0.1, *, tau_plus: float = 0.1,
                 learn_temperature: bool = False, lambda_pos: float = 1.0,
                 lambda_ent: float = 1.0, normalize: bool = True,
                 negatives: str = "both views", chunk_size: Any = "auto",
                 share_negatives: bool = True, false_negatives: Any = None) -> None:
        store_params(self, locals())


# --------------------------------------------------------------------------------------
# A bare callable, and names
# --------------------------------------------------------------------------------------

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


#: Every loss class by the name of its function.
LOSSES: dict[str, type[Loss]] = {
    "info_nce": InfoNCE,
    "symmetric_info_nce": SymmetricInfoNCE,
    "nt_xent": NTXent,
    "dcl": DCL,
    "dhel": DHEL,
    "kcl": KCL,
    "siglip": SigLIP,
    "hard_negative_nce": HardNegativeNCE,
    "debiased_nce": DebiasedNCE,
    "supcon": SupCon,
    "contrastive_margin": ContrastiveMargin,
}


def make_loss(loss: Any, *, what: str = "loss", labelled: bool = False) -> Loss:
    """A loss object from a name (its class with defaults), a loss object (as it is)
    or, with a warning naming what it gives up, a bare callable (:class:`FunctionLoss`,
    of labelled samples ``f(z, y)`` when ``labelled``).
    """
    if isinstance(loss, Loss):
        return loss
    if isinstance(loss, str):
        if loss not in LOSSES:
            raise ValueError(f"{what} must be a loss object of skcontrast.losses or one of "
                             f"{', '.join(repr(n) for n in LOSSES)}; got {describe(loss)}")
        return LOSSES[loss]()
    if isinstance(loss, type) and issubclass(loss, Loss):
        return loss()
    if callable(loss):
        import warnings

        warnings.warn(
            f"{what}={getattr(loss, '__name__', loss)!r} is a bare callable: it gives up "
            "chunk_size='auto', memories, the positive and entropy terms in the history "
            "(NaN) and a loss-specific selection affinity. Wrap it in "
            "skcontrast.losses.FunctionLoss (or subclass skcontrast.losses.Loss) to set "
            "its temperature, or use a loss object", UserWarning, stacklevel=3)
        return FunctionLoss(loss, labelled=labelled)
    raise ValueError(f"{what} must be a loss object of skcontrast.losses, a loss name or a "
                     f"callable; got {describe(loss)}")
