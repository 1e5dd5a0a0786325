"""Record what layers of a torch model compute, with forward hooks that are always removed.

    with Capture(model, "blocks") as rec:          # a preset, exact names, or glob patterns
        model(images)
        features = rec.take()                       # {label: (B, p) tensor}, one per layer

Layers can be given as
  - a preset: "blocks" (one representation per block) or "sublayers" (the paper's choice: per ViT
    block norm1, attention output, residual stream after attention, norm2, MLP hidden activation,
    block output; per Mixer block the same without the transposed token-mixing output; per CNN
    the stem and every residual block), for timm ViTs, MLP-Mixers, ResNets, ResNetV2 (BiT),
    EfficientNets (every MBConv block; conv_head, the 1x1 widening before the pooled features, is left
    out: name it to add it), ConvNeXts (stages.S.blocks.J) and Swins (layers.S.blocks.J, each stage's
    patch merging inside its first block's input; the stem is patch_embed);
  - exact module names ("blocks.3.attn"), with ":input" to record a module's input instead of its
    output ("blocks.3.norm2:input" is the residual stream after attention);
  - glob patterns ("layer*.?", "blocks.*.mlp.act").

Token policies turn a ViT's (B, N, D) token outputs into one row per image:
  "all"     all tokens flattened, CLS included: (B, N*D). The default (the paper does not say which it used).
  "cls"     the prefix (CLS) token(s) only: (B, prefix*D).
  "spatial" the patch tokens only, flattened: (B, patches*D).
  "mean"    the mean of the patch tokens: (B, D).
CNN feature maps (B, C, H, W) are flattened to (B, C*H*W) ("mean" averages over H, W instead).
Some models keep their maps channels-last, (B, H, W, C): timm's Swin (its stages, its final norm and
its patch embedding) and the norm and MLP inside a ConvNeXt block. Their layout is known from the
model, per layer, when the layers are resolved (`layout_of`), never guessed from the shape (a
(B, 7, 7, 7) map would be ambiguous); such maps are turned to (B, C, H, W) before a policy applies.
"""

from __future__ import annotations

import difflib
import fnmatch
from dataclasses import dataclass

import torch

from helpers.guards import check_model

POLICIES = ("all", "cls", "spatial", "mean")


class HookNeverFiredError(RuntimeError):
    """A module asked for did not run in the forward pass (e.g. attn_drop under timm's fused attention): the
    layers chosen are at fault, not the computation, so the report and the notebooks name it as bad input."""


@dataclass(frozen=True)
class Tap:
    """One recorded representation: its label on a plot, the module, and output or input."""

    label: str
    module: str
    where: str = "output"
    layout: str = "NCHW"  # of a 4-D activation: "NCHW", or "NHWC" for a channels-last map (see layout_of)


# --------------------------------------------------------------------------- presets


# (label, module inside the block, output or input) of the "sublayers" preset; "" is the block itself
VIT_SUBLAYERS = [("norm1", "norm1", "output"), ("attn", "attn", "output"), ("resid", "norm2", "input"),
                 ("norm2", "norm2", "output"), ("mlp", "mlp.act", "output"), ("out", "", "output")]
# MLP-Mixer blocks: x = x + mlp_tokens(norm1(x)^T)^T, then x = x + mlp_channels(norm2(x)). The token-mixing
# MLP works on the transposed (B, D, N) tensor, so its own output is not one row per token; the stream
# after token mixing (the input of norm2) stands for it, as "resid" does for a ViT's attention.
MIXER_SUBLAYERS = [("norm1", "norm1", "output"), ("resid", "norm2", "input"), ("norm2", "norm2", "output"),
                   ("mlp", "mlp_channels.act", "output"), ("out", "", "output")]


def _block_taps(model, preset, sublayers):
    """Taps of a model made of `model.blocks`: one per block ("blocks"), or the given sublayers of each."""
    taps = []
    for i in range(len(model.blocks)):
        b = f"blocks.{i}"
        if preset == "blocks":
            taps.append(Tap(f"block{i}", b))
        else:
            taps += [Tap(f"b{i}.{label}", f"{b}.{module}" if module else b, where) for label, module, where in sublayers]
    return taps


