"""Grade a class: python -m helpers.grade SUBMISSIONS... --out DIR

For each submitted notebook (.ipynb files, or folders of them):
    1. read it here, as data (a corrupt file gets the row "unreadable: ...");
    2. recognise which course notebook it is from its headings, not its file name;
    3. send its exercise cells, and the grader's random inputs, to a sandbox (helpers.grade.sandbox),
       which runs those cells and the student's functions, and returns only arrays;
    4. judge the arrays here, in the grader's own process, against the course's reference
       (helpers.grade.cases), so nothing the student's code does in the sandbox can pass a check.
Writes DIR/grades.csv (one row per student, one column per exercise, total) and DIR/feedback/STUDENT.md.

Only the exercise cells run (and the student's cells that only define functions or import), not the
whole notebook: the findings notebooks load models for minutes, a class must grade in one evening.
"""

from __future__ import annotations

import argparse
import ast
import csv
import json
import math
import re
import secrets
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from queue import Queue

import nbformat
import numpy as np
from tqdm.auto import tqdm

from helpers.grade import sandbox
from helpers.grade.cases import EXERCISES, SKIPPED, VALUE_EXERCISE, Model

COURSE_DIR = Path(__file__).resolve().parents[2] / "notebooks"
MAX_NOTEBOOK_MB = 20
MAX_RESULT_MB = 16
BEGIN = "### BEGIN SOLUTION"


# -- the course: which notebooks, which exercises

@dataclass
class ExerciseInfo:
    number: str              # "1.1", from the heading "### Exercise 1.1: ..."
    function: str | None     # the function the student writes; None for an exercise that asks for a value

    @property
    def column(self) -> str:
        return f"{self.number} {self.function or 'value'}"


@dataclass
class CourseNotebook:
    name: str                # file stem, e.g. "01_gram_matrices"
    headings: set
    exercises: list


def _headings(cells) -> set:
    return {line.strip() for c in cells if c.get("cell_type") == "markdown"
            for line in _text(c.get("source")).splitlines() if line.strip().startswith("#")}


def _text(source) -> str:
    return "".join(source) if isinstance(source, list) else str(source or "")


def course_notebooks(course_dir=COURSE_DIR) -> list:
    """The course's solution notebooks (with or without exercises), each with its headings and exercises in order."""
    course_dir = Path(course_dir)
    if not course_dir.is_dir():
        raise FileNotFoundError(f"No course notebooks in {course_dir}: pass --course with the folder of the "
                                "solution notebooks (the repository's notebooks/).")
    found = []
    for path in sorted(course_dir.glob("[0-9][0-9]_*.ipynb")):
        cells = nbformat.read(path, as_version=4).cells
        exercises, number = [], None
        for cell in cells:
            if cell.cell_type == "markdown":
                match = re.search(r"Exercise (\d+\.\d+)", cell.source)
                number = match.group(1) if match else number
            elif BEGIN in cell.source:
                exercises.append(ExerciseInfo(number or "?", _solved_function(cell.source)))
        found.append(CourseNotebook(path.stem, _headings(cells), exercises))
    if not any(notebook.exercises for notebook in found):  # every submission would be "not a course notebook"
        raise FileNotFoundError(f"No course notebooks with exercises in {course_dir} (files NN_name.ipynb with "
                                f"'{BEGIN}' blocks): pass --course with the folder of the solution notebooks (the "
                                "repository's notebooks/), not the student copies.")
    return found


def _solved_function(source: str):
    """The name of the function whose body holds the first solution block of a cell, or None."""
    function = None
    for line in source.splitlines():
        if line.strip() == BEGIN:
            return function
        found = re.match(r"\s*def (\w+)\(", line)
        function = found.group(1) if found else function
    return None


def recognise(cells, course: list):
    """The course notebook whose headings the submission shares most (at least half of them), else None."""
    headings = _headings(cells)
    score, best = max(((len(headings & nb.headings) / max(len(nb.headings), 1), nb) for nb in course),
                      key=lambda pair: pair[0], default=(0, None))
    return best if score >= 0.5 else None


