"""Spectral-clustering batch selection (seed 002, Sec. 5.3, Eq. 5 and Appendix C.1 Alg. 3)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from .._backend import array_module, resolve_backend, to_numpy
from .._validation import check_choice, check_int
from ..exceptions import DegenerateEmbeddingWarning
from ..losses import pair_affinity
from ._adaptive import _temperature
from ._assignment import balanced_assignment
from ._base import BatchSelector, check_batch_size, n_partition_batches, partition, views

DEFAULT_CHUNK_SIZE = 1280  # 40 batches of 32, seed 002 Appendix D.3
EIGEN_SOLVERS = ("dense", "ritz")


def spectral_batches(u: Any, v: Any, batch_size: int, *, temperature: float = 0.1,
                     backend: str = "auto", eigen_solver: str = "dense",
                     random_state: Any = None,
                     kmeans_iter: int = 50) -> tuple[list[np.ndarray], bool]:
    """Equal-size spectral clustering of one chunk of pairs into batches (seed 002 Alg. 3).

    This is the per-chunk step of :class:`SpectralBatchSelector`; chunks are independent,
    so workers holding different shards of the data can each call it on their own shard.

    Parameters
    ----------
    u, v : array-like of shape (m, d)
        The chunk's paired embeddings (pass the same array twice for single views).
    batch_size : int
        ``B``; the chunk is cut into ``ceil(m / B)`` batches.
    temperature : float, default=0.1
        Temperature applied to the inner products of the affinity (Eq. 5).
    backend : {'auto', 'numpy', 'scipy', 'cupy'}, default='auto'
    eigen_solver : {'dense', 'ritz'}, default='dense'
        See :class:`SpectralBatchSelector`.
    random_state : int, numpy Generator or None
        Seeds k-means and the fallback partition.
    kmeans_iter : int, default=50
        Maximum Lloyd iterations.

    Returns
    -------
    batches : list of ndarray
        Indices into the chunk; all of size ``B`` except one holding ``m mod B``.
    degenerate : bool
        True when the chunk carried no structure (all affinities equal, or a
        disconnected graph) and a random equal-size partition was returned instead.
    """
    rng = np.random.default_rng(random_state)
    backend = resolve_backend(backend)
    m = len(u)
    k = n_partition_batches(m, batch_size, False)
    if k == 1:
        return [np.arange(m, dtype=np.int64)], False
    xp = array_module(backend)
    laplacian = _laplacian(u, v, batch_size, temperature, backend)
    if laplacian is None:
        return partition(rng.permutation(m), batch_size, drop_last=False), True
    if eigen_solver == "ritz":
        embedding = _ritz_vectors(laplacian, u, v, k, xp)
    else:
        embedding = _first_eigenvectors(laplacian, k, backend)
    norms = xp.linalg.norm(embedding, axis=1, keepdims=True)
    embedding = embedding / xp.where(norms > 0, norms, 1)
    centres, counts = _kmeans(embedding, k, rng, xp, kmeans_iter)
    cost = to_numpy(_pairwise_distances(embedding, centres, xp))
    capacity = np.full(k, batch_size, dtype=np.int64)
    capacity[int(np.argmin(counts))] = m - batch_size * (k - 1)
    labels = balanced_assignment(cost, capacity)
    order = np.argsort(labels, kind="stable")
    bounds = np.cumsum(np.bincount(labels, minlength=k))[:-1]
    return [b.astype(np.int64) for b in np.split(order, bounds)], False


def _laplacian(u: Any, v: Any, batch_size: int, temperature: float, backend: str) -> Any:
    """L = D - A for the affinity of Eq. 5, or ``None`` if the graph is degenerate."""
    device = "cuda" if backend == "cupy" else "cpu"
    u_t = torch.as_tensor(np.asarray(u, dtype=np.float32), device=device)
    v_t = torch.as_tensor(np.asarray(v, dtype=np.float32), device=device)
    w = pair_affinity(u_t, v_t, batch_size, temperature=temperature)
    w.diagonal().fill_(float("inf"))
    smallest = float(w.min())
    w.diagonal().fill_(0.0)
    largest = float(w.max())
    if largest - smallest <= 1e-6 * max(largest, 1e-30):
        return None
    if smallest == 0.0 and not _connected(w):
        return None
    degree = w.sum(1)
    w.neg_()
    w.diagonal().add_(degree)
    if backend == "cupy":
        import cupy

        return cupy.from_dlpack(w)
    return w.numpy()


def _connected(w: torch.Tensor) -> bool:
    """Whether the graph with edges ``w > 0`` is connected (softplus can underflow to 0)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    n_components, _ = connected_components(csr_matrix((w > 0).cpu().numpy()), directed=False)
    return n_components == 1


