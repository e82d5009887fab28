"""False-negative guards inside the loss: which in-batch candidates are not negatives."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator

from .._validation import check_real, describe, store_params
from ._objects import LossBatch


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
        store_params(self, locals())

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

    @staticmethod
    def content_ids(columns: Sequence[Any]) -> torch.Tensor:
        """``(n, c)`` int64 ids of ``c`` columns of ``n`` items: equal ids for equal
        content, what ``same_content`` compares. One rule for every input form:

        - strings (a list or array of ``n`` of them): equal strings;
        - token ids as a tokenizer gives them: a dict with ``input_ids`` and an
          ``attention_mask`` (padded; the masked positions are ignored, so columns
          padded to other lengths compare), or flat ``input_ids`` with ``offsets``
          (sentence-transformers' ``StaticEmbedding``: row ``i`` is ``input_ids[
          offsets[i]:offsets[i + 1]]``), or a dict of ``input_ids`` alone: equal token
          sequences;
        - an array or tensor ``(n, ...)`` (numbers, or padded ids of one tokenizer
          call): equal rows, among columns of one width and dtype (other shapes never
          hold the same content);
        - a dict of views (no ``input_ids``): equal content in every view, views matched
          by name.

        Content is compared exactly, never through a cast that rounds: strings as Python
        strings (numpy's fixed-width ``'<U'`` strings would drop trailing NULs), integers
        as int64, floating-point numbers by their bits (``-0.0`` as ``0.0``), each view of
        a dict in its own dtype.
        """
        n: int | None = None
        keyed: list[tuple[Any, Any]] = []  # (kind, rows: _content_rows) per column
        for column in columns:
            kind, rows = _content_rows(column)
            if n is not None and _entries(rows) != n:
                raise ValueError(f"content columns must hold one entry per item; got {n} "
                                 f"and {_entries(rows)}")
            n = _entries(rows)
            keyed.append((kind, rows))
        if n is None:
            raise ValueError("content_ids needs at least one column")
        ids = torch.empty(n, len(keyed), dtype=torch.long)
        offset = 0
        for kind in dict.fromkeys(k for k, _ in keyed):
            alike = [i for i, (k, _) in enumerate(keyed) if k == kind]
            codes = _codes(kind, [keyed[i][1] for i in alike], n)
            ids[:, alike] = codes.T + offset
            offset += int(codes.max()) + 1 if codes.numel() else 0
        return ids

    def masks(self, u: torch.Tensor, v: torch.Tensor, negatives: torch.Tensor | None,
              index: torch.Tensor | None, content: torch.Tensor | None,
              groups: torch.Tensor | None, share: bool) -> dict:
        """``exclude`` (and ``exclude_negatives``) for a batch of pairs ``(u, v)`` with
        hard ``negatives`` ``(B, k, d)``: the options the loss function takes. Row ``i``
        of ``exclude`` is anchor ``i``'s own rule, never made symmetric; with a guide it
        is ``(2, B, B)``: the ``u`` anchors' rows, then the ``v`` anchors' (whose
        positive is ``u_i`` and candidates the ``u_j``).

        ``index`` are the batch's rows of the training data (a guide's embeddings are
        indexed by them; without them, as for held-out batches, a guide given as
        embeddings is not applied); ``content`` ``(B, 2 + k)`` the content ids of each item's
        columns (anchor, positive, negatives: :meth:`content_ids`), ``groups`` ``(B,)``
        its group.
        """
        b = len(u)
        exclude = torch.zeros(b, b, dtype=torch.bool, device=u.device)
        width = 0 if negatives is None else negatives.shape[1] * (b if share else 1)
        exclude_negatives = torch.zeros(b, width, dtype=torch.bool, device=u.device)
        rows = None if index is None else index.to(u.device, torch.long)
        if self.same_content and content is not None:
            k = content.to(u.device)  # (B, 2 + k)
            pair = k[:, :2]
            exclude |= (pair[:, None, :, None] == pair[None, :, None, :]).any(-1).any(-1)
            if negatives is not None:
                neg = k[:, 2:]
                pool = neg.reshape(1, -1).expand(b, -1) if share else neg
                exclude_negatives |= (pool[:, :, None] == pair[:, None, :]).any(-1)
        if self.same_group and groups is not None:
            g = groups.to(u.device)
            exclude |= g[:, None] == g[None, :]
        if self.guide is not None and (isinstance(self.guide, str) or rows is not None):
            if isinstance(self.guide, str):  # 'self': the learner, no gradient
                a, p = (torch.nn.functional.normalize(x.detach(), dim=-1) for x in (u, v))
                n = None if negatives is None else \
                    torch.nn.functional.normalize(negatives.detach(), dim=-1)
                sign = 1.0
            else:
                assert rows is not None  # checked above
                table = torch.as_tensor(np.asarray(self.guide), dtype=torch.float32)
                guided = table[rows.cpu()].to(u.device)  # the guide's rows of the batch
                a, p = LossBatch.pair_views(guided)
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


def _content_rows(column: Any) -> tuple[Any, Any]:
    """A column as ``(kind, rows)``: equal rows of one kind are equal content. Strings
    become an object array of them (``'strings'``); token sequences int64 rows of their
    length, then their ids, padded with -1 (``'tokens'``, so that rows of other lengths
    never compare equal); other arrays their flattened rows, exactly as int64
    (:func:`_exact_rows`; kind: dtype and width); a dict of views the tuple of its views'
    rows, by name (kind: each view's name and kind)."""
    if isinstance(column, Mapping):
        if "input_ids" not in column:
            names = sorted(column, key=str)
            views = [_content_rows(column[name]) for name in names]
            entries = {str(name): _entries(rows) for name, (_, rows)
                       in zip(names, views, strict=True)}
            if len(set(entries.values())) != 1:
                raise ValueError(f"the views of a content column (a dict) must hold one "
                                 f"entry per item each; got {entries or 'no view'}")
            return (("mapping", tuple((str(name), kind) for name, (kind, _)
                                      in zip(names, views, strict=True))),
                    tuple(rows for _, rows in views))
        ids = torch.as_tensor(column["input_ids"]).cpu().long()
        if "offsets" in column:  # flat ids of all rows, each row from its offset
            starts = torch.as_tensor(column["offsets"]).cpu().long().reshape(-1)
            ends = torch.cat([starts[1:], torch.tensor([len(ids)])])
            lengths = ends - starts
            keep = torch.arange(int(lengths.max()) if len(lengths) else 0)
            rows = torch.full((len(starts), len(keep)), -1, dtype=torch.long)
            present = keep[None, :] < lengths[:, None]
            rows[present] = ids[(starts[:, None] + keep[None, :])[present]]
            return "tokens", torch.cat([lengths[:, None], rows], dim=1)
        ids = ids.reshape(len(ids), -1)
        mask = column.get("attention_mask")
        if mask is None:
            return "tokens", torch.cat([torch.full((len(ids), 1), ids.shape[1]), ids], dim=1)
        mask = torch.as_tensor(mask).cpu().bool().reshape(ids.shape)
        # the unmasked ids first, in order; -1 after them (padding on either side)
        order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)
        rows = torch.where(mask.gather(1, order), ids.gather(1, order), -1)
        return "tokens", torch.cat([mask.sum(1, keepdim=True), rows], dim=1)
    if isinstance(column, list | tuple) or (isinstance(column, np.ndarray)
                                            and column.dtype.kind in "USO"):
        texts = np.asarray(column, dtype=object).reshape(-1)
        if not all(isinstance(t, str) for t in texts):
            raise ValueError(f"a content column is a list of strings, token ids or an "
                             f"array; got {describe(column)}")
        return "strings", texts  # Python strings: '<U' would drop trailing NULs
    rows = torch.as_tensor(np.asarray(column) if not isinstance(column, torch.Tensor)
                           else column).cpu()
    rows = rows.reshape(len(rows), -1)
    return (rows.dtype, rows.shape[1]), _exact_rows(rows)


