"""False-negative guards inside the loss: which in-batch candidates are not negatives."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator

from .._validation import check_real, describe


class FalseNegativeGuard(BaseEstimator):
    r"""Leave likely false negatives out of a softmax loss's candidates.

    Give it to a loss (``SymmetricInfoNCE(false_negatives=FalseNegativeGuard())``, or
    ``loss__false_negatives=...`` on an estimator). At every training step the estimator
    builds, for the batch's items, a mask of the candidates each anchor leaves out; the
    loss masks them before its log-sum-exps (dense or tiled;
    :func:`~skcontrast.losses.info_nce`'s ``exclude``). Item ``j`` is left out of
    anchor ``i``'s candidates when

    - ``same_content``: the two items share a text (identical token ids, or identical
      rows for numeric views): anchor or positive of one equals anchor or positive of the
      other (sentence-transformers' ``NoDuplicatesBatchSampler`` avoids such batches; this
      removes their effect). A hard negative identical to the anchor's positive or
      anchor is left out too;
    - ``same_group``: the items share a group, the ``y`` given to ``fit`` (the concept a
      pair names: two translations of one emoji);
    - ``guide``: a fixed *guide* model ranks the candidate above the anchor's own
      positive, less ``margin`` (GISTEmbed, Solatorio 2024, Sec. 3: the guide's
      similarity :math:`g(a_i, p_j) > g(a_i, p_i) - \text{margin}`; each anchor by its
      own rule, so in a symmetric loss the anchor :math:`p_i` drops :math:`a_j` when
      :math:`g(p_i, a_j) > g(p_i, a_i) - \text{margin}`), with ``guide`` the
      guide's embeddings of the training rows, ``(n, 2, d)`` (anchor and positive side)
      or ``(n, d)``; or ``guide='self'``, the learner's own detached similarities with
      the rule :math:`s(a_i, p_j) > s(a_i, p_i) + \text{margin}` (Qwen3-Embedding's mask,
      Zhang et al. 2025, with ``margin=0.1``); both also screen the hard negatives.

    Parameters
    ----------
    same_content : bool, default=True
    same_group : bool, default=False
        Needs ``y`` in ``fit``.
    guide : array-like of shape (n, 2, d) or (n, d), 'self' or None, default=None
    margin : float, default=0.0
        See ``guide``.

    Examples
    --------
    >>> from skcontrast.losses import FalseNegativeGuard, SymmetricInfoNCE
    >>> loss = SymmetricInfoNCE(false_negatives=FalseNegativeGuard(same_group=True))
    """

    def __init__(self, same_content: bool = True, same_group: bool = False, *,
                 guide: Any = None, margin: float = 0.0) -> None:
        self.same_content = same_content
        self.same_group = same_group
        self.guide = guide
        self.margin = margin

    def check(self, n_rows: int | None = None, has_groups: bool = True) -> None:
        """Refuse settings the fit cannot honour, naming them."""
        for name in ("same_content", "same_group"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"FalseNegativeGuard {name} must be True or False; got "
                                 f"{describe(getattr(self, name))}")
        check_real(self.margin, "margin")
        if self.same_group and not has_groups:
            raise ValueError("FalseNegativeGuard(same_group=True) needs the groups: pass y "
                             "to fit (one group per pair, e.g. the concept it names)")
        guide = self.guide
        if isinstance(guide, str):
            if guide != "self":
                raise ValueError(f"FalseNegativeGuard guide must be 'self', embeddings of the "
                                 f"training rows or None; got {guide!r}")
        elif guide is not None:
            rows = np.asarray(guide)
            if rows.ndim not in (2, 3) or (n_rows is not None and len(rows) != n_rows):
                raise ValueError(f"FalseNegativeGuard guide must hold one embedding per "
                                 f"training row, (n, d) or (n, 2, d) with n = {n_rows}; got "
                                 f"{describe(guide)}")

    def masks(self, u: torch.Tensor, v: torch.Tensor, negatives: torch.Tensor | None,
              index: torch.Tensor | None, keys: torch.Tensor | None,
              groups: torch.Tensor | None, share: bool) -> dict:
        """``exclude`` (and ``exclude_negatives``) for a batch of pairs ``(u, v)`` with
        hard ``negatives`` ``(B, k, d)``: the options the loss function takes. Row ``i``
        of ``exclude`` is anchor ``i``'s own rule, never made symmetric; with a guide it
        is ``(2, B, B)``: the ``u`` anchors' rows, then the ``v`` anchors' (whose
        positive is ``u_i`` and candidates the ``u_j``).

        ``index`` are the batch's training rows; ``keys`` ``(n, 2 + k)`` content ids of
        every row's texts (anchor, positive, negatives), ``groups`` ``(n,)``.
        """
        b = len(u)
        exclude = torch.zeros(b, b, dtype=torch.bool, device=u.device)
        width = 0 if negatives is None else negatives.shape[1] * (b if share else 1)
        exclude_negatives = torch.zeros(b, width, dtype=torch.bool, device=u.device)
        rows = None if index is None else index.to(u.device, torch.long)
        if self.same_content and keys is not None and rows is not None:
            k = keys.to(u.device)[rows]  # (B, 2 + k)
            pair = k[:, :2]
            exclude |= (pair[:, None, :, None] == pair[None, :, None, :]).any(-1).any(-1)
            if negatives is not None:
                neg = k[:, 2:]
                pool = neg.reshape(1, -1).expand(b, -1) if share else neg
                exclude_negatives |= (pool[:, :, None] == pair[:, None, :]).any(-1)
        if self.same_group and groups is not None and rows is not None:
            g = groups.to(u.device)[rows]
            exclude |= g[:, None] == g[None, :]
        if self.guide is not None:
            if isinstance(self.guide, str):  # 'self': the learner, no gradient
                a, p = (torch.nn.functional.normalize(x.detach(), dim=-1) for x in (u, v))
                n = None if negatives is None else \
                    torch.nn.functional.normalize(negatives.detach(), dim=-1)
                sign = 1.0
            else:
                assert rows is not None
                table = torch.as_tensor(np.asarray(self.guide), dtype=torch.float32)
                guided = table[rows.cpu()].to(u.device)  # the guide's rows of the batch
                a, p = (guided[:, 0], guided[:, 1]) if guided.ndim == 3 else (guided, guided)
                a, p = (torch.nn.functional.normalize(x, dim=-1) for x in (a, p))
                n = None
                if guided.ndim == 3 and guided.shape[1] > 2 and negatives is not None:
                    if guided.shape[1] - 2 != negatives.shape[1]:
                        raise ValueError(f"FalseNegativeGuard guide has {guided.shape[1] - 2}"
                                         f" negative column(s); the data has "
                                         f"{negatives.shape[1]}")
                    n = torch.nn.functional.normalize(guided[:, 2:], dim=-1)
                sign = -1.0
            scores = a @ p.T  # (anchor a_i, candidate p_j)
            own = scores.diagonal()[:, None]
            limit = own + sign * float(self.margin)
            # each anchor's own rule: a_i against the p_j, and (a symmetric loss's
            # second direction, NT-Xent's second view) p_i against the a_j
            exclude = torch.stack([exclude | (scores > limit), exclude | (scores.T > limit)])  # noqa: SIM300
            if n is not None:
                pool = n.reshape(-1, n.shape[-1]) if share else n
                neg_scores = a @ pool.T if share else torch.einsum("bd,bkd->bk", a, pool)
                exclude_negatives |= neg_scores > limit
        exclude = exclude & ~torch.eye(b, dtype=torch.bool, device=u.device)
        out: dict = {"exclude": exclude}
        if negatives is not None:
            out["exclude_negatives"] = exclude_negatives
        return out
