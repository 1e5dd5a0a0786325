"""The scorecard is never stale: RESULTS.md, notebook 00 and each findings notebook agree with the saved verdicts.

The lite verdicts are committed in data/verdicts/lite/NN.json (python -m helpers.scorecard --commit lite,
after re-running notebooks 06-15). Each findings notebook ends with a `# NBVAL_CHECK_OUTPUT` cell that
prints its verdict words, so nbval fails when a re-run gives another verdict; these tests tie the
committed outputs, the committed verdicts and RESULTS.md together.
"""

import json

import pytest

from helpers import scorecard, verdicts
from helpers.claims import CLAIMS, SIZES, claims_of
from helpers.course import NOTEBOOKS_DIR, REPO_ROOT

FINDINGS = sorted({c.notebook for c in CLAIMS.values()})


def _notebook(number: str) -> dict:
    (path,) = NOTEBOOKS_DIR.glob(f"{number}_*.ipynb")
    return json.loads(path.read_text())


def _checked_output(cell: dict) -> str:
    """The printed text of a cell (a saved notebook keeps it as a string or as a list of lines)."""
    texts = (o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
    return "".join("".join(t) if isinstance(t, list) else t for t in texts)


def test_every_claim_has_a_committed_lite_verdict():
    lite = scorecard.committed("lite")
    assert sorted(lite) == sorted(CLAIMS), f"claims without a lite verdict: {sorted(set(CLAIMS) - set(lite))}"


def test_results_md_is_generated_from_the_committed_verdicts():
    expected = scorecard.render(scorecard.committed("lite"), scorecard.committed("full"), scorecard.committed_other_measures("lite"))
    assert (REPO_ROOT / "RESULTS.md").read_text() == expected, \
        "RESULTS.md is stale: run `python -m helpers.scorecard --commit lite` after re-running notebooks 06-15"


def test_notebook_00_shows_the_committed_counts_and_two_examples():
    cells = [c for c in _notebook("00")["cells"] if c["cell_type"] == "code" and "scorecard.examples(" in "".join(c["source"])
             and "# NBVAL_CHECK_OUTPUT" in "".join(c["source"])]
    assert len(cells) == 1, "notebook 00 has one checked cell that prints the counts and two example claims"
    lite = scorecard.committed("lite")
    assert _checked_output(cells[0]) == scorecard.counts(lite) + "\n" + scorecard.examples(lite) + "\n", \
        "notebook 00's scorecard is stale: re-run it after `python -m helpers.scorecard --commit lite`"


def _all_output(number: str) -> str:
    return "".join(_checked_output(c) for c in _notebook(number)["cells"] if c["cell_type"] == "code")


@pytest.mark.parametrize("number", FINDINGS)
def test_findings_notebook_prints_the_committed_verdicts(number):
    cells = [c for c in _notebook(number)["cells"] if c["cell_type"] == "code"
             and "verdicts.show_words(" in "".join(c["source"])]
    assert len(cells) == 1, f"notebook {number} has one cell that prints its verdict words"
    assert "".join(cells[0]["source"]).startswith("# NBVAL_CHECK_OUTPUT"), "nbval must check the verdict words"
    record = json.loads((scorecard.COMMITTED / "lite" / f"{number}.json").read_text())
    assert sorted(v["claim"] for v in record["verdicts"]) == sorted(claims_of(number))
    judged = [verdicts.from_record(v) for v in record["verdicts"]]
    words = "".join(f"{v.claim:6s} {v.words()}\n" for v in judged)
    assert _checked_output(cells[0]) == words, f"notebook {number}'s verdicts differ from data/verdicts/lite/{number}.json"
    printed = _all_output(number)
    for v in judged:  # every number RESULTS.md shows is the number the notebook printed (6 decimals saved)
        assert v.numbers() in printed, f"notebook {number} does not print {v.claim}'s numbers as RESULTS.md shows them"


@pytest.mark.parametrize("number", FINDINGS)
def test_every_judged_claim_records_its_protocol(number):
    """Floor over >= 5 recorded draws (or why there is none), the spread's rule, and the unit of replication."""
    for v in verdicts.load("lite", root=scorecard.COMMITTED).values():
        if v.claim not in claims_of(number) or v.kind == "not measured":
            continue
        assert v.spread_rule and v.unit, f"{v.claim} records no spread rule or unit"
        assert v.spread_rule == verdicts.SPREAD_RULE or v.spread_rule.startswith("borrowed: "), v.spread_rule
        if v.alike:
            assert v.floor_draws is None, f"{v.claim} is a sameness claim: no floor"
        elif v.floor_draws is None:
            assert "no untrained floor" in v.note, f"{v.claim} has neither floor draws nor a note saying why ('no untrained floor: ...')"
        else:
            assert len(v.floor_draws) >= verdicts.FLOOR_MIN and len(v.floor_seeds) == len(v.floor_draws)
        if v.claim in SIZES:
            assert v.size, f"{v.claim} is a size claim: its verdict must judge the size"


def test_every_committed_verdict_follows_from_its_recorded_inputs():
    """Judged again from what its JSON records (effects or partner effects, intervals, spread or where it was
    borrowed, floor draws and seeds, unit): the same words, tag, learned count and size words."""
    for claim, v in sorted(verdicts.load("lite", root=scorecard.COMMITTED).items()):
        if v.kind == "not measured":
            continue
        borrowed = v.spread_rule.startswith("borrowed: ")
        again = verdicts.judge(claim, v.partners or v.effects, v.intervals, floor_draws=v.floor_draws,
                               floor_seeds=v.floor_seeds, unit=v.unit, replicated=v.replicated, seeds=v.seeds or None,
                               alike=v.alike, null=v.null, spread=v.spread if borrowed else None,
                               spread_source=v.spread_rule.removeprefix("borrowed: ") if borrowed else "")
        for key in ("verdict", "kind", "tag", "learned", "size"):
            assert getattr(again, key) == getattr(v, key), (claim, key, getattr(again, key), getattr(v, key))
        # the spread is a range of effects saved to 6 decimals: up to 3 roundings of 5e-7 apart
        assert again.spread == pytest.approx(v.spread, abs=1.5e-6), claim


@pytest.mark.parametrize("path", sorted(NOTEBOOKS_DIR.glob("*.ipynb")), ids=lambda p: p.stem[:2])
def test_no_notebook_stops_on_a_claim_or_speaks_to_maintainers(path):
    text = "".join("".join(c["source"]) + _checked_output(c) for c in json.loads(path.read_text())["cells"])
    assert "course.claim(" not in text, f"{path.name} still stops on an unmet claim (course.claim): judge it with helpers.verdicts"
    assert "update the text" not in text.lower(), f"{path.name} speaks to maintainers ('update the text')"


def test_notebook_17_prints_the_committed_survival_table():
    record = scorecard.committed_other_measures("lite")
    assert record is not None, "data/verdicts/other_measures/17_survival_lite.json is missing: run notebook 17, then --commit lite"
    cells = [c for c in _notebook("17")["cells"] if c["cell_type"] == "code" and "# NBVAL_CHECK_OUTPUT" in "".join(c["source"])]
    assert len(cells) == 1, "notebook 17 has one checked cell that prints the survival table"
    columns = list(record["rows"][0])
    expected = " | ".join(columns) + "\n" + "".join(" | ".join(row[c] for c in columns) + "\n" for row in record["rows"])
    assert _checked_output(cells[0]) == expected, "notebook 17's survival table differs from the committed one"
    assert "## Other measures (notebook 17)" in (REPO_ROOT / "RESULTS.md").read_text()
