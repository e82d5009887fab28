"""What the training step (:class:`~._net.SelectorNet`) uses besides the net: the
mixed-precision dtypes, the random streams, the user's augmentation with its own
generator, and the pieces of gradient caching (micro-batches, replayed random states,
batch-normalisation layers)."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

#: the forward passes' ``torch.autocast`` dtype of each ``precision`` (the estimators'
#: ``Precision`` options, in their order)
PRECISIONS = {"float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16}


def stream_seed(*key: int) -> int:
    """A 63-bit seed drawn from ``key`` (independent streams for different keys)."""
    return int(np.random.SeedSequence(list(key)).generate_state(1, dtype=np.uint64)[0]
               % 2**63)


@contextlib.contextmanager
def item_streams(seed: int, epoch: int | None) -> Iterator[Callable[[int], None]]:
    """Seeding per item: inside, ``reseed(i)`` starts torch's CPU generator, NumPy's
    and Python's global ones from ``(seed, epoch, i)``, what a Dataset item's random
    views draw from; on exit the three are as they were, so a batch loaded in the
    training process leaves the training's own streams untouched. An item's random
    numbers are thus a function of the fit's seed, the epoch and the item, whichever
    DataLoader worker loads it, however many there are, persistent or not."""
    import random

    # the global streams a user's Dataset draws from (np.random.* included)
    saved = torch.get_rng_state(), np.random.get_state(), random.getstate()  # noqa: NPY002
    key = -1 if epoch is None else int(epoch)

    def reseed(i: int) -> None:
        value = stream_seed(seed, 6, key + 1, int(i))
        torch.default_generator.manual_seed(value)
        np.random.seed(value % 2**32)  # noqa: NPY002
        random.seed(value)

    try:
        yield reseed
    finally:
        torch.set_rng_state(saved[0])
        np.random.set_state(saved[1])  # noqa: NPY002
        random.setstate(saved[2])

def seed_torch(seed: int) -> None:
    """``torch.manual_seed`` without its cost where a backend is not in use: the CPU
    generator, the CUDA ones once CUDA is initialised, Apple's MPS where it exists
    (``torch.manual_seed`` records a stack trace for every lazily seeded backend, about
    0.3 ms, which an epoch of a small model notices)."""
    torch.default_generator.manual_seed(seed)
    if torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)
    if torch.backends.mps.is_available():
        torch.mps.manual_seed(seed)


def split_rows(x: Any, size: int) -> list[Any]:
    """A batch (a tensor, a dict of them for a view of several tensors, or a tuple of one
    of those per view) cut into micro-batches."""
    if isinstance(x, tuple | list):
        return list(zip(*(split_rows(t, size) for t in x), strict=True))
    if isinstance(x, Mapping):
        pieces = {k: t.split(size) for k, t in x.items()}
        return [dict(zip(pieces, row, strict=True))
                for row in zip(*pieces.values(), strict=True)]
    return list(x.split(size))


def rng_states(device: torch.device) -> tuple[Any, Any]:
    """The CPU and (on a GPU) device random-number states, to replay a forward pass."""
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


def set_rng_states(states: tuple[Any, Any], device: torch.device) -> None:
    torch.set_rng_state(states[0])
    if states[1] is not None:
        torch.cuda.set_rng_state(states[1], device)


#: torch's batch-normalisation layers (their lazy forms included)
BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm,
               nn.LazyBatchNorm1d, nn.LazyBatchNorm2d, nn.LazyBatchNorm3d)


def batch_norms(module: nn.Module) -> list[nn.Module]:
    """The batch-normalisation layers of ``module`` that update running statistics."""
    return [m for m in module.modules()
            if isinstance(m, BATCH_NORMS) and m.track_running_stats]


def takes_generator(augmentation: Any) -> bool:
    """Whether ``augmentation`` is called ``f(x, generator)`` rather than ``f(x)``.

    True when it has a parameter named ``generator`` or two required positional ones;
    an ``nn.Module`` such as a kornia pipeline (``forward(*args, ...)``) is ``f(x)``.
    """
    try:
        parameters = inspect.signature(augmentation).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in parameters
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.name == "generator" for p in parameters):
        return True
    return sum(p.default is p.empty for p in positional) >= 2


class Augmentation:
    """The user's augmentation with its random source, as the net holds it.

    ``f(x, generator)`` augmentations draw from a generator on the training device;
    ``f(x)`` ones (kornia) from torch's global generator, which ``fit`` seeds. The
    wrapper also keeps an ``nn.Module`` augmentation out of skorch's sight (skorch
    would take it for a component of the network).
    """

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.takes_generator = takes_generator(fn)
        self.generator: torch.Generator | None = None

    def seed(self, device: Any, seed: int) -> Augmentation:
        """Start (again) from ``seed``, drawing on ``device``."""
        if self.takes_generator:
            self.generator = torch.Generator(device=device).manual_seed(seed)
        return self

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x, self.generator) if self.takes_generator else self.fn(x)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "generator": None}  # re-seeded by every fit
