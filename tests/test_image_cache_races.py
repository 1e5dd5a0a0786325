"""The image cache shared by several processes (torchrun's ranks, two notebooks at once): a file that another
process deletes or replaces is a cache miss, never an error; one process writes an entry at a time; a subset reads
the entry of the nearest set it was cut from."""

import multiprocessing
import os
from pathlib import Path

import pytest
import torch
from jpeg_folder import write_jpeg_folder

from helpers import data, image_cache, loading


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_jpeg_folder(tmp_path_factory.mktemp("jpegs"), 20, side=48)


@pytest.fixture(autouse=True)
def cache_here(tmp_path, monkeypatch):
    monkeypatch.setenv(image_cache.DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(image_cache.CAP_ENV, raising=False)
    monkeypatch.setenv(loading.WORKERS_ENV, "0")
    return tmp_path / "cache"


def _write_entries(folder: Path, count: int, size: int = 1000) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):  # oldest first
        path = folder / f"{i:03d}.safetensors"
        path.write_bytes(b"x" * size)
        os.utime(path, ns=(i * 10**9, i * 10**9))


def test_an_entry_deleted_by_another_process_during_eviction_is_skipped(cache_here, monkeypatch):
    _write_entries(cache_here, 10)
    ghost = cache_here / "evicted-by-another-process.safetensors"  # listed, then gone before it is read
    real_glob = Path.glob
    monkeypatch.setattr(Path, "glob", lambda self, pattern: [*real_glob(self, pattern), ghost]
                        if pattern == "*.safetensors" else real_glob(self, pattern))
    assert image_cache.used_bytes() == 10 * 1000
    image_cache._make_room(cache_here, needed=3000, cap=8000)  # must delete the 5 oldest, not fail on the ghost
    assert sorted(p.name for p in real_glob(cache_here, "*.safetensors")) == [f"{i:03d}.safetensors" for i in range(5, 10)]
    assert image_cache._touch(ghost) is False


def _evict(folder, barrier, rounds, errors):
    for _ in range(rounds):
        barrier.wait()
        try:
            image_cache._make_room(Path(folder), needed=5_000, cap=20_000)
        except OSError as error:
            errors.put(f"{type(error).__name__}: {error}")
        barrier.wait()


def test_two_processes_evicting_at_once_raise_nothing(cache_here):
    """The audit's reproduction (gpu_repro.py cache-race): before, 5 to 39 of 400 evictions raised FileNotFoundError."""
    context = multiprocessing.get_context("fork")
    rounds, barrier, errors = 60, context.Barrier(3), context.Queue()
    procs = [context.Process(target=_evict, args=(str(cache_here), barrier, rounds, errors)) for _ in range(2)]
    for p in procs:
        p.start()
    for _ in range(rounds):
        for f in cache_here.glob("*"):
            f.unlink()
        _write_entries(cache_here, 40)  # both processes evict the same oldest entries
        barrier.wait()
        barrier.wait()
    for p in procs:
        p.join(timeout=60)
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert found == [] and all(p.exitcode == 0 for p in procs)


def test_an_entry_deleted_after_it_was_checked_is_a_miss(folder, vit, cache_here):
    images = data.image_set(str(folder))
    expected = torch.cat(list(data.batches(images, vit, 8)))  # decoded and written
    entry = image_cache.Entry.for_images(images, loading.preprocessing(vit))
    assert entry.usable()
    entry.path.unlink()  # another process evicts it between the check and the read
    assert entry.read(8) is None and not entry.usable()
    assert torch.equal(torch.cat(list(data.batches(images, vit, 8))), expected)  # decoded again, no error


def test_an_entry_vanishing_while_it_is_verified_is_a_miss_without_a_warning(folder, vit, cache_here, monkeypatch):
    images = data.image_set(str(folder))
    list(data.batches(images, vit, 8))
    entry = image_cache.Entry.for_images(images, loading.preprocessing(vit))
    real = image_cache.Entry._verify

    def evicted_meanwhile(self):
        self.path.unlink()
        return real(self)

    monkeypatch.setattr(image_cache.Entry, "_verify", evicted_meanwhile)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "damaged" would be wrong: nothing was damaged
        assert entry.usable() is False


def test_one_writer_per_entry(folder, vit, cache_here):
    images = data.image_set(str(folder))
    prep = loading.preprocessing(vit)
    entry = image_cache.Entry.for_images(images, prep)
    first = entry.write_through(loading.decoded(images, prep, 8, 0), len(images))
    got_first = [next(first)]  # the first writer holds the entry's lock now
    assert entry.path.with_suffix(".lock").exists()
    second = list(entry.write_through(loading.decoded(images, prep, 8, 0), len(images)))  # a second process
    assert not entry.path.exists(), "the second writer wrote the entry the first one is writing"
    got_first += list(first)
    assert entry.path.exists() and entry.usable() and not entry.path.with_suffix(".lock").exists()
    assert torch.equal(torch.cat(second), torch.cat(got_first))  # the second one's batches are the same all the same


def test_a_shard_of_a_sample_reads_the_samples_entry(folder, vit, cache_here, monkeypatch):
    sample = data.image_set(str(folder), count=12)  # a subset of the folder's 20 files
    expected = torch.cat(list(data.batches(sample, vit, 4)))  # writes the sample's entry
    (written,) = sorted(cache_here.glob("*.safetensors"))
    shard = data.subset(data.subset(sample, range(2, 12)), [0, 1, 2, 3, 8, 9])  # rows 2-5, 10, 11 of the sample
    entry = image_cache.Entry.for_images(shard, loading.preprocessing(vit))
    assert entry.path == written and entry.rows == [2, 3, 4, 5, 10, 11]
    monkeypatch.setattr(loading, "_decode", lambda *a: pytest.fail("decoded although the sample's entry holds it"))
    assert torch.equal(torch.cat(list(data.batches(shard, vit, 4))), expected[[2, 3, 4, 5, 10, 11]])
