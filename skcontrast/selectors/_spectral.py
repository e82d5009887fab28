"""Spectral-clustering batch selection (Cho et al. 2023, arXiv:2307.05906, Sec. 5.3, Eq. 5 and
Appendix C.1 Alg. 3).

All the chunks of an epoch are clustered together, as stacks of arrays: affinities and
their Laplacian operators, eigenvectors, k-means and the equal-size assignment are
batched torch operations on the CPU or the GPU (the dense eigensolver is LAPACK on the
CPU and CuPy's cuSOLVER on the GPU). A chunk's batches depend only on its points and its
own seed, never on which chunks share its stack, so the stacked path gives the batches of
the chunk-by-chunk path (:func:`spectral_batches`) and any ``n_jobs`` gives the same
epoch.
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from joblib import Parallel, delayed, effective_n_jobs
from threadpoolctl import threadpool_limits

from .._backend import resolve_backend
from .._validation import check_choice, check_int, store_params
from ..exceptions import DegenerateEmbeddingWarning
from ..losses import Loss, LossBatch, SymmetricInfoNCE, make_loss
from ._assignment import balanced_assignments
from ._base import BatchSelector, check_batch_size, n_partition_batches, partition
from ._eigen import (
    KRYLOV_STEPS,
    connected,
    kmeans,
    krylov_vectors,
    ritz_vectors,
    top_eigenvectors,
)

DEFAULT_CHUNK_SIZE = 1280  # 40 batches of 32, Cho et al. 2023, Appendix D.3
AFFINITIES = ("exp", "bound")
LAPLACIANS = ("normalized", "unnormalized")
EIGEN_SOLVERS = ("krylov", "dense", "ritz")
# Memory for the operators computed at once. On the CPU it is kept under glibc's 32 MiB
# mmap threshold, so that the temporaries are recycled by malloc instead of page-faulted
# afresh (which made stacks of 8 chunks 1.6x slower per chunk than stacks of 2).
GROUP_BYTES = {"cpu": 16 * 2**20, "cuda": 512 * 2**20}


@dataclass(frozen=True)
class _Settings:
    """What clustering a chunk needs besides its points and seed."""

    batch_size: int
    loss: Loss
    affinity: str
    laplacian: str
    eigen_solver: str
    backend: str
    kmeans_iter: int

    @property
    def device(self) -> str:
        return "cuda" if self.backend == "cupy" else "cpu"


def spectral_batches(u: Any, v: Any, batch_size: int, *, loss: Any = None,
                     affinity: str = "exp", laplacian: str = "normalized",
                     backend: str = "auto", eigen_solver: str = "krylov",
                     random_state: Any = None,
                     kmeans_iter: int = 50) -> tuple[list[np.ndarray], bool]:
    """Equal-size spectral clustering of one chunk of pairs into batches (Cho et al. 2023, Alg. 3).

    This is the per-chunk step of :class:`SpectralBatchSelector`; chunks are independent,
    so workers holding different shards of the data can each call it on their own shard.

    Parameters
    ----------
    u, v : array-like of shape (m, d)
        The chunk's paired embeddings (pass the same array twice for single views).
    batch_size : int
        ``B``; the chunk is cut into ``ceil(m / B)`` batches.
    loss : Loss, str or None, default=None
        Whose pair affinity is clustered (:meth:`~skcontrast.losses.Loss.affinity`; for
        the InfoNCE family the pair terms of Eq. 5 at its temperature). ``None``:
        :class:`~skcontrast.losses.SymmetricInfoNCE` at temperature 0.1.
    affinity, laplacian, backend, eigen_solver, kmeans_iter
        See :class:`SpectralBatchSelector`.
    random_state : int, numpy Generator or None
        Seeds k-means, the Krylov start and the fallback partition. An int is the
        chunk's own seed: with the seed the selector drew for a chunk, this gives that
        chunk's batches of the epoch.

    Returns
    -------
    batches : list of ndarray
        Indices into the chunk; all of size ``B`` except one holding ``m mod B``.
    degenerate : bool
        True when the chunk carried no structure (all affinities equal, or a
        disconnected graph) and a random equal-size partition was returned instead.
    """
    loss = SymmetricInfoNCE() if loss is None else make_loss(loss)
    settings = _settings(batch_size, loss, affinity, laplacian, eigen_solver, backend,
                         kmeans_iter)
    u, v = np.asarray(u, dtype=np.float32), np.asarray(v, dtype=np.float32)
    seed = int(random_state) if isinstance(random_state, numbers.Integral) else \
        int(np.random.default_rng(random_state).integers(2**63))
    [(batches, degenerate)] = _cluster_chunks(u[None], v[None], [seed], settings)
    return batches, degenerate


def _settings(batch_size: int, loss: Loss, affinity: str, laplacian: str,
              eigen_solver: str, backend: str, kmeans_iter: int) -> _Settings:
    return _Settings(check_int(batch_size, "batch_size", minimum=2), loss,
                     check_choice(affinity, "affinity", AFFINITIES),
                     check_choice(laplacian, "laplacian", LAPLACIANS),
                     check_choice(eigen_solver, "eigen_solver", EIGEN_SOLVERS),
                     resolve_backend(backend),
                     check_int(kmeans_iter, "kmeans_iter", minimum=1))


# --------------------------------------------------------------------------------------
# One stack of equally long chunks
# --------------------------------------------------------------------------------------

def _cluster_chunks(u: np.ndarray, v: np.ndarray, seeds: list[int],
                    settings: _Settings) -> list[tuple[list[np.ndarray], bool]]:
    """Batches of each chunk of a stack ``u, v`` of shape ``(G, m, d)``, and whether the
    chunk was degenerate (then its batches are a random equal-size partition).

    The operators and their eigenvectors are computed a few chunks at a time (bounded
    memory); k-means and the assignment, small and made of many short operations, run
    on the whole stack at once.
    """
    G, m, _ = u.shape
    b = settings.batch_size
    k = n_partition_batches(m, b, False)
    rngs = [np.random.default_rng(seed) for seed in seeds]
    if k == 1:
        return [([np.arange(m, dtype=np.int64)], False) for _ in range(G)]
    device = settings.device
    # every draw of a chunk comes from its own generator, in a fixed order
    uniforms = torch.as_tensor(np.stack([rng.random(k) for rng in rngs]), device=device)
    width = k + max(k // 5, 8)
    krylov = settings.eigen_solver == "krylov" and (KRYLOV_STEPS + 1) * width <= m // 2
    starts = [rng.standard_normal((m, width), dtype=np.float32) if krylov else None
              for rng in rngs]
    stack = max(1, GROUP_BYTES[device] // (m * m * 4))
    # The linear algebra of a chunk is small: OpenBLAS and torch's OpenMP pool both
    # spinning on the same cores made it twice as slow, so BLAS keeps one thread and
    # chunks run side by side instead (the same setting everywhere also keeps the
    # results identical however the chunks are grouped).
    with threadpool_limits(limits=1, user_api="blas"):
        return _cluster_stack(u, v, rngs, starts, uniforms, k, krylov, stack, settings)


def _cluster_stack(u: np.ndarray, v: np.ndarray, rngs: list, starts: list,
                   uniforms: torch.Tensor, k: int, krylov: bool, stack: int,
                   settings: _Settings) -> list[tuple[list[np.ndarray], bool]]:
    """:func:`_cluster_chunks` once the draws are made: operators and eigenvectors
    ``stack`` chunks at a time, then k-means and the assignment on all of them."""
    G, m, _ = u.shape
    b, device = settings.batch_size, settings.device
    parts, flags = [], []
    for first in range(0, G, stack):
        group = slice(first, first + stack)
        u_t = torch.tensor(u[group], device=device)  # a copy: joblib may pass read-only
        v_t = torch.tensor(v[group], device=device)  # memory maps
        operator, degenerate = _operator(u_t, v_t, settings)
        if krylov:
            start = torch.as_tensor(np.stack(starts[group]), device=device)
            parts.append(krylov_vectors(operator, start, k))
        elif settings.eigen_solver == "ritz":
            parts.append(ritz_vectors(operator, u_t, v_t, k, settings.backend))
        else:
            parts.append(top_eigenvectors(operator, k, settings.backend))
        flags.append(degenerate)
        del operator
    embedding, degenerate = torch.cat(parts), np.concatenate(flags)
    embedding = embedding / embedding.norm(dim=2, keepdim=True).clamp_min(1e-30)
    centres, counts = kmeans(embedding, k, uniforms, settings.kmeans_iter)
    capacity = torch.full((G, k), b, dtype=torch.long, device=device)
    capacity.scatter_(1, counts.argmin(1, keepdim=True), m - b * (k - 1))
    labels = balanced_assignments(torch.cdist(embedding.double(), centres.double()),
                                  capacity).cpu().numpy()
    out = []
    for g in range(G):
        if degenerate[g]:
            out.append((partition(rngs[g].permutation(m), b, drop_last=False), True))
            continue
        order = np.argsort(labels[g], kind="stable")
        bounds = np.cumsum(np.bincount(labels[g], minlength=k))[:-1]
        out.append(([c.astype(np.int64) for c in np.split(order, bounds)], False))
    return out


def _operator(u: torch.Tensor, v: torch.Tensor, settings: _Settings) -> tuple[torch.Tensor,
                                                                               np.ndarray]:
    """The symmetric matrix whose top eigenvectors Alg. 3 wants, for each chunk.

    With ``A`` the affinity (``w`` of Eq. 5, or ``exp(w)`` as the authors' code) and
    ``D`` its degrees: ``D^-1/2 A D^-1/2`` (normalised Laplacian ``I - D^-1/2 A D^-1/2``,
    Ng, Jordan & Weiss) or ``A - D`` (the unnormalised ``L = D - A`` of Alg. 3, negated).
    ``exp(w)`` is formed stably: in the normalised case as
    ``exp(w_kl - lse_k / 2 - lse_l / 2)`` with ``lse`` the log-degrees, never above 1; in
    the unnormalised case after a global shift by the chunk's largest ``w`` (a constant
    factor, which leaves the eigenvectors unchanged). Also returns which chunks are
    degenerate: all affinities equal, or a graph split into components.
    """
    w = settings.loss.affinity(u, v, settings.batch_size)
    # in place from here on: the chunks are large and no gradient is needed
    diagonal = w.diagonal(dim1=1, dim2=2)
    diagonal.copy_(w[:, 0, 1:2].expand_as(diagonal))  # an off-diagonal value: one pass
    smallest, largest = torch.aminmax(w.flatten(1), dim=1)  # finds the off-diagonal range
    finite = torch.isfinite(smallest) & torch.isfinite(largest)  # NaN propagates here
    if not bool(finite.all()):
        raise ValueError(
            f"SpectralBatchSelector: the pair affinity of {int((~finite).sum())} of {len(w)} "
            f"chunk(s) is NaN or infinite: {type(settings.loss).__name__} at temperature "
            f"{settings.loss.temperature:g} overflows on embeddings this large (largest norm "
            f"{float(torch.cat([u, v], 1).norm(dim=-1).max()):.3g}). Raise the temperature, "
            "normalise the embeddings (the loss's normalize=True) or scale them down")
    spread = (largest - smallest).cpu().numpy()
    flat = spread <= 1e-6 * np.maximum(largest.cpu().numpy(), 1e-30)
    normalized = settings.laplacian == "normalized"
    m = w.shape[-1]
    if settings.affinity == "exp":
        diagonal.fill_(-torch.inf)
        if normalized:
            half = 0.5 * torch.logsumexp(w, 2)
            a = w.sub_(half[:, :, None]).sub_(half[:, None, :]).exp_()
        else:
            a = w.sub_(largest[:, None, None]).exp_()
        # exponents stay above -(spread + log m): below float32's smallest subnormal only
        # when the spread is large, and only then can entries underflow to zero
        may_vanish = spread + math.log(m) > 100
    else:
        diagonal.zero_()
        a = w
        may_vanish = (smallest == 0).cpu().numpy()
    zeros = np.zeros(len(a), dtype=bool)
    if may_vanish.any():
        zeros = ((a == 0).sum((1, 2)) > m).cpu().numpy() & may_vanish  # beyond the diagonal
    degenerate = flat | np.array([bool(zeros[g]) and not connected(a[g])
                                  for g in range(len(a))], dtype=bool)
    degree = a.sum(2)
    if not normalized:
        a.diagonal(dim1=1, dim2=2).sub_(degree)
    elif settings.affinity != "exp":  # exp(w) was normalised in the log domain above
        scale = degree.clamp_min(torch.finfo(a.dtype).tiny).rsqrt()
        a.mul_(scale[:, :, None]).mul_(scale[:, None, :])
    return a, degenerate


class SpectralBatchSelector(BatchSelector):
    """Batches from equal-size spectral clustering of the loss graph (Cho et al. 2023, Sec. 5.3,
    Alg. 3).

    The loss of a batch is bounded below by a sum of pair terms (Cho et al. 2023, Eq. 5, see
    :func:`~skcontrast.losses.pair_affinity`); partitioning the pairs into batches that
    maximise the total within-batch pair weight is a min-cut problem, relaxed here by
    spectral clustering:

    1. affinity ``A[k, l] = exp(w(k, l))`` (``affinity='exp'``, the default, as the
       authors' code clusters) or ``A = w`` (``affinity='bound'``, Alg. 3 as written),
       with ``w`` the pair terms of Eq. 5 of the loss being trained, at its current
       temperature (:meth:`~skcontrast.losses.Loss.affinity`); both are computed stably
       (no overflow at temperature 0.01);
    2. the first ``k = ceil(m / B)`` eigenvectors of the normalised Laplacian
       ``I - D^-1/2 A D^-1/2`` (``laplacian='normalized'``, the default) or of
       ``L = D - A`` (``'unnormalized'``, Alg. 3), rows normalised to unit length;
    3. k-means (Lloyd, k-means++ seeding) on those rows;
    4. an **exactly equal-size** assignment of points to the k centres at minimum
       total distance: every batch gets ``B`` points, except one per chunk that gets
       the remainder ``m mod B`` (``B + 1`` when the remainder is one point). This
       transportation problem is solved exactly by successive shortest paths on the
       ``k``-node graph of centres (see
       :func:`~skcontrast.selectors.balanced_assignment`), instead of the published
       dense ``m x m`` Hungarian problem.

    Why these defaults: on clustered embeddings, the regime where batch choice matters,
    clustering ``w`` itself makes batches much less hard than the authors' code, which
    clusters ``exp(w)``; ``exp(w)`` closes that gap. The normalised Laplacian is its
    numerically stable form, harder than the unnormalised one on clustered embeddings,
    within 1% on near-duplicate groups and equal on isotropic ones (the selectors page
    of the user guide tables hardness for the three regimes).

    For large ``n`` the samples are randomly cut into chunks of ``chunk_size`` points
    (rounded down to a multiple of ``B``) each epoch, and each chunk is clustered on its
    own (Cho et al. 2023, Appendix D.3): memory is O(chunk_size^2), never O(n^2), and time
    grows linearly with ``n``. Only the last chunk can be shorter, so an epoch has at
    most one batch smaller than ``B``. The chunks of an epoch are processed together, as
    stacks (groups bounded in memory), with batched affinities, eigensolvers, k-means
    and assignment; each chunk draws from its own generator, seeded from the epoch's
    (``random_state`` and epoch) and the chunk's index, so the batches do not depend on
    the grouping nor on ``n_jobs``.

    Eigensolvers: ``'krylov'`` (default) is a randomised block Krylov (block Lanczos)
    method with a Rayleigh-Ritz finish, five batched matrix products per chunk (chunks
    too small for it, under about 10 k + 80 points, use the exact solver);
    ``'dense'`` the exact dense symmetric solver (LAPACK ``syevr`` for the wanted
    eigenpairs only with ``backend='scipy'``, the full decomposition with ``'numpy'``,
    cuSOLVER with ``'cupy'``); ``'ritz'`` a Rayleigh-Ritz projection on span{1, u, v}.

    Degenerate chunks (all affinities equal, e.g. collapsed embeddings, or a graph split
    into components because affinities underflowed) fall back to a random equal-size
    partition, with a :class:`~skcontrast.exceptions.DegenerateEmbeddingWarning`.

    Parameters
    ----------
    batch_size : int, default=32
    chunk_size : int, default=1280
        Points clustered together (40 batches of 32 in Cho et al. 2023, Appendix D.3).
    loss : Loss, str or None, default=None
        Whose pair affinity is clustered. ``None``: inside an estimator, the loss being
        trained as it is at each epoch (its learned temperature included); standalone,
        :class:`~skcontrast.losses.SymmetricInfoNCE` at temperature 0.1.
    affinity : {'exp', 'bound'}, default='exp'
        ``exp(w)`` (the authors' code) or ``w`` (Alg. 3 as written).
    laplacian : {'normalized', 'unnormalized'}, default='normalized'
    eigen_solver : {'krylov', 'dense', 'ritz'}, default='krylov'
    backend : {'auto', 'numpy', 'scipy', 'cupy'}, default='auto'
        ``'auto'`` uses the GPU (CuPy) when one is usable and SciPy otherwise, silently;
        an explicit ``'cupy'`` without a usable GPU raises ``ValueError``.
    kmeans_iter : int, default=50
        Maximum Lloyd iterations per chunk.
    n_jobs : int or None, default=None
        Groups of chunks processed in parallel through joblib (any joblib backend,
        Dask included); ``None`` is one job unless a ``joblib.parallel_backend``
        context says otherwise. The batches are the same for any value.
    random_state : int, numpy Generator or None, default=None

    Examples
    --------
    >>> import numpy as np
    >>> from skcontrast.selectors import SpectralBatchSelector
    >>> X = np.random.default_rng(0).normal(size=(64, 2, 8))
    >>> sel = SpectralBatchSelector(batch_size=8, backend="numpy", random_state=0)
    >>> sorted(len(b) for b in sel.split(X))
    [8, 8, 8, 8, 8, 8, 8, 8]
    """

    @property
    def needs_embeddings(self) -> bool:
        return True

    def __init__(self, batch_size: int = 32, *, chunk_size: int = DEFAULT_CHUNK_SIZE,
                 loss: Any = None, affinity: str = "exp",
                 laplacian: str = "normalized", eigen_solver: str = "krylov",
                 backend: str = "auto", kmeans_iter: int = 50, n_jobs: int | None = None,
                 random_state: Any = None) -> None:
        store_params(self, locals())

    def _chunk_length(self, n: int) -> tuple[int, int]:
        b = check_batch_size(self.batch_size, n)
        size = check_int(self.chunk_size, "chunk_size", minimum=2)
        if size < b:
            raise ValueError(f"chunk_size={size} must be at least batch_size={b}")
        return b, size - size % b

    def _select(self, X, y, groups, rng, loss=None):
        n = len(X)
        b, chunk = self._chunk_length(n)
        settings = _settings(b, loss, self.affinity, self.laplacian,
                             self.eigen_solver, self.backend, self.kmeans_iter)
        u, v = LossBatch.pair_views(X)
        u, v = u.astype(np.float32, copy=False), v.astype(np.float32, copy=False)
        order = rng.permutation(n)
        starts = list(range(0, n, chunk))
        seeds = rng.integers(2**63, size=len(starts))
        results = self._cluster_all(u, v, order, starts, chunk, seeds, settings)
        batches, degenerate = [], 0
        for start, (local, fell_back) in zip(starts, results, strict=True):
            idx = order[start:start + chunk]
            batches.extend(idx[batch] for batch in local)
            degenerate += fell_back
        if degenerate:
            warnings.warn(
                f"SpectralBatchSelector: {degenerate} of {len(starts)} chunk(s) had no "
                "structure to cluster (equal affinities or a disconnected graph, e.g. "
                "collapsed embeddings); used a random equal-size partition for them",
                DegenerateEmbeddingWarning, stacklevel=4)
        return [batches[i] for i in rng.permutation(len(batches))]

    def _cluster_all(self, u: np.ndarray, v: np.ndarray, order: np.ndarray, starts: list,
                     chunk: int, seeds: np.ndarray,
                     settings: _Settings) -> list[tuple[list[np.ndarray], bool]]:
        """Cluster every chunk: the full chunks in ``n_jobs`` stacks, the shorter last
        chunk on its own."""
        full = [i for i, s in enumerate(starts) if len(order[s:s + chunk]) == chunk]
        n_stacks = min(len(full), effective_n_jobs(self.n_jobs)) or 1
        groups = [part.tolist() for part in np.array_split(full, n_stacks) if len(part)]
        groups += [[i] for i in range(len(starts)) if i not in full]

        def stack(group: list[int]) -> tuple[np.ndarray, np.ndarray]:
            idx = np.stack([order[starts[i]:starts[i] + chunk] for i in group])
            return u[idx], v[idx]

        jobs = [(*stack(group), [int(seeds[i]) for i in group], settings) for group in groups]
        outputs = Parallel(n_jobs=self.n_jobs)(delayed(_cluster_chunks)(*job) for job in jobs)
        results: list = [None] * len(starts)
        for group, output in zip(groups, outputs, strict=True):
            for i, result in zip(group, output, strict=True):
                results[i] = result
        return results

    def _n_batches(self, n, y):
        b, chunk = self._chunk_length(n)
        full, rest = divmod(n, chunk)
        return full * (chunk // b) + (n_partition_batches(rest, b, False) if rest else 0)
