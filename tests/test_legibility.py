"""Issue 42's reading targets for the findings notebooks (06-17): the answer first, and prose a tired learner can
finish. Counted on the markdown cells only (code and its printed numbers do not count)."""

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted(p for p in (Path(__file__).parents[1] / "notebooks").glob("*.ipynb") if 6 <= int(p.name[:2]) <= 17)
MAX_WORDS = 3000     # markdown words per notebook
MAX_DECIMALS = 30    # numbers like 0.73 typed into markdown (results belong in printed output, where they cannot go stale)


def markdown(path: Path) -> list:
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown"]


def typed_decimals(text: str) -> list:
    return re.findall(r"(?<![\w.])[-+]?\d+\.\d+", text)


def test_the_counters_count_what_they_say():
    # claim numbers (F1.5) and versions (v2.0) are names, not typed results
    assert typed_decimals("CKA 0.73, F1.5 and 12 blocks; -0.5 and v2.0") == ["0.73", "-0.5"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_findings_notebook_meets_the_reading_targets(path):
    text = "\n".join(markdown(path))
    words = len(text.split())
    decimals = typed_decimals(text)
    assert words <= MAX_WORDS, f"{path.name}: {words} markdown words (at most {MAX_WORDS}); move detail to a 'For the sceptic' section or cut it"
    assert len(decimals) <= MAX_DECIMALS, (f"{path.name}: {len(decimals)} typed decimals in markdown (at most {MAX_DECIMALS}), "
                                           f"e.g. {decimals[:8]}: print results from code instead")


TITLE_WORDS = 150  # the title cell (title, prerequisites, time, cost, badges) leaves the answer on the first screen


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_findings_notebook_leads_with_its_answer(path):
    """The first screen shows the answer: the title cell is short, and the next cell is '## In short' (before the
    set-up code and the introduction)."""
    cells = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]]
    title = re.sub(r"\(https?://[^)]*\)", "", cells[0])  # badge links are not words a learner reads
    assert len(title.split()) <= TITLE_WORDS, f"{path.name}: {len(title.split())} words before the answer; move the introduction below '## In short'"
    assert cells[1].startswith("## In short"), f"{path.name}: the cell after the title is not '## In short'"
