"""The program that runs inside the sandbox: it evaluates one student's functions on the grader's inputs.

Started by helpers.grade.sandbox as `python -I child.py JOB_DIR`, never imported by student code
(under `-I` the helpers package is not on its path). It trusts nothing it runs, and decides nothing:
    1. hides the teacher's folders (mount namespace) and drops to an unprivileged user, when asked to,
       else drops every capability;
    2. imports numpy (and torch when an exercise needs it), then sets the resource limits (memory,
       CPU time, processes, file size);
    3. runs the student's exercise cells, in notebook order, in one namespace;
    4. calls each function on the inputs in JOB_DIR/inputs.npz and saves what comes back as .npy files.
It never compares anything: the grader does that in its own process, so patching numpy, helpers or
print() here cannot make a check pass.

JOB_DIR holds job.json (what to do), inputs.npz (the arrays) and receives:
    progress.jsonl   one JSON line per step started or finished, written at once (so a time-out still
                     tells which step hung, and what finished before it);
    out/NAME.npy     one file per returned array, NAME = "<call id>" or "<call id>.<key>" for dicts.
"""

from __future__ import annotations

import ctypes
import errno
import io
import json
import os
import signal
import sys
import traceback

MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18  # <sys/mount.h>
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, _LINUX_CAPABILITY_VERSION_3 = 24, 38, 0x20080522  # <linux/prctl.h>, capability.h
PRINT_LIMIT = 100_000  # characters of the student's printed output kept (in memory, then discarded)


def build_model(kind: str, seed: int):
    """A small torch model, the same in the grader and in the sandbox (same seed, same weights)."""
    import torch

    if kind != "mlp":
        raise ValueError(f"unknown model kind {kind!r}")
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(inplace=True), torch.nn.Linear(5, 3))


# -- 1. hiding folders and dropping privileges (trusted set-up, before any student code)

def _mount(source, target, fstype, flags, data=None):
    libc = ctypes.CDLL(None, use_errno=True)
    enc = lambda s: None if s is None else str(s).encode()  # noqa: E731
    if libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def hide_folders(hide: list, keep: list) -> None:
    """Cover every folder in `hide` with an empty tmpfs, then bring back each folder in `keep` under it.

    Needs a private mount namespace (unshare --mount). Kept folders are reopened through file
    descriptors taken before hiding, and come back read-only except the first (the job folder).
    """
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    handles = {k: os.open(k, os.O_PATH | os.O_DIRECTORY) for k in keep}
    outermost = [h for h in sorted(set(hide)) if not any(h != o and _inside(h, o) for o in hide)]
    for folder in outermost:
        _mount("tmpfs", folder, "tmpfs", 0, "size=4m,mode=0755")
    for folder in sorted(keep, key=len):
        if not any(_inside(folder, h) for h in outermost):
            continue
        os.makedirs(folder, exist_ok=True)
        _mount(f"/proc/self/fd/{handles[folder]}", folder, None, MS_BIND | MS_REC)
        if folder != keep[0]:
            _mount(None, folder, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    for fd in handles.values():
        os.close(fd)
    try:  # a /proc that shows only the sandbox's own processes (needs the new PID namespace)
        _mount("proc", "/proc", "proc", 0)
    except OSError:
        pass


def drop_privileges(uid: int) -> None:
    """Become `uid` (no groups): an ordinary user, with no capabilities left."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def drop_capabilities() -> None:
    """Keep the user id but lose every capability, for good (also across execve of a root program).

    Without this, the code of a sandbox that runs as root inside its user namespace could simply
    unmount the tmpfs that hides the teacher's folders. Steps a non-root process may not take are
    skipped: it has no capabilities to lose."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in range(64):  # the bounding set: no capability can come back through execve
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0 and ctypes.get_errno() != errno.EPERM:
            break  # EINVAL: past the last capability this kernel knows
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    nothing = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable; two 32-bit words each
    if libc.capset(header, nothing) != 0:
        raise OSError(ctypes.get_errno(), "capset: could not drop the capabilities")


def address_space() -> int:
    """Bytes of address space this process holds now (VmSize; 0 where /proc is missing)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    except (OSError, StopIteration):
        return 0


def set_limits(limits: dict) -> None:
    """Resource limits for the rest of this process and its children. memory_mb is what the student's
    code may take on top of the interpreter and its imports (numpy, torch), measured now."""
    import resource

    mb = 2 ** 20
    wanted = {resource.RLIMIT_AS: address_space() + limits["memory_mb"] * mb, resource.RLIMIT_CPU: limits["cpu_seconds"],
              resource.RLIMIT_FSIZE: limits["file_mb"] * mb, resource.RLIMIT_NPROC: limits["processes"],
              resource.RLIMIT_CORE: 0}
    for which, value in wanted.items():
        resource.setrlimit(which, (value, value))


# -- 2. running the student's code

class _Bounded(io.StringIO):
    """stdout/stderr for student code: keeps the first PRINT_LIMIT characters, drops the rest."""

    def write(self, text):
        if self.tell() < PRINT_LIMIT:
            super().write(text[:PRINT_LIMIT - self.tell()])
        return len(text)


class Progress:
    """Appends one JSON line per event to progress.jsonl, flushed at once."""

    def __init__(self, path):
        self.file = open(path, "a", encoding="utf-8")

    def __call__(self, **event):
        self.file.write(json.dumps(event) + "\n")
        self.file.flush()


def _short_error(error: BaseException) -> str:
    """`Type: message`, at most 500 characters, plus the line of the student's cell where it happened."""
    where = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith("<cell")]
    text = f"{type(error).__name__}: {error}"[:500] if str(error) else type(error).__name__
    return text + (f" ({where[-1].filename[1:-1]}, line {where[-1].lineno})" if where else "")


