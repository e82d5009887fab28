"""ContrastiveEmbedder: paired views or two modalities, and SimCLR-style single views."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted, validate_data

from .._validation import check_finite_array, check_int, describe
from ..metrics import recall_at_k
from ._base import BaseEmbedder
from ._modules import build_encoders


class ContrastiveEmbedder(BaseEmbedder):
    """Learn an embedding that maps the two views of an item close together.

    A scikit-learn transformer that trains a torch encoder with a contrastive loss
    (default: the symmetric InfoNCE of CLIP, seed 000 Eq. 1-2) on batches chosen by a
    pluggable batch selector. Inside ``fit`` it builds a skorch ``NeuralNet`` that drives
    training; the selector decides which pairs share each mini-batch, epoch by epoch
    (adaptive selectors see the current embeddings of the whole training set first).

    ``X`` comes in three forms: pairs ``(n, 2, d)``, where ``X[i, 0]`` and ``X[i, 1]``
    are the two views of item ``i``; two modalities side by side, ``(n, d0 + d1)``, where
    columns ``[:view_split]`` are view 0 and the rest view 1 (``view_split=None``: half
    and half; each view gets its own encoder when the widths differ), the form that
    works in a ``Pipeline`` (e.g. after a ``StandardScaler``); and single views
    ``(n, d)`` with an ``augmentation``, two random views of each row being drawn for
    every batch (SimCLR).

    Parameters
    ----------
    module : torch.nn.Module, nn.Module class, factory ``f(n_in, n_out)``, pair of those, or None
        The encoder. ``None``: an MLP with ``hidden_layer_sizes``, sized from the data.
        A pair gives one encoder per view (two modalities).
    n_components : int, default=32
        Embedding dimension.
    hidden_layer_sizes : tuple of int, default=(128,)
        Hidden widths of the default MLP.
    loss : str or callable, default='symmetric_info_nce'
        Any loss of :mod:`skcontrast.losses` by name ('info_nce', 'symmetric_info_nce',
        'nt_xent', 'dcl', 'dhel', 'kcl', 'supcon', 'contrastive_margin'; label losses
        treat each pair as its own class), or a callable ``f(u, v, temperature=...)``.
    temperature : float, default=0.1
    learn_temperature : bool, default=False
        Learn the temperature (as a log, floored at 0.01), as CLIP does; the final value
        is ``temperature_``.
    lambda_pos, lambda_ent : float or None, default=None
        Balance of the positive and entropy terms (seed 001 Eq. 5); ``None`` keeps the
        loss's own default.
    loss_params : dict or None, default=None
        More keyword arguments for the loss (e.g. ``{'margin': 0.5}``).
    batch_size : int or None, default=None
        ``None`` uses the selector's batch size. An int overrides it; the estimator
        works on a clone of the selector, never on the user's object. Both
        ``batch_size`` and ``selector__batch_size`` can be tuned by ``GridSearchCV``.
    selector : BatchSelector or None, default=None
        Which pairs share a batch; ``None`` is ``ShuffledBatchSelector(min(64, n))``. Adaptive
        selectors whose ``temperature``/``loss`` are ``None`` use the estimator's.
    max_epochs : int, default=20
    lr : float, default=1e-3
    optimizer : {'adam', 'adamw', 'sgd'} or torch.optim.Optimizer class, default='adam'
    optimizer_params : dict or None, default=None
        E.g. ``{'weight_decay': 1e-4}``.
    view_split : int or None, default=None
        For 2-D input without augmentation: the column where view 1 starts.
    shared_encoder : {'auto', True, False}, default='auto'
        One encoder for both views; ``'auto'`` shares when the views have equal width.
    augmentation : callable or None, default=None
        ``augmentation(x, generator) -> tensor``: one random view of a batch (see
        :mod:`skcontrast.datasets` for ready ones). Must be picklable to pickle the
        estimator.
    device : {'auto', 'cpu', 'cuda'}, default='auto'
    random_state : int or None, default=None
        Seeds the module, the selector (when it has none) and the augmentations;
        fitting is then reproducible on the CPU.
    verbose : int, default=0
        1 shows a progress bar per epoch and skorch's table (loss, duration, selection
        time).
    callbacks : list or None, default=None
        Extra skorch callbacks.
    warm_start : bool, default=False
        Continue training the fitted network on the next ``fit``.

    Attributes
    ----------
    net_ : skorch.NeuralNet
        The trained net.
    history_ : skorch.History
        Per epoch: ``train_loss``, ``train_positive``, ``train_entropy``, ``dur``,
        ``select_time``, ``n_batches``.
    n_features_in_ : int
    view_split_ : int or None
        Where view 1 starts in the 2-D form (``None`` for single views).
    temperature_ : float

    Examples
    --------
    >>> from skcontrast import ContrastiveEmbedder
    >>> from skcontrast.datasets import make_paired_gaussians
    >>> X, _ = make_paired_gaussians(200, 8, random_state=0)
    >>> est = ContrastiveEmbedder(n_components=4, max_epochs=2, random_state=0).fit(X)
    >>> est.transform(X).shape
    (200, 4)
    """

    _labelled = False

    def __init__(self, module: Any = None, *, n_components: int = 32,
                 hidden_layer_sizes: tuple = (128,), loss: Any = "symmetric_info_nce",
                 temperature: float = 0.1, learn_temperature: bool = False,
                 lambda_pos: float | None = None, lambda_ent: float | None = None,
                 loss_params: dict | None = None, batch_size: int | None = None,
                 selector: Any = None, max_epochs: int = 20, lr: float = 1e-3,
                 optimizer: Any = "adam", optimizer_params: dict | None = None,
                 view_split: int | None = None, shared_encoder: Any = "auto",
                 augmentation: Any = None, device: str = "auto", random_state: Any = None,
                 verbose: int = 0, callbacks: list | None = None,
                 warm_start: bool = False) -> None:
        self.module = module
        self.n_components = n_components
        self.hidden_layer_sizes = hidden_layer_sizes
        self.loss = loss
        self.temperature = temperature
        self.learn_temperature = learn_temperature
        self.lambda_pos = lambda_pos
        self.lambda_ent = lambda_ent
        self.loss_params = loss_params
        self.batch_size = batch_size
        self.selector = selector
        self.max_epochs = max_epochs
        self.lr = lr
        self.optimizer = optimizer
        self.optimizer_params = optimizer_params
        self.view_split = view_split
        self.shared_encoder = shared_encoder
        self.augmentation = augmentation
        self.device = device
        self.random_state = random_state
        self.verbose = verbose
        self.callbacks = callbacks
        self.warm_start = warm_start

    # -- input handling ---------------------------------------------------------------

    def _to_2d(self, X: Any) -> tuple[Any, int | None]:
        """Flatten ``(n, 2, d)`` pairs to ``(n, 2d)``; returns the array and its split."""
        if hasattr(X, "ndim") and X.ndim == 3:
            if X.shape[1] != 2:
                raise ValueError(f"paired X must have shape (n, 2, d); got {describe(X)}")
            if isinstance(X, torch.Tensor):
                X = X.detach().cpu().numpy()
            return np.asarray(X).reshape(len(X), -1), X.shape[2]
        return X, None

    def _validate(self, X: Any, *, reset: bool) -> np.ndarray:
        X, pair_split = self._to_2d(X)
        X = validate_data(self, X, reset=reset, dtype=[np.float32, np.float64],
                          ensure_min_samples=2 if reset else 1)
        if reset:
            self._pair_split = pair_split
        return X.astype(np.float32, copy=False)

    def _resolve_split(self, n_features: int) -> int | None:
        if self.augmentation is not None:
            return None
        if self._pair_split is not None:
            return self._pair_split
        if n_features < 2:
            raise ValueError(
                f"ContrastiveEmbedder needs two views, but X has {n_features} feature(s): "
                "pass pairs (n, 2, d), two views side by side (n, d0 + d1), or single "
                "views with an augmentation")
        if self.view_split is None:
            return n_features // 2
        return check_int(self.view_split, "view_split", minimum=1, maximum=n_features - 1)

    # -- public API -------------------------------------------------------------------

    def fit(self, X: Any, y: Any = None) -> ContrastiveEmbedder:
        """Train the encoder(s) on pairs (or augmented single views).

        Parameters
        ----------
        X : array-like of shape (n, 2, d), (n, d0 + d1), or (n, d) with an augmentation
        y : array-like of shape (n,), optional
            Not used by the loss; handed to the selector (e.g. ``BindingSelector``).

        Returns
        -------
        self
        """
        X = self._validate(X, reset=True)
        split = self._resolve_split(X.shape[1])
        self.view_split_ = split
        widths = [X.shape[1]] if split is None else [split, X.shape[1] - split]
        if self.shared_encoder not in ("auto", True, False):
            raise ValueError(f"shared_encoder must be 'auto', True or False; got "
                             f"{describe(self.shared_encoder)}")
        shared = widths[0] == widths[-1] if self.shared_encoder == "auto" else \
            bool(self.shared_encoder)
        if shared and widths[0] != widths[-1]:
            raise ValueError(f"shared_encoder=True needs views of equal width; got widths "
                             f"{widths}")

        def make_module():
            return build_encoders(self.module, widths, tuple(self.hidden_layer_sizes),
                                  self.n_components, shared, split)

        labels = None
        if y is not None:
            labels = np.asarray(y)
            if len(labels) != len(X):
                raise ValueError(f"y has {len(labels)} entries but X has {len(X)} samples")
        self._fit_net(torch.from_numpy(X), make_module, labels, None)
        return self

    def transform(self, X: Any) -> np.ndarray:
        """Embeddings of view 0 (unit norm, float32), shape ``(n, n_components)``.

        Use :meth:`transform_view` to embed items of view 1, :meth:`transform_pairs` for
        both views.
        """
        check_is_fitted(self, "net_")
        X = self._validate(X, reset=False)
        columns = X if self.view_split_ is None else X[:, :self.view_split_]
        return self._embed(torch.from_numpy(np.ascontiguousarray(columns)), view=0)

    def transform_pairs(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Embeddings ``(U, V)`` of both views of paired ``X`` (same forms as ``fit``).

        For single-view training with an augmentation, the two views are two random
        augmentations of ``X`` (a fixed seed, so the result is reproducible).
        """
        check_is_fitted(self, "net_")
        X = torch.from_numpy(self._validate(X, reset=False))
        if self.view_split_ is None:
            generator = torch.Generator().manual_seed(0)
            first = self.augmentation(X, generator)
            second = self.augmentation(X, generator)
            return self._embed(first, view=0), self._embed(second, view=0)
        split = self.view_split_
        return (self._embed(X[:, :split].contiguous(), view=0),
                self._embed(X[:, split:].contiguous(), view=1))

    def transform_view(self, X_view: Any, view: int = 1) -> np.ndarray:
        """Embeddings of single-view items of ``view`` (raw features of that view only).

        Parameters
        ----------
        X_view : array-like of shape (n, d_view)
            E.g. captions alone, to search them against images.
        view : {0, 1}, default=1
        """
        check_is_fitted(self, "net_")
        if view not in (0, 1):
            raise ValueError(f"view must be 0 or 1; got {describe(view)}")
        X_view = np.asarray(X_view, dtype=np.float32)
        split = self.view_split_
        width = self.n_features_in_ if split is None else (
            split if view == 0 else self.n_features_in_ - split)
        if X_view.ndim != 2 or X_view.shape[1] != width:
            raise ValueError(f"X_view for view {view} must have shape (n, {width}); got "
                             f"{describe(X_view)}")
        check_finite_array(X_view, "X_view")
        return self._embed(torch.from_numpy(X_view), view=view if split is not None else 0)

    def score(self, X: Any, y: Any = None) -> float:
        """Pair-retrieval recall@1 on ``X``, mean of both directions (y is ignored)."""
        return recall_at_k(*self.transform_pairs(X), k=1)
