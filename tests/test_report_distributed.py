"""helpers.report on two processes (gloo, CPU) gives the bundle of one process: whole minibatches per process,
no image twice or left out, the sums added up, process 0 alone writing."""

import csv
import json

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from helpers import report
from helpers.report.distributed import n_batches, shard_indices

# 43 images in batches of 20: two full batches and a last one of 3, which one process skips (too small for unbiased
# HSIC); each subsample of 21 is one batch (and 1 image skipped), so each process has no batch of one subsample and
# joins its all_reduce with zero sums
SMALL = dict(count=43, repeats=2, batch_size=20, attention_count=16, threads=1, measures="cka",
             vector_figures="none")  # other measures: process 0; the figures as PNG only (test_report reads PDF and SVG)


@pytest.mark.parametrize("n, batch, size", [(63, 12, 2), (64, 12, 2), (100, 16, 3), (20, 16, 4), (7, 12, 2)])
def test_shards_are_whole_batches_with_no_duplicates_and_no_gaps(n, batch, size):
    kept = n_batches(n, batch) * batch  # what one process uses: every image but a last batch of 1-3
    for offset in (0, 1, 5):
        shards = [shard_indices(n, batch, rank, size, offset) for rank in range(size)]
        everything = sorted(i for shard in shards for i in shard)
        assert everything == list(range(min(n, kept)))  # each used image exactly once
        for rank, shard in enumerate(shards):
            cut = [shard[i:i + batch] for i in range(0, len(shard), batch)]  # the shard cut as the process cuts it
            one_process = [list(range(k * batch, min((k + 1) * batch, n))) for k in range(n_batches(n, batch))
                           if (offset + k) % size == rank]
            assert cut == one_process


def _worker(rank, world_size, init_file, out, results_file, settings=None):
    torch.set_num_threads(1)
    settings = SMALL if settings is None else settings
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        results = report.run(report.Settings(**settings, out=out), progress=False)
        again = report.run(report.Settings(**settings, out=out), progress=False)  # a resume: every part from the cache
        if rank == 0:
            values = {name: part.full.values for name, part in results["parts"].items()}
            np.savez(results_file, **values)
        else:
            assert results["files"] == [] and again["files"] == []  # process 1 writes nothing
        loaded = [line for line in again["log"] if "loaded" in line]
        # process 0 loads every CKA part (full data and 2 subsamples) and its own five: the attention distances and
        # maps of the ViT, the highest-norm audit, 2 receptive fields; and the floor: the untrained draws after the
        # first (the twins, a CKA part) and the shuffled-image null (helpers.report.floor)
        from helpers.report.floor import FLOOR_DRAWS

        assert len(loaded) == (len(results["parts"]) * 3 + 5 + (FLOOR_DRAWS - 1) + 1 if rank == 0 else 0)
    finally:
        dist.destroy_process_group()


def _csv_rows(path):
    with open(path) as f:
        return list(csv.reader(f))


def test_two_processes_give_the_one_process_bundle(tmp_path):
    _same_bundle_on_one_and_two_processes(tmp_path, SMALL)


def test_two_processes_on_image_files_give_the_one_process_bundle(tmp_path, monkeypatch):
    """The torchrun path the lite track never takes: files decoded in threads, a disk cache shared by both processes
    and small enough to evict (COURSE_IMAGE_CACHE_GB), an empty download folder."""
    from jpeg_folder import write_jpeg_folder

    from helpers import gram_cache, image_cache

    folder = write_jpeg_folder(tmp_path / "jpegs", 43, side=48)
    downloads, cache = tmp_path / "downloads", tmp_path / "image-cache"
    downloads.mkdir()
    monkeypatch.setenv("COURSE_DOWNLOAD_DIR", str(downloads))
    monkeypatch.setenv(image_cache.DIR_ENV, str(cache))
    monkeypatch.setenv(image_cache.CAP_ENV, "0.0003")  # 300 kB: two preprocessings of 43 crops (~130 kB each) at most
    monkeypatch.setenv("COURSE_WORKERS", "2")
    gram_cache.clear()
    settings = {**SMALL, "images": str(folder)}
    _same_bundle_on_one_and_two_processes(tmp_path, settings)
    assert list(downloads.iterdir()) == []
    assert image_cache.used_bytes() <= image_cache.cap_bytes()
    assert not list(cache.glob("*.lock")) and not list(cache.glob("*.tmp"))  # every writer finished and cleaned up


