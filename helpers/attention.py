"""Attention probabilities of timm ViTs and the paper's mean attention distance (Fig. 3).

timm computes attention with a fused kernel by default, which never materialises the
probabilities, so a hook on `attn.attn_drop` would silently never fire. `attention_maps`
switches the explicit path on for the duration of the call and restores the model afterwards.
"""

from __future__ import annotations

import numbers
from contextlib import contextmanager

import numpy as np
import torch

from helpers.guards import check_input_size, check_model, evaluating


@contextmanager
def explicit_attention(model):
    """Within the block, every timm Attention module computes softmax(q k^T) explicitly."""
    modules = [m for m in model.modules() if hasattr(m, "fused_attn") and hasattr(m, "attn_drop")]
    saved = [m.fused_attn for m in modules]
    try:
        for m in modules:
            m.fused_attn = False
        yield modules
    finally:
        for m, flag in zip(modules, saved):
            m.fused_attn = flag


def check_image_batch(images) -> None:
    """A preprocessed batch (B, 3, H, W) float tensor; a single image (3, H, W) is refused with advice."""
    if not isinstance(images, torch.Tensor):
        raise TypeError(f"images must be a (B, 3, H, W) float tensor of preprocessed images, got {type(images).__name__}. "
                        "Make one with next(helpers.data.batches(image_set, model, batch_size)).")
    if images.ndim == 3:
        raise ValueError(f"images has shape {tuple(images.shape)}: one unbatched image. Add the batch axis: images[None] "
                         "(or images.unsqueeze(0)).")
    if images.ndim != 4 or not images.is_floating_point():
        raise ValueError(f"images must be a (B, 3, H, W) float tensor of preprocessed images, got shape "
                         f"{tuple(images.shape)} {images.dtype}. Use helpers.data.batches(image_set, model).")
    if not torch.isfinite(images.sum()) and not torch.isfinite(images).all():  # NaN pixels gave maps of NaN
        raise ValueError(f"images hold {int((~torch.isfinite(images)).sum())} NaN or inf values. Check how they were "
                         "made (helpers.data.batches gives finite, normalised images).")


def _check_vit(model) -> None:
    check_model(model)
    if not any(hasattr(m, "fused_attn") and hasattr(m, "attn_drop") for m in model.modules()):
        raise ValueError(f"{type(model).__name__} has no timm Attention modules: attention maps, distances and heads "
                        "exist only for timm ViTs (a CNN or a Mixer has none).")


class _StopForward(Exception):
    """Raised by a hook to end a forward pass once the wanted output is in hand."""


@torch.no_grad()
def attention_maps(model, images: torch.Tensor, blocks: int | None = None) -> list:
    """Attention probabilities of every block (or of the first `blocks` blocks).

    images: (B, 3, H, W) preprocessed input. Returns a list (one per block) of (B, heads, N, N)
    tensors, N = prefix tokens + patches; each row sums to 1. blocks=k stops the forward pass after
    block k-1's attention (the later blocks never run). Runs in eval mode; the model comes back in
    the mode it came in.
    """
    _check_vit(model)
    check_image_batch(images)
    check_input_size(model, images)
    captured = {}
    with explicit_attention(model) as modules, evaluating(model):
        if not modules:
            raise ValueError("This model has no timm Attention modules: attention maps exist only for timm ViTs.")
        wanted = len(modules) if blocks is None else _check_blocks(blocks, len(modules))

        def keep(i, out):
            # no copy: in eval mode attn_drop returns softmax's own fresh output, which the block only reads
            captured[i] = out.detach()
            if i == wanted - 1 and wanted < len(modules):
                raise _StopForward  # the blocks after the last wanted one would run only to be thrown away

        handles = [m.attn_drop.register_forward_hook(lambda _mod, _inp, out, i=i: keep(i, out))
                   for i, m in enumerate(modules[:wanted])]
        try:
            model(images)
        except _StopForward:
            pass
        finally:
            for h in handles:
                h.remove()
    if len(captured) != wanted:
        raise RuntimeError(f"Only {len(captured)} of {wanted} attention hooks fired. "
                           "Is this a timm VisionTransformer whose Attention uses `attn_drop`?")
    return [captured[i] for i in range(wanted)]


def _check_blocks(blocks, available: int) -> int:
    if isinstance(blocks, bool) or not isinstance(blocks, int) or not 1 <= blocks <= available:
        raise ValueError(f"blocks={blocks!r}: give how many blocks to measure from the first, 1..{available} "
                         "(or None for all).")
    return blocks


