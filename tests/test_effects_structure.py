"""helpers.effects.structure: F1's effects on small hand-checked matrices, each signed > 0 in the paper's direction."""

import numpy as np
import pytest

from helpers.effects import structure


def test_within_model_effects_by_hand():
    values = np.array([[1.0, 0.8, 0.2],
                       [0.8, 1.0, 0.6],
                       [0.2, 0.6, 1.0]])
    assert structure.off_diagonal(values) == pytest.approx((0.8 + 0.2 + 0.6) * 2 / 6)
    assert structure.first_last(values) == pytest.approx(0.2)


def test_f11_f12_are_positive_when_the_vit_is_the_more_uniform_model():
    uniform = np.full((4, 4), 0.9) + 0.1 * np.eye(4)               # every layer alike
    staged = np.array([[1.0, 0.5, 0.2, 0.1],
                       [0.5, 1.0, 0.5, 0.2],
                       [0.2, 0.5, 1.0, 0.5],
                       [0.1, 0.2, 0.5, 1.0]])
    assert structure.uniformity_gap(uniform, staged) == pytest.approx(0.9 - (0.5 * 3 + 0.2 * 2 + 0.1) / 6)
    assert structure.ends_gap(uniform, staged) == pytest.approx(0.9 - 0.1)
    assert structure.uniformity_gap(staged, uniform) < 0 and structure.ends_gap(staged, uniform) < 0  # sign flips


def test_grid_score_reads_branches_from_names():
    rows = ["b0.norm1", "b0.attn", "b0.resid", "b0.mlp", "b0.out"]
    values = np.full((5, 5), 0.9)
    np.fill_diagonal(values, 1.0)
    branch = [1, 3]
    values[branch, :] = values[:, branch] = 0.3  # the branches' lines stand out
    values[1, 1] = values[3, 3] = 1.0
    assert structure.branch_rows(rows).tolist() == [False, True, False, True, False]
    assert structure.grid_score(values, rows) == pytest.approx(0.9 - 0.3)
    assert structure.grid_score(np.full((5, 5), 0.9), rows) == pytest.approx(0.0)  # no grid
    with pytest.raises(ValueError, match="branch sublayers"):
        structure.grid_score(values, ["a", "b", "c", "d", "e"])
    with pytest.raises(ValueError, match="one name per row"):
        structure.grid_score(values, rows[:4])


def test_stage_score_reads_stage_boundaries_from_names():
    rows = ["stem", "layer1.0", "layer1.1", "layer2.0", "layer2.1"]
    assert structure.stages_of(rows).tolist() == [0, 1, 1, 2, 2]
    assert structure.stages_of(rows, shift=1).tolist() == [1, 1, 2, 2, 2]
    values = np.eye(5)
    values[1, 2] = values[2, 1] = 0.9  # inside stage 1
    values[3, 4] = values[4, 3] = 0.7  # inside stage 2
    values[0, 1] = values[1, 0] = 0.3  # stem -> stage 1
    values[2, 3] = values[3, 2] = 0.1  # stage 1 -> stage 2
    assert structure.stage_score(values, rows) == pytest.approx((0.9 + 0.7) / 2 - (0.3 + 0.1) / 2)
    with pytest.raises(ValueError, match="ResNet layer name"):
        structure.stages_of(["stem", "block0"])
    with pytest.raises(ValueError, match="one name per row"):
        structure.stage_score(values, rows[:4])


def test_stage_score_is_zero_for_a_smooth_drift_where_the_partition_score_is_not():
    rows = ["stem", "layer1.0", "layer1.1", "layer2.0", "layer2.1", "layer3.0", "layer3.1"]
    depth = np.arange(len(rows))
    drift = 1.0 - 0.1 * np.abs(depth[:, None] - depth[None, :])  # the same step everywhere, no stages
    assert structure.stage_score(drift, rows) == pytest.approx(0.0)
    assert structure.partition_score(drift, structure.stages_of(rows)) > 0


def test_cross_model_effects_of_a_diagonal_and_of_its_mirror():
    diagonal = np.eye(4) + 0.1  # 4 ResNet layers, 4 ViT blocks: the paper's picture in miniature
    effects = structure.cross_model_effects(diagonal)
    assert structure.matched_depth(diagonal).tolist() == pytest.approx([0, 1 / 3, 2 / 3, 1])
    assert effects["F1.5"] == pytest.approx(0.25 - (0 + 1 / 3) / 2)   # lower half: rows 0 and 1
    assert effects["F1.6"] == pytest.approx(1.0)                      # the match climbs
    assert effects["F1.7"] == pytest.approx(0.0)                      # every block's best is 1.1
    mirrored = structure.cross_model_effects(diagonal[:, ::-1])
    assert mirrored["F1.5"] == pytest.approx(0.25 - (1 + 2 / 3) / 2)
    assert mirrored["F1.6"] == pytest.approx(-1.0)


def test_f17_is_positive_only_when_the_final_third_matches_worse_than_every_earlier_block():
    values = np.array([[0.9, 0.8, 0.7, 0.4, 0.3, 0.2],
                       [0.5, 0.6, 0.5, 0.3, 0.2, 0.1]])
    assert structure.cross_model_effects(values)["F1.7"] == pytest.approx(0.4 - 0.3)  # blocks 4, 5: the final third
    values[0, 5] = 0.75
    assert structure.cross_model_effects(values)["F1.7"] == pytest.approx(0.4 - 0.75)


def test_no_climb_when_every_row_picks_the_same_block_and_ties_share_ranks():
    assert structure.climb([0.2, 0.2, 0.2]) == 0.0
    assert structure.climb([0.0, 0.5, 0.5, 1.0]) == pytest.approx(np.corrcoef([1, 2, 3, 4], [1, 2.5, 2.5, 4])[0, 1])


def test_bad_shapes_say_what_is_expected():
    with pytest.raises(ValueError, match="square"):
        structure.off_diagonal(np.ones((2, 3)))
    with pytest.raises(ValueError, match="ResNet layers, ViT blocks"):
        structure.cross_model_effects(np.ones((3, 2)))


def test_bad_input_to_the_structure_effects_is_named():
    """Each gave a number or a raw numpy error before: a NaN similarity a NaN mean, or argmax read it as the best match
    (F1.5, F1.6 computed around it); stages of the wrong length numpy's broadcast error, one stage (or one layer per
    stage) a NaN partition score; a layer name that is not a string AttributeError."""
    holed = np.array([[np.nan, 0.5, 0.2], [0.1, 0.5, 0.3], [0.2, 0.3, 0.9]])
    checks = [(lambda: structure.cross_model_effects(holed), "1 NaN or inf"),
              (lambda: structure.matched_depth(holed), "1 NaN or inf"),
              (lambda: structure.off_diagonal(holed), "1 NaN or inf"),
              (lambda: structure.climb([0.0, np.nan, 1.0]), "NaN or inf"),
              (lambda: structure.partition_score(np.eye(4), [0, 1]), "one stage per layer"),
              (lambda: structure.partition_score(np.eye(4), [1, 1, 1, 1]), "layers in different stages"),
              (lambda: structure.partition_score(np.eye(4), [0, 1, 2, 3]), "two layers in one stage"),
              (lambda: structure.stages_of(["stem", 1]), "not a ResNet layer name")]
    for call, message in checks:
        with pytest.raises(ValueError, match=message):
            call()
