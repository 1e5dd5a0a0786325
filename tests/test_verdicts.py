"""The verdict rule (helpers.verdicts): one synthetic case per verdict, the 'not learned' tag, bad input."""

import json

import numpy as np
import pytest

from helpers import scorecard, verdicts
from helpers.claims import CLAIMS, claims_of
from helpers.verdicts import judge, judge_alike, not_measured


DRAWS, SEEDS = [0.10, 0.05, 0.12, 0.08, 0.02], [0, 1, 2, 3, 4]


# --- the spread: one definition ---------------------------------------------------------------

def test_spread_is_the_range_over_independent_seeds():
    v = judge("F1.1", effects=[0.30, 0.25, 0.28], intervals=[0.01, 0.02, 0.01])
    assert v.spread == pytest.approx(0.05) and v.noise == pytest.approx([0.05, 0.05, 0.05])
    assert v.verdict == "holds" and v.spread_rule == verdicts.SPREAD_RULE


def test_interval_larger_than_spread_is_the_noise():
    v = judge("F1.1", effects=[0.30, 0.32], intervals=[0.01, 0.06])
    assert v.noise == pytest.approx([0.02, 0.06])


def test_seeds_that_disagree_widely_are_within_noise():
    # large effects, but the seeds span more than each effect: the run-to-run spread swallows them
    assert judge("F1.1", effects=[0.5, -0.05, 0.3]).verdict == "within noise"
    # with the range as the spread, the largest effect shows the claim exactly when every seed is above zero
    assert judge("F1.1", effects=[0.9, 0.05, 0.3]).verdict == "holds in 1 of 3 seeds"


def test_partners_are_not_counted_as_seeds_and_widen_the_spread():
    # 3 ViT seeds, each against 2 ResNet seeds: 3 units; the spread covers the partners' range too
    v = judge("F5.1", effects=[[0.30, 0.36], [0.31, 0.33], [0.29, 0.30]], unit="ViT seeds (each against 2 ResNet seeds)")
    assert len(v.effects) == 3 and v.effects[0] == pytest.approx(0.33)
    assert v.spread == pytest.approx(0.06)                     # ResNet seeds move unit 0 by 0.06 > range of means
    assert v.words() == "holds (3 of 3 ViT seeds, each against 2 ResNet seeds)"  # never nested parentheses


def test_one_seed_borrows_a_named_spread_and_says_so():
    with pytest.raises(ValueError, match="borrowed"):
        judge("F10.1", effects=[0.5])
    v = judge("F10.1", effects=[0.5], spread=0.02, spread_source="the ViT seeds of F1.1")
    assert v.verdict == "holds in 1 of 1 seeds" and v.spread_rule == "borrowed: the ViT seeds of F1.1"
    with pytest.raises(ValueError, match="do not pass spread"):
        judge("F1.1", effects=[0.3, 0.4], spread=0.02, spread_source="x")


# --- units of replication -------------------------------------------------------------------

def test_one_seed_is_never_more_than_one_of_one_in_either_direction():
    assert judge("F10.1", effects=[0.9], spread=0.01, spread_source="s").verdict == "holds in 1 of 1 seeds"
    v = judge("F10.2", effects=[-0.9], spread=0.01, spread_source="s")
    assert v.verdict == "opposite in 1 of 1 seeds" and v.kind == "opposite"


def test_different_models_one_seed_each_are_shown_not_held():
    with pytest.raises(ValueError, match="borrowed"):   # different models: their range is not a seed spread
        judge("F6.1", effects=[0.36, 0.64, 0.27], unit="blocks, one seed each", replicated=False)
    v = judge("F6.1", effects=[0.36, 0.64, 0.27], unit="blocks, one seed each", replicated=False, spread=0.15,
              spread_source="the intact ViT's seeds")
    assert v.verdict == "shown in 3 of 3 blocks, one seed each" and v.kind == "holds in part"
    assert "holds" not in v.words()


