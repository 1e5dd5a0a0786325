"""Stage 1 of the report: every setting (the Settings dataclass), the command line that fills it, and the error
type of bad input. A Settings' fingerprint names the numbers it produces: cached parts must match it."""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import asdict, dataclass

from helpers.course import OUTPUT_DIR


class ReportError(ValueError):
    """Bad input to the report: the message says what to do."""


@dataclass
class Settings:
    """Every choice the report depends on (written to settings.json)."""

    model_a: str = "lite-vit"
    model_b: str = "lite-efficientnet"
    images: str = "shapes"
    count: int | None = None  # None: all images ('shapes': its 2,048 test images)
    layers_a: str = "blocks"
    layers_b: str = "blocks"
    policy_a: str = "all"
    policy_b: str = "all"
    batch_size: int = 256
    repeats: int = 20
    level: float = 0.9
    attention: str = "auto"
    attention_count: int = 256
    seed: int = 0
    threads: int = 0
    weights_a: str | None = None    # a local weights file for model A (safetensors or state dict), or None
    weights_b: str | None = None
    reference_a: str | None = None  # a second checkpoint of A's architecture (file), the run-to-run spread
    reference_b: str | None = None
    measures: str = "cka,procrustes"  # the conclusions recomputed with other measures (helpers.report.measures)
    measure_count: int = 512          # images the other measures use (the first ones of the set)
    vector_figures: str = "pdf,svg"   # the figures' formats beside PNG (helpers.report.figures.vector_formats)
    out: str = str(OUTPUT_DIR / "report")

    def fingerprint(self) -> str:
        """A hash of everything that changes the numbers (not --out): cached parts must match it.
        Weight files count by their content (SHA-256), so a retrained file with the same name is recomputed."""
        # the other measures are not cached, so they do not change which CKA parts a rerun may load
        numbers = {k: v for k, v in asdict(self).items()
                   if k not in ("out", "attention", "threads", "measures", "measure_count", "vector_figures")}
        for key in ("weights_a", "weights_b", "reference_a", "reference_b"):
            if numbers[key]:
                numbers[key] = file_sha256(numbers[key])
        numbers.update(precision())  # a part computed in float16 on a GPU is never resumed into a float32 run
        return hashlib.sha256(json.dumps(numbers, sort_keys=True).encode()).hexdigest()[:16]


def precision() -> dict:
    """{'device': 'cuda' or 'cpu', 'autocast': 'float16', 'bfloat16' or None}: where the forward passes run and in
    which type (helpers.autocast), for the fingerprint and METHODS.md."""
    from helpers.autocast import dtype_name, forward_dtype
    from helpers.course import pick_device

    device = pick_device()
    return {"device": device.type, "autocast": dtype_name(forward_dtype(device))}


def file_sha256(path) -> str:
    """The SHA-256 of a file ('missing' when there is none: loading it then says so)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return "missing"
    return digest.hexdigest()


def layers_arg(text: str):
    """'blocks' / 'sublayers' (presets), one name or glob pattern, or several separated by commas."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise ReportError("Give layers as a preset ('blocks', 'sublayers'), a name or pattern, or several separated by commas.")
    return parts[0] if len(parts) == 1 else parts


