"""Error bars for CKA values from repeated disjoint subsamples of the images.

    parts = disjoint_subsamples(n_images, repeats=10)          # R disjoint index arrays, seeded
    values = [estimate(images[idx]) for idx in parts]          # the same estimator on each part
    low, high = subsample_interval(full_value, values, 0.9)    # a 90% interval around the full-data value

The images are split at random into R disjoint parts of about n = N / R images each, and the
estimator (minibatch CKA, or any number computed from it) runs on each part. The spread of
those R values is the spread of the *subsample* estimator, on n images. The full-data value on
N = R n images varies about 1 / sqrt(R) as much, when the variance falls as 1 / (number of
images), as it does for a smooth estimator such as CKA. So the interval is

    full value  +-  t(level, R - 1) * sd(subsample values) / sqrt(R)

a batch-means (subsampling) interval for the value the estimator would give on unlimited
images of the same kind, with the same models and layers. It describes the sampling of the
images only: not a second training run of the models, not other layers or token policies.
"""

from __future__ import annotations

import functools
import math

import numpy as np


def disjoint_subsamples(n: int, repeats: int, seed: int = 0) -> list:
    """R disjoint, equally sized index arrays drawn at random from range(n) (seeded, machine-independent).

    Each part has n // repeats indices; the n % repeats left over are used by no part.
    Returns a list of `repeats` sorted int64 arrays.
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 2:
        raise ValueError(f"repeats must be a whole number of at least 2 (an interval needs two subsamples), got {repeats!r}.")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):  # 10.5 failed deep in numpy (AxisError)
        raise TypeError(f"n must be a whole number of images (an int), got {n!r}.")
    size = n // repeats
    if size < 4:
        raise ValueError(f"{n} images in {repeats} subsamples give {size} image{'' if size == 1 else 's'} each; CKA needs at least 4 (use 50+): "
                         "use fewer repeats or more images.")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a whole number of 0 or more, got {seed!r}.")
    order = np.random.default_rng(seed).permutation(n)
    return [np.sort(order[k * size:(k + 1) * size]) for k in range(repeats)]


def _t_pdf(x: np.ndarray, dof: int) -> np.ndarray:
    """Density of Student's t distribution with `dof` degrees of freedom."""
    log_norm = math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(dof * math.pi)
    return np.exp(log_norm - (dof + 1) / 2 * np.log1p(x * x / dof))


def t_quantile(p: float, dof: int) -> float:
    """The p-quantile of Student's t (0.5 < p < 1), by integrating its density on a fine grid.

    Accurate to about 1e-6 for dof >= 1 (t_quantile(0.95, 9) = 1.8331).
    """
    if not 0.5 < p < 1 or dof < 1:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and dof >= 1, got p={p}, dof={dof}.")
    return _t_quantile(float(p), float(dof))


@functools.cache  # a pure function, asked for the same few (p, dof) thousands of times in a notebook (6 ms each)
def _t_quantile(p: float, dof: float) -> float:
    # substitute x = tan(u), u in [0, pi/2): the heavy tail becomes a finite interval
    u = np.linspace(0.0, math.pi / 2, 200_001)[:-1]
    density = _t_pdf(np.tan(u), dof) / np.cos(u) ** 2
    cdf = 0.5 + np.concatenate([[0.0], np.cumsum((density[1:] + density[:-1]) / 2 * np.diff(u))])
    return float(np.tan(np.interp(p, cdf, u)))


def subsample_interval(full, subsample_values, level: float = 0.9):
    """A `level` interval around the full-data value from R subsample values (module docstring).

    full: the estimate on all images, a number or an array of any shape (e.g. a (La, Lb) CKA matrix).
    subsample_values: (R, ...) the same estimate on each of R disjoint subsamples (R >= 2).
    Returns (low, high), arrays shaped like `full`.
    """
    full = np.asarray(full, dtype=np.float64)
    values = np.asarray(subsample_values, dtype=np.float64)
    if values.ndim < 1 or values.shape[0] < 2 or values.shape[1:] != full.shape:
        raise ValueError(f"subsample_values must be (R, *full.shape) with R >= 2; got {values.shape} for full {full.shape}.")
    if not 0 < level < 1:
        raise ValueError(f"level must be between 0 and 1 (e.g. 0.9 for a 90% interval), got {level}.")
    if np.isinf(full).any() or np.isinf(values).any():
        raise ValueError("The full value or a subsample value is infinite: an interval around it means nothing. "
                         "Check the statistic (a division by zero?).")
    # NaN marks a cell the statistic leaves undefined (e.g. a block with no skip); it must be undefined on every
    # subsample too, or the interval of a number would silently be NaN
    if (np.isnan(values) != np.isnan(full)).any():
        k = int(np.argwhere(np.isnan(values) != np.isnan(full))[0][0])
        raise ValueError(f"Subsample {k} gave NaN where the full data did not (or the reverse): the statistic is "
                         "undefined on some images. Use larger subsamples (fewer repeats) or check the statistic.")
    repeats = values.shape[0]
    half = t_quantile(0.5 + level / 2, repeats - 1) * values.std(axis=0, ddof=1) / math.sqrt(repeats)
    return full - half, full + half


def covers(low, high, truth) -> np.ndarray:
    """Boolean array: where low <= truth <= high."""
    if (np.asarray(low) > np.asarray(high)).any():
        raise ValueError("low is above high somewhere: pass (low, high) in that order, as subsample_interval returns them.")
    return (np.asarray(low) <= truth) & (np.asarray(truth) <= np.asarray(high))


def statistic_interval(statistic, n: int, repeats: int = 8, level: float = 0.9, seed: int = 0):
    """Any statistic of n images, with the half-width of its `level` interval over disjoint subsamples.

    statistic: a function of a sorted int64 index array into the n images, returning a number or
    an array (e.g. an effect measured on those images only). It runs once on all n images and once
    on each of `repeats` disjoint subsamples (module docstring).
    Returns (full, half_width): the statistic on all images, and (high - low) / 2 of its interval.
    """
    parts = disjoint_subsamples(n, repeats, seed)
    full = np.asarray(statistic(np.arange(n)), dtype=np.float64)
    low, high = subsample_interval(full, [statistic(idx) for idx in parts], level)
    return (float(full) if full.ndim == 0 else full), ((high - low) / 2 if full.ndim else float((high - low) / 2))
