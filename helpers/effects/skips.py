"""Effects of findings F5 and F6 (notebook 11): skip-to-branch norm ratios, and ViTs without one block's skips.

Each effect is one signed number per model (or per pair), > 0 in the paper's direction. The raw ratios come
from helpers.residuals (NormRatios for a ViT, per-image ResNet ratios); the CKA matrices from helpers.compare.
Every ratio effect is in log10 units (a margin of +0.1 is a factor 10**0.1 = 1.26).

    r = residuals.vit_norm_ratios(vit, batches(images, vit, 128))
    blocks, per_image = residuals.resnet_image_ratios(resnet, batches(images, resnet, 128))
    smallest_margin(r, per_image)        # F5.1
    phase(r), late_change(r)             # F5.2, F5.3
    partition_effect(noskip_cka, twin_cka, cut(labels, 3))   # F6.1
    accuracy_drop(twin_card, noskip_card)                    # F6.2 (points, half-width)

Every function that reads ratios takes `images`: an index array of the images to average over (None: all),
so that an effect is recomputed on image subsamples (helpers.intervals) without a second pass.
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np

from helpers.guards import check_int

BRANCHES = ("attn", "mlp")


def _two_rows(values, name: str, least: int = 1) -> np.ndarray:
    """values as a (2, blocks) array (row 0 attention, row 1 MLP) with at least `least` blocks."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or len(values) != 2 or values.shape[1] < least:
        raise ValueError(f"{name} must be (2, blocks) log10 ratios, row 0 attention and row 1 MLP, with at least {least} "
                         f"block(s); got shape {values.shape}. Use log_ratios(ratios, tokens).")
    return values


def depth(k: int) -> np.ndarray:
    """(k,) relative depths of k blocks: the middle of each block's share of the network, in (0, 1)."""
    k = check_int(k, "k", 1, "Give the number of blocks.")
    return (np.arange(k) + 0.5) / k


def log_ratios(ratios, tokens: str, images=None) -> np.ndarray:
    """(2, blocks) log10 norm ratios of the attention (row 0) and MLP (row 1) branches.

    ratios: helpers.residuals.NormRatios; tokens: "cls" or "spatial"; images: index array or None (all)."""
    return np.log10(np.stack([getattr(ratios, tokens)(branch, images) for branch in BRANCHES]))


def resnet_log(per_image: np.ndarray, images=None) -> np.ndarray:
    """(blocks,) log10 of the ResNet's mean ratio per block, over the images `images` (None: all).

    per_image: (n, blocks) from helpers.residuals.resnet_image_ratios. An untrained timm ResNet's branches add
    exactly zero (each block's last BatchNorm starts at weight 0), so its ratios are inf: the log is inf too."""
    per_image = np.asarray(per_image, dtype=np.float64)
    if per_image.ndim != 2 or per_image.shape[1] < 1:
        raise ValueError(f"per_image must be the (images, blocks) ratios of helpers.residuals.resnet_image_ratios, got "
                         f"shape {per_image.shape}.")
    chosen = per_image if images is None else per_image[np.asarray(images)]
    if len(chosen) == 0:  # the mean of no images was NaN
        raise ValueError(f"images selects none of the {len(per_image)} images: give at least one image index (None: all).")
    with np.errstate(divide="ignore"):
        return np.log10(chosen.mean(0))


def margins(vit_log: np.ndarray, resnet_logs: np.ndarray) -> np.ndarray:
    """(2, blocks) log10(ViT ratio / ResNet ratio) at each ViT sublayer, against the ResNet at the same depth.

    vit_log: (2, blocks) from log_ratios(.., "spatial"); resnet_logs: (k,) from resnet_log. The ResNet's value
    is interpolated between its blocks at the ViT sublayer's relative depth (both networks on 0..1)."""
    vit_log, resnet_logs = _two_rows(vit_log, "vit_log"), np.asarray(resnet_logs, dtype=np.float64)
    if resnet_logs.ndim != 1 or len(resnet_logs) == 0:
        raise ValueError(f"resnet_logs must be the (blocks,) log10 ratios of resnet_log, got shape {resnet_logs.shape}.")
    at_vit_depth = np.interp(depth(vit_log.shape[1]), depth(len(resnet_logs)), resnet_logs)
    return vit_log - at_vit_depth[None, :]


def smallest_margin(ratios, resnet_per_image, images=None) -> float:
    """F5.1, "the ViT's ratio is much higher than the ResNet's, throughout": the SMALLEST log10 margin of the ViT's
    spatial-token ratio over the ResNet's at the same depth, over the ViT's 2 x blocks sublayers.

    > 0 exactly when every ViT sublayer's ratio is above the ResNet's at that depth ("throughout"); a mean would
    let a wide margin in one block hide a tie in another. 10**effect is the factor at the closest sublayer.
    ratios: NormRatios of the ViT; resnet_per_image: (n, k) per-image ResNet ratios; images: index array or None."""
    return float(margins(log_ratios(ratios, "spatial", images), resnet_log(resnet_per_image, images)).min())


def mean_margin(ratios, resnet_per_image, images=None) -> float:
    """The mean of the same log10 margins over the ViT's sublayers (for the size; not the F5.1 effect)."""
    return float(margins(log_ratios(ratios, "spatial", images), resnet_log(resnet_per_image, images)).mean())