def build_parser() -> argparse.ArgumentParser:
    d = Settings()
    p = argparse.ArgumentParser(
        prog="python -m helpers.report",
        description="Compare two models with CKA on the same images and write figures, tables, settings, a methods "
                    "paragraph and a summary into --out. With no model names: lite-vit against lite-efficientnet on "
                    "the generated 'shapes' images (offline, about 1.5 minutes on 2 CPU cores).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("model_a", nargs="?", default=d.model_a,
                   help="model A (matrix rows): a lite zoo name (lite-vit, lite-resnet, ...) or a timm name "
                        "(vit_base_patch16_224.augreg_in1k); timm names need the internet or cached weights")
    p.add_argument("model_b", nargs="?", default=d.model_b, help="model B (matrix columns), named like model A")
    p.add_argument("--images", default=d.images,
                   help="'shapes' (the lite track's generated images), 'cifar10', 'imagenette', or a folder of images; "
                        "a folder with one subfolder per class gives class labels. Images of any size: each model's "
                        "own preprocessing resizes them")
    p.add_argument("--count", type=int, default=0,
                   help="how many images (always the same ones, in a fixed shuffled order); 0 means all ('shapes': 2,048)")
    for w in ("a", "b"):
        p.add_argument(f"--layers-{w}", default=d.layers_a,
                       help=f"layers of model {w.upper()}: preset 'blocks' (each block's output) or 'sublayers' (finer: "
                            "attention and MLP of a ViT, stem and blocks of a CNN), or module names / glob patterns "
                            "separated by commas, e.g. 'blocks.*.attn,blocks.*.mlp'. What 'blocks' takes: ViT and Mixer "
                            "blocks.i; ResNet layerS.J (each residual block); EfficientNet every MBConv block blocks.S.J "
                            "(the first block of a stage changes resolution or width and has no skip), leaving out "
                            "conv_stem and conv_head (the 1x1 convolution that widens to the features the classifier pools, 1280 channels in EfficientNet-B0: "
                            "add it by name, e.g. 'blocks.4.1,conv_head'); ConvNeXt "
                            "and ResNetV2 stages.S.blocks.J; Swin layers.S.blocks.J (maps kept channels-last, read "
                            "in their own layout). Other architectures have no preset: the error lists the families "
                            "that have one and module names to give instead")
        p.add_argument(f"--policy-{w}", default=d.policy_a, choices=["all", "cls", "spatial", "mean"],
                       help=f"token policy of model {w.upper()}: 'all' tokens (or positions) flattened, 'cls' the class "
                            "token only, 'spatial' patch tokens only, 'mean' the average over tokens or positions")
    p.add_argument("--batch-size", type=int, default=d.batch_size,
                   help="images per minibatch of the minibatch CKA estimator (at least 4; the paper used 1024)")
    p.add_argument("--repeats", type=int, default=d.repeats,
                   help="disjoint random subsamples of the images for the intervals (the paper averaged 20); "
                        "0 turns the intervals off")
    p.add_argument("--level", type=float, default=d.level, help="coverage of the intervals, e.g. 0.9 for 90%%")
    p.add_argument("--attention", default=d.attention, choices=["auto", "a", "b", "both", "none"],
                   help="which models get mean attention distances: 'auto' every model that has attention, 'a', 'b' "
                        "or 'both' (an error for a model without attention), or 'none'")
    p.add_argument("--attention-count", type=int, default=d.attention_count,
                   help="images used for the attention distances (the first ones of the set)")
    for w in ("a", "b"):
        p.add_argument(f"--weights-{w}", default=None,
                       help=f"a local weights file for model {w.upper()} (safetensors, or a state dict saved with torch.save): "
                            "your own fine-tuned checkpoint of the timm architecture named by model_{w}; its classifier "
                            "head is kept. METHODS.md names the file and its SHA-256")
        p.add_argument(f"--reference-{w}", default=None,
                       help=f"a second checkpoint of model {w.upper()}'s architecture (another seed or fine-tune, a local "
                            "file): the run-to-run spread every sentence is judged against, beside the image intervals")
    p.add_argument("--measures", default=d.measures,
                   help="similarity measures under which each comparative conclusion is recomputed and judged, "
                        "comma-separated from cka, procrustes (orthogonal Procrustes, Williams et al. 2021), rsa "
                        "(Kriegeskorte et al. 2008), knn (mutual k-nearest neighbours, Huh et al. 2024); SUMMARY.md says "
                        "whether each conclusion agrees across them. 'cka' alone turns the others off")
    p.add_argument("--measure-count", type=int, default=d.measure_count,
                   help="images the other measures use (the first ones of the set, in one forward pass per model and "
                        "reading: lower it when a GPU runs out of memory); at least 100")
    p.add_argument("--vector-figures", default=d.vector_figures,
                   help="the figures' formats beside PNG, comma-separated: pdf and svg keep text as text for a "
                        "document; 'none' writes PNG only (overview.html shows the PNGs), in about a third of the time")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the random subsamples and of the untrained twins")
    p.add_argument("--threads", type=int, default=d.threads,
                   help="CPU threads for torch; 0 (auto) uses 1 thread for two lite models on the CPU (tiny models run "
                        "faster on one thread, many times faster on a busy machine) and torch's default otherwise")
    p.add_argument("--out", default=None,
                   help="folder for the report; rerunning with the same folder resumes (finished parts are loaded) "
                        f"[default: {OUTPUT_DIR}/report_MODEL_A_vs_MODEL_B]")
    return p


def settings_from_args(argv=None) -> Settings:
    """Settings from command-line arguments (a list, like sys.argv[1:])."""
    args = vars(build_parser().parse_args(argv))
    args["count"] = None if args["count"] == 0 else args["count"]
    if args["out"] is None:
        safe = lambda name: name.replace("/", "_").replace(".", "_")  # noqa: E731
        args["out"] = str(OUTPUT_DIR / f"report_{safe(args['model_a'])}_vs_{safe(args['model_b'])}")
    return Settings(**args)
