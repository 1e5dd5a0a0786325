"""Effects of F8 (linear probes, notebook 13) and F9 (data scale, notebook 14): one signed number per run.

Each function states its effect in words; > 0 is the paper's direction, except for the sameness claims
(F8.2, F8.3, F8.4, F9.1: helpers.claims.SAMENESS), whose effect is a difference the paper says is about 0.
Accuracies are fractions (0.95, not 95 %), so an effect of 0.30 is 30 points of accuracy.
The raw quantities come from helpers.probes (probe accuracies) and helpers.compare (CKA); these functions
only combine them, so the notebook, its floor draws and its image-subsample intervals share one definition.
"""

from __future__ import annotations

import numpy as np


def _fractions(value, name: str) -> np.ndarray:
    """Probe accuracies as a float array, checked to be fractions 0-1 (95 gave an effect 100 times too large, NaN a NaN)."""
    values = np.asarray(value, dtype=np.float64)
    fraction = (values >= 0) & (values <= 1)
    if not fraction.all():
        raise ValueError(f"{name} must be probe accuracy as a fraction between 0 and 1 (0.95, not 95), got "
                         f"{values[~fraction].ravel()[0]}{'' if values.ndim == 0 else ' among its values'}.")
    return values


# ---------------------------------------------------------------------------------------------
# F8: linear probes on tokens and aggregates (notebook 13), at the last block

def tokens_behind(cls_tokens: float, other_tokens) -> float:
    """F8.1: how far the CLS model's spatial tokens probe below the other models' (last block).

    cls_tokens: the CLS-token ViT's per-token probe accuracy (mean over its spatial tokens);
    other_tokens: (m,) the same accuracy of the models whose tokens the paper says probe well (the GAP ViT,
    the ResNets). Effect = the lowest of them minus the CLS model's: > 0 when even the weakest of them is
    ahead, the paper's direction."""
    others = _fractions(other_tokens, "other_tokens").ravel()
    if others.size == 0:
        raise ValueError("tokens_behind needs at least one other model's per-token accuracy.")
    return float(others.min() - float(_fractions(cls_tokens, "cls_tokens")))


def native_alike(cls_token: float, gap_pooled: float) -> float:
    """F8.2 (sameness): the CLS model read at its CLS token minus the GAP model read at its pooled tokens.

    Two probe accuracies at the last block; the paper says they are alike, so the claim holds when this
    difference is within noise (either sign)."""
    return float(_fractions(cls_token, "cls_token")) - float(_fractions(gap_pooled, "gap_pooled"))


def pooled_rise(pooled_last: float, pooled_before: float) -> float:
    """F8.3 (sameness): the rise of the CLS model's pooled-token probe over its last block.

    pooled_last, pooled_before: the probe accuracy of the CLS model's tokens averaged (GAP except CLS) at the
    last block and at the block before. The paper says it plateaus, i.e. this rise is about 0."""
    return float(_fractions(pooled_last, "pooled_last")) - float(_fractions(pooled_before, "pooled_before"))


def first_token_gap(first_token: float, pooled: float) -> float:
    """F8.4 (sameness): the GAP model's first token minus its pooled tokens, probe accuracy at the last block.

    The paper says the first token nearly matches the pooled tokens: about 0."""
    return float(_fractions(first_token, "first_token")) - float(_fractions(pooled, "pooled"))


# ---------------------------------------------------------------------------------------------
# F9: data scale (notebook 14). A "gap" is the seed reference's CKA minus the model's, per block (notebook
# 14's exercise 14.1): > 0 when the model is less similar to the 100% model than a second 100% seed is.

def lower_block_difference(gaps, lower: slice) -> np.ndarray:
    """F9.1 (sameness): the 3% model's CKA with the 100% model minus the seed reference's, lower blocks.

    gaps: (..., blocks) gap to the seed reference per block (rows: all images, then each image subsample);
    lower: the lower blocks. Returns (...,): minus the mean gap over the lower blocks; about 0 when the 3%
    model is as close as a second seed (the paper's "very similar"), < 0 when it falls short."""
    return -_lower(gaps, lower).mean(-1)


def top_minus_lower(gaps, lower: slice) -> np.ndarray:
    """F9.2: how much further the 3% model falls short at the last block than in the lower blocks.

    gaps: (..., blocks) as in lower_block_difference. Returns (...,): last-block gap minus the mean
    lower-block gap; > 0 when the higher layers are further from the 100% model (the paper's "need more data")."""
    lower_mean = _lower(gaps, lower).mean(-1)  # checks gaps first
    return np.asarray(gaps, dtype=np.float64)[..., -1] - lower_mean


def _lower(gaps, lower: slice) -> np.ndarray:
    """gaps[..., lower], checked to hold at least one block (an empty slice gave a NaN mean and a warning)."""
    gaps = np.asarray(gaps, dtype=np.float64)
    if gaps.ndim < 1:
        raise ValueError(f"gaps must be (..., blocks), one gap per block, got shape {gaps.shape}.")
    if not isinstance(lower, slice) and np.ndim(lower) == 0:  # an int picked one block and the mean ran over the rows
        raise ValueError(f"lower must select blocks, a slice such as slice(0, 3) or a list of block indices, got {lower!r}.")
    chosen = gaps[..., lower]
    if chosen.shape[-1] == 0:
        raise ValueError(f"lower={lower} selects none of the {gaps.shape[-1]} blocks: give the lower blocks, e.g. slice(0, 3).")
    return chosen


def probe_gain(more_data, less_data) -> np.ndarray:
    """F9.4: the probe accuracy of the model trained on more data minus the one trained on less.

    more_data, less_data: the same shape (a mean 10-shot probe accuracy over the middle blocks, per draw of
    the shots or per image subsample). > 0: more data gives stronger intermediate representations. A fraction:
    0.30 is the paper's 30 points."""
    more, less = _fractions(more_data, "more_data"), _fractions(less_data, "less_data")
    if more.shape != less.shape:  # numpy would broadcast one model's single value against the other's draws
        raise ValueError(f"more_data {more.shape} and less_data {less.shape} must have the same shape: one accuracy per "
                         "draw (or subsample) for each model.")
    return more - less