def phase_of(cls_log: np.ndarray, spatial_log: np.ndarray) -> float:
    """F5.2 from (2, blocks) log10 ratios: the CLS-over-spatial log ratio (mean of both branches) averaged over
    the first half of the blocks, and minus the same over the second half; the smaller of the two.

    > 0 only when both halves go the paper's way: early the CLS token is carried by the skip more than the
    spatial tokens (higher ratio), late it is changed more by the branches (lower ratio)."""
    cls_log, spatial_log = _two_rows(cls_log, "cls_log", 2), _two_rows(spatial_log, "spatial_log", 2)
    if cls_log.shape != spatial_log.shape:  # numpy would broadcast one block against every other
        raise ValueError(f"cls_log {cls_log.shape} and spatial_log {spatial_log.shape} must have the same blocks.")
    gap = (cls_log - spatial_log).mean(0)   # (blocks,)
    half = len(gap) // 2
    return float(min(gap[:half].mean(), -gap[half:].mean()))


def phase(ratios, images=None) -> float:
    """F5.2 of a ViT's NormRatios (phase_of its CLS and spatial log ratios)."""
    return phase_of(log_ratios(ratios, "cls", images), log_ratios(ratios, "spatial", images))


def late_change_of(cls_log: np.ndarray) -> float:
    """F5.3 from the CLS token's (2, blocks) log10 ratios (row 0 attention, row 1 MLP): the smaller of
    (its log ratio early minus late: > 0 when the CLS token changes less early than late) and
    (late, attention minus MLP: > 0 when the MLP branches change it more than the attention branches)."""
    c = _two_rows(cls_log, "cls_log", 2)  # one block left the early half empty: NaN
    half = c.shape[1] // 2
    return float(min(c[:, :half].mean() - c[:, half:].mean(), (c[0, half:] - c[1, half:]).mean()))


def late_change(ratios, images=None) -> float:
    """F5.3 of a ViT's NormRatios (late_change_of its CLS log ratios)."""
    return late_change_of(log_ratios(ratios, "cls", images))


def cut(labels: list, block: int) -> int:
    """Index of the first layer after block `block`'s removed skips: its attention output 'b{block}.attn'."""
    labels = list(labels)
    if f"b{block}.attn" not in labels:
        raise ValueError(f"No layer 'b{block}.attn' among the {len(labels)} sublayer labels ({labels[:3]} ...): give a "
                         "block the model has, and the labels of the 'sublayers' preset.")
    return labels.index(f"b{block}.attn")


def partition_score(values: np.ndarray, at: int) -> float:
    """Mean CKA within the two sides of layer index `at` (off the diagonal) minus mean CKA across them.

    values: (L, L) CKA matrix of one model's layers; layers [0, at) are one side, [at, L) the other.
    > 0 when the matrix splits into blocks before and after `at`."""
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    if values.ndim != 2 or values.shape != (n, n) or n < 3:  # 2 x 2 had no pair inside a side: NaN
        raise ValueError(f"values must be a square (L, L) CKA matrix with L >= 3, got shape {values.shape}.")
    at = check_int(at, "at", 1, "Give a layer index, e.g. cut(labels, block).")
    if not at < n:
        raise ValueError(f"the split {at} must leave layers on both sides of a {n} x {n} matrix.")
    side = np.arange(n) >= at
    within = (side[:, None] == side[None, :]) & ~np.eye(n, dtype=bool)
    across = side[:, None] != side[None, :]
    return float(values[within].mean() - values[across].mean())


def partition_effect(noskip: np.ndarray, twin: np.ndarray, at: int) -> float:
    """F6.1, "removing the skips of block i splits the representations before and after block i": the partition
    score at the split of the model without block i's skips minus that of its intact twin (same recipe), both
    (L, L) CKA matrices. > 0 when the model without skips is more partitioned there than the intact one."""
    if np.shape(noskip) != np.shape(twin):
        raise ValueError(f"noskip {np.shape(noskip)} and twin {np.shape(twin)} must be CKA matrices over the same layers: "
                         "the twin is the same recipe with its skips intact.")
    return partition_score(noskip, at) - partition_score(twin, at)


def accuracy_drop(twin: dict, noskip: dict, level: float = 0.9) -> tuple:
    """F6.2, "removing a middle block's skips costs about 4% accuracy": the intact twin's test accuracy minus the
    no-skip model's, in points (> 0 = a cost), with the half-width of its `level` binomial interval over the
    test images (the two models' errors counted as independent).

    twin, noskip: model cards with 'test_accuracy' (a fraction) and 'test_images' (a count). Returns (points, half)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be between 0 and 1 (0.9 for a 90% interval), got {level}.")
    (p, n), (q, m) = _card(twin, "twin"), _card(noskip, "noskip")
    z = NormalDist().inv_cdf(0.5 + level / 2)
    half = z * np.sqrt(p * (1 - p) / n + q * (1 - q) / m)
    return float(100 * (p - q)), float(100 * half)


def _card(card: dict, name: str) -> tuple:
    """(test accuracy, test images) of a model card, checked: a fraction 0-1 and a count >= 1."""
    if not isinstance(card, dict) or not {"test_accuracy", "test_images"} <= set(card):
        raise ValueError(f"{name} must be a model card with 'test_accuracy' and 'test_images' "
                         f"(helpers.models.lite_card(name)), got {card!r}.")
    if not 0 <= card["test_accuracy"] <= 1:  # 99 (percent) gave a drop of 400 points and a NaN half-width
        raise ValueError(f"{name}['test_accuracy'] must be a fraction between 0 and 1, got {card['test_accuracy']}.")
    return card["test_accuracy"], check_int(card["test_images"], f"{name}['test_images']", 1, "Give the number of test images.")
