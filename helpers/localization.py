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
import numbers
from dataclasses import dataclass

import numpy as np
import torch

from helpers.capture import HookNeverFiredError, layout_of
from helpers.cka import check_enough_for_unbiased, check_more_than_two
from helpers.course import pick_device
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
    if not layers:  # said "No images were given"
        raise ValueError("layers is empty: name at least one module, e.g. ['blocks.5'] or ['layer4.1'].")
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
    Memory: n * N * D * 4 bytes per layer, kept on the CPU (ViT-B/16: 0.6 MB per image and block),
    allocated after the first batch and filled in place (no second copy).
    max_gib: refuse, after the first batch, a capture that would keep more than this many GiB
    (a clear error instead of a machine that runs out of memory hours in); raise it if you have the RAM.
    """
    layers = _check_layers(model, layers)
    if not max_gib > 0:  # NaN compared False with every size: no limit at all
        raise ValueError(f"max_gib must be a positive number of GiB, got {max_gib}.")
    if pool_to is not None and not (len(pool_to) == 2 and all(isinstance(k, numbers.Integral) and k >= 1 for k in pool_to)):
        raise ValueError(f"pool_to must be (rows, cols), two whole numbers of at least 1, e.g. (2, 2); got {pool_to!r}.")
    device = device or next(iter(model.parameters()), torch.empty(0)).device  # a model without weights: CPU
    prefix = int(getattr(model, "num_prefix_tokens", 0))
    modules = dict(model.named_modules())
    current, kept, grids, prefixes = {}, {}, {}, {}

    channels_last = {layer for layer in layers if layout_of(model, layer, modules) == "NHWC"}  # Swin, ConvNeXt norm/mlp

    def hook(layer):
        def record(_module, _inputs, output):
            output = output[0] if isinstance(output, (tuple, list)) else output
            if layer in channels_last and output.ndim == 4:  # (B, H, W, C) -> (B, C, H, W), what _as_tokens reads
                output = output.permute(0, 3, 1, 2)
            current[layer] = output.detach()
        return record

    handles = [modules[layer].register_forward_hook(hook(layer)) for layer in layers]
    n, done = len(images), 0
    try:
        with torch.no_grad(), evaluating(model):  # eval mode inside; the caller's mode comes back after
            for x in _batches(model, images, batch_size, device):
                current.clear()
                model(x)
                batch = {}
                for layer in layers:
                    if layer not in current:
                        raise HookNeverFiredError(f"The hook on '{layer}' never fired: that module did not run in the forward pass.")
                    prefixes[layer] = prefix if current[layer].ndim == 3 else 0
                    batch[layer], grids[layer] = _as_tokens(current[layer], prefixes[layer], pool_to)
                if not kept:  # the first batch: check the size, then one float32 tensor per layer for all n images
                    _check_memory(batch, n, max_gib)
                    kept = {layer: torch.empty((n,) + tuple(v.shape[1:]), dtype=torch.float32) for layer, v in batch.items()}
                if done + len(x) > n:
                    raise RuntimeError(f"The images gave more than their length ({n}) examples in their batches.")
                for layer, values in batch.items():  # filled in place: no list of batches to torch.cat (half the peak)
                    kept[layer][done:done + len(x)].copy_(values)
                done += len(x)
    finally:
        for handle in handles:
            handle.remove()
    if not grids:
        raise ValueError("No images were given.")
    if done != n:
        raise RuntimeError(f"The images gave {done} examples in their batches but have length {n}.")
    return {layer: Tokens(kept[layer], prefixes[layer], grids[layer]) for layer in layers}


def _check_memory(batch: dict, n: int, max_gib: float) -> None:
    """Raise before the capture goes on when all n images' tokens would exceed max_gib GiB (batch: {layer: (B, N, D)})."""
    per_image = sum(values[0].numel() * 4 for values in batch.values())  # float32 bytes of one image, all layers
    need = per_image * n / 2 ** 30
    if need > max_gib:
        raise MemoryError(f"capture_tokens would keep {need:.1f} GiB of tokens ({n:,} images x {per_image / 2 ** 20:.1f} MiB "
                          f"for {len(batch)} layer(s)), over max_gib={max_gib:g}. Use fewer images or fewer layers (or pool_to "
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


GRAM_GIB = 2.0  # the Gram form holds at most this many GiB of float64 n x n Grams at once (ViT-B at n = 1,000: 1.5)


def _check_stack(A, name: str) -> torch.Tensor:
    """A validated (n, positions, features) tensor in its own float dtype: float64 copies are made chunk by chunk."""
    if not isinstance(A, torch.Tensor):
        A = torch.as_tensor(np.asarray(A))
    if A.ndim != 3:
        raise ValueError(f"{name} must be (n examples, positions, features), got shape {tuple(A.shape)}. "
                         "A single representation (n, p) is A[:, None].")
    if not A.is_floating_point():
        A = A.to(torch.float64)
    step = max(1, 2 ** 26 // max(1, A.shape[0] * A.shape[2]))  # positions per check: a bool mask of at most 64 MB
    if not all(bool(torch.isfinite(A[:, start:start + step]).all()) for start in range(0, A.shape[1], step)):
        raise ValueError(f"{name} contains {int((~torch.isfinite(A)).sum())} NaN or inf value(s). Check the layer's output.")
    return A


def _centred(A: torch.Tensor, start: int, stop: int, device=None) -> torch.Tensor:
    """(n, P, F) -> (n, stop - start, F) float64 on `device` (default: A's): positions start:stop, each feature
    centred over the n examples. Only this slice moves, so the whole capture never has to fit on a GPU."""
    part = A[:, start:stop].to(device or A.device, torch.float64)
    return part - part.mean(0)


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
    """(n, t, D) centered -> (t, n*n) flattened Grams, U-centred in place when debiased (their dot / n(n-3) is HSIC_1)."""
    At = A.transpose(0, 1).contiguous()                               # (t, n, D)
    G = torch.bmm(At, At.transpose(1, 2))                             # (t, n, n), the one n x n tensor of this call
    del At
    if debiased:
        n = G.shape[1]
        G.diagonal(dim1=1, dim2=2).zero_()
        means = G.sum(1) / (n - 2)                                    # (t, n)
        means -= means.sum(1, keepdim=True) / (2 * (n - 1))
        G -= means[:, :, None]                                        # in place: no second (t, n, n) tensor
        G -= means[:, None, :]
        G.diagonal(dim1=1, dim2=2).zero_()
    return G.reshape(len(G), -1)


def _gram_blocks(X, Y, n, chunk, gram_gib):
    """Which side's Grams to hold, and how many positions per block: (swap, block).

    The held side's Grams are formed once, in blocks of at most gram_gib GiB; the other side's are
    formed `chunk` at a time, once per block. Hold the side that makes the total work smaller.
    """
    block_of = lambda A: max(1, min(A.shape[1], int(gram_gib * 2 ** 30 // (n * n * 8))))
    work = {}
    for swap, (held, other) in ((True, (Y, X)), (False, (X, Y))):
        blocks = -(-held.shape[1] // block_of(held))
        work[swap] = held.shape[1] * held.shape[2] + blocks * other.shape[1] * other.shape[2]
    swap = work[True] <= work[False]  # a tie: hold the patches' Grams, as the form always did
    return swap, block_of(Y if swap else X)


def _gram_form_maps(X, Y, debiased, chunk, gram_gib, device):
    """The same maps from n x n Grams: cheaper when tokens or patches have many features (full track).

    Never forms one side's (positions, n, n) Gram stack whole: at most gram_gib GiB of Grams of one
    side (a block) and `chunk` of the other side's are alive at once. (T, Q) float64.
    """
    n = X.shape[0]
    swap, block = _gram_blocks(X, Y, n, chunk, gram_gib)
    held, other = (Y, X) if swap else (X, Y)
    out = torch.empty(held.shape[1], other.shape[1], dtype=torch.float64, device=device)
    for start in range(0, held.shape[1], block):
        stop = min(start + block, held.shape[1])
        GH = torch.empty(stop - start, n * n, dtype=torch.float64, device=device)  # (block, n*n), filled chunk by chunk
        for first in range(start, stop, chunk):
            GH[first - start:min(first + chunk, stop) - start] = _flat_grams(_centred(held, first, min(first + chunk, stop), device), debiased)
        norm_h = GH.norm(dim=1)
        for first in range(0, other.shape[1], chunk):
            GO = _flat_grams(_centred(other, first, first + chunk, device), debiased)     # (chunk, n*n)
            out[start:start + block, first:first + chunk] = (GH @ GO.T) / (norm_h[:, None] * GO.norm(dim=1)[None])
            del GO
        del GH  # free this block before the next one is formed
    return out.T.contiguous() if swap else out


def localization_maps(tokens, patches, debiased: bool = True, chunk: int = 16, form: str = "auto",
                      gram_gib: float = GRAM_GIB, device=None) -> torch.Tensor:
    """Linear CKA of every token with every patch: (n, T, D), (n, Q, E) -> (T, Q), float64 on the CPU.

    Row t is the paper's heatmap for token t (reshape it to the patch grid). Each entry equals
    helpers.cka.linear_cka(tokens[:, t], patches[:, q], debiased). form: "features" never forms
    an n x n matrix (cheap when D, E are small, as on the lite track); "grams" works with the
    (n, n) Grams (cheap when D or E is large: ViT-B tokens of 768 numbers, 16x16x3 patches);
    "auto" picks features when D * E <= 16 * n.
    Memory: the inputs stay as given (float32 tokens are not copied whole); they are centred and
    turned into float64 `chunk` positions at a time, and the Gram form holds at most gram_gib GiB
    of Grams (ResNet-50 layer2 at n = 1,000 would need 6 GB of them at once).
    device: where the arithmetic runs; None = the course's device (helpers.course.pick_device: the GPU when
    there is one, so the full track's float64 Gram form takes seconds there instead of half an hour on a
    2-core host). The inputs stay where they are; `chunk` positions at a time are moved.
    """
    # the big cross products run in float32 when both inputs are float32 (after centring in float64:
    # relative error ~1e-6, half the time of float64); norms and the debiasing terms stay float64
    fast = all(isinstance(A, torch.Tensor) and A.dtype == torch.float32 for A in (tokens, patches))
    X, Y = _check_stack(tokens, "tokens"), _check_stack(patches, "patches")
    device = torch.device(device) if device is not None else pick_device()
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"tokens have {X.shape[0]} examples but patches have {Y.shape[0]}: both must describe "
                         "the same images in the same order.")
    n = X.shape[0]
    if debiased:
        check_enough_for_unbiased(n)
    else:
        check_more_than_two(n)
    if form not in ("auto", "features", "grams"):
        raise ValueError(f"form must be 'auto', 'features' or 'grams', not {form!r}.")
    if chunk < 1 or gram_gib <= 0:
        raise ValueError(f"chunk must be a positive number of positions and gram_gib a positive size; got {chunk}, {gram_gib}.")
    self_x, self_y = ([_self_dots(_centred(A, start, start + chunk, device), debiased) for start in range(0, A.shape[1], chunk)]
                      for A in (X, Y))
    self_x, self_y = torch.cat(self_x), torch.cat(self_y)
    for value, name in ((self_x, "token"), (self_y, "patch")):
        if (value <= 0).any():
            raise ValueError(f"A {name} position has zero variance over the images (index {int((value <= 0).nonzero()[0])}), "
                             "so CKA is undefined there.")
    if form == "grams" or (form == "auto" and X.shape[2] * Y.shape[2] > 16 * n):
        return _gram_form_maps(X, Y, debiased, chunk, gram_gib, device).cpu()
    Y = _centred(Y, 0, Y.shape[1], device)  # the features form keeps the patches whole: it is chosen when they are small
    b = (Y * Y).sum(2)  # (n, Q)
    work = torch.float32 if fast else torch.float64
    Yflat = Y.reshape(n, -1).to(work)
    rows = []
    for start in range(0, X.shape[1], chunk):
        Xc = _centred(X, start, start + chunk, device)
        t, d = Xc.shape[1], Xc.shape[2]
        cross = (Xc.reshape(n, -1).T.to(work) @ Yflat).reshape(t, d, Y.shape[1], Y.shape[2]).double()
        value = (cross ** 2).sum((1, 3))  # (t, Q)
        if debiased:
            a = (Xc * Xc).sum(2)
            value = value - n / (n - 2) * (a.T @ b) + a.sum(0)[:, None] * b.sum(0)[None] / ((n - 1) * (n - 2))
        rows.append(value)
    return (torch.cat(rows) / torch.sqrt(self_x[:, None] * self_y[None])).cpu()


# --------------------------------------------------------------------------- turning a heatmap into numbers


def check_grid(grid) -> tuple:
    """grid as (rows, cols) of whole numbers >= 1; 8 or (8.0, 8) raised Python's unpacking or indexing errors."""
    if not isinstance(grid, (tuple, list, np.ndarray)) or np.shape(grid) != (2,) or not all(
            isinstance(n, numbers.Integral) and not isinstance(n, bool) for n in grid):
        raise TypeError(f"grid must be (rows, cols), two whole numbers (a Tokens' .grid, e.g. (8, 8)), got {grid!r}.")
    rows, cols = int(grid[0]), int(grid[1])
    if rows < 1 or cols < 1:
        raise ValueError(f"A grid needs at least 1x1 positions, got {rows}x{cols} (a Tokens' .grid, e.g. (8, 8)).")
    return rows, cols


def position_kinds(grid) -> np.ndarray:
    """(rows*cols,) labels 'corner', 'edge' or 'interior' for each grid position, row-major."""
    rows, cols = check_grid(grid)
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
    rows, cols = check_grid(grid)
    M = torch.as_tensor(maps, dtype=torch.float64).cpu()
    T = rows * cols
    if M.shape != (T, T):
        raise ValueError(f"maps must be (tokens, patches) on the same grid {tuple(grid)}, i.e. ({T}, {T}); got {tuple(M.shape)}.")
    if not torch.isfinite(M).all():
        raise ValueError(f"maps hold {int((~torch.isfinite(M)).sum())} NaN or inf value(s): every score of their tokens "
                         "would be NaN. Compute them again with localization_maps (it refuses non-finite features).")
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
    missing = {"own", "rank", "contrast", "margin", "ratio", "border_preference", "kinds"} - set(scores)
    if missing:
        raise ValueError(f"scores lacks {sorted(missing)}: give what localization_scores(maps, grid) returns.")
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