def is_vit(model) -> bool:
    """A timm VisionTransformer (or anything built like one: .blocks and .patch_embed)."""
    return hasattr(model, "blocks") and hasattr(model, "patch_embed")


def is_mixer(model) -> bool:
    blocks = getattr(model, "blocks", None)
    return hasattr(model, "stem") and blocks is not None and len(blocks) > 0 and hasattr(blocks[0], "mlp_tokens")


def _cnn_taps(model, preset):
    names = dict(model.named_modules())
    if "layer1" in names:  # timm / torchvision ResNet: layer{s}.{j}
        stem = Tap("stem", "act1")
        blocks = [Tap(n, n) for n in names if fnmatch.fnmatch(n, "layer[0-9].*") and n.count(".") == 1]
    elif "stages" in names and "stem" in names:  # ResNetV2 (BiT): stages.{s}.blocks.{j}
        stem = Tap("stem", "stem")
        blocks = [Tap(f"s{n.split('.')[1]}.b{n.split('.')[3]}", n) for n in names
                  if fnmatch.fnmatch(n, "stages.*.blocks.*") and n.count(".") == 3]
    elif "conv_stem" in names and "blocks" in names:  # EfficientNet: blocks.{s}.{j}
        stem = Tap("stem", "bn1")
        blocks = [Tap(n, n) for n in names if fnmatch.fnmatch(n, "blocks.*.*") and n.count(".") == 2]
    elif "patch_embed" in names and "layers.0.blocks.0" in names:  # Swin: layers.{s}.blocks.{j}, channels-last maps
        stem = Tap("stem", "patch_embed")
        blocks = [Tap(f"s{n.split('.')[1]}.b{n.split('.')[3]}", n) for n in names
                  if fnmatch.fnmatch(n, "layers.*.blocks.*") and n.count(".") == 3]
    else:
        return None
    return blocks if preset == "blocks" else [stem] + blocks


def _check_layers_type(layers) -> None:
    example = "a preset ('blocks', 'sublayers'), a module name ('blocks.3'), a pattern ('layer*.?') or a list of them"
    if isinstance(layers, torch.nn.Module):
        raise TypeError(f"layers must name modules, not be one: give {example}. "
                        "The name of a submodule is its key in dict(model.named_modules()).")
    if layers is None or not isinstance(layers, (str, list, tuple)):
        raise TypeError(f"layers must be {example}; got {type(layers).__name__}.")
    if not isinstance(layers, str):
        if not layers:
            raise ValueError(f"layers is empty: give {example}.")
        wrong = [type(x).__name__ for x in layers if not isinstance(x, str)]
        if wrong:
            raise TypeError(f"layers must be strings (module names or patterns); got {wrong}. Give {example}.")


# Modules whose 4-D output is always (B, C, H, W), whatever the model around them does.
_CHANNELS_FIRST = (torch.nn.modules.conv._ConvNd, torch.nn.modules.batchnorm._BatchNorm,
                   torch.nn.modules.pooling._AvgPoolNd, torch.nn.modules.pooling._MaxPoolNd,
                   torch.nn.modules.pooling._AdaptiveAvgPoolNd, torch.nn.modules.pooling._AdaptiveMaxPoolNd)


def _declared_format(module):
    """The layout a module declares for its output (timm's `output_fmt`: Swin and its patch embedding say
    'NHWC'), or None."""
    fmt = getattr(module, "output_fmt", None)
    fmt = getattr(fmt, "value", fmt)  # timm's Format enum or a plain string
    return fmt if fmt in ("NCHW", "NHWC") else None


