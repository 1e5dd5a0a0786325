"""Estimate how long a learner needs for each notebook, by one stated method, and write it where it is shown.

    python scripts/estimate_minutes.py            # print the estimate and its parts for every notebook
    python scripts/estimate_minutes.py --write    # also write it into the course maps and title cells

No learner was timed: the minutes are counted from the notebook itself, at rates stated here,
    prose read at 100 words a minute (technical text with formulas, read to be understood),
  + code read and run at 10 lines a minute (comment lines not counted),
  + each exercise's own stated time,
  + 2 minutes for each interactive widget,
  + the lite track's execution time, from the timings nbclient stored in the executed notebook,
rounded up to 5 minutes. Written into: the course maps of README.md, README.zh.md and notebook 00, and
the "Time" line of each notebook's title cell. Rerun after a notebook grows or shrinks.
"""

from __future__ import annotations

import json
import math
import re
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launch import render  # noqa: E402  (the repository's notebook JSON format)

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
WORDS_PER_MINUTE, CODE_LINES_PER_MINUTE, MINUTES_PER_WIDGET = 100, 10, 2
TIME_LINE = re.compile(r"(\*\*(?:Time:\*\*|Estimated time\.\*\*) [Aa]bout )(\d+)( minutes)")


def _text(cell: dict) -> str:
    return "".join(cell["source"])


def execution_minutes(notebook: dict) -> float:
    """Wall time from the first cell's start to the last cell's reply, as stored by nbclient."""
    stamps = [datetime.fromisoformat(cell["metadata"]["execution"][key].replace("Z", "+00:00"))
              for cell in notebook["cells"] if "execution" in cell.get("metadata", {})
              for key in ("iopub.execute_input", "shell.execute_reply") if key in cell["metadata"]["execution"]]
    return (max(stamps) - min(stamps)).total_seconds() / 60 if stamps else 0.0


def parts(notebook: dict) -> dict:
    """The counted parts of one notebook's estimate, in minutes."""
    prose = " ".join(_text(c) for c in notebook["cells"] if c["cell_type"] == "markdown")
    code = [line for c in notebook["cells"] if c["cell_type"] == "code" for line in _text(c).splitlines()
            if line.strip() and not line.strip().startswith("#")]
    exercises = [int(m) for m in re.findall(r"(?:Difficulty|importance)[^\n]*?[Aa]bout (\d+) min", prose)]
    widgets = sum(_text(c).count("interact") for c in notebook["cells"] if c["cell_type"] == "code")
    return {"reading": len(re.findall(r"[A-Za-z0-9]+", prose)) / WORDS_PER_MINUTE,
            "code": len(code) / CODE_LINES_PER_MINUTE, "exercises": sum(exercises),
            "widgets": MINUTES_PER_WIDGET * widgets, "execution": execution_minutes(notebook)}


def estimate(notebook: dict) -> int:
    return 5 * math.ceil(sum(parts(notebook).values()) / 5)


def set_map_minutes(text: str, name: str, column: int, minutes: int) -> str:
    """`text` with the `column`-th cell of the table row linking to notebook `name` set to `minutes`."""
    def fix(row: re.Match) -> str:
        cells = row.group(0).split("|")
        cells[column + 1] = f" {minutes} "
        return "|".join(cells)
    return re.sub(rf"^\|[^\n]*\]\((?:notebooks/)?{re.escape(name)}\)[^\n]*$", fix, text, flags=re.M)


def write(estimates: dict) -> None:
    for readme, column in (("README.md", 2), ("README.zh.md", 3)):
        path = ROOT / readme
        text = path.read_text(encoding="utf-8")
        for name, minutes in estimates.items():
            text = set_map_minutes(text, name, column, minutes)
        path.write_text(text, encoding="utf-8")
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        title = TIME_LINE.sub(lambda m: f"{m.group(1)}{estimates[path.name]}{m.group(3)}", _text(notebook["cells"][0]))
        notebook["cells"][0]["source"] = title.splitlines(keepends=True)
        if path.name.startswith("00_"):
            for cell in notebook["cells"]:
                if _text(cell).startswith("## 1. The course map"):
                    text = _text(cell)
                    for name, minutes in estimates.items():
                        text = set_map_minutes(text, name, 2, minutes)
                    cell["source"] = text.splitlines(keepends=True)
        path.write_text(render(notebook), encoding="utf-8")


def main(argv: list[str]) -> int:
    estimates = {}
    print(f"{'notebook':38s} reading  code  exercises  widgets  run  -> minutes")
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        p, estimates[path.name] = parts(notebook), estimate(notebook)
        print(f"{path.name:38s} {p['reading']:6.0f} {p['code']:5.0f} {p['exercises']:9.0f} {p['widgets']:8.0f} "
              f"{p['execution']:4.1f}  -> {estimates[path.name]}")
    if "--write" in argv:
        write(estimates)
        print("written into README.md, README.zh.md, notebook 00's map and every title cell; "
              "then run: python scripts/make_student_notebooks.py")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
