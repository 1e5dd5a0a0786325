"""What the full-track rehearsal needs, built offline: a Hugging Face cache and an Imagenette folder.

    cache = hub_cache(tmp / "hf", ["vit_base_patch16_224.augreg_in21k_ft_in1k", ...])   # random weights
    root = imagenette_folder(tmp / "downloads")                                          # real photographs

The cache has the hub's own layout, so that timm and huggingface_hub find the weights by their
usual route (with HF_HUB_OFFLINE=1 and HF_HUB_CACHE pointing at it):

    models--timm--NAME/refs/main                      the commit hash of 'main'
    models--timm--NAME/blobs/SHA256                   the file itself, named by its sha256
    models--timm--NAME/snapshots/COMMIT/model.safetensors -> ../../blobs/SHA256

The images are crops and mirror images of the one photograph that ships with matplotlib
(grace_hopper.jpg: a U.S. Navy portrait of Grace Hopper, public domain; matplotlib took it in
for its examples in PR #1599 as a public-domain image), in Imagenette's folder layout
(imagenette2-320/val/WNID/NAME.JPEG, shorter side 320 px) so that torchvision's Imagenette
class reads them and gives the labels it would give.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

# two of Imagenette's ten classes (tench, church): few images still give each class at least two
# in the probes' pool (notebooks 13, 14), which a 10-way split of 16 images could not
WNIDS = ("n01440764", "n03028079")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_random_weights(name: str, cache: Path, seed: int) -> Path:
    """Random weights of timm model `name` (seeded), cached as the hub would cache them. Returns the snapshot file.

    The seed differs from the notebooks' untrained models (torch.manual_seed(0)), so that a
    'pretrained' model and its untrained control are different networks.
    """
    import timm
    from safetensors.torch import save_file
    from timm.models import get_pretrained_cfg

    repo = get_pretrained_cfg(name).hf_hub_id  # 'timm/NAME'
    folder = cache / f"models--{repo.replace('/', '--')}"
    commit = hashlib.sha1(f"{name} {seed}".encode()).hexdigest()  # any 40-hex name serves as the commit
    torch.manual_seed(seed)
    state = {k: v.contiguous() for k, v in timm.create_model(name, pretrained=False).state_dict().items()}
    (folder / "blobs").mkdir(parents=True, exist_ok=True)
    staging = folder / "blobs" / "incoming"
    save_file(state, str(staging), metadata={"format": "pt"})
    blob = staging.rename(folder / "blobs" / _sha256(staging))
    snapshot = folder / "snapshots" / commit / "model.safetensors"
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    snapshot.symlink_to(Path("..") / ".." / "blobs" / blob.name)
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(commit)
    return snapshot


def hub_cache(cache: Path, names) -> Path:
    """A Hugging Face hub cache holding random weights for every timm name in `names` (seeds 1, 2, ...)."""
    for seed, name in enumerate(dict.fromkeys(names), start=1):
        write_random_weights(name, cache, seed)
    return cache


def imagenette_folder(root: Path, per_class: int = 8) -> Path:
    """`per_class` images for each class in WNIDS, in Imagenette's layout under root/imagenette. Returns root.

    Each image is a different crop (position and size) of the photograph, every second one mirrored,
    resized to a shorter side of 320 px like Imagenette's 320-px release.
    """
    import matplotlib.cbook
    from PIL import Image, ImageOps

    with Image.open(matplotlib.cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)) as opened:
        photo = opened.convert("RGB")  # 512 x 600 px
    w, h = photo.size
    k = 0
    for wnid in WNIDS:
        folder = root / "imagenette" / "imagenette2-320" / "val" / wnid
        folder.mkdir(parents=True, exist_ok=True)
        for j in range(per_class):
            side = int(min(w, h) * (0.55 + 0.45 * ((k * 7) % 10) / 9))  # 55-100% of the shorter side
            tall = min(h, int(side * (1.0 + 0.1 * (k % 3))))  # square to 6:5 portrait
            left, top = (k * 53) % (w - side + 1), (k * 97) % (h - tall + 1)
            crop = photo.crop((left, top, left + side, top + tall))
            crop = ImageOps.mirror(crop) if k % 2 else crop
            scale = 320 / min(crop.size)
            crop = crop.resize((round(crop.size[0] * scale), round(crop.size[1] * scale)), Image.BICUBIC)
            crop.save(folder / f"ILSVRC2012_val_{k + 1:08d}.JPEG", quality=90)
            k += 1
    # what a finished download leaves last (helpers.download): without it the folder counts as half-extracted
    from helpers.download import MARKER
    (root / "imagenette" / "imagenette2-320" / MARKER).write_text("a test folder\n")
    return root
