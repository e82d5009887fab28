"""Data makers and loaders that need no download, and augmentations for single-view data.

Shapes follow the library's convention: paired data is ``(n, 2, d)`` (``X[i, 0]`` and
``X[i, 1]`` are the two views of item ``i``); the estimators also take the 2-D form
``(n, d0 + d1)`` with the views side by side.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ._emoji import (
    CROSS_SCRIPT_LANGUAGES,
    EMOJI_LANGUAGES,
    SAME_SCRIPT_LANGUAGES,
    add_typos,
    load_emoji_names,
)
from ._validation import check_choice, check_int, check_nonnegative, check_positive, describe

__all__ = ["CORRUPTIONS", "CROSS_SCRIPT_LANGUAGES", "EMOJI_LANGUAGES", "SAME_SCRIPT_LANGUAGES",
           "STRUCTURES", "VIEWS", "Compose",
           "DigitAugmentation", "GaussianNoise", "RandomFeatureMask", "RandomShift",
           "add_typos", "corrupt_images", "digit_augmentation", "digit_cnn",
           "load_digit_images", "load_digit_views", "load_emoji_names",
           "make_paired_embeddings", "make_paired_gaussians"]


def make_paired_gaussians(n_samples: int = 1000, n_features: int = 16, *,
                          n_clusters: int = 10, cluster_std: float = 1.0,
                          noise: float = 0.3, n_informative: int | None = None,
                          random_state: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic two-view data: noisy views of latent points drawn from Gaussian clusters.

    Each item has a latent ``z`` (a mixture of ``n_clusters`` Gaussians in
    ``n_informative`` dimensions); each view is a fixed random linear map of ``z`` into
    ``n_features`` dimensions plus independent noise. Retrieving one view from the other
    is easy for small ``noise`` and hard when clusters overlap (hard negatives).

    Parameters
    ----------
    n_samples : int, default=1000
    n_features : int, default=16
        Width of each view.
    n_clusters : int, default=10
    cluster_std : float, default=1.0
        Spread of the latent points around their cluster centre (centres have unit
        scale per dimension, times 3).
    noise : float, default=0.3
        Standard deviation of the per-view noise, relative to the signal.
    n_informative : int, optional
        Latent dimension; defaults to ``n_features``.
    random_state : int, numpy Generator or None

    Returns
    -------
    X : ndarray of shape (n_samples, 2, n_features), float32
    y : ndarray of shape (n_samples,)
        The latent cluster of each item.

    Examples
    --------
    >>> from skcontrast.datasets import make_paired_gaussians
    >>> X, y = make_paired_gaussians(100, 8, random_state=0)
    >>> X.shape, y.shape
    ((100, 2, 8), (100,))
    """
    n = check_int(n_samples, "n_samples", minimum=1)
    d = check_int(n_features, "n_features", minimum=1)
    k = check_int(n_clusters, "n_clusters", minimum=1)
    latent = d if n_informative is None else check_int(n_informative, "n_informative", minimum=1)
    check_nonnegative(cluster_std, "cluster_std")
    check_nonnegative(noise, "noise")
    rng = np.random.default_rng(random_state)
    centres = 3.0 * rng.normal(size=(k, latent))
    y = rng.integers(k, size=n)
    z = centres[y] + cluster_std * rng.normal(size=(n, latent))
    maps = rng.normal(size=(2, latent, d)) / np.sqrt(latent)
    views = np.einsum("nl,vld->nvd", z, maps)
    scale = views.std()
    views = views + noise * scale * rng.normal(size=views.shape)
    return (views / scale).astype(np.float32), y


STRUCTURES = ("clustered", "near_duplicate", "isotropic")


