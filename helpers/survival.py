"""F1's effects computed from a similarity matrix of ANY measure (notebook 17's survival table).

Notebooks 06 and 07 turn CKA matrices into one signed effect per claim (positive in the paper's
direction; helpers.verdicts). Notebook 17 asks whether each verdict survives a change of measure,
so it needs the same effects from a Procrustes, RSA or mutual k-NN matrix. The effects read only a
matrix of similarities (larger = more alike), so each is written once here for every measure:

    within one model, values (L, L):
        off_diagonal(values)            F1.1: mean similarity of two different layers (ViT minus ResNet)
        first_last(values)              F1.2: similarity of the first and the last layer (ViT minus ResNet)
        stage_score(values, rows)       F1.4: neighbours inside a ResNet stage minus neighbours across a boundary
    across models, values (ResNet layers, ViT blocks), rows = stem then residual blocks (notebook 07):
        cross_model_effects(values)     {"F1.5": ..., "F1.6": ..., "F1.7": ...}

and effect_with_interval(effect, full, parts) gives an effect on all images with the half-width of
its 90% interval over image subsamples (helpers.intervals), the noise the verdict rule needs.

The definitions are notebook 06's and 07's (their markdown states them); they are copied here, not
imported, because those notebooks define them in cells. F1.3 (06's grid score) needs the ViT's six
sublayers per block, which notebook 17 does not capture (36 layers per ViT: too slow for its budget).
"""

from __future__ import annotations

import numpy as np

from helpers.intervals import subsample_interval
from helpers.measures import spearman

QUARTER = 0.25  # F1.5: "about the lowest quarter" of the ViT (notebook 07)


def _square(values, name: str = "values") -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or values.shape[0] != values.shape[1] or len(values) < 2:
        raise ValueError(f"{name} must be a square (L, L) similarity matrix of one model with L >= 2, got shape {values.shape}.")
    return values


def off_diagonal(values) -> float:
    """Mean similarity of two different layers of one model: (L, L) -> float (F1.1 compares two models' values)."""
    values = _square(values)
    return float(values[~np.eye(len(values), dtype=bool)].mean())


def first_last(values) -> float:
    """Similarity of the first layer with the last: (L, L) -> float (F1.2)."""
    return float(_square(values)[0, -1])


def stages_of(rows) -> np.ndarray:
    """The stage of each ResNet layer from its name: 'stem' -> 0, 'layer3.1' -> 3. rows: L names -> (L,) ints."""
    stages = []
    for row in rows:
        if row == "stem":
            stages.append(0)
        elif row.startswith("layer") and row[5:].split(".")[0].isdigit():
            stages.append(int(row[5:].split(".")[0]))
        else:
            raise ValueError(f"layer {row!r} is not a ResNet layer name ('stem' or 'layerS.J', as helpers.capture names them).")
    return np.array(stages)


def stage_score(values, rows) -> float:
    """F1.4: mean similarity of neighbouring layers inside a stage minus that of neighbours across a stage boundary.

    values: (L, L) of one ResNet; rows: its L layer names in order (stem first, then layerS.J).
    """
    values = _square(values)
    stage = stages_of(rows)
    if len(stage) != len(values):
        raise ValueError(f"{len(rows)} layer names for a {values.shape} matrix: give one name per row.")
    inside = stage[:-1] == stage[1:]
    if inside.all() or not inside.any():
        raise ValueError("the stage score needs neighbours both inside a stage and across a boundary; "
                         f"the stages given are {stage.tolist()}.")
    neighbours = np.diag(values, 1)  # layer i with layer i + 1
    return float(neighbours[inside].mean() - neighbours[~inside].mean())


def matched_depth(values) -> np.ndarray:
    """Each row's best-matching column as a relative depth: (R, C) -> (R,) in [0, 1] (notebook 07's exercise 7.1)."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or values.shape[1] < 2:
        raise ValueError(f"values must be (ResNet layers, ViT blocks) with at least 2 columns, got shape {values.shape}.")
    return values.argmax(axis=1) / (values.shape[1] - 1)


def climb(depth) -> float:
    """Spearman correlation of layer order with matched depth (F1.6); 0 when every row picks the same column."""
    depth = np.asarray(depth, dtype=np.float64)
    if np.ptp(depth) == 0:
        return 0.0  # no ranking to correlate (notebook 07 counts it as 0)
    return spearman(np.arange(len(depth)), depth)


def cross_model_effects(values) -> dict:
    """F1.5, F1.6 and F1.7 from one cross-model similarity matrix: (ResNet layers, ViT blocks) -> {claim: float}.

    F1.5  0.25 minus the mean matched relative ViT depth of the ResNet's lower half (the first ceil(R/2) rows);
    F1.6  the rank correlation of matched ViT depth with ResNet depth;
    F1.7  each ViT block's best match over the ResNet's layers: the lowest of the blocks before the final
          third (the last ceil(C/3) blocks) minus the highest of the final third.
    All positive in the paper's direction, as in notebook 07.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or min(values.shape) < 2 or values.shape[1] < 3:
        raise ValueError(f"values must be (ResNet layers, ViT blocks), at least 2 rows and 3 columns, got shape {values.shape}.")
    depth = matched_depth(values)
    lower_half = depth[: (len(depth) + 1) // 2]
    best_per_block = values.max(axis=0)
    third = -(-len(best_per_block) // 3)
    return {"F1.5": QUARTER - float(lower_half.mean()), "F1.6": climb(depth),
            "F1.7": float(best_per_block[:-third].min() - best_per_block[-third:].max())}


def effect_with_interval(effect, full, parts) -> tuple:
    """An effect on all images and the half-width of its 90% interval over image subsamples.

    effect: a function of one or more matrices, returning a float; full: a tuple of its arguments on all
    images; parts: a list of such tuples, one per subsample. Returns (value, half-width), half-width None
    with fewer than two subsamples.
    """
    value = float(effect(*full))
    if len(parts) < 2:
        return value, None
    low, high = subsample_interval(value, [effect(*p) for p in parts])
    return value, float(high - low) / 2
