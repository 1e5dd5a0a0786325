"""helpers.report's protocol (issue 40) on synthetic numbers: the floor over seeded untrained draws, the shuffled-image
null of R2/R3, the spread rule with one trained pair; and a bad --out is a clear error (issue 42). Fast: no report run."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from helpers import floors, report
from helpers.report import controls as rc
from helpers.report.floor import FLOOR_DRAWS, draw_models, draw_seeds


def _part(values, subsamples=()):
    return SimpleNamespace(full=SimpleNamespace(values=np.asarray(values, dtype=float)),
                           subsamples=[SimpleNamespace(values=np.asarray(v, dtype=float)) for v in subsamples])


def _diagonal(n_a: int, n_b: int, strength: float, reverse: bool = False) -> np.ndarray:
    """(n_a, n_b) CKA-like matrix whose column j peaks at row round(j * (n_a-1)/(n_b-1)) (reversed: the opposite)."""
    rows = np.arange(n_a)[:, None]
    peak = np.linspace(0, n_a - 1, n_b)[None]
    peak = (n_a - 1) - peak if reverse else peak
    return 0.1 + strength * np.exp(-(rows - peak) ** 2)


def _synthetic(trained_strength: float, draw_strengths: list, wobble: float = 0.01):
    """Parts of a trained pair with 5 subsamples (values +- wobble), and a floor of untrained draws (reversed depth)."""
    trained = _diagonal(4, 6, trained_strength)
    subs = [trained + wobble * s for s in (-1, -0.5, 0, 0.5, 1)]
    twin = _diagonal(4, 6, draw_strengths[0], reverse=True)
    parts = {"cross": _part(trained, subs), "cross_head": _part(trained, subs),
             "twin_cross": _part(twin, [twin] * 5), "twin_cross_head": _part(twin, [twin] * 5)}
    draws = [_diagonal(4, 6, s, reverse=True) for s in draw_strengths]
    floor = {"seeds": [7, 8, 9, 10, 11], "values": {"cross": draws, "cross_head": draws},
             "null": {"R2": [0.05] * 20, "R2_head": [0.05] * 20, "R3": list(np.linspace(-0.5, 0.5, 20)),
                      "R3_head": list(np.linspace(-0.5, 0.5, 20))}, "shuffles": 20}
    return parts, floor


def test_each_verdict_carries_every_draw_its_seeds_and_the_null():
    parts, floor = _synthetic(0.8, [0.3, 0.2, 0.5, 0.4, 0.35])
    judged = rc.judged(parts, False, 0.9, floor)
    assert set(judged) == {"R2", "R3"}
    for claim, statistic in (("R2", rc.best_match_last), ("R3", rc.depth_correlation)):
        for reading, v in judged[claim].items():
            x = "_head" if reading == "head" else ""
            assert v.floor_seeds == [7, 8, 9, 10, 11]
            assert v.floor_draws == pytest.approx([statistic(m) for m in floor["values"][f"cross{x}"]])
            assert v.null == floor["null"][f"{claim}{x}"]
            assert v.spread_rule == rc.NO_SPREAD_RULE and v.spread == 0.0 and v.unit == rc.UNIT
            line = rc._effect_text(v)
            assert "over 5 draws (seeds 7-11)" in line and "shuffled-image null" in line
    # R2: best match 0.9 against draws up to 0.6: learned, and above the null (0.05): stated
    assert rc.learned(judged["R2"]) and "Both readings agree that" in rc.sentences(judged, "A", "B", {"a": "a", "b": "b"})[0]
    # R3: the trained depth correlation is high, every draw's is negative: learned
    assert judged["R3"]["head"].effects[0] > 0.9 > max(judged["R3"]["head"].floor_draws)


def test_a_draw_above_the_trained_pair_makes_it_not_learned():
    """One untrained draw alone (seed 9) matches better than the trained pair: the comparison is not stated."""
    parts, floor = _synthetic(0.5, [0.3, 0.2, 0.9, 0.4, 0.35])
    judged = rc.judged(parts, False, 0.9, floor)
    v = judged["R2"]["head"]
    assert v.shown == 1 and v.tag == "learned in 0 of 1" and not rc.learned(judged["R2"])
    assert v.robustness.startswith("depends") and "7, 8" in v.robustness  # any other draw alone: learned, named
    assert "NOT shown" in rc.sentences(judged, "A", "B", {"a": "a", "b": "b"})[0]


def test_a_statistic_at_chance_with_shuffled_images_is_not_stated():
    """Beyond the untrained draws but not above the shuffled-image null: not stated (helpers.nulls)."""
    parts, floor = _synthetic(0.8, [0.3, 0.2, 0.5, 0.4, 0.35])
    floor["null"]["R2"] = floor["null"]["R2_head"] = [0.95] * 20
    judged = rc.judged(parts, False, 0.9, floor)
    assert judged["R2"]["head"].tag == "" and not rc.beats_null(judged["R2"]["head"])
    assert not rc.learned(judged["R2"]) and "NOT above the shuffled-image null" in rc._effect_text(judged["R2"]["head"])


def test_reference_checkpoints_give_a_named_spread_and_without_any_noise_nothing_is_judged():
    parts, floor = _synthetic(0.8, [0.3, 0.2, 0.5, 0.4, 0.35])
    parts["ref_cross"] = _part(_diagonal(4, 6, 0.7))
    v = rc.judged(parts, False, 0.9, floor)["R2"]["tokens"]
    assert v.spread == pytest.approx(0.1) and v.spread_rule.startswith("borrowed: the reference checkpoints")
    bare = {k: _part(p.full.values) for k, p in parts.items() if not k.startswith("ref_")}  # no subsamples, no reference
    unjudged = rc.judged(bare, False, 0.9, floor)
    assert all(rc.unjudged(by_reading) for by_reading in unjudged.values())
    assert unjudged["R3"]["head"].floor_seeds == [7, 8, 9, 10, 11]  # the draws are still recorded


def test_draws_are_built_right_after_seeding_and_start_at_the_base_seed():
    """Draw s of each architecture equals helpers.floors.untrained(name, s); --seed 3 gives draws 3..7."""
    assert draw_seeds(3) == [3, 4, 5, 6, 7] and len(draw_seeds(0)) == FLOOR_DRAWS
    like = floors.untrained("lite-vit", 0)
    settings = report.Settings(model_a="lite-vit", model_b="lite-resnet")
    state = torch.random.get_rng_state()
    a, b = draw_models(settings, like, like, 3)
    assert torch.equal(state, torch.random.get_rng_state())  # the global random state is left alone
    for got, name in ((a, "lite-vit"), (b, "lite-resnet")):
        expected = floors.untrained(name, 3)
        assert all(torch.equal(p, q) for p, q in zip(got.state_dict().values(), expected.state_dict().values()))
    other = draw_models(settings, like, like, 4)[0]
    assert not torch.equal(next(a.parameters()), next(other.parameters()))


def test_bad_out_is_a_clear_error(tmp_path, capsys):
    """--out naming a file, or a folder under a file, stops with a message (exit status 2), not a traceback."""
    file = tmp_path / "notes.txt"
    file.write_text("mine")
    assert report.main(["--out", str(file)]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a folder" in err and "Traceback" not in err
    assert report.main(["--out", str(file / "report")]) == 2
    err = capsys.readouterr().err
    assert "cannot write there" in err and "Traceback" not in err
    assert file.read_text() == "mine"
