"""helpers.effects.localization: the F7 effects on small synthetic token-by-patch maps (known answers, signs)."""

import numpy as np
import pytest

from helpers.effects import localization as f7
from helpers.localization import position_kinds

GRID = (4, 4)


def test_a_map_that_is_its_own_patch_localizes_perfectly():
    S = f7.summary(np.eye(16), GRID)
    assert f7.interior_margin(S) == pytest.approx(1.0)
    assert f7.contrast(S) == pytest.approx(1.0)
    assert f7.border_preference(S) == pytest.approx(0.0)      # no similarity to any other patch


def test_a_flat_map_does_not_localize():
    S = f7.summary(np.full((16, 16), 0.3), GRID)
    assert f7.interior_margin(S) == pytest.approx(0.0)
    assert f7.contrast(S) == pytest.approx(0.0)


def test_interior_margin_is_negative_when_another_patch_wins():
    maps = 0.5 * np.eye(16)
    maps[5, 6] = 0.8                                          # interior token 5 resembles patch 6 more than its own
    S = f7.summary(maps, GRID)
    # interior tokens 5, 6, 9, 10: margins -0.3, 0.5, 0.5, 0.5
    assert f7.interior_margin(S) == pytest.approx((-0.3 + 0.5 * 3) / 4)


def test_edge_tokens_that_resemble_the_border_prefer_it():
    border = position_kinds(GRID) != "interior"
    maps = np.eye(16) + 0.2 * np.outer(border, border)         # border tokens alike among themselves
    assert f7.border_preference(f7.summary(maps, GRID)) == pytest.approx(0.2)
    maps = np.eye(16) + 0.2 * np.outer(border, ~border)        # border tokens like interior patches instead
    assert f7.border_preference(f7.summary(maps, GRID)) == pytest.approx(-0.2)


def test_contrast_gap_is_positive_when_the_first_localizes_more():
    sharp, flat = f7.summary(np.eye(16), GRID), f7.summary(np.full((16, 16), 0.3), GRID)
    assert f7.contrast_gap(sharp, flat) == pytest.approx(1.0)
    assert f7.contrast_gap(flat, sharp) == pytest.approx(-1.0)


def test_effects_of_names_every_claim_of_f7():
    S = {"vit": f7.summary(np.eye(16), GRID), "gap": f7.summary(0.5 * np.eye(16), GRID),
         "final": f7.summary(np.full((4, 4), 0.2), (2, 2)), "earlier": f7.summary(np.eye(16), GRID)}
    effects = f7.effects_of(S, "vit", "gap", "final", "earlier")
    assert sorted(effects) == ["F7.1", "F7.2", "F7.3", "F7.4", "F7.5"]
    assert effects["F7.5"] == pytest.approx(0.5) and effects["F7.3"] == pytest.approx(1.0) and effects["F7.4"] == pytest.approx(1.0)


def test_with_interval_over_subsamples():
    full = {"m": f7.summary(np.eye(16), GRID)}
    same = [{"m": f7.summary(np.eye(16), GRID)} for _ in range(4)]
    assert f7.with_interval(lambda S: f7.contrast(S["m"]), full, same) == (pytest.approx(1.0), pytest.approx(0.0))
    varied = [{"m": f7.summary(s * np.eye(16), GRID)} for s in (0.8, 0.9, 1.1, 1.2)]
    value, half = f7.with_interval(lambda S: f7.contrast(S["m"]), full, varied)
    assert value == pytest.approx(1.0) and half > 0
    assert f7.with_interval(lambda S: f7.contrast(S["m"]), full, None) == (pytest.approx(1.0), None)


def test_bad_input_to_the_localization_effects_is_named():
    """Each gave a number or a bare error before: a grid without interior tokens (2 x 4) had no 'interior' summary
    (KeyError 'interior') and an edge border preference of NaN; a 1 x 1 grid a NaN contrast; the per-token scores
    instead of their summary a KeyError; a label without a summary a bare KeyError."""
    no_interior = f7.summary(np.eye(8), (2, 4))
    checks = [(lambda: f7.interior_margin(no_interior), ValueError, "no interior tokens"),
              (lambda: f7.border_preference(no_interior), ValueError, "no edge tokens with a defined border_preference"),
              (lambda: f7.contrast(f7.summary(np.ones((1, 1)), (1, 1))), ValueError, "2 positions or more"),
              (lambda: f7.contrast({"own": 1, "contrast": 2}), TypeError, r"summary\(maps, grid\)"),
              (lambda: f7.effects_of({"ViT": f7.summary(np.eye(16), GRID)}, "ViT", "GAP", "R4", "R2"), KeyError,
               "no summary for")]
    for call, error, message in checks:
        with pytest.raises(error, match=message):
            call()
    assert f7.contrast(no_interior) == pytest.approx(1.0)   # the contrast needs no interior tokens
