"""The skorch net the estimators build inside ``fit``.

skorch drives training; two hooks are overridden, nothing more:

- ``get_iterator`` returns, for training, a ``DataLoader`` whose ``batch_sampler`` asks
  the selector for the batches of each epoch (so skorch's ``batch_size`` is not passed
  to it: a ``DataLoader`` refuses both). Adaptive selectors first receive the current
  embeddings of the whole training set, from a no-grad pass on the training device.
- ``get_loss`` evaluates the criterion (a :mod:`skcontrast.losses` function) and records
  its positive and entropy terms next to the loss.

The dataset fetches a whole batch with one tensor index (``__getitems__``) instead of one
Python call per sample.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from skorch import NeuralNet
from torch.utils.data import DataLoader, Dataset, Sampler

INFERENCE_BATCH = 1024


class RowDataset(Dataset):
    """Rows of ``X`` (and labels ``y``), fetched a batch at a time."""

    def __init__(self, X: torch.Tensor, y: torch.Tensor | None = None) -> None:
        self.X = X
        self.y = y

    def __len__(self) -> int:
        return len(self.X)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, Any]:
        return self.X[i], None if self.y is None else self.y[i]

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, Any]:
        index = torch.as_tensor(indices, dtype=torch.long)
        return self.X[index], None if self.y is None else self.y[index]


def _as_batch(batch: Any) -> Any:
    return batch


class SelectorBatchSampler(Sampler):
    """Yields the selector's batches of each epoch (one ``__iter__`` call per epoch)."""

    def __init__(self, net: SelectorNet, n: int) -> None:
        self.net = net
        self.n = n
        self._placeholder = np.zeros((n, 1), dtype=np.float32)

    def __len__(self) -> int:
        return self.net.selector.get_n_splits(self.n, self.net.labels)

    def __iter__(self) -> Iterator[list[int]]:
        net = self.net
        start = time.perf_counter()
        if getattr(net.selector, "_adaptive", False):
            X = net.selection_embeddings()
        else:
            X = self._placeholder
        batches = net.selector.epoch_batches(X, net.labels)
        if net.history:
            net.history.record("select_time", time.perf_counter() - start)
            net.history.record("n_batches", len(batches))
        return iter([batch.tolist() for batch in batches])


class SelectorNet(NeuralNet):
    """skorch ``NeuralNet`` whose training batches come from a batch selector.

    Parameters (beyond ``NeuralNet``'s)
    ------------------------------------
    selector : BatchSelector
    labels : ndarray or None
        Labels handed to the selector (and the loss, for labelled training).
    augmentation : callable or None
        ``augmentation(x, generator)`` returning one random view of a batch; applied
        twice per training batch.
    generator : torch.Generator or None
        Random source of the augmentations.
    """

    def __init__(self, *args: Any, selector: Any = None, labels: Any = None,
                 augmentation: Any = None, generator: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.selector = selector
        self.labels = labels
        self.augmentation = augmentation
        self.generator = generator

    def get_iterator(self, dataset: Any, training: bool = False) -> DataLoader:
        if not training:
            return DataLoader(dataset, batch_size=INFERENCE_BATCH, collate_fn=_as_batch)
        return DataLoader(dataset, batch_sampler=SelectorBatchSampler(self, len(dataset)),
                          collate_fn=self._collate_train)

    def _collate_train(self, batch: tuple[torch.Tensor, Any]) -> tuple[torch.Tensor, Any]:
        X, y = batch
        if self.augmentation is None:
            return X, y
        views = [self.augmentation(X, self.generator) for _ in range(2)]
        return torch.stack(views, dim=1), y

    def get_loss(self, y_pred: torch.Tensor, y_true: Any, X: Any = None,
                 training: bool = False) -> torch.Tensor:
        if y_true is not None:
            y_true = y_true.to(y_pred.device)
        terms = self.criterion_(y_pred, y_true)
        if training:
            self.history.record_batch("train_positive", terms.positive.item())
            self.history.record_batch("train_entropy", terms.entropy.item())
        return terms.loss

    @torch.no_grad()
    def embed(self, X: torch.Tensor, view: int | None = None) -> torch.Tensor:
        """Embeddings of ``X`` in inference mode, batch by batch, on the net's device.

        ``view=None`` runs the module's own ``forward`` (both views of pairs); an int
        embeds single-view rows with that view's encoder.
        """
        module = self.module_
        was_training = module.training
        module.eval()
        try:
            out = []
            for start in range(0, len(X), INFERENCE_BATCH):
                xb = X[start:start + INFERENCE_BATCH].to(self.device)
                out.append((module(xb) if view is None else module.encode(xb, view)).cpu())
        finally:
            module.train(was_training)
        return torch.cat(out) if out else torch.empty(0)

    def selection_embeddings(self) -> np.ndarray:
        """What adaptive selectors look at: current embeddings of the training set."""
        X = self.training_data
        if self.augmentation is not None:
            return self.embed(X, view=0).numpy()
        return self.embed(X).numpy()
