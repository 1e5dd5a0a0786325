"""Textured shapes: the lite track's image dataset, generated on the fly, no download.

Each 32x32 RGB image shows one of ten shapes (the class), filled with a striped texture, on a
background with a different texture, plus a few small clutter blobs and pixel noise. Colours,
textures, position, size and a small rotation are random and independent of the class, so
colour alone says nothing: a classifier needs local evidence (edges, texture boundaries, holes)
combined into global shape.

Every image is a pure function of (seed, index): parameters come from a counter-based hash, so
image 12,345 is the same whether you render it alone or in a batch, on any machine.
Split: indices [0, N_TRAIN) are training images, [N_TRAIN, N_TRAIN + N_TEST) held-out test images.
The label of index i is i % 10, so every prefix of the training set is class-balanced, and the
data fractions are nested prefixes (3% of the data is contained in 10%, in 30%, in 100%).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from helpers.guards import check_int

CLASS_NAMES = ("disk", "ring", "square", "frame", "triangle", "plus", "cross", "half-disk", "bars", "crescent")
IMAGE_SIZE = 32
N_TRAIN = 50_000
N_TEST = 10_000
DEFAULT_SEED = 0
_N_PARAMS = 32  # random numbers drawn per image
# Geometry of the shapes, in pixels: centre drawn uniformly in [lo, lo + span], radius likewise.
CENTRE_RANGE = (10.0, 12.0)
RADIUS_RANGE = (7.5, 4.0)
# Variants of the task (R&D of a harder lite task, data/README.md). "standard" is every bundled model's.
# In the contrast variants the brightness gap between shape and background is scaled by a factor drawn
# uniformly from the variant's range per image, so in many images the shape stands out less than its
# stripes do and must be found from where the texture changes, a local cue. "mid-contrast" is the
# milder of the two (its faintest images are twice as clear as "low-contrast"'s).
CONTRAST_RANGES = {"low-contrast": (0.2, 1.0), "mid-contrast": (0.4, 1.0)}
VARIANTS = ("standard", *CONTRAST_RANGES)


# --------------------------------------------------------------------------- counter-based randomness


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """A well-mixed 64-bit hash of each uint64 (Steele et al.'s SplitMix64 finaliser)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def uniforms(seed: int, indices: np.ndarray, n: int = _N_PARAMS) -> np.ndarray:
    """(len(indices), n) numbers in [0, 1), a pure function of (seed, index, column)."""
    idx = np.asarray(indices, dtype=np.uint64)[:, None]
    col = np.arange(n, dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        key = _splitmix64(np.uint64(seed) * np.uint64(0xD1B54A32D192ED03) + idx * np.uint64(n) + col)
    return (key >> np.uint64(11)).astype(np.float64) / float(1 << 53)


# --------------------------------------------------------------------------- shapes


def _shape_masks(u: torch.Tensor, v: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Boolean (B, H, W) masks. u, v: (B, H, W) pixel coordinates in the shape's own frame, radius 1."""
    r = torch.sqrt(u**2 + v**2)
    box = torch.maximum(u.abs(), v.abs())
    d1, d2 = (u + v) / math.sqrt(2), (u - v) / math.sqrt(2)
    masks = torch.stack([
        r < 1.0,                                                                  # disk
        (r < 1.0) & (r > 0.55),                                                   # ring
        box < 0.8,                                                                # square
        (box < 0.85) & (box > 0.45),                                              # frame
        (v > -0.65) & (v < 0.95 - 1.7 * u.abs()),                                 # triangle
        ((u.abs() < 0.3) & (v.abs() < 0.95)) | ((v.abs() < 0.3) & (u.abs() < 0.95)),  # plus
        ((d1.abs() < 0.28) & (d2.abs() < 1.05)) | ((d2.abs() < 0.28) & (d1.abs() < 1.05)),  # cross
        (r < 1.0) & (v > -0.15),                                                  # half-disk
        (u.abs() < 0.9) & (((v - 0.45).abs() < 0.22) | ((v + 0.45).abs() < 0.22)),  # bars
        (r < 1.0) & (torch.sqrt((u - 0.5) ** 2 + v**2) > 0.75),                   # crescent
    ], dim=1)  # (B, 10, H, W)
    return masks[torch.arange(len(labels)), labels]


def _stripes(p: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """A sinusoidal grating in [-1, 1]. p: (B, 3) uniforms for orientation, frequency, phase."""
    angle = p[:, 0, None, None] * math.pi
    freq = 0.25 + 0.45 * p[:, 1, None, None]  # radians per pixel: periods of ~9 to ~25 px... to 4 px
    phase = p[:, 2, None, None] * 2 * math.pi
    return torch.sin(freq * (x * torch.cos(angle) + y * torch.sin(angle)) + phase)


def _colour_pair(p: torch.Tensor):
    """Foreground and background RGB (B, 3) with a clear brightness contrast, random which is lighter."""
    bright = 0.6 + 0.4 * p[:, 0:3]
    dark = 0.05 + 0.35 * p[:, 3:6]
    light_shape = (p[:, 6:7] < 0.5)
    return torch.where(light_shape, bright, dark), torch.where(light_shape, dark, bright)


def check_variant(variant: str) -> str:
    """`variant` if it is one of VARIANTS, else a ValueError that lists them."""
    if variant not in VARIANTS:
        raise ValueError(f"Unknown shapes variant {variant!r}; use one of {', '.join(VARIANTS)}.")
    return variant


def _scale_contrast(fg: torch.Tensor, bg: torch.Tensor, factor: torch.Tensor):
    """Move both colours (B, 3) towards their mean by `factor` (B,): 1 keeps them, 0 makes them equal."""
    mid, f = (fg + bg) / 2, factor[:, None]
    return mid + f * (fg - mid), mid + f * (bg - mid)


def contrast_factors(indices, variant: str, seed: int = DEFAULT_SEED) -> np.ndarray:
    """(len(indices),) factor by which a contrast variant scales each image's shape-background gap (1: standard)."""
    indices = np.asarray(indices, dtype=np.int64).reshape(-1)
    if check_variant(variant) not in CONTRAST_RANGES:
        return np.ones(len(indices))
    lo, hi = CONTRAST_RANGES[variant]  # column 31 is otherwise unused, so the standard images do not change
    column = uniforms(seed, indices)[:, 31].astype(np.float32)  # float32, as render draws every column
    return np.float32(lo) + np.float32(hi - lo) * column


def render(indices, seed: int = DEFAULT_SEED, variant: str = "standard") -> tuple[torch.Tensor, torch.Tensor]:
    """Render images by index.

    indices: sequence of ints. variant: one of VARIANTS. Returns images (B, 3, 32, 32) uint8 and labels (B,) int64.
    """
    check_variant(variant)
    given = np.asarray(indices).reshape(-1)
    if given.dtype.kind not in "iu" and not (given.dtype.kind == "f" and np.all(given == np.round(given))):
        raise ValueError(f"indices must be whole image numbers, got {given.dtype} values such as {given[:3].tolist()} "
                         "(0.5 was read as image 0).")
    indices = given.astype(np.int64)
    if len(indices) and (indices.min() < 0 or indices.max() >= N_TRAIN + N_TEST):
        raise IndexError(f"Shape image indices run from 0 to {N_TRAIN + N_TEST - 1}; got {indices.min()}..{indices.max()}.")
    p = torch.from_numpy(uniforms(seed, indices)).float()
    B, S = len(indices), IMAGE_SIZE
    labels = torch.from_numpy(indices % len(CLASS_NAMES))
    y, x = torch.meshgrid(torch.arange(S, dtype=torch.float32), torch.arange(S, dtype=torch.float32), indexing="ij")
    x, y = x.expand(B, S, S), y.expand(B, S, S)

    # the shape: centre, radius, a small rotation (so 'plus' and 'cross' stay distinct)
    lo, span = CENTRE_RANGE
    cx, cy = (lo + span * p[:, 0])[:, None, None], (lo + span * p[:, 1])[:, None, None]
    radius = (RADIUS_RANGE[0] + RADIUS_RANGE[1] * p[:, 2])[:, None, None]
    theta = ((p[:, 3] - 0.5) * math.radians(40))[:, None, None]
    dx, dy = (x - cx) / radius, (cy - y) / radius  # v points up
    u = dx * torch.cos(theta) + dy * torch.sin(theta)
    v = -dx * torch.sin(theta) + dy * torch.cos(theta)
    mask = _shape_masks(u, v, labels).float()[:, None]  # (B, 1, S, S)

    # textures and colours, independent of the class
    fg_colour, bg_colour = _colour_pair(p[:, 4:11])
    if variant in CONTRAST_RANGES:
        factor = torch.from_numpy(contrast_factors(indices, variant, seed)).float()
        fg_colour, bg_colour = _scale_contrast(fg_colour, bg_colour, factor)
    fg = fg_colour[:, :, None, None] * (1 + (0.15 + 0.2 * p[:, 11, None, None, None]) * _stripes(p[:, 12:15], x, y)[:, None])
    bg_texture = 0.5 * (_stripes(p[:, 15:18], x, y) + _stripes(p[:, 18:21], x, y))
    bg = bg_colour[:, :, None, None] * (1 + (0.15 + 0.2 * p[:, 21, None, None, None]) * bg_texture[:, None])
    image = mask * fg + (1 - mask) * bg

    # clutter: three small blobs of random colour (2-3 px) anywhere
    for k in range(3):
        q = p[:, 22 + 3 * k: 25 + 3 * k]
        bx, by = (q[:, 0] * S)[:, None, None], (q[:, 1] * S)[:, None, None]
        blob = (((x - bx) ** 2 + (y - by) ** 2) < (1.0 + 1.5 * q[:, 2, None, None]) ** 2).float()[:, None]
        shade = q[:, 2:3, None, None].expand(B, 3, 1, 1) * torch.tensor([1.0, 0.6, 0.3])[None, :, None, None]
        image = blob * shade + (1 - blob) * image

    # pixel noise, seeded by the image index too
    noise = torch.from_numpy(uniforms(seed + 7919, indices, 3 * S * S)).float().reshape(B, 3, S, S)
    image = image + 0.08 * (noise - 0.5)
    return (image.clamp(0, 1) * 255).round().to(torch.uint8), labels


# --------------------------------------------------------------------------- splits and subsets


def split_indices(split: str, fraction: float = 1.0) -> np.ndarray:
    """Image indices of a split. split: 'train' or 'test'. fraction: a nested prefix of the training set."""
    if split == "train":
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}.")
        count = int(round(N_TRAIN * fraction))
        return np.arange(count - count % len(CLASS_NAMES))  # whole rounds of classes: balanced labels
    if split == "test":
        if fraction != 1.0:
            raise ValueError("The test split is always used whole (fraction=1).")
        return np.arange(N_TRAIN, N_TRAIN + N_TEST)
    raise ValueError(f"split must be 'train' or 'test', got {split!r}.")


def load_split(split: str, fraction: float = 1.0, count: int | None = None, seed: int = DEFAULT_SEED,
               batch: int = 1000, variant: str = "standard") -> tuple[torch.Tensor, torch.Tensor]:
    """Render a whole split (or its first `count` images) as uint8 images (N, 3, 32, 32) and labels (N,)."""
    indices = split_indices(split, fraction)
    if count is not None:  # -1 read all but the last image, 0 failed in torch.cat
        indices = indices[:check_int(count, "count", 1, "Give how many images to render, or None for the whole split.")]
    parts = [render(indices[s:s + batch], seed, variant) for s in range(0, len(indices), batch)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
