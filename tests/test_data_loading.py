"""Image files to batches (helpers.loading, helpers.image_cache) and autocast (helpers.autocast).

The reference everywhere is the code these replaced: timm's whole eval transform applied to each
image in turn, in the main thread (`sequential` below). Batches must equal it bit for bit, whatever
the thread count and whether they come from the disk cache. Small JPEG files (48-72 px) keep it fast.
"""

import os
import pickle
import warnings

import numpy as np
import pytest
import torch
from jpeg_folder import write_jpeg_folder
from PIL import Image

from helpers import autocast, compare, data, image_cache, loading

N = 21  # not a multiple of the batch sizes used: the last batch is short


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_jpeg_folder(tmp_path_factory.mktemp("jpegs"), N, side=48)


@pytest.fixture(autouse=True)
def cache_here(tmp_path, monkeypatch):
    """Every test gets an empty cache of its own and the default cap, thread count and autocast."""
    monkeypatch.setenv(image_cache.DIR_ENV, str(tmp_path / "cache"))
    for name in (image_cache.CAP_ENV, loading.WORKERS_ENV, autocast.ENV):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "cache"


def sequential(images, model) -> torch.Tensor:
    """(N, 3, H, W): the old helpers.data.batches for a set of files, one image at a time."""
    preprocess = data.preprocess_for(model)
    return torch.stack([preprocess(images.get(i)) for i in range(len(images))])


def all_batches(images, model, batch_size=8) -> list:
    return list(data.batches(images, model, batch_size))


def entries(cache) -> list:
    return sorted(cache.glob("*")) if cache.exists() else []


@pytest.mark.parametrize("workers", ["0", "1", "3"])
def test_batches_equal_the_sequential_ones_bit_for_bit(folder, vit, monkeypatch, workers):
    monkeypatch.setenv(loading.WORKERS_ENV, workers)
    images = data.image_set(str(folder))
    expected = sequential(images, vit)
    for _ in range(2):  # decoded (and cached), then read from the cache
        got = all_batches(images, vit)
        assert [len(b) for b in got] == [8, 8, 5]
        assert torch.equal(torch.cat(got), expected)
    part = data.subset(images, [20, 3, 7, 3])  # a subsample (helpers.intervals) keeps its files, in its order
    assert torch.equal(torch.cat(all_batches(part, vit, 3)), sequential(part, vit))


def test_a_second_pass_reads_the_cache_and_decodes_nothing(folder, vit, cache_here, monkeypatch):
    images = data.image_set(str(folder))
    part = data.subset(data.subset(images, range(3, 21)), [17, 0, 4, 0, 9])  # rows 20, 3, 7, 3, 12 of the whole set
    expected_part = sequential(part, vit)
    first = torch.cat(all_batches(images, vit))
    (entry,) = entries(cache_here)
    assert entry.suffix == ".safetensors" and entry.stat().st_size > N * 3 * 32 * 32
    monkeypatch.setattr(loading, "_decode", lambda *a: pytest.fail("decoded although cached"))
    assert torch.equal(torch.cat(all_batches(images, vit)), first)
    assert torch.equal(torch.cat(all_batches(data.image_set(str(folder)), vit)), first)  # a new ImageSet of the same files
    assert torch.equal(torch.cat(all_batches(part, vit, 2)), expected_part)  # a subsample reads its whole set's entry
    assert entries(cache_here) == [entry]


def test_a_set_of_fewer_images_reads_the_whole_sets_entry(folder, vit, cache_here, monkeypatch):
    few = data.image_set(str(folder), count=9)
    expected = sequential(few, vit)
    all_batches(data.image_set(str(folder)), vit)
    monkeypatch.setattr(loading, "_decode", lambda *a: pytest.fail("decoded although cached"))
    assert torch.equal(torch.cat(all_batches(few, vit)), expected) and len(entries(cache_here)) == 1


def test_a_subsample_without_its_whole_set_cached_gets_its_own_entry(folder, vit, cache_here):
    part = data.subset(data.image_set(str(folder)), [5, 1, 2, 8])
    assert torch.equal(torch.cat(all_batches(part, vit, 3)), sequential(part, vit))
    assert len(entries(cache_here)) == 1 and image_cache.Entry.for_images(part, loading.preprocessing(vit)).usable()


def test_a_pass_stopped_early_leaves_nothing(folder, vit, cache_here):
    images = data.image_set(str(folder))
    next(data.batches(images, vit, 8))
    assert entries(cache_here) == []  # no entry, no temporary file


