"""Student copies are generated, never edited by hand: this fails when they are stale."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("make_student", ROOT / "scripts" / "make_student_notebooks.py")
make_student = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_student)


def test_student_copies_are_up_to_date():
    expected = make_student.expected_copies()
    assert expected, "no notebook has exercises (### BEGIN SOLUTION blocks)"
    for path, text in expected.items():
        assert path.exists(), f"{path.name}: student copy missing. Run: python scripts/make_student_notebooks.py"
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.name}: student copy is stale. Run: python scripts/make_student_notebooks.py")
    committed = set(make_student.STUDENT_DIR.glob("*.ipynb"))
    assert committed == set(expected), f"orphaned student copies: {committed - set(expected)}"


def test_stubs_replace_solutions():
    source = "def f(x):\n    y = 1\n    ### BEGIN SOLUTION\n    return x + y\n    ### END SOLUTION\n"
    stub = make_student.stub_cell_source(source)
    assert "return x + y" not in stub
    assert '    raise NotImplementedError("Exercise: write `f`' in stub
    for path in make_student.expected_copies():
        nb = json.loads(path.read_text(encoding="utf-8"))
        code = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
        assert "### BEGIN SOLUTION" not in code
