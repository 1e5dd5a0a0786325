"""Effective receptive fields (Raghu et al. 2021, Fig. 6 and C.1-C.4): how much of the input a layer sees.

For one layer, take its feature map at the centre location, sum it over channels, and
backpropagate to the input. The receptive field is the absolute input gradient, summed over the
RGB channels and averaged over the images:

    ERF[u, v] = mean_b  sum_rgb | d( sum_c z_b[centre, c] ) / d x_b[rgb, u, v] |         (H, W)

    fields = receptive_fields(vit, x)                  # x: (B <= 32, 3, H, W), preprocessed
    fields.maps["b3.attn"]                             # (H, W) numpy map of the post-residual stream
    fields.maps["b3.attn.branch"]                      # the attention branch alone (pre-residual)
    mass_radius(fields.maps["b3.attn"])                # px around its centre of mass holding half the gradient

Layers ("presets" or explicit names, resolved like helpers.capture):
  "post"  timm ViT: per block the residual stream after attention ("b{i}.attn", the input of norm2)
          and the block output ("b{i}.mlp"); ResNet: the stem and every residual block (after the add).
  "pre"   the branches alone: ViT "b{i}.attn.branch" = ls1(attn(norm1(x))), "b{i}.mlp.branch" =
          ls2(mlp(norm2(x))) (LayerScale included); ResNet "layer{s}.{j}.branch" = the long branch
          before the add (bn2/bn3, or se when present); ResNetV2 (BiT) the conv3 output.
  "both"  post then pre.
ViT token outputs (B, N, D) drop their prefix (CLS) tokens and are laid out on the patch grid;
the centre is grid position (g // 2, g // 2) (exact for odd g; the lower-right of the four middle
patches for even g). CNN maps (B, C, H, W) use (H // 2, W // 2).

`channels="sum"` (default) backpropagates sum_c z_c: one backward pass per layer, as in most ERF
code; gradients of different channels can cancel. `channels="each"` averages |dz_c/dx| over the
channels instead, the paper's literal wording (one backward pass per channel, so C times slower;
by the triangle inequality C * "each" >= "sum" everywhere). `channels=k` estimates "each" without
bias from k channels drawn at random for every image: k backward passes per layer.
`reduce="abs"` is the paper's absolute gradient; `reduce="relu"` keeps only positive gradients
(the variant of e.g. Ding et al. 2022's ERF code), which discards inhibitory input.

All images go through ONE forward pass; each layer is then one backward pass over the whole batch
(torch.autograd.grad with retain_graph). Never run this under torch.inference_mode().

`per_image=True` also keeps each image's own map (`fields.image_maps[label]`, (B, H, W)), so that a
statistic of the field can be recomputed on a subsample of the images (an interval over images):

    fields = receptive_fields(vit, x, "post", per_image=True)
    fields.on_images(idx)["b3.attn"]                  # (H, W) the field averaged over images idx only

Cost: "each" is C backward passes per layer, and on a CPU they cost about C times the "sum" reading
per image (batching the channels, by vmap or by repeating the images, does not make it cheaper: the
work is the same). Use few layers or few images for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from helpers import capture
from helpers.capture import is_vit
from helpers.guards import check_input_size

MAX_IMAGES = 32  # the paper: "32 randomly-selected images"
PRESETS = ("post", "pre", "both")


@dataclass
class Target:
    """One layer whose centre location is backpropagated: plot label, module name, output or input."""

    label: str
    module: str
    where: str = "output"


@dataclass
class ReceptiveFields:
    """maps: {label: (H, W) float64 numpy map}; centre: (row, col) in input pixels of the centre location
    (per label, in `centres`); n_images, channels, reduce: how the maps were made."""

    maps: dict
    centres: dict
    n_images: int
    channels: object
    reduce: str
    meta: dict = field(default_factory=dict)
    image_maps: dict = field(default_factory=dict)  # {label: (B, H, W)} with per_image=True, else empty

    def on_images(self, idx) -> dict:
        """{label: (H, W)} the fields averaged over the images `idx` only (needs per_image=True)."""
        if not self.image_maps:
            raise ValueError("These fields kept no per-image maps: compute them with receptive_fields(..., per_image=True).")
        idx = np.asarray(idx, dtype=np.int64)
        if idx.ndim != 1 or len(idx) == 0 or idx.min() < 0 or idx.max() >= self.n_images:
            raise ValueError(f"idx must be a non-empty 1-d array of image indices in [0, {self.n_images}), got {idx!r}.")
        return {label: stack[idx].mean(0) for label, stack in self.image_maps.items()}

    @property
    def labels(self) -> list:
        return list(self.maps)

    @property
    def centre(self):
        """The common centre when every layer has the same one (ViTs), else an error."""
        unique = set(self.centres.values())
        if len(unique) != 1:
            raise ValueError("Layers have different centres (a CNN's maps shrink with depth): use .centres[label].")
        return unique.pop()


# --------------------------------------------------------------------------- which layers


def _vit_targets(model, preset):
    post, pre = [], []
    for i in range(len(model.blocks)):
        b = f"blocks.{i}"
        post += [Target(f"b{i}.attn", f"{b}.norm2", "input"), Target(f"b{i}.mlp", b)]
        pre += [Target(f"b{i}.attn.branch", f"{b}.ls1"), Target(f"b{i}.mlp.branch", f"{b}.ls2")]
    return {"post": post, "pre": pre, "both": post + pre}[preset]


def _resnet_branch(names: dict, block: str) -> str:
    """The module whose output is a residual block's long branch just before the add."""
    if f"{block}.conv3" in names and f"{block}.norm3" in names:  # ResNetV2 (BiT, pre-activation)
        return f"{block}.conv3"
    if names.get(f"{block}.se") is not None and not isinstance(names.get(f"{block}.se"), torch.nn.Identity):
        return f"{block}.se"
    for bn in ("bn3", "bn2"):
        if f"{block}.{bn}" in names:
            return f"{block}.{bn}"
    raise ValueError(f"Cannot find the long branch of '{block}': give module names instead.")


