"""The report's cache under <out>/cache: each finished result saved with the settings' fingerprint, loaded on a rerun
with the same settings (a module of its own: helpers.report.compute and attention_maps both use it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from helpers.report.distributed import World, share_from_main


def cached(path: Path, fingerprint: str, compute, log, w: World = World()):
    """Load the CKAMatrix at `path` when it was computed with the same settings, else compute and save it.

    In a group of processes (helpers.report.distributed) only process 0 reads and writes the file; it sends what it
    loaded to the others, so that all take the same path (compute() then sums over every process)."""
    old = share_from_main(_load_cached(path, fingerprint, log) if w.main else None, w)
    if old is not None:
        return old
    result = compute()
    result.meta["fingerprint"] = fingerprint
    if w.main:
        result.save(path)
    return result


def _load_cached(path: Path, fingerprint: str, log):
    """The CKAMatrix at `path` when it was computed with the same settings, else None (the log says why)."""
    from helpers.minibatch_cka import CKAMatrix

    if path.exists():
        try:
            old = CKAMatrix.load(path)
            if old.meta.get("fingerprint") == fingerprint:
                log.append(f"{path.name}: loaded (finished earlier)")
                return old
            log.append(f"{path.name}: recomputed (it was made with other settings)")
        except ValueError:
            log.append(f"{path.name}: recomputed (the saved file could not be read)")
    return None


def cached_arrays(path: Path, fingerprint: str, n_images: int, compute, log) -> dict:
    """{name: numpy array} saved at `path` by an earlier run with the same settings and image count,
    else compute() (a dict of arrays), saved there with both and returned."""
    if arrays_saved(path, fingerprint, n_images):
        log.append(f"{path.name}: loaded (finished earlier)")
        return load_arrays(path)
    arrays = compute()
    save_arrays(path, arrays, fingerprint, n_images)
    return arrays


def save_arrays(path: Path, arrays: dict, fingerprint: str, n_images: int) -> None:
    """{name: numpy array} saved at `path` (.npz) with the settings' fingerprint and the image count."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays, n_images=n_images, fingerprint=np.array(fingerprint))


def load_arrays(path: Path) -> dict:
    """The {name: numpy array} that save_arrays wrote at `path` (without the fingerprint and image count)."""
    with np.load(path, allow_pickle=False) as f:
        return {k: f[k] for k in f.files if k not in ("fingerprint", "n_images")}


def arrays_saved(path: Path, fingerprint: str, n_images: int) -> bool:
    """True when `path` holds cached_arrays' result for these settings and this image count."""
    if not path.exists():
        return False
    with np.load(path, allow_pickle=False) as f:
        return str(f["fingerprint"]) == fingerprint and int(f["n_images"]) == n_images
