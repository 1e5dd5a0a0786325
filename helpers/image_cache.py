"""Decoded and cropped images kept on disk, so that each image file is decoded once per preprocessing.

    outputs/cache/images/<key>.safetensors     # one file per (image files, resize and crop); COURSE_IMAGE_CACHE_DIR moves it
    COURSE_IMAGE_CACHE_GB=5                    # at most this much in all (the least recently used go first); 0 = no cache

helpers.loading uses it for every set read from files (folders, Imagenette): the first whole pass
decodes and writes the set's uint8 crops (N, 3, H, W); later passes, in this notebook or another,
read them back. Nothing else needs to know.

- **Key.** A SHA-256 of: every file's absolute path, size and modification time, in the set's order;
  the function that reads them; the preprocessing up to the crop (timm's resolved input size,
  interpolation, crop fraction and mode, the resize and crop steps themselves) with the timm and
  Pillow versions. Mean and std come after the crop, so models that resize and crop alike (ViT-B/16
  and DeiT, say) share an entry. A changed, added or replaced file gives a new key. Sets whose
  pixels are computed (helpers.data.changed_images: grey, equal brightness) are never cached: they
  have no files to key on, so they can never be served another set's pixels. A subsample
  (helpers.data.subset, as helpers.intervals takes them) is read from its whole set's entry when
  there is one, else it gets an entry of its own.
- **Uint8, exact.** The crops are the transform's own input to its to-tensor step, so a cached pass
  gives the same batches, bit for bit, as decoding (tests/test_data_loading.py); a quarter of
  float32's size (Imagenette's 3,925 images at 224 px: 0.59 GB).
- **Several processes** (torchrun's ranks, two notebooks) share the folder. A file another process just
  evicted or replaced is a cache miss, never an error; one process writes an entry at a time (a
  `<key>.lock` file made with O_EXCL: another process that wants the same entry decodes without writing),
  and each entry appears by an atomic rename. A subset reads from the entry of any set it was cut from
  (a torchrun shard of a 500-image sample reads the sample's entry), and the report lets process 0 write
  the whole set's entries before the shards start (helpers.report.compute).
- **Never trusted.** Written to a temporary file and renamed once complete (an interrupted pass
  leaves nothing behind); every image carries a CRC-32 in the file's header, checked before an
  entry is used. A truncated, damaged or foreign file is deleted, with a warning, and the images
  are decoded again. Files are read with safetensors (no pickle).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
import time
import uuid
import warnings
import zlib
from pathlib import Path

import torch

from helpers.course import OUTPUT_DIR, check_folder
from helpers.image_types import FileImages

DIR_ENV = "COURSE_IMAGE_CACHE_DIR"
CAP_ENV = "COURSE_IMAGE_CACHE_GB"
DEFAULT_GB = 5.0
FORMAT = "course image cache 1"
STALE_TEMP_SECONDS = 3600  # a temporary file this old belongs to a pass that died


def cache_dir() -> Path:
    """Where the entries live: COURSE_IMAGE_CACHE_DIR, else outputs/cache/images (under COURSE_OUTPUT_DIR when set)."""
    return check_folder(Path(os.environ.get(DIR_ENV) or OUTPUT_DIR / "cache" / "images"), DIR_ENV)


def cap_bytes() -> int:
    """The most bytes all entries may take (COURSE_IMAGE_CACHE_GB, default 5; 0 turns the cache off)."""
    text = os.environ.get(CAP_ENV, "").strip()
    try:
        gb = DEFAULT_GB if not text else float(text)
    except ValueError:
        gb = -1.0
    if not 0 <= gb < math.inf:  # also NaN; inf was an OverflowError
        raise ValueError(f"{CAP_ENV}={text!r}: give the image cache's size in GB (e.g. 5, or 0 to turn it off).")
    return int(gb * 1e9)


def _stat(path: Path):
    """os.stat of `path`, or None when another process has just deleted or renamed it."""
    try:
        return path.stat()
    except FileNotFoundError:
        return None


def _entries(folder: Path) -> list:
    """[(path, size)] of the entries in `folder`, least recently used first (files that vanish meanwhile left out)."""
    found = [(p, _stat(p)) for p in folder.glob("*.safetensors")]
    return [(p, st.st_size) for p, st in sorted(((p, st) for p, st in found if st is not None),
                                                 key=lambda item: item[1].st_mtime)]


def used_bytes() -> int:
    """Bytes the cache's entries take now."""
    folder = cache_dir()
    return sum(size for _, size in _entries(folder)) if folder.is_dir() else 0


