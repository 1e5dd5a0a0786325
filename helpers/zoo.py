"""The lite model zoo: small ViTs, ResNets, an MLP-Mixer and an EfficientNet built from timm's own
classes, and their recipes.

Module names match the full-size timm models (`blocks.3.attn`, `layer2.1`, ...), so every hook,
preset and analysis works on both tracks. `build(name)` makes an untrained model;
helpers.train trains it; helpers.models.load loads the bundled weights.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import asdict, dataclass, field, replace

import torch
from timm.models._efficientnet_builder import decode_arch_def
from timm.models.efficientnet import EfficientNet
from timm.models.mlp_mixer import MlpMixer
from timm.models.resnet import BasicBlock, ResNet
from timm.models.vision_transformer import Block, VisionTransformer

from helpers import shapes
from helpers.guards import check_int

# Normalisation of the lite models' inputs, stored in each model's pretrained_cfg so that
# timm's resolve_data_config reads it exactly as it reads a hub model's.
LITE_MEAN = (0.5, 0.5, 0.5)
LITE_STD = (0.25, 0.25, 0.25)


@dataclass(frozen=True)
class Recipe:
    """Everything that defines one bundled model: architecture, data and training schedule."""

    arch: str                      # "vit", "resnet", "mixer" or "efficientnet"
    seed: int = 0
    data_fraction: float = 1.0     # nested prefix of the shapes training set
    steps: int = 6000              # optimisation steps (the same for every data fraction)
    batch_size: int = 128
    lr: float = 2e-3
    weight_decay: float = 0.05
    warmup_frac: float = 0.03
    label_smoothing: float = 0.1
    cutmix: bool = True            # paste a box from another image into every batch, mix the labels by area
    shapes_variant: str = "standard"   # helpers.shapes.VARIANTS; every bundled model: "standard"
    vit: dict = field(default_factory=lambda: dict(embed_dim=64, depth=6, num_heads=8, mlp_ratio=2.0,
                                                   patch_size=4, class_token=True, global_pool="token",
                                                   pos_embed="sincos-grid", no_skip_block=None))
    resnet: dict = field(default_factory=lambda: dict(layers=(2, 2, 2, 2), channels=(32, 64, 128, 256),
                                                      stem_width=16))
    # the ViT's patch grid, width and depth; timm's default token/channel MLP ratios (0.5, 4)
    mixer: dict = field(default_factory=lambda: dict(embed_dim=64, depth=6, patch_size=4, mlp_ratio=(0.5, 4.0)))
    # EfficientNet-B0's block types (depthwise-separable, then inverted residuals with squeeze-excite)
    # in 5 stages sized for 32 x 32 inputs: stride-2 stem, then 16, 8, 4, 4 and 2 px grids like lite-resnet
    efficientnet: dict = field(default_factory=lambda: dict(
        arch_def=(("ds_r1_k3_s1_e1_c16_se0.25",), ("ir_r2_k3_s2_e4_c24_se0.25",), ("ir_r2_k5_s2_e4_c40_se0.25",),
                  ("ir_r2_k3_s1_e4_c80_se0.25",), ("ir_r2_k5_s2_e4_c112_se0.25",)),
        stem_size=16, num_features=256))

    def describe(self) -> dict:
        d = asdict(self)
        if d["shapes_variant"] == "standard":  # cards from before variants existed lack the key; keep them equal
            d.pop("shapes_variant")
        for arch in ("vit", "resnet", "mixer", "efficientnet"):
            if arch != self.arch:
                d.pop(arch)
        return d

    def as_card(self) -> dict:
        """describe() as a model card stores it (JSON: tuples become lists), to compare with a bundled card."""
        return json.loads(json.dumps(self.describe()))


def _vit(**changes) -> Recipe:
    base = Recipe(arch="vit")
    return replace(base, vit={**base.vit, **changes.pop("vit", {})}, **changes)


ZOO: dict[str, Recipe] = {
    "lite-vit": _vit(),
    "lite-vit-seed1": _vit(seed=1),
    "lite-vit-seed2": _vit(seed=2),
    "lite-vit-gap": _vit(vit=dict(class_token=False, global_pool="avg")),
    # Without CutMix: with it, the ViT without block 1's skips stayed at chance (loss 2.303 for 1,735 steps,
    # seed 0), without it it learned at once (data/README.md, "Zoo v2 R&D probes"). All three alike.
    "lite-vit-noskip-1": _vit(cutmix=False, vit=dict(no_skip_block=1)),
    "lite-vit-noskip-3": _vit(cutmix=False, vit=dict(no_skip_block=3)),
    "lite-vit-noskip-5": _vit(cutmix=False, vit=dict(no_skip_block=5)),
    "lite-vit-nocutmix": _vit(cutmix=False),   # the intact ViT under the no-skip models' recipe (notebook 11)
    # 1% (500 images): added when 3% did not remove local heads (data/README.md, "The data series over seeds")
    "lite-vit-data01": _vit(data_fraction=0.01),
    "lite-vit-data01-seed1": _vit(data_fraction=0.01, seed=1),
    "lite-vit-data01-seed2": _vit(data_fraction=0.01, seed=2),
    "lite-vit-data03": _vit(data_fraction=0.03),
    "lite-vit-data03-seed1": _vit(data_fraction=0.03, seed=1),
    "lite-vit-data03-seed2": _vit(data_fraction=0.03, seed=2),
    # no 100% model starts from seed 3's weights: a 3% model with no twin (notebook 14, section 4d)
    "lite-vit-data03-seed3": _vit(data_fraction=0.03, seed=3),
    "lite-vit-data10": _vit(data_fraction=0.10),
    "lite-vit-data10-seed1": _vit(data_fraction=0.10, seed=1),   # more seeds of the series: is accuracy ordered by data?
    "lite-vit-data10-seed2": _vit(data_fraction=0.10, seed=2),
    "lite-vit-data30": _vit(data_fraction=0.30),
    "lite-vit-data30-seed1": _vit(data_fraction=0.30, seed=1),
    "lite-resnet": Recipe(arch="resnet", steps=3000, lr=2e-3),
    "lite-resnet-seed1": Recipe(arch="resnet", steps=3000, lr=2e-3, seed=1),
    "lite-mixer": Recipe(arch="mixer"),                        # the ViT's schedule (F10: Mixer vs ViT vs ResNet)
    "lite-efficientnet": Recipe(arch="efficientnet", steps=3000),   # the ResNet's schedule (your own comparison)
}


# --------------------------------------------------------------------------- ViT parts


class NoSkipBlock(Block):
    """A timm ViT block with both residual connections removed (the paper's Fig. 8 models):
    x = attn(norm1(x)); x = mlp(norm2(x)). Same submodules and names as Block."""

    def forward(self, x, attn_mask=None):
        x = self.drop_path1(self.ls1(self.attn(self.norm1(x), attn_mask=attn_mask)))
        return self.drop_path2(self.ls2(self.mlp(self.norm2(x))))


def sincos_2d(grid: int, dim: int, scale: str = "grid") -> torch.Tensor:
    """Fixed 2-D sine-cosine position embedding: (grid*grid, dim); half the channels encode the row,
    half the column, each with sin and cos at geometrically spaced frequencies.

    scale="grid": wavelengths from 2.2 patches to 4 x grid, so every channel varies across the grid
    and the dot product of two positions falls quickly with their distance (position is legible).
    scale="10000": the frequencies of sequence models (base 10000, as in MAE); on an 8 x 8 grid most
    channels are almost constant, and positions 7 patches apart still have similarity 0.7.
    """
    check_int(grid, "grid", 1, "Give the patch grid's side, e.g. 8 for 32 px images in 4 px patches.")
    if check_int(dim, "dim", 4) % 4:
        raise ValueError(f"embed_dim must be divisible by 4 for 2-D sin-cos embeddings, got {dim}.")
    n = dim // 4
    steps = torch.arange(n, dtype=torch.float64)
    if scale == "grid":
        shortest, longest = 2.2, 4.0 * grid
        freqs = 2 * torch.pi / (shortest * (longest / shortest) ** (steps / max(1, n - 1)))
    elif scale == "10000":
        freqs = 1.0 / (10000 ** (steps / n))
    else:
        raise ValueError(f"Unknown sin-cos scale {scale!r}; use 'grid' or '10000'.")
    rows, cols = torch.meshgrid(torch.arange(grid, dtype=torch.float64), torch.arange(grid, dtype=torch.float64), indexing="ij")
    parts = []
    for coord in (rows.reshape(-1), cols.reshape(-1)):
        angles = coord[:, None] * freqs[None, :]
        parts += [torch.sin(angles), torch.cos(angles)]
    return torch.cat(parts, dim=1).float()


# pos_embed values of a recipe: "learned" (timm's default), or a fixed sin-cos table of either scale.
SINCOS_SCALES = {"sincos-grid": "grid", "sincos": "10000"}


def build_vit(cfg: dict, num_classes: int = 10) -> VisionTransformer:
    model = VisionTransformer(
        img_size=shapes.IMAGE_SIZE, patch_size=cfg["patch_size"], num_classes=num_classes,
        embed_dim=cfg["embed_dim"], depth=cfg["depth"], num_heads=cfg["num_heads"], mlp_ratio=cfg["mlp_ratio"],
        class_token=cfg["class_token"], global_pool=cfg["global_pool"])
    if cfg["pos_embed"] in SINCOS_SCALES:
        grid = shapes.IMAGE_SIZE // cfg["patch_size"]
        table = sincos_2d(grid, cfg["embed_dim"], SINCOS_SCALES[cfg["pos_embed"]])
        prefix = model.pos_embed.shape[1] - grid * grid  # the CLS token's slot (zeros) when there is one
        with torch.no_grad():
            model.pos_embed.copy_(torch.cat([torch.zeros(prefix, cfg["embed_dim"]), table])[None])
        model.pos_embed.requires_grad_(False)  # fixed, not learned (see data/README.md for why)
    elif cfg["pos_embed"] != "learned":
        raise ValueError(f"Unknown pos_embed {cfg['pos_embed']!r}; use 'learned' or one of {sorted(SINCOS_SCALES)}.")
    if cfg["no_skip_block"] is not None:
        model.blocks[cfg["no_skip_block"]].__class__ = NoSkipBlock
    return model


# --------------------------------------------------------------------------- ResNet


def build_resnet(cfg: dict, num_classes: int = 10) -> ResNet:
    """A timm ResNet-18-style net for 32x32 images: deep 3x3 stem (stride 2), no max-pool."""
    model = ResNet(BasicBlock, layers=list(cfg["layers"]), channels=tuple(cfg["channels"]),
                   num_classes=num_classes, stem_type="deep", stem_width=cfg["stem_width"])
    model.maxpool = torch.nn.Identity()  # 32x32 inputs are small enough already
    return model


# --------------------------------------------------------------------------- Mixer and EfficientNet


def build_mixer(cfg: dict, num_classes: int = 10) -> MlpMixer:
    """A timm MLP-Mixer on the lite ViT's 8 x 8 grid of 4-px patches: no attention, no CLS token, average pool."""
    return MlpMixer(num_classes=num_classes, img_size=shapes.IMAGE_SIZE, patch_size=cfg["patch_size"],
                    num_blocks=cfg["depth"], embed_dim=cfg["embed_dim"], mlp_ratio=tuple(cfg["mlp_ratio"]))


def build_efficientnet(cfg: dict, num_classes: int = 10) -> EfficientNet:
    """A small timm EfficientNet for 32 x 32 images (block strings in timm's EfficientNet notation)."""
    return EfficientNet(decode_arch_def([list(stage) for stage in cfg["arch_def"]]), num_classes=num_classes,
                        stem_size=cfg["stem_size"], num_features=cfg["num_features"])


BUILDERS = {"vit": build_vit, "resnet": build_resnet, "mixer": build_mixer, "efficientnet": build_efficientnet}


# --------------------------------------------------------------------------- by name


def build(name_or_recipe) -> torch.nn.Module:
    """An untrained lite model, by zoo name ('lite-vit') or Recipe, with its data config attached."""
    if isinstance(name_or_recipe, str):
        if name_or_recipe not in ZOO:
            close = difflib.get_close_matches(name_or_recipe, list(ZOO), n=3, cutoff=0.5)
            raise KeyError(f"No lite model {name_or_recipe!r}" + (f"; did you mean {', '.join(close)}?" if close else ".")
                           + f" The zoo has: {', '.join(ZOO)}.")
        name_or_recipe = ZOO[name_or_recipe]
    if not isinstance(name_or_recipe, Recipe):
        raise TypeError(f"build takes a zoo name such as 'lite-vit' or a zoo.Recipe, got {type(name_or_recipe).__name__}.")
    recipe = name_or_recipe
    model = BUILDERS[recipe.arch](getattr(recipe, recipe.arch))
    model.pretrained_cfg = dict(input_size=(3, shapes.IMAGE_SIZE, shapes.IMAGE_SIZE), mean=LITE_MEAN, std=LITE_STD,
                                interpolation="bilinear", crop_pct=1.0, num_classes=len(shapes.CLASS_NAMES))
    return model


if __name__ == "__main__":  # quick look: parameter counts of the zoo
    for name in ZOO:
        print(f"{name:20s} {sum(p.numel() for p in build(name).parameters()) / 1e6:.2f}M parameters")