# -- one submission

@dataclass
class Result:
    """One student's grade: status per exercise column ("pass", "fail", "skipped", "error") and why."""

    student: str
    notebook: str            # the course notebook recognised, or why none was ("unreadable: ...")
    recognised: bool = False
    grades: dict = field(default_factory=dict)     # column -> status
    messages: dict = field(default_factory=dict)   # column -> the check's message
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(s == "pass" for s in self.grades.values())

    @property
    def out_of(self) -> int:
        return sum(s != "skipped" for s in self.grades.values())


def read_notebook(path: Path):
    """The notebook's cells, read as data; raises ValueError('unreadable: why') for anything else."""
    if path.stat().st_size > MAX_NOTEBOOK_MB * 2 ** 20:
        raise ValueError(f"unreadable: larger than {MAX_NOTEBOOK_MB} MB")
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("unreadable: not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"unreadable: not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})") from None
    except RecursionError:
        raise ValueError("unreadable: JSON nested too deeply") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise ValueError("unreadable: JSON, but not a Jupyter notebook (no list of cells)")
    try:
        return nbformat.reads(json.dumps(data), as_version=4).cells
    except Exception as error:  # noqa: BLE001 - any other defect is the same answer for the teacher
        raise ValueError(f"unreadable: not a valid Jupyter notebook ({type(error).__name__})") from None


def _only_definitions(body) -> bool:
    return bool(body) and all(isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)) for n in body)


def without_magics(source: str) -> str:
    """IPython magics and shell lines (`%time`, `%%time`, `!pip ...`) commented out: the sandbox runs plain Python."""
    return re.sub(r"^(\s*)([%!])", r"\1# \2", source, flags=re.M)


# CPython 3.11 keeps the depth counter of ast.parse's tree building in one place per interpreter, so two threads
# parsing at once can fail with "SystemError: AST constructor recursion depth mismatch" when Python code (a __del__,
# a gc callback) runs during one parse and lets the other thread in (python/cpython#106905). The grading threads
# parse one at a time: it is milliseconds per notebook.
_PARSE_LOCK = threading.Lock()


def parse_cell(source: str) -> list:
    """ast.parse(source).body, one thread at a time (see _PARSE_LOCK). Raises SyntaxError as ast.parse does."""
    with _PARSE_LOCK:
        return ast.parse(source).body


def cells_to_run(cells, functions: list) -> list:
    """The code cells the sandbox runs, in notebook order: for each exercise function the last cell
    defining it, and every cell that only defines functions or classes or imports (the student's helpers)."""
    chosen, last = {}, {}
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        source = without_magics(_text(cell.get("source")))
        try:
            body = parse_cell(source)
            defined = {n.name for n in body if isinstance(n, ast.FunctionDef)}
        except SyntaxError:  # a magic or a typo: found by a plain search, and it fails in the sandbox
            body, defined = None, set(re.findall(r"^def (\w+)\(", source, re.M))
        if _only_definitions(body):
            chosen[index] = source
        for name in defined & set(functions):
            last[name] = (index, source)
    chosen.update(last.values())
    return [{"index": i, "source": s} for i, s in sorted(chosen.items())]


def _encode(value, arrays: dict, torch: bool):
    """One argument -> its JSON description for the sandbox; arrays go into `arrays`."""
    if isinstance(value, Model):
        return {"model": value.kind, "seed": value.seed}
    if isinstance(value, np.ndarray):
        key = f"a{len(arrays)}"
        arrays[key] = value
        return {"array": key, "torch": torch}
    return {"value": value}


def build_job(notebook: CourseNotebook, cells, rng) -> tuple:
    """(job for the sandbox, input arrays, {call id: (exercise, case)}) for the gradable exercises."""
    functions = [e.function for e in notebook.exercises if e.function in EXERCISES]
    arrays, calls, cases = {}, [], {}
    for name in functions:
        exercise = EXERCISES[name]
        for i, case in enumerate(exercise.cases(rng)):
            call_id = f"{name}.{i}"
            calls.append({"id": call_id, "function": name,
                          "args": [_encode(a, arrays, exercise.torch) for a in case.args]})
            cases[call_id] = (exercise, case)
    job = {"cells": cells_to_run(cells, functions), "calls": calls,
           "torch": any(EXERCISES[f].torch for f in functions)}
    return job, arrays, cases