def layout_of(model, module_name: str, modules: dict | None = None) -> str:
    """'NHWC' when the module's 4-D activation is channels-last, else 'NCHW' (also for outputs that are not 4-D).

    Known from the model, not guessed from a shape:
      - a convolution, batch norm or pooling layer works channels-first;
      - inside a timm ConvNeXt block without conv_mlp, `norm` and `mlp` run on the permuted (B, H, W, C) map
        (the block's own output is permuted back);
      - otherwise the nearest enclosing module (the module itself first, the model last) that declares timm's
        `output_fmt` decides: timm's SwinTransformer and its patch embedding declare 'NHWC'.
    A module's input (':input') gets the same rules: a convolution also reads (B, C, H, W), a Swin block reads
    what the previous one wrote (B, H, W, C).
    modules: dict(model.named_modules()), when the caller has it (walking the model for every layer of a report
    took about a second of its minute).
    """
    modules = dict(model.named_modules()) if modules is None else modules
    module = modules[module_name]
    if isinstance(module, _CHANNELS_FIRST):
        return "NCHW"
    parts = module_name.split(".") if module_name else []
    for depth in range(len(parts) - 1, 0, -1):  # a ConvNeXt block above: its norm and mlp work channels-last
        block = modules[".".join(parts[:depth])]
        if type(block).__name__ == "ConvNeXtBlock" and not getattr(block, "use_conv_mlp", True):
            return "NHWC" if parts[depth] in ("norm", "mlp") else "NCHW"
    for depth in range(len(parts), -1, -1):  # the module itself, then each enclosing module, the model last
        declared = _declared_format(modules[".".join(parts[:depth])] if depth else model)
        if declared:
            return declared
    return "NCHW"


def resolve(model, layers) -> list:
    """Turn a preset, names or patterns into a list of Taps (in model order for presets and patterns), each with
    the layout of its 4-D activations (layout_of)."""
    taps = _resolve_names(model, layers)
    modules = dict(model.named_modules())
    return [Tap(t.label, t.module, t.where, layout_of(model, t.module, modules)) for t in taps]


def _resolve_names(model, layers) -> list:
    _check_layers_type(layers)
    names = [n for n, _ in model.named_modules() if n]
    if isinstance(layers, str) and layers in ("blocks", "sublayers"):
        if is_vit(model):
            taps = _block_taps(model, layers, VIT_SUBLAYERS)
        elif is_mixer(model):
            taps = _block_taps(model, layers, MIXER_SUBLAYERS)
        else:
            taps = _cnn_taps(model, layers)
        if taps is None:
            raise ValueError(f"No '{layers}' preset for {type(model).__name__}: presets exist for timm's ViT, MLP-Mixer, "
                             "ResNet, ResNetV2, EfficientNet, ConvNeXt and Swin. Give module names or glob patterns "
                             f"instead, e.g. {names[:3]} (see [n for n, _ in model.named_modules()]).")
        return taps
    if isinstance(layers, str):
        layers = [layers]
    taps = []
    for spec in layers:
        name, _, where = spec.partition(":")
        where = where or "output"
        if where not in ("output", "input"):
            raise ValueError(f"'{spec}': the part after ':' must be 'input' or 'output'.")
        if any(ch in name for ch in "*?["):
            matches = [n for n in names if fnmatch.fnmatch(n, name)]
            if not matches:
                raise ValueError(f"Pattern '{name}' matches no module of {type(model).__name__}. {_suggest(name, names)}")
            taps += [Tap(n if where == "output" else f"{n}:input", n, where) for n in matches]
        elif name in names:
            taps.append(Tap(spec, name, where))
        else:
            raise ValueError(f"No module named '{name}' in {type(model).__name__}. {_suggest(name, names)}")
    labels = [t.label for t in taps]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ValueError(f"Layer(s) {repeated} given twice. Give each layer once.")
    return taps


def _suggest(name, names) -> str:
    close = difflib.get_close_matches(name, names, n=5, cutoff=0.5)
    return f"Did you mean: {', '.join(close)}?" if close else "List them with [n for n, _ in model.named_modules()]."


# --------------------------------------------------------------------------- token policies


