"""helpers.grade on a small class built from the real notebooks: solved, unsolved, partly solved, and
every hostile case of issue 36, each contained, with every other grade unaffected (the exact grades.csv).

The 30-submission run is benchmarks/bench_grade.py.
"""

import json
import socket

import grade_submissions as subs
import nbformat
import pytest

from helpers import grade
from helpers.grade import sandbox as grade_sandbox

LIMITS = grade_sandbox.Limits(seconds=15, step_seconds=8, cpu_seconds=15, memory_mb=1000)
TEST_HOSTILE = [k for k in subs.HOSTILE if k != "busy_loop"]  # busy_loop costs CPU: the benchmark has it

pytestmark = pytest.mark.skipif(grade_sandbox.probe() == "process",
                                reason="no Linux namespaces here: the file and network isolation cases cannot hold")

EXPECTED = """\
student,notebook,1.1 gram_linear,1.2 gram_rbf,4.1 hsic_unbiased,4.2 minibatch_cka,total,out_of
solved,01_gram_matrices,pass,pass,,,2,2
unsolved,01_gram_matrices,fail,fail,,,0,2
partly_solved,04_minibatch_cka,,,pass,fail,1,2
endless_loop,01_gram_matrices,error,error,,,0,2
memory_bomb,01_gram_matrices,error,pass,,,1,2
fork_bomb,01_gram_matrices,error,pass,,,1,2
segfault,01_gram_matrices,error,pass,,,1,2
exits_in_cell,01_gram_matrices,error,error,,,0,2
reads_other,01_gram_matrices,error,pass,,,1,2
escapes_hiding,01_gram_matrices,error,pass,,,1,2
writes_outside,01_gram_matrices,error,pass,,,1,2
network,01_gram_matrices,error,pass,,,1,2
patches_check,01_gram_matrices,fail,pass,,,1,2
fake_print,01_gram_matrices,fail,pass,,,1,2
corrupt,"unreadable: not valid JSON (Expecting ':' delimiter at line 1, column 26)",,,,,0,0
other_course,not a course notebook,,,,,0,0
"""


def sandbox_processes() -> list:
    """Pids of processes running as a sandbox user (there should be none once grading is over)."""
    return [pid for slot in range(2) for pid in grade_sandbox.processes_of(grade_sandbox.sandbox_uid(slot))]


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

    write("solved", subs.solved("01_gram_matrices"))
    write("unsolved", subs.unsolved("01_gram_matrices"))
    write("partly_solved", subs.partly("04_minibatch_cka", "hsic_unbiased"))
    for kind in TEST_HOSTILE:
        write(kind, subs.hostile(kind, other=str(submissions / "solved.ipynb"), target=str(outside), port=port))
    subs.corrupt(submissions / "corrupt.ipynb")
    write("other_course", subs.other_course())

    order = ["solved", "unsolved", "partly_solved", *TEST_HOSTILE, "corrupt", "other_course"]
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
    assert "segmentation fault" in messages["segfault"]["1.1 gram_linear"]  # and gram_rbf passed in a second run
    assert "ended with code 3 while running cell" in messages["exits_in_cell"]["1.2 gram_rbf"]
    assert "No such file" in messages["reads_other"]["1.1 gram_linear"]
    assert "Operation not permitted" in messages["escapes_hiding"]["1.1 gram_linear"]
    assert "unreachable" in messages["network"]["1.1 gram_linear"]
    assert "largest difference" in messages["fake_print"]["1.1 gram_linear"]
    assert "NotImplementedError" in messages["unsolved"]["1.1 gram_linear"]
    feedback = (out / "feedback" / "fake_print.md").read_text()
    assert "| 1.1 gram_linear | fail |" in feedback and "✔" not in feedback


def test_recognised_by_headings_not_file_name(tmp_path):
    """A renamed notebook is still recognised; the notebook's exercises come from its solution cells."""
    course = grade.course_notebooks()
    assert grade.recognise(subs.unsolved("03_cka").cells, course).name == "03_cka"
    by_name = {c.name: c for c in course}
    assert [e.column for e in by_name["04_minibatch_cka"].exercises] == ["4.1 hsic_unbiased", "4.2 minibatch_cka"]
    assert [e.column for e in by_name["08_local_and_global_attention"].exercises] == ["8.1 value", "8.2 head_distances"]
    assert [e.column for e in by_name["16_compare_your_models"].exercises] == ["16.1 cka_without_highest"]