def make_paired_embeddings(n_samples: int = 1000, n_features: int = 128, *,
                           structure: str = "clustered", n_groups: int | None = None,
                           noise: float | None = None,
                           random_state: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Unit-norm paired embeddings ``(u_i, v_i)`` with a chosen structure, to study selectors.

    What a batch selector sees inside an estimator are the current embeddings; these
    makers give the three regimes the selector documentation measures:

    - ``'clustered'``: ``n_groups`` random unit centres (default ``n_samples // 100``);
      both views of item ``i`` are its centre plus independent Gaussian noise of norm
      about ``noise`` (default 0.8), normalised. Items of a cluster are hard negatives
      of each other, the regime of trained networks, where batch choice matters;
    - ``'near_duplicate'``: groups of about 8 items (``n_groups`` default
      ``n_samples // 8``) that are near copies (``noise`` default 0.2);
    - ``'isotropic'``: ``u_i`` and ``v_i`` independent and uniform on the sphere (no
      structure; ``noise`` and ``n_groups`` are unused).

    Parameters
    ----------
    n_samples, n_features : int
    structure : {'clustered', 'near_duplicate', 'isotropic'}, default='clustered'
    n_groups : int or None
    noise : float or None
        Norm of the noise relative to the unit centre.
    random_state : int, numpy Generator or None

    Returns
    -------
    X : ndarray of shape (n_samples, 2, n_features), float32, unit rows
    y : ndarray of shape (n_samples,)
        The group of each item (the item itself for ``'isotropic'``).

    Examples
    --------
    >>> from skcontrast.datasets import make_paired_embeddings
    >>> X, y = make_paired_embeddings(1000, 16, random_state=0)
    >>> X.shape, y.max() + 1
    ((1000, 2, 16), np.int64(10))
    """
    n = check_int(n_samples, "n_samples", minimum=1)
    d = check_int(n_features, "n_features", minimum=1)
    check_choice(structure, "structure", STRUCTURES)
    rng = np.random.default_rng(random_state)
    if structure == "isotropic":
        X = rng.normal(size=(n, 2, d))
        return _unit(X).astype(np.float32), np.arange(n)
    default_groups, default_noise = (n // 100, 0.8) if structure == "clustered" else (n // 8, 0.2)
    k = max(1, default_groups) if n_groups is None else check_int(n_groups, "n_groups",
                                                                  minimum=1)
    spread = default_noise if noise is None else noise
    check_nonnegative(spread, "noise")
    centres = _unit(rng.normal(size=(k, d)))
    y = rng.integers(k, size=n) if structure == "clustered" else np.arange(n) * k // n
    X = centres[y][:, None, :] + spread / np.sqrt(d) * rng.normal(size=(n, 2, d))
    return _unit(X).astype(np.float32), y


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


VIEWS = ("halves", "top_bottom", "interleaved")


def load_digit_views(view: str = "halves", *, return_images: bool = False) -> Any:
    """scikit-learn's bundled handwritten digits, split into two views (no download).

    The 1,797 8x8 images of :func:`sklearn.datasets.load_digits` (UCI ML optical
    recognition of handwritten digits, 16 grey levels) are cut into two parts, the
    classic multi-view set-up: retrieving one half of a digit from the other.

    Parameters
    ----------
    view : {'halves', 'top_bottom', 'interleaved'}, default='halves'
        ``'halves'``: left 4 columns vs right 4 columns; ``'top_bottom'``: top 4 rows vs
        bottom 4 rows; ``'interleaved'``: even vs odd pixel columns. Each view has 32
        features, scaled to [0, 1].
    return_images : bool, default=False
        Also return the full images, shape ``(1797, 8, 8)``.

    Returns
    -------
    X : ndarray of shape (1797, 2, 32), float32
    y : ndarray of shape (1797,)
        The digit (0-9).
    images : ndarray of shape (1797, 8, 8), only with ``return_images=True``
    """
    from sklearn.datasets import load_digits

    check_choice(view, "view", VIEWS)
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)
    if view == "halves":
        first, second = images[:, :, :4], images[:, :, 4:]
    elif view == "top_bottom":
        first, second = images[:, :4, :], images[:, 4:, :]
    else:
        first, second = images[:, :, 0::2], images[:, :, 1::2]
    n = len(images)
    X = np.stack([first.reshape(n, -1), second.reshape(n, -1)], axis=1)
    return (X, digits.target, images) if return_images else (X, digits.target)


def load_digit_images() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled handwritten digits as images for a CNN (no download).

    Returns
    -------
    images : ndarray of shape (1797, 1, 8, 8), float32
        One grey channel, scaled to [0, 1].
    y : ndarray of shape (1797,)
        The digit (0-9).
    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    return (digits.images / 16.0).astype(np.float32)[:, None], digits.target


class DigitAugmentation(torch.nn.Module):
    """A kornia batch augmentation for the 8x8 digit images (needs the ``vision`` extra).

    Random resized crop (scale 0.5-1), random affine (15 degrees, 10% shift) and
    Gaussian noise, with per-sample random parameters, on whole batches on whatever
    device they live: the SimCLR recipe (Chen et al., 2020) scaled down to 8x8 grey
    images, where colour jitter has nothing to act on. It is called ``f(x)`` and draws
    from torch's global generator, which the estimators seed from ``random_state``.
    It takes no parameter, so ``est.save`` stores it by name and
    :func:`skcontrast.load` makes it again.
    """

    def __init__(self) -> None:
        super().__init__()
        try:
            import kornia.augmentation as K
        except ImportError as exc:
            raise ImportError("digit_augmentation needs kornia: pip install "
                              "'skcontrast[vision]'") from exc
        # the three transforms in a plain ``nn.Sequential``: the same draws and images
        # as kornia's ``AugmentationSequential`` (tested), without the bookkeeping it
        # keeps for inverting and for masks and boxes: 7.7 against 12.7 ms a call for 64
        # images on one CPU thread (11.4 against 12.7 ms for 256)
        self.pipeline = torch.nn.Sequential(
            K.RandomResizedCrop((8, 8), scale=(0.5, 1.0), ratio=(0.75, 1.33)),
            K.RandomAffine(degrees=15, translate=(0.1, 0.1), p=0.8),
            K.RandomGaussianNoise(std=0.1, p=0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One random view of each image of the batch ``x`` ``(n, 1, 8, 8)``."""
        return self.pipeline(x)


def digit_augmentation() -> DigitAugmentation:
    """The :class:`DigitAugmentation` of the 8x8 digit images (needs the ``vision``
    extra): SimCLR's recipe scaled down to 8x8 grey images."""
    return DigitAugmentation()


def digit_cnn(n_in: int = 64, n_out: int = 32, norm: str = "batch") -> torch.nn.Module:
    """A small CNN encoder for the 8x8 digit images: three 3x3 convolutions with
    normalisation (one 2x2 max-pool), global average pooling and a two-layer projection
    head to ``n_out`` dimensions (as in SimCLR). About 0.1 M parameters.

    Its signature is the estimators' module factory ``f(n_in, n_out)``: pass
    ``module=digit_cnn`` and the estimator builds it after seeding torch from
    ``random_state`` (so the initial weights are reproducible) with
    ``n_out = n_components``. ``n_in`` must be 64 (one 8x8 grey image).

    ``norm='batch'`` (default) uses batch normalisation; ``'group'`` uses group
    normalisation (8 groups), whose output for an image does not depend on the rest of
    its batch, so that gradient caching (``micro_batch_size``) gives exactly the
    full-batch update (``functools.partial(digit_cnn, norm='group')``).
    """
    from torch import nn

    check_int(n_in, "n_in", minimum=64, maximum=64)
    n_components = check_int(n_out, "n_out", minimum=1)
    check_choice(norm, "norm", ("batch", "group"))

    def normalise(channels: int) -> nn.Module:
        return nn.BatchNorm2d(channels) if norm == "batch" else nn.GroupNorm(8, channels)

    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), normalise(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), normalise(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), normalise(128), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, n_components))


