"""Where does a token's information come from? CKA between one token and every input patch (finding F7).

    tokens = capture_tokens(vit, images, ["blocks.5"])["blocks.5"]    # Tokens: (n, N, D), prefix, grid
    pixels = patch_grid(images.tensor, patch=4)                       # (n, 64, 48) raw pixels per patch
    maps = localization_maps(tokens.spatial, pixels)                  # (64 tokens, 64 patches) CKA
    scores = localization_scores(maps, tokens.grid)                   # own-patch rank, contrast, ...

The paper (Raghu et al. 2021, §7, Fig. 9-10) takes one token of the final block over many
images, X: (n, D), and the input patch at grid position (k, l), Y_kl: (n, 3*P*P) raw pixels of the
non-overlapping P x P patch, and draws CKA(X, Y_kl) over all (k, l). A ResNet "token" is all
channels at one position of a feature map, X: (n, C). Everything here is linear CKA in feature
space (no n x n matrix), debiased by default, accumulated in float64.

`capture_tokens` is shared with the probes (helpers/probes.py): it keeps every token of every
requested layer, so keep n and the number of layers modest (lite track: a few thousand images);
it refuses, after one batch, a capture larger than `max_gib` (4 GiB unless told otherwise).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import numpy as np
import torch

from helpers.cka import check_enough_for_unbiased
from helpers.guards import evaluating

KINDS = ("corner", "edge", "interior")


# --------------------------------------------------------------------------- tokens on their grid


@dataclass
class Tokens:
    """Every token of one layer for n images.

    values: (n, N, D) float32, prefix tokens (CLS) first, then the grid tokens in row-major order.
    prefix: how many prefix tokens (1 for a CLS ViT, 0 for a GAP ViT or a CNN).
    grid: (rows, cols) of the spatial tokens; rows * cols = N - prefix.
    """

    values: torch.Tensor
    prefix: int
    grid: tuple

    @property
    def spatial(self) -> torch.Tensor:
        """(n, rows*cols, D): the grid tokens only (CLS excluded)."""
        return self.values[:, self.prefix:]

    @property
    def cls(self) -> torch.Tensor:
        """(n, D): the CLS token; an error for models without one."""
        if self.prefix == 0:
            raise ValueError("This layer has no CLS (prefix) token: the model has none (GAP ViT or CNN). "
                             "Use .spatial, or .first for the first grid token.")
        return self.values[:, 0]

    @property
    def first(self) -> torch.Tensor:
        """(n, D): the first token, whatever it is (CLS for a CLS ViT, the top-left patch otherwise)."""
        return self.values[:, 0]


def _as_tokens(output: torch.Tensor, prefix: int, pool_to) -> tuple:
    """A hooked (B, N, D) or (B, C, H, W) output -> ((B, N, D) tensor, grid)."""
    if output.ndim == 4:
        if pool_to is not None:
            output = torch.nn.functional.adaptive_avg_pool2d(output, pool_to)
        grid = tuple(output.shape[-2:])
        return output.flatten(2).transpose(1, 2), grid
    if output.ndim == 3:
        side = int(round((output.shape[1] - prefix) ** 0.5))
        if side * side != output.shape[1] - prefix:
            raise ValueError(f"{output.shape[1]} tokens with {prefix} prefix token(s) do not form a square grid.")
        return output, (side, side)
    raise ValueError(f"Expected (B, N, D) tokens or (B, C, H, W) feature maps, got shape {tuple(output.shape)}.")


def _check_layers(model, layers) -> list:
    layers = [layers] if isinstance(layers, str) else list(layers)
    names = [n for n, _ in model.named_modules() if n]
    for layer in layers:
        if layer not in names:
            close = difflib.get_close_matches(layer, names, n=4, cutoff=0.5)
            hint = f" Did you mean: {', '.join(close)}?" if close else " List them with [n for n, _ in model.named_modules()]."
            raise ValueError(f"No module named '{layer}' in {type(model).__name__}.{hint}")
    if len(set(layers)) != len(layers):
        raise ValueError(f"Layers {layers} name a module twice. Give each layer once.")
    return layers


def _batches(model, images, batch_size, device):
    """Preprocessed batches: an ImageSet goes through the model's own preprocessing; a float tensor is used as is."""
    if isinstance(images, torch.Tensor):
        if images.ndim != 4 or not images.is_floating_point():
            raise ValueError(f"A tensor of images must be float (n, C, H, W), already preprocessed; got "
                             f"{images.dtype} {tuple(images.shape)}. Pass an ImageSet to preprocess for the model.")
        for start in range(0, len(images), batch_size):
            yield images[start:start + batch_size].to(device)
        return
    from helpers.data import batches

    yield from batches(images, model, batch_size, device)


