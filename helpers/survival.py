"""F1's effects from a similarity matrix of ANY measure (notebook 17's survival table).

Notebooks 06 and 07 turn CKA matrices into one signed effect per claim (positive in the paper's
direction; helpers.verdicts). Notebook 17 asks whether each verdict survives a change of measure,
so it needs the same effects from a Procrustes, RSA or mutual k-NN matrix. The effects read only a
matrix of similarities (larger = more alike), and are defined once, in helpers.effects.structure,
which notebooks 06 and 07 call too; they are re-exported here for notebook 17:

    within one model, values (L, L):
        off_diagonal(values)            F1.1: mean similarity of two different layers (ViT minus ResNet)
        first_last(values)              F1.2: similarity of the first and the last layer (ViT minus ResNet)
        stage_score(values, rows)       F1.4: neighbours inside a ResNet stage minus neighbours across a boundary
    across models, values (ResNet layers, ViT blocks), rows = stem then residual blocks (notebook 07):
        cross_model_effects(values)     {"F1.5": ..., "F1.6": ..., "F1.7": ...}

and effect_with_interval(effect, full, parts) gives an effect on all images with the half-width of
its 90% interval over image subsamples (helpers.intervals), the noise the verdict rule needs.
F1.3 (06's grid score) needs the ViT's six sublayers per block, which notebook 17 does not capture
(36 layers per ViT: too slow for its budget).
"""

from __future__ import annotations

from helpers.effects.structure import (QUARTER, climb, cross_model_effects, ends_gap, first_last,  # noqa: F401
                                       matched_depth, off_diagonal, stage_score, stages_of, uniformity_gap)
from helpers.intervals import subsample_interval


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