def test_within_noise_and_opposite():
    assert judge("F1.1", effects=[0.01, -0.01, 0.02]).verdict == "within noise"
    assert judge("F1.1", effects=[-0.50, -0.52, -0.49]).verdict == "opposite"
    # one of two reversed is not more than half: within noise
    assert judge("F1.1", effects=[-0.2, 0.01], intervals=[0.01, 0.3]).kind in ("within noise", "opposite")


def test_effect_equal_to_noise_does_not_count():
    assert judge("F1.1", effects=[0.05, 0.05], intervals=[0.05, 0.05]).verdict == "within noise"


def test_not_measured():
    assert judge("F1.1", effects=[]).verdict == "not measured"
    v = not_measured("F1.8", "no such models on the lite track")
    assert v.verdict == "not measured" and "no such models" in v.numbers() and v.kind == "not measured"


# --- the floor over untrained draws ------------------------------------------------------------

def test_the_floor_needs_five_recorded_draws():
    with pytest.raises(ValueError, match="at least 5 untrained draws"):
        judge("F1.1", effects=[0.3, 0.32], floor_draws=[0.1])
    with pytest.raises(ValueError, match="seed of every draw"):
        judge("F1.1", effects=[0.3, 0.32], floor_draws=DRAWS)
    with pytest.raises(ValueError, match="repeat a seed"):  # five copies of one draw were counted as five draws
        judge("F1.1", effects=[0.3, 0.32], floor_draws=DRAWS, floor_seeds=[0] * len(DRAWS))
    v = judge("F1.1", effects=[0.30, 0.32], floor_draws=DRAWS, floor_seeds=SEEDS)
    assert v.floor == max(DRAWS) and v.floor_seeds == SEEDS and v.tag == "" and v.learned == [True, True]


def test_learned_in_k_of_n_compares_each_seed_with_the_upper_end_of_the_draws():
    v = judge("F1.6", effects=[0.70, 0.72, 0.84], floor_draws=[-0.8, 0.0, 0.7, 0.2, 0.1], floor_seeds=SEEDS)
    assert v.verdict == "holds" and v.learned == [False, False, False]   # spread 0.14: 0.84 - 0.7 is not beyond it
    assert v.tag == "learned in 0 of 3"
    w = judge("F1.6", effects=[0.70, 0.72, 0.74], floor_draws=[-0.8, 0.0, 0.67, 0.2, 0.1], floor_seeds=SEEDS)
    assert w.tag == "learned in 2 of 3" and w.words() == "holds (3 of 3 seeds; learned in 2 of 3)"


def test_below_the_untrained_draws_is_named():
    v = judge("F7.1", effects=[0.16, 0.16, 0.18], floor_draws=[0.39, 0.40, 0.41, 0.38, 0.42], floor_seeds=SEEDS)
    assert v.verdict == "holds" and v.tag == "below the untrained draws"


def test_a_verdict_that_changes_with_one_floor_draw_says_so():
    # with all draws the seeds are not learned (0.60 is the upper end); with draw 1 alone (0.0) they would be
    v = judge("F1.1", effects=[0.50, 0.52], floor_draws=[0.6, 0.0, 0.1, 0.2, 0.1], floor_seeds=SEEDS)
    assert v.tag == "learned in 0 of 2" and v.robustness.startswith("depends:") and "draw seeds" in v.robustness
    steady = judge("F1.1", effects=[0.90, 0.92], floor_draws=DRAWS, floor_seeds=SEEDS)
    assert steady.robustness == "the same under any single floor draw"


def test_alternative_spreads_are_tested_and_named():
    v = judge("F1.1", effects=[0.30, 0.32], alternatives={"the ResNet seed swap": 0.31})
    assert v.verdict == "holds" and "the ResNet seed swap" in v.robustness and "holds in 1 of 2 seeds" in v.robustness


# --- size and sameness -------------------------------------------------------------------------

