"""helpers.survival: F1's effects from a similarity matrix of any measure, on tiny hand-checked cases."""

import numpy as np
import pytest

from helpers import survival
from helpers.intervals import subsample_interval


def test_within_model_effects_by_hand():
    values = np.array([[1.0, 0.8, 0.2],
                       [0.8, 1.0, 0.6],
                       [0.2, 0.6, 1.0]])
    assert survival.off_diagonal(values) == pytest.approx((0.8 + 0.2 + 0.6) * 2 / 6)
    assert survival.first_last(values) == pytest.approx(0.2)


def test_stage_score_reads_stage_boundaries_from_names():
    rows = ["stem", "layer1.0", "layer1.1", "layer2.0", "layer2.1"]
    assert survival.stages_of(rows).tolist() == [0, 1, 1, 2, 2]
    values = np.eye(5)
    values[1, 2] = values[2, 1] = 0.9  # inside stage 1
    values[3, 4] = values[4, 3] = 0.7  # inside stage 2
    values[0, 1] = values[1, 0] = 0.3  # stem -> stage 1
    values[2, 3] = values[3, 2] = 0.1  # stage 1 -> stage 2
    assert survival.stage_score(values, rows) == pytest.approx((0.9 + 0.7) / 2 - (0.3 + 0.1) / 2)
    with pytest.raises(ValueError, match="ResNet layer name"):
        survival.stages_of(["stem", "block0"])
    with pytest.raises(ValueError, match="one name per row"):
        survival.stage_score(values, rows[:4])


def test_cross_model_effects_of_a_diagonal_and_of_its_mirror():
    # 4 ResNet layers, 4 ViT blocks: the diagonal is the paper's picture in miniature
    diagonal = np.eye(4) + 0.1
    effects = survival.cross_model_effects(diagonal)
    assert survival.matched_depth(diagonal).tolist() == pytest.approx([0, 1 / 3, 2 / 3, 1])
    assert effects["F1.5"] == pytest.approx(0.25 - (0 + 1 / 3) / 2)   # lower half: rows 0 and 1
    assert effects["F1.6"] == pytest.approx(1.0)                      # the match climbs
    assert effects["F1.7"] == pytest.approx(0.0)                      # every block's best is 1.1
    mirrored = survival.cross_model_effects(diagonal[:, ::-1])
    assert mirrored["F1.5"] == pytest.approx(0.25 - (1 + 2 / 3) / 2)
    assert mirrored["F1.6"] == pytest.approx(-1.0)


def test_f17_is_positive_only_when_the_final_third_matches_worse_than_every_earlier_block():
    values = np.array([[0.9, 0.8, 0.7, 0.4, 0.3, 0.2],
                       [0.5, 0.6, 0.5, 0.3, 0.2, 0.1]])
    assert survival.cross_model_effects(values)["F1.7"] == pytest.approx(0.4 - 0.3)  # blocks 4, 5 are the final third; block 3 the weakest before
    values[0, 5] = 0.75
    assert survival.cross_model_effects(values)["F1.7"] == pytest.approx(0.4 - 0.75)


def test_no_climb_when_every_row_picks_the_same_block():
    assert survival.climb([0.2, 0.2, 0.2]) == 0.0
    assert survival.climb([0.0, 0.5, 0.5, 1.0]) == pytest.approx(np.corrcoef([1, 2, 3, 4], [1, 2.5, 2.5, 4])[0, 1])


def test_effect_with_interval_is_the_subsample_interval_of_the_effect():
    full = (np.array([[1.0, 0.5], [0.5, 1.0]]),)
    parts = [(np.array([[1.0, p], [p, 1.0]]),) for p in (0.4, 0.5, 0.65)]
    value, half = survival.effect_with_interval(survival.first_last, full, parts)
    low, high = subsample_interval(0.5, [0.4, 0.5, 0.65])
    assert value == pytest.approx(0.5) and half == pytest.approx((high - low) / 2)
    assert survival.effect_with_interval(survival.first_last, full, parts[:1]) == (0.5, None)


def test_bad_shapes_say_what_is_expected():
    with pytest.raises(ValueError, match="square"):
        survival.off_diagonal(np.ones((2, 3)))
    with pytest.raises(ValueError, match="ResNet layers, ViT blocks"):
        survival.cross_model_effects(np.ones((3, 2)))
