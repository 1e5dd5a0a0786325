"""helpers.effects.receptive: F4's effects on small synthetic radii and shares, with their signs."""

import numpy as np
import pytest

from helpers import receptive_fields as rf
from helpers.effects import receptive as fx


def test_lower_layers_is_vit_minus_resnet():
    assert fx.lower_layers(2.5, 3.75) == pytest.approx(-1.25)
    assert fx.lower_layers(5.0, 3.0) == pytest.approx(2.0)


def test_growth_and_shrinking_steps():
    radii = [3.0, 3.5, 3.4, 6.0, 9.0]
    assert fx.growth(radii) == pytest.approx(6.0)
    assert fx.shrinking_steps(radii) == 1
    assert fx.growth(radii[::-1]) == pytest.approx(-6.0)
    with pytest.raises(ValueError):
        fx.growth([3.0])


def test_midway_against_half_a_uniform_field():
    uniform = rf.uniform_mass_radius(32, 32)
    assert fx.midway(uniform, uniform) == pytest.approx(0.5 * uniform)  # a uniform field is global
    assert fx.midway(0.25 * uniform, uniform) < 0


def test_centre_shares():
    post, branch = np.array([0.8, 0.6]), np.array([0.1, 0.2])
    assert fx.centre_dependence(post, 1 / 64) == pytest.approx(0.7 - 1 / 64)
    assert fx.branch_drop(post, branch) == pytest.approx(0.55)
    assert fx.mlp_branch_gap(branch, post) == pytest.approx(-0.55)  # a sameness difference: its sign is the side
    assert fx.mlp_branch_gap(post, post) == 0.0
    with pytest.raises(ValueError, match="one share per block"):
        fx.branch_drop(post, branch[:1])


def test_centre_dependence_of_a_real_map():
    """A field all inside the centre patch has share 1; a uniform field has the uniform share (effect 0)."""
    peaked = np.zeros((32, 32))
    peaked[16:20, 16:20] = 1.0
    uniform = np.ones((32, 32))
    share = lambda erf: rf.window_fraction(erf, 16, 16, 4)
    assert fx.centre_dependence([share(peaked)], 1 / 64) == pytest.approx(1 - 1 / 64)
    assert fx.centre_dependence([share(uniform)], 1 / 64) == pytest.approx(0.0)


def test_stage_first_shrink():
    labels = ["layer1.0.branch", "layer1.1.branch", "layer2.0.branch", "layer2.1.branch", "layer3.0.branch"]
    firsts = fx.stage_firsts(labels)
    assert firsts == [2, 4]
    radii = [4.0, 5.0, 4.0, 7.0, 6.0]  # shrinks by 1 at layer2.0 and layer3.0
    assert fx.stage_first_shrink(radii, firsts) == pytest.approx(1.0)
    assert fx.stage_first_shrink([4.0, 5.0, 7.0, 7.5, 9.5], firsts) == pytest.approx(-2.0)  # widens: reversed
    with pytest.raises(ValueError, match="firsts"):
        fx.stage_first_shrink(radii, [0])


def test_bad_input_to_the_receptive_field_effects_is_named():
    """Each gave a number or a raw numpy error before: a uniform r50 or share of NaN a NaN effect; firsts as an array
    numpy's 'truth value ... is ambiguous', 1.5 an IndexError, True counted as block 1, a repeated stage twice."""
    radii = [3.0, 2.0, 1.0, 0.5]
    checks = [(lambda: fx.midway(3.0, np.nan), "uniform_r50"),
              (lambda: fx.centre_dependence([0.5, 0.4], np.nan), "uniform_share"),
              (lambda: fx.centre_dependence([0.5, 0.4], 0.0), "uniform_share"),
              (lambda: fx.stage_first_shrink(radii, [1.5]), "distinct block indices"),
              (lambda: fx.stage_first_shrink(radii, [True]), "distinct block indices"),
              (lambda: fx.stage_first_shrink(radii, [1, 1, 3]), "distinct block indices")]
    for call, message in checks:
        with pytest.raises(ValueError, match=message):
            call()
    assert fx.stage_first_shrink(radii, np.array([1, 3])) == pytest.approx(0.75)   # an index array reads as a list
