"""Benchmark (not a test): images per second from JPEG files to normalised batches, before and after helpers.loading.

Work: --count JPEG files like Imagenette's 320-px release (shorter side 320 px, 1-1.5x as long, about
50 KB each: tests/jpeg_folder.py) to ViT-B/16's normalised (B, 3, 224, 224) float32 batches (timm's
eval preprocessing of vit_base_patch16_224: bicubic resize to 248, centre crop 224; built from the
config of vit_tiny_patch16_224, which preprocesses the same way). Cases, each a whole pass over the
images, the median (and range) of --repeats runs:

  before          the old helpers.data.batches: timm's whole transform per image, in the main thread
  threads=0       helpers.data.batches with COURSE_WORKERS=0: uint8 crops, one normalisation per batch
  threads=N       the same with N decoding threads (the default is one per core, at most 4)
  processes=N     torch's DataLoader with N worker processes (fork) doing the old per-image transform,
                  for comparison: what the threads were chosen over
  cache write     the first pass with the disk cache on (decoding with the default threads, and writing)
  cache read      a later pass: the crops read from the disk cache (checksums checked), normalised

Batches stay on the CPU (no forward pass): this times the images alone. torch runs one thread, as on
the course's CI. The machine's load average is printed: on a shared machine, other work slows every
case, and threads only help when cores are free. So each case also prints the CPU time this process
used per image (all its threads): the work itself, which other processes change much less, and
"CPU/wall": how many cores the case kept busy (1 = no parallelism).

    python benchmarks/bench_decoding.py [--count 500] [--repeats 3] [--batch 64]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from jpeg_folder import write_jpeg_folder  # noqa: E402

from helpers import data, image_cache, loading  # noqa: E402


class OldTransform(torch.utils.data.Dataset):
    """Image i through timm's whole eval transform (module level: picklable for DataLoader workers)."""

    def __init__(self, images, preprocess):
        self.images, self.preprocess = images, preprocess

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.preprocess(self.images.get(i))


def before(images, model, batch):
    preprocess = data.preprocess_for(model)
    for start in range(0, len(images), batch):
        torch.stack([preprocess(images.get(i)) for i in range(start, min(start + batch, len(images)))])


def after(images, model, batch):
    for _ in data.batches(images, model, batch):
        pass


def processes(images, model, batch, workers):
    loader = torch.utils.data.DataLoader(OldTransform(images, data.preprocess_for(model)), batch_size=batch,
                                         num_workers=workers, multiprocessing_context="fork")
    for _ in loader:
        pass


def typical(fn, repeats, before_each=None) -> tuple:
    """(median wall seconds, median CPU seconds of this process's threads, fastest wall, slowest wall) over
    `repeats` runs of fn(): the median says what is typical, the range how much a shared machine moved it."""
    walls, cpus = [], []
    for _ in range(repeats):
        if before_each:
            before_each()
        start, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus), min(walls), max(walls)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    import timm

    torch.set_num_threads(1)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False)
    root = Path(tempfile.mkdtemp(prefix="bench_decoding_"))
    os.environ[image_cache.DIR_ENV] = str(root / "cache")
    folder = write_jpeg_folder(root / "jpegs", args.count)
    images = data.image_set(str(folder))
    megabytes = sum(p.stat().st_size for p in folder.rglob("*.jpg")) / 1e6
    print(f"{len(images)} JPEG files, {megabytes / len(images) * 1000:.0f} KB each on average; {loading.cpu_count()} cores; "
          f"torch {torch.__version__.split('+')[0]}, 1 torch thread; batches of {args.batch}; median of {args.repeats} runs each")
    print(f"load average before: {os.getloadavg()[0]:.2f}")

    results = {}
    os.environ[image_cache.CAP_ENV] = "0"  # decoding alone
    results["before (sequential, whole transform per image)"] = typical(lambda: before(images, model, args.batch), args.repeats)
    for workers in sorted({0, 1, 2, loading.worker_count(images)}):
        os.environ[loading.WORKERS_ENV] = str(workers)
        results[f"threads={workers}"] = typical(lambda: after(images, model, args.batch), args.repeats)
    for workers in (1, 2):
        results[f"processes={workers} (DataLoader, fork; old transform)"] = typical(
            lambda: processes(images, model, args.batch, workers), args.repeats)
    del os.environ[loading.WORKERS_ENV]
    os.environ[image_cache.CAP_ENV] = "5"
    results["cache write (first pass, default threads)"] = typical(lambda: after(images, model, args.batch), args.repeats,
                                                                  before_each=image_cache.clear)
    after(images, model, args.batch)
    results["cache read (later passes)"] = typical(lambda: after(images, model, args.batch), args.repeats)
    cached = image_cache.used_bytes()

    base = results["before (sequential, whole transform per image)"][0]
    print("\n| case | images/s | ms per image (median; min-max) | speed-up vs before | CPU ms per image | CPU/wall |\n"
          "|---|---|---|---|---|---|")
    for name, (seconds, cpu, fastest, slowest) in results.items():
        ms = lambda t: t / len(images) * 1000
        print(f"| {name} | {len(images) / seconds:,.0f} | {ms(seconds):.2f} ({ms(fastest):.2f}-{ms(slowest):.2f}) | "
              f"{base / seconds:.2f}x | {ms(cpu):.2f} | {cpu / seconds:.2f} |")
    print(f"\nload average after: {os.getloadavg()[0]:.2f}; cache entry: {cached / 1e6:.1f} MB "
          f"({cached / len(images) / 1e3:.0f} KB per image, uint8 224 x 224 crops)")


if __name__ == "__main__":
    main()
