"""Images for the analyses, on either track, preprocessed the way each model expects.

    images = image_set("shapes", count=2048)            # lite track: generated, no download
    images = image_set("imagenette")                    # full track: its 3,925 validation images (~340 MB download)
    images = image_set("cifar10") / image_set("path/to/folder")
    images = tensor_set(uint8_images, labels)           # your own (N, 3, H, W) uint8 tensor
    for batch in batches(images, model, batch_size=256):   # (B, 3, H, W) float, normalised for `model`
        ...

Image files are decoded in a few threads at once and, once decoded and cropped for a model's
preprocessing, kept on disk for the next pass and the next notebook (helpers.loading,
helpers.image_cache; COURSE_WORKERS and COURSE_IMAGE_CACHE_GB set how many threads and how much disk).

Preprocessing always comes from the model's own pretrained config (timm's resolve_data_config):
resize, crop and mean/std exactly as the model was trained, never constants copied by hand.

Image files are read as 8-bit RGB the same way whatever they hold: 16-bit grey images are
scaled (not clipped) to 8 bits, palette images are expanded, transparent pixels are laid over
white (what an image viewer shows) instead of revealing whatever colour they hide, and photos
are turned upright by their EXIF orientation. Hidden files and folders (".DS_Store",
"._photo.jpg", ".ipynb_checkpoints") are ignored. A file that cannot be read raises an error
that names it.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from helpers import download as download_lib
from helpers import loading
from helpers import shapes
from helpers.course import DATA_DIR
from helpers.guards import check_images, check_int, check_model
from helpers.image_types import FileImages, ImageSet  # noqa: F401  (re-exported: helpers.data.ImageSet)

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
# where downloaded image sets live (git-ignored); COURSE_DOWNLOAD_DIR puts them elsewhere (a Drive folder, say)
DOWNLOAD_DIR = Path(os.environ.get("COURSE_DOWNLOAD_DIR") or DATA_DIR / "downloads")
MAX_IMAGES_ENV = "COURSE_MAX_IMAGES"  # caps every image set (a quick trial run; the full-track rehearsal uses it)


def _check_count(count, available: int, source: str) -> int:
    """How many images to use: `count` (an int >= 1) or all `available`; never more than exist.

    Asking for more than exist gives all of them, with a printed line saying so, so that a
    text promising 5,000 images cannot silently run on 3,925. COURSE_MAX_IMAGES=N caps the
    result at N (also said), for a quick trial run.
    """
    if count is not None:
        count = check_int(count, "count", 1, "Give how many images to use, or leave count out for all of them.")
    cap = max_images()
    if cap is not None and cap < (available if count is None else min(count, available)):
        print(f"Note: {MAX_IMAGES_ENV}={cap}: using {cap:,} of the {available:,} images of '{source}' "
              f"({'all' if count is None else f'{count:,}'} asked for).")
        return cap
    if count is None:
        return available
    if count > available:
        print(f"Note: {count:,} images were asked for but '{source}' has {available:,}; using all {available:,}.")
        return available
    return count


def max_images():
    """The cap COURSE_MAX_IMAGES sets on every image set (an int >= 1), or None when it is unset."""
    text = os.environ.get(MAX_IMAGES_ENV, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{MAX_IMAGES_ENV}={text!r}: give a whole number of images >= 1, or unset it for no cap.")
    return int(text)


def _shapes_set(count, split: str) -> ImageSet:
    available = len(shapes.split_indices(split))
    images, labels = shapes.load_split(split, count=_check_count(2048 if count is None else count, available, "shapes"))
    return ImageSet("shapes", len(images), lambda i: images[i], labels.tolist(), tensor=images)


def tensor_set(images, labels=None, name: str = "tensor") -> ImageSet:
    """An ImageSet from your own images: a uint8 (N, 3, H, W) tensor or array, labels optional (N,) ints.

    Images must already have the model's input size (lite models: 32 x 32); they are normalised
    with the model's own mean and std, like the 'shapes' images.
    """
    images = torch.as_tensor(np.asarray(images)) if not isinstance(images, torch.Tensor) else images
    if images.ndim != 4 or images.shape[1] != 3 or images.dtype != torch.uint8:
        raise ValueError(f"tensor_set needs uint8 images of shape (N, 3, H, W), got {tuple(images.shape)} {images.dtype}. "
                         "Convert floats in [0, 1] with (x * 255).round().to(torch.uint8).")
    if labels is not None:
        array = np.asarray(labels.cpu() if isinstance(labels, torch.Tensor) else labels).reshape(-1)
        # int() would have turned 0.5 into class 0 and a name into a ValueError; -1 is no class index
        if array.dtype.kind not in "iu" or (array.size and array.min() < 0):
            raise ValueError(f"labels must be class indices 0..C-1 (whole numbers), got {array.dtype} values"
                             f"{' with negatives' if array.dtype.kind == 'i' else ''}. For class names: "
                             "names, labels = np.unique(names_per_image, return_inverse=True).")
        labels = [int(v) for v in array]
        if len(labels) != len(images):
            raise ValueError(f"{len(images)} images but {len(labels)} labels: give one label per image.")
    return ImageSet(name, len(images), lambda i: images[i], labels, tensor=images)


def _fixed_order(n: int) -> list:
    """A shuffled order of range(n), the same on every machine (seed 0).

    Folders and torchvision test sets are sorted by class. Taking their first `count` images
    would keep only a few classes, and every minibatch would hold one class (which biases
    minibatch CKA); a fixed shuffle avoids both and keeps runs reproducible.
    """
    return torch.randperm(n, generator=torch.Generator().manual_seed(0)).tolist()


def _torchvision_set(name: str, count: int | None, download: bool) -> ImageSet:
    import torchvision

    root = DOWNLOAD_DIR / name
    try:
        if name == "imagenette":  # resumable, verified, extracted atomically (helpers.download)
            download_lib.imagenette_folder(root, download=download)
            dataset = torchvision.datasets.Imagenette(str(root), split="val", size="320px", download=False)
        else:
            dataset = torchvision.datasets.CIFAR10(str(root), train=False, download=download)
    except Exception as error:  # no network, or an interrupted download
        raise RuntimeError(f"Could not get the {name} images ({type(error).__name__}: {str(error)[:150]}). "
                           "Offline? Use the lite track's 'shapes' images, or image_set('path/to/your/folder').") from None
    order = _fixed_order(len(dataset))[:_check_count(count, len(dataset), name)]
    # labels without decoding every image: CIFAR keeps them in .targets, Imagenette in (path, label) pairs
    all_labels = dataset.targets if name == "cifar10" else [label for _, label in getattr(dataset, "_samples", [])]
    labels = [all_labels[i] for i in order] if len(all_labels) == len(dataset) else None
    samples = getattr(dataset, "_samples", None)
    if name == "imagenette" and samples is not None and len(samples) == len(dataset):  # files: decoded in threads, cached
        return ImageSet(name, len(order), _first_files([samples[i][0] for i in _fixed_order(len(dataset))],
                                                       dataset.loader, len(order)), labels)
    return ImageSet(name, len(order), lambda i: dataset[order[i]][0], labels)


def read_rgb(path) -> "PIL.Image.Image":
    """An image file as 8-bit RGB (see the module docstring); an unreadable file raises naming it."""
    from PIL import Image, ImageOps

    try:
        with Image.open(path) as opened:
            opened.load()  # decode now: a truncated file fails here, not deep inside a transform
            image = ImageOps.exif_transpose(opened)  # a phone photo's EXIF orientation: upright, as viewers show it
            if image.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):  # 16-bit grey: scale, do not clip at 255
                grey = np.clip(np.asarray(image, dtype=np.float64) / 257.0, 0, 255).round().astype(np.uint8)
                return Image.fromarray(grey).convert("RGB")
            if image.mode == "F":
                raise ValueError("32-bit floating-point images have no fixed range; save it as an 8- or 16-bit image")
            if image.mode == "P" and "transparency" in image.info:
                image = image.convert("RGBA")
            if image.mode in ("RGBA", "LA", "PA", "La", "RGBa"):
                rgba = image.convert("RGBA")
                white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
                return Image.alpha_composite(white, rgba).convert("RGB")
            return image.convert("RGB")
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:
        raise ValueError(f"Could not read the image file {path}: {error}. Remove or replace this file "
                         "(is it truncated, or not really an image?).") from None


def _folder_set(folder: Path, count) -> ImageSet:
    """Images in `folder` and its subfolders, in a fixed shuffled order.

    With one subfolder per class (the ImageFolder layout) the labels are the indices of the
    top-level subfolders in sorted order (images in deeper subfolders belong to their top-level
    one); with all images in `folder` itself there are no labels. A mix of both has no labels
    either, with a warning.
    """
    if not folder.is_dir():
        import difflib

        close = difflib.get_close_matches(str(folder).lower(), ["shapes", "imagenette", "cifar10"], n=1, cutoff=0.7)
        hint = f" Did you mean '{close[0]}'?" if close else ""  # 'shapez' was read as a folder's name
        raise FileNotFoundError(f"{folder} is not a folder.{hint} Give a folder of images, or one of 'shapes', "
                                "'imagenette', 'cifar10'.")
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS
                   and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    if not files:
        raise ValueError(f"No images found in {folder} (looked for {', '.join(IMAGE_EXTENSIONS)} files, in subfolders too).")
    # the class of a file is its top-level subfolder, from every file, so that a label does not depend on `count`
    top = [f.relative_to(folder).parts[0] if len(f.relative_to(folder).parts) > 1 else None for f in files]
    labelled = all(t is not None for t in top)
    if not labelled and any(t is not None for t in top):
        warnings.warn(f"{folder} holds images both directly and in subfolders, so the subfolders cannot be read as "
                      "classes: the images get no labels. Put every image in a class subfolder to get labels.")
    classes = {name: i for i, name in enumerate(sorted(set(top)))} if labelled else {}
    shuffled = [files[i] for i in _fixed_order(len(files))]
    files = shuffled[:_check_count(count, len(files), str(folder))]
    labels = [classes[f.relative_to(folder).parts[0]] for f in files] if labelled else None
    return ImageSet(str(folder), len(files), _first_files(shuffled, read_rgb, len(files)), labels)


def _first_files(paths: list, loader, count: int) -> FileImages:
    """The first `count` of `paths`, as a subset of all of them: a set of any count is then read from the
    disk cache of the whole set, when some notebook has decoded that (helpers.image_cache)."""
    every = FileImages(paths, loader)
    return every if count == len(paths) else every.subset(range(count))


def image_set(source: str, count: int | None = None, split: str = "test", download: bool = True) -> ImageSet:
    """An ordered image set by name ('shapes', 'imagenette', 'cifar10') or folder path.

    count: how many images (always the same ones; folders and torchvision sets are taken in a
    fixed shuffled order so that any count mixes the classes); None means all (2,048 for
    'shapes'); more than exist gives all that exist, with a printed note. split: for 'shapes' only.
    .labels holds class indices where the source has them (shapes, cifar10, imagenette, a folder
    with one subfolder per class), else None.
    """
    if not isinstance(source, (str, os.PathLike)):
        hint = " For a uint8 tensor of images use helpers.data.tensor_set(images, labels)." if isinstance(source, (torch.Tensor, np.ndarray)) else ""
        raise TypeError(f"source must be 'shapes', 'imagenette', 'cifar10' or a folder path, got {type(source).__name__}.{hint}")
    if not str(source).strip():  # Path("") is the current folder: every image under it would be read
        raise ValueError("source is empty: give 'shapes', 'imagenette', 'cifar10' or a folder path.")
    if source == "shapes":
        return _shapes_set(count, split)
    if source in ("imagenette", "cifar10"):
        return _torchvision_set(source, count, download)
    return _folder_set(Path(source), count)


def subset(images: ImageSet, indices) -> ImageSet:
    """The images at `indices` (in that order) as a new ImageSet, labels kept (e.g. for helpers.intervals)."""
    idx = _checked_indices(indices, len(images))
    labels = None if images.labels is None else [images.labels[i] for i in idx]
    tensor = None if images.tensor is None else images.tensor[idx]
    get = images.get.subset(idx) if isinstance(images.get, FileImages) else (lambda i: images.get(idx[i]))
    return ImageSet(f"{images.name} (subsample of {len(idx)})", len(idx), get, labels, tensor)


def _checked_indices(indices, count: int) -> list:
    """Positions into a set of `count` images: whole numbers in 0..count-1, at least one (repeats allowed: a resample)."""
    if isinstance(indices, torch.Tensor):
        indices = indices.cpu().numpy()
    array = np.asarray(indices if isinstance(indices, np.ndarray) else list(indices))
    if array.dtype == bool:
        raise TypeError("indices is a True/False mask: pass the positions it selects, np.flatnonzero(mask).")
    if array.size == 0 or array.ndim != 1 or array.dtype.kind not in "iu":
        raise ValueError(f"indices must be a non-empty 1-D list of whole numbers (positions 0..{count - 1}), got "
                         f"{array.size} value(s) of {array.dtype}.")
    if array.min() < 0 or array.max() >= count:  # a negative index would silently count from the end
        raise IndexError(f"indices run from {array.min()} to {array.max()}, but the set has {count} images (0..{count - 1}).")
    return [int(i) for i in array]


def grey(pixels: np.ndarray) -> np.ndarray:
    """The same picture in grey: every channel set to the mean of the three.

    pixels: a uint8 array, (3, H, W) or (H, W, 3) (the channel axis is the one of length 3; (3, H, 3)
    is ambiguous and refused). Returns a uint8 array of the same shape.
    """
    pixels = np.asarray(pixels)
    axis = _channel_axis(pixels)
    mean = pixels.astype(np.float64).mean(axis=axis, keepdims=True)
    return np.broadcast_to(np.rint(mean), pixels.shape).astype(np.uint8)


def equal_brightness(pixels: np.ndarray, level: float = 127.5) -> np.ndarray:
    """The same picture shifted so that its mean over pixels and channels is `level` (within 0.5).

    pixels: a uint8 array of any shape. Returns a uint8 array of the same shape. Shifting pushes some
    values past 0 or 255, and clipping them moves the mean back, so shift and clip repeat until the
    mean is within 0.5 of `level` (a few rounds; at most 20).
    """
    values = np.asarray(pixels).astype(np.float64)
    for _ in range(20):
        values = np.clip(values + (level - values.mean()), 0, 255)
        if abs(values.mean() - level) < 0.25:
            break
    return np.rint(values).astype(np.uint8)


def _channel_axis(pixels: np.ndarray) -> int:
    if pixels.ndim != 3 or 3 not in (pixels.shape[0], pixels.shape[-1]) or pixels.shape[0] == pixels.shape[-1] == 3:
        raise ValueError(f"Expected one RGB picture as (3, H, W) or (H, W, 3), got shape {pixels.shape}.")
    return 0 if pixels.shape[0] == 3 else -1


def changed_images(images: ImageSet, change, label: str) -> ImageSet:
    """The same images with `change(uint8 array) -> uint8 array` applied to each (e.g. grey, equal_brightness).

    Works for tensor images (shapes: (3, H, W)) and PIL images (full track: (H, W, 3)) alike; labels kept.
    """
    from PIL import Image

    def changed(pixels):
        out = np.asarray(change(pixels))
        if out.shape != pixels.shape or out.dtype != np.uint8:
            raise ValueError(f"changed_images: `{getattr(change, '__name__', change)}` must return a uint8 array shaped like its "
                             f"input {pixels.shape}, got {out.dtype} {out.shape}. Round and clip to 0-255, then .astype(np.uint8).")
        return np.ascontiguousarray(out)

    def get(i):
        picture = images.get(i)
        if isinstance(picture, torch.Tensor):
            return torch.from_numpy(changed(picture.cpu().numpy()))
        return Image.fromarray(changed(np.asarray(picture.convert("RGB"))))

    tensor = None
    if images.tensor is not None:
        tensor = torch.stack([get(i) for i in range(len(images))])
    return ImageSet(f"{images.name} ({label})", len(images), get, images.labels, tensor)


def preprocess_for(model):
    """The preprocessing function of a timm model, from its own data config.

    Returns fn(image) -> (3, H, W) float tensor. A uint8 tensor (shapes; (3, H, W) or a batch
    (B, 3, H, W)) is only normalised; a PIL image goes through timm's eval transform (resize,
    centre crop, normalise).
    """
    from timm.data import create_transform, resolve_data_config

    # use_test_size: some models are evaluated larger than they were trained (resnet50.tv2_in1k: 176 px
    # in training, 224 px at test); the analyses see the images at the evaluation size
    config = resolve_data_config(model=model, use_test_size=True)
    pil_transform = create_transform(**config, is_training=False)
    mean = torch.tensor(config["mean"])[:, None, None]
    std = torch.tensor(config["std"])[:, None, None]

    def preprocess(image):
        if isinstance(image, torch.Tensor):
            if image.dtype != torch.uint8:  # a float tensor may already be scaled or normalised: never guess
                raise ValueError(f"Image tensors must be uint8 (0-255), got {image.dtype}. Convert floats in [0, 1] with "
                                 "(x * 255).round().to(torch.uint8), or give PIL images.")
            if tuple(image.shape[-2:]) != tuple(config["input_size"][-2:]):
                raise ValueError(f"Image of size {tuple(image.shape[-2:])} but the model expects {config['input_size'][-2:]}. "
                                 "Use the model's own image set (lite models take 'shapes').")
            return (image.float() / 255 - mean) / std
        return pil_transform(image)

    return preprocess


def batches(images: ImageSet, model, batch_size: int = 256, device=None):
    """Yield preprocessed (B, 3, H, W) float32 batches of `images` in order, for `model`, on its device.

    A set held as one tensor (shapes, tensor_set) is normalised in one vectorised step per batch;
    any other is decoded in threads and cached on disk when read from files (helpers.loading).
    """
    check_images(images)
    check_model(model)
    batch_size = check_int(batch_size, "batch_size", 1)
    device = device or next(model.parameters(), torch.empty(0)).device
    if images.tensor is None:
        yield from loading.file_batches(images, loading.preprocessing(model), batch_size, device)
        return
    preprocess = preprocess_for(model)
    for start in range(0, len(images), batch_size):
        yield preprocess(images.tensor[start:start + batch_size]).to(device)
