"""helpers.grade on a small class built from the real notebooks: solved, unsolved, partly solved, and
every hostile case of issue 36, each contained, with every other grade unaffected (the exact grades.csv).

The 30-submission run is benchmarks/bench_grade.py.
"""

import json
import os
import socket
from pathlib import Path

import nbformat
import pytest

from helpers import grade, grade_sandbox

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
LIMITS = grade_sandbox.Limits(seconds=15, step_seconds=8, cpu_seconds=15, memory_mb=1500)

pytestmark = pytest.mark.skipif(grade_sandbox.probe() == "process",
                                reason="no Linux namespaces here: the file and network isolation cases cannot hold")


def with_function(notebook: str, function: str, source: str, student=False):
    """The solution (or student copy) of `notebook` with the cell defining `function` replaced by `source`."""
    nb = nbformat.read(NOTEBOOKS / ("student" if student else "") / notebook, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and f"def {function}(" in c.source)
    cell.source = source
    return nb


def solution_cell(notebook: str, function: str) -> str:
    nb = nbformat.read(NOTEBOOKS / notebook, as_version=4)
    return next(c.source for c in nb.cells if c.cell_type == "code" and f"def {function}(" in c.source)


HOSTILE = {
    # a loop that also swallows the per-step alarm: only the wall-clock kill can stop it
    "endless_loop": "import signal, time\ndef gram_linear(X):\n    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
                    "    while True:\n        time.sleep(0.05)\n",
    "memory_bomb": "def gram_linear(X):\n    hoard = []\n    while True:\n        hoard.append(b'x' * 10**8)\n",
    "fork_bomb": "import os, time\ndef gram_linear(X):\n    for _ in range(500):\n        if os.fork() == 0:\n"
                 "            time.sleep(120)\n            os._exit(0)\n    return X @ X.T\n",
    "reads_other": "def gram_linear(X):\n    open({other!r}).read()\n    return X @ X.T\n",
    "writes_outside": "def gram_linear(X):\n    open({target!r}, 'w').write('pwned')\n    return X @ X.T\n",
    "network": "import socket\ndef gram_linear(X):\n    socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'answers')\n"
               "    return X @ X.T\n",
    "patches_check": "import numpy\nnumpy.allclose = lambda *a, **k: True\nnumpy.isclose = lambda *a, **k: True\n"
                     "try:\n    import helpers.exercises\n    helpers.exercises.check_gram_linear = lambda fn: None\n"
                     "except ImportError:\n    pass\ndef gram_linear(X):\n    return X.T @ X\n",
    "fake_print": "def gram_linear(X):\n    print('✔ gram_linear matches helpers.cka on all 4 cases.')\n    return 0 * X @ X.T\n",
}

EXPECTED = """\
student,notebook,1.1 gram_linear,1.2 gram_rbf,4.1 hsic_unbiased,4.2 minibatch_cka,total,out_of
solved,01_gram_matrices,pass,pass,,,2,2
unsolved,01_gram_matrices,fail,fail,,,0,2
partly_solved,04_minibatch_cka,,,pass,fail,1,2
endless_loop,01_gram_matrices,error,error,,,0,2
memory_bomb,01_gram_matrices,error,pass,,,1,2
fork_bomb,01_gram_matrices,error,pass,,,1,2
reads_other,01_gram_matrices,error,pass,,,1,2
writes_outside,01_gram_matrices,error,pass,,,1,2
network,01_gram_matrices,error,pass,,,1,2
patches_check,01_gram_matrices,fail,pass,,,1,2
fake_print,01_gram_matrices,fail,pass,,,1,2
corrupt,"unreadable: not valid JSON (Expecting ':' delimiter at line 1, column 26)",,,,,0,0
other_course,not a course notebook,,,,,0,0
"""


def sandbox_processes() -> list:
    """Pids of processes running as a sandbox user (there should be none once grading is over)."""
    return [pid for uid in range(grade_sandbox.FIRST_UID, grade_sandbox.FIRST_UID + 8)
            for pid in grade_sandbox.processes_of(uid)]


@pytest.fixture
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    yield server
    server.close()


