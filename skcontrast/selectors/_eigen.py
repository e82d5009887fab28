"""The numerics of spectral clustering, on stacks of chunks: the leading eigenvectors of
an affinity operator (dense, Krylov or Ritz, on the CPU or the GPU) and k-means on the
rows of the spectral embedding (Cho et al. 2023, arXiv:2307.05906, Appendix C.1 Alg. 3).
:mod:`._spectral` builds the operators and assigns the batches."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from ._assignment import cluster_counts

#: Krylov iterations of the top eigenvectors (each a multiplication by the operator)
KRYLOV_STEPS = 4
#: k-means checks convergence every few iterations (a sync on the GPU)
CHECK_EVERY = 4


@contextlib.contextmanager
def lapack_one_thread() -> Iterator[None]:
    """torch's QR and symmetric eigensolver on the CPU give results that depend on its
    thread count; on one thread, a chunk's batches are the same in every process and
    for any ``n_jobs`` (the matrix products, the costly part, are thread-independent)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def orthonormal(x: torch.Tensor) -> torch.Tensor:
    with lapack_one_thread():
        return torch.linalg.qr(x).Q


def symmetric_eigh(x: torch.Tensor) -> torch.Tensor:
    with lapack_one_thread():
        return torch.linalg.eigh(x)[1]