def _cnn_targets(model, preset):
    names = dict(model.named_modules())
    if "layer1" not in names and not ("stages" in names and "stem" in names):
        raise ValueError(f"The 'post'/'pre' presets know timm ViTs, ResNets and ResNetV2s, not {type(model).__name__}: "
                         f"give module names instead, e.g. receptive_fields(model, x, [{list(names)[1]!r}]).")
    taps = capture.resolve(model, "sublayers")  # stem + every residual block
    post = [Target(t.label, t.module) for t in taps]
    pre = [Target(f"{t.label}.branch", _resnet_branch(names, t.module)) for t in taps[1:]]
    return {"post": post, "pre": pre, "both": post + pre}[preset]


def targets(model, layers="post") -> list:
    """Resolve a preset ("post", "pre", "both") or module names (with ":input") into Targets."""
    if isinstance(layers, str) and layers in PRESETS:
        return _vit_targets(model, layers) if is_vit(model) else _cnn_targets(model, layers)
    return [Target(t.label, t.module, t.where) for t in capture.resolve(model, layers)]


# --------------------------------------------------------------------------- the centre location


def _centre_value(output, num_prefix_tokens: int, reduce: str):
    """(B, N, D) tokens or (B, C, H, W) maps -> (B, C) values at the centre location, and its grid (row, col, rows, cols)."""
    if isinstance(output, (tuple, list)):
        output = output[0]
    if output.ndim == 3:
        patches = output.shape[1] - num_prefix_tokens
        g = int(round(patches ** 0.5))
        if g * g != patches:
            raise ValueError(f"{patches} patch tokens do not form a square grid (num_prefix_tokens={num_prefix_tokens}?).")
        r, c = g // 2, g // 2
        value, rows, cols = output[:, num_prefix_tokens + r * g + c], g, g
    elif output.ndim == 4:
        rows, cols = output.shape[2:]
        r, c = rows // 2, cols // 2
        value = output[:, :, r, c]
    else:
        raise ValueError(f"Layer output of shape {tuple(output.shape)}: expected (B, N, D) tokens or (B, C, H, W) maps.")
    value = value.clone()  # in-place ops later in the forward pass (x += shortcut, ReLU) must not touch it
    return (torch.relu(value) if reduce == "relu" else value), (r, c, rows, cols)


def _pixel_centre(r, c, rows, cols, height, width):
    """Centre (in input pixels) of grid cell (r, c) of a rows x cols map over a height x width image."""
    return ((r + 0.5) * height / rows - 0.5, (c + 0.5) * width / cols - 0.5)


# --------------------------------------------------------------------------- the fields


