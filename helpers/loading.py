"""Image files to model-ready batches: decoded in a few threads at once, cropped once per preprocessing.

    prep = preprocessing(model)                      # timm's eval transform, split into a crop and a normalisation
    for x in file_batches(images, prep, 256, device):  # (B, 3, H, W) float on `device`, in the set's order
        ...

helpers.data.batches calls this for every image set not held as one tensor (image folders,
Imagenette, CIFAR-10, changed_images of those). Why: decoding a JPEG and resizing it took the
main thread as long as a GPU's forward pass of the image, or longer, and every pass decoded again.

- **Threads, not processes.** PIL decodes and resizes with Python's lock released, so a thread pool
  decodes in parallel with no worker start-up, no pickling (Windows' and macOS's spawn start
  method, Jupyter kernels) and no second copy of the process in memory.
  COURSE_WORKERS=N sets the number of threads; 0 decodes in the calling thread, as before.
  Default: one per CPU core, at most 4 (Colab and this course's CI have 2 cores). Only sets read
  from files use threads (worker_count says why): shapes and tensor_set are normalised in one
  vectorised step; changed_images, CIFAR-10 and sets made by hand run in the calling thread.
- **Order.** Batch k always holds images k*B ... (k+1)*B - 1, whatever the thread count; at most two
  batches are decoded ahead, so next(batches(...)) does not decode the whole set.
- **Uint8 crops.** timm's eval transform is resize -> centre crop -> to float / 255 -> normalise. The
  threads stop at the crop (uint8); the batch is then normalised in one step, on the GPU when there
  is one (a quarter of the bytes cross the bus). The numbers are the same, bit for bit, as the
  transform's own (tests/test_data_loading.py). On CUDA the crops are pinned and copied without
  blocking. A transform of another shape runs whole in the threads (and is not cached).
- **Disk cache.** File-backed sets keep their crops on disk (helpers.image_cache): the next pass or
  notebook with the same images and the same resize/crop reads them instead of decoding again.
"""

from __future__ import annotations

import itertools
import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from helpers import image_cache
from helpers.image_types import FileImages

WORKERS_ENV = "COURSE_WORKERS"
MAX_DEFAULT_WORKERS = 4
AHEAD = 2  # batches decoded ahead of the one being used


def cpu_count() -> int:
    """CPU cores this process may use (its affinity, where the system tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def worker_count(images) -> int:
    """How many decoding threads `images` gets: COURSE_WORKERS or the default for a set read from files, else 0.

    Default: one per core, at most MAX_DEFAULT_WORKERS; 0 (decode in the calling thread) on one core.
    Only files (helpers.data.FileImages: a path and a pure reading function per image) go to threads.
    Any other set runs in the calling thread, as before: one held as a tensor is normalised in one
    vectorised step, and one whose pixels a function computes (changed_images with a student's
    function, a set made by hand) might not be safe to run in threads, or might draw random numbers,
    whose order threads would shuffle.
    """
    if not isinstance(images.get, FileImages):
        return 0
    text = os.environ.get(WORKERS_ENV, "").strip()
    if text:
        if not text.isdigit():
            raise ValueError(f"{WORKERS_ENV}={text!r}: give a whole number of decoding threads (0 = decode in the "
                             "calling thread), or unset it for the default.")
        most = max(MAX_DEFAULT_WORKERS, 4 * cpu_count())  # beyond a few per core, threads only add memory and switching
        if int(text) > most:
            raise ValueError(f"{WORKERS_ENV}={text}: at most {most} decoding threads on this machine's {cpu_count()} "
                             "core(s). Unset it for the default (one per core, at most 4).")
        return int(text)
    cores = cpu_count()
    return 0 if cores <= 1 else min(MAX_DEFAULT_WORKERS, cores)


@dataclass
class Preprocessing:
    """A model's eval preprocessing: crop (PIL -> PIL: resize, centre crop) then normalise (uint8 -> float).

    crop is None when timm's transform is not of that shape; then `whole` (PIL -> float tensor) runs.
    """

    config: dict
    whole: object
    crop: object | None
    mean: torch.Tensor  # (3, 1, 1) float32
    std: torch.Tensor

    def crop_to_uint8(self, image) -> torch.Tensor:
        """A PIL image -> its (3, H, W) uint8 crop, the transform's input to its to-tensor step."""
        cropped = self.crop(image)
        pixels = np.asarray(cropped if cropped.mode == "RGB" else cropped.convert("RGB"))  # (H, W, 3)
        return torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1)))

    def checked_tensor(self, image: torch.Tensor) -> torch.Tensor:
        """An image given as a tensor (a set whose get returns them): uint8 (3, H, W) at the model's size, as it is."""
        if image.dtype != torch.uint8:  # a float tensor may already be scaled or normalised: never guess
            raise ValueError(f"Image tensors must be uint8 (0-255), got {image.dtype}. Convert floats in [0, 1] with "
                             "(x * 255).round().to(torch.uint8), or give PIL images.")
        if tuple(image.shape[-2:]) != tuple(self.config["input_size"][-2:]):
            raise ValueError(f"Image of size {tuple(image.shape[-2:])} but the model expects {self.config['input_size'][-2:]}. "
                             "Use the model's own image set (lite models take 'shapes').")
        return image

    def normalise(self, crops: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) uint8 -> float32, as timm's to-tensor and normalise steps compute it."""
        mean, std = self.mean.to(crops.device), self.std.to(crops.device)
        x = crops.float()
        return x.div_(255).sub_(mean).div_(std)  # in place: a third of the time of (x / 255 - mean) / std, same bits

    def fingerprint(self) -> dict:
        """What the crops depend on (not mean and std, which come after): for helpers.image_cache's key."""
        import PIL
        import timm
        wanted = ("input_size", "interpolation", "crop_pct", "crop_mode")
        return {"config": {k: repr(self.config.get(k)) for k in wanted}, "steps": repr(self.crop),
                "timm": timm.__version__, "pillow": PIL.__version__}


