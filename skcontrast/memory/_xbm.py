"""Cross-batch memory (XBM; Wang et al., 2020; Sors et al. 2021, arXiv:2112.11743, App. E).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .._validation import check_int, check_nonnegative
from ..losses import LOSSES, Loss, LossBatch, LossTerms
from ._base import BaseMemory, MemoryState


class CrossBatchMemory(BaseMemory):
    r"""XBM: a FIFO queue of detached embeddings that every batch's anchors also meet.

    Each training step first enqueues the batch's embeddings (detached), with their
    labels (SupCon) or, for pairs, their sample ids and view, dropping the oldest once
    ``size`` embeddings are held. The loss is then

    .. math::

        \mathcal{L} = \mathcal{L}_{batch} + w\, \mathcal{L}_{memory},

    where :math:`\mathcal{L}_{memory}` is the loss of the batch's anchors against the
    queue, XBM's form as Sors et al. 2021, App. E uses it. An anchor's own copy in the queue
    (the self-comparison) is excluded; entries with the anchor's label, or for pairs
    the anchor's sample id, are its positives and never its negatives (for pairs: its
    partner's copy just enqueued, and its own earlier embeddings). Gradients flow into
    the anchors only.

    How each loss meets the queue is the loss's own declaration
    (:attr:`~skcontrast.losses.Loss.queue_terms`):

    :class:`~skcontrast.losses.SupCon`, :class:`~skcontrast.losses.NTXent`
        SupCon's anchor loss with the queue as the batch: the mean over the positives
        of :math:`-s/\tau`, plus the log-sum-exp over every other entry. With pairs,
        NT-Xent is exactly this with each sample its own class.
    :class:`~skcontrast.losses.DCL`
        The same with the positives left out of the log-sum-exp.
    :class:`~skcontrast.losses.InfoNCE`, :class:`~skcontrast.losses.SymmetricInfoNCE`
        Anchors of one view meet only the other view's entries (the ``v`` entries for
        the ``u`` anchors, and back for the symmetric loss, whose two directions are
        combined as ``directions`` says).
    :class:`~skcontrast.losses.SigLIP`
        Each anchor against the other view's entries: the mean sigmoid term of its
        positives and the sum of those of its negatives.
    :class:`~skcontrast.losses.ContrastiveMargin`
        The margin loss over the (anchor, entry) pairs, averaged as the loss's
        ``averaging`` says: ``'separate'`` keeps the balance of the batch loss
        (set-ups S2 and S3 of Sors et al. 2021, App. E), ``'anchor'`` sums the pair terms per
        anchor as the XBM authors' code does, so the entropy weight grows as the queue
        fills (set-up S1).

    The balance weights, temperature (learned, if it is) and other options of the batch
    loss apply to the memory term too. The adaptive selectors (OSGD, spectral, greedy)
    keep scoring batches with the plain batch loss.

    Parameters
    ----------
    size : int
        Number of embeddings the queue holds (a batch of ``B`` pairs, or of two crops,
        adds ``2B``); at least one batch's worth.
    weight : float, default=1.0
        :math:`w`, the weight of the memory term.
    start_step : int, default=0
        Training steps (batches) before the memory is used; until then nothing is
        enqueued and the loss is the batch loss (XBM's authors start after 1000 steps).

    Examples
    --------
    >>> from skcontrast import SupConEmbedder
    >>> from skcontrast.memory import CrossBatchMemory
    >>> est = SupConEmbedder(memory=CrossBatchMemory(size=1024, start_step=100))

    References
    ----------
    Wang, X., Zhang, H., Huang, W., Scott, M. R. Cross-batch memory for embedding
    learning. CVPR 2020.
    """

    def __init__(self, size: int = 1024, weight: float = 1.0, start_step: int = 0) -> None:
        self.size = size
        self.weight = weight
        self.start_step = start_step

    def _check_params(self) -> None:
        check_int(self.size, "size", minimum=2)
        check_nonnegative(self.weight, "weight")
        check_int(self.start_step, "start_step", minimum=0)

    def check_batch_rows(self, rows: int) -> None:
        self._check_params()
        if rows > self.size:
            raise ValueError(f"CrossBatchMemory(size={self.size}) cannot hold one batch: a "
                             f"batch adds {rows} embeddings (two per item for pairs or "
                             f"two crops); use size >= {rows}")

    def _check_loss(self, loss: Loss, structure: str) -> None:
        if loss.queue_terms is None:
            having = ", ".join(cls.__name__ for cls in LOSSES.values()
                               if cls.queue_terms is not None)
            raise ValueError(f"CrossBatchMemory needs the loss's form against a queue, which "
                             f"{type(loss).__name__} does not have; it works with "
                             f"{having}")

    def _make_state(self, n_samples: int, loss: Loss, structure: str) -> XBMState:
        return XBMState(n_samples, loss, int(self.size), float(self.weight),
                        int(self.start_step))


class XBMState(MemoryState):
    """The queue: ``bank`` (size, k), ``keys`` (labels or sample ids) and ``views``."""

    _counters = ("n_samples", "epoch", "step", "pointer", "filled")

    def __init__(self, n_samples: int, loss: Loss, size: int, weight: float,
                 start_step: int) -> None:
        super().__init__(n_samples, loss)
        self.size, self.weight, self.start_step = size, weight, start_step
        self.step = self.pointer = self.filled = 0
        self.bank: torch.Tensor
        self.keys: torch.Tensor
        self.views: torch.Tensor
        # allocated at the first batch, when the embedding width and device are known
        self.register_buffer("bank", torch.zeros(0, 0))
        self.register_buffer("keys", torch.zeros(0, dtype=torch.long))
        self.register_buffer("views", torch.zeros(0, dtype=torch.int8))

    def match_saved(self, state_dict: dict, prefix: str = "") -> None:
        """As :meth:`MemoryState.match_saved`, refusing a saved queue whose size or
        counters the configuration does not describe."""
        # a saved queue holds `size` entries (or none yet): a configuration declaring
        # another size would reallocate it, at that size, at the next step
        bank = state_dict.get(prefix + "bank")
        rows = [len(t) for t in (bank, state_dict.get(prefix + "keys"),
                                 state_dict.get(prefix + "views")) if t is not None]
        counters = state_dict.get(prefix + "_extra_state") or {}
        inside = all(isinstance(counters.get(k, 0), int) and 0 <= counters.get(k, 0) <=
                     self.size for k in ("pointer", "filled"))
        if any(r not in (0, self.size) for r in rows) or len(set(rows)) > 1 or not inside:
            raise ValueError(f"the saved CrossBatchMemory queue holds {rows} entries "
                             f"(pointer {counters.get('pointer')}, filled "
                             f"{counters.get('filled')}), but the configuration declares "
                             f"size={self.size}: it does not describe the saved state "
                             "(edited or damaged)")
        super().match_saved(state_dict, prefix)

    def forward(self, batch_loss: Callable[..., LossTerms], batch: LossBatch, *,
                loss: Loss, overrides: dict) -> LossTerms:
        terms = batch_loss()
        if self.step < self.start_step:
            self.step += 1
            return terms
        rows, keys, views = batch.anchor_rows()
        slots = self.enqueue(rows.detach(), keys, views)
        extra = self.memory_terms(rows, keys, views, slots, loss, overrides)
        self.step += 1
        return LossTerms(*(t + self.weight * e for t, e in zip(terms, extra, strict=True)))

    def enqueue(self, rows: torch.Tensor, keys: torch.Tensor,
                views: torch.Tensor) -> torch.Tensor:
        """Write ``rows`` over the oldest entries; returns the slots they occupy."""
        m = len(rows)
        if m > self.size:
            raise ValueError(f"CrossBatchMemory(size={self.size}) cannot hold a batch of "
                             f"{m} embeddings; use size >= {m}")
        if self.bank.shape != (self.size, rows.shape[1]):
            self.bank = rows.new_zeros(self.size, rows.shape[1])
            self.keys = keys.new_zeros(self.size)
            self.views = views.new_zeros(self.size)
        slots = (self.pointer + torch.arange(m, device=rows.device)) % self.size
        self.bank[slots] = rows.to(self.bank.dtype)
        self.keys[slots] = keys
        self.views[slots] = views
        self.pointer = (self.pointer + m) % self.size
        self.filled = min(self.filled + m, self.size)
        return slots

    def memory_terms(self, rows: torch.Tensor, keys: torch.Tensor, views: torch.Tensor,
                     slots: torch.Tensor, loss: Loss, overrides: dict) -> LossTerms:
        """Loss of the batch's anchors against the queue (which holds them too): the
        loss's own form against a queue."""
        entries = torch.arange(self.size, device=rows.device)
        candidates = (entries < self.filled)[None, :] & (entries[None, :] != slots[:, None])
        same = self.keys[None, :] == keys[:, None]
        assert loss.queue_terms is not None  # checked when the memory was built
        return loss.queue_terms(rows, views, self.bank, self.views, candidates, same,
                                **overrides)

