"""helpers.effects.probes: F8 and F9 effects on small known cases, with their sign conventions."""
import numpy as np
import pytest

from helpers.effects import probes as fx


def test_tokens_behind_is_the_weakest_other_model_minus_the_cls_model():
    assert fx.tokens_behind(0.6, [0.9, 0.8, 0.95]) == pytest.approx(0.2)      # the paper's direction: > 0
    assert fx.tokens_behind(0.9, [0.8, 0.95]) == pytest.approx(-0.1)         # one other model below: < 0
    with pytest.raises(ValueError):
        fx.tokens_behind(0.5, [])


def test_sameness_effects_are_signed_differences():
    assert fx.native_alike(0.97, 0.98) == pytest.approx(-0.01)
    assert fx.pooled_rise(0.95, 0.79) == pytest.approx(0.16)                  # still rising: not a plateau
    assert fx.first_token_gap(0.95, 0.98) == pytest.approx(-0.03)             # the first token below the pooled


def test_f91_and_f92_from_gaps_per_block():
    lower = slice(0, 3)
    gaps = np.array([[0.01, 0.02, 0.03, 0.0, 0.0, 0.10],     # all images
                     [0.00, 0.00, 0.00, 0.0, 0.0, 0.00]])    # one subsample: exactly as close as a second seed
    np.testing.assert_allclose(fx.lower_block_difference(gaps, lower), [-0.02, 0.0])   # falls short below: < 0
    np.testing.assert_allclose(fx.top_minus_lower(gaps, lower), [0.08, 0.0])           # further short at the top: > 0
    assert fx.lower_block_difference(np.zeros(6), lower).shape == ()


def test_probe_gain_is_more_data_minus_less_data_in_fractions():
    np.testing.assert_allclose(fx.probe_gain([0.7, 0.8], [0.6, 0.9]), [0.1, -0.1])


def test_f94_size_is_in_the_units_of_its_effect():
    """The paper's 30 points must be 0.30 in the effect's units (fractions of accuracy), not 30."""
    from helpers.claims import SIZES
    gain = float(fx.probe_gain(0.9, 0.6))  # a 30-point gain, as the paper reports
    assert gain / SIZES["F9.4"].value == pytest.approx(1.0)


def test_bad_input_to_the_probe_effects_is_named():
    """Each gave a number or a raw numpy error before: lower=2 read block 2 alone and averaged the (1 + R) rows into one
    number (on 1-D gaps, an IndexError), 1.5 numpy's index error, a scalar gap an IndexError; an accuracy in percent
    gave an effect 100 times too large and a NaN accuracy a NaN effect."""
    gaps = np.arange(12.0).reshape(3, 4)
    checks = [(lambda: fx.lower_block_difference(gaps, 2), "lower must select blocks"),
              (lambda: fx.top_minus_lower(gaps, 2), "lower must select blocks"),
              (lambda: fx.top_minus_lower(np.arange(4.0), 1.5), "lower must select blocks"),
              (lambda: fx.top_minus_lower(0.1, slice(0, 1)), r"gaps must be \(\.\.\., blocks\)"),
              (lambda: fx.tokens_behind(50, [0.8]), r"cls_tokens must be .*fraction .*got 50"),
              (lambda: fx.tokens_behind(0.5, [np.nan, 0.8]), "other_tokens .*got nan"),
              (lambda: fx.native_alike(np.nan, 0.5), "cls_token"),
              (lambda: fx.pooled_rise(0.9, 85), "pooled_before"),
              (lambda: fx.first_token_gap(0.9, -0.1), "pooled"),
              (lambda: fx.probe_gain([0.6, 70.0], [0.5, 0.5]), "more_data .*got 70")]
    for call, message in checks:
        with pytest.raises(ValueError, match=message):
            call()
    np.testing.assert_allclose(fx.lower_block_difference(gaps, [0, 1]), [-0.5, -4.5, -8.5])   # a list of blocks reads
