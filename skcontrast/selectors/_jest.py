"""JEST's joint sampling of a sub-batch from a super-batch (Evans et al., NeurIPS 2024).

A sub-batch ``S`` of a super-batch is scored by its *learnability*: the learner's loss on
``S`` minus a reference model's. With SigLIP's pairwise sigmoid loss (their Eq. 1 and
Sec. 2), a sub-batch's summed loss is the sum of its block of the pair-loss matrix, so
its learnability is ``sum_{i, j in S} A_ij`` with ``A = L_learner - L_reference``.
Scoring every sub-batch is out of reach; JEST samples it in ``n_chunks`` chunks (their
Sec. 2.2 and Algorithm 1): the first chunk from the softmax of each example's own score
``A_ii``, each later chunk from the softmax of the score an example adds to what is
already chosen, ``A_kk + sum_{j in S} (A_kj + A_jk)``, without replacement.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .._validation import as_float_tensor, check_choice, check_int, describe
from ..losses import sigmoid_pair_losses

#: What a sub-batch is scored by: JEST's learnability, the learner's loss alone (hardest
#: first), or the reference's loss negated (what the reference finds easy).
SCORES = ("learnability", "hard", "easy_reference")


def chunk_sizes(keep: int, n_chunks: int) -> list[int]:
    """``keep`` rows in ``n_chunks`` chunks as equal as they can be, the larger first."""
    base, extra = divmod(keep, n_chunks)
    return [base + (1 if c < extra else 0) for c in range(n_chunks)]


def pair_scores(learner_logits: Any, reference_logits: Any = None,
                score: str = "learnability") -> torch.Tensor:
    """The ``(S, S)`` matrix whose block sum over a sub-batch is its score.

    ``'learnability'``: learner minus reference pair losses; ``'hard'``: the learner's;
    ``'easy_reference'``: the reference's, negated.
    """
    check_choice(score, "score", SCORES)
    learner = _square(learner_logits, "learner_logits") if score != "easy_reference" else None
    reference = None
    if score != "hard":
        if reference_logits is None:
            raise ValueError(f"score={score!r} needs reference_logits (a reference model's "
                             "logits of the same super-batch); score='hard' uses the "
                             "learner's alone")
        reference = _square(reference_logits, "reference_logits")
        if learner is not None and reference.shape != learner.shape:
            raise ValueError(f"reference_logits has shape {tuple(reference.shape)} but "
                             f"learner_logits {tuple(learner.shape)}: both score the same "
                             "super-batch")
    return score_matrix(None if learner is None else sigmoid_pair_losses(learner),
                        None if reference is None else sigmoid_pair_losses(reference))


def score_matrix(learner: torch.Tensor | None, reference: torch.Tensor | None
                 ) -> torch.Tensor:
    """A sub-batch's score as a block sum, from the two models' ``(S, S)`` pair-loss
    matrices (either ``None`` where the score does not use it): learner minus
    reference, the learner's alone, or the reference's negated."""
    if reference is None:
        assert learner is not None
        return learner
    if learner is None:
        return -reference
    return learner - reference.to(learner)


def _square(logits: Any, name: str) -> torch.Tensor:
    x = as_float_tensor(logits, name).detach()
    if x.ndim != 2 or x.shape[0] != x.shape[1] or x.shape[0] < 2:
        raise ValueError(f"{name} must be the (S, S) logits of a super-batch of S >= 2 "
                         f"pairs (positives on the diagonal); got {describe(logits)}")
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} contains {int((~torch.isfinite(x)).sum())} NaN or "
                         "infinite value(s)")
    return x


def jest_select(learner_logits: Any, reference_logits: Any, keep: int, n_chunks: int = 16,
                generator: torch.Generator | None = None, *,
                score: str = "learnability") -> torch.Tensor:
    r"""Sample ``keep`` rows of a super-batch by JEST's chunked joint sampling.

    Evans et al., *Data curation via joint example selection further accelerates
    multimodal learning* (NeurIPS 2024), Sec. 2.2 and Algorithm 1. With
    :math:`A = L^{\text{learner}} - L^{\text{ref}}` the pairwise sigmoid losses of the
    two models' logits (SigLIP, Zhai et al. Eq. 1; the positive pairs on the diagonal),
    the learnability of a sub-batch :math:`S` is :math:`\sum_{i,j \in S} A_{ij}`, the
    difference of the two models' summed SigLIP losses on :math:`S`. The first of the
    ``n_chunks`` chunks is drawn from :math:`\mathrm{softmax}(A_{kk})`; each later one
    from :math:`\mathrm{softmax}(A_{kk} + \sum_{j \in S}(A_{kj} + A_{jk}))` over the
    rows not yet chosen (the learnability each would add), without replacement, by
    Gumbel top-k (the same law as drawing one at a time).

    Parameters
    ----------
    learner_logits : tensor or array of shape (S, S)
        The learner's logits of the super-batch, ``u_i . v_j / t + b`` (no gradient is
        needed: the selection is detached).
    reference_logits : tensor or array of shape (S, S) or None
        The reference model's; ``None`` only with ``score='hard'``.
    keep : int
        Rows to keep, ``1 <= keep <= S`` (``S (1 - f)`` for filter ratio ``f``).
    n_chunks : int, default=16
        Chunks of the sampler, ``1 <= n_chunks <= keep``; the chunk sizes differ by at
        most one, the larger first (the paper uses 16 equal chunks).
    generator : torch.Generator or None, default=None
        The source of the Gumbel noise, on the logits' device (one draw of ``S``
        uniforms per chunk); ``None``: torch's global generator.
    score : {'learnability', 'hard', 'easy_reference'}, default='learnability'
        Learner minus reference (JEST), the learner's loss alone (hard examples), or
        minus the reference's (what the reference finds easy, the paper's "easy
        reference" ablation).

    Returns
    -------
    torch.Tensor of shape (keep,), int64
        Row indices of the super-batch in the order they were drawn.

    Examples
    --------
    >>> import torch
    >>> from skcontrast.selectors import jest_select
    >>> g = torch.Generator().manual_seed(0)
    >>> learner, reference = 5 * torch.eye(8) - 2, 5 * torch.eye(8) - 2
    >>> learner[3, 3] = -5.0  # pair 3 is unlearned by the learner, learned by the reference
    >>> 3 in jest_select(learner, reference, keep=2, n_chunks=1, generator=g).tolist()
    True
    """
    scores = pair_scores(learner_logits, reference_logits, score)
    keep = check_int(keep, "keep", minimum=1, maximum=scores.shape[0])
    n_chunks = check_int(n_chunks, "n_chunks", minimum=1, maximum=keep)
    return block_sample(scores, keep, n_chunks, check_generator(generator))


def block_sample(scores: torch.Tensor, keep: int, n_chunks: int,
                 generator: torch.Generator | None) -> torch.Tensor:
    """JEST's chunked sampling of ``keep`` rows under a score that is the block sum of
    the ``(S, S)`` matrix ``scores`` (Evans et al. 2024, Algorithm 1)."""

    def add(gains: torch.Tensor, chosen: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        # the score each row would add, now that ``new`` is in the sub-batch
        return gains + scores[new].sum(0) + scores[:, new].sum(1)

    return gumbel_chunks(torch.diagonal(scores).clone(), add, chunk_sizes(keep, n_chunks),
                         generator)


def check_generator(generator: Any) -> torch.Generator | None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator or None; got "
                         f"{describe(generator)}")
    return generator


def gumbel_chunks(gains: torch.Tensor,
                  update: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
                  sizes: list[int], generator: torch.Generator | None) -> torch.Tensor:
    """JEST's chunked sampler over any score: chunk ``c`` draws ``sizes[c]`` rows without
    replacement from ``softmax(gains)`` over the rows not chosen yet (Gumbel top-k, one
    draw of ``len(gains)`` uniforms per chunk from ``generator``, on its device), then
    ``gains = update(gains, chosen, new)`` gives each row's score given the rows chosen
    so far (``chosen``, a mask that already includes the chunk ``new``)."""
    size = len(gains)
    device = gains.device if generator is None else generator.device
    chosen = torch.zeros(size, dtype=torch.bool, device=gains.device)
    kept = []
    tiny = torch.finfo(gains.dtype).tiny
    for c, size_c in enumerate(sizes):
        uniform = torch.rand(size, generator=generator, dtype=gains.dtype, device=device)
        gumbel = -torch.log(-torch.log(uniform.to(gains.device).clamp_min(tiny)))
        new = torch.topk(gains.masked_fill(chosen, float("-inf")) + gumbel, size_c).indices
        chosen[new] = True
        kept.append(new)
        if c + 1 < len(sizes):
            gains = update(gains, chosen, new)
    return torch.cat(kept)