def test_a_size_claim_judges_direction_and_size_separately():
    v = judge("F3.2", effects=[0.030, 0.036, 0.040])
    assert v.verdict == "holds" and "smaller than the paper's" in v.size and "0.10x" in v.size
    assert "size" in v.words()
    assert "about the paper's" in judge("F3.2", effects=[0.33, 0.36, 0.37]).size
    assert judge("F1.1", effects=[0.3, 0.31]).size == ""    # no number in the paper


def test_sameness_claims_are_marked_and_judged_on_the_absolute_difference():
    v = judge("F8.2", effects=[0.01, -0.02, 0.005], intervals=[0.03, 0.03, 0.03])
    assert v.alike and v.verdict == "holds" and v.words().startswith("≈ holds")
    assert judge("F8.2", effects=[0.01, 0.2], intervals=[0.03, 0.03]).kind == "holds in part"
    assert judge("F8.2", effects=[0.15, 0.16, 0.17]).kind == "opposite"    # they differ beyond noise
    with pytest.raises(ValueError, match="no untrained floor"):
        judge("F8.2", effects=[0.1, 0.2], floor_draws=DRAWS, floor_seeds=SEEDS)


def test_the_null_is_recorded_and_printed():
    v = judge("F1.6", effects=[0.7, 0.75], null=[0.0, 0.9, -0.3, 0.5] * 5)
    assert len(v.null) == 20 and "shuffled-image null" in v.numbers()
    assert verdicts.null_level([0.0] * 19 + [1.0]) == pytest.approx(0.05)


@pytest.mark.parametrize("kwargs, message", [
    (dict(effects=[0.1, float("nan")]), "NaN"),
    (dict(effects=[0.1, 0.2], intervals=[0.1]), "one per unit"),
    (dict(effects=[0.1, 0.2], intervals=[0.1, -0.1]), "negative"),
    (dict(effects=[0.1, 0.2], seeds=["seed 0"]), "label per effect"),
    (dict(effects=[0.1], spread=-0.1, spread_source="x"), "negative"),
    # each of these gave a verdict before: a table flattened into units, no unit name,
    # a repeated unit, an empty null, a negative alternative spread
    (dict(effects=np.zeros((2, 2, 2))), "1-D"),
    (dict(effects=[0.1, 0.2], unit=""), "unit names"),
    (dict(effects=[0.1, 0.2], seeds=["seed 0", "seed 0"]), "repeat a label"),
    (dict(effects=[0.1, 0.2], null=[]), "null is empty"),
    (dict(effects=[0.1, 0.2], alternatives={"06's": -1.0}), "size of 0 or more"),
    (dict(effects=[0.1, 0.2], floor_draws=[[0.0]] * 5, floor_seeds=range(5)), "1-D"),
])
def test_bad_input_says_what_to_do(kwargs, message):
    with pytest.raises(ValueError, match=message):
        judge("F1.1", **kwargs)


@pytest.mark.parametrize("kwargs", [
    dict(effects=[True, False]),                 # was 'within noise'
    dict(effects="0.1"),                         # was numpy's "could not convert string to float: '.'"
    dict(effects=[0.1], spread="0.1", spread_source="x"),
    dict(effects=[0.1, 0.2], replicated="no"),   # a non-empty string counted as True
    dict(effects=[0.1, 0.2], alike="no"),        # made F1.1 a sameness claim
    dict(effects=[0.1, 0.2], floor_draws=[0.0] * 5, floor_seeds="abcde"),
])
def test_wrong_types_are_refused_not_coerced(kwargs):
    with pytest.raises(TypeError):
        judge("F1.1", **kwargs)