CORRUPTIONS = ("noise", "blur")


def corrupt_images(images: Any, kinds: Any = CORRUPTIONS, *, severity: int = 1,
                   random_state: Any = None, device: Any = None) -> np.ndarray:
    """Corrupted copies of images, the hard negatives of Cho et al. 2023's (arXiv:2307.05906) Table
    1 protocol.

    Cho et al. 2023 (Sec. 6.2, App. D.3) retrieves each augmented image's twin among the
    augmentations of CIFAR-100-C's corrupted images (Hendrycks & Dietterich, 2019), whose
    corrupted copies of one picture are near-duplicates of each other. This makes such a
    set from any images, on ``device`` (the GPU when given): one copy per corruption in
    ``kinds``, stacked kind after kind.

    Parameters
    ----------
    images : array-like or tensor of shape (n, C, H, W), values in [0, 1]
    kinds : sequence of {'noise', 'blur'}, default=('noise', 'blur')
        ``'noise'`` adds Gaussian noise of standard deviation ``0.04 * severity``;
        ``'blur'`` convolves each channel with a Gaussian of ``0.4 * severity`` pixels.
        Results are clipped to [0, 1].
    severity : int in 1..5, default=1
        Cho et al. 2023 uses the mildest level, 1.
    random_state : int or None, default=None
        Seeds the noise.
    device : str, torch.device or None, default=None
        Where to compute (default: the CPU).

    Returns
    -------
    ndarray of shape (len(kinds) * n, C, H, W), float32
    """
    if not isinstance(images, torch.Tensor):
        images = torch.from_numpy(np.asarray(images, dtype=np.float32))
    x = images.to(device or "cpu", torch.float32)
    if x.ndim != 4:
        raise ValueError(f"images must have shape (n, C, H, W); got {describe(x)}")
    severity = check_int(severity, "severity", minimum=1, maximum=5)
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    if not kinds or any(k not in CORRUPTIONS for k in kinds):
        raise ValueError(f"kinds must be a non-empty sequence of {CORRUPTIONS}; got "
                         f"{describe(kinds)}")
    generator = torch.Generator(device=x.device)
    generator.manual_seed(int(np.random.SeedSequence(random_state).generate_state(1)[0]))
    copies = []
    for kind in kinds:
        if kind == "noise":
            noise = torch.randn(x.shape, generator=generator, device=x.device)
            copies.append(x + 0.04 * severity * noise)
        else:
            sigma = 0.4 * severity
            offsets = torch.arange(-2, 3, dtype=x.dtype, device=x.device)
            kernel = torch.exp(-offsets**2 / (2 * sigma**2))
            kernel = kernel / kernel.sum()
            channels = x.shape[1]
            rows = kernel.view(1, 1, 5, 1).repeat(channels, 1, 1, 1)
            cols = kernel.view(1, 1, 1, 5).repeat(channels, 1, 1, 1)
            padded = torch.nn.functional.pad(x, (2, 2, 2, 2), mode="replicate")
            blurred = torch.nn.functional.conv2d(padded, rows, groups=channels)
            copies.append(torch.nn.functional.conv2d(blurred, cols, groups=channels))
    return torch.cat(copies).clamp(0, 1).cpu().numpy()


