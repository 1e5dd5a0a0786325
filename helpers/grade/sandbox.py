"""Running one submission's code in a sandbox: the strongest isolation this machine allows.

Three levels, chosen once per grading run by `probe()`:
    "namespaces"       Linux, run as root (a container, a lab server): new network, mount and PID
                       namespaces (`unshare`), the teacher's folders hidden, the code run as its own
                       unprivileged user id; plus the resource limits.
    "user-namespaces"  Linux, an ordinary user with unprivileged user namespaces: the same, but the
                       code keeps the teacher's user id (mapped to root inside, every capability
                       dropped), so the process cap counts all of the teacher's processes.
    "process"          anything else (macOS, namespaces forbidden): own process group, own temporary
                       folder and the resource limits only. No network or file isolation.
In every level: a wall-clock time limit that kills the whole process group, and RLIMIT_AS (memory),
RLIMIT_CPU, RLIMIT_NPROC (processes) and RLIMIT_FSIZE (file size) set before the student's code runs.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

CHILD = Path(__file__).with_name("child.py")
LEVELS = {"namespaces": "no network, teacher's folders hidden, own user id, limits",
          "user-namespaces": "no network, teacher's folders hidden, limits",
          "process": "own process group and folder, limits only: no network or file isolation"}
FIRST_UID = 61000  # sandbox user ids start here (no such users exist on a normal machine)
MAX_WORKERS = 100


def sandbox_uid(slot: int) -> int:
    """The user id of worker `slot` in this grading process: its own per process, so that two graders
    running at once never share (or kill) each other's sandboxes."""
    if not 0 <= slot < MAX_WORKERS:
        raise ValueError(f"worker slot {slot} out of range: use at most {MAX_WORKERS} workers.")
    return FIRST_UID + (os.getpid() % 1000) * MAX_WORKERS + slot


@dataclass
class Limits:
    """What one submission may use. memory_mb: address space on top of Python, numpy and torch."""

    seconds: float = 60.0   # wall clock, for the whole submission
    step_seconds: float = 15.0  # one cell or one call of a function (so one endless loop costs one exercise)
    cpu_seconds: int = 60
    memory_mb: int = 2000
    processes: int = 64     # tasks (processes and threads) of the sandbox's user
    file_mb: int = 64

    def __post_init__(self):
        for name, value in asdict(self).items():  # a limit of 0 (or NaN) would fail every student, silently
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value > 0 and math.isfinite(value)):
                raise ValueError(f"the {name} limit must be a positive, finite number, got {value!r} (at 0 every "
                                 "submission fails; with no limit an endless loop never stops).")


@dataclass
class Outcome:
    """How the sandboxed process ended. timed_out: killed at the wall-clock limit."""

    returncode: int
    timed_out: bool
    seconds: float


def _unshare_prefix(level: str) -> list:
    flags = ["--net", "--mount", "--pid", "--fork", "--kill-child"]
    return ["unshare", "--map-root-user", *flags] if level == "user-namespaces" else ["unshare", *flags]


def _works(command: list) -> bool:
    try:
        return subprocess.run(command, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def probe() -> str:
    """The strongest level that works here, tried for real: 'namespaces', 'user-namespaces' or 'process'."""
    if not sys.platform.startswith("linux") or not shutil.which("unshare"):
        return "process"
    # the same steps the child takes: new namespaces, a tmpfs over a folder (mount works)
    test = ["sh", "-c", "mount -t tmpfs none /mnt 2>/dev/null || mount -t tmpfs none /tmp"]
    if os.geteuid() == 0 and _works(_unshare_prefix("namespaces") + test):
        return "namespaces"
    if _works(_unshare_prefix("user-namespaces") + test):
        return "user-namespaces"
    return "process"


def container_runtime() -> str:
    """A line on Docker/Podman: present and working, or why not used. The grader does not use them (see README)."""
    for name in ("docker", "podman"):
        if shutil.which(name):
            ok = _works([name, "info"])
            return f"{name} found, {'working' if ok else 'not working (no daemon reachable)'}; not used"
    return "no container runtime found"


SYSTEM = {"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "proc", "dev", "sys"}


def hidden_folders(extra: list = ()) -> list:
    """Folders the student's code must not see: every top-level folder but the system ones (so /home,
    /root, /tmp with the other sandboxes, /work, /mnt ...), /dev/shm, and `extra` (the submissions'
    and output folders, in case they lie under a system folder)."""
    top = [str(p) for p in Path("/").iterdir() if p.is_dir() and not p.is_symlink() and p.name not in SYSTEM]
    candidates = [*top, "/dev/shm", *map(str, extra)]
    return sorted({str(Path(c).resolve()) for c in candidates if Path(c).is_dir()} - {"/"})


def kept_folders() -> list:
    """Folders Python itself needs (interpreter, standard library, site-packages), made visible read-only."""
    paths = {sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parent)}
    return sorted(str(Path(p).resolve()) for p in paths)


def run(job: dict, job_dir: Path, level: str, limits: Limits, hide: list, slot: int = 0) -> Outcome:
    """Run the child program on `job_dir` (already holding inputs.npz) at `level`, within `limits`.

    job: {"cells": [{"index", "source"}], "calls": [{"id", "function", "args"}], "torch": bool}.
    hide: folders to hide (hidden_folders()); slot: which parallel worker (its own user id).
    """
    job = dict(job, limits=asdict(limits), hide=None, keep=[], uid=None)
    if level != "process":
        job.update(hide=hide, keep=kept_folders())
    if level == "namespaces":
        job["uid"] = sandbox_uid(slot)
        os.chown(job_dir, job["uid"], job["uid"])
    (job_dir / "job.json").write_text(json.dumps(job), encoding="utf-8")
    command = [sys.executable, "-I", str(CHILD), str(job_dir)]
    if level != "process":
        command = _unshare_prefix(level) + command
    env = {"PATH": "/usr/bin:/bin", "HOME": str(job_dir), "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.monotonic()
    with open(job_dir / "log.txt", "wb") as log:
        process = subprocess.Popen(command, cwd=job_dir, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            process.wait(timeout=limits.seconds)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:  # the whole group, also what a finished child left running
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
    if job["uid"] is not None:
        kill_user_processes(job["uid"])
    return Outcome(process.returncode, timed_out, time.monotonic() - started)


def processes_of(uid: int) -> list:
    """Pids (as this process sees them) of the processes running as `uid` (Linux /proc)."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            line = next(x for x in status.read_text().splitlines() if x.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if int(line.split()[1]) == uid:
            found.append(int(status.parent.name))
    return found


def kill_user_processes(uid: int, patience: float = 10.0) -> None:
    """Kill whatever still runs as the sandbox's own user id, and wait until it is gone.

    The PID namespace already ends every process when its first one ends; after a time-out that
    teardown runs asynchronously, and the next submission of this worker reuses the user id."""
    deadline = time.monotonic() + patience
    while (pids := processes_of(uid)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