def test_every_function_exercise_is_graded_or_skipped_with_a_reason():
    from helpers.grade.cases import EXERCISES, SKIPPED

    functions = {e.function for nb in grade.course_notebooks() for e in nb.exercises if e.function}
    assert functions == set(EXERCISES) | set(SKIPPED)


def test_answers_are_read_without_pickle(tmp_path):
    """An object array planted by the student's code is not loaded (no pickle), so it counts as no answer."""
    import numpy as np

    (tmp_path / "out").mkdir()
    np.save(tmp_path / "out" / "gram_linear.0.npy", np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    assert grade.read_answers(tmp_path, "gram_linear.0") == {}
    json.dumps(grade.read_progress(tmp_path))  # no progress file: no events, no error


def test_student_names_from_files_and_subfolders(tmp_path):
    for relative in ["alice/01.ipynb", "bob/01.ipynb", "carol.ipynb", ".hidden.ipynb", "x/.ipynb_checkpoints/c.ipynb"]:
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("{}")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "carol.ipynb").write_text("{}")  # another file of the same name: numbered
    # carol.ipynb, inside the folder and given again, is one submission (it was graded twice, as carol and carol_2)
    names = [name for name, _ in grade.find_submissions([tmp_path / "alice", tmp_path / "carol.ipynb",
                                                         tmp_path / "other" / "carol.ipynb", tmp_path])]
    assert names == ["01", "carol", "carol_2", "hidden", "bob_01"]  # the folder adds only what was not given


def test_the_command_line(tmp_path, capsys):
    nbformat.write(subs.solved("03_cka"), tmp_path / "dana.ipynb")
    assert grade.main([str(tmp_path / "dana.ipynb"), "--out", str(tmp_path / "out"), "--seconds", "30"]) == 0
    assert (tmp_path / "out" / "grades.csv").read_text().splitlines()[1] == "dana,03_cka,pass,1,1"
    assert "isolation: " in capsys.readouterr().out


@pytest.mark.parametrize("option, value, message", [
    ("--seconds", "0", "seconds limit must be a positive, finite number"),   # every student timed out, graded 0
    ("--seconds", "nan", "seconds limit must be a positive, finite number"),  # was a traceback
    ("--memory-mb", "0", "memory_mb limit must be a positive, finite number"),
    ("--workers", "0", "workers must be between 1 and"),                      # was a traceback
    ("--out", "FILE", "is a file: give a folder"),                            # was FileExistsError
])
def test_the_command_line_refuses_bad_settings_before_grading(option, value, message, tmp_path, capsys):
    nbformat.write(subs.solved("03_cka"), tmp_path / "dana.ipynb")
    (tmp_path / "FILE").write_text("")
    out = str(tmp_path / "FILE") if value == "FILE" else str(tmp_path / "out")
    argv = [str(tmp_path / "dana.ipynb"), "--out", out] + ([] if option == "--out" else [option, value])
    assert grade.main(argv) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "isolation" not in captured.out  # stopped before the sandbox was probed
    assert not (tmp_path / "out").exists()


def test_limits_of_zero_are_refused():
    with pytest.raises(ValueError, match="cpu_seconds limit"):
        grade_sandbox.Limits(cpu_seconds=0)


def test_cells_sent_to_the_sandbox():
    """The last cell defining each exercise function, cells of definitions only (magics commented out), nothing else."""
    code = nbformat.v4.new_code_cell
    cells = [code("import numpy as np\nK = np.eye(3)"),                  # set-up with state: not run
             code("def gram_linear(X):\n    return 0"),                  # an attempt, redefined below
             code("%time\ndef helper(X):\n    return X @ X.T"),          # the student's helper, a magic
             code("def gram_linear(X):\n    return helper(X)\nprint(gram_linear(K))"),
             code("plot(gram_linear(K))")]                               # uses the function: not run
    sent = grade.cells_to_run(cells, ["gram_linear"])
    assert [c["index"] for c in sent] == [1, 2, 3]
    assert sent[1]["source"].startswith("# %time\n")


