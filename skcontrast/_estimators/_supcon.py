"""SupConEmbedder: supervised contrastive representation learning from labels.

References
----------
- Sors et al. 2021, Simple and effective balance of contrastive losses,
  https://arxiv.org/abs/2112.11743
- Kini et al. 2023, Supervised-contrastive loss learns orthogonal frames and batching matters,
  https://arxiv.org/abs/2306.07960
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.utils.validation import check_is_fitted

from .._validation import check_labels, encode_labels, plain_label
from ..metrics import class_centres, nearest_centre
from ._base import BaseEmbedder, embed_net, sample_of, warn_single_member_classes
from ._data import ItemViews, is_dataset, read_fit_input, read_input


class SupConEmbedder(BaseEmbedder):
    """Learn an embedding where samples of a class gather and classes spread apart.

    A scikit-learn transformer trained with the supervised contrastive loss of Kini et al. 2023
    (Eq. 3; Khosla et al., 2020) or the contrastive margin loss of Sors et al. 2021, on batches
    chosen by a pluggable selector (:class:`~skcontrast.selectors.BindingSelector` adds
    one example of every class to each batch, Kini et al. 2023, Alg. 1). Inside ``fit`` it builds
    a skorch ``NeuralNet`` that drives training.

    ``X`` is a 2-D feature array ``(n, d)``, an N-D array or tensor ``(n, *shape)``
    (e.g. images), or a map-style ``torch.utils.data.Dataset`` whose items are single
    views, or two crops ``(x0, x1)`` of a sample (Khosla et al.'s ``TwoCropTransform``);
    the labels always come through ``y``.

    Parameters
    ----------
    module : nn.Module, nn.Module class, factory ``f(n_in, n_out)``, or None
        The encoder; ``None`` builds an MLP with ``hidden_layer_sizes`` (N-D input is
        flattened first). Integer input (token ids) needs a module; text (a list of
        strings) is tokenized and embedded by a bag of n-grams unless a module is given.
    tokenizer : callable, Hugging Face tokenizer or None, default=None
        For text (strings): ``tokenizer(list_of_str) -> (n, L)`` integer token ids
        (0 is padding), or a Hugging Face tokenizer (its ``input_ids`` and
        ``attention_mask``). ``None``: :class:`~skcontrast.text.HashingNgramTokenizer`
        (hashed character 2-4-grams and words, no download). A text view's default
        encoder is :class:`~skcontrast.text.NgramBagEncoder` over the ids, sized by the
        tokenizer's ``vocabulary_size`` (a Hugging Face tokenizer's ``len``).
    n_components : int, default=32
    hidden_layer_sizes : tuple of int, default=(128,)
    loss : Loss or str, default='supcon'
        A label loss of :mod:`skcontrast.losses`: ``SupCon(temperature=0.1,
        base_temperature=0.07, anchors_without_positives='zero')`` (Khosla et al.'s
        conventions), ``ContrastiveMargin(margin=0.5)``, or a name for the object with
        defaults. It holds the temperature (fixed or learned), the balance weights of
        Sors et al. 2021, Eq. 5 and ``chunk_size``; tune them as ``loss__temperature``, ... A bare
        callable ``f(z, y, temperature=...)`` works with ``FunctionLoss(f, labelled=True)``.
    batch_size : int or None, default=None
        Overrides the selector's batch size (the selector itself is never mutated).
    selector : BatchSelector or None, default=None
        ``None`` is ``ShuffledBatchSelector(min(64, n))``.
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
    augmentation : callable or None, default=None
        ``f(x)`` or ``f(x, generator)`` on a batch on the training device: with it each
        batch holds two random views of every sample (positives of each other), as in
        Khosla et al.
    precision : {'float32', 'bfloat16', 'float16'}, default='float32'
        Mixed precision of the forward passes (``torch.autocast``); the loss is float32.
    num_workers : int, default=0
        DataLoader workers loading a Dataset's items.
    data_on_device : {False, True, 'auto'}, default=False
        Hold array training data whole on the training GPU (``'auto'``: when it takes at
        most half the free memory).
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
    verbose : int, default=0
    callbacks : list or None, default=None
    warm_start : bool, default=False

    projection_head : None, 'mlp', int or nn.Module, default=None
        A projection head on top of ``module`` (SimCLR, Chen et al. 2020): ``'mlp'`` is
        SimCLR's two-layer head (Linear(w, w), ReLU, Linear(w, n_components), ``w`` the
        module's output width), an int the same with that hidden width, a module is
        used as given. The loss sees the head's output; the representation *before* the
        head is usually the better one for downstream tasks (``transform_from``).
    transform_from : {'head', 'backbone'}, default='head'
        What :meth:`transform` (and so a ``Pipeline``) returns: the head's unit-norm
        embeddings, or the module's own features as they are.
        :meth:`~skcontrast.SupConEmbedder.transform_head` and
        :meth:`~skcontrast.SupConEmbedder.transform_backbone` give either; ``score``
        always uses the head.
        ``n_components_`` and the feature names follow the width of that output.
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
    history_ : skorch.History
    classes_ : ndarray
        The labels seen in ``fit`` (any type).
    class_centres_ : ndarray of shape (n_classes, n_components)
        Mean unit-norm training embedding of each class, for :meth:`score`.
    n_features_in_ : int
        For 2-D input only.
    input_spec_ : InputSpec
        The form and shape of the training input.
    temperature_ : float

    Examples
    --------
    >>> import numpy as np
    >>> from skcontrast import SupConEmbedder
    >>> rng = np.random.default_rng(0)
    >>> y = np.repeat(["a", "b", "c"], 30)
    >>> X = rng.normal(size=(90, 6)) + 3 * (y[:, None] == np.array(["a", "b", "c"]))[:, :1]
    >>> est = SupConEmbedder(n_components=3, max_epochs=2, random_state=0).fit(X, y)
    >>> est.transform(X).shape
    (90, 3)
    """

    _labelled = True

    def __init__(self, module: Any = None, *, tokenizer: Any = None, n_components: int = 32,
                 hidden_layer_sizes: tuple = (128,), loss: Any = "supcon",
                 batch_size: int | None = None,
                 selector: Any = None, memory: Any = None, max_epochs: int = 20,
                 lr: float = 1e-3, lr_schedule: Any = None,
                 validation_fraction: float | None = None, scoring: Any = None,
                 optimizer: Any = "adam", optimizer_params: dict | None = None,
                 augmentation: Any = None, precision: str = "float32", num_workers: int = 0,
                 data_on_device: Any = False, micro_batch_size: int | None = None,
                 image_normalization: Any = None, selection_pass: str = "fresh",
                 accelerator: Any = None, device: str = "auto",
                 random_state: Any = None, verbose: int = 0, callbacks: list | None = None,
                 warm_start: bool = False, projection_head: Any = None,
                 transform_from: str = "head", freeze: Any = None, **kwargs: Any) -> None:
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
        self.freeze = freeze
        self._set_nested(kwargs)

    def fit(self, X: Any, y: Any = None, X_val: Any = None,
            y_val: Any = None) -> SupConEmbedder:
        """Train the encoder on labelled samples.

        Parameters
        ----------
        X : array-like or tensor of shape ``(n, d)`` or ``(n, *shape)``, or torch Dataset
        y : array-like of shape (n,), or None for a Dataset of ``(x, label)`` items
            Class labels of any type (strings included); at least two classes. For a
            Dataset whose items are ``(x, label)`` (torchvision's ``ImageFolder``) they
            come from the items when ``y`` is None (from its ``targets`` if it has them).
        X_val, y_val : optional
            Held-out data and labels: ``valid_loss`` (and ``valid_score`` with
            ``scoring``) are recorded on them every epoch. Instead of
            ``validation_fraction``.

        Returns
        -------
        self
        """
        name = type(self).__name__
        if y is None and not is_dataset(X):
            raise ValueError(f"{name} requires y to be passed, but the target y is None.")
        data, spec, features = read_fit_input(self, X, single=True, labelled=True)
        if y is None:  # a Dataset of (x, label) items
            assert isinstance(data, ItemViews)
            y = data.item_labels()
        y = check_labels(y, "y", n_samples=len(data))
        data, kept, held_out = self._held_out(data, spec, features, X_val, y_val,
                                              encode_labels(y)[1], y)
        if kept is not None:
            y = y[kept]
        classes, codes = encode_labels(y)
        if len(classes) < 2:
            raise ValueError(f"{name} needs at least 2 classes in y; got 1 class "
                             f"({plain_label(classes[0])!r}): with a single class "
                             "there are no negatives to contrast")
        convention = getattr(self.loss, "anchors_without_positives", "exclude")
        if self.augmentation is None and not spec.items_paired:
            warn_single_member_classes(codes, classes, convention)
        net = self._fit_net(data, spec, codes, codes, True, held_out, kept)
        embeddings = embed_net(net, data.select(0))
        _, centres = class_centres(embeddings, codes)
        self._commit(net, spec, classes_=classes, class_centres_=centres,
                     sample=sample_of(data), **features)
        self._finish(net)
        return self

    def transform(self, X: Any) -> np.ndarray:
        """Embeddings, float32, of shape ``(n, n_components_)``: by the projection head
        (unit norm) or the backbone, as ``transform_from`` says.

        For a two-crop Dataset, of the first crop of each item.
        """
        check_is_fitted(self, "net_")
        return self._embed(read_input(self, X, self.input_spec_).select(0), view=0)

    def score(self, X: Any, y: Any) -> float:
        """Nearest-class-centre accuracy of ``X`` against the training class centres, in
        the head's space (the one the loss trained)."""
        check_is_fitted(self, "net_")
        H = self._embed(read_input(self, X, self.input_spec_).select(0), view=0, output="head")
        y = check_labels(y, "y", n_samples=len(H), like=self.classes_)
        return float(np.mean(nearest_centre(H, self.classes_, self.class_centres_) == y))

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        return tags
