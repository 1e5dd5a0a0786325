"""helpers.effects.skips: the F5/F6 effects on small synthetic ratios, matrices and model cards (known answers, signs)."""

import numpy as np
import pytest

from helpers.effects import skips


class Ratios:
    """Stands in for helpers.residuals.NormRatios: per-image (n, blocks) ratios of the CLS and spatial tokens."""

    def __init__(self, cls: dict, spatial: dict):
        self.per = {"cls": cls, "spatial": spatial}

    def _mean(self, tokens, branch, images):
        values = np.asarray(self.per[tokens][branch], dtype=np.float64)
        return values.mean(0) if images is None else values[np.asarray(images)].mean(0)

    def cls(self, branch, images=None):
        return self._mean("cls", branch, images)

    def spatial(self, branch, images=None):
        return self._mean("spatial", branch, images)


def constant(value, n=4, blocks=6):
    return np.full((n, blocks), float(value))


def test_depth_is_the_middle_of_each_share():
    assert np.allclose(skips.depth(4), [0.125, 0.375, 0.625, 0.875])


def test_smallest_margin_is_the_log10_factor_at_the_closest_sublayer():
    vit = Ratios({}, {"attn": constant(100.0), "mlp": constant(1000.0)})
    resnet = np.full((4, 8), 10.0)
    assert skips.smallest_margin(vit, resnet) == pytest.approx(1.0)     # attention: 100 against 10
    assert skips.mean_margin(vit, resnet) == pytest.approx(1.5)         # attention 1, MLP 2


def test_smallest_margin_is_negative_when_one_sublayer_is_below_the_resnet():
    spatial = constant(100.0)
    spatial[:, 2] = 5.0                                                  # one block's attention below the ResNet's 10
    vit = Ratios({}, {"attn": spatial, "mlp": constant(100.0)})
    assert skips.smallest_margin(vit, np.full((4, 8), 10.0)) == pytest.approx(np.log10(0.5))


def test_the_resnet_is_read_at_the_vit_sublayer_depth():
    vit = Ratios({}, {"attn": constant(1.0, blocks=2), "mlp": constant(1.0, blocks=2)})
    resnet = np.tile([1.0, 10.0, 100.0, 1000.0], (3, 1))                # log10 0, 1, 2, 3 at depths 1/8 .. 7/8
    logs = skips.margins(skips.log_ratios(vit, "spatial"), skips.resnet_log(resnet))
    # ViT blocks at depths 1/4 and 3/4: the ResNet's log there is 0.5 and 2.5 (linear between its blocks)
    assert np.allclose(logs, [[-0.5, -2.5], [-0.5, -2.5]])


def test_an_untrained_resnet_branch_that_adds_zero_gives_minus_infinity():
    vit = Ratios({}, {"attn": constant(10.0), "mlp": constant(10.0)})
    assert skips.smallest_margin(vit, np.full((4, 8), np.inf)) == -np.inf


def test_effects_read_only_the_images_they_are_given():
    spatial = constant(100.0)
    spatial[2:] = 1000.0                                                 # images 2 and 3 have a larger ratio
    vit = Ratios({}, {"attn": spatial, "mlp": spatial})
    resnet = np.full((4, 8), 10.0)
    assert skips.smallest_margin(vit, resnet, images=np.array([0, 1])) == pytest.approx(1.0)
    assert skips.smallest_margin(vit, resnet, images=np.array([2, 3])) == pytest.approx(2.0)


def test_phase_is_positive_only_when_both_halves_go_the_papers_way():
    up, down = np.array([2.0, 2.0, 2.0, 0.0, 0.0, 0.0]), np.array([0.0, 0.0, 0.0, 2.0, 2.0, 2.0])
    flat = np.ones(6)
    # paper's way: CLS above spatial early (skip-carried), below late (changed by the branches)
    assert skips.phase_of(np.stack([up, up]), np.stack([flat, flat])) == pytest.approx(1.0)
    assert skips.phase_of(np.stack([down, down]), np.stack([flat, flat])) == pytest.approx(-1.0)
    # early half right but late half not: the smaller of the two decides
    assert skips.phase_of(np.stack([up * 0 + 2, up * 0 + 2]), np.stack([flat, flat])) == pytest.approx(-1.0)


def test_phase_reads_cls_and_spatial_tokens():
    cls = np.tile([100.0, 100.0, 100.0, 1.0, 1.0, 1.0], (4, 1))
    vit = Ratios({"attn": cls, "mlp": cls}, {"attn": constant(10.0), "mlp": constant(10.0)})
    assert skips.phase(vit) == pytest.approx(1.0)


def test_late_change_is_the_smaller_of_its_two_parts():
    attn = np.array([2.0, 2.0, 2.0, 1.0, 1.0, 1.0])     # log10 ratios of the CLS token, blocks 0-5
    mlp = np.array([2.0, 2.0, 2.0, 0.5, 0.5, 0.5])
    # early minus late: 2 - 0.75 = 1.25 (changes less early); late attention minus MLP: 1 - 0.5 = 0.5 (the MLP
    # changes it more); the effect is the smaller, 0.5
    assert skips.late_change_of(np.stack([attn, mlp])) == pytest.approx(0.5)
    # reversed late branches: the attention changes it more, the effect is negative
    assert skips.late_change_of(np.stack([mlp, attn])) == pytest.approx(-0.5)