def read_progress(job_dir: Path) -> dict:
    """step -> its last event ({"state": "started"|"done"|"error", "error": ...}), from progress.jsonl."""
    path = job_dir / "progress.jsonl"
    events = {}
    if path.is_file() and not path.is_symlink() and path.stat().st_size < MAX_RESULT_MB * 2 ** 20:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                event = json.loads(line)
                events[str(event["step"])] = event
            except (ValueError, KeyError, TypeError):
                continue  # a line the student's code wrote: ignore it
    return events


def read_answers(job_dir: Path, call_id: str) -> dict:
    """The arrays one call returned: {"": array} or {key: array}; never unpickles anything."""
    answers = {}
    for path in (job_dir / "out").glob(f"{glob_escape(call_id)}*.npy"):
        key = path.name[len(call_id):-len(".npy")]
        plain = path.is_file() and not path.is_symlink()  # not a link or a FIFO the student's code planted
        if (key and not key.startswith(".")) or not plain or path.stat().st_size > MAX_RESULT_MB * 2 ** 20:
            continue
        try:
            answers[key[1:]] = np.load(path, allow_pickle=False)
        except (ValueError, OSError):
            continue
    return answers


def glob_escape(text: str) -> str:
    return re.sub(r"([\[\]*?])", r"[\1]", text)


def _stopped(outcome: sandbox.Outcome, limits: sandbox.Limits, events: dict) -> str:
    """Why the sandbox stopped before the end, said for the student."""
    running = [step for step, e in events.items() if e.get("state") == "started"]
    where = f" while running {_step_name(running[-1])}" if running else ""
    if outcome.timed_out:
        return f"time limit ({limits.seconds:.0f} s) reached{where}; the sandbox was stopped"
    signals = {-9: "killed (memory or process limit)", -24: "CPU time limit reached", -25: "file size limit reached",
               -11: "crashed (segmentation fault)"}
    return f"the sandbox process {signals.get(outcome.returncode, f'ended with code {outcome.returncode}')}{where}"


def _step_name(step: str) -> str:
    """'gram_linear.0' -> 'gram_linear (case 1)'; 'cell 10' stays."""
    function, _, case = step.rpartition(".")
    return f"{function} (case {int(case) + 1})" if case.isdigit() else step


@dataclass
class Run:
    """One sandbox run of a submission: its folder, how it ended, its progress events and the calls it was given."""

    folder: Path
    outcome: sandbox.Outcome
    events: dict
    calls: list


def run_contained(job: dict, arrays: dict, submission: Path, job_dir: Path, level: str, limits, hide, slot: int) -> list:
    """Run the sandbox; when its process dies inside one function (a segmentation fault, os._exit), run it again for
    the functions it never reached, each time in a fresh folder and within what is left of the submission's wall-clock
    limit. So a crash costs the exercise it happened in, as an exception does, not every exercise after it.
    Not again after a time-out (no time is left) or a death in a cell (a rerun would die there too). Returns [Run]."""
    runs, calls, deadline = [], job["calls"], time.monotonic() + limits.seconds
    for attempt in range(len(job["calls"])):
        # '+' is in no student's name (find_submissions keeps letters, digits, '_', '.' and '-'): no folder clash
        folder = job_dir if attempt == 0 else job_dir.with_name(f"{job_dir.name}+rerun{attempt}")
        folder.mkdir()
        shutil.copyfile(submission, folder / "submission.ipynb")  # alone in its folder; the sandbox sees no other
        np.savez(folder / "inputs.npz", **arrays)
        seconds = limits.seconds if attempt == 0 else deadline - time.monotonic()
        outcome = sandbox.run(dict(job, calls=calls), folder, level, replace(limits, seconds=seconds), hide, slot)
        events = read_progress(folder)
        runs.append(Run(folder, outcome, events, [c["id"] for c in calls]))
        died_in_a_call = any(events.get(c["id"], {}).get("state") == "started" for c in calls)
        reached = {c["function"] for c in calls if c["id"] in events}
        calls = [c for c in calls if c["function"] not in reached]
        if "all" in events or outcome.timed_out or not died_in_a_call or not calls or deadline - time.monotonic() < 1:
            break
    return runs


