"""Torch modules the estimators train: view encoders and the contrastive criterion."""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from ..losses import LossTerms, get_label_loss, get_pair_loss

MIN_TEMPERATURE = 0.01  # a learned temperature is kept above this (CLIP caps 1/t at 100)


def make_mlp(n_in: int, hidden_layer_sizes: Sequence[int], n_out: int) -> nn.Sequential:
    """``Linear -> ReLU`` for each hidden width, then a linear projection to ``n_out``."""
    layers: list[nn.Module] = []
    for width in hidden_layer_sizes:
        layers += [nn.Linear(n_in, width), nn.ReLU()]
        n_in = width
    layers.append(nn.Linear(n_in, n_out))
    return nn.Sequential(*layers)


def _instantiate(module: Any, n_in: int, n_out: int) -> nn.Module:
    if isinstance(module, nn.Module):
        return copy.deepcopy(module)
    if isinstance(module, type) and issubclass(module, nn.Module):
        return module()
    if callable(module):
        return module(n_in, n_out)
    raise ValueError(f"module must be an nn.Module, an nn.Module class, or a factory "
                     f"f(n_in, n_out); got {module!r}")


class ViewEncoders(nn.Module):
    """One encoder per view (or one shared by both).

    ``forward`` takes a batch either as ``(B, 2, d)`` pairs, as ``(B, d0 + d1)`` with the
    views side by side (``split = d0``), or, with ``split=None``, as single-view rows, and
    returns ``(B, 2, k)`` or ``(B, k)`` embeddings.
    """

    def __init__(self, encoders: Sequence[nn.Module], split: int | None) -> None:
        super().__init__()
        self.encoders = nn.ModuleList(encoders)
        self.split = split

    def encode(self, x: torch.Tensor, view: int = 0) -> torch.Tensor:
        """Embeddings of single-view rows of ``view``."""
        return self.encoders[min(view, len(self.encoders) - 1)](x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim == 3:
            return torch.stack([self.encode(x[:, 0], 0), self.encode(x[:, 1], 1)], dim=1)
        if self.split is None:
            return self.encode(x, 0)
        return torch.stack([self.encode(x[:, :self.split], 0),
                            self.encode(x[:, self.split:], 1)], dim=1)


def build_encoders(module: Any, widths: Sequence[int], hidden_layer_sizes: Sequence[int],
                   n_components: int, shared: bool, split: int | None) -> ViewEncoders:
    """Encoders for views of the given input ``widths`` (one width for single-view data)."""
    if isinstance(module, tuple | list):
        if len(module) != 2:
            raise ValueError(f"module as a sequence must hold two encoders (one per view); "
                             f"got {len(module)}")
        encoders = [_instantiate(m, w, n_components)
                    for m, w in zip(module, widths, strict=False)]
        return ViewEncoders(encoders, split)
    count = 1 if shared or len(widths) == 1 else 2
    if module is None:
        encoders = [make_mlp(widths[i], hidden_layer_sizes, n_components) for i in range(count)]
    else:
        encoders = [_instantiate(module, widths[i], n_components) for i in range(count)]
    return ViewEncoders(encoders, split)


class ContrastiveCriterion(nn.Module):
    """Loss of a batch of embeddings, computed by :mod:`skcontrast.losses`.

    Paired mode takes ``(B, 2, k)`` embeddings. Labelled mode takes ``(B, k)`` embeddings
    with labels, or ``(B, 2, k)`` (two augmented views of each row), whose rows are then
    stacked and their labels repeated. A learnable temperature is held as
    ``log_temperature`` so that it stays positive; it is floored at 0.01.
    """

    def __init__(self, loss: Any, *, labelled: bool, temperature: float,
                 learn_temperature: bool, lambda_pos: float | None,
                 lambda_ent: float | None, loss_params: dict | None) -> None:
        super().__init__()
        self.loss = loss
        self.labelled = labelled
        self.fn = get_label_loss(loss) if labelled else get_pair_loss(loss)
        self.named = isinstance(loss, str)
        self.learn_temperature = learn_temperature
        if learn_temperature:
            self.log_temperature = nn.Parameter(torch.tensor(math.log(temperature)))
        else:
            self.fixed_temperature = float(temperature)
        self.kwargs = dict(loss_params or {})
        for name, value in (("lambda_pos", lambda_pos), ("lambda_ent", lambda_ent)):
            if value is not None:
                self.kwargs[name] = value

    @property
    def temperature(self) -> Any:
        if self.learn_temperature:
            return self.log_temperature.exp().clamp_min(MIN_TEMPERATURE)
        return self.fixed_temperature

    def forward(self, embeddings: torch.Tensor, y: torch.Tensor | None = None) -> LossTerms:
        kwargs = {"temperature": self.temperature, **self.kwargs}
        if self.named:
            kwargs["return_terms"] = True
        if self.labelled:
            if embeddings.ndim == 3:
                y = y.repeat_interleave(2)
                embeddings = embeddings.reshape(-1, embeddings.shape[-1])
            out = self.fn(embeddings, y, **kwargs)
        else:
            out = self.fn(embeddings[:, 0], embeddings[:, 1], **kwargs)
        if isinstance(out, LossTerms):
            return out
        nan = torch.full_like(out, float("nan"))
        return LossTerms(out, nan, nan)
