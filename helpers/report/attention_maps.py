"""The report's attention maps of a ViT: where each head of the first and the last block looks, on a few images.

For each of a few fixed example images (EXAMPLE_IMAGES: the first image of each of the first classes, or the
first images of an unlabelled set), the attention row of one query token, read over the patch grid:
    the CLS token's row for a ViT whose head reads its CLS token (what the classifier sees);
    the centre patch's row for a ViT without a CLS token read by the head (a GAP ViT), since it has no CLS.
Per head in the first and the last block, and averaged over the heads. The values are the raw softmax
probabilities on the patch keys (the rest of the row goes to the prefix tokens: 'prefix_share' says how much),
computed by helpers.attention.attention_maps.

    maps = cached_attention_maps(settings, "a", model, images, cache, log)   # {'first': (E, heads, g, g), ...}
    fig = attention_maps_figure(maps, "lite-vit")
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from helpers.attention import shown_pixels  # noqa: F401  (the pictures as the model saw them; used below)

EXAMPLE_IMAGES = 4  # images shown: enough to see whether a head's pattern follows the image, few enough to read


def example_indices(images, count: int = EXAMPLE_IMAGES) -> list:
    """Indices of the example images: the first image of each of the first `count` classes (in the set's fixed
    order), topped up with the first other images when there are fewer classes; the first `count` images of an
    unlabelled set."""
    count = min(count, len(images))
    if images.labels is None:
        return list(range(count))
    chosen, seen = [], set()
    for i, label in enumerate(images.labels):
        if label not in seen:
            seen.add(label)
            chosen.append(i)
        if len(chosen) == count:
            return chosen
    rest = [i for i in range(len(images)) if i not in chosen]
    return chosen + rest[:count - len(chosen)]


def query_token(model) -> tuple:
    """(index of the query token in the (N, N) attention, its name): the CLS token (index 0) when the head reads
    it, else the centre patch of the grid (the patch at row g // 2, column g // 2)."""
    from helpers.report.controls import classifier_policy

    if classifier_policy(model) == "cls":
        return 0, "CLS token"
    grid = _grid(model)
    centre = (grid // 2) * grid + grid // 2
    return int(model.num_prefix_tokens) + centre, f"centre patch (row {grid // 2}, column {grid // 2} of {grid}x{grid})"


def _grid(model) -> int:
    patches = int(model.patch_embed.num_patches)
    grid = int(round(patches ** 0.5))
    if grid * grid != patches:
        raise ValueError(f"{patches} patches do not form a square grid: attention maps need a square patch grid.")
    return grid


def query_maps(model, x: torch.Tensor) -> dict:
    """{'first', 'last': (B, heads, g, g) float64, 'prefix_share_first', 'prefix_share_last': (B, heads)}: the
    query token's attention (query_token) over the patch grid in the first and the last block, for x (B, 3, H, W)."""
    from helpers.attention import attention_maps

    query, _ = query_token(model)
    prefix, grid = int(model.num_prefix_tokens), _grid(model)
    maps = attention_maps(model, x)  # one (B, heads, N, N) per block
    out = {}
    for which, attn in (("first", maps[0]), ("last", maps[-1])):
        row = attn[:, :, query, :].double()                       # (B, heads, N)
        out[which] = row[:, :, prefix:].reshape(*row.shape[:2], grid, grid).detach().cpu().numpy()
        out[f"prefix_share_{which}"] = row[:, :, :prefix].sum(-1).detach().cpu().numpy()
    return out


def cached_attention_maps(settings, which: str, model, images, cache: Path, log) -> dict:
    """The attention maps of model `which` ('a' or 'b') on the example images, cached as
    <cache>/attention_maps_<which>.npz (helpers.report.cached.cached_arrays): query_maps' arrays plus
    'indices' (E,), 'pixels' (E, H, W, 3), 'blocks' (the number of blocks), 'query' (the query token's name)."""
    from helpers.data import batches, subset
    from helpers.report.cached import cached_arrays

    indices = example_indices(images)

    def compute():
        x = next(batches(subset(images, indices), model, len(indices)))
        arrays = query_maps(model, x)
        arrays.update(indices=np.array(indices), pixels=shown_pixels(x, model), query=np.array(query_token(model)[1]),
                      blocks=np.array(len(model.blocks)))
        return arrays

    arrays = cached_arrays(cache / f"attention_maps_{which}.npz", settings.fingerprint(), len(indices), compute, log)
    arrays["query"] = str(arrays["query"])
    arrays["blocks"] = int(arrays["blocks"])
    return arrays


def table(maps: dict) -> dict:
    """The maps as the columns of one table (one row per image, block, head or 'mean', patch row and column):
    the CSV and NPZ written to tables/attention_maps_<which>.*."""
    columns = {k: [] for k in ("image_index", "block", "head", "patch_row", "patch_col", "attention")}
    for block, name in (("first", 0), ("last", maps["blocks"] - 1)):
        values = maps[block]                                        # (E, heads, g, g)
        with_mean = [(str(h), values[:, h]) for h in range(values.shape[1])] + [("mean", values.mean(1))]
        for e, index in enumerate(maps["indices"]):
            for head, grid in with_mean:
                for r in range(grid.shape[1]):
                    for c in range(grid.shape[2]):
                        columns["image_index"].append(int(index))
                        columns["block"].append(int(name))
                        columns["head"].append(head)
                        columns["patch_row"].append(r)
                        columns["patch_col"].append(c)
                        columns["attention"].append(float(grid[e, r, c]))
    return columns


def _overlay(grey: np.ndarray, panel: np.ndarray, top: float) -> np.ndarray:
    """(H, W, 3) floats in 0-1: the (g, g) map coloured (inferno, 0 to `top`) and upsampled to the image by repeating
    each patch's value over its pixels, blended over the grey (H, W) image (35% grey, 65% map)."""
    import matplotlib

    h, w = grey.shape
    g = panel.shape[0]
    cells = matplotlib.colormaps["inferno"](np.clip(panel / top, 0, 1))[..., :3]          # (g, g, 3)
    big = np.repeat(np.repeat(cells, -(-h // g), axis=0), -(-w // g), axis=1)[:h, :w]   # each patch over its pixels
    return 0.35 * (grey[..., None] / 255.0) + 0.65 * big


def attention_maps_figure(maps: dict, name: str):
    """One row per example image and block (first, last): the image, the map averaged over heads, then each head;
    each map drawn over the grey image, one colour scale per row (0 to the row's largest value). Each row is one
    picture (panels side by side, a white gap between them), so the figure stays cheap to save as PDF and SVG."""
    import matplotlib.pyplot as plt

    heads = maps["first"].shape[1]
    rows = [(e, block) for e in range(len(maps["indices"])) for block in ("first", "last")]
    titles = ["image", "mean"] + [f"head {k}" for k in range(heads)]
    h, w = maps["pixels"].shape[1:3]
    gap = max(1, w // 8)
    width_in = min(7.0, 0.7 * len(titles))  # a full page width (7 in) at most
    fig, axes = plt.subplots(len(rows), 1, figsize=(width_in, width_in * len(rows) * h / (len(titles) * (w + gap)) + 0.6),
                             squeeze=False)
    for ax, (e, block) in zip(axes[:, 0], rows):
        pixels = maps["pixels"][e]
        grey = pixels.mean(-1)
        values = maps[block][e]                                     # (heads, g, g)
        panels = [values.mean(0)] + [values[k] for k in range(heads)]
        top = max(float(p.max()) for p in panels) or 1.0
        white = np.ones((h, gap, 3))
        strip = [pixels / 255.0]
        for panel in panels:
            strip += [white, _overlay(grey, panel, top)]
        ax.imshow(np.concatenate(strip, axis=1), interpolation="nearest")
        ax.set_xticks([k * (w + gap) + w / 2 for k in range(len(titles))])
        ax.set_xticklabels(titles if ax is axes[0, 0] else [], fontsize=5)
        ax.xaxis.set_ticks_position("top")
        ax.tick_params(length=0)
        ax.set_yticks([])
        ax.set_ylabel(f"image {int(maps['indices'][e])}\nblock {0 if block == 'first' else maps['blocks'] - 1}", fontsize=5)
        for spine in ax.spines.values():
            spine.set_visible(False)
    axes[0, 0].set_title(f"{name}: attention of the {maps['query']} over the patches, first and last block",
                         fontsize=7, pad=12)
    fig.subplots_adjust(hspace=0.08)
    return fig
