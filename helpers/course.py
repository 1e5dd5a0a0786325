"""Course-wide set-up: paths defined once, seeding, device choice, one status line per notebook."""

from __future__ import annotations

import os
import platform
import random
from pathlib import Path

import numpy as np
import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
OUTPUT_DIR = REPO_ROOT / "outputs"  # figures and arrays the notebooks save for reports (git-ignored)


def seed_everything(seed: int = 0) -> None:
    """Seed Python, numpy and torch so that a notebook gives the same numbers on every run."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def pick_device() -> torch.device:
    """CUDA when present (Colab GPU runtime), else CPU. Set COURSE_DEVICE=cpu to force the CPU."""
    wanted = os.environ.get("COURSE_DEVICE", "").strip().lower()
    if wanted:
        return torch.device(wanted)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def start(seed: int = 0, quiet: bool = False) -> torch.device:
    """The first call of every notebook: seed everything, pick the device, say what runs.

    Returns the torch.device to use.
    """
    seed_everything(seed)
    device = pick_device()
    OUTPUT_DIR.mkdir(exist_ok=True)
    if not quiet:
        print(f"python {platform.python_version()} | torch {torch.__version__.split('+')[0]} | "
              f"numpy {np.__version__} | device: {device.type}")
    return device
