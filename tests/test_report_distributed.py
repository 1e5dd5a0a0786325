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
SMALL = dict(count=43, repeats=2, batch_size=20, attention_count=16, threads=1, measures="cka")  # other measures: process 0


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


def _worker(rank, world_size, init_file, out, results_file):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        results = report.run(report.Settings(**SMALL, out=out), progress=False)
        again = report.run(report.Settings(**SMALL, out=out), progress=False)  # a resume: every part from the cache
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
    one = report.run(report.Settings(**SMALL, out=str(tmp_path / "one")), progress=False)
    two_out, values_file = tmp_path / "two", tmp_path / "values.npz"
    mp.spawn(_worker, args=(2, str(tmp_path / "init"), str(two_out), str(values_file)), nprocs=2, join=True)

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
