"""Images in: the default encoder and batch augmentation for single images.

``ContrastiveEmbedder().fit(images)`` trains SimCLR-style (Chen et al. 2020,
https://arxiv.org/abs/2002.05709): two random augmentations of each image are a pair,
the other images of the batch its negatives. With no ``module`` and no
``augmentation``, the estimators take the two defaults here, chosen from the images'
size and channels with torch alone (no torchvision, no kornia):

- :class:`ImageEncoder`: a fixed pixel path (a random orthogonal projection of the
  standardised pixels, which keeps their distances, so the untrained model ranks
  neighbours as the raw pixels do) beside a learned convolutional path (a small CNN up
  to 32 pixels a side, a compact residual network for larger images), added;
- :class:`ImageAugmentation`: random resized crops, small rotations and shifts,
  brightness and contrast jitter, horizontal flips for colour images only (a flipped
  digit is another symbol) and Gaussian noise, drawn per image on whole batches on the
  training device.

The rule that tells single images from other arrays, which :func:`image_layout`
applies (every entry point reads input through it):

- ``(n, C, H, W)`` with ``C`` 1 or 3 and ``H, W >= 8``: single images, channels first
  (colour channels are never views or hard-negative columns);
- ``(n, H, W, C)`` with ``C`` 1 or 3, ``H, W >= 8`` and axis 1 not 1, 2 or 3: single
  images, channels last (what PIL and most loaders give), moved to channels first;
- ``(n, H, W)`` bytes (``uint8``) with ``H, W >= 8``: single grey images;
- a list of PIL images (or a Hugging Face ``datasets.Dataset`` column of them), of one
  size and mode;
- ``(n, 2, ...)``: pairs, as before (two views of each item on axis 1);
- ``(n, 4, H, W)`` or ``(n, H, W, 4)`` with ``H, W >= 8`` is refused (RGBA images, or
  pairs with two hard-negative columns?): pass ``X[:, :3]`` for the colour channels, or
  hard negatives as ``(n, 4, 1, H, W)``.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ._validation import check_int, describe

__all__ = ["ImageAugmentation", "ImageEncoder", "image_layout", "pil_images"]

#: the smallest side of an image (smaller 4-D arrays keep their array meaning)
MIN_SIDE = 8
#: colour channel counts an image may have (grey, RGB)
CHANNELS = (1, 3)


def is_pil_image(x: Any) -> bool:
    """Whether ``x`` is a PIL image (without importing PIL where it is not loaded)."""
    image = sys.modules.get("PIL.Image")
    return image is not None and isinstance(x, image.Image)


def pil_images(images: Any, name: str = "X") -> np.ndarray:
    """A list of PIL images as ``(n, H, W, C)`` bytes: of one size and mode (grey
    ``'L'``, colour ``'RGB'``; others are converted to RGB with a message if lossy)."""
    modes = {im.mode for im in images}
    sizes = {im.size for im in images}
    if len(sizes) > 1:
        raise ValueError(f"{name} holds PIL images of {len(sizes)} sizes "
                         f"({sorted(sizes)[:3]}...); resize them to one size first (e.g. "
                         "[im.resize((32, 32)) for im in images])")
    if modes <= {"L"}:
        return np.stack([np.asarray(im, dtype=np.uint8) for im in images])[..., None]
    if not modes <= {"RGB", "L"}:
        raise ValueError(f"{name} holds PIL images of mode(s) {sorted(modes)}; convert them "
                         "to 'RGB' or 'L' first ([im.convert('RGB') for im in images])")
    return np.stack([np.asarray(im.convert("RGB"), dtype=np.uint8) for im in images])


def image_layout(x: np.ndarray | torch.Tensor) -> str | None:
    """``'first'`` (channels first), ``'last'`` (channels last), ``'grey'`` (``(n, H,
    W)`` bytes) when the array is single images by the module's rule, else ``None``;
    ambiguous shapes are refused (see :mod:`skcontrast.images`)."""
    shape = tuple(x.shape)
    integer = (x.dtype == torch.uint8) if isinstance(x, torch.Tensor) \
        else x.dtype == np.uint8
    if len(shape) == 3 and integer and min(shape[1:]) >= MIN_SIDE:
        return "grey"
    if len(shape) != 4:
        return None
    if min(shape[2:]) >= MIN_SIDE and shape[1] in CHANNELS:
        return "first"
    if min(shape[1:3]) >= MIN_SIDE and shape[3] in CHANNELS and shape[1] > 3:
        return "last"
    if (min(shape[2:]) >= MIN_SIDE and shape[1] == 4) or \
            (min(shape[1:3]) >= MIN_SIDE and shape[3] == 4 and shape[1] > 4):
        raise ValueError(f"X of {describe(x)} is ambiguous: RGBA images, or pairs with two "
                         "hard-negative columns? Pass colour images as X[:, :3] (channels "
                         "first) or X[..., :3] (channels last), or hard negatives of 2-D "
                         "views as (n, 4, 1, H, W)")
    return None


def channels_first(x: np.ndarray | torch.Tensor, layout: str) -> np.ndarray | torch.Tensor:
    """Images of ``layout`` (see :func:`image_layout`) as ``(n, C, H, W)``."""
    if layout == "grey":
        return x[:, None]
    if layout == "last":
        return x.permute(0, 3, 1, 2) if isinstance(x, torch.Tensor) \
            else np.moveaxis(x, 3, 1)
    return x


class ImageAugmentation(nn.Module):
    """Random views of a batch of images ``(n, C, H, W)``, on the batch's device.

    SimCLR's recipe (Chen et al. 2020, https://arxiv.org/abs/2002.05709, Sec. 3 and
    App. A) in plain torch, per image: a random resized crop (a zoom into a region of
    ``crop_scale`` of the area), a rotation of up to ``degrees`` and a shift of up to
    ``translate`` of the side (one affine resampling, bilinear), a horizontal flip with
    probability ``flip``, brightness and contrast jitter, and Gaussian noise. Called
    ``f(x, generator)``, it draws every random number from ``generator``, which the
    estimators seed from ``random_state``. Its fields are plain numbers, so a saved
    model keeps it.

    Parameters
    ----------
    crop_scale : (float, float), default=(0.6, 1.0)
        Range of the crop's share of the image's area.
    degrees : float, default=10.0
        Largest rotation, either way.
    translate : float, default=0.1
        Largest shift, as a share of the side, along each axis.
    flip : float, default=0.0
        Probability of a horizontal flip (0.5 for colour photographs; 0 for digits and
        letters, which a flip turns into other symbols).
    brightness : float, default=0.2
        Largest brightness change, added, in units of the value range [0, 1].
    contrast : float, default=0.2
        Largest relative contrast change, either way.
    noise : float, default=0.05
        Standard deviation of the added Gaussian noise.
    """

    def __init__(self, crop_scale: tuple[float, float] = (0.6, 1.0), degrees: float = 10.0,
                 translate: float = 0.1, flip: float = 0.0, brightness: float = 0.2,
                 contrast: float = 0.2, noise: float = 0.05) -> None:
        super().__init__()
        self.crop_scale = tuple(float(s) for s in crop_scale)
        self.degrees = float(degrees)
        self.translate = float(translate)
        self.flip = float(flip)
        self.brightness = float(brightness)
        self.contrast = float(contrast)
        self.noise = float(noise)
        low, high = self.crop_scale
        if not 0 < low <= high <= 1:
            raise ValueError(f"crop_scale must be (low, high) with 0 < low <= high <= 1; "
                             f"got {crop_scale!r}")

    @classmethod
    def for_images(cls, shape: tuple[int, ...]) -> ImageAugmentation:
        """The default for images of ``shape`` ``(C, H, W)``: flips for colour images
        only."""
        return cls(flip=0.5 if shape[0] == 3 else 0.0)

    def forward(self, x: torch.Tensor, generator: torch.Generator | None = None
                ) -> torch.Tensor:
        """One random view of each image of the batch ``x`` ``(n, C, H, W)``."""
        if x.ndim != 4:
            raise ValueError(f"ImageAugmentation takes images (n, C, H, W); got "
                             f"{describe(x)}")
        n, device = x.shape[0], x.device

        def uniform(low: float, high: float) -> torch.Tensor:
            return low + (high - low) * torch.rand(n, generator=generator, device=device)

        zoom = uniform(*self.crop_scale).sqrt()  # the crop's side, as a share
        angle = uniform(-self.degrees, self.degrees) * (math.pi / 180)
        # the crop may sit anywhere inside the image, then shift by up to translate
        tx = uniform(-1, 1) * (1 - zoom + 2 * self.translate)
        ty = uniform(-1, 1) * (1 - zoom + 2 * self.translate)
        mirror = torch.where(uniform(0, 1) < self.flip, -1.0, 1.0)
        cos, sin = angle.cos() * zoom, angle.sin() * zoom
        theta = torch.stack([torch.stack([cos * mirror, -sin, tx], 1),
                             torch.stack([sin * mirror, cos, ty], 1)], 1)
        grid = F.affine_grid(theta.to(x.dtype), list(x.shape), align_corners=False)
        out = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros",
                            align_corners=False)
        mean = out.mean(dim=(1, 2, 3), keepdim=True)
        scale = uniform(1 - self.contrast, 1 + self.contrast).view(n, 1, 1, 1)
        shift = uniform(-self.brightness, self.brightness).view(n, 1, 1, 1)
        out = (out - mean) * scale.to(x.dtype) + mean + shift.to(x.dtype)
        if self.noise:
            out = out + self.noise * torch.randn(out.shape, generator=generator,
                                                 device=device, dtype=out.dtype)
        return out

    def extra_repr(self) -> str:
        return (f"crop_scale={self.crop_scale}, degrees={self.degrees}, "
                f"translate={self.translate}, flip={self.flip}, "
                f"brightness={self.brightness}, contrast={self.contrast}, noise={self.noise}")


class ImageEncoder(nn.Module):
    """The default encoder of single images ``(C, H, W)``: a fixed pixel path beside a
    learned convolutional one, added.

    The pixel path standardises each image (zero mean, unit variance over its values)
    and projects it with a fixed random orthogonal matrix to ``n_out`` dimensions,
    scaled by ``pixel_weight``: a random projection keeps the distances between images
    (Johnson & Lindenstrauss 1984), so before any training the model's neighbours are
    those of the raw pixels, the baseline a user tries first. The learned path is a
    small CNN (three 3x3 convolutions of ``width``, ``2 width`` and ``4 width``
    channels, the last two with stride 2, batch normalisation, global average pooling
    and a linear map) for images up to 32 pixels a side; larger images go through a
    strided stem and two residual stages (He et al. 2016,
    https://arxiv.org/abs/1512.03385) first. Its last layer starts at a small scale
    (``learned_init``), so training moves the embedding away from the pixel prior
    gradually rather than starting from a random network.

    Parameters
    ----------
    shape : (int, int, int)
        The images' ``(C, H, W)``.
    n_out : int
        Embedding width.
    width : int, default=32
        Channels of the first convolution.
    pixel_weight : float, default=1.0
        Scale of the pixel path.
    learned_init : float, default=0.1
        Standard deviation of the learned path's last layer at initialisation, relative
        to PyTorch's default.
    seed : int, default=0
        Seeds the fixed projection (the estimators seed the learned path).
    """

    def __init__(self, shape: tuple[int, int, int], n_out: int, width: int = 32,
                 pixel_weight: float = 1.0, learned_init: float = 0.1,
                 seed: int = 0) -> None:
        super().__init__()
        channels, height, width_px = (check_int(s, "shape", minimum=1) for s in shape)
        self.shape = (channels, height, width_px)
        self.n_out = check_int(n_out, "n_out", minimum=1)
        self.width = check_int(width, "width", minimum=1)
        self.pixel_weight = float(pixel_weight)
        self.learned_init = float(learned_init)
        self.seed = int(seed)
        n_pixels = channels * height * width_px
        generator = torch.Generator().manual_seed(self.seed)
        gaussian = torch.randn(n_pixels, max(n_out, 1), generator=generator,
                               dtype=torch.float64)
        if n_out <= n_pixels:
            basis = torch.linalg.qr(gaussian).Q  # orthonormal columns
        else:
            basis = gaussian / math.sqrt(n_pixels)
        self.register_buffer("projection", basis.float(), persistent=True)
        self.register_buffer("pixel_mean", torch.zeros(n_pixels), persistent=True)
        w = self.width
        layers: list[nn.Module] = []
        if max(height, width_px) > 32:  # a strided stem and residual stages first
            layers += [nn.Conv2d(channels, w, 5, stride=2, padding=2, bias=False),
                       nn.BatchNorm2d(w), nn.ReLU(inplace=True),
                       _Residual(w), _Residual(w)]
            channels = w
        layers += [nn.Conv2d(channels, w, 3, padding=1, bias=False), nn.BatchNorm2d(w),
                   nn.ReLU(inplace=True),
                   nn.Conv2d(w, 2 * w, 3, stride=2, padding=1, bias=False),
                   nn.BatchNorm2d(2 * w), nn.ReLU(inplace=True),
                   nn.Conv2d(2 * w, 4 * w, 3, stride=2, padding=1, bias=False),
                   nn.BatchNorm2d(4 * w), nn.ReLU(inplace=True),
                   nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.features = nn.Sequential(*layers)
        self.out = nn.Linear(4 * w, n_out)
        with torch.no_grad():
            self.out.weight.mul_(self.learned_init)
            self.out.bias.zero_()

    @staticmethod
    def standardise(x: torch.Tensor) -> torch.Tensor:
        """Each image's values as a row of zero mean and unit variance (bytes read as
        [0, 1]), so the pixel path does not depend on brightness, contrast or
        ``image_normalization``."""
        flat = x.flatten(1)
        flat = flat.float() / 255 if flat.dtype == torch.uint8 else flat
        flat = flat - flat.mean(dim=1, keepdim=True)
        # (a blank image stays zero; any other is scaled exactly, whatever its range)
        return flat / flat.pow(2).mean(dim=1, keepdim=True).sqrt().clamp(min=1e-12)

    @torch.no_grad()
    def fit_prior(self, views: list[torch.Tensor], max_rows: int = 10_000) -> ImageEncoder:
        """Make the pixel path a PCA of the training images (Pearson 1901): the
        ``n_out`` leading principal directions of the standardised pixels of up to
        ``max_rows`` images (evenly spaced), which the estimators call before the first
        step of a fresh fit. Before it, the path is a random orthogonal projection."""
        x = views[0]
        rows = torch.linspace(0, len(x) - 1, min(len(x), max_rows)).long()
        flat = self.standardise(x[rows.to(x.device)].to(self.projection.device))
        mean = flat.mean(dim=0)
        centred = (flat - mean).double() / math.sqrt(max(len(flat) - 1, 1))
        n, p = centred.shape
        k = min(self.n_out, n, p)
        if min(n, p) <= 2048:  # exact, from the smaller of the two Gram matrices
            if p <= n:
                values, vectors = torch.linalg.eigh(centred.T @ centred)
                values, vectors = values[-k:].flip(0), vectors[:, -k:].flip(1)
            else:
                values, left = torch.linalg.eigh(centred @ centred.T)
                values, left = values[-k:].flip(0), left[:, -k:].flip(1)
                vectors = centred.T @ left / values.clamp(min=1e-12).sqrt()
        else:  # randomised (Halko et al. 2011), seeded here, the global stream untouched
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed)
                _, singular, vectors = torch.pca_lowrank(centred, q=k + 10, center=False,
                                                         niter=4)
            values, vectors = singular[:k] ** 2, vectors[:, :k]
        basis = torch.zeros_like(self.projection, dtype=torch.float64)
        basis[:, :k] = vectors  # the leading directions first
        # scaled so that an image's projection has about unit norm, as before
        kept = values.clamp(min=0).sum()
        scale = math.sqrt(self.n_out) / kept.sqrt().clamp(min=1e-12)
        self.projection.copy_((basis * scale).float())
        self.pixel_mean.copy_(mean)
        return self

    def pixels(self, x: torch.Tensor) -> torch.Tensor:
        """The pixel path alone: the standardised images' fixed projection."""
        flat = self.standardise(x) - self.pixel_mean.to(x.device)
        return self.pixel_weight * (flat @ self.projection.to(flat.dtype)) \
            / math.sqrt(max(self.n_out, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(-1, *self.shape)
        return self.pixels(x) + self.out(self.features(x))

    def extra_repr(self) -> str:
        return (f"shape={self.shape}, n_out={self.n_out}, width={self.width}, "
                f"pixel_weight={self.pixel_weight}, learned_init={self.learned_init}")


class _Residual(nn.Module):
    """Two 3x3 convolutions with batch normalisation and an identity shortcut."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(channels), nn.ReLU(inplace=True),
            nn.Conv2d(channels, channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.body(x))
