"""Warnings raised by skcontrast."""


class DegenerateEmbeddingWarning(UserWarning):
    """The embeddings carry no structure to act on (e.g. all equal), so a fallback was used."""


class TrainingDivergedError(FloatingPointError):
    """Training produced a non-finite loss or non-finite embeddings.

    Raised by ``fit`` with the epoch and batch where it happened and what to change
    (usually the learning rate or the temperature). The estimator is left as it was
    before that ``fit`` (a warm start, which trains its network in place, leaves it
    unfitted).
    """


class TrainingInterruptedWarning(UserWarning):
    """``fit`` stopped before ``max_epochs`` (Ctrl-C, or a callback such as skorch's
    ``EarlyStopping``); the model keeps the weights of the steps applied."""