def preprocessing(model) -> Preprocessing:
    """The model's own eval preprocessing (timm's resolve_data_config, at its test size), split in two."""
    from timm.data import create_transform, resolve_data_config
    from torchvision import transforms

    # use_test_size: some models are evaluated larger than they were trained (resnet50.tv2_in1k: 176 px
    # in training, 224 px at test); the analyses see the images at the evaluation size
    config = resolve_data_config(model=model, use_test_size=True)
    whole = create_transform(**config, is_training=False)
    mean = torch.tensor(config["mean"])[:, None, None]
    std = torch.tensor(config["std"])[:, None, None]
    steps = list(getattr(whole, "transforms", []))
    crop = None
    if (len(steps) >= 3 and type(steps[-2]).__name__ in ("ToTensor", "MaybeToTensor")
            and isinstance(steps[-1], transforms.Normalize)
            and torch.equal(torch.as_tensor(steps[-1].mean, dtype=torch.float32).reshape(-1), mean.reshape(-1))
            and torch.equal(torch.as_tensor(steps[-1].std, dtype=torch.float32).reshape(-1), std.reshape(-1))
            and all(type(s).__name__ in ("Resize", "CenterCrop", "ResizeKeepRatio") for s in steps[:-2])):
        crop = transforms.Compose(steps[:-2])
    return Preprocessing(config, whole, crop, mean, std)


def _decode(images, prep: Preprocessing, i: int) -> torch.Tensor:
    """Image i: its uint8 crop, or its float tensor when the transform cannot be split."""
    picture = images.get(i)
    if isinstance(picture, torch.Tensor):  # already pixels at the model's size: only normalised
        picture = prep.checked_tensor(picture)
        return picture if prep.crop is not None else prep.normalise(picture[None])[0]
    return prep.crop_to_uint8(picture) if prep.crop is not None else prep.whole(picture)


def decoded(images, prep: Preprocessing, batch_size: int, workers: int):
    """Yield (B, 3, H, W) batches of `images` in order, decoded by `workers` threads (0: in this thread)."""
    starts = range(0, len(images), batch_size)
    if workers == 0:
        for start in starts:
            yield torch.stack([_decode(images, prep, i) for i in range(start, min(start + batch_size, len(images)))])
        return
    pool = ThreadPoolExecutor(workers, thread_name_prefix="decode")
    try:
        pending, ahead = deque(), iter(starts)

        def submit(start):
            pending.append([pool.submit(_decode, images, prep, i) for i in range(start, min(start + batch_size, len(images)))])

        for start in itertools.islice(ahead, AHEAD + 1):
            submit(start)
        while pending:
            futures = pending.popleft()
            start = next(ahead, None)
            if start is not None:
                submit(start)
            yield torch.stack([f.result() for f in futures])  # result() re-raises a file's error, naming it
    finally:  # also when the caller stops early (next(batches(...))): drop what was queued
        pool.shutdown(wait=False, cancel_futures=True)


def to_device(batch: torch.Tensor, device) -> torch.Tensor:
    """The batch on `device`: on CUDA from pinned memory without blocking (the copy overlaps the next decode)."""
    device = torch.device(device)
    if device.type == "cuda":
        return batch.pin_memory().to(device, non_blocking=True)
    return batch.to(device)


def file_batches(images, prep: Preprocessing, batch_size: int, device):
    """Yield (B, 3, H, W) float32 batches of a set not held as a tensor, normalised on `device`, in order.

    Crops come from helpers.image_cache when it holds this set for this preprocessing; otherwise
    they are decoded (worker_count threads) and, after a whole pass, kept there for next time.
    """
    if prep.crop is None:  # no uint8 stage to keep or to send: the whole transform runs in the threads
        for batch in decoded(images, prep, batch_size, worker_count(images)):
            yield to_device(batch, device)
        return
    entry = image_cache.Entry.for_images(images, prep)
    source = entry.read(batch_size) if entry is not None and entry.usable() else None  # None: a miss
    if source is None:
        source = decoded(images, prep, batch_size, worker_count(images))
        if entry is not None and entry.rows is None:  # a subsample whose whole set's entry failed is not written
            source = entry.write_through(source, len(images))
    for crops in source:
        yield prep.normalise(to_device(crops, device))


def fill_cache(images, prep: Preprocessing, batch_size: int = 256) -> bool:
    """Decode a set read from files once and write its disk-cache entry for `prep` (helpers.image_cache), unless an
    entry of it, or of a set it was cut from, is there already, or it cannot be kept. True when this call wrote it.
    The report's process 0 calls it before its shards start, so that each shard reads the entry."""
    if prep.crop is None:
        return False
    entry = image_cache.Entry.for_images(images, prep)
    if entry is None or entry.rows is not None or entry.usable():
        return False
    for _ in entry.write_through(decoded(images, prep, batch_size, worker_count(images)), len(images)):
        pass
    return entry.path.exists()