def test_cells_are_read_by_several_grading_threads_at_once():
    """The grading threads read their notebooks at the same time. On CPython 3.11, two ast.parse calls at once
    fail with "AST constructor recursion depth mismatch" when Python code runs during one of them (here a
    __del__ of cyclic garbage, made by a thread as a grader's subprocesses and files make it). It failed the
    hostile class once, in a run with a gc callback installed (a profiler's). parse_cell (helpers.grade.grader)
    lets one thread parse at a time; without its lock this test fails in well under a second."""
    import sys
    import threading

    class Cycle:
        def __init__(self):
            self.me = self

        def __del__(self):
            pass

    cells = [nbformat.v4.new_code_cell("def gram_linear(X):\n    return " + "(" * 40 + "X @ X.T" + ")" * 40 + "\n"
                                       + "\n".join(f"y{i} = [{i}, {{'a': ({i}, {i})}}]" for i in range(100)))]
    errors, done = [], threading.Event()

    def garbage():
        while not done.is_set():
            Cycle()

    def grade_cells():
        try:
            for _ in range(40):
                assert [c["index"] for c in grade.cells_to_run(cells, ["gram_linear"])] == [0]
        except Exception as error:  # noqa: BLE001 - reported below, with its type
            errors.append(f"{type(error).__name__}: {error}")

    threads = [threading.Thread(target=garbage)] + [threading.Thread(target=grade_cells) for _ in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        for thread in threads:
            thread.start()
        for thread in threads[1:]:
            thread.join()
    finally:
        done.set()
        threads[0].join()
        sys.setswitchinterval(interval)
    assert errors == []


def test_summary_counts_each_exercise_in_course_order():
    results = [grade.Result("a", "01", True, {"3.1 cka": "pass"}), grade.Result("b", "01", True, {"1.1 gram_linear": "fail"}),
               grade.Result("c", "not a course notebook")]
    assert grade.summary(results).splitlines() == ["  1.1 gram_linear              1 fail", "  3.1 cka                      1 pass",
                                                   "  not graded: c (not a course notebook)"]


@pytest.mark.parametrize("dies, timed_out, runs", [("call", False, 2), ("cell", False, 1), ("call", True, 1), (None, False, 1)])
def test_a_second_run_only_after_a_death_inside_a_function(tmp_path, monkeypatch, dies, timed_out, runs):
    """run_contained with a stand-in sandbox: the process dies in f's first case (or in a cell, or hits the wall
    clock). Only a death inside a function, with time left, gives a second run, and it is given only g's calls."""
    from helpers.grade import grader

    given = []

    def fake_run(job, folder, level, limits, hide, slot):
        given.append([c["id"] for c in job["calls"]])
        lines = [{"step": "cell 1", "state": "started"}] if dies == "cell" and len(given) == 1 else []
        if dies == "call" and len(given) == 1:
            lines = [{"step": "cell 1", "state": "done"}, {"step": "f.0", "state": "started"}]
        elif not lines:
            lines = [{"step": c["id"], "state": "done"} for c in job["calls"]] + [{"step": "all", "state": "done"}]
        (folder / "progress.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        return grade_sandbox.Outcome(-11 if lines[-1]["step"] != "all" else 0, timed_out and len(given) == 1, 0.1)

    monkeypatch.setattr(grade_sandbox, "run", fake_run)
    job = {"cells": [], "torch": False, "calls": [{"id": f"{fn}.{i}", "function": fn, "args": []} for fn in "fg" for i in (0, 1)]}
    submission = tmp_path / "s.ipynb"
    submission.write_text("{}")
    result = grader.run_contained(job, {}, submission, tmp_path / "alice", "process", LIMITS, [], 0)
    assert len(result) == runs and len(given) == runs
    if runs == 2:
        assert given[1] == ["g.0", "g.1"] and result[1].folder.name == "alice+rerun1"


def test_an_empty_out_and_a_course_folder_without_exercises_are_refused(tmp_path, capsys, monkeypatch):
    """--out '' wrote grades.csv and feedback/ into the current folder; --course pointing at a folder with no solution
    notebooks (the student copies, say) graded every submission 'not a course notebook' and exited 0."""
    nbformat.write(subs.solved("03_cka"), tmp_path / "dana.ipynb")
    monkeypatch.chdir(tmp_path)
    assert grade.main([str(tmp_path / "dana.ipynb"), "--out", ""]) == 2
    assert "--out is empty" in capsys.readouterr().err and not (tmp_path / "grades.csv").exists()
    student_copies = grade.COURSE_DIR / "student"
    assert grade.main([str(tmp_path / "dana.ipynb"), "--out", str(tmp_path / "out"), "--course", str(student_copies)]) == 2
    assert "No course notebooks with exercises" in capsys.readouterr().err