def judge(notebook: CourseNotebook, cases: dict, runs: list, limits, result: Result) -> None:
    """Fill result.grades/messages from what the sandbox runs returned, comparing here with the references."""
    run_of = {call_id: run for run in runs for call_id in run.calls}
    first = runs[0].events if runs else {}  # the cells ran the same way in every run; the first run has them all
    cell_errors = [f"{s}: {e['error']}" for s, e in first.items() if s.startswith("cell") and e.get("state") == "error"]
    for info in notebook.exercises:
        column = info.column
        if info.function is None or info.function not in EXERCISES:
            result.grades[column] = "skipped"
            result.messages[column] = "not auto-graded: " + SKIPPED.get(info.function, VALUE_EXERCISE)
            continue
        status, message = "pass", ""
        my_calls = [(cid, case) for cid, (ex, case) in cases.items() if ex.function == info.function]
        for call_id, case in my_calls:
            run = run_of[call_id]
            event = run.events.get(call_id, {})
            if event.get("state") == "error":
                status, message = _error_status(event.get("error", ""), cell_errors, limits)
                break
            if event.get("state") != "done":
                status, message = "error", ("no answer came back" if "all" in run.events
                                            else _stopped(run.outcome, limits, run.events))
                break
            try:
                EXERCISES[info.function].judge(case, read_answers(run.folder, call_id))
            except AssertionError as failure:
                status, message = "fail", str(failure)
                break
            except Exception as error:  # noqa: BLE001 - an answer of the wrong kind (shape, dtype, keys)
                status, message = "fail", f"{case.label}: your answer could not be compared: {type(error).__name__}: {error}"
                break
        if status == "pass":
            message = f"matches the course's reference on all {len(my_calls)} cases"
        result.grades[column], result.messages[column] = status, message


def _error_status(error: str, cell_errors: list, limits) -> tuple:
    """(status, message) for an exception the student's function raised in the sandbox."""
    if error.startswith("NotImplementedError"):
        return "fail", "not done yet: the function still raises NotImplementedError"
    if error.startswith("NotNumbers: "):  # a wrong answer (often a forgotten return), not a crash
        return "fail", error[len("NotNumbers: "):]
    if error.startswith("NameError: no function") and cell_errors:
        return "error", f"{error}; the cell stopped with {cell_errors[0]}"
    if error.startswith("MemoryError"):
        return "error", f"{error}: more memory than the limit of {limits.memory_mb} MB"
    if error.startswith("NameError: name"):
        return "error", (f"{error}. The grader runs only the exercise cells (and cells that only define functions "
                         "or import), with np and torch: import or define what the function needs in those cells")
    if error.startswith("BlockingIOError") and "Resource temporarily unavailable" in error:
        return "error", f"{error}: more processes than the limit of {limits.processes}"
    return "error", error


def grade_one(path: Path, student: str, course: list, work_root: Path, level: str, limits, hide, slots: Queue) -> Result:
    """Grade one submission: read, recognise, run in the sandbox, judge. Never raises for a bad submission."""
    started = time.monotonic()
    try:
        cells = read_notebook(path)
    except ValueError as unreadable:
        return Result(student, str(unreadable), seconds=time.monotonic() - started)
    notebook = recognise(cells, course)
    if notebook is None:
        return Result(student, "not a course notebook", seconds=time.monotonic() - started)
    result = Result(student, notebook.name, recognised=True)
    job, arrays, cases = build_job(notebook, cells, np.random.default_rng(secrets.randbits(64)))
    slot = slots.get()
    try:
        runs = run_contained(job, arrays, path, work_root / student, level, limits, hide, slot) if cases else []
    finally:
        slots.put(slot)
    judge(notebook, cases, runs, limits, result)
    result.seconds = time.monotonic() - started
    return result