def apply_policy(output: torch.Tensor, policy: str, num_prefix_tokens: int, num_patches: int | None = None,
                 layout: str = "NCHW") -> torch.Tensor:
    """(B, ...) activations -> (B, p) rows under a token policy (see the module docstring).

    layout: of a 4-D output, "NCHW" (B, C, H, W) or "NHWC" (B, H, W, C), from the layer (Tap.layout); a
    channels-last map is permuted to (B, C, H, W) first, so 'mean' averages over H and W in both.

    num_patches: the model's number of patch tokens, when known. It tells whether a (B, N, D)
    output carries the prefix tokens at all: `patch_embed` (N = patches) does not, so its first
    token is a patch, not a CLS token. Such outputs have no CLS to take, and their "spatial" and
    "mean" policies use every token.
    """
    if policy not in POLICIES:
        raise ValueError(f"Unknown token policy '{policy}'; choose one of {POLICIES}.")
    if output.ndim == 3:  # (B, N, D) tokens
        if policy == "all":
            return output.flatten(1)
        prefix = num_prefix_tokens
        if num_patches is not None and prefix and output.shape[1] != num_patches + prefix:
            if output.shape[1] != num_patches:
                raise ValueError(f"An output of {output.shape[1]} tokens, but the model has {prefix} prefix and {num_patches} "
                                 f"patch tokens: cannot tell which tokens are which for policy '{policy}'. Use policy 'all'.")
            prefix = 0  # no prefix tokens in this output (e.g. patch_embed)
            if policy == "cls":
                raise ValueError("This layer's output has no CLS token (it comes before the CLS token is added, e.g. "
                                 "patch_embed): use policy 'all', 'spatial' or 'mean' for it.")
        if not 0 <= prefix < output.shape[1]:  # an empty slice of patch tokens gave (B, 0) rows without a word
            raise ValueError(f"num_prefix_tokens={prefix} leaves no patch tokens in an output of {output.shape[1]} "
                             "tokens: give the model's own model.num_prefix_tokens (1 for a CLS token, 0 for none).")
        if policy == "cls":
            if prefix == 0:
                raise ValueError("This model has no CLS (prefix) token: use policy 'all', 'spatial' or 'mean'.")
            return output[:, :prefix].flatten(1)
        spatial = output[:, prefix:]
        return spatial.flatten(1) if policy == "spatial" else spatial.mean(1)
    if layout not in ("NCHW", "NHWC"):
        raise ValueError(f"Unknown layout '{layout}': give 'NCHW' (B, C, H, W) or 'NHWC' (B, H, W, C).")
    if output.ndim == 4:  # (B, C, H, W) feature maps
        if layout == "NHWC":
            output = output.permute(0, 3, 1, 2)
        if policy == "cls":
            raise ValueError("CNN feature maps have no CLS token: use policy 'all' (flatten) or 'mean' (average over H, W).")
        return output.mean((2, 3)) if policy == "mean" else output.flatten(1)
    return output.flatten(1)


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


# --------------------------------------------------------------------------- the recorder