def _same_bundle_on_one_and_two_processes(tmp_path, settings):
    one = report.run(report.Settings(**settings, out=str(tmp_path / "one")), progress=False)
    two_out, values_file = tmp_path / "two", tmp_path / "values.npz"
    mp.spawn(_worker, args=(2, str(tmp_path / "init"), str(two_out), str(values_file), settings), nprocs=2, join=True)

    with np.load(values_file) as two:
        assert set(two.files) == set(one["parts"])
        for name, part in one["parts"].items():
            np.testing.assert_allclose(two[name], part.full.values, rtol=0, atol=1e-10, err_msg=name)
    # every table (subsample values and intervals included) to 1e-10, every text cell the same
    tables = sorted(p.name for p in (tmp_path / "one" / "tables").iterdir())
    assert tables == sorted(p.name for p in (two_out / "tables").iterdir())
    for name in tables:
        if name.endswith(".npz"):
            with np.load(tmp_path / "one" / "tables" / name) as a, np.load(two_out / "tables" / name) as b:
                for key in a.files:
                    if a[key].dtype.kind == "f":
                        np.testing.assert_allclose(b[key], a[key], rtol=0, atol=1e-10, err_msg=f"{name} {key}")
                    else:
                        np.testing.assert_array_equal(b[key], a[key], err_msg=f"{name} {key}")
        else:
            for row_a, row_b in zip(_csv_rows(tmp_path / "one" / "tables" / name), _csv_rows(two_out / "tables" / name),
                                    strict=True):
                for x, y in zip(row_a, row_b, strict=True):
                    try:
                        assert abs(float(x) - float(y)) <= 1e-10, (name, x, y)
                    except ValueError:
                        assert x == y, (name, x, y)
    for page in ("SUMMARY.md", "METHODS.md", "CAPTIONS.md"):  # the same words and numbers; only --out differs
        two_text = (two_out / page).read_text().replace(str(two_out), str(tmp_path / "one"))
        assert two_text == (tmp_path / "one" / page).read_text(), page
    record_one, record_two = (json.loads((d / "settings.json").read_text()) for d in (tmp_path / "one", two_out))
    for key in ("n_images", "subsample_size", "resolved_layers_a", "resolved_layers_b", "fingerprint"):
        assert record_one[key] == record_two[key], key


# --------------------------------------------------------------------------- the group's timeout and device

def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _timeout_worker(rank, port, minutes, results):
    import os
    import time
    from datetime import timedelta

    from helpers.report.distributed import init_from_environment

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", RANK=str(rank),
                      LOCAL_RANK=str(rank), COURSE_DIST_TIMEOUT_MINUTES=str(minutes), COURSE_DEVICE="cpu")
    assert init_from_environment()
    try:
        backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
        assert backend.options._timeout == timedelta(minutes=minutes)  # the group got ours, not torch's default
        if rank == 1:  # late past the timeout: process 0 must give up, not wait
            late = time.time() + 3 * minutes * 60
            while time.time() < late and not os.path.exists(results):  # no need to stay once process 0 has given up
                time.sleep(0.05)
            return
        start = time.time()
        try:
            dist.barrier()
            outcome = "waited"
        except RuntimeError as error:
            outcome = f"timed out after {time.time() - start:.1f} s: {str(error)[:80]}"
        with open(results, "w") as f:
            f.write(outcome)
    finally:
        dist.destroy_process_group()


def test_the_process_group_gets_its_timeout(tmp_path):
    minutes = 0.02  # 1.2 s
    results = tmp_path / "outcome.txt"
    mp.spawn(_timeout_worker, args=(_free_port(), minutes, str(results)), nprocs=2, join=True)
    outcome = results.read_text()
    assert outcome.startswith("timed out"), outcome
    assert float(outcome.split()[3]) < 3 * minutes * 60  # it gave up at its timeout, before process 1 came


def test_the_timeout_and_device_settings(monkeypatch):
    from datetime import timedelta

    from helpers.report import distributed

    monkeypatch.delenv(distributed.TIMEOUT_ENV, raising=False)
    assert distributed.group_timeout() == timedelta(minutes=distributed.DEFAULT_TIMEOUT_MINUTES)
    assert distributed.group_timeout() > timedelta(minutes=10)  # torch's nccl default, which process 0 outlasted
    for bad in ("soon", "0", "-5", "nan"):
        monkeypatch.setenv(distributed.TIMEOUT_ENV, bad)
        with pytest.raises(ValueError, match="COURSE_DIST_TIMEOUT_MINUTES"):
            distributed.group_timeout()
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    assert distributed.process_device() == torch.device("cpu")


def test_an_explicit_gpu_under_torchrun_is_refused(monkeypatch):
    from helpers.report import distributed

    monkeypatch.setattr(distributed, "torch", torch)
    monkeypatch.setattr("helpers.course.pick_device", lambda: torch.device("cuda", 0))
    with pytest.raises(RuntimeError, match="COURSE_DEVICE=cuda"):
        distributed.process_device()
    monkeypatch.setattr("helpers.course.pick_device", lambda: torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert distributed.process_device() == torch.device("cuda", 1)  # each process its own GPU
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(RuntimeError, match="nproc_per_node"):
        distributed.process_device()
