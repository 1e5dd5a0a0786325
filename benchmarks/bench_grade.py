"""Benchmark (not a test): grade a class of 30 submissions with the default limits and print the time.

The class mixes solved, unsolved and partly solved notebooks (01-06, 08, 09, 15: numpy and torch
exercises) with every hostile case of tests/grade_submissions.py, a corrupt file and a notebook of
another course; it checks that grades.csv is exactly as expected. Issue 36 asks for at most
10 minutes on 2 cores.

    python benchmarks/bench_grade.py [--workers 2] [--keep DIR]
"""

import argparse
import socket
import sys
import tempfile
import time
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import grade_submissions as subs  # noqa: E402

from helpers import grade  # noqa: E402
from helpers.grade import sandbox as grade_sandbox  # noqa: E402

ONE = {"1.1 gram_linear": "error", "1.2 gram_rbf": "pass"}  # a hostile gram_linear, gram_rbf intact
BOTH = {"1.1 gram_linear": "pass", "1.2 gram_rbf": "pass"}
N01, N02, N03, N04 = "01_gram_matrices", "02_hsic", "03_cka", "04_minibatch_cka"
# (student, expected notebook column, how to build the notebook (None: a hostile case of that name), expected grades)
CLASS = [
    *[(f"solved01_{i}", N01, lambda: subs.solved(N01), BOTH) for i in range(3)],
    ("unsolved01", N01, lambda: subs.unsolved(N01), {"1.1 gram_linear": "fail", "1.2 gram_rbf": "fail"}),
    ("partly01", N01, lambda: subs.partly(N01, "gram_linear"), {"1.1 gram_linear": "pass", "1.2 gram_rbf": "fail"}),
    *[(f"solved02_{i}", N02, lambda: subs.solved(N02), {"2.1 center_gram": "pass", "2.2 hsic": "pass"}) for i in range(2)],
    ("partly02", N02, lambda: subs.partly(N02, "center_gram"), {"2.1 center_gram": "pass", "2.2 hsic": "fail"}),
    *[(f"solved03_{i}", N03, lambda: subs.solved(N03), {"3.1 cka": "pass"}) for i in range(2)],
    ("unsolved03", N03, lambda: subs.unsolved(N03), {"3.1 cka": "fail"}),
    ("solved04", N04, lambda: subs.solved(N04), {"4.1 hsic_unbiased": "pass", "4.2 minibatch_cka": "pass"}),
    ("partly04", N04, lambda: subs.partly(N04, "hsic_unbiased"), {"4.1 hsic_unbiased": "pass", "4.2 minibatch_cka": "fail"}),
    ("solved05", "05_hooking_vit_and_resnet", lambda: subs.solved("05_hooking_vit_and_resnet"), {"5.1 record_output": "pass"}),
    ("unsolved05", "05_hooking_vit_and_resnet", lambda: subs.unsolved("05_hooking_vit_and_resnet"), {"5.1 record_output": "fail"}),
    ("solved06", "06_representation_structure", lambda: subs.solved("06_representation_structure"),
     {"6.1 gram_without_covariate": "pass"}),
    ("solved08", "08_local_and_global_attention", lambda: subs.solved("08_local_and_global_attention"),
     {"8.1 value": "skipped", "8.2 head_distances": "pass"}),
    ("solved09", "09_local_heads_vs_convolutions", lambda: subs.solved("09_local_heads_vs_convolutions"),
     {"9.1 value": "skipped", "9.2 equal_brightness": "pass"}),
    ("solved15", "15_mlp_mixer", lambda: subs.solved("15_mlp_mixer"), {"15.1 block_structure": "pass"}),
    ("endless_loop", N01, None, {"1.1 gram_linear": "error", "1.2 gram_rbf": "error"}),  # the wall-clock kill ends all
    ("busy_loop", N01, None, ONE),
    ("memory_bomb", N01, None, ONE),
    ("fork_bomb", N01, None, ONE),
    ("reads_other", N01, None, ONE),
    ("writes_outside", N01, None, ONE),
    ("network", N01, None, ONE),
    ("patches_check", N01, None, {"1.1 gram_linear": "fail", "1.2 gram_rbf": "pass"}),
    ("fake_print", N01, None, {"1.1 gram_linear": "fail", "1.2 gram_rbf": "pass"}),
    ("corrupt", '"unreadable: not valid JSON (Expecting \':\' delimiter at line 1, column 26)"', None, {}),
    ("other_course", "not a course notebook", lambda: subs.other_course(), {}),
]


def expected_csv(columns: list) -> str:
    lines = [",".join(["student", "notebook", *columns, "total", "out_of"])]
    for student, notebook, _, grades in CLASS:
        passed = sum(g == "pass" for g in grades.values())
        graded = sum(g != "skipped" for g in grades.values())
        lines.append(",".join([student, notebook, *(grades.get(c, "") for c in columns), str(passed), str(graded)]))
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--keep", help="write the class and the grades here instead of a temporary folder")
    args = parser.parse_args()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or tmp)
        folder, out, outside = root / "class", root / "grades", root / "outside.txt"
        folder.mkdir(parents=True, exist_ok=True)
        for student, _, build, _ in CLASS:
            path = folder / f"{student}.ipynb"
            if student == "corrupt":
                subs.corrupt(path)
            elif build is None:
                nbformat.write(subs.hostile(student, other=str(folder / "solved01_0.ipynb"), target=str(outside),
                                            port=listener.getsockname()[1]), path)
            else:
                nbformat.write(build(), path)
        print(f"isolation: {grade_sandbox.probe()}; {len(CLASS)} submissions, {args.workers} workers")
        started = time.monotonic()
        results = grade.grade_class([folder / f"{s}.ipynb" for s, *_ in CLASS], out, workers=args.workers)
        seconds = time.monotonic() - started
        got = (out / "grades.csv").read_text()
        columns = got.splitlines()[0].split(",")[2:-2]
        exact = got == expected_csv(columns)
        contained = not outside.exists() and _nothing_connected(listener)
        slowest = max(results, key=lambda r: r.seconds)
        print(f"graded {len(results)} submissions in {seconds:.1f} s (slowest: {slowest.student}, {slowest.seconds:.1f} s)")
        print(f"grades.csv exactly as expected: {exact}; nothing written outside, no connection: {contained}")
        if not exact:
            print(got)
        return 0 if exact and contained else 1


def _nothing_connected(listener) -> bool:
    try:
        listener.accept()
        return False
    except BlockingIOError:
        return True


if __name__ == "__main__":
    sys.exit(main())