def connected(a: torch.Tensor) -> bool:
    """Whether the graph with edges ``a > 0`` is connected (affinities can underflow to 0)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    n_components, _ = connected_components(csr_matrix((a > 0).cpu().numpy()), directed=False)
    return n_components == 1


def top_eigenvectors(operator: torch.Tensor, k: int, backend: str) -> torch.Tensor:
    """Exact eigenvectors of the ``k`` largest eigenvalues of each matrix of the stack.

    ``'scipy'`` computes only the wanted eigenpairs (LAPACK ``syevr`` through
    ``subset_by_index``), one matrix per thread; ``'numpy'`` the full stacked
    decomposition; ``'cupy'`` cuSOLVER's batched solver on the GPU.
    """
    if backend == "cupy":
        import cupy

        _, vectors = cupy.linalg.eigh(cupy.from_dlpack(operator.contiguous()))
        return torch.from_dlpack(vectors[..., ::-1][..., :k].copy())
    matrices = operator.numpy()
    if backend == "numpy":
        return torch.from_numpy(np.linalg.eigh(matrices)[1][..., ::-1][..., :k].copy())
    import scipy.linalg

    m = matrices.shape[-1]

    def top(matrix: np.ndarray) -> np.ndarray:
        _, vectors = scipy.linalg.eigh(matrix, subset_by_index=(m - k, m - 1), driver="evr",
                                       check_finite=False)
        return vectors[:, ::-1]

    with ThreadPoolExecutor(max(1, min(torch.get_num_threads(), len(matrices)))) as pool:
        return torch.from_numpy(np.stack(list(pool.map(top, matrices))))


def krylov_vectors(operator: torch.Tensor, start: torch.Tensor, k: int) -> torch.Tensor:
    """Top-``k`` eigenvectors from a randomised block Krylov space (block Lanczos).

    From a random block of ``k + max(k // 5, 8)`` columns, :data:`KRYLOV_STEPS` products
    with the operator build the space ``[Q, S Q, S^2 Q, ...]``, kept orthonormal block by
    block (classical Gram-Schmidt, twice, then QR); the Rayleigh-Ritz step then solves
    the small projected problem exactly, reusing the products already made. For the
    same number of matrix products this converges far faster than subspace (power)
    iteration (Musco & Musco, *Randomized block Krylov methods for stronger and faster
    approximate singular value decomposition*, NeurIPS 2015); on 1280-point chunks it
    gave batches as hard as 8 power iterations at half their cost
    (``benchmarks/bench_selectors.py`` reports the hardness against the exact solver
    and the published pipeline).
    """
    blocks = [orthonormal(start.to(operator.dtype))]
    images = []
    for step in range(KRYLOV_STEPS + 1):
        image = operator @ blocks[-1]
        images.append(image)
        if step == KRYLOV_STEPS:
            break
        basis = torch.cat(blocks, 2)
        for _ in range(2):
            image = image - basis @ (basis.transpose(1, 2) @ image)
        blocks.append(orthonormal(image))
    basis = torch.cat(blocks, 2)
    projected = basis.transpose(1, 2) @ torch.cat(images, 2)
    small = symmetric_eigh(0.5 * (projected + projected.transpose(1, 2)))
    return basis @ small.flip(2)[:, :, :k]


def ritz_vectors(operator: torch.Tensor, u: torch.Tensor, v: torch.Tensor, k: int,
                  backend: str) -> torch.Tensor:
    """Rayleigh-Ritz approximation of the top ``k`` eigenvectors on span{1, u, v}.

    The affinity depends on the data only through inner products of the embeddings, so
    its smooth (low-frequency) eigenvectors are close to low-degree functions of the
    coordinates; the ``2d + 1`` columns ``[1, u, v]`` are projected on, and the small
    projected problem is solved exactly. Falls back to the exact solver when that basis
    has fewer than ``k`` columns.
    """
    G, m, _ = operator.shape
    ones = torch.ones(G, m, 1, dtype=operator.dtype, device=operator.device)
    basis = torch.cat([ones, u.to(operator.dtype), v.to(operator.dtype)], dim=2)
    if basis.shape[2] < k or basis.shape[2] >= m:
        return top_eigenvectors(operator, k, backend)
    q = orthonormal(basis)
    small = symmetric_eigh(q.transpose(1, 2) @ operator @ q)
    return q @ small.flip(2)[:, :, :k]


def kmeans(x: torch.Tensor, k: int, uniforms: torch.Tensor,
            max_iter: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Lloyd's k-means with k-means++ seeding on a stack ``(G, m, p)`` of point sets.

    ``uniforms[g]`` holds the ``k`` uniform draws of chunk ``g``'s seeding (inverse-CDF
    sampling), so no draw depends on the other chunks. Convergence is checked every
    :data:`CHECK_EVERY` iterations (a device synchronisation on the GPU); iterations
    after convergence change nothing. Returns the centres and the size of each cluster
    under the final assignment.
    """
    G, m, _ = x.shape
    rows = torch.arange(G, device=x.device)
    sq = (x * x).sum(2)

    def distances(centre: torch.Tensor) -> torch.Tensor:
        d = sq + (centre * centre).sum(1)[:, None] - 2 * (x @ centre[:, :, None])[:, :, 0]
        return d.clamp_min(0)

    picks = [(uniforms[:, 0] * m).long().clamp(max=m - 1)]
    closest = distances(x[rows, picks[0]])
    for j in range(1, k):
        cumulative = closest.double().cumsum(1)
        total = cumulative[:, -1]
        drawn = (cumulative <= (uniforms[:, j] * total)[:, None]).sum(1).clamp(max=m - 1)
        pick = torch.where(total > 0, drawn, (uniforms[:, j] * m).long().clamp(max=m - 1))
        picks.append(pick)
        closest = torch.minimum(closest, distances(x[rows, pick]))
    centres = x[rows[:, None], torch.stack(picks, 1)]
    clusters = torch.arange(k, device=x.device)[None, :, None]
    labels = torch.full_like(picks[0][:, None].expand(-1, m), -1)  # no cluster yet
    for iteration in range(max_iter):
        new = ((centres * centres).sum(2)[:, None, :] - 2 * x @ centres.transpose(1, 2)).argmin(2)
        if iteration and iteration % CHECK_EVERY == 0 and bool((new == labels).all()):
            break
        labels = new
        one_hot = (labels[:, None, :] == clusters).to(x.dtype)
        sizes = one_hot.sum(2, keepdim=True)
        centres = torch.where(sizes > 0, (one_hot @ x) / sizes.clamp_min(1), centres)
    return centres, cluster_counts(labels, k)


# --------------------------------------------------------------------------------------
# The selector
# --------------------------------------------------------------------------------------