@pytest.mark.parametrize("damage", ["flip a byte", "truncate", "garbage"])
def test_a_damaged_entry_is_detected_deleted_and_recomputed(folder, vit, cache_here, damage):
    images = data.image_set(str(folder))
    expected = torch.cat(all_batches(images, vit))
    (entry,) = entries(cache_here)
    raw = bytearray(entry.read_bytes())
    if damage == "flip a byte":
        raw[-100] ^= 0xFF  # inside the pixels: the header still parses
    elif damage == "truncate":
        raw = raw[: len(raw) // 2]
    else:
        raw = bytearray(b"not a safetensors file")
    entry.write_bytes(bytes(raw))
    with pytest.warns(UserWarning, match="damaged"):
        assert torch.equal(torch.cat(all_batches(images, vit)), expected)
    (again,) = entries(cache_here)  # written anew by that pass
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(torch.cat(all_batches(images, vit)), expected)


def test_a_changed_file_never_hits_the_old_entry(tmp_path, vit, cache_here):
    folder = write_jpeg_folder(tmp_path / "set", 6, side=40)
    images = data.image_set(str(folder))
    before = torch.cat(all_batches(images, vit, 4))
    changed = images.get.paths[2]
    Image.new("RGB", (40, 40), (255, 0, 0)).save(changed)  # same name, other pixels
    os.utime(changed, ns=(1, 1))  # even with an old modification time
    after = torch.cat(all_batches(data.image_set(str(folder)), vit, 4))
    assert torch.equal(after, sequential(data.image_set(str(folder)), vit))
    assert not torch.equal(after, before) and len(entries(cache_here)) == 2


def test_changed_images_are_computed_never_cached(folder, vit, cache_here):
    images = data.image_set(str(folder))
    all_batches(images, vit)  # the originals are cached
    grey = data.changed_images(images, data.grey, "grey")
    got = torch.cat(all_batches(grey, vit))
    assert torch.equal(got, sequential(grey, vit))
    assert not torch.equal(got, sequential(images, vit))
    assert len(entries(cache_here)) == 1  # still only the originals


def test_the_size_cap_evicts_the_least_recently_used(tmp_path, vit, cache_here, monkeypatch):
    sets = [data.image_set(str(write_jpeg_folder(tmp_path / f"set{k}", 8, side=40, seed=k))) for k in range(3)]
    all_batches(sets[0], vit)
    size = entries(cache_here)[0].stat().st_size
    monkeypatch.setenv(image_cache.CAP_ENV, str(2.5 * size / 1e9))  # room for two entries
    all_batches(sets[1], vit)
    all_batches(sets[0], vit)  # a hit: set 0 becomes the most recently used
    all_batches(sets[2], vit)  # evicts set 1, the least recently used
    kept = {image_cache.Entry.for_images(s, loading.preprocessing(vit)).path for s in sets}
    assert set(entries(cache_here)) == kept - {image_cache.Entry.for_images(sets[1], loading.preprocessing(vit)).path}
    assert image_cache.used_bytes() <= 2.5 * size

    monkeypatch.setenv(image_cache.CAP_ENV, str(0.5 * size / 1e9))  # a set bigger than the cap is not kept
    image_cache.clear()
    assert torch.equal(torch.cat(all_batches(sets[1], vit)), sequential(sets[1], vit)) and entries(cache_here) == []
    monkeypatch.setenv(image_cache.CAP_ENV, "0")  # 0: no cache at all
    assert image_cache.Entry.for_images(sets[1], loading.preprocessing(vit)) is None
    monkeypatch.setenv(image_cache.CAP_ENV, "lots")
    with pytest.raises(ValueError, match="COURSE_IMAGE_CACHE_GB"):
        image_cache.cap_bytes()


def test_the_key_follows_the_preprocessing_not_the_normalisation(folder, vit):
    import timm
    images = data.image_set(str(folder))
    key = image_cache.Entry.for_images(images, loading.preprocessing(vit)).key
    other_mean = loading.preprocessing(vit)
    other_mean.mean = other_mean.mean + 0.1
    assert image_cache.Entry.for_images(images, other_mean).key == key  # mean/std come after the crop
    big = timm.create_model("resnet18", pretrained=False, num_classes=2)  # 224 px, bicubic
    assert image_cache.Entry.for_images(images, loading.preprocessing(big)).key != key
    assert image_cache.Entry.for_images(data.subset(images, range(5)), loading.preprocessing(vit)).key != key


def test_worker_count_rules(monkeypatch, folder):
    files, shapes = data.image_set(str(folder)), data.image_set("shapes", count=8)
    computed = data.changed_images(files, data.grey, "grey")
    monkeypatch.setenv(loading.WORKERS_ENV, "2")
    assert loading.worker_count(shapes) == 0 and loading.worker_count(computed) == 0  # only files go to threads
    assert loading.worker_count(data.subset(files, [3, 1])) == 2
    monkeypatch.delenv(loading.WORKERS_ENV)
    for cores, expected in [(1, 0), (2, 2), (16, loading.MAX_DEFAULT_WORKERS)]:
        monkeypatch.setattr(loading, "cpu_count", lambda: cores)
        assert loading.worker_count(files) == expected
    monkeypatch.setenv(loading.WORKERS_ENV, "0")
    assert loading.worker_count(files) == 0
    monkeypatch.setenv(loading.WORKERS_ENV, "-1")
    with pytest.raises(ValueError, match="COURSE_WORKERS"):
        loading.worker_count(files)
    monkeypatch.setattr(loading, "cpu_count", lambda: 2)
    monkeypatch.setenv(loading.WORKERS_ENV, "8")  # 4 per core: still taken
    assert loading.worker_count(files) == 8
    monkeypatch.setenv(loading.WORKERS_ENV, "1000")  # started 1,000 threads
    with pytest.raises(ValueError, match="at most 8 decoding threads"):
        loading.worker_count(files)
    assert pickle.loads(pickle.dumps(files.get)).paths == files.get.paths  # file sets can go to another process


def test_an_unreadable_file_is_named_from_a_thread(tmp_path, vit, monkeypatch):
    folder = write_jpeg_folder(tmp_path / "set", 6, side=40)
    bad = sorted(folder.rglob("*.jpg"))[4]
    bad.write_bytes(b"not a jpeg")
    monkeypatch.setenv(loading.WORKERS_ENV, "2")
    with pytest.raises(ValueError, match=bad.name):
        all_batches(data.image_set(str(folder)), vit, 2)


def test_autocast_flag_logic(monkeypatch):
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert autocast.forward_dtype(cpu) is None and autocast.forward_dtype(cpu, "bf16") is None  # never on the CPU
    assert autocast.forward_dtype(cuda) == torch.float16  # the default on CUDA (a T4 has no bfloat16 units)
    assert autocast.forward_dtype(cuda, False) is None and autocast.forward_dtype(cuda, "bf16") == torch.bfloat16
    monkeypatch.setenv(autocast.ENV, "off")
    assert autocast.forward_dtype(cuda) is None and autocast.forward_dtype(cuda, True) is None
    assert autocast.forward_dtype(cuda, "fp16") == torch.float16  # an explicit type wins
    monkeypatch.setenv(autocast.ENV, "fp8")
    with pytest.raises(ValueError, match="COURSE_AUTOCAST"):
        autocast.forward_dtype(cuda)


def test_forwards_under_autocast_keep_float32_grams_and_truthful_meta(vit, resnet, monkeypatch):
    """The CUDA path run on the CPU: forward_dtype forced to bfloat16, autocast on the CPU."""
    images = data.image_set("shapes", count=64)
    plain = compare.cka_matrix(vit, images, "blocks", model_b=resnet, batch_size=32, progress=False)
    assert plain.meta["amp"] is False and plain.meta["amp_dtype"] is None
    grams = []
    real = compare._gram_of_rows
    monkeypatch.setattr(compare, "_gram_of_rows", lambda rows: grams.append(real(rows)) or grams[-1])
    with autocast.emulated_on_cpu(torch.bfloat16):
        half = compare.cka_matrix(vit, images, "blocks", model_b=resnet, batch_size=32, progress=False)
    assert half.meta["amp"] is True and half.meta["amp_dtype"] == "bfloat16"
    assert grams and all(g.dtype == torch.float32 for g in grams)  # fresh passes: not plain's kept Grams
    # bfloat16 features (8-bit mantissa) move CKA a little, and only a little
    difference = np.abs(half.values - plain.values).max()
    print(f"largest CKA difference, bfloat16 vs float32 forwards: {difference:.2e}")
    assert 0 < difference < 0.02


def test_a_subsample_never_reads_a_damaged_row(folder, vit, cache_here):
    images = data.image_set(str(folder))
    all_batches(images, vit)
    (entry,) = entries(cache_here)
    raw = bytearray(entry.read_bytes())
    raw[-100] ^= 0xFF  # in the last image, row 20
    entry.write_bytes(bytes(raw))
    part = data.subset(images, [20, 0])
    with pytest.warns(UserWarning, match="damaged"):
        assert torch.equal(torch.cat(all_batches(part, vit)), sequential(part, vit))
    assert entries(cache_here) == []  # deleted; the subsample did not write over its whole set's entry


def test_a_set_whose_get_returns_tensors_is_normalised_as_before(vit, monkeypatch):
    """Sets made by hand (benchmarks/bench_host_ram.py) may hand out uint8 tensors one at a time."""
    monkeypatch.setenv(loading.WORKERS_ENV, "2")
    shapes = data.image_set("shapes", count=10)
    by_hand = data.ImageSet("by hand", 10, lambda i: shapes.tensor[i])
    assert torch.equal(torch.cat(all_batches(by_hand, vit, 4)), data.preprocess_for(vit)(shapes.tensor))
    wrong = data.ImageSet("floats", 2, lambda i: shapes.tensor[i].float())
    with pytest.raises(ValueError, match="uint8"):
        all_batches(wrong, vit)