def _entries(rows: Any) -> int:
    """The number of items of a column's rows (a dict's: of its first view's)."""
    return _entries(rows[0]) if isinstance(rows, tuple) else len(rows)


def _exact_rows(rows: torch.Tensor) -> torch.Tensor:
    """Rows of numbers as int64 rows, equal exactly where the values are (within one
    dtype): integers as they are, floating-point numbers by their bits (``-0.0`` as
    ``0.0``), complex ones by their parts' bits. No cast through a float, which rounds
    integers beyond 2**53."""
    if rows.is_complex():
        rows = torch.view_as_real(rows).reshape(len(rows), -1)
    if rows.is_floating_point():
        bits = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
        return (rows + 0.0).contiguous().view(bits[rows.element_size()]).long()
    if rows.dtype == torch.uint64:  # its bits: values beyond 2**63 stay apart
        return rows.view(torch.int64)
    return rows.long()


def _codes(kind: Any, parts: list[Any], n: int) -> torch.Tensor:
    """``(len(parts), n)`` int64 codes of columns of one ``kind`` (their rows as
    :func:`_content_rows` gives them): equal codes exactly for equal content."""
    if kind == "strings":  # np.unique on Python strings: every character counts
        inverse = np.unique(np.concatenate(parts), return_inverse=True)[1]
        return torch.from_numpy(inverse.astype(np.int64)).reshape(len(parts), n)
    if isinstance(kind, tuple) and kind[0] == "mapping":  # each view's codes, side by side
        stack = torch.stack([_codes(view_kind, [part[v] for part in parts], n)
                             for v, (_, view_kind) in enumerate(kind[1])], dim=-1)
        rows = stack.reshape(len(parts) * n, -1)
    else:
        width = max(part.shape[1] for part in parts)
        rows = torch.cat([torch.nn.functional.pad(part, (0, width - part.shape[1]), value=-1)
                          for part in parts])
    return torch.unique(rows, dim=0, return_inverse=True)[1].reshape(len(parts), n)
