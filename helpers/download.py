"""Downloads that survive interruptions: resumed over HTTP range requests, verified, extracted atomically.

    archive = fetch(url, folder / "imagenette2-320.tgz", md5="3df6...")   # resumes a .part file
    extract(archive, folder / "imagenette2-320")                           # all or nothing, marker last
    imagenette_folder(folder)                                              # both, for the full track's photos

A Colab session can die in the middle of a 340 MB download, and a kernel restart can stop an
extraction half way. So:
- the bytes go to NAME.part; a second call asks the server only for the bytes still missing
  (an HTTP Range request) and appends them; a server that ignores the range sends the whole file,
  which then replaces the partial one;
- the finished file must have the size the server announced and the expected md5 before it is
  renamed to NAME; a corrupt one is deleted, with an error that says to run again;
- the archive is unpacked into a temporary sibling folder, which is renamed into place in one step,
  and a marker file (.complete) is written last: a folder without it is an interrupted extraction,
  and is removed and extracted again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

MARKER = ".complete"  # written into an extracted folder after everything else
CHUNK = 1 << 20


def _md5(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _total_size(response, start: int) -> int | None:
    """The whole file's size from a 206 response's Content-Range or a 200 response's Content-Length."""
    content_range = response.headers.get("Content-Range")  # "bytes START-END/TOTAL"
    if response.status == 206 and content_range and "/" in content_range:
        total = content_range.rsplit("/", 1)[1]
        return int(total) if total.isdigit() else None
    length = response.headers.get("Content-Length")
    return int(length) + (start if response.status == 206 else 0) if length and length.isdigit() else None


def fetch(url: str, target, md5: str | None = None, timeout: float = 30.0, progress: bool = True) -> Path:
    """Download `url` to `target`, resuming TARGET.part if an earlier try was interrupted. Returns target.

    An existing target with the right md5 is used as it is. Raises RuntimeError (saying to run
    again, which resumes) when the connection breaks, and when the finished file has the wrong size or md5.
    """
    target = Path(target)
    if target.exists() and (md5 is None or _md5(target) == md5):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    start = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={start}-"} if start else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            if start and response.status != 206:  # the server ignored the range: it sends the whole file
                start = 0
            total = _total_size(response, start)
            with open(part, "ab" if start else "wb") as out, _bar(total, start, target.name, progress) as bar:
                for block in iter(lambda: response.read(CHUNK), b""):
                    out.write(block)
                    bar.update(len(block))
    except urllib.error.HTTPError as error:
        if error.code == 416 and start:  # the range starts at the end: the .part file is already whole
            total = start
        else:
            raise RuntimeError(f"Downloading {url} failed: HTTP {error.code} {error.reason}.") from None
    except (OSError, urllib.error.URLError) as error:
        have = part.stat().st_size if part.exists() else 0
        raise RuntimeError(f"Downloading {url} stopped after {have / 1e6:.1f} MB ({type(error).__name__}: {error}). "
                           f"Run the same call again: it resumes from {part.name}.") from None
    size = part.stat().st_size
    if total is not None and size != total:
        raise RuntimeError(f"{part.name} has {size:,} bytes, but the server announced {total:,}: the transfer broke off. "
                           "Run the same call again: it resumes where it stopped.")
    if md5 is not None and _md5(part) != md5:
        part.unlink()
        raise RuntimeError(f"{target.name} arrived complete but its md5 is wrong (a corrupt transfer): it was deleted. "
                           "Run the same call again to download it afresh.")
    os.replace(part, target)
    return target


def _bar(total, initial, name, progress):
    from tqdm.auto import tqdm
    return tqdm(total=total, initial=initial, unit="B", unit_scale=True, desc=name, disable=not progress)


def is_complete(folder) -> bool:
    """True when `folder` was extracted to the end (its marker exists)."""
    return (Path(folder) / MARKER).is_file()


def extract(archive, folder) -> Path:
    """Unpack the tar archive's single top folder as `folder`, all or nothing, with the marker written last.

    An existing `folder` without the marker (an interrupted extraction) is removed first. Returns folder.
    """
    archive, folder = Path(archive), Path(folder)
    if is_complete(folder):
        return folder
    if folder.exists():
        print(f"{folder.name}: an earlier extraction was interrupted; removing it and extracting again.")
        shutil.rmtree(folder)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        with tarfile.open(archive) as tar:
            if hasattr(tarfile, "data_filter"):  # Python 3.12+ (and patched 3.9-3.11): refuse links and paths out
                tar.extractall(staging, filter="data")
            else:
                tar.extractall(staging)
        top = staging / folder.name
        if [p.name for p in staging.iterdir()] != [folder.name]:
            raise RuntimeError(f"{archive.name} should hold one folder named {folder.name}, "
                               f"but holds {sorted(p.name for p in staging.iterdir())}.")
        (top / MARKER).write_text(f"extracted from {archive.name}\n")
        os.replace(top, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


# Imagenette (fast.ai), the full track's photographs: 320-px version, the archive torchvision names
IMAGENETTE_URL = "https://s3.amazonaws.com/fast-ai-imageclas/imagenette2-320.tgz"
IMAGENETTE_MD5 = "3df6f0d01a2c9592104656642f5e78a3"
IMAGENETTE_VAL_IMAGES = 3925  # in imagenette2-320/val: how a folder from before the marker is recognised as whole


def imagenette_folder(root, url: str = IMAGENETTE_URL, md5: str | None = IMAGENETTE_MD5, download: bool = True) -> Path:
    """root/imagenette2-320, downloaded (resumably) and extracted (atomically) when it is not complete yet.

    A folder extracted before the course wrote markers counts as complete when its val/ split holds
    all 3,925 images (it gets its marker then); any other folder without a marker is extracted again.
    """
    root = Path(root)
    folder = root / "imagenette2-320"
    if not is_complete(folder) and folder.is_dir():
        val = folder / "val"
        if val.is_dir() and sum(1 for p in val.rglob("*") if p.is_file()) == IMAGENETTE_VAL_IMAGES:
            (folder / MARKER).write_text("complete before markers were written\n")
    if is_complete(folder):
        return folder
    if not download:
        raise RuntimeError(f"{folder} is missing or incomplete, and download=False.")
    archive = fetch(url, root / "imagenette2-320.tgz", md5=md5)
    extract(archive, folder)
    archive.unlink()  # 340 MB that the extracted folder holds again
    return folder
