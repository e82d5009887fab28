"""Warnings and exceptions raised by skcontrast."""


class DegenerateEmbeddingWarning(UserWarning):
    """The embeddings carry no structure to act on (e.g. all equal), so a fallback was used."""


class TrainingDivergedError(FloatingPointError):
    """Training produced a non-finite loss or non-finite embeddings.

    Raised by ``fit`` with the epoch and batch where it happened and what to change
    (usually the learning rate or the temperature). The estimator is left as it was
    before that ``fit`` (a warm start, which trains its network in place, leaves it
    unfitted).
    """


class TrainingInterrupted(KeyboardInterrupt):
    """``fit`` was interrupted (Ctrl-C) before ``max_epochs``.

    The estimator keeps the weights of the steps applied (it transforms, and continues
    with ``warm_start=True``) when they are all finite (otherwise it is left as it was
    before that ``fit``, and the message says so), and the interrupt goes on, as any
    ``KeyboardInterrupt``:
    a search (``GridSearchCV``, ``BalanceSearchCV``) stops instead of scoring the
    truncated candidate as if it were complete. The message says how far the fit got.
    A callback that stops training (skorch's ``EarlyStopping``) is not an interrupt:
    ``fit`` then returns normally.
    """
