"""One Jupyter kernel for many notebooks, each run in a fresh namespace.

    with shared_kernel(folder, {"COURSE_TRACK": "full", ...}) as km:
        NotebookClient(nb, km=km, ...)            # every notebook in the same kernel

Starting a kernel and importing torch, timm and the helpers again costs about 5 s per notebook;
the full-track rehearsal (12 notebooks) and the student-copy runs (17) each share one kernel, and
each notebook's first cell is fresh_namespace(...) (%reset -f, figures closed, what is left frozen for the
garbage collector, its own output folder, figures not rendered for display).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def shared_kernel(folder: Path, env: dict):
    """An AsyncKernelManager whose kernel inherits `env`; the kernel is started by the first notebook
    (NotebookClient.setup_kernel) and shut down at the end. This process's environment is restored."""
    from jupyter_client.manager import AsyncKernelManager
    from nbclient.util import run_sync

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    # IPC sockets, not TCP ports: ports picked at random can collide with other kernels on a busy machine
    (folder / "kernel").mkdir(parents=True, exist_ok=True)
    km = AsyncKernelManager(kernel_name="python3", transport="ipc", ip=str(folder / "kernel" / "k"))
    try:
        yield km
    finally:
        if km.has_kernel:
            run_sync(km.shutdown_kernel)(now=True)
        for key, value in saved.items():
            os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)


def fresh_namespace(env: dict, cwd: Path, extra: str = ""):
    """A first cell for the next notebook: an empty namespace, no open figures, `env` set, the working
    folder `cwd`, the course's output folder read again from env["COURSE_OUTPUT_DIR"], and matplotlib's
    non-interactive Agg backend (plt.show() draws nothing; saved figures are still drawn into their files)."""
    import nbformat

    return nbformat.v4.new_code_cell("\n".join([
        "%reset -f",
        "import gc, os, pathlib",
        "import matplotlib.pyplot as plt",
        # what is left now (the modules, their caches) lives on: gc.freeze() keeps the cyclic garbage collector
        # from walking it again in every later collection (about 500,000 objects once torch, timm and matplotlib
        # are imported: 0.25 s a walk, three walks per notebook here, and more while it runs). Measured on one
        # thread: the student copies 118 -> 102 s, the rehearsal 306 -> 291 s. (In the test workers themselves
        # it cost time: frozen objects no longer count in the rule that schedules full collections.)
        "plt.close('all'); gc.collect(); gc.freeze()",
        f"os.environ.update({env!r})",
        f"os.chdir({str(cwd)!r})",
        # figures are drawn only where the notebook saves them (helpers.plots.save_figure), not rendered for
        # display: nbval and the browser test render every figure; here that took about a fifth of the time
        "import matplotlib, warnings; matplotlib.use('agg')",
        "warnings.filterwarnings('ignore', message='FigureCanvasAgg is non-interactive')",
        "from helpers import course",
        "course.OUTPUT_DIR = pathlib.Path(os.environ['COURSE_OUTPUT_DIR'])",
        extra]))
