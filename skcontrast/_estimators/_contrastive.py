"""ContrastiveEmbedder: paired views or two modalities, and SimCLR-style single views.

References
----------
- Sreenivasan et al. 2023, Mini-batch optimization of contrastive loss (ICLR 2023 workshop
  ME-FoMo), https://openreview.net/forum?id=7n2dNATSHeQ
- Sors et al. 2021, Simple and effective balance of contrastive losses,
  https://arxiv.org/abs/2112.11743
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted

from .._validation import check_choice, check_labels, describe
from ..metrics import recall_at_k
from ._base import BaseEmbedder, global_rng_turn, sample_of
from ._data import read_fit_input, read_input, read_view
from ._step import Augmentation


class ContrastiveEmbedder(BaseEmbedder):
    """Learn an embedding that maps the two views of an item close together.

    A scikit-learn transformer that trains a torch encoder with a contrastive loss
    (default: the symmetric InfoNCE of CLIP, Sreenivasan et al. 2023, Eq. 1-2) on batches chosen by
    a pluggable batch selector. Inside ``fit`` it builds a skorch ``NeuralNet`` that drives
    training; the selector decides which pairs share each mini-batch, epoch by epoch
    (adaptive selectors see the current embeddings of the whole training set first).

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
    tokenizer : callable, Hugging Face tokenizer or None, default=None
        For text (strings): ``tokenizer(list_of_str) -> (n, L)`` integer token ids
        (0 is padding), or a Hugging Face tokenizer (its ``input_ids`` and
        ``attention_mask``). ``None``: :class:`~skcontrast.text.HashingNgramTokenizer`
        (hashed character 2-4-grams and words, no download). A text view's default
        encoder is :class:`~skcontrast.text.NgramBagEncoder` over the ids, sized by the
        tokenizer's ``vocabulary_size`` (a Hugging Face tokenizer's ``len``).
    n_components : int, default=32
        Embedding dimension.
    hidden_layer_sizes : tuple of int, default=(128,)
        Hidden widths of the default MLP.
    loss : Loss or str, default='symmetric_info_nce'
        The loss: an object of :mod:`skcontrast.losses` (``SymmetricInfoNCE(temperature=
        0.05, learn_temperature=True)``, ``NTXent()``, ``SigLIP()``, ``DCL()``, ...) or
        its function's name, shorthand for the object with defaults. It holds the
        temperature (fixed or learned; the final value is ``temperature_``), the balance
        weights of Sors et al. 2021, Eq. 5, ``chunk_size`` (tiled, O(B) memory; ``'auto'`` tiles
        once one B x B similarity matrix would exceed 256 MiB) and its own options; tune
        them as ``loss__temperature``, ``loss__lambda_ent``, ... Label losses (SupCon,
        ContrastiveMargin) treat each pair as its own class. A bare callable ``f(u, v,
        temperature=...)`` works too, with a warning naming what it gives up
        (:class:`~skcontrast.losses.FunctionLoss`). The adaptive selectors and the
        memory work with this very loss, as it is at each moment of the fit.
    batch_size : int or None, default=None
        ``None`` uses the selector's batch size. An int overrides it; the estimator
        works on a clone of the selector, never on the user's object. Both
        ``batch_size`` and ``selector__batch_size`` can be tuned by ``GridSearchCV``.
    selector : BatchSelector or None, default=None
        Which pairs share a batch; ``None`` is ``ShuffledBatchSelector(min(64, n))``. Adaptive
        selectors whose ``loss`` is ``None`` score with the loss being trained, with its
        learned temperature of that epoch.
    memory : SogCLRMemory, CrossBatchMemory or None, default=None
        What each training batch's loss remembers from earlier batches
        (:mod:`skcontrast.memory`): SogCLR's moving-average estimate of every sample's
        negative term, or a cross-batch queue of embeddings (XBM). Its state is built
        in ``fit`` from the dataset indices of the batches, lives with the fitted net
        (pickled with it, kept by ``warm_start`` on the same training set, started
        afresh by a new ``fit`` or a ``clone``); the user's object is never changed.
        Tunable by ``GridSearchCV`` as ``memory__gamma``, ``memory__size``, ...
    max_epochs : int, default=20
    lr : float, default=1e-3
    lr_schedule : WarmupCosine or None, default=None
        A learning-rate schedule stepped every batch: :class:`~skcontrast.WarmupCosine`
        (linear warm-up, then cosine decay over ``max_epochs``, as SimCLR and Cho et
        al. 2023's protocol). ``None`` keeps ``lr`` constant.
    validation_fraction : float in (0, 1) or None, default=None
        Hold this share of ``X`` out of training (stratified by class for labels), as
        scikit-learn's ``MLPClassifier`` does; or pass ``X_val`` to ``fit``. Every epoch
        then records ``valid_loss`` (the same loss at the same batch size, on the same
        held-out batches, without gradients, memory or augmentation randomness that
        changes), so skorch's ``EarlyStopping``, ``Checkpoint`` and
        ``LRScheduler('ReduceLROnPlateau')`` work with their defaults. Held-out rows never
        reach the selector or the memory.
    scoring : str or callable or None, default=None
        With held-out data, also record ``valid_score`` each epoch: a scorer of
        :func:`skcontrast.metrics.get_scorer` by name, or any ``scorer(estimator, X,
        y)`` (greater is better; ``valid_score_best`` marks the best epoch).
    optimizer : {'adam', 'adamw', 'sgd'} or torch.optim.Optimizer class, default='adam'
    optimizer_params : dict or None, default=None
        E.g. ``{'weight_decay': 1e-4}``.
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
    precision : {'float32', 'bfloat16', 'float16'}, default='float32'
        Mixed precision: forward passes run under ``torch.autocast`` in this dtype (with
        a gradient scaler for float16); the loss is computed in float32.
    num_workers : int, default=0
        DataLoader worker processes loading the items of a Dataset (array rows are
        gathered a whole batch at a time in the main process). Memory is pinned on CUDA.
    data_on_device : {False, True, 'auto'}, default=False
        Hold array training data whole on the training GPU, so that no batch is copied
        from the host; ``'auto'`` does so when it takes at most half the free GPU
        memory. The adaptive selectors' embedding pass always goes batch by batch.
    image_normalization : (mean, std) or None, default=None
        uint8 images (views of dtype uint8) stay bytes on the host and become floats in
        [0, 1] on the training device, batch by batch, so no float copy of the data set
        is made; with ``(mean, std)`` (one value or one per channel, channel axis 1) they
        are then standardised, e.g. ImageNet's ``((0.485, 0.456, 0.406), (0.229, 0.224,
        0.225))``. Float views are cast to float32 on the device the same way, and
        standardised with ``(mean, std)`` too; integer views (token ids) never are.
    micro_batch_size : int or None, default=None
        Gradient caching (GradCache, Gao et al. 2021): embed each selected batch this
        many items at a time, take the loss and its gradient on the whole batch, then
        back-propagate each micro-batch with its cached gradient. The update equals
        the plain one on the same batch (up to rounding; batch normalisation excepted,
        with a warning), at the cost of one more forward pass, while the encoder only
        ever holds the activations of one micro-batch: batches of thousands (up to the
        full batch) train a real network. Tiled losses (the loss's ``chunk_size``,
        ``'auto'`` by default) keep the batch's B x B similarities small too.
    selection_pass : {'fresh', 'cached'}, default='fresh'
        What adaptive selectors see at the start of each epoch. ``'fresh'``: a no-grad
        pass over the whole training set in inference mode. ``'cached'``: every training
        sample's embedding as the training step that last trained it computed it (kept
        on the device, O(n k) memory), so selection costs no extra pass over the data
        (a CNN's spectral fit: 1.06x a shuffled fit instead of 1.45x); but those
        embeddings are up to an epoch old and computed in training mode, and measured
        on a CNN the batches picked from them were clearly less hard on the current
        embeddings (see the user guide, "Selectors"). The first epoch, and samples no
        step has embedded yet, take a fresh pass. A curating selector
        (:class:`~skcontrast.selectors.JESTSelector`, ...) whose own ``selection_pass``
        is ``None`` follows this one: ``'cached'`` scores each super-batch with the rows'
        embeddings from their last training step (and a reference model's, computed
        once per row) instead of embedding it at every step.
    accelerator : accelerate.Accelerator or None, default=None
        Data-parallel training on several processes, GPUs or nodes (launch the script
        with ``accelerate launch`` or ``torchrun``). The global batch stays the
        selector's batch: every process trains on its slice of it and the embeddings
        are gathered, so the loss and the update are those of the whole batch (see the
        user guide, "Scaling out"). Mixed precision is then the accelerator's
        (``Accelerator(mixed_precision='bf16')``) and ``device`` is ignored. Not
        pickled: ``None`` after unpickling.
    device : {'auto', 'cpu', 'cuda', 'cuda:N', 'mps'}, default='auto'
        ``'auto'``: a CUDA GPU when one is usable, else the CPU. A device that is
        asked for but missing is a clear error.
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

    projection_head : None, 'mlp', int or nn.Module, default=None
        A projection head on top of ``module`` (SimCLR, Chen et al. 2020): ``'mlp'`` is
        SimCLR's two-layer head (Linear(w, w), ReLU, Linear(w, n_components), ``w`` the
        module's output width), an int the same with that hidden width, a module is
        used as given. The loss sees the head's output; the representation *before* the
        head is usually the better one for downstream tasks (``transform_from``).
    transform_from : {'head', 'backbone'}, default='head'
        What :meth:`transform` (and so a ``Pipeline``) returns: the head's unit-norm
        embeddings, or the module's own features as they are.
        :meth:`~skcontrast.ContrastiveEmbedder.transform_head` and
        :meth:`~skcontrast.ContrastiveEmbedder.transform_backbone` give either; ``score``
        always uses the head.
        ``n_components_`` and the feature names follow the width of that output.
    transform_views : {'first', 'concat', 'mean'}, default='first'
        What :meth:`transform` (and so a ``Pipeline``) returns for paired input: the
        embedding of view 0 alone (the two views of an item share an embedding space, so
        one is its representation), or both views' embeddings side by side (twice the
        width), or their mean (unit-normalised in the head's space). A classifier after
        the embedder sees only view 0's half of the input with ``'first'``: compare it
        with one on all the input using ``'concat'``.
    freeze : None, 'backbone' or list of str, default=None
        Parts of a (pretrained) module to keep fixed: their parameters do not train and
        they stay in eval mode, so their batch-norm statistics do not drift.
        ``'backbone'`` freezes the whole module (only a projection head trains: a
        linear or MLP probe); a list names submodules of the module (e.g.
        ``['conv1', 'layer1']``, names as in ``module.named_modules()``).
    **kwargs : ``module__*`` and ``optimizer__*``
        skorch-style nested parameters: ``module__*`` go to a module class or factory
        (a class whose ``__init__`` takes ``n_in``/``n_out`` receives the input size
        and ``n_components`` unless given), ``optimizer__*`` to the optimizer (e.g.
        ``optimizer__weight_decay=1e-4``, or per-group rates with
        ``optimizer__param_groups=[('heads.*', {'lr': 1e-2})]``, names as in the
        fitted ``net_.module_``). Both can be tuned by ``GridSearchCV``.
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

    _labelled = False

    def __init__(self, module: Any = None, *, tokenizer: Any = None, n_components: int = 32,
                 hidden_layer_sizes: tuple = (128,), loss: Any = "symmetric_info_nce",
                 batch_size: int | None = None,
                 selector: Any = None, memory: Any = None, max_epochs: int = 20,
                 lr: float = 1e-3, lr_schedule: Any = None,
                 validation_fraction: float | None = None, scoring: Any = None,
                 optimizer: Any = "adam", optimizer_params: dict | None = None,
                 view_split: int | None = None, shared_encoder: Any = "auto",
                 augmentation: Any = None, precision: str = "float32", num_workers: int = 0,
                 data_on_device: Any = False, micro_batch_size: int | None = None,
                 image_normalization: Any = None, selection_pass: str = "fresh",
                 accelerator: Any = None, device: str = "auto",
                 random_state: Any = None, verbose: int = 0, callbacks: list | None = None,
                 warm_start: bool = False, projection_head: Any = None,
                 transform_from: str = "head", transform_views: str = "first",
                 freeze: Any = None, **kwargs: Any) -> None:
        self.module = module
        self.tokenizer = tokenizer
        self.n_components = n_components
        self.hidden_layer_sizes = hidden_layer_sizes
        self.loss = loss
        self.batch_size = batch_size
        self.selector = selector
        self.memory = memory
        self.max_epochs = max_epochs
        self.lr = lr
        self.lr_schedule = lr_schedule
        self.validation_fraction = validation_fraction
        self.scoring = scoring
        self.optimizer = optimizer
        self.optimizer_params = optimizer_params
        self.view_split = view_split
        self.shared_encoder = shared_encoder
        self.augmentation = augmentation
        self.precision = precision
        self.num_workers = num_workers
        self.data_on_device = data_on_device
        self.micro_batch_size = micro_batch_size
        self.image_normalization = image_normalization
        self.selection_pass = selection_pass
        self.accelerator = accelerator
        self.device = device
        self.random_state = random_state
        self.verbose = verbose
        self.callbacks = callbacks
        self.warm_start = warm_start
        self.projection_head = projection_head
        self.transform_from = transform_from
        self.transform_views = transform_views
        self.freeze = freeze
        self._set_nested(kwargs)

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
        data, spec, features = read_fit_input(self, X, single=self.augmentation is not None,
                                              view_split=self.view_split)
        if self.shared_encoder not in ("auto", True, False):
            raise ValueError(f"shared_encoder must be 'auto', True or False; got "
                             f"{describe(self.shared_encoder)}")
        first, last = spec.views[0], spec.views[-1]
        alike = (first.shape, first.integer, first.parts) == \
            (last.shape, last.integer, last.parts)
        shared = alike if self.shared_encoder == "auto" else bool(self.shared_encoder)
        check_choice(self.transform_views, "transform_views", ("first", "concat", "mean"))
        if self.transform_views != "first" and not spec.paired:
            raise ValueError(f"transform_views={self.transform_views!r} combines the two "
                             "views of paired input, but X holds single views (with an "
                             "augmentation); use transform_views='first'")
        if shared and not alike:
            raise ValueError(f"shared_encoder=True needs views of equal shape and kind; got "
                             f"{first.describe()} and {last.describe()}")
        labels = None if y is None else check_labels(y, "y", n_samples=len(data))
        data, kept, held_out = self._held_out(data, spec, features, X_val, y_val, None,
                                              labels)
        if kept is not None and labels is not None:
            labels = labels[kept]
        net = self._fit_net(data, spec, labels, None, shared, held_out, kept)
        self._commit(net, spec, view_split_=spec.split, sample=sample_of(data), **features)
        if self.transform_views == "concat":
            self.n_components_ *= 2  # both views side by side
        self._finish(net)
        return self

    def transform(self, X: Any) -> np.ndarray:
        """Embeddings, float32, of shape ``(n, n_components_)``: of view 0 (or both views,
        side by side or averaged, as ``transform_views`` says), by the projection head
        (unit norm) or the backbone, as ``transform_from`` says.

        ``X`` has the form seen in ``fit``. Use :meth:`transform_view` to embed the
        items of one view alone, :meth:`transform_pairs` for both views.
        """
        check_is_fitted(self, "net_")
        data = read_input(self, X, self.input_spec_)
        if self.transform_views == "first" or not self.input_spec_.paired:
            return self._embed(data.select(0), view=0)
        return self._both_views(data)

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
        if self.augmentation is None:
            raise ValueError(f"{type(self).__name__} was fitted on single views with an "
                             "augmentation, which makes their pairs, and has none now (a "
                             "loaded model gets it back with skcontrast.load(path, "
                             "augmentation=...), or set_params(augmentation=...)); transform "
                             "works without it")
        views = Augmentation(self.augmentation).seed(self.net_.device, 0)
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
