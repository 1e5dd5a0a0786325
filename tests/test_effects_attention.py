"""helpers.effects.attention: F2's and F3's effects on small synthetic tables, with their signs."""

import numpy as np
import pytest

from helpers.attention import uniform_attention_distance
from helpers.effects import attention as fx

UNIFORM = 10.0  # local line 6 px, global line 8 px


def table(low, top, blocks=4):
    """A (blocks, heads) table: blocks 0-1 hold `low`, the middle blocks 9 px, the last block `top`."""
    rows = [low, low] + [[9.0] * len(low)] * (blocks - 3) + [top]
    return np.array(rows, dtype=float)


def test_thresholds_are_60_and_80_percent_of_uniform():
    assert fx.thresholds(UNIFORM) == pytest.approx((6.0, 8.0))


def test_mix_is_the_weaker_side_and_negative_without_a_local_head():
    # lowest head 4 px (2 below the local line), highest 9 px (1 above the global line): the weaker side, +1
    assert fx.mix(table([4.0, 9.0], [9.0, 9.0]), UNIFORM) == pytest.approx(1.0)
    # no local head (lowest 7 px): -1, the paper's direction reversed
    assert fx.mix(table([7.0, 9.5], [9.0, 9.0]), UNIFORM) == pytest.approx(-1.0)
    # a uniform (untrained-like) table has no local head
    assert fx.mix(np.full((3, 4), UNIFORM), UNIFORM) < 0


def test_all_global_reads_the_last_block_only():
    t = table([1.0, 1.0], [8.5, 9.0])
    assert fx.all_global(t, UNIFORM) == pytest.approx(0.5)
    t[-1, 0] = 7.0  # one local-ish head in the last block reverses it
    assert fx.all_global(t, UNIFORM) == pytest.approx(-1.0)


def test_farther_is_positive_when_the_less_data_heads_sit_farther():
    full, less = table([4.0, 8.0], [9.0, 9.0]), table([6.0, 10.0], [1.0, 1.0])
    assert fx.farther(less, full) == pytest.approx(2.0)  # the last block does not count
    assert fx.farther(full, less) == pytest.approx(-2.0)


def test_accuracy_drop_in_points_and_its_binomial_half_width():
    assert fx.accuracy_drop(0.98, 0.75) == pytest.approx(23.0)
    assert fx.accuracy_drop(0.75, 0.98) == pytest.approx(-23.0)
    half = fx.accuracy_drop_half_width(0.98, 10_000, 0.75, 10_000)
    assert half == pytest.approx(100 * 1.6449 * np.sqrt(0.98 * 0.02 / 1e4 + 0.75 * 0.25 / 1e4))
    with pytest.raises(ValueError, match="between 0 and 1"):
        fx.accuracy_drop(98.0, 75.0)  # percentages, not fractions


def test_head_groups_slide_along_the_sorted_heads():
    groups, means = fx.head_groups(np.array([30, 10, 50, 20, 60, 40]), window=2)
    assert list(groups.values()) == [[1, 3], [3, 0], [0, 5], [5, 2], [2, 4]]
    assert means == pytest.approx([15, 25, 35, 45, 55])
    with pytest.raises(ValueError):
        fx.head_groups(np.arange(3), window=4)


def test_falls_is_minus_the_rank_correlation():
    distance = np.array([1.0, 2.0, 3.0, 4.0])
    falling = np.array([[0.9, 0.7], [0.8, 0.6], [0.5, 0.5], [0.2, 0.3]])  # (groups, layers)
    assert fx.falls(distance, falling) == pytest.approx(1.0)
    assert fx.falls(distance, falling[::-1]) == pytest.approx(-1.0)
    # one swap of the middle two of four groups: Spearman 0.8, so the effect is -0.8 for a rising curve
    rising = np.array([[0.1], [0.3], [0.2], [0.4]])
    assert fx.falls(distance, rising) == pytest.approx(-0.8)


def test_local_minus_global_in_cka_units_whatever_the_group_order():
    distance = np.array([3.0, 1.0, 2.0])  # groups not in order: the most local is group 1, the most global group 0
    values = np.array([[0.25, 0.25], [0.6, 0.6], [0.4, 0.5]])
    assert fx.local_minus_global(distance, values) == pytest.approx(0.35)
    with pytest.raises(ValueError, match="groups"):
        fx.local_minus_global(distance, values[:2])


def test_uniform_attention_is_global_by_construction():
    """A head attending equally everywhere sits at the uniform distance: above the global line (F2.2's floor)."""
    uniform = uniform_attention_distance(8, 4)
    assert fx.all_global(np.full((2, 3), uniform), uniform) == pytest.approx(0.2 * uniform)


def test_bad_input_to_the_attention_effects_is_named():
    """Each gave a number or a raw error before: a NaN distance a NaN effect (or argmin read it as the most local
    group: F3.2 of 0.0), an infinite uniform distance -inf, 2.5 or NaN test images a half-width, a window of 2.5
    range()'s TypeError and True a window of 1, a group CKA matrix without layers a NaN mean."""
    holed = table([2.0, 12.0], [9.0, 9.0])
    holed[0, 0] = np.nan
    checks = [(lambda: fx.mix(holed, UNIFORM), ValueError, "table holds 1 NaN"),
              (lambda: fx.mix(table([2.0, 12.0], [9.0, 9.0]), np.inf), ValueError, "uniform"),
              (lambda: fx.accuracy_drop_half_width(0.9, 2.5, 0.8, 100), TypeError, "n_full must be a whole number"),
              (lambda: fx.accuracy_drop_half_width(0.9, 100, 0.8, np.nan), TypeError, "n_less"),
              (lambda: fx.head_groups([1.0, 2.0, 3.0, 4.0], 2.5), TypeError, "window must be a whole number"),
              (lambda: fx.head_groups([1.0, 2.0, 3.0, 4.0], True), TypeError, "window"),
              (lambda: fx.head_groups([1.0, np.nan, 3.0, 4.0], 2), ValueError, "distances holds 1 NaN"),
              (lambda: fx.local_minus_global([np.nan, 2.0, 3.0], np.ones((3, 2))), ValueError, "group_distance holds"),
              (lambda: fx.falls([1.0, 2.0, 3.0], [[0.5, 0.2], [np.nan, 0.1], [0.0, 0.0]]), ValueError, "values holds"),
              (lambda: fx.local_minus_global([1.0, 2.0, 3.0], np.ones((3, 0))), ValueError, ">= 1 layer"),
              # groups all at one distance: the error spoke of an RDM (measures.spearman's words for RSA)
              (lambda: fx.falls([2.0, 2.0, 2.0], np.eye(3)), ValueError, "same mean distance")]
    for call, error, message in checks:
        with pytest.raises(error, match=message):
            call()