def patch_distances(grid: int, patch_size: int) -> torch.Tensor:
    """(grid*grid, grid*grid) distances in pixels between patch centres, row-major patch order."""
    whole = isinstance(grid, numbers.Integral) and not isinstance(grid, bool)  # a 2.5 grid gave a 2x2 one
    if not whole or not grid >= 1 or not patch_size > 0:  # 0 px patches gave every head a distance of 0, a 0 grid NaN
        raise ValueError(f"grid={grid}, patch_size={patch_size}: give the patch grid's side (at least 1) and the patch "
                         "size in pixels (model.patch_embed.patch_size, e.g. 16).")
    rc = torch.stack(torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij"), -1).reshape(-1, 2)
    return torch.cdist(rc.double(), rc.double()) * patch_size


DISTANCE_CHUNK = 8  # images per float64 copy in mean_attention_distance (8 x 8 heads x 64 x 64 float64: 2 MiB)


def mean_attention_distance(attn: torch.Tensor, patch_size: int, num_prefix_tokens: int,
                            per_image: bool = False) -> torch.Tensor:
    """Mean attention distance per head, in pixels (Raghu et al. Fig. 3; Dosovitskiy et al. Fig. 11).

    attn: (B, heads, N, N) probabilities with `num_prefix_tokens` prefix tokens (CLS) first.
    CLS handling (the paper does not say): queries and keys are the patch tokens only, and each
    query's attention is renormalised over the patch keys, so a head that mostly attends to CLS
    is judged by where the rest of its attention goes. Returns (heads,) float64, the mean over
    images and queries; per_image=True: (B, heads), the mean over queries only, one row per image
    (their mean over images is the default answer; e.g. for intervals over image subsamples).
    """
    if not isinstance(attn, torch.Tensor) or attn.ndim != 4 or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f"attn must be (B, heads, N, N) attention probabilities (one entry of attention_maps(...)), got "
                         f"{tuple(attn.shape) if isinstance(attn, torch.Tensor) else type(attn).__name__}.")
    if attn.numel() == 0:
        raise ValueError(f"attn has shape {tuple(attn.shape)}: no images or no tokens to measure. Give the maps of at "
                         "least one image: attention_maps(model, images) on a batch that is not empty.")
    # NaN makes the minimum NaN (which fails >= 0), and +inf makes the sum infinite (probabilities cannot overflow it)
    if not attn.amin() >= 0 or not torch.isfinite(attn.sum()):
        raise ValueError("attn holds negative or non-finite values: give softmax probabilities, not attention logits.")
    n_patches = attn.shape[-1] - num_prefix_tokens
    grid = int(round(max(n_patches, 0) ** 0.5))
    if n_patches < 1 or grid * grid != n_patches:
        raise ValueError(f"{n_patches} patch tokens ({attn.shape[-1]} tokens less {num_prefix_tokens} prefix tokens) do "
                         "not form a square grid: give the model's own num_prefix_tokens (model.num_prefix_tokens: 1 "
                         "for a CLS token, 0 for a GAP ViT).")
    distances = patch_distances(grid, patch_size).to(attn.device)
    # each query's distance-weighted attention, renormalised over the patch keys (dividing the (B, heads, P)
    # sums, not the (B, heads, P, P) maps). A few images at a time: each float64 copy then fits in the CPU's cache
    # on the lite track (a whole batch's copy was about 3 times slower), and every value is the same bit for bit
    per_query = torch.cat([_distance_per_query(attn[start:start + DISTANCE_CHUNK], num_prefix_tokens, distances)
                           for start in range(0, attn.shape[0], DISTANCE_CHUNK)])  # (B, heads, P)
    return per_query.mean(dim=2) if per_image else per_query.mean(dim=(0, 2))


def _distance_per_query(attn: torch.Tensor, num_prefix_tokens: int, distances: torch.Tensor) -> torch.Tensor:
    """(b, heads, N, N) probabilities -> (b, heads, P) each patch query's mean distance (renormalised over patches)."""
    patches = attn[:, :, num_prefix_tokens:, num_prefix_tokens:].to(torch.float64, copy=True)  # ours to scale in place
    on_patches = patches.sum(-1)  # the sums it needs first, then the weighting in place
    return patches.mul_(distances).sum(-1) / on_patches


def uniform_attention_distance(grid: int, patch_size: int) -> float:
    """The mean distance of a head that attends uniformly to all patches: the 'fully global' reference."""
    return float(patch_distances(grid, patch_size).mean())


