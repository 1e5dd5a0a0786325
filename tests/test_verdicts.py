"""The verdict rule (helpers.verdicts): one synthetic case per verdict, the 'not learned' tag, bad input."""

import json

import pytest

from helpers import scorecard, verdicts
from helpers.claims import CLAIMS, claims_of
from helpers.verdicts import judge, judge_alike, not_measured


def test_holds_when_every_seed_clears_its_noise():
    v = judge("F1.1", effects=[0.30, 0.25, 0.28], intervals=[0.01, 0.02, 0.01], spread=0.05)
    assert v.verdict == "holds" and v.tag == "" and v.noise == [0.05, 0.05, 0.05]


def test_interval_larger_than_spread_is_the_noise():
    v = judge("F1.1", effects=[0.30, 0.04], intervals=[0.01, 0.06], spread=0.02)
    assert v.noise == [0.02, 0.06] and v.verdict == "holds in 1 of 2 seeds"


def test_one_seed_is_never_more_than_one_of_one():
    assert judge("F1.1", effects=[0.9], spread=0.01).verdict == "holds in 1 of 1 seeds"


def test_within_noise_and_opposite():
    assert judge("F1.1", effects=[0.01, -0.01, 0.02], spread=0.03).verdict == "within noise"
    assert judge("F1.1", effects=[-0.2, -0.3, 0.01], spread=0.03).verdict == "opposite"
    # one of two reversed is not more than half: within noise
    assert judge("F1.1", effects=[-0.2, 0.01], spread=0.03).verdict == "within noise"


def test_effect_equal_to_noise_does_not_count():
    assert judge("F1.1", effects=[0.05, 0.05], spread=0.05).verdict == "within noise"


def test_no_noise_estimate_is_not_measured():
    v = judge("F1.1", effects=[0.4], floor=0.1)
    assert v.verdict == "not measured" and "no noise estimate" in v.numbers() and "+0.400" in v.numbers()


def test_not_measured():
    assert judge("F1.1", effects=[]).verdict == "not measured"
    v = not_measured("F1.8", "no such models on the lite track")
    assert v.verdict == "not measured" and "no such models" in v.numbers()


def test_not_learned_when_the_untrained_twin_shows_it_as_well():
    v = judge("F1.1", effects=[0.30, 0.32], spread=0.05, floor=0.28)
    assert v.verdict == "holds" and v.tag == "not learned" and v.words() == "holds (not learned)"
    learned = judge("F1.1", effects=[0.30, 0.32], spread=0.05, floor=0.10)
    assert learned.tag == ""
    # learned in one seed is enough to drop the tag; the floor's own interval widens the noise
    assert judge("F1.1", effects=[0.30, 0.50], spread=0.05, floor=0.28).tag == ""
    assert judge("F1.1", effects=[0.30, 0.50], spread=0.05, floor=0.28, floor_interval=0.3).tag == "not learned"
    # a claim that does not hold carries no tag
    assert judge("F1.1", effects=[0.0, 0.01], spread=0.05, floor=0.3).tag == ""


def test_alike_claims():
    assert judge_alike("F8.2", differences=[0.01, -0.02], spread=0.03).verdict == "holds"
    assert judge_alike("F8.2", differences=[0.01, 0.2], spread=0.03).verdict == "holds in 1 of 2 seeds"
    assert judge_alike("F8.2", differences=[0.1, 0.2], spread=0.03).verdict == "opposite"


@pytest.mark.parametrize("kwargs, message", [
    (dict(effects=[0.1, float("nan")], spread=0.1), "NaN"),
    (dict(effects=[0.1, 0.2], intervals=[0.1], spread=0.1), "one per seed"),
    (dict(effects=[0.1, 0.2], spread=-0.1), "negative"),
    (dict(effects=[0.1, 0.2], spread=0.1, seeds=["seed 0"]), "label per effect"),
])
def test_bad_input_says_what_to_do(kwargs, message):
    with pytest.raises(ValueError, match=message):
        judge("F1.1", **kwargs)


def test_unknown_claim_suggests_close_ones():
    with pytest.raises(KeyError, match="F1.1"):
        judge("F1.11", effects=[0.1], spread=0.1)


def test_every_claim_belongs_to_a_findings_notebook():
    assert {c.notebook for c in CLAIMS.values()} == {f"{n:02d}" for n in range(6, 16)}
    assert all(claims_of(c.notebook) for c in CLAIMS.values())


def test_save_requires_every_claim_of_the_notebook(tmp_path):
    with pytest.raises(ValueError, match="judge every claim"):
        verdicts.save("15", [not_measured("F10.3", "one size")], "lite", root=tmp_path)


def test_save_load_and_scorecard_round_trip(tmp_path):
    made = [judge("F10.1", effects=[0.5], spread=0.02, floor=0.0), judge("F10.2", effects=[-0.3], spread=0.02),
            not_measured("F10.3", "one Mixer size"), judge("F10.4", effects=[0.1, 0.2], intervals=[0.01, 0.01])]
    path = verdicts.save("15", made, "lite", root=tmp_path)
    assert json.loads(path.read_text())["notebook"] == "15"
    back = verdicts.load("lite", root=tmp_path)
    assert [back[c].words() for c in claims_of("15")] == ["holds in 1 of 1 seeds", "opposite", "not measured", "holds"]
    text = scorecard.render(back, {})
    assert all(f"| {c} |" in text for c in CLAIMS)          # every claim has a row
    assert "not yet run" in text and "**opposite**" in text