def capture_tokens(model, images, layers, batch_size: int = 256, pool_to=None, device=None, max_gib: float = 4.0) -> dict:
    """Every token of each layer for every image, in one pass over the images: {layer: Tokens}.

    model: a ViT (outputs (B, N, D), `model.num_prefix_tokens` prefix tokens) or a CNN
    (outputs (B, C, H, W); a token is all C channels at one position).
    images: a helpers.data.ImageSet (preprocessed for `model`) or a float (n, C, H, W) tensor (used as is).
    layers: module names, e.g. ["blocks.5"] or ["layer2.1", "layer4.1"] (a block's output).
    pool_to: (rows, cols) to average-pool CNN maps to, e.g. the last stage's grid (probes, Fig. 11).
    Memory: n * N * D * 4 bytes per layer, kept on the CPU (ViT-B/16: 0.6 MB per image and block).
    max_gib: refuse, after the first batch, a capture that would keep more than this many GiB
    (a clear error instead of a machine that runs out of memory hours in); raise it if you have the RAM.
    """
    layers = _check_layers(model, layers)
    device = device or next(iter(model.parameters()), torch.empty(0)).device  # a model without weights: CPU
    prefix = int(getattr(model, "num_prefix_tokens", 0))
    modules = dict(model.named_modules())
    current, kept, grids, prefixes = {}, {layer: [] for layer in layers}, {}, {}

    def hook(layer):
        def record(_module, _inputs, output):
            output = output[0] if isinstance(output, (tuple, list)) else output
            current[layer] = output.detach()
        return record

    handles = [modules[layer].register_forward_hook(hook(layer)) for layer in layers]
    try:
        with torch.no_grad(), evaluating(model):  # eval mode inside; the caller's mode comes back after
            for x in _batches(model, images, batch_size, device):
                current.clear()
                model(x)
                for layer in layers:
                    if layer not in current:
                        raise RuntimeError(f"The hook on '{layer}' never fired: that module did not run in the forward pass.")
                    prefixes[layer] = prefix if current[layer].ndim == 3 else 0
                    values, grids[layer] = _as_tokens(current[layer], prefixes[layer], pool_to)
                    kept[layer].append(values.float().cpu().clone())
                if len(kept[layers[0]]) == 1:
                    _check_memory(kept, len(images), max_gib)
    finally:
        for handle in handles:
            handle.remove()
    if not grids:
        raise ValueError("No images were given.")
    return {layer: Tokens(torch.cat(kept[layer]), prefixes[layer], grids[layer]) for layer in layers}


def _check_memory(kept: dict, n: int, max_gib: float) -> None:
    """Raise before the capture goes on when all n images' tokens would exceed max_gib GiB."""
    per_image = sum(chunks[0][0].numel() * 4 for chunks in kept.values())  # float32 bytes of one image, all layers
    need = per_image * n / 2 ** 30
    if need > max_gib:
        raise MemoryError(f"capture_tokens would keep {need:.1f} GiB of tokens ({n:,} images x {per_image / 2 ** 20:.1f} MiB "
                          f"for {len(kept)} layer(s)), over max_gib={max_gib:g}. Use fewer images or fewer layers (or pool_to "
                          "for CNN maps), or pass a larger max_gib if this machine has the memory.")


def patch_grid(images: torch.Tensor, patch: int) -> torch.Tensor:
    """Raw pixels of the non-overlapping patches: (n, C, H, W) -> (n, (H/P)*(W/P), C*P*P), row-major.

    A uint8 tensor is scaled to [0, 1]; a float tensor is used as is.
    """
    if not isinstance(images, torch.Tensor) or images.ndim != 4:
        raise ValueError("images must be an (n, C, H, W) tensor (e.g. ImageSet.tensor).")
    n, channels, height, width = images.shape
    if patch < 1 or height % patch or width % patch:
        raise ValueError(f"A {height}x{width} image does not split into {patch}x{patch} patches; choose a divisor of both.")
    x = images.float() / 255 if images.dtype == torch.uint8 else images.float()
    rows, cols = height // patch, width // patch
    return x.reshape(n, channels, rows, patch, cols, patch).permute(0, 2, 4, 1, 3, 5).reshape(n, rows * cols, -1)


# --------------------------------------------------------------------------- CKA of every token with every patch


