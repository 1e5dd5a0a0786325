"""Course-wide set-up: paths defined once, seeding, device choice, one status line per notebook."""

from __future__ import annotations

import os
import platform
import random
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from helpers.guards import check_int

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
# figures and arrays the notebooks save for reports (git-ignored); COURSE_OUTPUT_DIR puts them elsewhere
OUTPUT_DIR = Path(os.environ.get("COURSE_OUTPUT_DIR") or REPO_ROOT / "outputs")


def check_folder(path: Path, setting: str) -> Path:
    """`path`, refused when it is a file: mkdir would raise a bare FileExistsError. setting: the variable that named it."""
    if path.exists() and not path.is_dir():
        raise ValueError(f"{setting}={path} is a file, not a folder: give a folder (it is created if it does not "
                         "exist), or unset it for the default.")
    return path


def shown_path(path) -> str:
    """`path` relative to the repository when it lies inside it (so no machine's folders are printed), else as given."""
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


@contextmanager
def torch_threads(n: int):
    """torch.set_num_threads(n) inside the block, the caller's setting restored after (the report, training)."""
    saved = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def seed_everything(seed: int = 0) -> None:
    """Seed Python, numpy and torch so that a notebook gives the same numbers on every run."""
    if check_int(seed, "seed", 0, "Give a whole number, e.g. course.start(seed=0).") >= 2 ** 32:  # numpy's limit
        raise ValueError(f"seed must be below 2**32 (numpy's limit), got {seed}.")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def pick_device() -> torch.device:
    """CUDA when present (Colab GPU runtime), else CPU. Set COURSE_DEVICE=cpu to force the CPU."""
    wanted = os.environ.get("COURSE_DEVICE", "").strip().lower()
    if not wanted:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return checked_device(wanted, "COURSE_DEVICE=", "set COURSE_DEVICE=cpu or unset it")


def checked_device(wanted, what: str = "device=", instead: str = "use device='cpu' or leave it out") -> torch.device:
    """`wanted` as a torch.device this machine has and the course can use; else a ValueError that says what to do.

    what: how the setting is named in the message ('COURSE_DEVICE=' or 'device='); instead: the advice."""
    try:
        device = torch.device(wanted)
    except (RuntimeError, TypeError):
        raise ValueError(f"{what}{wanted!r} is not a device: use 'cpu', 'cuda' or 'cuda:0' ({instead}).") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{what}{wanted!r} but this machine has no CUDA GPU: {instead}.")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"{what}{wanted!r} but there are only {torch.cuda.device_count()} GPU(s): use cuda:0.")
    if device.type == "mps":
        # CKA sums its pair products in float64 (helpers.minibatch_cka), and Apple's MPS has no float64
        raise ValueError(f"{what}{wanted!r}: Apple's MPS has no float64, which the course's CKA sums need: {instead} "
                         "(the lite track runs in minutes on a Mac's CPU).")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"{what}{wanted!r}: the course runs on 'cpu' or 'cuda'.")
    return device


def start(seed: int = 0, quiet: bool = False) -> torch.device:
    """The first call of every notebook: seed everything, pick the device, say what runs.

    Returns the torch.device to use.
    """
    seed_everything(seed)
    device = pick_device()
    check_folder(OUTPUT_DIR, "COURSE_OUTPUT_DIR")
    OUTPUT_DIR.mkdir(parents=True, exist_ok=True)  # COURSE_OUTPUT_DIR may name a new nested folder (on Drive, say)
    if not quiet:
        print(f"python {platform.python_version()} | torch {torch.__version__.split('+')[0]} | "
              f"numpy {np.__version__} | device: {device.type}")
    return device
