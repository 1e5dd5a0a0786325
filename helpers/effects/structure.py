"""F1's effects, defined once: statistics of similarity matrices, > 0 in the paper's direction.

Notebook 06 (within one model), notebook 07 (across models) and notebook 17's survival table
(helpers.survival, any similarity measure) all call these functions. Each reads only a matrix of
similarities (larger = more alike), so the same function serves linear CKA, Procrustes, RSA and mutual
k-NN. Shapes: a within-model matrix is (L, L) over one model's layers in order; a cross-model matrix is
(R, C): the ResNet's layers (stem, then its residual blocks) as rows, the ViT's blocks as columns.

    within one model
        off_diagonal(values)              mean similarity of two different layers
        first_last(values)                similarity of the first layer with the last
        uniformity_gap(vit, resnet)       F1.1  off_diagonal, ViT minus ResNet
        ends_gap(vit, resnet)             F1.2  first_last, ViT minus ResNet
        grid_score(vit, rows)             F1.3  stream-stream minus branch-stream similarity
        stage_score(resnet, rows)         F1.4  neighbours inside a stage minus neighbours across a boundary
        partition_score(values, stages)   (not a claim's effect) all pairs inside minus across stages
    across models
        cross_model_effects(values)       F1.5, F1.6, F1.7 from one (R, C) matrix
"""

from __future__ import annotations

import numpy as np

from helpers.guards import check_finite_array
from helpers.measures import spearman

QUARTER = 0.25                  # F1.5: "about the lowest quarter" of the ViT's layers
BRANCHES = ("attn", "mlp")      # F1.3: the sublayers that write into the ViT's residual stream


def _square(values, name: str = "values") -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or values.shape[0] != values.shape[1] or len(values) < 2:
        raise ValueError(f"{name} must be a square (L, L) similarity matrix of one model with L >= 2, got shape {values.shape}.")
    return _finite(values, name)


def _finite(values: np.ndarray, name: str) -> np.ndarray:
    """values, checked to hold no NaN or inf: a NaN made a mean NaN, and argmax read it as the best match."""
    return check_finite_array(values, name, "a similarity is finite. Compute the matrix again (helpers.compare, "
                              "helpers.measures) and check the layers' outputs.")


# ---------------------------------------------------------------------------------------------
# Within one model (notebook 06)

def off_diagonal(values) -> float:
    """Mean similarity of two different layers of one model: (L, L) -> float."""
    values = _square(values)
    return float(values[~np.eye(len(values), dtype=bool)].mean())


def first_last(values) -> float:
    """Similarity of the first layer with the last: (L, L) -> float."""
    return float(_square(values)[0, -1])


def uniformity_gap(vit, resnet) -> float:
    """F1.1, "a ViT is much more uniform": mean off-diagonal similarity, ViT (L, L) minus ResNet (L', L')."""
    return off_diagonal(vit) - off_diagonal(resnet)


def ends_gap(vit, resnet) -> float:
    """F1.2, "a ViT's lower and higher layers are similar, a ResNet's not": first-last similarity, ViT minus ResNet."""
    return first_last(vit) - first_last(resnet)


def branch_rows(rows) -> np.ndarray:
    """Which ViT sublayers are branches (attention output, MLP hidden): L names like 'b3.attn' -> (L,) bools."""
    return np.array([str(row).rsplit(".", 1)[-1] in BRANCHES for row in rows])


def grid_score(values, rows) -> float:
    """F1.3, "a clear grid": mean similarity of two different stream sublayers minus mean branch-stream similarity.

    values: (L, L) over a ViT's sublayers; rows: their L names (helpers.capture's "sublayers": 'b0.norm1',
    'b0.attn', ...). 0 when the branches look like the stream; > 0 when their rows and columns stand out."""
    values = _square(values)
    branch = branch_rows(rows)
    if len(branch) != len(values):
        raise ValueError(f"{len(branch)} layer names for a {values.shape} matrix: give one name per row.")
    if branch.all() or not branch.any() or (~branch).sum() < 2:
        raise ValueError("the grid score needs branch sublayers (names ending in .attn or .mlp) and at least two "
                         f"stream sublayers; got {list(rows)}.")
    stream = values[np.ix_(~branch, ~branch)]
    return float(stream[~np.eye(len(stream), dtype=bool)].mean() - values[np.ix_(branch, ~branch)].mean())