def _check_stack(A, name: str) -> torch.Tensor:
    if not isinstance(A, torch.Tensor):
        A = torch.as_tensor(np.asarray(A))
    if A.ndim != 3:
        raise ValueError(f"{name} must be (n examples, positions, features), got shape {tuple(A.shape)}. "
                         "A single representation (n, p) is A[:, None].")
    if not torch.isfinite(A).all():
        raise ValueError(f"{name} contains {int((~torch.isfinite(A)).sum())} NaN or inf value(s). Check the layer's output.")
    return A.to(torch.float64)


def _self_dots(A: torch.Tensor, debiased: bool) -> torch.Tensor:
    """(n, T, D) centered -> (T,) values of vec(A_t A_t^T) . vec(A_t A_t^T)."""
    n, _, D = A.shape
    # ||A_t A_t^T||_F^2 = ||A_t^T A_t||_F^2: form whichever square matrix is smaller (n x n or D x D)
    pattern = "ntd,mtd->tnm" if n <= D else "ntd,nte->tde"
    value = (torch.einsum(pattern, A, A) ** 2).sum((1, 2))
    if debiased:
        a = (A * A).sum(2)  # (n, T) squared norms: diagonals of the Grams
        value = value - n / (n - 2) * (a * a).sum(0) + a.sum(0) ** 2 / ((n - 1) * (n - 2))
    return value


def _flat_grams(A: torch.Tensor, debiased: bool) -> torch.Tensor:
    """(n, T, D) centered -> (T, n*n) flattened Grams, U-centred when debiased (their dot / n(n-3) is HSIC_1)."""
    G = torch.einsum("ntd,mtd->tnm", A, A)
    if debiased:
        n = G.shape[1]
        G.diagonal(dim1=1, dim2=2).zero_()
        means = G.sum(1) / (n - 2)                                    # (T, n)
        means = means - means.sum(1, keepdim=True) / (2 * (n - 1))
        G = G - means[:, :, None] - means[:, None, :]
        G.diagonal(dim1=1, dim2=2).zero_()
    return G.reshape(len(G), -1)


def _gram_form_maps(X, Y, debiased, chunk):
    """The same maps from n x n Grams: cheaper when tokens or patches have many features (full track)."""
    GY = _flat_grams(Y, debiased)                                     # (Q, n*n)
    norm_y = GY.norm(dim=1)
    rows = []
    for start in range(0, X.shape[1], chunk):
        GX = _flat_grams(X[:, start:start + chunk], debiased)
        rows.append((GX @ GY.T) / (GX.norm(dim=1)[:, None] * norm_y[None]))
    return torch.cat(rows)


def localization_maps(tokens, patches, debiased: bool = True, chunk: int = 16, form: str = "auto") -> torch.Tensor:
    """Linear CKA of every token with every patch: (n, T, D), (n, Q, E) -> (T, Q), float64 on the CPU.

    Row t is the paper's heatmap for token t (reshape it to the patch grid). Each entry equals
    helpers.cka.linear_cka(tokens[:, t], patches[:, q], debiased). form: "features" never forms
    an n x n matrix (cheap when D, E are small, as on the lite track); "grams" works with the
    (n, n) Grams (cheap when D or E is large: ViT-B tokens of 768 numbers, 16x16x3 patches);
    "auto" picks features when D * E <= 16 * n.
    """
    # the big cross products run in float32 when both inputs are float32 (after centring in float64:
    # relative error ~1e-6, half the time of float64); norms and the debiasing terms stay float64
    fast = all(isinstance(A, torch.Tensor) and A.dtype == torch.float32 for A in (tokens, patches))
    X, Y = _check_stack(tokens, "tokens"), _check_stack(patches, "patches")
    Y = Y.to(X.device)  # tokens and patches may come from different devices (e.g. tokens on CUDA, pixels on the CPU)
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"tokens have {X.shape[0]} examples but patches have {Y.shape[0]}: both must describe "
                         "the same images in the same order.")
    n = X.shape[0]
    if debiased:
        check_enough_for_unbiased(n)
    elif n < 2:
        raise ValueError(f"CKA needs at least 2 examples; got {n}.")
    if form not in ("auto", "features", "grams"):
        raise ValueError(f"form must be 'auto', 'features' or 'grams', not {form!r}.")
    X, Y = X - X.mean(0), Y - Y.mean(0)
    self_x, self_y = _self_dots(X, debiased), _self_dots(Y, debiased)
    for value, name in ((self_x, "token"), (self_y, "patch")):
        if (value <= 0).any():
            raise ValueError(f"A {name} position has zero variance over the images (index {int((value <= 0).nonzero()[0])}), "
                             "so CKA is undefined there.")
    if form == "grams" or (form == "auto" and X.shape[2] * Y.shape[2] > 16 * n):
        return _gram_form_maps(X, Y, debiased, chunk).cpu()
    b = (Y * Y).sum(2)  # (n, Q)
    work = torch.float32 if fast else torch.float64
    Yflat = Y.reshape(n, -1).to(work)
    rows = []
    for start in range(0, X.shape[1], chunk):
        Xc = X[:, start:start + chunk]
        t, d = Xc.shape[1], Xc.shape[2]
        cross = (Xc.reshape(n, -1).T.to(work) @ Yflat).reshape(t, d, Y.shape[1], Y.shape[2]).double()
        value = (cross ** 2).sum((1, 3))  # (t, Q)
        if debiased:
            a = (Xc * Xc).sum(2)
            value = value - n / (n - 2) * (a.T @ b) + a.sum(0)[:, None] * b.sum(0)[None] / ((n - 1) * (n - 2))
        rows.append(value)
    return (torch.cat(rows) / torch.sqrt(self_x[:, None] * self_y[None])).cpu()