# -- the class

def find_submissions(paths) -> list:
    """(student, path) for every .ipynb given, or inside a given folder. The student's name is the
    file name without .ipynb, or for a file in a subfolder its path in the folder ('alice/01.ipynb'
    -> 'alice_01'); a name met twice is numbered. A file given twice (or inside a folder also given) counts once."""
    found, seen = [], set()
    for p in map(Path, paths):
        if p.is_dir():
            found += [(f.relative_to(p).with_suffix(""), f) for f in sorted(p.rglob("*.ipynb"))
                      if ".ipynb_checkpoints" not in f.parts]
        elif p.exists():
            found.append((Path(p.stem), p))
        else:
            raise FileNotFoundError(f"{p} does not exist: give .ipynb files or folders of them.")
    named, taken = [], set()
    for relative, f in found:
        if f.resolve() in seen:  # the same file given twice (or inside a folder also given) is one student's work
            continue
        seen.add(f.resolve())
        name = re.sub(r"[^\w.-]", "_", "_".join(relative.parts)).lstrip(".") or "student"
        unique, n = name, 1
        while unique in taken:
            n += 1
            unique = f"{name}_{n}"
        taken.add(unique)
        named.append((unique, f))
    return named


def check_workers(workers: int) -> None:
    """Submissions graded at once: 1 to sandbox.MAX_WORKERS (each has its own sandbox user id)."""
    if not 1 <= workers <= sandbox.MAX_WORKERS:
        raise ValueError(f"workers must be between 1 and {sandbox.MAX_WORKERS}, got {workers} (the default is 2).")


def grade_class(paths, out_dir, course_dir=COURSE_DIR, limits=None, workers: int = 2, progress: bool = True,
                isolation: str = "auto") -> list:
    """Grade every submission in `paths`; write grades.csv and feedback/; return the Results in input order.

    isolation: "auto" (the strongest that works here, sandbox.probe()) or a level to force."""
    limits = limits or sandbox.Limits()
    check_workers(workers)
    out_dir = Path(out_dir)
    course = course_notebooks(course_dir)
    submissions = find_submissions(paths)
    level = sandbox.probe() if isolation == "auto" else isolation
    hide = sandbox.hidden_folders([p.parent.resolve() for _, p in submissions] + [out_dir.resolve(), Path(course_dir).resolve()])
    slots = Queue()
    for slot in range(workers):
        slots.put(slot)
    results = {}
    with tempfile.TemporaryDirectory(prefix="grade-") as work, ThreadPoolExecutor(workers) as pool:
        work_root = Path(work)
        work_root.chmod(0o711)  # sandboxes may enter their own folder, not list the others
        futures = {pool.submit(grade_one, path, student, course, work_root, level, limits, hide, slots): student
                   for student, path in submissions}
        for future in tqdm(as_completed(futures), total=len(futures), desc="grading", unit="notebook", disable=not progress):
            student = futures[future]
            try:
                results[student] = future.result()
            except Exception as error:  # noqa: BLE001 - a grader bug on one notebook must not lose the class
                results[student] = Result(student, f"grader error: {type(error).__name__}: {error}"[:200])
    ordered = [results[student] for student, _ in submissions]
    write_grades(ordered, course, out_dir / "grades.csv")
    for result in ordered:
        write_feedback(result, out_dir / "feedback" / f"{result.student}.md")
    return ordered


def columns_of(results, course) -> list:
    """The exercise columns of the notebooks in this class, in course order."""
    seen = {r.notebook for r in results}
    return [e.column for nb in course if nb.name in seen for e in nb.exercises]