def _draw_device(x: torch.Tensor, generator: torch.Generator | None) -> torch.device:
    """Where to draw random numbers: on the generator's device (then moved to ``x``'s)."""
    return x.device if generator is None else generator.device


class GaussianNoise:
    """Augmentation: add Gaussian noise of standard deviation ``std`` to every feature.

    Called as ``augmentation(x, generator)`` on a batch tensor ``x`` of any shape, on any
    device; the generator makes the random views reproducible (the estimators pass one
    on the training device).
    """

    def __init__(self, std: float = 0.1) -> None:
        check_positive(std, "std")
        self.std = std

    def __call__(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        noise = torch.randn(x.shape, generator=generator, dtype=x.dtype,
                            device=_draw_device(x, generator))
        return x + self.std * noise.to(x.device)

    def __repr__(self) -> str:
        return f"GaussianNoise(std={self.std})"


class RandomFeatureMask:
    """Augmentation: zero each feature independently with probability ``p`` (dropout views)."""

    def __init__(self, p: float = 0.2) -> None:
        if not 0 <= p < 1:
            raise ValueError(f"p must be in [0, 1); got {describe(p)}")
        self.p = p

    def __call__(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        keep = torch.rand(x.shape, generator=generator, device=_draw_device(x, generator)) >= self.p
        return x * keep.to(device=x.device, dtype=x.dtype)

    def __repr__(self) -> str:
        return f"RandomFeatureMask(p={self.p})"


class RandomShift:
    """Augmentation for flattened images: shift each image by up to ``max_shift`` pixels.

    Parameters
    ----------
    image_shape : tuple of int
        ``(height, width)`` of the flattened images, e.g. ``(8, 8)`` for the digits.
    max_shift : int, default=1
        Shifts are drawn uniformly in ``[-max_shift, max_shift]`` on each axis; pixels
        moved in from outside are 0.
    """

    def __init__(self, image_shape: tuple[int, int] = (8, 8), max_shift: int = 1) -> None:
        self.image_shape = tuple(image_shape)
        self.max_shift = check_int(max_shift, "max_shift", minimum=0)

    def __call__(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        h, w = self.image_shape
        if x.shape[-1] != h * w:
            raise ValueError(f"RandomShift for {h}x{w} images needs {h * w} features; got "
                             f"{x.shape[-1]}")
        s = self.max_shift
        images = x.reshape(-1, 1, h, w)
        padded = torch.nn.functional.pad(images, (s, s, s, s))
        shifts = torch.randint(0, 2 * s + 1, (len(images), 2), generator=generator,
                               device=_draw_device(x, generator)).to(x.device)
        rows = torch.arange(h, device=x.device)[None, :] + shifts[:, :1]
        cols = torch.arange(w, device=x.device)[None, :] + shifts[:, 1:]
        index = torch.arange(len(images), device=x.device)[:, None, None]
        out = padded[:, 0][index, rows[:, :, None], cols[:, None, :]]
        return out.reshape(x.shape)

    def __repr__(self) -> str:
        return f"RandomShift(image_shape={self.image_shape}, max_shift={self.max_shift})"


class Compose:
    """Apply several augmentations in turn."""

    def __init__(self, *augmentations: Any) -> None:
        self.augmentations = augmentations

    def __call__(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        for augmentation in self.augmentations:
            x = augmentation(x, generator)
        return x

    def __repr__(self) -> str:
        return f"Compose{self.augmentations!r}"
