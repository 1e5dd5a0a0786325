"""Colab set-up: install only the packages this runtime lacks for the course; never torch or torchvision.

The first cell of every notebook runs this on Colab, from the course's fresh clone (see
scripts/launch.py). It reads what the notebooks need from pyproject.toml (the helpers' own
dependencies and the `notebooks` extra), installs the missing or too-old ones with pip, and holds
torch and torchvision at the versions Colab ships: they are large, matched to Colab's CUDA, and
any recent version serves the course. The helpers package itself is not installed: the set-up
cell puts the clone on `sys.path`, which needs no build step and takes effect in the running kernel.

Works the same on a CPU and a GPU runtime (the track is chosen later, by helpers.models.choose_track).
Run by hand with `python scripts/colab_setup.py`; `--dry-run` prints the plan and installs nothing.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NEVER_INSTALL = ("torch", "torchvision")  # Colab's own builds stay; pip is told to keep them


def course_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """Requirement strings such as 'numpy>=1.24': the helpers' dependencies and the notebooks extra."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    return list(project["dependencies"]) + list(project["optional-dependencies"]["notebooks"])


def parse(requirement: str) -> tuple[str, tuple[int, ...]]:
    """'numpy>=1.24' -> ('numpy', (1, 24)); a bare name has minimum (). Only '>=' is used by the course."""
    found = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*(?:>=\s*([0-9][0-9.]*))?\s*", requirement)
    if not found:
        raise ValueError(f"{requirement!r}: write course requirements as 'name' or 'name>=X.Y'.")
    return found.group(1).lower(), version_tuple(found.group(2) or "")


def version_tuple(version: str) -> tuple[int, ...]:
    """'2.5.1+cu121' -> (2, 5, 1); '1.0.9rc1' -> (1, 0, 9). Enough to compare against a '>=' minimum."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0].split("rc")[0])[:3])


def plan(requirements: list[str], installed: dict[str, str]) -> tuple[list[str], list[str]]:
    """(requirements to install, notes) given `installed` = {lower-case name: version}.

    torch and torchvision are never planned: when missing the notes say so and the caller stops;
    when older than asked, the notes say so and the course goes on with Colab's version.
    """
    to_install, notes = [], []
    for requirement in requirements:
        name, minimum = parse(requirement)
        have = installed.get(name)
        if name in NEVER_INSTALL:
            if have is None:
                notes.append(f"{name} is missing: this is not a standard Colab runtime. Install {name} yourself "
                             "(pip install torch torchvision), then rerun this cell.")
            elif version_tuple(have) < minimum:
                notes.append(f"{name} {have} is older than {requirement}; kept anyway (never reinstalled here).")
            continue
        if have is None:
            to_install.append(requirement)
            notes.append(f"{name}: missing, installing {requirement}")
        elif version_tuple(have) < minimum:
            to_install.append(requirement)
            notes.append(f"{name}: {have} is older than needed, installing {requirement}")
    return to_install, notes


def installed_versions(names: list[str]) -> dict[str, str]:
    """{name: version} of those of `names` that this Python has installed."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


def main(argv: list[str]) -> int:
    requirements = course_requirements()
    installed = installed_versions([parse(r)[0] for r in requirements])
    to_install, notes = plan(requirements, installed)
    for note in notes:
        print(f"Colab set-up: {note}")
    if any(f"{name} is missing" in note for name in NEVER_INSTALL for note in notes):
        return 1
    kept = ", ".join(f"{name} {installed[name]}" for name in NEVER_INSTALL if name in installed)
    if not to_install:
        print(f"Colab set-up: everything the course needs is installed ({kept} kept as they are).")
        return 0
    if "--dry-run" in argv:
        print(f"Colab set-up (dry run): would run pip install {' '.join(to_install)}")
        return 0
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as pins:
        # a constraints file: pip may not swap Colab's torch for another build while resolving
        pins.write("".join(f"{name}=={installed[name]}\n" for name in NEVER_INSTALL if name in installed))
    command = [sys.executable, "-m", "pip", "install", "-q", "-c", pins.name, *to_install]
    print(f"Colab set-up: pip install {' '.join(to_install)} ({kept} held as they are)")
    return subprocess.run(command).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
