"""What the two estimators share: fitting, inference, saving, tags.

:class:`BaseEmbedder` is four parts: its parameters (:class:`~._params.ParameterChecks`),
the net it builds (:class:`~._build.NetBuilder`), saving (:class:`~._saving.SavedModel`,
with :func:`~._saving.load`, which reads a saved model back into the class that saved
it) and, here, the fit around them (held-out data, warm starts, committing the fitted
attributes) and inference.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from .._validation import (
    check_labels,
    describe,
    encode_labels,
    plain_label,
)
from ..exceptions import TrainingInterrupted
from ._build import NetBuilder
from ._data import InputSpec, ViewData, with_labels
from ._forms import read_input
from ._forms._form import stand_in
from ._guard_rows import GuardRows, guard_rows
from ._monitor import (
    ValidScore,
    check_monitors,
    check_validation_fraction,
    held_out_counts,
    scoring_callbacks,
    split_indices,
)
from ._net import SelectorNet
from ._output import OutputContainers
from ._params import resolve_device
from ._saving import SavedModel
from ._state import check_trained
from ._stream import StreamViews


@dataclass
class HeldOut:
    """Data held out of training: what the held-out loss and score see each epoch."""

    data: ViewData
    y: np.ndarray | None  # the labels as given, for the scorer
    loss_labels: np.ndarray | None  # class codes for a label loss
    rows: np.ndarray | None = None  # the rows of X held out (validation_fraction)

    def shuffled(self, seed: int) -> HeldOut:
        """The same held-out items in a fixed random order of ``seed``: the held-out
        loss takes consecutive batches of them (a batch mixes classes however the data
        was sorted), and whatever else reads them (skorch's ``EpochScoring`` and its
        cache of the held-out predictions, ``net.forward``) reads them in that same,
        dataset order."""
        order = np.random.default_rng([seed, 4]).permutation(len(self.data))
        return HeldOut(self.data.subset(order), None if self.y is None else self.y[order],
                       None if self.loss_labels is None else self.loss_labels[order],
                       self.rows)


#: The loss parameters the estimators had before the loss became an object.


_TURNS = threading.RLock()
_warned_turns = False


def _steps_recorded(history: Any) -> int:
    return sum("train_loss" in b for row in history for b in row["batches"])


@contextlib.contextmanager
def interrupt_watch() -> Iterator[list[bool]]:
    """Whether Ctrl-C (SIGINT) arrives while the block runs, in a list of one flag; the
    interrupt itself goes on as Python's handler (or the one installed) has it. Signals
    reach the main thread only: elsewhere the flag stays down."""
    pressed = [False]
    if threading.current_thread() is not threading.main_thread():
        yield pressed
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: Any) -> None:
        pressed[0] = True
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def global_rng_turn() -> Iterator[None]:
    """Hold torch's global random generator for one fit or random transform.

    torch has one generator per process, so fits running at once in threads of one
    process (``GridSearchCV`` with the threading backend, a Dask worker with several
    threads) would draw from each other's streams. They take turns instead, so each
    gives the result it gives alone; the first time a fit has to wait, a warning says
    so (use processes for parallel fits).
    """
    global _warned_turns
    if not _TURNS.acquire(blocking=False):
        if not _warned_turns:
            _warned_turns = True
            warnings.warn(
                "skcontrast fits running in threads of one process take turns: torch's "
                "random number generator is shared by the whole process, so concurrent "
                "fits would not be reproducible. For fits in parallel use processes "
                "(joblib's default 'loky' backend, or Dask workers with one thread each)",
                UserWarning, stacklevel=3)
        _TURNS.acquire()
    try:
        yield
    finally:
        _TURNS.release()


class BaseEmbedder(SavedModel, NetBuilder, OutputContainers, ClassNamePrefixFeaturesOutMixin,
                   TransformerMixin, BaseEstimator):
    """Common machinery of :class:`ContrastiveEmbedder` and :class:`SupConEmbedder`."""


    # -- fitting ----------------------------------------------------------------------

    def _held_out(self, data: ViewData, spec: InputSpec, features: dict, X_val: Any,
                  y_val: Any, codes: np.ndarray | None, y: np.ndarray | None
                  ) -> tuple[ViewData, np.ndarray | None, HeldOut | None]:
        """The data to train on, the rows of ``data`` it keeps (``None``: all), and the
        held-out data: ``X_val`` (read like ``X``) or a ``validation_fraction`` of ``X``,
        stratified by ``codes`` when there are labels. The held-out rows never reach the
        selector or the memory; a warm start holds out the rows the first fit held out."""
        check_validation_fraction(self.validation_fraction)
        labelled = self._labelled
        previous = self._warm_held_out_rows(len(data), X_val, codes)
        if X_val is None:
            if y_val is not None:
                raise ValueError("y_val was given without X_val")
            if self.validation_fraction is None:
                return data, None, None
            if previous is not None:
                valid = previous
                train = np.setdiff1d(np.arange(len(data)), valid)
            else:
                train, valid = split_indices(len(data), self.validation_fraction,
                                             self._seed() % 2**32, codes)
            held = HeldOut(data.subset(valid), None if y is None else y[valid],
                           None if codes is None else codes[valid], valid)
            return data.subset(train), train, held.shuffled(self._fit_seed())
        if self.validation_fraction is not None:
            raise ValueError("pass either X_val or validation_fraction, not both")
        if labelled and y_val is None:
            raise ValueError(f"{type(self).__name__} needs y_val with X_val: the held-out "
                             "loss is a label loss")
        valid_data = read_input(stand_in(self, features), X_val, spec)
        if len(valid_data) < 2:
            raise ValueError(f"X_val holds {len(valid_data)} sample(s); the held-out loss "
                             "contrasts at least 2")
        labels = None if y_val is None else check_labels(
            y_val, "y_val", n_samples=len(valid_data), like=y)
        valid_codes = None
        if labelled:
            _, valid_codes = encode_labels(labels, "y_val")
        return data, None, HeldOut(valid_data, labels, valid_codes).shuffled(self._fit_seed())

    def _fit_seed(self) -> int:
        """The seed of this fit: the fitted net's for a warm start (it continues its
        streams), else one drawn from ``random_state``."""
        old = getattr(self, "net_", None) if self.warm_start else None
        return old.plan.seed if old is not None else self._seed()

    def _warm_held_out_rows(self, n: int, X_val: Any, codes: np.ndarray | None
                            ) -> np.ndarray | None:
        """The rows the fitted net held out, which a warm start holds out again; a
        warm start that would hold out other rows is refused (it would score the
        model on rows it trained on)."""
        net = getattr(self, "net_", None)
        if not self.warm_start or net is None:
            return None
        rows = net.plan.held_out_rows
        fraction = self.validation_fraction
        if rows is None and fraction is None:
            return None
        sizes = None if codes is None else np.bincount(codes)
        if rows is None or fraction is None or X_val is not None or rows.max() >= n or \
                len(rows) != held_out_counts(n, fraction, sizes).sum():
            before = "held out rows of X (validation_fraction)" if rows is not None \
                else "trained on every row of X"
            raise ValueError(f"warm_start continues the fitted network, which {before}; a "
                             f"warm start keeps the same held-out rows, so it needs the same "
                             f"validation_fraction and X as before (got validation_fraction="
                             f"{fraction}{', X_val' if X_val is not None else ''} and "
                             f"{n} samples). Set warm_start=False to fit afresh")
        return rows


    def _fit_net(self, data: ViewData, spec: InputSpec, labels: np.ndarray | None,
                 loss_labels: np.ndarray | None, shared: bool,
                 held_out: HeldOut | None = None, kept: np.ndarray | None = None
                 ) -> tuple[SelectorNet, str | None]:
        """Build a skorch net and train it on ``data``; with ``warm_start``, continue the
        fitted one.

        A warm start builds a net from the current parameters and gives it the fitted
        net's state (:func:`~._state.training_state`): weights, loss state, optimizer
        state, history, selector epoch, seed and held-out rows. So parameters that can
        apply to the trained network take effect; those that would change its structure
        are refused (:meth:`_check_warm_start`). The encoders of a new net are built
        inside skorch's ``initialize``, after the torch RNG is seeded, so that their
        initialisation is reproducible from ``random_state``. Nothing fitted is changed
        here: the caller commits the returned net with :meth:`_commit` once everything
        has succeeded, so a failed fit (warm or not) leaves the estimator as it was.
        Returns the net and how far an interrupted fit got (:meth:`_train`).
        """
        self._check_input_settings(spec)
        accelerator = self.accelerator
        device = str(accelerator.device) if accelerator is not None else \
            resolve_device(self.device)
        old: SelectorNet | None = getattr(self, "net_", None) if self.warm_start else None
        if old is not None and spec != self.input_spec_:
            raise ValueError(f"warm_start continues the fitted network, which needs input "
                             f"of the same form and view shapes as before; got {spec}, "
                             f"fitted on {self.input_spec_}")
        factory = self._factory(spec, shared)
        loss = self._loss()
        row_info = guard_rows(loss, data, spec, None if self._labelled else labels)
        held_out_info = (None, None) if held_out is None or getattr(
            loss, "false_negatives", None) is None else guard_rows(
            loss, held_out.data, spec, None if self._labelled else held_out.y, check=False)
        if old is not None:
            self._check_warm_start(old, factory, loss, len(data))
        seed = self._fit_seed()
        # what a warm start compares before it reuses the selection embeddings of the
        # training rows; a selector that looks at no embedding keeps none
        selector = self.selector
        rows_digest = data.fingerprint() if selector is not None and (
            selector.needs_embeddings or selector.curates) else None
        check_monitors(self.callbacks, held_out is not None, self.scoring is not None)
        scoring = self._scorer(held_out)
        data = with_labels(self._place(data, device), loss_labels)
        valid = None if held_out is None else \
            with_labels(self._place(held_out.data, device), held_out.loss_labels)
        cuda = torch.device(device).type == "cuda"
        devices = [torch.device(device).index or 0] if cuda else []
        n_rows = len(data) + (0 if held_out is None or held_out.rows is None
                              else len(held_out.rows))
        with global_rng_turn(), torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            extra = self._monitoring(spec, valid, held_out, scoring)
            plan = self._plan_fit(spec, len(data), seed, kept=kept, n_rows=n_rows,
                             held_out_rows=None if held_out is None else held_out.rows)
            if isinstance(data, StreamViews):  # each process reads its shard
                data = data.sharded(plan.replicas)
            net = self._make_net(plan, factory, loss, len(data), device, labels=labels,
                                 valid=valid, extra=extra,
                                 guard=GuardRows(*row_info, *held_out_info), rows=rows_digest)
            net.initialize()
            if old is not None:
                before = old.loss_module().loss
                restart = tuple(name for name in loss.learnable
                                if getattr(before, name, None) != getattr(loss, name, None))
                net.restore(old.training_state(), restart=restart, rows=rows_digest)
            else:
                net.fit_priors(data)
            interrupted = self._train(net, data)
        check_trained(net, data, interrupted)  # every exit: the end, an early stop, Ctrl-C
        return net, interrupted

    def _train(self, net: SelectorNet, data: ViewData) -> str | None:
        """``max_epochs`` of training (skorch's ``partial_fit``, which keeps the model of
        an interrupted fit); how far a fit that Ctrl-C interrupted got, or ``None`` (a
        fit that ran to the end, or that a callback such as skorch's ``EarlyStopping``
        stopped: skorch's callbacks stop it with the same ``KeyboardInterrupt``, which
        only a signal tells apart)."""
        epochs, steps = len(net.history), _steps_recorded(net.history)
        try:
            with interrupt_watch() as pressed:
                net.partial_fit(data, None, epochs=self.max_epochs)
        finally:
            if self.accelerator is not None:  # hand the user's accelerator back clean
                net.release_replicas()
        if not pressed[0]:
            return None
        done = sum("dur" in row for row in net.history[epochs:])
        return (f"fit stopped after {done} of {self.max_epochs} epochs (interrupted); the "
                f"model keeps the weights of the {_steps_recorded(net.history) - steps} "
                "step(s) applied")

    def _finish(self, interrupted: str | None) -> None:
        """After the fitted attributes are set: an interrupted fit (Ctrl-C) keeps its
        model and goes on as an interrupt (so a search stops rather than score it)."""
        if interrupted is not None:
            raise TrainingInterrupted(interrupted)

    def _scorer(self, held_out: HeldOut | None) -> Any:
        if self.scoring is None:
            return None
        if held_out is None:
            raise ValueError("scoring records a score of held-out data each epoch: set "
                             "validation_fraction or pass X_val (and y_val) to fit")
        from ..metrics import EmbeddingScorer, get_scorer

        scorer = get_scorer(self.scoring)
        if isinstance(scorer, EmbeddingScorer):
            scorer.check(self, held_out.y, labels_known=True)
        return scorer

    def _monitoring(self, spec: InputSpec, valid: ViewData | None, held_out: Any,
                    scorer: Any) -> list:
        """The callbacks that score: ``valid_score`` of the held-out data when
        ``scoring`` asks for it, then the user's callbacks, skorch's ``EpochScoring``
        and ``BatchScoring`` of a skcontrast scorer's name scoring the estimator with it
        (:func:`~._monitor.scoring_callbacks`)."""
        own = [] if scorer is None else \
            [("valid_score", ValidScore(scorer, self, spec, valid, held_out.y))]
        return own + scoring_callbacks(self.callbacks, self, spec)

    @classmethod
    def _at_epoch(cls, params: dict, net: SelectorNet, spec: InputSpec) -> Any:
        """An estimator of ``params`` whose model is ``net`` as it is at this moment of
        its fit, reading data of ``spec``: what a scoring callback scores an epoch with
        (the fitting estimator itself gets its fitted attributes only once the fit
        succeeds)."""
        model = cls(**params)
        model.net_, model.input_spec_ = net, spec
        return model

    def _commit(self, net: SelectorNet, spec: InputSpec, **fitted: Any) -> None:
        """Set every fitted attribute at once, after a fit has fully succeeded.

        ``fitted`` holds the other attributes, and ``sample``, a few training items whose
        embedding gives the output width ``n_components_``; a value of ``None`` for
        ``n_features_in_`` or ``feature_names_in_`` removes it (input without them).
        """
        self.net_ = net
        self.input_spec_ = spec
        self.history_ = net.history
        self.n_samples_ = net.criterion__n_samples
        self.n_components_ = int(net.embed(fitted.pop("sample"), view=0,
                                           head=self.transform_from == "head").shape[1])
        temperature = net.loss_module().temperature
        self.temperature_ = float(temperature.detach() if isinstance(temperature, torch.Tensor)
                                  else temperature)
        for name, value in fitted.items():
            if value is None and name in ("n_features_in_", "feature_names_in_",
                                          "tokenizer_"):
                self.__dict__.pop(name, None)
            else:
                setattr(self, name, value)

    def _unfit(self) -> None:
        for name in [k for k in vars(self) if k.endswith("_") and not k.startswith("__")]:
            delattr(self, name)


    # -- inference --------------------------------------------------------------------

    def _embed(self, data: ViewData, view: int | None = 0, augment: Any = None,
               output: str | None = None, out: Any = None) -> np.ndarray:
        """Embeddings of one view: ``output`` 'head' (the loss's space, unit norm when
        the loss normalises) or 'backbone' (the module's own features, as they are);
        default ``transform_from``; written into ``out`` when given (see
        :func:`check_out`)."""
        check_is_fitted(self, "net_")
        output = self.transform_from if output is None else output
        if out is not None:  # (a stream's length is known once it is read)
            check_out(out, None if data.streamed else len(data),
                      self.n_components_ if output == "head" else None)
        return embed_net(self.net_, data, view, augment, output == "head", out)

    def _transform(self, X: Any, output: str) -> Any:
        check_is_fitted(self, "net_")
        data = read_input(self, X, self.input_spec_).select(0)
        return self._wrap_output(self._embed(data, view=0, output=output), X, output)

    def transform_head(self, X: Any) -> Any:
        """Embeddings of ``X`` (view 0) by the projection head: the space the loss
        trained, unit norm when the loss normalises. The same as :meth:`transform_backbone`
        without a ``projection_head``."""
        return self._transform(X, "head")

    def transform_backbone(self, X: Any) -> Any:
        """Features of ``X`` (view 0) from the module alone, before any projection head,
        as the module outputs them (SimCLR's representation for downstream tasks)."""
        return self._transform(X, "backbone")


    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """Output feature names (``<classname>0``, ``<classname>1``, ...), after ``fit``."""
        check_is_fitted(self, "net_")
        return super().get_feature_names_out(input_features)

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        if state.get("accelerator") is not None:  # a process-local handle
            state = {**state, "accelerator": None}
        return state

    @property
    def _n_features_out(self) -> int:
        return self.n_components_

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float32"]
        tags.input_tags.allow_nan = False
        # Fitting is deterministic on the CPU for a fixed random_state (module
        # initialisation, selector, augmentations and data order are all seeded).
        tags.non_deterministic = False
        return tags


def sample_of(data: ViewData) -> ViewData:
    """Two training items (view 0), enough to read the output width off the net."""
    data = data.sample()  # (a stream's first window)
    return data.select(0).subset(np.arange(min(2, len(data))))


def embed_net(net: SelectorNet, data: ViewData, view: int | None = 0, augment: Any = None,
              head: bool = True, out: np.ndarray | None = None) -> np.ndarray:
    """Embeddings of ``data`` by a trained net: by the projection head, unit norm when
    the loss normalises, or the backbone's features as they are; written into ``out``
    (returned) when given."""
    normalize = head and getattr(net.criterion_.loss, "normalize", True)
    embedded = net.embed(data, view=view, augment=augment, head=head, normalize=normalize,
                         out=None if out is None else torch.from_numpy(out))
    return embedded.numpy() if out is None else out


def check_out(out: Any, n: int | None, width: int | None) -> None:
    """``out``, where ``transform`` writes its embeddings, must be a writable, C-ordered
    float32 NumPy array (a ``np.memmap`` opened for writing, for one) of ``n`` rows of
    ``width`` (the output's width; any, for the backbone's features, checked as they
    come)."""
    if not isinstance(out, np.ndarray) or out.dtype != np.float32 or out.ndim != 2 or \
            not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(f"out must be a writable, C-ordered float32 array of shape (n, "
                         f"n_components_) (e.g. np.lib.format.open_memmap(path, 'w+', "
                         f"np.float32, shape)); got {describe(out)}")
    if (n is not None and len(out) != n) or (width is not None and out.shape[1] != width):
        raise ValueError(f"out has shape {out.shape}; the embeddings of X have shape "
                         f"({n}, {width if width is not None else '...'})")


def warn_single_member_classes(y_codes: np.ndarray, classes: np.ndarray, convention: str) -> None:
    counts = np.bincount(y_codes)
    single = classes[counts == 1]
    if len(single):
        shown = ", ".join(repr(plain_label(c)) for c in single[:5])
        more = "" if len(single) <= 5 else f" and {len(single) - 5} more"
        warnings.warn(f"{len(single)} class(es) have a single sample ({shown}{more}): their "
                      f"anchors have no positive and are handled by "
                      f"anchors_without_positives={convention!r}", UserWarning, stacklevel=3)