class Capture:
    """Context manager that records the given layers on every forward pass of `model`.

    model: any torch.nn.Module. layers: preset, names or patterns (module docstring).
    policy: token policy for (B, N, D) outputs. transform: optional function applied to each
    (B, p) row matrix inside the hook (e.g. a Gram, so activations need not be kept).
    on_repeat: what to do when a module runs twice in one forward pass: "error" or "last".
    """

    def __init__(self, model, layers="blocks", policy: str = "all", transform=None, on_repeat: str = "error"):
        check_model(model)  # a module, not a name: load names first with helpers.models.load
        if policy not in POLICIES:
            raise ValueError(f"Unknown token policy '{policy}'; choose one of {POLICIES}.")
        if on_repeat not in ("error", "last"):
            raise ValueError("on_repeat must be 'error' or 'last'.")
        self.model, self.policy, self.transform, self.on_repeat = model, policy, transform, on_repeat
        self.taps = resolve(model, layers)
        self.num_prefix_tokens = int(getattr(model, "num_prefix_tokens", 0))
        if policy == "cls" and self.num_prefix_tokens == 0:
            raise ValueError(f"Token policy 'cls' needs a CLS (prefix) token, but {type(model).__name__} has none "
                             "(a CNN, a Mixer or a global-average-pool ViT): use 'all', 'spatial' or 'mean' for it.")
        embed = getattr(model, "patch_embed", None) or (model.stem if is_mixer(model) else None)
        num_patches = getattr(embed, "num_patches", None)
        self.num_patches = int(num_patches) if isinstance(num_patches, int) else None
        self._store, self._counts, self._handles = {}, {}, []
        self._whole_pass = False  # True once model(x) itself has started a pass (its forward pre-hook fired)

    @property
    def labels(self) -> list:
        return [t.label for t in self.taps]

    def _record(self, tap: Tap, value):
        if isinstance(value, (tuple, list)):
            value = value[0]
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"Module '{tap.module}' gave a {type(value).__name__}, not a tensor, so it cannot be recorded. "
                            "Record one of its submodules instead (see dict(model.named_modules())).")
        self._counts[tap.label] = self._counts.get(tap.label, 0) + 1
        if self._counts[tap.label] > 1 and self.on_repeat == "error":
            if not self._whole_pass:  # the model itself was not called: two passes of its parts, not one shared module
                raise RuntimeError(f"Module '{tap.module}' ran {self._counts[tap.label]} times since the last take(), "
                                   f"outside any call of the model itself (model.forward_features(x), or its modules "
                                   f"called one by one?). Call take() after each pass, or run the whole model as model(x).")
            raise RuntimeError(f"Module '{tap.module}' ran {self._counts[tap.label]} times in one forward pass of the model "
                               "(a module used twice?). Capture(..., on_repeat='last') keeps the last call.")
        value = value.detach()
        if value.dtype in (torch.float16, torch.bfloat16):  # a forward under autocast: pool and keep in float32
            value = value.float()
        rows = apply_policy(value, self.policy, self.num_prefix_tokens, self.num_patches, tap.layout)
        kept = self.transform(rows) if self.transform else rows
        # clone anything that still shares the activation's memory: timm's ReLUs work in place
        # and would overwrite what we keep (a transform may return a view of its input, too)
        self._store[tap.label] = kept.clone() if isinstance(kept, torch.Tensor) and _shares_memory(kept, value) else kept

    def _new_forward(self, *_):
        """Each forward pass of the whole model starts a fresh record."""
        self._store, self._counts, self._whole_pass = {}, {}, True

    def __enter__(self):
        self._handles.append(self.model.register_forward_pre_hook(self._new_forward))
        modules = dict(self.model.named_modules())
        for tap in self.taps:
            module = modules[tap.module]
            if tap.where == "output":
                hook = module.register_forward_hook(lambda _m, _i, out, tap=tap: self._record(tap, out))
            else:
                hook = module.register_forward_pre_hook(lambda _m, inp, tap=tap: self._record(tap, inp))
            self._handles.append(hook)
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        self._handles = []
        return False

    def take(self) -> dict:
        """The representations of the last forward pass, {label: tensor}, in layer order; then clear."""
        silent = [t for t in self.taps if t.label not in self._store]
        if silent:
            hint = ""
            if any(t.module.endswith("attn_drop") for t in silent):
                hint = (" timm's fused attention never calls attn_drop: use helpers.attention.attention_maps, "
                        "or set fused_attn = False on the attention modules first.")
            elif len(silent) == len(self.taps):
                hint = " Did the model run inside the `with Capture(...)` block?"
            raise HookNeverFiredError(f"Hook(s) never fired for {[t.label for t in silent]}: these modules did not run "
                               f"in the forward pass.{hint}")
        features = {t.label: self._store[t.label] for t in self.taps}
        self._store, self._counts, self._whole_pass = {}, {}, False
        return features
