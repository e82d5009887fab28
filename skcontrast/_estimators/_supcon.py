"""SupConEmbedder: supervised contrastive representation learning from labels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from sklearn.utils.validation import check_is_fitted

from .._validation import check_labels, encode_labels, plain_label
from ..metrics import class_centres, nearest_centre
from ._base import BaseEmbedder, embed_net, sample_of, warn_single_member_classes
from ._data import ItemViews
from ._docs import shared_parameters
from ._forms import is_dataset, read_fit_input, read_input
from ._stream import is_stream

if TYPE_CHECKING:

    from ._params import (
        LossLike,
    )



@shared_parameters
class SupConEmbedder(BaseEmbedder):
    """Learn an embedding where samples of a class gather and classes spread apart.

    A scikit-learn transformer trained with the supervised contrastive loss of Kini et al. 2023,
    arXiv:2306.07960 (Eq. 3; Khosla et al., 2020) or the contrastive margin loss of Sors et al.
    2021, arXiv:2112.11743, on batches chosen by a pluggable selector
    (:class:`~skcontrast.selectors.BindingSelector` adds one example of every class to each batch,
    Kini et al. 2023, Alg. 1). Inside ``fit`` it builds a skorch ``NeuralNet`` that drives training.

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
    {shared: tokenizer n_components hidden_layer_sizes}
    loss : Loss or str, default='supcon'
        A label loss of :mod:`skcontrast.losses`: ``SupCon(temperature=0.1,
        base_temperature=0.07, anchors_without_positives='zero')`` (Khosla et al.'s
        conventions), ``ContrastiveMargin(margin=0.5)``, or a name for the object with
        defaults. It holds the temperature (fixed or learned), the balance weights of
        Sors et al. 2021, Eq. 5 and ``chunk_size``; tune them as ``loss__temperature``, ... A bare
        callable ``f(z, y, temperature=...)`` works with ``FunctionLoss(f, labelled=True)``.
    {shared: batch_size selector memory max_epochs lr lr_schedule validation_fraction}
    {shared: scoring optimizer optimizer_params}
    augmentation : callable or None, default=None
        ``f(x)`` or ``f(x, generator)`` on a batch on the training device: with it each
        batch holds two random views of every sample (positives of each other), as in
        Khosla et al.
    {shared: precision num_workers data_on_device image_normalization micro_batch_size}
    {shared: selection_pass accelerator device random_state verbose callbacks warm_start}
    {shared: projection_head transform_from freeze **kwargs}
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

    _labelled: ClassVar[bool] = True

    # its own parameters (the shared ones: ParameterChecks)
    loss: LossLike = "supcon"

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
        self._check_params()
        if is_stream(X):
            raise ValueError("SupConEmbedder needs a label for every row (y), and a stream "
                             "has no y: train it on an array, a memory-mapped array or an "
                             "Arrow dataset, with y")
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
        if self._augmentation_for(spec) is None and not spec.items_paired:
            warn_single_member_classes(codes, classes, convention)
        net, interrupted = self._fit_net(data, spec, codes, codes, True, held_out, kept)
        embeddings = embed_net(net, data.select(0))
        _, centres = class_centres(embeddings, codes)
        self._commit(net, spec, classes_=classes, class_centres_=centres,
                     sample=sample_of(data), **features)
        self._finish(interrupted)
        return self

    def transform(self, X: Any, out: np.ndarray | None = None) -> np.ndarray:
        """Embeddings, float32, of shape ``(n, n_components_)``: by the projection head
        (unit norm) or the backbone, as ``transform_from`` says.

        For a two-crop Dataset, of the first crop of each item. ``out``, a writable
        float32 array of shape ``(n, n_components_)`` (e.g. a ``np.memmap`` opened for
        writing), receives the embeddings batch by batch and is returned.
        """
        check_is_fitted(self, "net_")
        return self._embed(read_input(self, X, self.input_spec_).select(0), view=0, out=out)

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
