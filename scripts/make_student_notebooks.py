"""Generate the student copies of the notebooks: solutions replaced by stubs, outputs cleared.

The source notebooks in notebooks/ hold the solutions (they are what CI runs). In a code cell,
the lines between `### BEGIN SOLUTION` and `### END SOLUTION` are the solution; the student copy
replaces them with `raise NotImplementedError(...)` at the same indentation. Copies are written
to notebooks/student/. Run after editing any notebook with exercises:

    python scripts/make_student_notebooks.py
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launch import apply_launch, launch_config, render  # noqa: E402  (launch links; the repository's JSON format)

ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIR = ROOT / "notebooks"
STUDENT_DIR = SOURCE_DIR / "student"
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"


def stub_cell_source(source: str) -> str:
    """Replace every solution block of one code cell by a NotImplementedError stub."""
    out, inside, function = [], False, None
    for line in source.splitlines(keepends=True):
        found = re.match(r"\s*def (\w+)\(", line)
        if found:
            function = found.group(1)
        if line.strip() == BEGIN:
            if inside:
                raise ValueError(f"Nested {BEGIN} in a cell starting {source[:60]!r}")
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            what = f"write `{function}`" if function else "complete this cell"
            out.append(f'{indent}raise NotImplementedError("Exercise: {what} (see the instructions above)")\n')
        elif line.strip() == END:
            if not inside:
                raise ValueError(f"{END} without {BEGIN} in a cell starting {source[:60]!r}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{BEGIN} without {END} in a cell starting {source[:60]!r}")
    return "".join(out)


def student_version(notebook: dict) -> dict:
    """A copy of the notebook (parsed JSON) with stubs for solutions and no outputs."""
    nb = copy.deepcopy(notebook)
    nb["metadata"].pop("widgets", None)  # saved widget state belongs to the executed source only
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        cell["source"] = stub_cell_source("".join(cell["source"]))
        cell["outputs"] = []
        cell["execution_count"] = None
    return nb


def has_exercises(notebook: dict) -> bool:
    return any(BEGIN in "".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")


def expected_copies() -> dict:
    """{student copy path: its text} for every source notebook that has exercises."""
    copies, (slug, branch) = {}, launch_config()
    for path in sorted(SOURCE_DIR.glob("[0-9][0-9]_*.ipynb")):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        if has_exercises(notebook):
            copy_ = apply_launch(student_version(notebook), f"notebooks/student/{path.name}", slug, branch)
            copies[STUDENT_DIR / path.name] = render(copy_)
    return copies


def main() -> int:
    STUDENT_DIR.mkdir(exist_ok=True)
    for path, text in expected_copies().items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
