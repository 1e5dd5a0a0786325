"""Images for the analyses, on either track, preprocessed the way each model expects.

    images = image_set("shapes", count=2048)            # lite track: generated, no download
    images = image_set("imagenette", count=5000)        # full track: torchvision download (~1.5 GB)
    images = image_set("cifar10") / image_set("path/to/folder")
    for batch in batches(images, model, batch_size=256):   # (B, 3, H, W) float, normalised for `model`
        ...

Preprocessing always comes from the model's own pretrained config (timm's resolve_data_config):
resize, crop and mean/std exactly as the model was trained, never constants copied by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from helpers import shapes
from helpers.course import DATA_DIR

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
DOWNLOAD_DIR = DATA_DIR / "downloads"  # git-ignored


@dataclass
class ImageSet:
    """A fixed, ordered set of images. get(i) returns a PIL image (full track) or a uint8 tensor (shapes)."""

    name: str
    count: int
    get: callable
    labels: list | None = None
    tensor: torch.Tensor | None = None  # all images as one uint8 (N, 3, H, W) tensor, when they fit (shapes)

    def __len__(self):
        return self.count


def _shapes_set(count: int, split: str) -> ImageSet:
    images, labels = shapes.load_split(split, count=count)
    return ImageSet("shapes", len(images), lambda i: images[i], labels.tolist(), tensor=images)


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
        if name == "imagenette":
            dataset = torchvision.datasets.Imagenette(str(root), split="val", size="320px", download=download and not (root / "imagenette2-320").exists())
        else:
            dataset = torchvision.datasets.CIFAR10(str(root), train=False, download=download)
    except Exception as error:  # no network, or an interrupted download
        raise RuntimeError(f"Could not get the {name} images ({type(error).__name__}: {str(error)[:150]}). "
                           "Offline? Use the lite track's 'shapes' images, or image_set('path/to/your/folder').") from None
    order = _fixed_order(len(dataset))
    order = order if count is None else order[:count]
    # labels without decoding every image: CIFAR keeps them in .targets, Imagenette in (path, label) pairs
    all_labels = dataset.targets if name == "cifar10" else [label for _, label in getattr(dataset, "_samples", [])]
    labels = [all_labels[i] for i in order] if len(all_labels) == len(dataset) else None
    return ImageSet(name, len(order), lambda i: dataset[order[i]][0], labels)


def _folder_set(folder: Path, count: int | None) -> ImageSet:
    """Images in `folder` and its subfolders, in a fixed shuffled order.

    With one subfolder per class (the ImageFolder layout) the labels are the subfolder
    indices in sorted order; with all images in `folder` itself there are no labels.
    """
    from PIL import Image

    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder. Give a folder of images, or one of 'shapes', 'imagenette', 'cifar10'.")
    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS)
    if not files:
        raise ValueError(f"No images found in {folder} (looked for {', '.join(IMAGE_EXTENSIONS)} files, in subfolders too).")
    # class index of each subfolder, from every file, so that a label does not depend on `count`
    classes = {parent: i for i, parent in enumerate(sorted({f.parent for f in files}))}
    files = [files[i] for i in _fixed_order(len(files))]
    files = files if count is None else files[:count]
    labels = [classes[f.parent] for f in files] if folder not in classes else None
    return ImageSet(str(folder), len(files), lambda i: Image.open(files[i]).convert("RGB"), labels)


def image_set(source: str, count: int | None = None, split: str = "test", download: bool = True) -> ImageSet:
    """An ordered image set by name ('shapes', 'imagenette', 'cifar10') or folder path.

    count: how many images (always the same ones; folders and torchvision sets are taken in a
    fixed shuffled order so that any count mixes the classes). split: for 'shapes' only.
    .labels holds class indices where the source has them (shapes, cifar10, imagenette, a folder
    with one subfolder per class), else None.
    """
    if source == "shapes":
        return _shapes_set(count or 2048, split)
    if source in ("imagenette", "cifar10"):
        return _torchvision_set(source, count, download)
    return _folder_set(Path(source), count)


def preprocess_for(model):
    """The preprocessing function of a timm model, from its own data config.

    Returns fn(image) -> (3, H, W) float tensor. A uint8 tensor (shapes; (3, H, W) or a batch
    (B, 3, H, W)) is only normalised; a PIL image goes through timm's eval transform (resize,
    centre crop, normalise).
    """
    from timm.data import create_transform, resolve_data_config

    config = resolve_data_config(model=model)
    pil_transform = create_transform(**config, is_training=False)
    mean = torch.tensor(config["mean"])[:, None, None]
    std = torch.tensor(config["std"])[:, None, None]

    def preprocess(image):
        if isinstance(image, torch.Tensor):
            if tuple(image.shape[-2:]) != tuple(config["input_size"][-2:]):
                raise ValueError(f"Image of size {tuple(image.shape[-2:])} but the model expects {config['input_size'][-2:]}. "
                                 "Use the model's own image set (lite models take 'shapes').")
            return (image.float() / 255 - mean) / std
        return pil_transform(image)

    return preprocess


def batches(images: ImageSet, model, batch_size: int = 256, device=None):
    """Yield preprocessed (B, 3, H, W) batches of `images` in order, for `model`."""
    preprocess = preprocess_for(model)
    device = device or next(model.parameters()).device
    for start in range(0, len(images), batch_size):
        stop = min(start + batch_size, len(images))
        if images.tensor is not None:  # one vectorised step instead of a Python loop over images
            yield preprocess(images.tensor[start:stop]).to(device)
        else:
            yield torch.stack([preprocess(images.get(i)) for i in range(start, stop)]).to(device)