def write_grades(results, course, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = columns_of(results, course)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["student", "notebook", *columns, "total", "out_of"])
        for r in results:
            writer.writerow([r.student, r.notebook, *(r.grades.get(c, "") for c in columns), r.total, r.out_of])


def write_feedback(result: Result, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# Feedback for {result.student}", ""]
    if result.recognised and not result.grades:
        lines += [f"Notebook: **{result.notebook}**. It has no exercises to grade."]
    elif not result.grades:
        lines += [f"Your notebook could not be graded: **{result.notebook}**.",
                  "Submit the course notebook itself (Colab: File > Download > Download .ipynb), unchanged in its headings."]
    else:
        lines += [f"Notebook: **{result.notebook}**. Passed {result.total} of {result.out_of} auto-graded exercises.", "",
                  "| exercise | result | details |", "|---|---|---|"]
        for column, status in result.grades.items():
            detail = result.messages.get(column, "").replace("|", "\\|").replace("\n", "<br>")
            lines.append(f"| {column} | {status} | {detail} |")
        lines += ["", "Your functions were run on new random inputs and compared with the course's own implementation "
                  "(helpers), outside your notebook; the outputs saved in your notebook were not used."]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.grade", description=__doc__.split("\n\n")[0])
    parser.add_argument("submissions", nargs="+", help=".ipynb files or folders of them")
    parser.add_argument("--out", required=True, help="folder for grades.csv and feedback/")
    parser.add_argument("--course", default=COURSE_DIR, help="folder of the solution notebooks (default: the repository's)")
    parser.add_argument("--workers", type=int, default=2, help="submissions graded at once (default 2)")
    parser.add_argument("--seconds", type=float, default=60, help="wall-clock limit per submission (default 60)")
    parser.add_argument("--memory-mb", type=int, default=2000,
                        help="memory per submission on top of Python, numpy and torch, in MB (default 2000)")
    parser.add_argument("--isolation", default="auto", choices=["auto", *sandbox.LEVELS],
                        help="sandbox level (default: the strongest that works here)")
    args = parser.parse_args(argv)
    try:  # bad numbers and a bad --out stop here, before any submission runs
        limits = sandbox.Limits(seconds=args.seconds, memory_mb=args.memory_mb)  # checks every limit
        limits.cpu_seconds = math.ceil(limits.seconds)  # the CPU limit follows the wall clock (0.5 s: 1, not 0)
        check_workers(args.workers)
        if not args.out.strip():  # Path("") is the current folder: grades.csv and feedback/ landed there
            raise ValueError("--out is empty: give a folder for grades.csv and feedback/.")
        if Path(args.out).exists() and not Path(args.out).is_dir():
            raise ValueError(f"--out {args.out} is a file: give a folder for grades.csv and feedback/.")
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    level = sandbox.probe() if args.isolation == "auto" else args.isolation
    print(f"isolation: {level} ({sandbox.LEVELS[level]}); {sandbox.container_runtime()}")
    started = time.monotonic()
    try:
        results = grade_class(args.submissions, args.out, args.course, limits, args.workers, isolation=level)
    except FileNotFoundError as missing:  # a submission or the course's notebooks: the message says which
        print(f"error: {missing}", file=sys.stderr)
        return 2
    print(f"graded {len(results)} submissions in {time.monotonic() - started:.0f} s: {Path(args.out) / 'grades.csv'}")
    print(summary(results))
    return 0


def summary(results) -> str:
    """One line per exercise column: how many students got each status; then the notebooks not graded."""
    columns = sorted({c for r in results for c in r.grades}, key=lambda c: [int(n) for n in c.split()[0].split(".")])
    lines = []
    for column in columns:
        counts = [(s, sum(r.grades.get(column) == s for r in results)) for s in ("pass", "fail", "error", "skipped")]
        lines.append(f"  {column:<28} " + ", ".join(f"{n} {s}" for s, n in counts if n))
    ungraded = [f"{r.student} ({r.notebook})" for r in results if not r.recognised]
    if ungraded:
        lines.append("  not graded: " + "; ".join(ungraded))
    return "\n".join(lines)