def receptive_fields(model, images: torch.Tensor, layers="post", channels="sum", reduce: str = "abs",
                     max_images: int = MAX_IMAGES, seed: int = 0, per_image: bool = False) -> ReceptiveFields:
    """Effective receptive field of every layer, from one forward pass and one backward pass per layer.

    model: a torch model in eval() mode (timm ViT or ResNet for the presets). images: (B, 3, H, W)
    preprocessed inputs, B <= max_images (the paper uses 32). layers: "post", "pre", "both" or
    module names ("blocks.2.norm2:input"). channels: "sum", "each", or k (an int): the "each" reading
    estimated from k channels drawn at random per image (without replacement; seeded by `seed`),
    k backward passes per layer instead of C; exact "each" when k >= C.
    reduce: "abs" (paper) or "relu" (positive gradients only; the centre value is ReLU'd too).
    per_image: also keep every image's own (H, W) map in `.image_maps` (for intervals over images).
    Returns ReceptiveFields with one (H, W) map per layer.
    """
    sampled = isinstance(channels, int) and not isinstance(channels, bool)
    if not (channels in ("sum", "each") or (sampled and channels > 0)):
        raise ValueError(f"channels must be 'sum', 'each' or a positive number of channels to sample, got {channels!r}.")
    generator = torch.Generator().manual_seed(seed)
    if reduce not in ("abs", "relu"):
        raise ValueError(f"reduce must be 'abs' or 'relu', got {reduce!r}.")
    if not isinstance(images, torch.Tensor) or images.ndim != 4 or not images.is_floating_point():
        raise ValueError("images must be a (B, C, H, W) float tensor of preprocessed inputs (helpers.data.batches); "
                         f"got {tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__}"
                         f"{' ' + str(images.dtype) if isinstance(images, torch.Tensor) else ''}.")
    if not torch.isfinite(images).all():
        raise ValueError("images contain NaN or inf values: every gradient would be NaN. Check the preprocessing.")
    check_input_size(model, images)
    if len(images) == 0:  # the mean over no images is NaN, which read as a broken model
        raise ValueError("No images given: a receptive field needs at least one (the paper used 32).")
    if len(images) > max_images:
        raise ValueError(f"{len(images)} images given; receptive fields use at most {max_images} (the paper: 32). "
                         f"Pass images[:{max_images}], or raise max_images.")
    if torch.is_inference_mode_enabled():
        raise RuntimeError("receptive_fields needs gradients: call it outside torch.inference_mode().")
    if model.training:
        raise ValueError("Put the model in eval() mode first (BatchNorm statistics and dropout change the field).")
    wanted = targets(model, layers)
    prefix = int(getattr(model, "num_prefix_tokens", 0))
    x = images.detach().clone().requires_grad_(True)
    values, grids, handles = {}, {}, []
    modules = dict(model.named_modules())
    layouts = {t.label: capture.layout_of(model, t.module, modules) for t in wanted}  # Swin's maps are (B, H, W, C)

    def keep(target, value):
        if target.label in values:
            raise RuntimeError(f"Module '{target.module}' ran twice in one forward pass; give another layer.")
        value = value[0] if isinstance(value, (tuple, list)) else value
        if value.ndim == 4 and layouts[target.label] == "NHWC":
            value = value.permute(0, 3, 1, 2)
        values[target.label], grids[target.label] = _centre_value(value, prefix, reduce)

    for t in wanted:
        module = modules[t.module]
        if t.where == "input":
            handles.append(module.register_forward_pre_hook(lambda _m, inp, t=t: keep(t, inp)))
        else:
            handles.append(module.register_forward_hook(lambda _m, _i, out, t=t: keep(t, out)))
    try:
        with torch.enable_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    silent = [t.label for t in wanted if t.label not in values]
    if silent:
        raise RuntimeError(f"Layer(s) {silent} never ran in the forward pass.")
    maps, centres, image_maps = {}, {}, {}
    height, width = images.shape[-2:]
    for k, t in enumerate(wanted):
        value = values[t.label]  # (B, C)
        retain = k < len(wanted) - 1 or channels == "each"
        if channels == "sum":
            stack = _reduce(_input_grad(value.sum(), x, retain), reduce)
        elif channels == "each":
            stack = 0.0
            for c in range(value.shape[1]):
                stack = stack + _reduce(_input_grad(value[:, c].sum(), x, True), reduce)
            stack = stack / value.shape[1]
        else:  # k channels sampled per image: pass j backpropagates channel order[b, j] of every image b
            order = torch.rand(value.shape, generator=generator).argsort(1)[:, :channels].to(value.device)
            rows = torch.arange(len(value), device=value.device)
            stack = 0.0
            for j in range(min(channels, value.shape[1])):
                stack = stack + _reduce(_input_grad(value[rows, order[:, j]].sum(), x, True), reduce)
            stack = stack / min(channels, value.shape[1])
        maps[t.label] = stack.mean(0)
        if per_image:
            image_maps[t.label] = stack
        centres[t.label] = _pixel_centre(*grids[t.label], height, width)
        if not np.isfinite(np.asarray(maps[t.label])).all():
            raise ValueError(f"The receptive field of '{t.label}' is NaN or inf: the model produced non-finite values "
                             "or gradients for these images (check its weights and the inputs).")
    return ReceptiveFields(maps, centres, len(images), channels, reduce,
                           meta=dict(layers=[(t.label, t.module, t.where) for t in wanted]), image_maps=image_maps)