def clear() -> None:
    """Delete every entry (the images are decoded again when next used)."""
    for path, _ in _entries(cache_dir()) if cache_dir().is_dir() else []:
        path.unlink(missing_ok=True)


def _make_room(folder: Path, needed: int, cap: int) -> None:
    """Delete the least recently used entries (and dead passes' temporary and lock files) until `needed` more bytes
    fit. Another process may evict at the same moment: a file already gone is skipped."""
    for temp in [*folder.glob("*.tmp"), *folder.glob("*.lock")]:
        st = _stat(temp)
        if st is not None and time.time() - st.st_mtime > STALE_TEMP_SECONDS:
            temp.unlink(missing_ok=True)
    entries = _entries(folder)
    total = sum(size for _, size in entries)
    while entries and total + needed > cap:
        oldest, size = entries.pop(0)
        total -= size
        oldest.unlink(missing_ok=True)


def _crc(image: torch.Tensor) -> int:
    """CRC-32 of a (3, H, W) uint8 image's bytes."""
    return zlib.crc32(image.detach().cpu().contiguous().numpy())


def _touch(path: Path) -> bool:
    """Mark as used now, to the nanosecond (the kernel's own clock for files ticks every few ms: ties).
    False when another process has just evicted the file."""
    now = time.time_ns()
    try:
        os.utime(path, ns=(now, now))
    except FileNotFoundError:
        return False
    return True


def _lock(path: Path):
    """The right to write the entry at `path`: the path of a new lock file, or None when another process holds it."""
    lock = path.with_suffix(".lock")
    try:
        os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return None
    return lock


def _header(key: str, shape: tuple, crcs: list) -> bytes:
    """safetensors' JSON header for one uint8 tensor "images", the key and per-image CRC-32s as metadata."""
    nbytes = shape[0] * shape[1] * shape[2] * shape[3]
    return json.dumps({"__metadata__": {"format": FORMAT, "key": key, "crc32": ",".join(map(str, crcs))},
                       "images": {"dtype": "U8", "shape": list(shape), "data_offsets": [0, nbytes]}}).encode()


