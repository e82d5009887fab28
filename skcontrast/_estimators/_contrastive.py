"""ContrastiveEmbedder: paired views or two modalities, and SimCLR-style single views.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted

from .._constraints import Interval, Options
from .._validation import check_labels
from ..metrics import recall_at_k
from ._base import BaseEmbedder, check_out, global_rng_turn, sample_of
from ._docs import shared_parameters
from ._forms import read_fit_input, read_input, read_view
from ._params import Auto, TransformViews, options
from ._step import Augmentation

if TYPE_CHECKING:
    import torch




@shared_parameters
class ContrastiveEmbedder(BaseEmbedder):
    """Learn an embedding that maps the two views of an item close together.

    A scikit-learn transformer that trains a torch encoder with a contrastive loss
    (default: the symmetric InfoNCE of CLIP, Sreenivasan et al. 2023,
    openreview.net/forum?id=7n2dNATSHeQ, Eq. 1-2) on batches chosen by a pluggable batch selector.
    Inside ``fit`` it builds a skorch ``NeuralNet`` that drives training; the selector decides which
    pairs share each mini-batch, epoch by epoch (adaptive selectors see the current embeddings of
    the whole training set first).

    ``X`` comes in these forms:

    - pairs ``(n, 2, *view_shape)``: ``X[i, 0]`` and ``X[i, 1]`` are the two views of
      item ``i``, each reaching the encoder whole (``(n, 2, d)`` feature vectors,
      ``(n, 2, C, H, W)`` images);
    - two views side by side, ``(n, d0 + d1)``: columns ``[:view_split]`` are view 0
      and the rest view 1 (``view_split=None``: half and half), the form that works in
      a ``Pipeline`` (e.g. after a ``StandardScaler``);
    - single views ``(n, *shape)`` with an ``augmentation``: two random views of each
      row are drawn for every batch, on the training device (SimCLR);
    - two modalities of any shapes and dtypes as a dict of two equally long arrays or
      tensors, e.g. ``{"image": float32 (n, 3, 32, 32), "text": int64 (n, 77)}``
      (wrap it in ``skorch.helper.SliceDict`` for ``GridSearchCV``);
    - a map-style ``torch.utils.data.Dataset`` whose item ``i`` is the pair
      ``(x0, x1)`` (PyTorch's "two crops" pattern, so per-sample augmentations run in
      ``num_workers`` DataLoader workers), or a single view with an ``augmentation``;
      labels, if any, go through ``y`` (``skorch.helper.SliceDataset`` makes a Dataset
      splittable by ``GridSearchCV``).

    - text: pairs of strings, a list of ``(anchor, positive)`` or an ``(n, 2)`` array of
      ``str``; ``transform`` then takes a list of strings. The ``tokenizer`` turns them
      into token ids, which a bag of n-grams embeds by default (see
      :mod:`skcontrast.text`).

    Integer views (token ids) stay integers for embedding layers, and need a ``module``
    (so do ``(n, 2, L)`` integer pairs); bytes (uint8) are images, scaled to [0, 1] on
    the device; floats become float32 and must be finite. Integer 2-D features are
    numbers, as in scikit-learn.

    Parameters
    ----------
    module : nn.Module, nn.Module class, factory ``f(n_in, n_out)``, pair or dict of those, or None
        The encoder. ``None``: an MLP with ``hidden_layer_sizes``, sized from the data
        (N-D views are flattened first). A pair, or a dict keyed by view name for dict
        input, gives one encoder per view (two modalities). A factory receives the
        number of values per item, ``n_in``. Define modules on the CPU; the estimator
        moves its own copy to ``device``.
    {shared: tokenizer n_components hidden_layer_sizes}
    loss : Loss or str, default='symmetric_info_nce'
        The loss: an object of :mod:`skcontrast.losses` (``SymmetricInfoNCE(temperature=
        0.05, learn_temperature=True)``, ``NTXent()``, ``SigLIP()``, ``DCL()``, ...) or
        its function's name, shorthand for the object with defaults. It holds the
        temperature (fixed or learned; the final value is ``temperature_``), the balance
        weights of Sors et al. 2021, arXiv:2112.11743, Eq. 5, ``chunk_size`` (tiled, O(B) memory;
        ``'auto'`` tiles once one B x B similarity matrix would exceed 256 MiB) and its own options;
        tune them as ``loss__temperature``, ``loss__lambda_ent``, ... Label losses (SupCon,
        ContrastiveMargin) treat each pair as its own class. A bare callable ``f(u, v,
        temperature=...)`` works too, with a warning naming what it gives up
        (:class:`~skcontrast.losses.FunctionLoss`). The adaptive selectors and the
        memory work with this very loss, as it is at each moment of the fit.
    {shared: batch_size selector memory max_epochs lr lr_schedule validation_fraction}
    {shared: scoring optimizer optimizer_params}
    view_split : int or None, default=None
        For 2-D input without augmentation: the column where view 1 starts.
    shared_encoder : {'auto', True, False}, default='auto'
        One encoder for both views; ``'auto'`` shares when the views have equal shape
        and kind.
    augmentation : callable or None, default=None
        One random view of a batch, called on the batch already on the training device:
        ``f(x)`` (e.g. a kornia ``AugmentationSequential``, drawing from torch's global
        generator, which ``fit`` seeds) or ``f(x, generator)`` (e.g. the augmentations
        of :mod:`skcontrast.datasets`). Must be picklable to pickle the estimator.
    {shared: precision num_workers data_on_device image_normalization micro_batch_size}
    {shared: selection_pass accelerator device random_state verbose callbacks warm_start}
    {shared: projection_head transform_from}
    transform_views : {'first', 'concat', 'mean'}, default='first'
        What :meth:`transform` (and so a ``Pipeline``) returns for paired input: the
        embedding of view 0 alone (the two views of an item share an embedding space, so
        one is its representation), or both views' embeddings side by side (twice the
        width), or their mean (unit-normalised in the head's space). A classifier after
        the embedder sees only view 0's half of the input with ``'first'``: compare it
        with one on all the input using ``'concat'``.
    {shared: freeze **kwargs}
    Attributes
    ----------
    n_components_ : int
        Width of :meth:`transform`'s output (the head's or the backbone's).
    net_ : skorch.NeuralNet
        The trained net.
    history_ : skorch.History
        Per epoch: ``train_loss``, ``train_positive``, ``train_entropy``, ``dur``,
        ``select_time``, ``n_batches``.
    n_features_in_ : int
        For 2-D (and ``(n, 2, d)``) input only.
    input_spec_ : InputSpec
        The form of the training input and the shape and kind of each view; later
        input is checked against it.
    view_split_ : int or None
        Where view 1 starts in the 2-D form (``None`` for the other forms).
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

    _labelled: ClassVar[bool] = False
    _parameter_constraints: ClassVar[dict[str, list]] = {
        **BaseEmbedder._parameter_constraints,
        "view_split": [None, Interval(int, 1)],
        "shared_encoder": [Options(*options(Auto), True, False)],
        "transform_views": [Options(*options(TransformViews))],
    }

    # its own parameters (the shared ones: ParameterChecks)
    view_split: int | None = None
    shared_encoder: bool | Auto = "auto"
    transform_views: TransformViews = "first"

    # -- public API -------------------------------------------------------------------

    def fit(self, X: Any, y: Any = None, X_val: Any = None,
            y_val: Any = None) -> ContrastiveEmbedder:
        """Train the encoder(s) on pairs (or augmented single views).

        Parameters
        ----------
        X : array-like, tensor, dict of two arrays, or torch Dataset
            Pairs ``(n, 2, *view_shape)``; two views side by side ``(n, d0 + d1)``;
            single views ``(n, *shape)`` with an ``augmentation``; two modalities
            ``{name0: (n, ...), name1: (n, ...)}``; or a map-style ``Dataset`` whose item
            ``i`` is ``(x0, x1)`` (a single view with an ``augmentation``). Hard
            negatives: ``(n, 2 + k, ...)`` arrays, rows of ``2 + k`` texts, or a dict's
            keys after the first two (items of the second view's form), for the losses
            that take them; they train only.
        y : array-like of shape (n,), optional
            Not used by the loss; handed to the selector (e.g. ``BindingSelector``).
        X_val, y_val : optional
            Held-out data in the form of ``X`` (and its labels, for label scorers):
            ``valid_loss`` (and ``valid_score`` with ``scoring``) are recorded on it
            every epoch. Instead of ``validation_fraction``.

        Returns
        -------
        self
        """
        self._check_params()
        data, spec, features = read_fit_input(self, X, single=self.augmentation is not None,
                                              view_split=self.view_split)
        first, last = spec.views[0], spec.views[-1]
        alike = (first.shape, first.integer, first.parts) == \
            (last.shape, last.integer, last.parts)
        shared = alike if self.shared_encoder == "auto" else bool(self.shared_encoder)
        if self.transform_views != "first" and not spec.paired:
            raise ValueError(f"transform_views={self.transform_views!r} combines the two "
                             "views of paired input, but X holds single views (with an "
                             "augmentation); use transform_views='first'")
        if shared and not alike:
            raise ValueError(f"shared_encoder=True needs views of equal shape and kind; got "
                             f"{first.describe()} and {last.describe()}")
        if y is not None and data.streamed:
            raise ValueError("y gives a label per row, and a stream's rows have no index: "
                             "a stream trains without y")
        labels = None if y is None else check_labels(y, "y", n_samples=len(data))
        data, kept, held_out = self._held_out(data, spec, features, X_val, y_val, None,
                                              labels)
        if kept is not None and labels is not None:
            labels = labels[kept]
        net, interrupted = self._fit_net(data, spec, labels, None, shared, held_out, kept)
        self._commit(net, spec, view_split_=spec.split, sample=sample_of(data), **features)
        if self.transform_views == "concat":
            self.n_components_ *= 2  # both views side by side
        self._finish(interrupted)
        return self

    def transform(self, X: Any, out: np.ndarray | None = None) -> np.ndarray:
        """Embeddings, float32, of shape ``(n, n_components_)``: of view 0 (or both views,
        side by side or averaged, as ``transform_views`` says), by the projection head
        (unit norm) or the backbone, as ``transform_from`` says.

        ``X`` has the form seen in ``fit``. Use :meth:`transform_view` to embed the
        items of one view alone, :meth:`transform_pairs` for both views. ``out``, a
        writable float32 array of shape ``(n, n_components_)`` (e.g. a ``np.memmap``
        opened for writing), receives the embeddings batch by batch and is returned:
        embedding data bigger than memory then holds a batch, not the output.
        """
        check_is_fitted(self, "net_")
        data = read_input(self, X, self.input_spec_)
        if self.transform_views == "first" or not self.input_spec_.paired:
            return self._embed(data.select(0), view=0, out=out)
        both = self._both_views(data)
        if out is None:
            return both
        check_out(out, len(both), both.shape[1])
        out[...] = both
        return out

    def _both_views(self, data: Any) -> np.ndarray:
        U, V = (self._embed(data.select(i), view=i) for i in (0, 1))
        if self.transform_views == "concat":
            return np.hstack([U, V])
        mean = (U + V) / 2
        if self.transform_from == "head" and getattr(self.net_.criterion_.loss, "normalize",
                                                     True):
            norms = np.linalg.norm(mean, axis=1, keepdims=True)
            mean = mean / np.where(norms > 0, norms, 1)
        return mean.astype(np.float32, copy=False)

    def _pairs(self, X: Any, output: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        check_is_fitted(self, "net_")
        data = read_input(self, X, self.input_spec_)
        if self.input_spec_.paired:
            return (self._embed(data.select(0), view=0, output=output),
                    self._embed(data.select(1), view=1, output=output))
        augmentation = self._augmentation_for(self.input_spec_)
        if augmentation is None:
            raise ValueError(f"{type(self).__name__} was fitted on single views with an "
                             "augmentation, which makes their pairs, and has none now (a "
                             "loaded model gets it back with skcontrast.load(path, "
                             "augmentation=...), or set_params(augmentation=...)); transform "
                             "works without it")
        views = Augmentation(augmentation).seed(self.net_.device, 0)
        with global_rng_turn(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            return (self._embed(data, view=0, augment=views, output=output),
                    self._embed(data, view=0, augment=views, output=output))

    def transform_pairs(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Embeddings ``(U, V)`` of both views of ``X`` (same forms as ``fit``).

        For single-view training with an augmentation, the two views are two random
        augmentations of ``X`` (a fixed seed, so the result is reproducible). Each is in
        the container chosen by ``set_output`` (e.g. a pandas DataFrame), like
        :meth:`transform`'s output.
        """
        U, V = self._pairs(X)
        return self._wrap_output(U, X), self._wrap_output(V, X)

    def transform_view(self, X_view: Any, view: Any = 1) -> np.ndarray:
        """Embeddings of single-view items of ``view`` (that view's data only).

        Parameters
        ----------
        X_view : array-like, tensor or Dataset of shape ``(n, *view_shape)``
            E.g. captions alone, to search them against images.
        view : int or str, default=1
            The view's index (0 or 1) or, for dict input, its name.

        Returns
        -------
        ndarray of shape (n, n_components), or the container chosen by ``set_output``
        """
        check_is_fitted(self, "net_")
        index = self.input_spec_.view_index(view)
        embedded = self._embed(read_view(X_view, self.input_spec_.views[index],
                                         tokenizer=getattr(self, "tokenizer_", None)),
                               view=index)
        return self._wrap_output(embedded, X_view)

    def score(self, X: Any, y: Any = None) -> float:
        """Pair-retrieval recall@1 on ``X`` in the head's space (the one the loss trained),
        mean of both directions (y is ignored)."""
        return recall_at_k(*self._pairs(X, "head"), k=1)