def test_saving_and_loading_refuse_what_is_not_a_verdict(tmp_path):
    with pytest.raises(TypeError, match="Verdicts that judge"):
        verdicts.save("07", ["F1.5 holds"], "lite", root=tmp_path)
    with pytest.raises(ValueError, match="'lite' or 'full'"):  # saved where RESULTS.md never looks
        verdicts.save("07", [not_measured(c, "x") for c in ("F1.5", "F1.6", "F1.7", "F1.8")], "Lite", root=tmp_path)
    (tmp_path / "lite").mkdir()
    for text in ("{not json", '{"claims": []}'):  # were json's JSONDecodeError and a KeyError
        (tmp_path / "lite" / "07.json").write_text(text)
        with pytest.raises(ValueError, match="not a verdict file"):
            verdicts.load("lite", root=tmp_path)


def test_the_protocols_pieces_refuse_what_would_give_a_quiet_wrong_number():
    """seed_spread([0.1, nan]) was 0.0 (every comparison with NaN is False); null_level of no values raised numpy's
    IndexError and of a NaN returned NaN; disjoint_subsamples(10.5, 2) failed with numpy's AxisError; and
    untrained_draws built the same model twice for a repeated seed."""
    from helpers import floors, intervals

    with pytest.raises(ValueError, match="NaN"):
        verdicts.seed_spread([0.1, float("nan")])
    with pytest.raises(ValueError, match="NaN"):
        verdicts.seed_spread([0.1], partners=[[0.2, float("nan")]])
    with pytest.raises(ValueError, match="no values"):
        verdicts.null_level([])
    with pytest.raises(ValueError, match="NaN"):
        verdicts.null_level([0.1, float("nan")])
    with pytest.raises(ValueError, match="between 0 and 1"):
        verdicts.null_level([0.1, 0.2], level=95)
    with pytest.raises(TypeError, match="whole number of images"):
        intervals.disjoint_subsamples(10.5, 2)
    with pytest.raises(ValueError, match="repeat a seed"):
        next(floors.untrained_draws({"vit": "lite-vit"}, seeds=[0, 0, 1, 2, 3]))


def test_unknown_claim_suggests_close_ones():
    with pytest.raises(KeyError, match="F1.1"):
        judge("F1.11", effects=[0.1, 0.2])


def test_saved_numbers_keep_six_decimals(tmp_path):
    made = [judge("F10.1", effects=[0.123456789], spread=0.02, spread_source="s"), not_measured("F10.2", "x"),
            not_measured("F10.3", "x"), not_measured("F10.4", "x")]
    record = json.loads(verdicts.save("15", made, "lite", root=tmp_path).read_text())
    assert record["verdicts"][0]["effects"] == [0.123457]


def test_every_claim_belongs_to_a_findings_notebook():
    assert {c.notebook for c in CLAIMS.values()} == {f"{n:02d}" for n in range(6, 16)}
    assert all(claims_of(c.notebook) for c in CLAIMS.values())


def test_save_requires_every_claim_of_the_notebook(tmp_path):
    with pytest.raises(ValueError, match="judge every claim"):
        verdicts.save("15", [not_measured("F10.3", "one size")], "lite", root=tmp_path)


def test_save_load_and_scorecard_round_trip(tmp_path):
    made = [judge("F10.1", effects=[0.5], spread=0.02, spread_source="s", floor_draws=DRAWS, floor_seeds=SEEDS),
            judge("F10.2", effects=[-0.3], spread=0.02, spread_source="s"),
            not_measured("F10.3", "one Mixer size"), judge("F10.4", effects=[0.3, 0.31], intervals=[0.01, 0.01])]
    path = verdicts.save("15", made, "lite", root=tmp_path)
    assert json.loads(path.read_text())["notebook"] == "15"
    back = verdicts.load("lite", root=tmp_path)
    assert [back[c].words() for c in claims_of("15")] == ["holds in 1 of 1 seeds", "opposite in 1 of 1 seeds", "not measured", "holds (2 of 2 seeds)"]
    text = scorecard.render(back, {})
    assert all(f"| {c} |" in text for c in CLAIMS)          # every claim has a row
    assert "not yet run" in text and "**opposite in 1 of 1 seeds**" in text
    assert back["F10.1"].floor_draws == DRAWS and back["F10.1"].floor_seeds == SEEDS
