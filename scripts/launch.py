"""Write every notebook's launch links from one place: its Colab and Binder badges and its Colab set-up.

Where the course lives (repository slug and branch) is set once, in pyproject.toml:

    [tool.course.launch]
    repository = "vit-cnn-course/vit-cnn-course"
    branch = "main"

After changing it, one command rewrites every notebook and student copy:

    python scripts/launch.py            # rewrite badges and set-up blocks, regenerate the student copies
    python scripts/launch.py --check    # list the notebooks that disagree, exit 1 if any (the tests do this)

What is written:
- the last line of each notebook's first (title) cell: the badges, pointing at that very file
  (a student copy's badges open the student copy, not the solutions);
- the top of its first code cell: the Colab block, between the line `# Set-up: run me first ...` and
  `# (end of the launch block)`. On Colab it clones the course and runs scripts/colab_setup.py,
  which installs only what the runtime lacks (never torch); elsewhere it does nothing.
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
BADGE_START = "[![Open In Colab]"
BLOCK_FIRST = "# Set-up: run me first."
BLOCK_LAST = "# (end of the launch block)"


def launch_config(pyproject: Path = ROOT / "pyproject.toml") -> tuple[str, str]:
    """(repository slug 'owner/name', branch) from pyproject.toml's [tool.course.launch]."""
    table = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {}).get("course", {}).get("launch")
    if not table or "repository" not in table or "branch" not in table:
        raise SystemExit(f"{pyproject}: add a [tool.course.launch] table with `repository` and `branch`.")
    slug, branch = table["repository"].strip(), table["branch"].strip()
    if slug.count("/") != 1 or not all(slug.split("/")):
        raise SystemExit(f"[tool.course.launch] repository = {slug!r}: write it as 'owner/name'.")
    return slug, branch


def badge_line(relative_path: str, slug: str, branch: str) -> str:
    """The Colab and Binder badges for the notebook at `relative_path` (e.g. 'notebooks/05_x.ipynb')."""
    colab = f"https://colab.research.google.com/github/{slug}/blob/{branch}/{relative_path}"
    binder = f"https://mybinder.org/v2/gh/{slug}/{branch}?labpath={quote(relative_path, safe='')}"
    return (f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab}) "
            f"[![Binder](https://mybinder.org/badge_logo.svg)]({binder})")


def colab_block(slug: str, branch: str) -> str:
    """The Colab block that opens every notebook's first code cell (does nothing off Colab)."""
    folder = slug.split("/")[1]
    return f'''{BLOCK_FIRST} On Colab it fetches the course and installs only what Colab lacks (never torch).
import sys
if "google.colab" in sys.modules:  # written by scripts/launch.py from pyproject.toml: edit there, not here
    import os, subprocess
    if not os.path.isdir("{folder}"):
        subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", "{branch}",
                        "https://github.com/{slug}", "{folder}"], check=True)
    subprocess.run([sys.executable, "{folder}/scripts/colab_setup.py"], check=True)
    sys.path.insert(0, os.path.abspath("{folder}"))
{BLOCK_LAST}
'''


def _cell_text(cell: dict) -> str:
    return "".join(cell["source"])


def _set_cell_text(cell: dict, text: str) -> None:
    cell["source"] = text.splitlines(keepends=True)


def with_badges(title: str, badges: str) -> str:
    """The title cell's text with its badge line replaced (or appended after a blank line)."""
    lines = [line for line in title.rstrip("\n").split("\n") if not line.startswith(BADGE_START)]
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines + ["", badges])


def with_block(code: str, block: str, where: str) -> str:
    """The first code cell's text with its launch block replaced; `where` names the notebook in errors."""
    lines = code.splitlines(keepends=True)
    first = next((i for i, line in enumerate(lines) if line.startswith(BLOCK_FIRST)), None)
    last = next((i for i, line in enumerate(lines) if line.rstrip("\n") == BLOCK_LAST), None)
    if first is None or last is None or last < first:
        raise SystemExit(f"{where}: its first code cell must contain the launch block, from a line starting "
                         f"{BLOCK_FIRST!r} to the line {BLOCK_LAST!r}. Restore them and rerun.")
    return "".join(lines[:first]) + block + "".join(lines[last + 1:])


def apply_launch(notebook: dict, relative_path: str, slug: str, branch: str) -> dict:
    """Write the badges and the Colab block into `notebook` (parsed JSON, changed in place, returned)."""
    cells = notebook["cells"]
    if not cells or cells[0]["cell_type"] != "markdown":
        raise SystemExit(f"{relative_path}: the first cell must be the markdown title cell.")
    _set_cell_text(cells[0], with_badges(_cell_text(cells[0]), badge_line(relative_path, slug, branch)))
    code = next((c for c in cells if c["cell_type"] == "code"), None)
    if code is None:
        raise SystemExit(f"{relative_path}: has no code cell for the set-up.")
    _set_cell_text(code, with_block(_cell_text(code), colab_block(slug, branch), relative_path))
    return notebook


def render(notebook: dict) -> str:
    """The repository's notebook format: one-space indent, UTF-8 kept, a final newline."""
    return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"


def source_notebooks() -> list[Path]:
    return sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))


def relative(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix()


def disagreements() -> list[str]:
    """Notebooks (sources and student copies) whose launch links differ from pyproject.toml."""
    slug, branch = launch_config()
    stale = []
    for path in source_notebooks() + sorted((NOTEBOOK_DIR / "student").glob("*.ipynb")):
        text = path.read_text(encoding="utf-8")
        if render(apply_launch(json.loads(text), relative(path), slug, branch)) != text:
            stale.append(relative(path))
    return stale


def main(argv: list[str]) -> int:
    if "--check" in argv:
        stale = disagreements()
        for name in stale:
            print(f"{name}: launch links disagree with pyproject.toml [tool.course.launch]")
        if stale:
            print("Fix: python scripts/launch.py")
        return 1 if stale else 0
    slug, branch = launch_config()
    for path in source_notebooks():
        text = path.read_text(encoding="utf-8")
        new = render(apply_launch(json.loads(text), relative(path), slug, branch))
        if new != text:
            path.write_text(new, encoding="utf-8")
            print(f"wrote {relative(path)}")
    import make_student_notebooks  # the student copies take the launch links of their own paths

    return make_student_notebooks.main()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
