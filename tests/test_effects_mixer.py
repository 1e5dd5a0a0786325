"""helpers.effects.mixer: F10 effects on small known matrices, with their sign conventions."""
import numpy as np
import pytest

from helpers.effects import mixer as fx


def blocks(first: int, total: int, inside: float = 0.9, across: float = 0.1) -> np.ndarray:
    """(total, total) CKA with two flat blocks: layers 0..first-1 and first..total-1."""
    group = np.arange(total) >= first
    values = np.where(group[:, None] == group[None, :], inside, across)
    np.fill_diagonal(values, 1.0)
    return values


def test_block_structure_finds_the_split_and_scores_contrast():
    s = fx.block_structure(blocks(2, 6))
    assert s["split"] == 2 and s["contrast"] == pytest.approx(0.8)
    assert fx.block_contrast(blocks(2, 6, inside=1.0, across=0.0)) == pytest.approx(1.0)


def test_a_uniform_matrix_scores_zero_and_ties_go_to_the_first_split():
    s = fx.block_structure(np.ones((5, 5)))
    assert s["split"] == 1 and s["contrast"] == pytest.approx(0.0)


def test_block_structure_rejects_a_non_square_matrix():
    with pytest.raises(ValueError):
        fx.block_structure(np.ones((3, 4)))


def test_larger_second_is_positive_for_a_smaller_first_block():
    assert fx.larger_second(blocks(2, 6)) == pytest.approx(2 / 6)       # 2 | 4: the paper's pattern
    assert fx.larger_second(blocks(5, 6)) == pytest.approx(-4 / 6)      # 5 | 1: the other way round
    assert fx.larger_second(blocks(3, 6)) == pytest.approx(0.0)


def test_same_depth_pairs_rows_with_columns_at_the_same_relative_depth():
    values = np.arange(6 * 8, dtype=float).reshape(6, 8)   # non-square: 6 rows, 8 columns
    picked = fx.same_depth(values)
    columns = [int(round((i + 1) / 6 * 8)) - 1 for i in range(6)]
    np.testing.assert_array_equal(picked, values[np.arange(6), columns])
    assert columns[-1] == 7                                # the last row meets the last column


def test_closer_to_vit_is_relative_cka_with_the_vit_minus_with_the_resnet():
    vit_ref, resnet_ref = np.full((6, 6), 0.8), np.full((8, 8), 0.5)
    mixer_vit, mixer_resnet = np.full((6, 6), 0.4), np.full((6, 8), 0.4)
    # relative: 0.4 / 0.8 = 0.5 with the ViT, 0.4 / 0.5 = 0.8 with the ResNet -> closer to the ResNet: < 0
    assert fx.closer_to_vit(mixer_vit, vit_ref, mixer_resnet, resnet_ref) == pytest.approx(-0.3)
    assert fx.closer_to_vit(mixer_resnet[:, :6] * 2, vit_ref, mixer_resnet, resnet_ref) == pytest.approx(0.2)


def test_bad_input_to_the_mixer_effects_is_named():
    """Each gave a number or a raw error before: a NaN made every split containing it lose (a wrong best split) or the
    contrast NaN, a scalar gave len()'s TypeError, 1-D and 3-D arrays an unpacking error, a matrix without rows a NaN
    relative CKA; and with twice as many rows as columns row 0 was paired with the LAST column (index -1)."""
    holed = blocks(2, 6)
    holed[0, 5] = np.nan
    checks = [(lambda: fx.block_structure(holed), "1 NaN or inf"),
              (lambda: fx.larger_second(0.5), r"square \(L, L\)"),
              (lambda: fx.same_depth(np.ones(4)), r"\(R, C\)"),
              (lambda: fx.same_depth(np.ones((2, 2, 2))), r"\(R, C\)"),
              (lambda: fx.relative_same_depth(np.ones((0, 6)), np.eye(6)), r"R, C >= 1"),
              (lambda: fx.relative_same_depth(np.full((6, 6), np.nan), np.eye(6)), "NaN")]
    for call, message in checks:
        with pytest.raises(ValueError, match=message):
            call()
    np.testing.assert_array_equal(fx.same_depth(np.tile([0.0, 1.0], (4, 1))), [0.0, 0.0, 1.0, 1.0])