def _first_eigenvectors(laplacian: Any, k: int, backend: str) -> Any:
    """Eigenvectors of the ``k`` smallest eigenvalues.

    Dense symmetric solvers: the chunk is small (m ~ 1e3) and dense, only the bottom
    ~m/B of the spectrum is wanted, and for unstructured embeddings those eigenvalues
    are tightly clustered, which is where Krylov methods (ARPACK ``eigsh``) and LOBPCG
    need many iterations while a dense solver's cost does not change (measured on
    1280-point chunks: ``eigh`` with a subset 60 ms, ``eigsh`` 80-150 ms, SciPy's LOBPCG
    not converged after 30 iterations). ``'scipy'`` computes only the wanted eigenpairs
    (LAPACK ``syevx`` via ``subset_by_index``), ``'numpy'`` the full decomposition,
    ``'cupy'`` uses cuSOLVER's ``syevd`` on the GPU.
    """
    if backend == "scipy":
        import scipy.linalg

        _, vectors = scipy.linalg.eigh(laplacian, subset_by_index=(0, k - 1), driver="evx",
                                       overwrite_a=True, check_finite=False)
        return vectors
    xp = array_module(backend)
    _, vectors = xp.linalg.eigh(laplacian)
    return vectors[:, :k]


def _ritz_vectors(laplacian: Any, u: Any, v: Any, k: int, xp: Any) -> Any:
    """Rayleigh-Ritz approximation of the first ``k`` eigenvectors on span{1, u, v}.

    The affinity depends on the data only through inner products of the embeddings, so
    its smooth (low-frequency) eigenvectors are close to low-degree functions of the
    coordinates; the ``2d + 1`` columns ``[1, u, v]`` are projected on, and the small
    projected problem is solved exactly. Falls back to the dense solver when that basis
    has fewer than ``k`` columns.
    """
    m = laplacian.shape[0]
    basis = xp.concatenate([xp.ones((m, 1), dtype=laplacian.dtype),
                            xp.asarray(u, dtype=laplacian.dtype),
                            xp.asarray(v, dtype=laplacian.dtype)], axis=1)
    q, _ = xp.linalg.qr(basis)
    if q.shape[1] < k or q.shape[1] >= m:
        _, vectors = xp.linalg.eigh(laplacian)
        return vectors[:, :k]
    _, small = xp.linalg.eigh(q.T @ (laplacian @ q))
    return q @ small[:, :k]


def _pairwise_distances(x: Any, centres: Any, xp: Any) -> Any:
    sq = (x * x).sum(1)[:, None] + (centres * centres).sum(1)[None, :] - 2 * x @ centres.T
    return xp.sqrt(xp.maximum(sq, 0))


def _kmeans(x: Any, k: int, rng: np.random.Generator, xp: Any,
            max_iter: int) -> tuple[Any, np.ndarray]:
    """Lloyd's k-means with k-means++ seeding, on NumPy or CuPy arrays.

    Returns the centres and the size of each cluster under the final assignment.
    """
    m = x.shape[0]
    sq_norms = (x * x).sum(1)
    picks = [int(rng.integers(m))]
    closest = xp.maximum(sq_norms + sq_norms[picks[0]] - 2 * x @ x[picks[0]], 0)
    for _ in range(1, k):
        weights = to_numpy(closest).astype(np.float64)
        total = weights.sum()
        pick = int(rng.choice(m, p=weights / total)) if total > 0 else int(rng.integers(m))
        picks.append(pick)
        closest = xp.minimum(closest, xp.maximum(sq_norms + sq_norms[pick] - 2 * x @ x[pick], 0))
    centres = x[xp.asarray(picks)]
    labels = None
    for _ in range(max_iter):
        new_labels = ((centres * centres).sum(1)[None, :] - 2 * x @ centres.T).argmin(1)
        if labels is not None and bool((new_labels == labels).all()):
            break
        labels = new_labels
        one_hot = xp.zeros((k, m), dtype=x.dtype)
        one_hot[labels, xp.arange(m)] = 1
        sizes = one_hot.sum(1)
        sums = one_hot @ x
        centres = xp.where((sizes > 0)[:, None], sums / xp.maximum(sizes, 1)[:, None], centres)
    return centres, np.bincount(to_numpy(labels), minlength=k)