def test_a_class_with_every_hostile_case(tmp_path, listener):
    submissions = tmp_path / "class"
    submissions.mkdir()
    outside = tmp_path / "outside.txt"
    port = listener.getsockname()[1]
    write = lambda name, nb: nbformat.write(nb, submissions / f"{name}.ipynb")  # noqa: E731

    write("solved", nbformat.read(NOTEBOOKS / "01_gram_matrices.ipynb", as_version=4))
    write("unsolved", nbformat.read(NOTEBOOKS / "student" / "01_gram_matrices.ipynb", as_version=4))
    write("partly_solved", with_function("04_minibatch_cka.ipynb", "hsic_unbiased",
                                         solution_cell("04_minibatch_cka.ipynb", "hsic_unbiased"), student=True))
    for name, source in HOSTILE.items():
        source = source.format(other=str(submissions / "solved.ipynb"), target=str(outside), port=port)
        write(name, with_function("01_gram_matrices.ipynb", "gram_linear", source))
    (submissions / "corrupt.ipynb").write_text('{"cells": [], "metadata" {}}')
    other = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Pandas for biologists\n## Exercise 1"),
                                            nbformat.v4.new_code_cell("def gram_linear(X):\n    return X @ X.T")])
    write("other_course", other)

    order = ["solved", "unsolved", "partly_solved", *HOSTILE, "corrupt", "other_course"]
    paths = [submissions / f"{name}.ipynb" for name in order]
    out = tmp_path / "grades"
    results = grade.grade_class(paths, out, limits=LIMITS, workers=2, progress=False)

    assert (out / "grades.csv").read_text() == EXPECTED
    assert sorted(p.stem for p in (out / "feedback").iterdir()) == sorted(order)
    assert not outside.exists(), "a submission wrote outside its folder"
    with pytest.raises(BlockingIOError):  # nothing ever connected to the teacher's loopback
        listener.accept()
    assert sandbox_processes() == [], "processes of a sandbox outlived it (the fork bomb)"

    messages = {r.student: r.messages for r in results}
    assert "time limit" in messages["endless_loop"]["1.1 gram_linear"]
    assert "MemoryError" in messages["memory_bomb"]["1.1 gram_linear"]
    assert "BlockingIOError" in messages["fork_bomb"]["1.1 gram_linear"]
    assert "No such file" in messages["reads_other"]["1.1 gram_linear"]
    assert "unreachable" in messages["network"]["1.1 gram_linear"]
    assert "largest difference" in messages["fake_print"]["1.1 gram_linear"]
    assert "NotImplementedError" in messages["unsolved"]["1.1 gram_linear"]
    feedback = (out / "feedback" / "fake_print.md").read_text()
    assert "| 1.1 gram_linear | fail |" in feedback and "✔" not in feedback


def test_recognised_by_headings_not_file_name(tmp_path):
    """A renamed notebook is still recognised; the notebook's exercises come from its solution cells."""
    course = grade.course_notebooks()
    nb = nbformat.read(NOTEBOOKS / "student" / "03_cka.ipynb", as_version=4)
    assert grade.recognise(nb.cells, course).name == "03_cka"
    by_name = {c.name: c for c in course}
    assert [e.column for e in by_name["04_minibatch_cka"].exercises] == ["4.1 hsic_unbiased", "4.2 minibatch_cka"]
    assert [e.column for e in by_name["08_local_and_global_attention"].exercises] == ["8.1 value", "8.2 head_distances"]
    assert by_name["16_compare_your_models"].exercises == []


def test_every_function_exercise_is_graded_or_skipped_with_a_reason():
    from helpers.grade_cases import EXERCISES, SKIPPED

    functions = {e.function for nb in grade.course_notebooks() for e in nb.exercises if e.function}
    assert functions == set(EXERCISES) | set(SKIPPED)


def test_answers_are_read_without_pickle(tmp_path):
    """An object array planted by the student's code is not loaded (no pickle), so it counts as no answer."""
    import numpy as np

    (tmp_path / "out").mkdir()
    np.save(tmp_path / "out" / "gram_linear.0.npy", np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    assert grade.read_answers(tmp_path, "gram_linear.0") == {}
    json.dumps(grade.read_progress(tmp_path))  # no progress file: no events, no error