def _patch_size(model) -> int:
    size = model.patch_embed.patch_size
    return int(size[0] if isinstance(size, (tuple, list)) else size)


@torch.no_grad()
def attention_distance_table(model, images, batch_size: int = 64, device=None, blocks: int | None = None,
                             per_image: bool = False):
    """Mean attention distance (px) of every head of every block, averaged over all `images`.

    images: a helpers.data.ImageSet, preprocessed the model's own way; streamed in batches, so
    only one batch of attention maps exists at a time. Returns a (blocks, heads) float64 numpy
    array. Patch queries and keys only, renormalised over patch keys (see mean_attention_distance).
    blocks=k: the first k blocks only, (k, heads), and the later blocks are never run.
    per_image=True: (images, blocks, heads), each image's own distances (averaged over its queries);
    their mean over axis 0 is the table, and means over subsets of images give intervals
    (helpers.intervals.statistic_interval) at no extra cost.
    """
    from helpers.data import batches  # here, not at the top: helpers.data imports timm, this module need not

    from helpers.guards import check_images, check_int

    _check_vit(model)
    check_images(images)
    batch_size = check_int(batch_size, "batch_size", 1)
    patch, prefix = _patch_size(model), model.num_prefix_tokens
    if per_image:
        rows = [torch.stack([mean_attention_distance(a, patch, prefix, per_image=True)
                             for a in attention_maps(model, x, blocks)], dim=1).cpu()
                for x in batches(images, model, batch_size, device)]  # each (B, blocks, heads)
        if not rows:
            raise ValueError("No images: attention distances need at least one image.")
        return torch.cat(rows).cpu().numpy()
    total, count = None, 0
    for x in batches(images, model, batch_size, device):
        per_block = torch.stack([mean_attention_distance(a, patch, prefix) for a in attention_maps(model, x, blocks)])
        total = per_block * len(x) if total is None else total + per_block * len(x)
        count += len(x)
    if count == 0:
        raise ValueError("No images: attention distances need at least one image.")
    return (total / count).cpu().numpy()


def attention_of_heads(model, images: torch.Tensor, block: int) -> torch.Tensor:
    """Each head's output of one block before the output projection, softmax(q k^T) v, as
    (B, heads, N, head_dim): the representation of a single head (notebook 09, finding F3).

    images: (B, 3, H, W) preprocessed. It is the input of `blocks.<block>.attn.proj`, split by head.
    The forward pass stops there: the blocks after `block` never run (block 0 of ViT-B costs
    about 1/12 of a whole pass).
    """
    _check_vit(model)
    check_image_batch(images)
    check_input_size(model, images)
    if isinstance(block, bool) or not isinstance(block, int) or not 0 <= block < len(model.blocks):
        raise ValueError(f"Block {block!r} does not exist: give a block index 0..{len(model.blocks) - 1} "
                         "of a timm VisionTransformer.")
    attn = model.blocks[block].attn
    captured = []

    def keep_and_stop(_module, args):
        captured.append(args[0].detach().clone())
        raise _StopForward  # everything after this point would be computed only to be thrown away

    handle = attn.proj.register_forward_pre_hook(keep_and_stop)
    try:
        with torch.no_grad(), evaluating(model):
            model(images)
    except _StopForward:
        pass
    finally:
        handle.remove()
    if len(captured) != 1:
        raise RuntimeError(f"blocks.{block}.attn.proj ran {len(captured)} times in one forward pass; expected once. "
                           "Head outputs need a timm VisionTransformer whose blocks each run once per forward pass.")
    B, N, D = captured[0].shape
    return captured[0].reshape(B, N, attn.num_heads, D // attn.num_heads).permute(0, 2, 1, 3)


def shown_pixels(x: torch.Tensor, model) -> np.ndarray:
    """(B, H, W, 3) uint8: the preprocessed batch x (B, 3, H, W) with the model's normalisation undone, i.e. the
    pictures exactly as the model saw them (resized and cropped), aligned with its patch grid."""
    from timm.data import resolve_data_config

    config = resolve_data_config(model=model, use_test_size=True)
    mean = torch.tensor(config["mean"], dtype=torch.float64)[None, :, None, None]
    std = torch.tensor(config["std"], dtype=torch.float64)[None, :, None, None]
    pixels = (x.detach().cpu().double() * std + mean).clamp(0, 1) * 255
    return pixels.round().to(torch.uint8).permute(0, 2, 3, 1).detach().cpu().numpy()
