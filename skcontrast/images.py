"""Images in: the default encoder and batch augmentation for single images.

``ContrastiveEmbedder().fit(images)`` trains SimCLR-style (Chen et al. 2020,
https://arxiv.org/abs/2002.05709): two random augmentations of each image are a pair,
the other images of the batch its negatives. With no ``module`` and no
``augmentation``, the estimators take the two defaults here, chosen from the images'
size and channels with torch alone (no torchvision, no kornia):

- :class:`ImageEncoder`: a fixed pixel prior (a half-whitened PCA of the training
  images' pixels, which :meth:`~ImageEncoder.fit_prior` fits before the first step, so
  the untrained model ranks neighbours as a PCA of the pixels does) beside a learned
  convolutional path (a small CNN, after a compact residual stem for images larger than
  32 pixels a side), each normalised, side by side;
- :class:`ImageAugmentation`: shifts, small rotations and zooms, brightness and
  contrast jitter and noise for grey images (never a flip: a flipped digit is another
  symbol); random resized crops, flips, lighting and colour gains for colour images;
  drawn per image on whole batches on the training device.

The defaults were chosen by measurement on scikit-learn's digits (8x8 and upsampled),
synthetic shapes and patches of scikit-learn's sample photographs, and are reported on
data they never saw (:doc:`/images`).

The rule that tells single images from other arrays, which :func:`image_layout`
applies (every entry point reads input through it):

- ``(n, C, H, W)`` with ``C`` 1 or 3 and ``H, W >= 8``: single images, channels first
  (colour channels are never views or hard-negative columns);
- ``(n, H, W, C)`` with ``C`` 1 or 3, ``H, W >= 8`` and axis 1 not 1, 2 or 3: single
  images, channels last (what PIL and most loaders give), moved to channels first;
- ``(n, H, W)`` bytes (``uint8``) or 16-bit pixels (``uint16``) with ``H, W >= 8``:
  single grey images;
- a list of PIL images (or a Hugging Face ``datasets.Dataset`` column of them), of one
  size, grey (``'L'``) or colour (``'RGB'``, with grey ones among them converted);
- ``(n, 2, ...)``: pairs, as before (two views of each item on axis 1);
- ``(n, 4, H, W)`` or ``(n, H, W, 4)`` with ``H, W >= 8`` is refused (RGBA images, or
  pairs with two hard-negative columns?): pass ``X[:, :3]`` for the colour channels, or
  hard negatives as ``(n, 4, 1, H, W)``.

What the pixel values mean (:func:`pixel_floats`): bytes (``uint8``) are 0-255 and
16-bit pixels (``uint16``, the usual microscopy and medical format) 0-65535, both turned
into floats in [0, 1] on the training device; float images are read as intensities in
[0, 1] as they are, and float images whose values lie in [0, 255] or beyond are warned
of (:func:`check_pixel_range`); other integer types are refused, naming the conversion.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ._pixels import check_pixel_range, image_layout, pil_images, pixel_floats
from ._validation import check_int, describe

__all__ = ["ImageAugmentation", "ImageEncoder", "check_pixel_range", "image_layout",
           "pil_images", "pixel_floats"]

#: the largest side the pixel prior reads: larger images are averaged over areas down to
#: it first, so the prior's size (and a saved model's) does not grow with the image
PRIOR_SIDE = 32
#: the largest side the learned path reads: larger images (photographs of 1024 pixels)
#: are averaged over areas down to it first, so its activations stay those of a
#: 256-pixel image
LEARNED_SIDE = 256
#: pixel values the prior prepares at a time (2^22: 16 MiB of float32), whole images
#: (at least one): the floats of every image are never held at once
PRIOR_CHUNK = 2**22


class ImageAugmentation(nn.Module):
    """Random views of a batch of images ``(n, C, H, W)``, on the batch's device.

    SimCLR's recipe (Chen et al. 2020, https://arxiv.org/abs/2002.05709, Sec. 3 and
    App. A) in plain torch, per image: one affine resampling (bilinear) that takes a
    random crop of ``crop_scale`` of the area, zooms by up to ``zoom``, rotates by up to
    ``degrees`` and shifts by up to ``translate`` of the side, with a horizontal flip of
    probability ``flip``; then contrast, brightness and per-channel gain jitter, and
    Gaussian noise. Called ``f(x, generator)``, it draws every random number from
    ``generator``, which the estimators seed from ``random_state``. Its fields are plain
    numbers, so a saved model keeps it. :meth:`for_images` gives the defaults measured
    in :doc:`/images`.

    Parameters
    ----------
    crop_scale : (float, float), default=(1.0, 1.0)
        Range of the crop's share of the image's area.
    zoom : float, default=0.15
        Largest change of scale, either way.
    degrees : float, default=18.0
        Largest rotation, either way.
    translate : float, default=0.15
        Largest shift, as a share of the side, along each axis.
    flip : float, default=0.0
        Probability of a horizontal flip (0.5 for photographs; 0 for digits and letters,
        which a flip turns into other symbols).
    brightness : float, default=0.15
        Largest brightness change, added, in units of the value range [0, 1].
    contrast : float, default=0.3
        Largest relative contrast change, either way.
    colour : float, default=0.0
        Largest relative gain of each colour channel, either way.
    noise : float, default=0.075
        Standard deviation of the added Gaussian noise.
    padding : {'zeros', 'reflection', 'border'}, default='zeros'
        What fills the image where the transformed view leaves it.
    """

    def __init__(self, crop_scale: tuple[float, float] = (1.0, 1.0), zoom: float = 0.15,
                 degrees: float = 18.0, translate: float = 0.15, flip: float = 0.0,
                 brightness: float = 0.15, contrast: float = 0.3, colour: float = 0.0,
                 noise: float = 0.075, padding: str = "zeros") -> None:
        super().__init__()
        low, high = (float(s) for s in crop_scale)
        self.crop_scale = (low, high)
        self.zoom = float(zoom)
        self.degrees = float(degrees)
        self.translate = float(translate)
        self.flip = float(flip)
        self.brightness = float(brightness)
        self.contrast = float(contrast)
        self.colour = float(colour)
        self.noise = float(noise)
        self.padding = padding
        if not 0 < low <= high <= 1:
            raise ValueError(f"crop_scale must be (low, high) with 0 < low <= high <= 1; "
                             f"got {crop_scale!r}")
        if padding not in ("zeros", "reflection", "border"):
            raise ValueError(f"padding must be 'zeros', 'reflection' or 'border'; got "
                             f"{padding!r}")

    @classmethod
    def for_images(cls, shape: tuple[int, ...]) -> ImageAugmentation:
        """The default for images of ``shape`` ``(C, H, W)`` (see :doc:`/images`): for
        grey images shifts, rotations, zooms, lighting and noise, never a flip; for
        colour images crops, flips, lighting, colour gains and reflection padding."""
        if shape[0] == 1:
            return cls()
        return cls(crop_scale=(0.6, 1.0), zoom=0.0, degrees=15.0, translate=0.15, flip=0.5,
                   brightness=0.3, contrast=0.45, colour=0.3, noise=0.045,
                   padding="reflection")

    def forward(self, x: torch.Tensor, generator: torch.Generator | None = None
                ) -> torch.Tensor:
        """One random view of each image of the batch ``x`` ``(n, C, H, W)``."""
        if x.ndim != 4:
            raise ValueError(f"ImageAugmentation takes images (n, C, H, W); got "
                             f"{describe(x)}")
        n, device = x.shape[0], x.device

        def uniform(low: float, high: float, *shape: int) -> torch.Tensor:
            return low + (high - low) * torch.rand(n, *shape, generator=generator,
                                                   device=device, dtype=x.dtype)

        angle = uniform(-self.degrees, self.degrees) * (math.pi / 180)
        scale = 1 + uniform(-self.zoom, self.zoom)  # the sampling grid's (< 1: zoom in)
        if self.crop_scale != (1.0, 1.0):
            low, high = self.crop_scale
            scale = scale * uniform(low, high).sqrt()
        mirror = torch.where(uniform(0, 1) < self.flip, -1.0, 1.0).to(x.dtype)
        tx, ty = (uniform(-1, 1) * 2 * self.translate for _ in range(2))
        cos, sin = angle.cos() * scale, angle.sin() * scale
        theta = torch.stack([torch.stack([cos * mirror, -sin, tx], 1),
                             torch.stack([sin * mirror, cos, ty], 1)], 1)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        out = F.grid_sample(x, grid, mode="bilinear", padding_mode=self.padding,
                            align_corners=False)
        mean = out.mean(dim=(1, 2, 3), keepdim=True)
        contrast = 1 + uniform(-self.contrast, self.contrast, 1, 1, 1)
        out = (out - mean) * contrast + mean + uniform(-self.brightness, self.brightness,
                                                       1, 1, 1)
        if self.colour and x.shape[1] > 1:
            out = out * (1 + uniform(-self.colour, self.colour, x.shape[1], 1, 1))
        if self.noise:
            out = out + self.noise * torch.randn(out.shape, generator=generator,
                                                 device=device, dtype=out.dtype)
        return out

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={getattr(self, k)!r}" for k in (
            "crop_scale", "zoom", "degrees", "translate", "flip", "brightness", "contrast",
            "colour", "noise", "padding"))


class ImageEncoder(nn.Module):
    """The default encoder of single images ``(C, H, W)``: a fixed pixel path beside a
    learned convolutional one, side by side.

    The embedding is ``[normalize(prior(x)), mix * normalize(cnn(x))]``:

    - the *prior* is a PCA of the pixels (Pearson 1901,
      https://doi.org/10.1080/14786440109462720), half-whitened (each of its
      ``prior_width`` leading directions scaled by the inverse fourth root of its
      variance), fitted on the training images before the first step
      (:meth:`fit_prior`) and fixed: before any training the model's neighbours are
      those of a PCA of the pixels, the baseline a user tries first (a random
      orthogonal projection, which keeps pixel distances, until it is fitted). Images
      larger than ``PRIOR_SIDE`` (32) pixels a side are averaged over areas down to
      at most 32 x 32 first (as ``F.adaptive_avg_pool2d`` does), so the prior holds at
      most ``3 * 32 * 32 * prior_width`` numbers whatever the image size (768 KiB for
      colour images, 64 directions), and its fit reads images a chunk at a time.
      Directions in which the training images do not vary are left out (a set of
      constant images has an all-zero prior);
    - the *learned* path is a small CNN (three 3x3 convolutions of ``width``, ``2 width``
      and ``4 width`` channels, the first two of stride 2, batch normalisation, an
      average pool to at most 3 x 3 and a linear map to ``n_out``); images larger than
      32 pixels a side go through a strided stem and two residual blocks (He et al.
      2016, https://arxiv.org/abs/1512.03385) first, and images larger than
      ``LEARNED_SIDE`` (256) pixels a side are averaged over areas down to at most
      256 first. The images are standardised by the training images' mean and standard
      deviation (from :meth:`fit_prior`).

    Both read the images as the network receives them (the estimators' ``fit_prior``
    call prepares them as every training batch is: bytes and 16-bit pixels scaled to
    [0, 1], ``image_normalization`` applied).

    Training moves the learned part only; the prior keeps what the pixels already say
    about neighbours, and the CNN adds what the augmentations teach (invariance to
    shifts, rotations, crops and lighting).

    Parameters
    ----------
    shape : (int, int, int)
        The images' ``(C, H, W)``.
    n_out : int
        Embedding width, at least 2: the prior's part (``prior_width``, at most two
        thirds of it) and the learned part (the rest).
    width : int or None, default=None
        Channels of the first convolution; ``None``: 24 for grey images, 16 for colour.
    prior_width : int, default=64
        Leading principal directions the prior keeps (at most the pixels' count and two
        thirds of ``n_out``).
    mix : float, default=1.5
        Weight of the learned part beside the prior.
    seed : int, default=0
        Seeds the prior's projection before it is fitted (the estimators seed the rest).
    """

    projection: torch.Tensor
    pixel_mean: torch.Tensor
    input_scale: torch.Tensor

    def __init__(self, shape: tuple[int, ...], n_out: int, width: int | None = None,
                 prior_width: int = 64, mix: float = 1.5, seed: int = 0) -> None:
        super().__init__()
        if len(shape) != 3:
            raise ValueError(f"shape must be (C, H, W); got {shape!r}")
        channels, height, width_px = (check_int(s, "shape", minimum=1) for s in shape)
        self.shape = (channels, height, width_px)
        #: the images as the prior reads them: at most PRIOR_SIDE pixels a side
        self.prior_shape = (channels, min(height, PRIOR_SIDE), min(width_px, PRIOR_SIDE))
        #: and as the learned path reads them: at most LEARNED_SIDE a side
        self.learned_side = (min(height, LEARNED_SIDE), min(width_px, LEARNED_SIDE))
        self.n_out = check_int(n_out, "n_out", minimum=2)
        self.width = check_int((24 if channels == 1 else 16) if width is None else width,
                               "width", minimum=1)
        n_pixels = math.prod(self.prior_shape)
        self.prior_width = min(check_int(prior_width, "prior_width", minimum=1), n_pixels,
                               max(1, 2 * self.n_out // 3))
        learned_width = self.n_out - self.prior_width
        self.mix = float(mix)
        self.seed = int(seed)
        generator = torch.Generator().manual_seed(self.seed)
        gaussian = torch.randn(n_pixels, self.prior_width, generator=generator,
                               dtype=torch.float64)
        self.register_buffer("projection", torch.linalg.qr(gaussian).Q.float())
        self.register_buffer("pixel_mean", torch.zeros(n_pixels))
        self.register_buffer("input_scale", torch.tensor([0.0, 1.0]))  # mean, std
        w = self.width
        layers: list[nn.Module] = []
        height, width_px = self.learned_side
        if max(height, width_px) > 32:  # a strided stem and residual blocks first
            layers += [nn.Conv2d(channels, w, 5, stride=2, padding=2, bias=False),
                       nn.BatchNorm2d(w), nn.ReLU(inplace=True), _Residual(w), _Residual(w)]
            channels, height = w, (height + 1) // 2

        def block(a: int, b: int, stride: int) -> list[nn.Module]:
            return [nn.Conv2d(a, b, 3, stride, 1, bias=False), nn.BatchNorm2d(b),
                    nn.ReLU(inplace=True)]

        pool = max(1, min(3, height // 4))
        self.features = nn.Sequential(
            *layers, *block(channels, w, 2), *block(w, 2 * w, 2), *block(2 * w, 4 * w, 1),
            nn.AdaptiveAvgPool2d(pool), nn.Flatten(),
            nn.Linear(4 * w * pool * pool, learned_width), nn.BatchNorm1d(learned_width))

    @staticmethod
    def as_floats(x: torch.Tensor) -> torch.Tensor:
        """Images as float32: bytes and 16-bit pixels scaled to [0, 1]
        (:func:`pixel_floats`), floats as they are."""
        return pixel_floats(x).float()

    def prior_pixels(self, x: torch.Tensor) -> torch.Tensor:
        """Float images ``(n, C, H, W)`` as the prior reads them, flattened: averaged over
        areas down to at most ``PRIOR_SIDE`` pixels a side (unchanged when smaller)."""
        return _area_average(x, (self.prior_shape[1], self.prior_shape[2])).flatten(1)

    @torch.no_grad()
    def fit_prior(self, views: list[torch.Tensor], max_rows: int = 10_000,
                  prepare: Any = None) -> ImageEncoder:
        """Fit the prior, a half-whitened PCA of the pixels of up to ``max_rows``
        training images (evenly spaced), and the images' mean and standard deviation
        the learned path standardises with; the estimators call it before the first
        step of a fresh fit.

        ``prepare`` is what the training step does to a batch before the encoder sees
        it (the estimators pass theirs: bytes and 16-bit pixels to [0, 1],
        ``image_normalization``); default :meth:`as_floats`. Both the prior and the
        standardisation are of its output, prepared a few images at a time (about
        ``PRIOR_CHUNK`` values), so the floats of every image are never held at
        once. Principal directions of no variance (constant images) are left out of the
        prior."""
        x = views[0]
        prepare = self.as_floats if prepare is None else prepare
        device = self.projection.device
        rows = torch.linspace(0, len(x) - 1, min(len(x), max_rows)).long()
        pooled = self.shape != self.prior_shape
        # the prior's input, written in place chunk by chunk (pieces kept alive between
        # the chunks' large temporaries would fragment the heap: 575 MiB for 1,000
        # colour images of 224 pixels, against 50 MiB so)
        flat = torch.empty(len(rows), math.prod(self.prior_shape), device=device)
        count, mean_all, spread, start = 0, 0.0, 0.0, 0
        for chunk in rows.split(max(1, PRIOR_CHUNK // math.prod(self.shape))):
            batch = prepare(x.index_select(0, chunk.to(x.device))).to(device).float()
            if pooled:  # the learned path reads every value: its moments, chunk by chunk
                # (Chan et al.'s pairwise update of the mean and the squared deviations)
                size, part_mean = batch.numel(), float(batch.mean())
                squares = float((batch - part_mean).square_().sum())
                delta, count = part_mean - mean_all, count + size
                mean_all += delta * size / count
                spread += squares + delta ** 2 * size * (count - size) / count
            flat[start:start + len(chunk)] = self.prior_pixels(batch)
            start += len(chunk)
        if pooled:
            std = math.sqrt(spread / max(count - 1, 1))
            scale = torch.tensor([mean_all, max(std, 1e-6)])
        else:
            scale = torch.stack([flat.mean(), flat.std().clamp(min=1e-6)])
        mean = flat.mean(dim=0)
        centred = (flat - mean).double() / math.sqrt(max(len(flat), 1))
        n, p = centred.shape
        k = min(self.prior_width, n, p)
        if min(n, p) <= 2048:  # exact, from the smaller of the two Gram matrices
            if p <= n:
                values, vectors = torch.linalg.eigh(centred.T @ centred)
                values, vectors = values[-k:].flip(0), vectors[:, -k:].flip(1)
            else:
                values, left = torch.linalg.eigh(centred @ centred.T)
                values, left = values[-k:].flip(0), left[:, -k:].flip(1)
                vectors = centred.T @ left / values.clamp(min=1e-12).sqrt()
        else:  # randomised (Halko et al. 2011, arXiv:0909.4061), seeded, global RNG untouched
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed)
                _, singular, vectors = torch.pca_lowrank(centred, q=k + 10, center=False,
                                                         niter=4)
            values, vectors = singular[:k] ** 2, vectors[:, :k]
        # the directions the images vary in: the float rounding of constant pixels (their
        # mean is not exact in float32) gives variances far below this floor
        floor = 1e-10 * float(flat.double().square().sum(1).mean())
        kept = values > floor
        basis = torch.zeros_like(self.projection, dtype=torch.float64)
        if bool(kept.any()):
            values, vectors = values[kept], vectors[:, kept]
            basis[:, :len(values)] = vectors * (values + 1e-3 * values[0]).pow(-0.25)
        self.projection.copy_(basis.float())
        self.pixel_mean.copy_(mean)
        self.input_scale.copy_(scale.to(self.input_scale))
        return self

    def prior(self, x: torch.Tensor) -> torch.Tensor:
        """The fixed pixel path alone."""
        flat = self.prior_pixels(self.as_floats(x)) - self.pixel_mean.to(x.device)
        return flat @ self.projection.to(x.device)

    def learned(self, x: torch.Tensor) -> torch.Tensor:
        """The learned path alone."""
        mean, std = self.input_scale.to(x.device)
        return self.features(_area_average((self.as_floats(x) - mean) / std,
                                           self.learned_side))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The embeddings ``(n, n_out)`` of images ``(n, C, H, W)``: the normalised prior
        beside ``mix`` times the normalised learned part."""
        x = x.reshape(-1, *self.shape)
        return torch.cat([F.normalize(self.prior(x), dim=1),
                          self.mix * F.normalize(self.learned(x), dim=1)], dim=1)

    def extra_repr(self) -> str:
        return (f"shape={self.shape}, n_out={self.n_out}, width={self.width}, "
                f"prior_width={self.prior_width}, mix={self.mix}")


def _area_average(x: torch.Tensor, side: tuple[int, int]) -> torch.Tensor:
    """Images ``(n, C, H, W)`` averaged over areas down to ``side`` ``(h, w)`` (each
    output pixel the mean of the input pixels it covers, ``F.adaptive_avg_pool2d``);
    unchanged when they are that size already."""
    if tuple(x.shape[-2:]) == tuple(side):
        return x
    return F.adaptive_avg_pool2d(x, side)


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
