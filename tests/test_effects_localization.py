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
