"""Effects of F10 (the MLP-Mixer, notebook 15): one signed number per Mixer, > 0 in the paper's direction.

All functions read CKA matrices (numpy arrays); helpers.compare or notebook 15's joint pass computes them.
The block-structure score is the one exercise 15.1 asks a learner to write; the verdicts use this version.
"""

from __future__ import annotations

import numpy as np

from helpers.guards import check_finite_array


def _finite(values, name: str) -> np.ndarray:
    """values as a float array with no NaN or inf (a NaN lost every comparison of splits, or made a mean NaN)."""
    return check_finite_array(values, name, "CKA is finite. Compute the matrix again (helpers.compare) and check the "
                              "layers' outputs.")


def block_structure(values) -> dict:
    """The best split of a within-model CKA matrix into two consecutive groups of layers.

    values: (L, L) CKA between layers in depth order, L >= 2. For each split k = 1 .. L-1 (first group
    0 .. k-1): within = mean CKA over pairs of *different* layers in the same group, between = mean CKA over
    pairs with one layer in each group, contrast = within - between. Returns {"split", "contrast", "within",
    "between"} of the split with the largest contrast; ties go to the smallest k. A uniform matrix scores 0
    (split 1), two perfectly separate blocks score 1."""
    values = _finite(values, "values")
    L = len(values) if values.ndim else 0
    if values.shape != (L, L) or L < 2:
        raise ValueError(f"block_structure needs a square (L, L) matrix with L >= 2, got shape {values.shape}.")
    different = ~np.eye(L, dtype=bool)
    best = None
    for k in range(1, L):
        second = np.arange(L) >= k
        same = second[:, None] == second[None, :]
        within, between = values[same & different].mean(), values[~same].mean()
        if best is None or within - between > best["contrast"]:
            best = {"split": k, "contrast": float(within - between), "within": float(within), "between": float(between)}
    return best


def block_contrast(values) -> float:
    """F10.1: how block-like a model is: the contrast (within minus between) of its best two-group split.

    values: (L, L) within-model CKA. > 0: layers form blocks, high CKA within, lower between."""
    return block_structure(values)["contrast"]


def larger_second(values) -> float:
    """F10.2: how much larger the second group of the best split is than the first, as a share of the layers.

    values: (L, L) within-model CKA. (L - 2k) / L for the best split k: > 0 when the first block is the
    smaller one (the paper's "a smaller first block, then a larger one"), -1 < effect < 1."""
    split = block_structure(values)["split"]  # checks values first
    L = len(values)
    return (L - 2 * split) / L


def same_depth(values) -> np.ndarray:
    """(R,) CKA of each row layer with the column layer at the nearest relative depth.

    values: (R, C) cross-model CKA, rows and columns in depth order. Row i (depth (i+1)/R) is paired with
    column round((i+1)/R * C) - 1, at least column 0."""
    values = _finite(values, "values")
    if values.ndim != 2 or min(values.shape) < 1:
        raise ValueError(f"values must be an (R, C) cross-model CKA matrix with R, C >= 1, got shape {values.shape}.")
    rows, cols = values.shape
    # at least column 0: with R >= 2C, round() gave 0 for row 0 and index -1 read the LAST column
    return np.array([values[i, max(int(round((i + 1) / rows * cols)) - 1, 0)] for i in range(rows)])


def relative_same_depth(cross, reference) -> float:
    """Mean same-depth CKA of a model with another, divided by the other model's against its own second seed.

    cross: (R, C) the model (rows) against the other model (columns); reference: (C', C'') the other model
    against a second seed of it (how close "the same model" comes: a reference, not a bound). 1 = as close as
    a second seed; it can exceed 1."""
    scale = same_depth(reference).mean()
    if not scale > 0:  # a reference of 0 gave inf
        raise ValueError(f"the reference's mean same-depth CKA is {scale}: a second seed must come out similar (> 0) "
                         "to scale by it. Check that `reference` is the model against its own second seed.")
    return float(same_depth(cross).mean() / scale)


def closer_to_vit(mixer_vit, vit_reference, mixer_resnet, resnet_reference) -> float:
    """F10.4: the Mixer's relative same-depth CKA with the ViT minus with the ResNet.

    mixer_vit (R, C_vit), mixer_resnet (R, C_resnet): the Mixer's blocks against each model's blocks;
    vit_reference, resnet_reference: each model against its second seed. > 0: the Mixer is closer to the
    ViT than to the ResNet, each measured against what a second seed of that model reaches."""
    return relative_same_depth(mixer_vit, vit_reference) - relative_same_depth(mixer_resnet, resnet_reference)
