"""The course maps agree: README.md, README.zh.md and notebook 00 list the notebooks that exist, the Chinese
titles in README.zh.md are the ones under each notebook's title, both glossaries define the same terms, and the
suite's slowest-first list (conftest.py) names files that exist."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _section(text: str, heading: str) -> str:
    """The text under a markdown heading, up to the next heading of the same or a higher level."""
    found = re.search(rf"^(#+) {re.escape(heading)}\s*$", text, re.M)
    assert found, f"no heading {heading!r}"
    level = len(found.group(1))
    end = re.compile(rf"^#{{1,{level}}} ", re.M).search(text, found.end())
    return text[found.end(): end.start() if end else len(text)]


def _table_rows(section: str) -> list[list[str]]:
    """The body rows of the section's first table, as lists of stripped cells."""
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    rows = lines[start:end]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def _linked_notebooks(section: str) -> list[str]:
    return re.findall(r"\]\((?:\.\./)?(?:notebooks/)?(\d\d_[a-z_]+\.ipynb)\)", section)


def _readme(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def _title_cell(name: str) -> str:
    nb = json.loads((ROOT / "notebooks" / name).read_text(encoding="utf-8"))
    return "".join(nb["cells"][0]["source"])


def test_every_map_lists_exactly_the_notebooks_that_exist():
    english = _linked_notebooks(_section(_readme("README.md"), "Course map"))
    chinese = _linked_notebooks(_section(_readme("README.zh.md"), "课程地图"))
    nb00 = json.loads((ROOT / "notebooks" / "00_start_here.ipynb").read_text(encoding="utf-8"))
    course_map = next("".join(c["source"]) for c in nb00["cells"] if "".join(c["source"]).startswith("## 1. The course map"))
    assert english == NOTEBOOKS, "README.md's course map"
    assert chinese == NOTEBOOKS, "README.zh.md's course map"
    assert _linked_notebooks(course_map) == NOTEBOOKS, "notebook 00's course map"


def test_the_two_maps_give_the_same_minutes_and_the_chinese_titles_sit_under_each_title():
    english = {_linked_notebooks(r[0])[0]: r for r in _table_rows(_section(_readme("README.md"), "Course map"))}
    for row in _table_rows(_section(_readme("README.zh.md"), "课程地图")):
        name, title, minutes = _linked_notebooks(row[0])[0], row[1], row[3]
        assert minutes == english[name][2], f"{name}: minutes differ between README.md and README.zh.md"
        lines = _title_cell(name).split("\n")
        assert lines[0].startswith(f"# {name[:2]} · "), f"{name}: the first line must be its title"
        assert lines[1] == f"*中文：{title}*", f"{name}: the line under the title must be *中文：{title}*"


def test_both_glossaries_define_the_same_terms():
    english = [r[0] for r in _table_rows(_section(_readme("README.md"), "Glossary"))]
    chinese = [r[0] for r in _table_rows(_section(_readme("README.zh.md"), "术语表"))]
    assert english == chinese
    assert len(english) >= 15 and all(r[-1] for r in _table_rows(_section(_readme("README.zh.md"), "术语表")))


def test_readmes_link_each_other():
    assert "(README.zh.md)" in _readme("README.md") and "(README.md)" in _readme("README.zh.md")


def test_no_markdown_cell_is_a_bare_placeholder():
    """A markdown cell that is only a token like VARIANT_TEXT is a draft's placeholder that never got its text."""
    for name in NOTEBOOKS:
        nb = json.loads((ROOT / "notebooks" / name).read_text(encoding="utf-8"))
        for i, cell in enumerate(nb["cells"]):
            text = "".join(cell["source"]).strip()
            if cell["cell_type"] == "markdown":
                assert not re.fullmatch(r"[A-Z][A-Z0-9_]*", text), f"{name}, cell {i}: placeholder {text!r} instead of text"


def test_the_suites_slowest_first_list_names_files_that_exist():
    """conftest.py's SLOWEST_FIRST orders the suite by file; a renamed file would silently drop out of it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    root_conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(root_conftest)
    missing = [path for path in root_conftest.SLOWEST_FIRST if not (ROOT / path).is_file()]
    assert not missing, f"conftest.py's SLOWEST_FIRST names files that do not exist: {missing}"
    assert len(set(root_conftest.SLOWEST_FIRST)) == len(root_conftest.SLOWEST_FIRST)