class NotNumbers(TypeError):
    """The student's function returned something that is not numbers (None, a string, an object)."""


def to_arrays(value, numpy) -> dict:
    """A returned value -> {"": array} or, for a dict of numbers, {key: array}. Refuses other objects."""
    if isinstance(value, dict):
        if not all(isinstance(k, str) and k.isidentifier() for k in value):
            raise NotNumbers("your function returned a dict whose keys are not plain names")
        return {k: to_arrays(v, numpy)[""] for k, v in value.items()}
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    array = numpy.asarray(value)
    if array.dtype == object or array.dtype.kind not in "biufc":
        raise NotNumbers(f"your function returned {type(value).__name__}, not numbers: return an array, a tensor or a float")
    return {"": array}


def argument(spec: dict, inputs, torch):
    """One argument from its description in job.json: an input array, a plain value or a model."""
    if "array" in spec:
        array = inputs[spec["array"]]
        return torch.from_numpy(array.copy()) if spec.get("torch") else array.copy()
    if "model" in spec:
        return build_model(spec["model"], spec["seed"])
    return spec["value"]


class StepTimeout(Exception):
    """Raised in the student's code when one cell or one call runs longer than step_seconds."""


def _time_limit(seconds: float):
    """Arm (seconds > 0) or disarm (0) the per-step alarm. Pure-Python loops are interrupted; a long
    call inside numpy is not, and the grader's wall-clock limit stops the whole sandbox instead."""

    def stop(_signum, _frame):
        raise StepTimeout(f"took longer than {seconds:g} s (an endless loop?)")

    signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)


def run_job(job: dict, job_dir: str, progress: Progress) -> None:
    """Run the cells, then every call; each step reported to `progress`, each answer saved in out/."""
    import numpy

    torch = None
    if job["torch"]:
        import torch
    inputs = numpy.load(os.path.join(job_dir, "inputs.npz"), allow_pickle=False)
    step_seconds = job["limits"]["step_seconds"]
    set_limits(job["limits"])  # after the imports, so that the memory limit is the student's own share
    namespace = {"__name__": "__main__", "np": numpy, "numpy": numpy}
    if torch is not None:
        namespace["torch"] = torch
    out_dir = os.path.join(job_dir, "out")
    os.makedirs(out_dir, exist_ok=True)
    sys.stdout = sys.stderr = _Bounded()
    for cell in job["cells"]:
        progress(step=f"cell {cell['index']}", state="started")
        try:
            _time_limit(step_seconds)
            exec(compile(cell["source"], f"<cell {cell['index']}>", "exec"), namespace)
            _time_limit(0)
            progress(step=f"cell {cell['index']}", state="done")
        except BaseException as error:  # noqa: BLE001 - a failing cell still leaves its earlier definitions
            _time_limit(0)
            progress(step=f"cell {cell['index']}", state="error", error=_short_error(error))
    failed = set()  # functions that raised once: their other cases are not run (one error is enough)
    for call in job["calls"]:
        if call["function"] in failed:
            continue
        progress(step=call["id"], state="started")
        try:
            fn = namespace.get(call["function"])
            if not callable(fn):
                raise NameError(f"no function `{call['function']}` was defined by the notebook's cells")
            args = [argument(a, inputs, torch) for a in call["args"]]
            _time_limit(step_seconds)
            value = fn(*args)
            _time_limit(0)
            arrays = to_arrays(value, numpy)
            models = [a for a in args if torch is not None and isinstance(a, torch.nn.Module)]
            if models:  # what the grader cannot see from outside: hooks left on the model
                arrays["hooks_left"] = numpy.array(sum(len(m._forward_hooks) for m in models[0].modules()))
            for key, array in arrays.items():
                numpy.save(os.path.join(out_dir, f"{call['id']}{'.' + key if key else ''}.npy"), array,
                           allow_pickle=False)
            progress(step=call["id"], state="done")
        except BaseException as error:  # noqa: BLE001 - report and go on with the next call
            _time_limit(0)
            failed.add(call["function"])
            progress(step=call["id"], state="error", error=_short_error(error))


def main(job_dir: str) -> None:
    with open(os.path.join(job_dir, "job.json"), encoding="utf-8") as f:
        job = json.load(f)
    progress = Progress(os.path.join(job_dir, "progress.jsonl"))
    if job.get("hide"):
        hide_folders(job["hide"], [job_dir] + job["keep"])
    if job.get("uid") is not None:
        drop_privileges(job["uid"])
    elif sys.platform.startswith("linux"):
        drop_capabilities()
    os.chdir(job_dir)
    run_job(job, job_dir, progress)
    progress(step="all", state="done")
    progress.file.close()
    os._exit(0)  # no atexit handlers or finalisers of student code run after this


if __name__ == "__main__":
    main(sys.argv[1])