class SpectralBatchSelector(BatchSelector):
    """Batches from equal-size spectral clustering of the loss graph (seed 002 Sec. 5.3, Alg. 3).

    The loss of a batch is bounded below by a sum of pair terms (seed 002 Eq. 5, see
    :func:`~skcontrast.losses.pair_affinity`); partitioning the pairs into batches that
    maximise the total within-batch pair weight is a min-cut problem, relaxed here by
    spectral clustering:

    1. affinity ``A[k, l] = w(k, l)`` (Eq. 5) with the loss temperature applied to the
       inner products, computed stably as ``softplus`` (no overflow at temperature
       0.01);
    2. Laplacian ``L = D - A`` and its first ``k = ceil(m / B)`` eigenvectors (dense
       symmetric solver, see below), rows normalised to unit length;
    3. k-means (Lloyd, k-means++ seeding) on those rows;
    4. an **exactly equal-size** assignment of points to the k centres at minimum
       total distance: every batch gets ``B`` points, except one per chunk that gets
       the remainder ``m mod B``. This transportation problem is solved exactly by
       successive shortest paths on the ``k``-node graph of centres (see
       ``skcontrast.selectors._assignment``): milliseconds instead of the seconds of
       the published dense ``m x m`` Hungarian problem.

    For large ``n`` the samples are randomly cut into chunks of ``chunk_size`` points
    (rounded down to a multiple of ``B``) each epoch, and each chunk is clustered on its
    own (seed 002 Appendix D.3): memory is O(chunk_size^2), never O(n^2), and time
    grows linearly with ``n``. Only the last chunk can be shorter, so an epoch has at
    most one batch smaller than ``B``. Chunks are independent; see
    :func:`spectral_batches` to select batches shard by shard.

    The eigensolver (``eigen_solver='dense'``, the default) is a dense symmetric one:
    ``'scipy'`` computes only the ``k`` wanted eigenpairs (LAPACK ``syevx``), ``'numpy'``
    the full decomposition, ``'cupy'`` cuSOLVER on the GPU. A chunk is small and
    dense, and the bottom of the spectrum of unstructured embeddings is tightly
    clustered, which is where ``eigsh`` and LOBPCG need many iterations; a dense solver
    costs the same whatever the spectrum (measured on 1280-point chunks: ``eigh`` with a
    subset 60-75 ms, ``eigsh`` 80-150 ms, LOBPCG 10 ms per iteration and 8 iterations to
    reach 0.1%). ``eigen_solver='ritz'`` trades exactness for speed: a Rayleigh-Ritz
    projection on span{1, u, v} (the affinity depends on the embeddings only through
    inner products, so its smooth eigenvectors lie close to functions of the
    coordinates), about 4 times cheaper; its eigenvalues are approximate, and
    ``benchmarks/bench_selectors.py`` reports the loss of the batches it gives.

    Degenerate chunks (all affinities equal, e.g. collapsed embeddings, or a graph split
    into components because affinities underflowed) fall back to a random equal-size
    partition, with a :class:`~skcontrast.exceptions.DegenerateEmbeddingWarning`.

    Parameters
    ----------
    batch_size : int, default=32
    chunk_size : int, default=1280
        Points clustered together (40 batches of 32 in seed 002 Appendix D.3).
    temperature : float or None, default=None
        Loss temperature of the affinity; ``None``: the estimator's when used inside
        one, else 0.1.
    backend : {'auto', 'numpy', 'scipy', 'cupy'}, default='auto'
        ``'auto'`` uses CuPy when a GPU is usable and SciPy otherwise, silently; an
        explicit ``'cupy'`` without a usable GPU raises ``ValueError``.
    eigen_solver : {'dense', 'ritz'}, default='dense'
        Exact dense eigenvectors, or the faster Rayleigh-Ritz approximation.
    kmeans_iter : int, default=50
        Maximum Lloyd iterations per chunk.
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

    _adaptive = True

    def __init__(self, batch_size: int = 32, *, chunk_size: int = DEFAULT_CHUNK_SIZE,
                 temperature: float | None = None, backend: str = "auto",
                 eigen_solver: str = "dense", kmeans_iter: int = 50,
                 random_state: Any = None) -> None:
        self.batch_size = batch_size
        self.chunk_size = chunk_size
        self.temperature = temperature
        self.backend = backend
        self.eigen_solver = eigen_solver
        self.kmeans_iter = kmeans_iter
        self.random_state = random_state

    def _chunk_length(self, n: int) -> tuple[int, int]:
        b = check_batch_size(self.batch_size, n)
        size = check_int(self.chunk_size, "chunk_size", minimum=2)
        if size < b:
            raise ValueError(f"chunk_size={size} must be at least batch_size={b}")
        return b, size - size % b

    def _select(self, X, y, groups, rng):
        n = len(X)
        b, chunk = self._chunk_length(n)
        backend = resolve_backend(self.backend)
        check_choice(self.eigen_solver, "eigen_solver", EIGEN_SOLVERS)
        check_int(self.kmeans_iter, "kmeans_iter", minimum=1)
        temperature = _temperature(self)
        u, v = views(X)
        order = rng.permutation(n)
        batches, degenerate, chunks = [], 0, 0
        # The per-chunk linear algebra is small; letting OpenBLAS and torch's OpenMP pool
        # both spin on the same cores made it twice as slow on a 2-core machine.
        with threadpool_limits(limits=1, user_api="blas"):
            for start in range(0, n, chunk):
                idx = order[start:start + chunk]
                local, fell_back = spectral_batches(
                    u[idx], v[idx], b, temperature=temperature, backend=backend,
                    eigen_solver=self.eigen_solver, random_state=rng,
                    kmeans_iter=self.kmeans_iter)
                batches.extend(idx[batch] for batch in local)
                degenerate += fell_back
                chunks += 1
        if degenerate:
            warnings.warn(
                f"SpectralBatchSelector: {degenerate} of {chunks} chunk(s) had no structure "
                "to cluster (equal affinities or a disconnected graph, e.g. collapsed "
                "embeddings); used a random equal-size partition for them",
                DegenerateEmbeddingWarning, stacklevel=4)
        return [batches[i] for i in rng.permutation(len(batches))]

    def _n_batches(self, n, y):
        b, chunk = self._chunk_length(n)
        full, rest = divmod(n, chunk)
        return full * (chunk // b) + (n_partition_batches(rest, b, False) if rest else 0)