def stages_of(rows, shift: int = 0) -> np.ndarray:
    """The stage of each ResNet layer from its name: 'stem' -> 0, 'layer3.1' -> 3. rows: L names -> (L,) ints.

    shift=1 moves every stage boundary one layer down (a control for the partition score)."""
    stages = []
    for row in rows:
        if row == "stem":
            stages.append(0)
        elif isinstance(row, str) and row.startswith("layer") and row[5:].split(".")[0].isdigit():
            stages.append(int(row[5:].split(".")[0]))
        else:
            raise ValueError(f"layer {row!r} is not a ResNet layer name ('stem' or 'layerS.J', as helpers.capture names them).")
    return np.array([stages[min(i + shift, len(stages) - 1)] for i in range(len(stages))])


def stage_score(values, rows) -> float:
    """F1.4, "a ResNet forms stages": mean similarity of neighbouring layers inside a stage minus that of
    neighbouring layers across a stage boundary. Only neighbours, so both sides compare layers one step apart.

    values: (L, L) of one ResNet; rows: its L layer names in order (stem first, then layerS.J)."""
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


def partition_score(values, stages) -> float:
    """Mean similarity of different layers in one stage minus that of layers in different stages: (L, L), (L,) -> float.

    Not F1.4's effect: it rewards any representation that drifts with depth (pairs inside a stage are
    nearer in depth), which notebook 06 shows by moving every boundary (stages_of(rows, shift=1))."""
    values = _square(values)
    stages = np.asarray(stages)
    if stages.shape != (len(values),):
        raise ValueError(f"stages must hold one stage per layer, ({len(values)},) for a {values.shape} matrix, got shape "
                         f"{stages.shape}. Use stages_of(rows).")
    same = stages[:, None] == stages[None, :]
    inside = same & ~np.eye(len(values), dtype=bool)
    if not inside.any() or same.all():  # no pair inside a stage, or none across: the mean of none was NaN
        raise ValueError("the partition score needs two layers in one stage and layers in different stages; the stages "
                         f"given are {stages.tolist()}.")
    return float(values[inside].mean() - values[~same].mean())


# ---------------------------------------------------------------------------------------------
# Across models (notebook 07)

def matched_depth(values) -> np.ndarray:
    """Each row's best-matching column as a relative depth: (R, C) -> (R,) in [0, 1] (notebook 07's exercise 7.1)."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or values.shape[1] < 2:
        raise ValueError(f"values must be (ResNet layers, ViT blocks) with at least 2 columns, got shape {values.shape}.")
    return _finite(values, "values").argmax(axis=1) / (values.shape[1] - 1)


def climb(depth) -> float:
    """Spearman correlation of layer order with matched depth: (R,) -> float; 0 when every row picks the same column."""
    depth = np.asarray(depth, dtype=np.float64)
    if depth.ndim != 1 or len(depth) == 0:
        raise ValueError(f"depth must be the (R,) matched depths of matched_depth, got shape {depth.shape}.")
    if not np.isfinite(depth).all():  # NaN ranks were read as a climb
        raise ValueError("depth holds NaN or inf values: give the matched depths of matched_depth(values), each in [0, 1].")
    if np.ptp(depth) == 0:
        return 0.0  # no ranking to correlate: counted as no climb
    return spearman(np.arange(len(depth)), depth)


def cross_model_effects(values) -> dict:
    """F1.5, F1.6 and F1.7 from one cross-model similarity matrix: (ResNet layers, ViT blocks) -> {claim: float}.

    F1.5  "the ResNet's lower half matches the ViT's lowest quarter": 0.25 minus the mean matched relative
          ViT depth of the ResNet's lower half (the first ceil(R/2) rows);
    F1.6  "the best-matching ViT depth climbs with ResNet depth": the rank correlation of the two depths;
    F1.7  "the ViT's final third matches no ResNet layer": each ViT block's best match over the ResNet's
          layers, the lowest of the blocks before the final third (the last ceil(C/3) blocks) minus the
          highest of the final third.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or min(values.shape) < 2 or values.shape[1] < 3:
        raise ValueError(f"values must be (ResNet layers, ViT blocks), at least 2 rows and 3 columns, got shape {values.shape}.")
    depth = matched_depth(values)  # refuses NaN, which argmax and max would read as the best match
    lower_half = depth[: (len(depth) + 1) // 2]
    best_per_block = values.max(axis=0)
    third = -(-len(best_per_block) // 3)  # the final third of the ViT's blocks (2 of 6, 4 of 12)
    return {"F1.5": QUARTER - float(lower_half.mean()), "F1.6": climb(depth),
            "F1.7": float(best_per_block[:-third].min() - best_per_block[-third:].max())}
