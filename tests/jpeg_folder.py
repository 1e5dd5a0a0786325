"""A folder of photo-like JPEG files for the tests and benchmarks/bench_decoding.py (no download needed).

    write_jpeg_folder(tmp_path / "jpegs", count=500)   # Imagenette's layout: one subfolder per class

Each file is a 'shapes' image (helpers.shapes) scaled up to a shorter side of `side` px (320, like
Imagenette's 320-px release), 1-1.5x as long the other way, with seeded noise so that it compresses
like a photograph (about 40-60 KB at quality 90), not like a flat drawing.
"""

from pathlib import Path

import numpy as np
from PIL import Image

from helpers import shapes


def write_jpeg_folder(folder, count: int, side: int = 320, classes: int = 5, seed: int = 0) -> Path:
    """`count` JPEG files in `classes` class subfolders of `folder` (created). Returns the folder."""
    folder = Path(folder)
    images, labels = shapes.render(np.arange(count), seed=seed)  # (count, 3, 32, 32) uint8
    rng = np.random.default_rng(seed)
    for i in range(count):
        longer = int(side * (1.0 + 0.5 * (i % 3) / 2))  # 1, 1.25 or 1.5 times the shorter side
        size = (longer, side) if i % 2 else (side, longer)  # landscape and portrait
        picture = Image.fromarray(images[i].permute(1, 2, 0).numpy()).resize(size, Image.BILINEAR)
        noisy = np.asarray(picture, dtype=np.float32) + rng.normal(0, 12, (size[1], size[0], 3))
        target = folder / f"class{int(labels[i]) % classes}"
        target.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).save(target / f"image{i:04d}.jpg", quality=90)
    return folder
