"""F2's and F3's effects, defined once: attention distances (notebook 08) and head groups against a CNN (09).

Every function returns one signed number, > 0 in the paper's direction. The raw quantities come from
helpers.attention (mean attention distance per head, attention_distance_table) and from CKA of head groups
(helpers.compare.head_groups_cka, or notebook 09's per-subsample version of it); these functions only
turn them into a claim's effect. Shapes: a distance table is (blocks, heads) in pixels, one mean attention
distance per head; `uniform` is the distance of a head attending equally to every patch
(helpers.attention.uniform_attention_distance).

    thresholds(uniform)                      the course's local (60%) and global (80%) lines, px
    mix(table, uniform)                      F2.1  blocks 0-1 hold both a local and a global head
    all_global(table, uniform)               F2.2  every head of the last block is global
    farther(less, full)                      F2.3  less data: the heads of blocks 0-1 sit farther
    accuracy_drop(full, less)                F2.4  less data: test accuracy falls (points)
    head_groups(distances, window)           windows of heads sorted by distance (F3's groups)
    falls(group_distance, values)            F3.1  CKA with the CNN falls as the group's distance grows
    local_minus_global(group_distance, v)    F3.2  by how much: most local group minus most global
"""

from __future__ import annotations

import math

import numpy as np

from helpers.guards import check_finite_array, check_int
from helpers.measures import spearman

LOCAL_FRACTION = 0.6    # a head is local below 60% of the uniform distance (the course's definition)
GLOBAL_FRACTION = 0.8   # and global above 80% of it
LOW_BLOCKS = 2          # "the lowest blocks": blocks 0 and 1
Z90 = 1.6449            # normal quantile of a two-sided 90% interval


def _table(table, name: str = "table") -> np.ndarray:
    table = np.asarray(table, dtype=np.float64)
    if table.ndim != 2 or table.shape[0] < 1 or table.shape[1] < 1:
        raise ValueError(f"{name} must be a (blocks, heads) table of mean attention distances, got shape {table.shape}.")
    _refuse_non_finite(table, name)
    return table


def _refuse_non_finite(values: np.ndarray, name: str) -> None:
    check_finite_array(values, name, "compute it again (helpers.attention for distances, helpers.compare for CKA) and "
                       "check the model's outputs.")


def thresholds(uniform: float) -> tuple:
    """(local line, global line) in px: 60% and 80% of the uniform distance."""
    if not 0 < float(uniform) < math.inf:  # 0 put both lines at 0 px, and every head counted as global
        raise ValueError(f"uniform must be the uniform attention distance in px (> 0, helpers.attention."
                         f"uniform_attention_distance), got {uniform}.")
    return LOCAL_FRACTION * float(uniform), GLOBAL_FRACTION * float(uniform)


def mix(table, uniform: float) -> float:
    """F2.1, "the lowest blocks have a mix of local and global heads" (px): (blocks, heads) -> float.

    How far the lowest head of blocks 0-1 sits below the local line, or how far the highest sits above the
    global line, whichever is smaller: a mix needs both, so the weaker side decides."""
    low = _table(table)[:LOW_BLOCKS]
    local, global_ = thresholds(uniform)
    return float(min(local - low.min(), low.max() - global_))


def all_global(table, uniform: float) -> float:
    """F2.2, "in the higher blocks every head is global" (px): the last block's lowest head above the global line."""
    return float(_table(table)[-1].min() - thresholds(uniform)[1])


def farther(less, full) -> float:
    """F2.3, "with less data the lower blocks learn no local heads" (px): (blocks, heads) x 2 -> float.

    The mean distance of the heads of blocks 0-1 in the less-data model minus in the all-data model of the
    same seed. The mean rather than a count of local heads: it moves smoothly and needs no threshold."""
    return float(_table(less, "less")[:LOW_BLOCKS].mean() - _table(full, "full")[:LOW_BLOCKS].mean())


def accuracy_drop(full: float, less: float) -> float:
    """F2.4, "those less-data models perform much worse" (percentage points): accuracies as fractions 0-1."""
    for name, p in (("full", full), ("less", less)):
        if not 0 <= p <= 1:
            raise ValueError(f"{name} must be an accuracy between 0 and 1, got {p}.")
    return 100 * (float(full) - float(less))


def accuracy_drop_half_width(full: float, n_full: int, less: float, n_less: int) -> float:
    """Half-width (points) of the drop's 90% binomial interval, the two test sets taken as independent
    (conservative: on the same test images the two models' errors are correlated)."""
    accuracy_drop(full, less)  # both accuracies checked to be fractions
    for name, n in (("n_full", n_full), ("n_less", n_less)):  # NaN or 2.5 images gave a number
        check_int(n, name, 1, "n_full and n_less are the numbers of test images, e.g. card['test_images'].")
    return 100 * Z90 * math.sqrt(full * (1 - full) / n_full + less * (1 - less) / n_less)


def head_groups(distances, window: int) -> tuple:
    """Windows of `window` consecutive heads in order of mean distance, the most local first.

    distances: (heads,) px. Returns ({"heads a+b": [a, b], ...}, (groups,) mean distance of each group)."""
    distances = np.asarray(distances, dtype=np.float64)
    window = check_int(window, "window", 1, "Give how many heads each group holds.")
    if distances.ndim != 1 or not 1 <= window <= len(distances):
        raise ValueError(f"need (heads,) distances and 1 <= window <= heads; got shape {distances.shape}, window {window}.")
    _refuse_non_finite(distances, "distances")
    order = np.argsort(distances, kind="stable")
    groups, means = {}, []
    for start in range(len(order) - window + 1):
        members = [int(h) for h in order[start:start + window]]
        groups["heads " + "+".join(map(str, members))] = members
        means.append(float(np.mean(distances[members])))
    return groups, np.array(means)


def _groups(group_distance, values) -> tuple:
    group_distance = np.asarray(group_distance, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or group_distance.shape != (values.shape[0],) or len(group_distance) < 2 or values.shape[1] < 1:
        raise ValueError(f"need (groups,) distances and a (groups, layers) CKA matrix with >= 2 groups and >= 1 layer; "
                         f"got {group_distance.shape} and {values.shape}.")
    _refuse_non_finite(group_distance, "group_distance")
    _refuse_non_finite(values, "values")
    return group_distance, values.mean(axis=1)


def falls(group_distance, values) -> float:
    """F3.1, "CKA with the CNN's lower layers falls as the group's distance grows": (groups,), (groups, layers).

    Minus the Spearman correlation between the groups' mean distance and their CKA averaged over the layers:
    +1 when CKA falls at every step, 0 when it does not follow distance, -1 when it rises. (The course prints
    this effect, never the correlation itself, so one sign convention holds throughout.)"""
    distance, mean = _groups(group_distance, values)
    if np.ptp(distance) == 0 or np.ptp(mean) == 0:  # no ranking to correlate; spearman's own error spoke of arrays
        raise ValueError("every head group has the same mean distance, or the same mean CKA: whether CKA falls with "
                         "distance is undefined. Use groups of heads with different distances (head_groups).")
    return -spearman(distance, mean)


def local_minus_global(group_distance, values) -> float:
    """F3.2, "it falls by a large amount" (CKA): the most local group's mean CKA minus the most global group's.

    In CKA units, the paper's 0.35 (about 0.6 down to about 0.25; helpers.claims.SIZES)."""
    distance, mean = _groups(group_distance, values)
    return float(mean[np.argmin(distance)] - mean[np.argmax(distance)])