def block_matrix(n=6, at=3, inside=0.9, outside=0.2):
    side = np.arange(n) >= at
    values = np.where(side[:, None] == side[None, :], inside, outside)
    np.fill_diagonal(values, 1.0)
    return values


def test_partition_score_of_a_block_matrix_and_a_flat_one():
    assert skips.partition_score(block_matrix(), 3) == pytest.approx(0.7)
    assert skips.partition_score(np.full((6, 6), 0.5), 3) == pytest.approx(0.0)
    with pytest.raises(ValueError):
        skips.partition_score(block_matrix(), 0)


def test_partition_effect_is_the_no_skip_model_minus_its_twin():
    effect = skips.partition_effect(block_matrix(inside=0.9, outside=0.2), block_matrix(inside=0.8, outside=0.6), 3)
    assert effect == pytest.approx(0.7 - 0.2)
    assert skips.partition_effect(np.full((6, 6), 0.5), block_matrix(), 3) < 0   # the twin is the more partitioned


def test_cut_finds_the_attention_output_of_the_block():
    labels = ["b0.attn", "b0.mlp", "b1.attn", "b1.mlp", "b2.attn"]
    assert skips.cut(labels, 1) == 2


def test_accuracy_drop_in_points_with_a_binomial_interval():
    drop, half = skips.accuracy_drop({"test_accuracy": 0.99, "test_images": 10000}, {"test_accuracy": 0.95, "test_images": 10000})
    assert drop == pytest.approx(4.0)
    assert half == pytest.approx(100 * 1.6448536 * np.sqrt(0.99 * 0.01 / 1e4 + 0.95 * 0.05 / 1e4), rel=1e-6)
    gain, _ = skips.accuracy_drop({"test_accuracy": 0.95, "test_images": 100}, {"test_accuracy": 0.99, "test_images": 100})
    assert gain == pytest.approx(-4.0)                                   # a model without skips that does better: negative


def test_bad_input_to_the_skip_effects_is_named():
    """Each gave a number or a raw numpy error before: one block (the early half empty: NaN), three rows (row 2 read
    as a branch), a 1-D array (IndexError), CLS and spatial ratios of different blocks (broadcast), no images (NaN),
    a split at 2.5 (read as 3), a 2 x 2 matrix (no pair inside a side: NaN), a non-square one (IndexError), an
    accuracy in percent (a drop of 400 points, NaN half-width) and a card of 0 test images (ZeroDivisionError)."""
    card = {"test_accuracy": 0.95, "test_images": 100}
    checks = [(lambda: skips.late_change_of(np.zeros((2, 1))), ValueError, r"\(2, blocks\).*at least 2 block"),
              (lambda: skips.late_change_of(np.zeros((3, 6))), ValueError, r"row 0 attention and row 1 MLP"),
              (lambda: skips.late_change_of(np.zeros(6)), ValueError, r"got shape \(6,\)"),
              (lambda: skips.phase_of(np.zeros((2, 1)), np.zeros((2, 1))), ValueError, "at least 2 block"),
              (lambda: skips.phase_of(np.zeros((2, 6)), np.zeros((2, 4))), ValueError, "same blocks"),
              (lambda: skips.margins(np.zeros(6), np.zeros(8)), ValueError, r"vit_log must be \(2, blocks\)"),
              (lambda: skips.margins(np.zeros((2, 6)), np.zeros(0)), ValueError, "resnet_logs"),
              (lambda: skips.resnet_log(np.ones((4, 8)), np.array([], dtype=int)), ValueError, "selects none"),
              (lambda: skips.depth(2.5), TypeError, "whole number"),
              (lambda: skips.partition_score(block_matrix(), 2.5), TypeError, "at must be a whole number"),
              (lambda: skips.partition_score(np.eye(2), 1), ValueError, "L >= 3"),
              (lambda: skips.partition_score(np.ones((6, 5)), 3), ValueError, "square"),
              (lambda: skips.partition_effect(block_matrix(), block_matrix(8), 3), ValueError, "same layers"),
              (lambda: skips.accuracy_drop({"test_accuracy": 99, "test_images": 100}, card), ValueError, "fraction"),
              (lambda: skips.accuracy_drop({"test_accuracy": 0.9, "test_images": 0}, card), ValueError, "test_images"),
              (lambda: skips.accuracy_drop({"accuracy": 0.9}, card), ValueError, "model card"),
              (lambda: skips.accuracy_drop(card, card, level=90), ValueError, "level")]
    for call, error, message in checks:
        with pytest.raises(error, match=message):
            call()
    assert skips.late_change_of(np.zeros((2, 2))) == 0.0 and skips.partition_score(np.ones((3, 3)), 1) == pytest.approx(0.0)
