"""F4's effects, defined once: effective receptive fields of a ViT and a ResNet (notebook 10).

Every function returns one signed number, > 0 in the paper's direction. The raw quantities come from
helpers.receptive_fields: a field's 50%-mass radius `r50` in px (mass_radius) and the share of a field
inside the centre patch (window_fraction). These functions only turn them into a claim's effect.
Shapes: `radii` are (layers,) r50 values in depth order; `shares` are (blocks,) centre-patch shares, one
per ViT block.

    lower_layers(vit_r50, resnet_r50)           F4.1  the ViT's first field is larger than the ResNet's
    growth(radii)                               F4.2  the ResNet's fields grow with depth
    shrinking_steps(radii)                      (beside F4.2) how many steps shrink: "gradually"
    midway(r50, uniform_r50)                    F4.3  the middle block's field is global
    centre_dependence(post, uniform_share)      F4.4  post-residual fields sit on the centre patch
    branch_drop(post, branch)                   F4.5  the attention branch far less
    mlp_branch_gap(mlp_branch, post)            F4.6  sameness: the MLP branch like the post-residual field
    stage_firsts(labels)                        the ResNet's stage-first blocks after the first stage
    stage_first_shrink(branch_radii, firsts)    F4.7  the branch field shrinks at each stage's first block
"""

from __future__ import annotations

import numbers

import numpy as np

GLOBAL_SHARE = 0.5  # F4.3: a field counts as global when its r50 reaches half a uniform field's


def _values(values, name: str, least: int = 1) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or len(values) < least:
        raise ValueError(f"{name} must be a 1-D array of at least {least} values, got shape {values.shape}.")
    return values


def lower_layers(vit_r50: float, resnet_r50: float) -> float:
    """F4.1, "the ViT's lower-layer fields are larger than the ResNet's" (px): r50 after the ViT's first
    attention sublayer minus r50 after the ResNet's first residual block."""
    return float(vit_r50) - float(resnet_r50)


def growth(radii) -> float:
    """F4.2, "the ResNet's fields grow with depth" (px): (layers,) post-residual r50, stem first -> last minus first."""
    radii = _values(radii, "radii", 2)
    return float(radii[-1] - radii[0])


def shrinking_steps(radii) -> int:
    """How many steps from one layer to the next shrink the field: 0 for a field that grows gradually."""
    return int(np.sum(np.diff(_values(radii, "radii", 2)) < 0))


def midway(r50: float, uniform_r50: float) -> float:
    """F4.3, "the ViT's fields become much more global midway" (px): the middle block's r50 minus half a
    uniform field's r50 (the paper gives no number; this course calls a field global from there on)."""
    if not float(uniform_r50) > 0:  # 0 made the effect the radius itself, NaN made it NaN
        raise ValueError(f"uniform_r50 is a uniform field's r50 in px (> 0, helpers.receptive_fields.uniform_mass_radius), "
                         f"got {uniform_r50}.")
    return float(r50) - GLOBAL_SHARE * float(uniform_r50)


def centre_dependence(post_shares, uniform_share: float) -> float:
    """F4.4, "post-residual fields depend strongly on the centre patch": (blocks,) share of the
    post-attention field inside the centre patch, mean over blocks, minus a uniform field's share."""
    if not 0 < float(uniform_share) <= 1:  # NaN made the effect NaN
        raise ValueError(f"uniform_share is a uniform field's share inside the centre patch (above 0 and at most "
                         f"1: 1 / grid ** 2 on a grid x grid of patches), got {uniform_share}.")
    return float(_values(post_shares, "post_shares").mean() - uniform_share)


def branch_drop(post_shares, branch_shares) -> float:
    """F4.5, "the attention branch depends on the centre patch far less": (blocks,) x 2 centre shares,
    post-attention minus attention branch, mean over blocks."""
    post, branch = _values(post_shares, "post_shares"), _values(branch_shares, "branch_shares")
    if post.shape != branch.shape:
        raise ValueError(f"one share per block on both sides: {post.shape} and {branch.shape}.")
    return float((post - branch).mean())


def mlp_branch_gap(mlp_branch_shares, post_shares) -> float:
    """F4.6, a sameness claim, "the MLP branch's field resembles the post-residual one": (blocks,) x 2 centre
    shares, MLP branch minus the block output after it, mean over blocks. Alike when |gap| <= noise."""
    branch, post = _values(mlp_branch_shares, "mlp_branch_shares"), _values(post_shares, "post_shares")
    if post.shape != branch.shape:
        raise ValueError(f"one share per block on both sides: {branch.shape} and {post.shape}.")
    return float((branch - post).mean())


def stage_firsts(branch_labels) -> list:
    """Indices of the first block of every stage after the first ("layer2.0.branch", ...) in a ResNet's
    branch labels: the blocks F4.7 is about (layer1.0 has no block of its own before it)."""
    return [i for i, label in enumerate(branch_labels) if label.endswith(".0.branch")][1:]


def stage_first_shrink(branch_radii, firsts) -> float:
    """F4.7, "the ResNet's pre-residual fields shrink at each stage's first block" (px): (layers,) branch r50
    in depth order; the block before minus the stage's first block, mean over the stages `firsts`."""
    radii = _values(branch_radii, "branch_radii", 2)
    whole = np.ndim(firsts) == 1 and all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in firsts)
    # an array raised numpy's 'truth value ... ambiguous', 1.5 an IndexError, True counted as 1, a repeat twice
    if not whole or len(firsts) == 0 or min(firsts) < 1 or max(firsts) >= len(radii) or len(set(firsts)) < len(firsts):
        raise ValueError(f"firsts must be distinct block indices 1..{len(radii) - 1} (each has a block before it; "
                         f"stage_firsts(labels) gives them), got {firsts!r}.")
    return float(np.mean([radii[i - 1] - radii[i] for i in firsts]))