class Entry:
    """The cache file of one image set read from files, for one preprocessing (see the module docstring)."""

    def __init__(self, path: Path, key: str, count: int, rows: list | None = None):
        self.path, self.key, self.count = path, key, count
        self.rows = rows  # the images wanted, as rows of the file (a subsample's), or None for all, in order

    @classmethod
    def for_images(cls, images, prep) -> "Entry | None":
        """The entry of `images` (an ImageSet) for `prep` (helpers.loading.Preprocessing); None when not cacheable.

        A subsample of a set whose entry exists gets that entry, reading only its rows (entry.rows): the entry of
        the nearest set it was cut from that has one (FileImages.ancestors), else an entry of its own.
        """
        if not isinstance(images.get, FileImages) or cap_bytes() == 0:
            return None
        for above, rows in images.get.ancestors:
            whole = cls._of_files(above, prep)
            if whole.path.exists():
                whole.rows = rows
                return whole
        return cls._of_files(images.get, prep)

    @classmethod
    def _of_files(cls, files_set, prep) -> "Entry":
        files = []
        for path in files_set.paths:
            stat = os.stat(path)
            files.append([os.path.abspath(path), stat.st_size, stat.st_mtime_ns])
        loader = files_set.loader
        what = {"format": FORMAT, "files": files, "loader": f"{loader.__module__}.{loader.__qualname__}",
                "dtype": "uint8", **prep.fingerprint()}
        key = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()
        return cls(cache_dir() / f"{key[:40]}.safetensors", key, len(files))

    def usable(self) -> bool:
        """True when the file exists and every image in it checks out; a bad file is deleted, with a warning.
        A file another process deletes meanwhile is a miss (False), not an error."""
        if not self.path.exists():
            return False
        try:
            self._verify()
        except FileNotFoundError:  # evicted by another process between exists() and reading it
            return False
        except Exception as error:  # truncated, damaged, another format: never trusted
            warnings.warn(f"The image cache file {self.path} is damaged ({type(error).__name__}: {str(error)[:120]}): "
                          "deleted; the images are decoded again.")
            self.path.unlink(missing_ok=True)
            return False
        return _touch(self.path)  # recently used: evicted last (False: evicted meanwhile, a miss)

    def _verify(self) -> None:
        from safetensors import safe_open

        with safe_open(str(self.path), framework="pt") as handle:
            meta = handle.metadata() or {}
            if meta.get("format") != FORMAT or meta.get("key") != self.key:
                raise ValueError("written for other images or another preprocessing")
            images = handle.get_slice("images")
            shape = images.get_shape()
            crcs = [int(c) for c in meta.get("crc32", "").split(",") if c]
            if len(shape) != 4 or shape[0] != self.count or len(crcs) != self.count or images.get_dtype() != "U8":
                raise ValueError(f"holds {shape} {images.get_dtype()} with {len(crcs)} checksums, expected {self.count} images")
            if self.rows is None:  # every image, read in chunks
                for start in range(0, self.count, 256):
                    chunk = images[start:start + 256]
                    for offset, crc in enumerate(crcs[start:start + 256]):
                        if _crc(chunk[offset]) != crc:
                            raise ValueError(f"image {start + offset} does not match its checksum")
            else:  # only the rows a subsample reads
                for row in sorted(set(self.rows)):
                    if _crc(images[row:row + 1][0]) != crcs[row]:
                        raise ValueError(f"image {row} does not match its checksum")

    def read(self, batch_size: int):
        """The cached (B, 3, H, W) uint8 crops in order, as an iterator (after usable() said yes); None when another
        process has deleted the file meanwhile (a miss). The file is opened here, so a later eviction cannot
        break the pass (an open file's data stays readable on Linux and macOS; Windows refuses to delete it)."""
        from safetensors import safe_open

        try:
            handle = safe_open(str(self.path), framework="pt")
        except FileNotFoundError:
            return None
        return self._batches(handle, batch_size)

    def _batches(self, handle, batch_size: int):
        images = handle.get_slice("images")
        if self.rows is None:
            for start in range(0, self.count, batch_size):
                yield images[start:start + batch_size]
            return
        for start in range(0, len(self.rows), batch_size):
            yield torch.cat([images[row:row + 1] for row in self.rows[start:start + batch_size]])

    def write_through(self, batches, count: int):
        """Yield `batches` ((B, 3, H, W) uint8 crops) unchanged, writing them to this entry on the way.

        The file appears, renamed from a temporary one, as soon as all `count` images are written
        (before the last batch is yielded: a consumer may stop after it). A pass stopped early
        writes nothing; a set bigger than the cap is not kept; while another process writes the
        same entry (its lock file exists), this one only decodes.
        """
        handle, temp, crcs, done, lock = None, None, [], False, None
        try:
            for batch in batches:
                if handle is None and not done:
                    shape = (count, *batch.shape[1:])
                    reserved = -(-len(_header(self.key, shape, [2**32 - 1] * count)) // 8) * 8
                    if reserved + shape[0] * batch[0].numel() > cap_bytes():
                        done = True  # too big to keep: decode every time
                    else:
                        self.path.parent.mkdir(parents=True, exist_ok=True)
                        lock = _lock(self.path)
                        done = lock is None  # another process is writing this entry: one writer per entry
                    if lock is not None:
                        _make_room(self.path.parent, reserved + count * batch[0].numel(), cap_bytes())
                        temp = self.path.with_name(f"{self.path.stem}.{uuid.uuid4().hex[:8]}.tmp")
                        handle = open(temp, "wb")
                        handle.write(b"\0" * (8 + reserved))  # the header, once every checksum is known
                if handle is not None:
                    batch = batch.contiguous()
                    handle.write(memoryview(batch.detach().cpu().numpy()).cast("B"))
                    crcs.extend(_crc(image) for image in batch)
                    if len(crcs) == count:
                        handle.seek(0)
                        handle.write(struct.pack("<Q", reserved) + _header(self.key, shape, crcs).ljust(reserved, b" "))
                        handle.close()
                        os.replace(temp, self.path)  # atomic: readers see the whole file or none
                        _touch(self.path)
                        handle, temp, done = None, None, True
                        lock.unlink(missing_ok=True)
                        lock = None
                yield batch
        finally:
            if handle is not None:  # stopped early, or failed: leave nothing half-written
                handle.close()
                temp.unlink(missing_ok=True)
            if lock is not None:
                lock.unlink(missing_ok=True)
