"""helpers.survival: notebook 17's effects are helpers.effects.structure's (one definition), with subsample intervals."""

import numpy as np
import pytest

from helpers import survival
from helpers.effects import structure
from helpers.intervals import subsample_interval


def test_survival_uses_the_one_definition_of_each_effect():
    for name in ("off_diagonal", "first_last", "stage_score", "stages_of", "matched_depth", "climb", "cross_model_effects"):
        assert getattr(survival, name) is getattr(structure, name), f"survival.{name} is a second definition"


def test_effect_with_interval_is_the_subsample_interval_of_the_effect():
    full = (np.array([[1.0, 0.5], [0.5, 1.0]]),)
    parts = [(np.array([[1.0, p], [p, 1.0]]),) for p in (0.4, 0.5, 0.65)]
    value, half = survival.effect_with_interval(survival.first_last, full, parts)
    low, high = subsample_interval(0.5, [0.4, 0.5, 0.65])
    assert value == pytest.approx(0.5) and half == pytest.approx((high - low) / 2)
    assert survival.effect_with_interval(survival.first_last, full, parts[:1]) == (0.5, None)


def test_effect_with_interval_passes_several_matrices():
    vit, resnet = np.full((3, 3), 0.9), np.eye(3)
    value, half = survival.effect_with_interval(survival.uniformity_gap, (vit, resnet), [(vit, resnet)] * 3)
    assert value == pytest.approx(0.9) and half == pytest.approx(0.0)