# --------------------------------------------------------------------------- turning a heatmap into numbers


def position_kinds(grid) -> np.ndarray:
    """(rows*cols,) labels 'corner', 'edge' or 'interior' for each grid position, row-major."""
    rows, cols = grid
    r, c = np.divmod(np.arange(rows * cols), cols)
    on_row, on_col = (r == 0) | (r == rows - 1), (c == 0) | (c == cols - 1)
    return np.where(on_row & on_col, "corner", np.where(on_row | on_col, "edge", "interior"))


def localization_scores(maps, grid) -> dict:
    """How well each token localizes, from its (T, T) token-by-patch CKA map on the same grid.

    Returns, for each token t (row-major over `grid`), numpy arrays of shape (T,):
      own:      CKA with its own patch.
      rank:     how many other patches score higher than its own (0 = own patch is the peak).
      contrast: own-patch CKA minus the mean over the other patches.
      margin:   own-patch CKA minus the best other patch (> 0 exactly when the own patch is the peak).
      ratio:    own-patch CKA divided by that mean (scale-free, for comparing models).
      border_preference: mean over the other border patches minus mean over interior patches
                (the paper: edge tokens are similar to other edge positions).
    and kinds: 'corner' / 'edge' / 'interior' per token.
    """
    M = torch.as_tensor(maps, dtype=torch.float64).cpu()
    T = int(grid[0] * grid[1])
    if M.shape != (T, T):
        raise ValueError(f"maps must be (tokens, patches) on the same grid {tuple(grid)}, i.e. ({T}, {T}); got {tuple(M.shape)}.")
    own = M.diagonal()
    others = ~torch.eye(T, dtype=torch.bool)
    mean_others = (M * others).sum(1) / (T - 1)
    best_other = M.masked_fill(~others, float("-inf")).max(1).values if T > 1 else torch.full_like(own, float("nan"))
    kinds = position_kinds(grid)
    border = torch.as_tensor(kinds != "interior")
    out = {"own": own.cpu().numpy(), "rank": (M > own[:, None]).sum(1).cpu().numpy(),
           "contrast": (own - mean_others).cpu().numpy(), "margin": (own - best_other).cpu().numpy(),
           "ratio": (own / mean_others).cpu().numpy(), "kinds": kinds}
    if border.all() or not border.any():
        out["border_preference"] = np.full(T, np.nan)
    else:
        other_border = others & border[None]
        out["border_preference"] = ((M * other_border).sum(1) / other_border.sum(1)
                                    - M[:, ~border].masked_fill(~others[:, ~border], 0).sum(1)
                                    / (others[:, ~border]).sum(1)).cpu().numpy()
    return out


def summarise(scores: dict) -> dict:
    """Per kind of position (and 'all'): share of tokens whose own patch is the peak, mean contrast, mean margin, mean ratio."""
    summary = {}
    for kind in ("all",) + KINDS:
        mask = np.ones(len(scores["own"]), bool) if kind == "all" else scores["kinds"] == kind
        if mask.any():
            summary[kind] = {"own_is_peak": float((scores["rank"][mask] == 0).mean()),
                             "contrast": float(scores["contrast"][mask].mean()),
                             "margin": float(scores["margin"][mask].mean()),
                             "ratio": float(scores["ratio"][mask].mean()),
                             "border_preference": float(np.nanmean(scores["border_preference"][mask]))
                             if np.isfinite(scores["border_preference"][mask]).any() else float("nan")}
    return summary