def _input_grad(scalar, x, retain):
    """d scalar / d x, zeros when the scalar does not depend on x at all."""
    if not scalar.requires_grad:
        return torch.zeros_like(x)
    (grad,) = torch.autograd.grad(scalar, x, retain_graph=retain, allow_unused=True)
    return torch.zeros_like(x) if grad is None else grad


def _reduce(grad, reduce):
    """(B, 3, H, W) input gradient -> (B, H, W) numpy maps, one per image: |.| (or ReLU) summed over RGB."""
    part = grad.abs() if reduce == "abs" else torch.relu(grad)
    return part.sum(1).detach().double().cpu().numpy()


# --------------------------------------------------------------------------- summaries


def _check_map(erf):
    erf = np.asarray(erf, dtype=np.float64)
    if erf.ndim != 2:
        raise ValueError(f"Expected one (H, W) receptive-field map, got shape {erf.shape}.")
    if np.any(erf < 0) or not np.all(np.isfinite(erf)):
        raise ValueError("A receptive-field map must be finite and non-negative.")
    return erf


def support(erf, threshold: float = 0.0) -> tuple:
    """(rows, cols) of the bounding box of pixels with erf > threshold * max(erf); (0, 0) for an empty field.

    threshold=0 gives the exact extent of the gradient (a k-layer 3x3 conv stack: 2k+1 px).
    """
    erf = _check_map(erf)
    if not 0 <= threshold < 1:  # a negative threshold would count every pixel, a zero-gradient one too
        raise ValueError(f"threshold is a share of the map's peak and must be in [0, 1), got {threshold}.")
    if erf.max() == 0:
        return (0, 0)
    rows, cols = np.nonzero(erf > threshold * erf.max())
    return (int(rows.max() - rows.min() + 1), int(cols.max() - cols.min() + 1))


def centroid(erf) -> tuple:
    """(row, col) centre of mass of a map, in pixels; (nan, nan) for an empty map."""
    erf = _check_map(erf)
    total = erf.sum()
    if total == 0:
        return (float("nan"), float("nan"))
    rows, cols = np.indices(erf.shape)
    return (float((rows * erf).sum() / total), float((cols * erf).sum() / total))


def mass_radius(erf, centre=None, fraction: float = 0.5) -> float:
    """Radius (px) of the smallest disc around `centre` (row, col) holding `fraction` of the map's mass.

    centre=None uses the map's own centre of mass (robust where a strided CNN's "centre location"
    sits off the middle of its cell). NaN for a map with no gradient at all (the layer ignores the input).
    """
    erf = _check_map(erf)
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}.")
    total = erf.sum()
    if total == 0:
        return float("nan")
    centre = centroid(erf) if centre is None else centre
    rows, cols = np.indices(erf.shape)
    distance = np.hypot(rows - centre[0], cols - centre[1]).ravel()
    order = np.argsort(distance, kind="stable")
    cumulative = np.cumsum(erf.ravel()[order]) / total
    return float(distance[order][np.searchsorted(cumulative, fraction - 1e-12)])


def window_fraction(erf, top: int, left: int, size: int) -> float:
    """Share of the map's mass inside the size x size window at (top, left), e.g. the centre patch."""
    erf = _check_map(erf)
    height, width = erf.shape
    if size < 1 or top < 0 or left < 0 or top + size > height or left + size > width:
        # numpy would read a negative `top` from the far edge and cut a window that runs off the map: a wrong share
        raise ValueError(f"The {size}x{size} window at (top={top}, left={left}) is not inside the {height}x{width} map: "
                         "give a window of at least 1 pixel that fits in the map.")
    total = erf.sum()
    return float("nan") if total == 0 else float(erf[top:top + size, left:left + size].sum() / total)


def uniform_mass_radius(height: int, width: int, centre=None, fraction: float = 0.5) -> float:
    """mass_radius of a uniform map: the radius a fully global field has (the 'global' reference)."""
    if height < 1 or width < 1:
        raise ValueError(f"A map needs at least 1x1 pixels, got {height}x{width}: give the input's height and width.")
    return mass_radius(np.ones((height, width)), centre, fraction)
