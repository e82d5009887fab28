"""The batch-selector protocol, modelled on scikit-learn's cross-validators."""

from __future__ import annotations

import numbers
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np
import torch
from sklearn.base import BaseEstimator, clone

from .._validation import check_embeddings, check_int, describe, resolve_seed
from ..losses import Loss, SymmetricInfoNCE, make_loss


def index_arrays(batches: Any, n: int, *, name: str = "batches[{}]",
                 distinct: bool = True) -> tuple[list[np.ndarray], np.ndarray]:
    """Index batches as 1-D ``int64`` arrays, and their concatenation, checked over the
    whole epoch at once: every index an integer in ``[0, n)`` and, with ``distinct``, no
    sample twice in one batch. The checks run with numpy on the concatenated indices (a
    sort only when some sample is in two places), so an epoch of a million samples costs
    milliseconds. ``name`` formats a batch's position for the messages."""
    arrays = []
    for i, batch in enumerate(batches):
        array = np.asarray(batch.cpu() if isinstance(batch, torch.Tensor) else batch)
        if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
            floats = " (floats are not truncated silently)" if array.dtype.kind == "f" else ""
            raise ValueError(f"{name.format(i)} must hold integer indices of samples, as a "
                             f"1-D array; got {describe(array)}{floats}")
        arrays.append(array if array.dtype == np.int64 else array.astype(np.int64))
    sizes = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
    flat = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
    if flat.size and (flat.min() < 0 or flat.max() >= n):
        first = int(np.argmax((flat < 0) | (flat >= n)))
        i = int(np.searchsorted(np.cumsum(sizes), first, side="right"))
        batch = arrays[i]
        shown = batch.tolist() if len(batch) <= 20 else \
            f"{batch[(batch < 0) | (batch >= n)][:10].tolist()} among its {len(batch)}"
        hint = " (a negative index does not count from the end)" if batch.min() < 0 else ""
        raise ValueError(f"{name.format(i)} holds indices outside [0, {n}): {shown}{hint}")
    if distinct and flat.size and np.bincount(flat, minlength=n).max() > 1:
        # some sample is in two places: in two batches (allowed) or twice in one
        key = np.sort(np.repeat(np.arange(len(arrays), dtype=np.int64), sizes) * n + flat)
        twice = key[1:][key[1:] == key[:-1]]
        if len(twice):
            i = int(twice[0] // n)
            repeated = np.unique(twice[twice // n == i] % n).tolist()
            raise ValueError(f"{name.format(i)} repeats sample(s) {repeated}: a sample "
                             "would be its own negative")
    return arrays, flat


def check_index_batches(batches: Any, n: int, *, min_size: int = 0) -> list[np.ndarray]:
    """User-given index batches as 1-D ``int64`` arrays: at least one batch, each of
    ``min_size`` or more distinct samples, every index an integer in ``[0, n)``."""
    out, _ = index_arrays(batches, n)
    if not out:
        raise ValueError("batches is empty; expected at least one index batch")
    for i, b in enumerate(out):
        if len(b) < min_size:
            raise ValueError(f"batches[{i}] has {len(b)} sample(s); a batch needs >= {min_size}")
    return out


def check_batch_size(batch_size: Any, n: int, name: str = "batch_size") -> int:
    """``2 <= batch_size <= n``, with messages that say why."""
    b = check_int(batch_size, name)
    if b < 2:
        raise ValueError(f"{name}={b} is too small: a batch needs at least 2 samples to contrast")
    if b > n:
        raise ValueError(f"{name}={b} exceeds the number of samples n={n}")
    return b


def partition(order: np.ndarray, batch_size: int, drop_last: bool) -> list[np.ndarray]:
    """Cut an ordering of the samples into consecutive batches of ``batch_size``.

    With ``drop_last=False`` (the default everywhere) the last batch holds the remainder
    ``n mod batch_size``, and a remainder of **one** sample joins the batch before it
    (a batch of one has nothing to contrast; this way every sample trains every epoch);
    with ``drop_last=True`` the remainder is left out of this epoch.
    """
    sizes = batch_sizes(len(order), batch_size, drop_last)
    bounds = np.cumsum(sizes)
    return [order[stop - size:stop].astype(np.int64) for size, stop in zip(sizes, bounds,
                                                                          strict=True)]


def batch_sizes(n: int, batch_size: int, drop_last: bool) -> np.ndarray:
    """Sizes of an epoch's batches under ``partition``'s rule: full batches, then the
    remainder unless dropped, a remainder of one joining the last full batch."""
    sizes = [batch_size] * (n // batch_size)
    rest = n % batch_size
    if rest and not drop_last:
        if rest == 1 and sizes:
            sizes[-1] += 1
        else:
            sizes.append(rest)
    return np.asarray(sizes, dtype=np.int64)


def join_lone(batches: list[np.ndarray], drop_last: bool) -> list[np.ndarray]:
    """``partition``'s rule for batches made in parts: a last batch of one sample
    joins the batch before it (unless ``drop_last``, which leaves short batches out)."""
    if drop_last or len(batches) < 2 or len(batches[-1]) != 1:
        return batches
    return [*batches[:-2], np.concatenate(batches[-2:]).astype(np.int64)]


def n_partition_batches(n: int, batch_size: int, drop_last: bool) -> int:
    """How many batches ``partition`` makes."""
    return len(batch_sizes(n, batch_size, drop_last))


def refuse_curating(base: Any, wrapper: Any) -> None:
    """A wrapper edits whole batches; a curating selector's are super-batches of which
    each step keeps rows, which the wrapper would train on whole."""
    if getattr(base, "curates", False):
        raise ValueError(f"{type(wrapper).__name__} cannot wrap {type(base).__name__}: its "
                         "batches are super-batches of which each training step keeps "
                         "rows (curate), and the wrapper would train on them whole; use it "
                         "on its own")


class FitSettings(NamedTuple):
    """What a fit hands the selector it trains with (:meth:`BatchSelector.for_fit`).

    Attributes
    ----------
    batch_size : int or None
        The fit's batch size, overriding the selector's (``None``: the selector's own).
    random_state : int or None
        The seed of a selector (or a wrapped one) left without one.
    selection_pass : {'fresh', 'cached'} or None
        For a curating selector left without one (:class:`CuratingSelector`).
    rows : ndarray of int or None
        The rows of ``X`` the fit trains on (the others are held out), for parameters
        given per row of ``X`` (predefined batches, a teacher's or a reference's
        embeddings).
    n_rows : int or None
        The rows of ``X``.
    drop_last : bool or None
        A trainer's ``drop_last`` (sentence-transformers'), for a selector that has one.
    """

    batch_size: int | None = None
    random_state: int | None = None
    selection_pass: str | int | None = None
    rows: np.ndarray | None = None
    n_rows: int | None = None
    drop_last: bool | None = None


def training_rows(value: Any, settings: FitSettings) -> Any:
    """Fixed embeddings given per row of ``X`` (a teacher's, a reference's) restricted
    to the rows a fit trains on; anything else (a model, embeddings of other length) as
    it is."""
    if value is None or settings.rows is None or isinstance(value, torch.nn.Module) or \
            hasattr(value, "net_"):
        return value
    array = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
    return array[settings.rows] if len(array) == settings.n_rows else value


class BatchSelector(BaseEstimator):
    """Base class of batch selectors: the mini-batches of one epoch per ``split`` call.

    The protocol copies scikit-learn's cross-validators: ``split(X, y=None, groups=None)``
    yields 1-D ``int64`` index arrays and ``get_n_splits`` says how many. Unlike a
    cross-validator a selector has a notion of *time*: successive ``split`` calls return
    successive epochs (a shuffling selector reshuffles). The whole sequence is
    reproducible from ``random_state``: epoch ``e`` draws from
    ``numpy.random.default_rng([seed, e])``, so it does not depend on how the previous
    epochs were consumed. :func:`sklearn.base.clone` gives a selector that starts again
    at epoch 0; :meth:`set_epoch` jumps to an epoch (to resume training).

    Subclasses implement ``_select(X, y, groups, rng)``; adaptive selectors say so by
    :attr:`needs_embeddings` and receive checked embeddings and the loss to score with
    (``_select(X, y, groups, rng, loss=...)``). A selector whose batches of an epoch
    can share samples (drawn with replacement, overlapping, or added to every batch)
    says so by :attr:`partitions` ``False``: wrappers that move samples between batches
    (:class:`~skcontrast.selectors.TemperedSelector`) refuse it.
    """

    #: Whether the batches are super-batches of which each training step keeps rows
    #: (:meth:`~skcontrast.selectors.CuratingSelector.curate`).
    curates = False

    def coverage(self) -> str | None:
        """In words, what share of the samples an epoch's batches cover when it is not
        all of them (e.g. OSGD's ``q`` of every ``k`` batches), for messages."""
        return None

    @property
    def needs_embeddings(self) -> bool:
        """Whether the next epoch chooses by the samples' current embeddings: then
        ``split`` (and an estimator's fit, a :class:`SelectorSampler`) gives it them, and
        the loss to score with; otherwise only ``len(X)`` matters."""
        return False

    @property
    def partitions(self) -> bool:
        """Whether every epoch's batches are disjoint: no sample is in two batches, nor
        twice in one (they may leave samples out, as OSGD and ``drop_last`` do). Only a
        selector that says ``False`` may put a sample twice in one batch (as
        ``ClassBalancedSelector(small_classes='repeat')`` does): a
        :class:`~skcontrast.selectors.SelectorSampler` refuses it from the others."""
        return True

    def stream_refusal(self) -> str | None:
        """Why this selector cannot choose a stream's batches inside its windows (each a
        set of rows read anew, :class:`skcontrast.Stream`), in words, or ``None`` when
        it can: a selector that needs every row of the data at once, or keeps batches
        of rows across epochs, says so here (a wrapper: any wrapped selector's reason)."""
        for value in self.get_params(deep=False).values():
            if isinstance(value, BatchSelector) and value.stream_refusal() is not None:
                return value.stream_refusal()
        return None

    def largest_batch_size(self, n: int, y: Any = None) -> int | None:
        """The most rows a batch of this selector can hold for ``n`` samples, or ``None``
        when it has no batch size.

        A bound that every batch keeps, not a typical size: an estimator checks a
        memory's capacity against it before the first step (``y``, the labels, for the
        selectors whose batches grow with them, such as
        :class:`~skcontrast.selectors.BindingSelector`). Here: the nominal size, plus one
        where a one-sample remainder joins a batch (``partition``'s rule, unless
        ``drop_last``). A selector whose batches can be larger overrides it.

        Parameters
        ----------
        n : int
            Number of samples.
        y : array-like of shape (n,), optional
            The labels the selector is given with them.

        Returns
        -------
        int or None
        """
        b = self.nominal_batch_size(n)
        if b is None:
            return None
        params = self.get_params()
        drop = params.get("drop_last", params.get("base_selector__drop_last", False))
        return int(batch_sizes(n, b, drop is True).max())

    def nominal_batch_size(self, n: int) -> int | None:
        """The batch size this selector is set to for ``n`` samples (its own
        ``batch_size``, or its wrapped selector's), or ``None`` when it has none."""
        params = self.get_params()
        for key in ("batch_size", "base_selector__batch_size"):
            if isinstance(params.get(key), numbers.Integral):
                return min(int(params[key]), n)
        return None

    def for_fit(self, settings: FitSettings) -> BatchSelector:
        """A clone of this selector (the user's object is never changed) with what a fit
        hands it: its batch size, a seed if it has none, and the fit's rows for
        parameters given per row of ``X``. Wrapped selectors (``base_selector``) get the
        same through their own ``for_fit``; subclasses add their own settings in
        ``_fit_params``. A batch size that no part of the selector takes is refused.

        This is the one method through which an estimator (or a trainer) configures a
        selector: it never sets a selector's parameters by name.
        """
        out = clone(self)
        if settings.batch_size is not None and not out._takes_batch_size():
            raise ValueError(f"batch_size={settings.batch_size} cannot be applied: "
                             f"{type(out).__name__} has no batch size")
        return out.set_params(**out._fit_params(settings))

    def _takes_batch_size(self) -> bool:
        params = self.get_params(deep=False)
        return "batch_size" in params or any(
            isinstance(v, BatchSelector) and v._takes_batch_size() for v in params.values())

    def _fit_params(self, settings: FitSettings) -> dict:
        """The parameters :meth:`for_fit` sets: the batch size (on this selector, or on
        the wrapped one), the seed where there is none, ``drop_last`` where given, and
        the wrapped selectors configured by their own :meth:`for_fit`."""
        params = self.get_params(deep=False)
        out: dict[str, Any] = {}
        if settings.batch_size is not None and "batch_size" in params:
            out["batch_size"] = settings.batch_size
            settings = settings._replace(batch_size=None)  # taken: not the wrapped ones'
        if settings.random_state is not None and "random_state" in params and \
                params["random_state"] is None:
            out["random_state"] = settings.random_state
        if settings.drop_last is not None and "drop_last" in params:
            out["drop_last"] = settings.drop_last
        for name, value in params.items():
            if isinstance(value, BatchSelector):
                out[name] = value.for_fit(settings if value._takes_batch_size()
                                          else settings._replace(batch_size=None))
        return out

    def state_dict(self) -> dict:
        """What this selector carries from one epoch to the next besides its epoch
        number, as plain JSON values: ``{}`` for most, whose epoch ``e`` depends only
        on ``(random_state, e)`` and the embeddings. Wrapped selectors' states are kept
        under their parameter's name. A fit saves it with the model, so that a warm
        start or a loaded model continues exactly (see :meth:`load_state_dict`)."""
        return {name: value.state_dict() for name, value in self.get_params(deep=False).items()
                if isinstance(value, BatchSelector) and value.state_dict()}

    def load_state_dict(self, state: dict) -> BatchSelector:
        """Take a state from :meth:`~BatchSelector.state_dict` (after
        :meth:`~BatchSelector.set_epoch`); returns self."""
        if not isinstance(state, dict):
            raise ValueError(f"a selector state must be a dict; got {describe(state)}")
        params = self.get_params(deep=False)
        for name, value in state.items():
            if not isinstance(params.get(name), BatchSelector):
                raise ValueError(f"{type(self).__name__} has no state {name!r}")
            params[name].load_state_dict(value)
        return self

    def split(self, X: Any, y: Any = None, groups: Any = None) -> Iterator[np.ndarray]:
        """Yield the index batches of the next epoch.

        Parameters
        ----------
        X : array-like of shape (n, 2, d) or (n, d)
            Paired embeddings (``u_i = X[i, 0]``, ``v_i = X[i, 1]``) or single-view
            embeddings. Non-adaptive selectors only use ``len(X)``.
        y : array-like of shape (n,), optional
            Labels, for selectors that use them.
        groups : ignored
            Present for compatibility with scikit-learn splitters.

        Yields
        ------
        numpy.ndarray of int64
            The indices of one mini-batch.
        """
        return iter(self.epoch_batches(X, y, groups))

    def epoch_batches(self, X: Any, y: Any = None, groups: Any = None, *,
                      loss: Loss | None = None) -> list[np.ndarray]:
        """The next epoch's batches as a list (what :meth:`~BatchSelector.split` iterates over).

        ``loss``: what an adaptive selector whose own ``loss`` is ``None`` scores with.
        Inside an estimator it is the loss being trained, as it is at this epoch (its
        learned temperature included); without one, the papers' loss
        (:class:`~skcontrast.losses.SymmetricInfoNCE` at temperature 0.1).
        """
        X = check_embeddings(X)
        rng = self._epoch_rng(self._claim_epoch())
        if self.needs_embeddings:
            return self._select(X, y, groups, rng, loss=self.scoring_loss(loss))
        return self._select(X, y, groups, rng)

    def scoring_loss(self, given: Loss | None = None) -> Loss:
        """The loss this selector scores with: its own ``loss`` parameter if set (an
        object, or a name for its class with defaults), else ``given`` (an estimator's
        live loss), else :class:`~skcontrast.losses.SymmetricInfoNCE` ``()``."""
        own = getattr(self, "loss", None)
        if own is not None:
            return make_loss(own, what=f"{type(self).__name__}'s loss")
        return given if given is not None else SymmetricInfoNCE()

    def get_n_splits(self, X: Any = None, y: Any = None, groups: Any = None) -> int:
        """Number of batches one epoch yields for ``X`` (``X`` or its length is required)."""
        if X is None:
            raise ValueError(f"{type(self).__name__}.get_n_splits needs X (or n) to count "
                             "the batches of an epoch")
        n = X if isinstance(X, numbers.Integral) else len(X)
        return self._n_batches(int(n), y)

    def set_epoch(self, epoch: int) -> BatchSelector:
        """Make the next :meth:`~BatchSelector.split` return epoch ``epoch`` (0-based)."""
        self._epoch = check_int(epoch, "epoch", minimum=0)
        return self

    @property
    def current_epoch(self) -> int:
        """The epoch the next :meth:`~BatchSelector.split` call will return (0-based)."""
        return getattr(self, "_epoch", 0)

    # -- subclass hooks ---------------------------------------------------------------

    def _select(self, X: np.ndarray, y: Any, groups: Any, rng: np.random.Generator,
                **kwargs: Any) -> list[np.ndarray]:
        raise NotImplementedError

    def _n_batches(self, n: int, y: Any) -> int:
        raise NotImplementedError

    # -- epochs and randomness --------------------------------------------------------

    def _claim_epoch(self) -> int:
        epoch = self.current_epoch
        self._epoch = epoch + 1
        return epoch

    def _seed(self) -> int:
        seed = getattr(self, "_seed_value", None)
        if seed is None:
            seed = resolve_seed(getattr(self, "random_state", None))
            self._seed_value = seed
        return seed

    def _epoch_rng(self, epoch: int) -> np.random.Generator:
        return np.random.default_rng([self._seed(), epoch])
