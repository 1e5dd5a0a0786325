"""The types of an image set, in a module of their own so that helpers.data, guards, loading and image_cache
all import them from here and none of them imports another in a circle.

    ImageSet(name, count, get, labels=None, tensor=None)   # get(i) -> a PIL image or a (3, H, W) uint8 tensor
    FileImages(paths, loader)                               # a get() that reads files: loader(paths[i])
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


class FileImages:
    """get(i) of an image set read from files: loader(paths[i]) -> PIL image.

    A plain object rather than a closure, so that the files behind a set are known: helpers.image_cache
    keys its entries on them (path, size, modification time), and it can be sent to another process.
    loader must be a module-level function (read_rgb, or torchvision's own for Imagenette).
    """

    def __init__(self, paths, loader, parent: "FileImages | None" = None, rows: list | None = None,
                 ancestors: list | None = None):
        self.paths, self.loader = [str(p) for p in paths], loader
        self.parent, self.rows = parent, rows  # a subset: its images are the whole set's (`parent`) at `rows`
        # every set this one was cut from, nearest first, each with the rows it takes from it (the last is
        # (parent, rows)): a shard of a 500-image sample of a folder can then be read from the sample's disk cache
        self.ancestors = ancestors if ancestors is not None else ([] if parent is None else [(parent, rows)])

    def __call__(self, i: int):
        return self.loader(self.paths[i])

    def __len__(self):
        return len(self.paths)

    def subset(self, indices) -> "FileImages":
        """The files at `indices`, remembering every set they come from (their disk caches serve them too)."""
        idx = [int(i) for i in indices]
        ancestors = [(self, idx)] + [(above, [rows[i] for i in idx]) for above, rows in self.ancestors]
        root, rows = ancestors[-1]
        return FileImages([root.paths[r] for r in rows], self.loader, root, rows, ancestors)


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
