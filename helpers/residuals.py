"""How much each residual branch changes the stream: the norm ratio ||z|| / ||f(z)|| (Raghu et al. 2021, Fig. 7, E.1).

z is what the skip connection carries, f(z) what the long branch adds to it. A high ratio means
the representation mostly passes through the skip connection unchanged.

timm ViT block (the paper's Fig. 7; LayerNorm and LayerScale belong to the branch):
    attention: z = the block input,                   f(z) = ls1(attn(norm1(z)))
    MLP:       z = the stream after attention (u),    f(u) = ls2(mlp(norm2(u)))
ratio[block, token] = mean over images of ||z_token|| / ||f(z)_token|| (norms over channels): a mean
of per-token ratios, not a ratio of means. Token 0 is the CLS token when the model has one.

timm ResNet block: z = the shortcut (the block input, or downsample(input)), f(z) = the long branch
just before the add (bn2 / bn3, or se); norms over channels at each spatial location, averaged
over locations and images. ResNetV2 (BiT): shortcut against conv3's output.

    ratios = vit_norm_ratios(vit, batches(images, vit, 256))
    ratios.attn                  # (blocks, tokens) numpy
    ratios.cls("mlp"), ratios.spatial("mlp")     # (blocks,) CLS-token and spatial-token averages
    ratios.spatial("mlp", images=idx)            # the same, averaged over the images idx only (intervals)
    ratios.cosine["attn"]                        # (blocks, tokens) mean cos(z, f(z)); .cls(b, what="cos")
    resnet_norm_ratios(resnet, batches(images, resnet, 256))   # {block: ratio}
    resnet_image_ratios(resnet, batches(images, resnet, 256))  # (block names, (n, blocks) per image)

Every number also comes per image (NormRatios.per_image), so that an effect can be recomputed on
image subsamples (helpers.intervals) without a second pass; all arrays are numpy on the CPU,
whatever device the model runs on.

A branch that outputs exactly zero gives a ratio of inf (never an epsilon). A block without skip
connections (helpers.zoo.NoSkipBlock) has no z: its ratios are NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from timm.models.vision_transformer import Block

from helpers.capture import is_vit
from helpers.guards import check_input_size
from helpers.receptive_fields import _resnet_branch


@dataclass
class NormRatios:
    """ViT norm ratios. attn, mlp: (blocks, tokens) mean over images of ||z|| / ||f(z)||.
    z_norm, f_norm: {"attn"|"mlp": (blocks, tokens)} mean norms themselves (to see *why* a ratio moves).
    cosine: {"attn"|"mlp": (blocks, tokens)} mean over images of the cosine similarity of z and f(z).
    per_image: {"attn"|"mlp": {"ratio"|"cos": (n, blocks, 2)}}: per image, the value averaged over the
        prefix (CLS) tokens (column 0; NaN without one) and over the spatial tokens (column 1)."""

    attn: np.ndarray
    mlp: np.ndarray
    z_norm: dict
    f_norm: dict
    num_prefix_tokens: int
    n_images: int
    cosine: dict | None = None
    per_image: dict | None = None

    def _get(self, branch, what="ratio"):
        if branch not in ("attn", "mlp"):
            raise ValueError(f"branch must be 'attn' or 'mlp', got {branch!r}.")
        if what not in ("ratio", "cos"):
            raise ValueError(f"what must be 'ratio' (||z|| / ||f(z)||) or 'cos' (cosine of z and f(z)), got {what!r}.")
        return getattr(self, branch) if what == "ratio" else self.cosine[branch]

    def _images(self, branch, what, images, column):
        if self.per_image is None:
            raise ValueError("These ratios were computed without per-image values.")
        return self.per_image[branch][what][np.asarray(images), :, column].mean(0)

    def cls(self, branch: str, images=None, what: str = "ratio") -> np.ndarray:
        """(blocks,) ratio (or cosine, what='cos') of the CLS (prefix) token(s); over the images
        `images` (an index array) only, when given."""
        if self.num_prefix_tokens == 0:
            raise ValueError("This model has no CLS (prefix) token.")
        table = self._get(branch, what)
        if images is not None:
            return self._images(branch, what, images, 0)
        return table[:, :self.num_prefix_tokens].mean(1)

    def spatial(self, branch: str, images=None, what: str = "ratio") -> np.ndarray:
        """(blocks,) ratio (or cosine, what='cos') averaged over the spatial (patch) tokens; over the
        images `images` (an index array) only, when given."""
        table = self._get(branch, what)
        if images is not None:
            return self._images(branch, what, images, 1)
        return table[:, self.num_prefix_tokens:].mean(1)


def _as_batches(images, model):
    """Each (B, 3, H, W) batch of `images` (one tensor, or an iterable of them), checked to fit the model."""
    for x in [images] if isinstance(images, torch.Tensor) else images:
        check_input_size(model, x)
        yield x


def _token_norms(t) -> torch.Tensor:
    """(B, N, D) tokens or (B, C, H, W) maps -> (B, N) / (B, H*W) float64 norms over channels."""
    if isinstance(t, (tuple, list)):
        t = t[0]
    if t.ndim == 3:
        return t.detach().double().norm(dim=-1)
    if t.ndim == 4:
        return t.detach().double().norm(dim=1).flatten(1)
    raise ValueError(f"Expected (B, N, D) tokens or (B, C, H, W) maps, got shape {tuple(t.shape)}.")


class _Recorder:
    """Forward hooks that keep per-token norms (computed at once, so in-place ops later do not matter)."""

    def __init__(self):
        self.norms, self.handles = {}, []

    def output(self, module, key):
        self.handles.append(module.register_forward_hook(lambda _m, _i, out: self.norms.__setitem__(key, _token_norms(out))))

    def input(self, module, key):
        self.handles.append(module.register_forward_pre_hook(lambda _m, inp: self.norms.__setitem__(key, _token_norms(inp))))

    def remove(self):
        for h in self.handles:
            h.remove()


def vit_norm_ratios(model, images) -> NormRatios:
    """Norm ratios ||z|| / ||f(z)|| of every block's attention and MLP branch, per token.

    model: a timm VisionTransformer in eval() mode. images: one (B, 3, H, W) preprocessed tensor or
    an iterable of them (e.g. helpers.data.batches). Returns NormRatios (module docstring).
    """
    if not is_vit(model):
        raise ValueError(f"vit_norm_ratios needs a timm ViT (with .blocks and .patch_embed), got {type(model).__name__}; "
                         "for a ResNet use resnet_norm_ratios.")
    if model.training:
        raise ValueError("Put the model in eval() mode first (drop-path would change the branches).")
    skipless = []
    for i, block in enumerate(model.blocks):
        if not isinstance(block, Block):
            raise ValueError(f"blocks.{i} is a {type(block).__name__}, not a timm Block: its branches are unknown.")
        if type(block).forward is not Block.forward:
            skipless.append(i)  # e.g. zoo.NoSkipBlock: no skip path, the ratio is undefined
    rec, held = _Recorder(), {}

    def skip_path(branch, i):  # z: its norms now, the tensor until its branch output arrives (for the cosine)
        def hook(_module, inputs):
            z = inputs[0] if isinstance(inputs, (tuple, list)) else inputs
            rec.norms[(branch, "z", i)] = _token_norms(z)
            held[(branch, i)] = z.detach().double()
        return hook

    def long_branch(branch, i):
        def hook(_module, _inputs, out):
            f = (out[0] if isinstance(out, (tuple, list)) else out).detach().double()
            rec.norms[(branch, "f", i)] = f.norm(dim=-1)
            rec.norms[(branch, "cos", i)] = torch.nn.functional.cosine_similarity(held.pop((branch, i)), f, dim=-1)
        return hook

    for i, block in enumerate(model.blocks):
        rec.handles.append(block.register_forward_pre_hook(skip_path("attn", i)))
        rec.handles.append(block.ls1.register_forward_hook(long_branch("attn", i)))
        rec.handles.append(block.norm2.register_forward_pre_hook(skip_path("mlp", i)))
        rec.handles.append(block.ls2.register_forward_hook(long_branch("mlp", i)))
    prefix = int(getattr(model, "num_prefix_tokens", 0))
    sums, count, per_image = {}, 0, {(b, w): [] for b in ("attn", "mlp") for w in ("ratio", "cos")}
    try:
        with torch.no_grad():
            for x in _as_batches(images, model):
                rec.norms = {}
                held.clear()
                model(x)
                for branch in ("attn", "mlp"):
                    groups = {"ratio": [], "cos": []}
                    for i in range(len(model.blocks)):
                        z, f = rec.norms[(branch, "z", i)], rec.norms[(branch, "f", i)]
                        if not (torch.isfinite(z).all() and not torch.isnan(f).any()):
                            raise ValueError(f"blocks.{i} ({branch}) produced NaN or inf values for these images: no ratio "
                                             "can be computed. Check the model's weights and the inputs.")
                        values = {"ratio": z / f, "z": z, "f": f, "cos": rec.norms[(branch, "cos", i)]}
                        for what, value in values.items():
                            key = (branch, what, i)
                            sums[key] = sums.get(key, 0) + value.sum(0)
                        for what in groups:  # per image: mean over the prefix tokens, mean over the spatial tokens
                            value = values[what]
                            head = value[:, :prefix].mean(1) if prefix else torch.full_like(value[:, 0], float("nan"))
                            groups[what].append(torch.stack([head, value[:, prefix:].mean(1)], 1))
                    for what, blocks in groups.items():
                        per_image[(branch, what)].append(torch.stack(blocks, 1).cpu())  # (B, blocks, 2)
                count += len(x)
    finally:
        rec.remove()
        held.clear()
    if count == 0:
        raise ValueError("No images were given.")

    def table(branch, what):
        out = np.stack([(sums[(branch, what, i)] / count).cpu().numpy() for i in range(len(model.blocks))])
        if what in ("ratio", "z", "cos"):
            out[skipless] = np.nan
        return out

    images_table = {b: {w: torch.cat(per_image[(b, w)]).cpu().numpy() for w in ("ratio", "cos")} for b in ("attn", "mlp")}
    for b in images_table.values():
        for values in b.values():
            values[:, skipless] = np.nan
    return NormRatios(attn=table("attn", "ratio"), mlp=table("mlp", "ratio"),
                      z_norm={b: table(b, "z") for b in ("attn", "mlp")},
                      f_norm={b: table(b, "f") for b in ("attn", "mlp")},
                      num_prefix_tokens=prefix, n_images=count,
                      cosine={b: table(b, "cos") for b in ("attn", "mlp")}, per_image=images_table)


def _resnet_blocks(model) -> list:
    names = dict(model.named_modules())
    if "layer1" in names:
        return [n for n in names if n.startswith("layer") and n.count(".") == 1]
    if "stages" in names and "stem" in names:
        return [n for n in names if n.startswith("stages.") and n.count(".") == 3 and ".blocks." in n]
    raise ValueError(f"resnet_norm_ratios knows timm ResNets and ResNetV2s, not {type(model).__name__}"
                     + ("; for a ViT use vit_norm_ratios." if is_vit(model) else "."))


def resnet_norm_ratios(model, images) -> dict:
    """{block name: mean over images and spatial locations of ||shortcut|| / ||long branch||}.

    model: a timm ResNet or ResNetV2 in eval() mode. images: a (B, 3, H, W) tensor or an iterable of them.
    """
    blocks, values = resnet_image_ratios(model, images)
    return {name: float(v) for name, v in zip(blocks, values.mean(0))}


def resnet_image_ratios(model, images) -> tuple:
    """(block names, (n, blocks) numpy): per image, the mean over spatial locations of ||shortcut|| / ||long branch||.

    The mean over images (axis 0) is resnet_norm_ratios; a subsample's mean gives an interval (helpers.intervals).
    """
    blocks = _resnet_blocks(model)
    if model.training:
        raise ValueError("Put the model in eval() mode first (BatchNorm statistics change the branches).")
    modules = dict(model.named_modules())
    rec = _Recorder()
    for name in blocks:
        block = modules[name]
        down = getattr(block, "downsample", None)
        if down is not None and not isinstance(down, torch.nn.Identity):
            rec.output(down, ("z", name))
        else:  # identity shortcut: the block input
            rec.input(block, ("z", name))
        rec.output(modules[_resnet_branch(modules, name)], ("f", name))
    per_image = []
    try:
        with torch.no_grad():
            for x in _as_batches(images, model):
                rec.norms = {}
                model(x)
                columns = []
                for name in blocks:
                    z, f = rec.norms[("z", name)], rec.norms[("f", name)]
                    if z.shape != f.shape:
                        raise RuntimeError(f"{name}: shortcut {tuple(z.shape)} and branch {tuple(f.shape)} differ.")
                    if not torch.isfinite(z).all() or torch.isnan(f).any():  # as vit_norm_ratios: not a NaN ratio (f = 0 gives inf)
                        raise ValueError(f"{name} produced NaN or inf values for these images: no ratio can be computed. "
                                         "Check the model's weights and the inputs.")
                    columns.append((z / f).mean(1))
                per_image.append(torch.stack(columns, 1).cpu())
    finally:
        rec.remove()
    if not per_image:
        raise ValueError("No images were given.")
    return blocks, torch.cat(per_image).cpu().numpy()
