"""Warnings raised by skcontrast."""


class DegenerateEmbeddingWarning(UserWarning):
    """The embeddings carry no structure to act on (e.g. all equal), so a fallback was used."""
