"""Compare any two models on your own images and write a report bundle for an appendix.

    python -m helpers.report                                   # lite-vit vs lite-efficientnet on 'shapes', offline
    python -m helpers.report vit_base_patch16_224.augreg_in1k resnet50.tv_in1k --images path/to/folder --out outputs/mine
    python -m helpers.report resnet18 lite-vit --weights-a my_finetune.safetensors   # your own checkpoint

What it computes (all with helpers.compare, streamed in minibatches): the CKA matrix within each
model, the cross-model matrix A x B, matched depth (for each layer of B, the layer of A with the
highest CKA), CKA with the class labels (when the images have labels), mean attention distances
(for a model with attention), each CKA value with an interval from disjoint subsamples
(helpers.intervals), and a summary whose every sentence is computed from the numbers written.
Cross-model and label CKA are computed under two readings (each model's classifier reading and all
tokens) and on the untrained twins (the floor); the comparisons are judged by helpers.verdicts in
helpers.report_controls, which writes a comparative sentence only when both readings agree.
--weights-a/-b load your own checkpoints (head kept), --reference-a/-b add a second checkpoint.

What it writes into --out: figures/ (PNG, PDF, SVG), tables/ (CSV and NPZ of every matrix and
curve), settings.json, METHODS.md, SUMMARY.md; cache/ holds each finished part, so a rerun with
the same --out and settings loads them instead of recomputing.

The notebook 16_compare_your_models calls the same functions: settings_from_args, load_inputs,
compute, write_bundle.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from helpers import intervals, models, zoo
from helpers.course import OUTPUT_DIR, shown_path
from helpers.data import subset

FIGURE_WIDTH_IN = 3.35  # one A4 column (8.5 cm)
FIGURE_CMAP = "magma"   # the course's perceptually uniform, colour-blind-safe map (helpers.plots.CMAP)
REFERENCES = [
    "Raghu, M., Unterthiner, T., Kornblith, S., Zhang, C., & Dosovitskiy, A. (2021). Do Vision Transformers See "
    "Like Convolutional Neural Networks? NeurIPS 34. arXiv:2108.08810.",
    "Kornblith, S., Norouzi, M., Lee, H., & Hinton, G. (2019). Similarity of Neural Network Representations "
    "Revisited. ICML. arXiv:1905.00414.",
    "Nguyen, T., Raghu, M., & Kornblith, S. (2021). Do Wide and Deep Networks Learn the Same Things? Uncovering "
    "How Neural Network Representations Vary with Width and Depth. ICLR. arXiv:2010.15327.",
]


# The estimator's unbiased HSIC, and each model family the report may compare: cited when a compared model is one.
HSIC_REFERENCE = ("Song, L., Smola, A., Gretton, A., Bedo, J., & Borgwardt, K. (2012). Feature Selection via Dependence "
                  "Maximization. JMLR 13, 1393-1434 (the unbiased HSIC estimator).")
FAMILY_REFERENCES = {
    "VisionTransformer": "Dosovitskiy, A., et al. (2021). An Image is Worth 16x16 Words: Transformers for Image Recognition "
                         "at Scale. ICLR. arXiv:2010.11929.",
    "deit": "Touvron, H., et al. (2021). Training data-efficient image transformers & distillation through attention. ICML. "
            "arXiv:2012.12877.",
    "ResNet": "He, K., Zhang, X., Ren, S., & Sun, J. (2016). Deep Residual Learning for Image Recognition. CVPR. "
              "arXiv:1512.03385.",
    "EfficientNet": "Tan, M., & Le, Q. V. (2019). EfficientNet: Rethinking Model Scaling for Convolutional Neural Networks. "
                    "ICML. arXiv:1905.11946.",
    "ConvNeXt": "Liu, Z., Mao, H., Wu, C.-Y., Feichtenhofer, C., Darrell, T., & Xie, S. (2022). A ConvNet for the 2020s. "
                "CVPR. arXiv:2201.03545.",
    "SwinTransformer": "Liu, Z., et al. (2021). Swin Transformer: Hierarchical Vision Transformer using Shifted Windows. "
                       "ICCV. arXiv:2103.14030.",
    "MlpMixer": "Tolstikhin, I., et al. (2021). MLP-Mixer: An all-MLP Architecture for Vision. NeurIPS. arXiv:2105.01601.",
}


def references(results: dict, settings) -> list:
    """REFERENCES, the unbiased-HSIC paper, and the paper of each compared model's family."""
    out = REFERENCES + [HSIC_REFERENCE]
    for w in ("a", "b"):
        family = results["model_classes"][w]
        key = "deit" if getattr(settings, f"model_{w}").startswith("deit") else family
        if key in FAMILY_REFERENCES and FAMILY_REFERENCES[key] not in out:
            out.append(FAMILY_REFERENCES[key])
    return out


class ReportError(ValueError):
    """Bad input to the report: the message says what to do."""


# --------------------------------------------------------------------------- settings


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
    out: str = str(OUTPUT_DIR / "report")

    def fingerprint(self) -> str:
        """A hash of everything that changes the numbers (not --out): cached parts must match it.
        Weight files count by their content (SHA-256), so a retrained file with the same name is recomputed."""
        numbers = {k: v for k, v in asdict(self).items() if k not in ("out", "attention", "threads")}
        for key in ("weights_a", "weights_b", "reference_a", "reference_b"):
            if numbers[key]:
                numbers[key] = file_sha256(numbers[key])
        return hashlib.sha256(json.dumps(numbers, sort_keys=True).encode()).hexdigest()[:16]


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
                            "and ResNetV2 stages.S.blocks.J. Other architectures (Swin among them) have no preset: the "
                            "error lists module names to give instead")
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


# --------------------------------------------------------------------------- inputs


def load_model(name: str, which: str, weights=None):
    """A model by name (helpers.models.load, which suggests close names on a typo), with the weights of a local
    file when given (its classifier head kept); errors name the argument."""
    try:
        return models.load(name) if weights is None else models.load(name, weights=weights)
    except (ValueError, FileNotFoundError, TypeError, models.WeightsUnavailableError) as error:
        raise ReportError(f"Model {which} ('{name}'): {error}") from None


def load_images(settings: Settings):
    """The image set of --images/--count; an empty or missing folder is a ReportError that says what to do."""
    from helpers.data import image_set

    if settings.count is not None and settings.count < 4:
        raise ReportError(f"--count {settings.count}: CKA needs at least 4 images (use 500+ for stable values).")
    try:
        return image_set(settings.images, count=settings.count)
    except (ValueError, FileNotFoundError, RuntimeError, TypeError, PermissionError) as error:
        raise ReportError(f"--images {settings.images}: {error}") from None


def has_attention(model) -> bool:
    """True for a model with timm Attention modules (what helpers.attention needs)."""
    return any(hasattr(m, "fused_attn") and hasattr(m, "attn_drop") for m in model.modules())


def attention_plan(settings: Settings, model_a, model_b) -> dict:
    """{'a': bool, 'b': bool}: which models get attention distances; asking for one without attention is an error."""
    asked = {"auto": "", "none": "", "a": "a", "b": "b", "both": "ab"}[settings.attention]
    plan = {}
    for which, model, name in (("a", model_a, settings.model_a), ("b", model_b, settings.model_b)):
        if which in asked and not has_attention(model):
            raise ReportError(f"--attention {settings.attention}: model {which.upper()} ('{name}', {type(model).__name__}) "
                              "has no attention layers, so it has no attention distances. Use --attention auto (every "
                              "model that has attention) or ask only for a ViT.")
        plan[which] = settings.attention != "none" and has_attention(model) and (settings.attention == "auto" or which in asked)
    return plan


def load_inputs(settings: Settings):
    """(model_a, model_b, images, attention plan), all checked before anything is computed."""
    if settings.repeats == 1 or settings.repeats < 0:
        raise ReportError(f"--repeats {settings.repeats}: give 0 (no intervals) or at least 2 subsamples (the paper used 20).")
    if settings.batch_size < 4:
        raise ReportError(f"--batch-size {settings.batch_size}: give at least 4 images per batch (128-256 are typical).")
    if not 0 < settings.level < 1:
        raise ReportError(f"--level {settings.level}: give a coverage between 0 and 1, e.g. 0.9.")
    model_a, model_b = load_model(settings.model_a, "A", settings.weights_a), load_model(settings.model_b, "B", settings.weights_b)
    plan = attention_plan(settings, model_a, model_b)
    images = load_images(settings)
    if settings.repeats and len(images) // settings.repeats < 20:
        raise ReportError(f"{len(images)} images in {settings.repeats} subsamples give {len(images) // settings.repeats} "
                          "images each: use fewer --repeats, more --count, or --repeats 0 (no intervals).")
    return model_a, model_b, images, plan


# --------------------------------------------------------------------------- computing, with resume


@dataclass
class Part:
    """One CKA result: the full-data matrix, and the same matrix on each disjoint subsample."""

    name: str
    full: object                                   # CKAMatrix
    subsamples: list = field(default_factory=list)  # CKAMatrix per subsample
    level: float = 0.9

    @property
    def sub_values(self) -> np.ndarray:
        """(R, rows, cols) values on the subsamples (R = 0 without intervals)."""
        return np.stack([s.values for s in self.subsamples]) if self.subsamples else np.zeros((0,) + self.full.values.shape)

    def interval_of(self, statistic):
        """(value, low, high) of statistic(values matrix) -> number or array; low = high = NaN without subsamples."""
        value = np.asarray(statistic(self.full.values), dtype=np.float64)
        if len(self.subsamples) < 2:
            return value, np.full_like(value, np.nan), np.full_like(value, np.nan)
        low, high = intervals.subsample_interval(value, [statistic(s.values) for s in self.subsamples], self.level)
        return value, low, high

    def interval(self):
        """(values, low, high) for every cell of the matrix."""
        return self.interval_of(lambda v: v)


def cached(path: Path, fingerprint: str, compute, log):
    """Load the CKAMatrix at `path` when it was computed with the same settings, else compute and save it."""
    from helpers.minibatch_cka import CKAMatrix

    if path.exists():
        try:
            old = CKAMatrix.load(path)
            if old.meta.get("fingerprint") == fingerprint:
                log.append(f"{path.name}: loaded (finished earlier)")
                return old
            log.append(f"{path.name}: recomputed (it was made with other settings)")
        except ValueError:
            log.append(f"{path.name}: recomputed (the saved file could not be read)")
    result = compute()
    result.meta["fingerprint"] = fingerprint
    result.save(path)
    return result


def control_models(settings: Settings, model_a, model_b) -> dict:
    """{'twin': (A's untrained twin, B's), 'ref': (reference of A or A, reference of B or B)}; 'ref' only when a
    --reference is given. The twins share the architecture and are seeded by --seed."""
    from helpers.report_controls import untrained_twin

    out = {"twin": (untrained_twin(settings.model_a, model_a, settings.seed),
                    untrained_twin(settings.model_b, model_b, settings.seed + 1))}
    if settings.reference_a or settings.reference_b:
        out["ref"] = (load_model(settings.model_a, "A (--reference-a)", settings.reference_a) if settings.reference_a else model_a,
                      load_model(settings.model_b, "B (--reference-b)", settings.reference_b) if settings.reference_b else model_b)
    return out


def _jobs(settings: Settings, model_a, model_b, images, controls: dict | None = None):
    """[(part name, function(ImageSet) -> CKAMatrix)] for everything the report computes with CKA.

    Cross-model and label CKA under both readings (suffix '_head': the classifier reading; none: --policy, all
    tokens by default), for the trained models, their untrained twins ('twin_') and the references ('ref_').
    """
    from helpers.compare import cka_matrix, label_cka
    from helpers.report_controls import classifier_policy

    s, la, lb = settings, layers_arg(settings.layers_a), layers_arg(settings.layers_b)
    common = dict(batch_size=s.batch_size, progress=False)
    jobs = [("within_a", lambda im: cka_matrix(model_a, im, la, policy_a=s.policy_a, **common)),
            ("within_b", lambda im: cka_matrix(model_b, im, lb, policy_a=s.policy_b, **common))]
    from helpers.report_audit import statistics_cka

    sets = [("", model_a, model_b)] + [(f"{k}_", ma, mb) for k, (ma, mb) in (controls or {}).items()]
    for w, m, layers in (("a", model_a, la), ("b", model_b, lb)):  # the image-statistics audit (helpers.report_audit)
        for x, policy in (("", getattr(s, f"policy_{w}")), ("_head", classifier_policy(m))):
            jobs.append((f"stats_{w}{x}", lambda im, m=m, layers=layers, policy=policy: statistics_cka(
                m, im, layers, policy=policy, batch_size=s.batch_size)))
    for prefix, ma, mb in sets:
        readings = {"": (s.policy_a, s.policy_b), "_head": (classifier_policy(ma), classifier_policy(mb))}
        for x, (pa, pb) in readings.items():
            jobs.append((f"{prefix}cross{x}", lambda im, ma=ma, mb=mb, pa=pa, pb=pb: cka_matrix(
                ma, im, la, model_b=mb, layers_b=lb, policy_a=pa, policy_b=pb, **common)))
            if images.labels is not None:
                jobs += [(f"{prefix}labels_a{x}", lambda im, ma=ma, pa=pa: label_cka(ma, im, la, policy=pa, **common)),
                         (f"{prefix}labels_b{x}", lambda im, mb=mb, pb=pb: label_cka(mb, im, lb, policy=pb, **common))]
    return jobs


def thread_count(settings: Settings, model_a, model_b) -> int:
    """The torch CPU threads to use: --threads, or for 0 one thread when both models are lite models on the CPU."""
    import torch

    if settings.threads > 0:
        return settings.threads
    on_cpu = all(next(m.parameters()).device.type == "cpu" for m in (model_a, model_b))
    lite = settings.model_a in zoo.ZOO and settings.model_b in zoo.ZOO
    return 1 if on_cpu and lite else torch.get_num_threads()


@contextmanager
def torch_threads(n: int):
    """torch.set_num_threads(n) inside the block, the caller's setting restored after."""
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def compute(settings: Settings, model_a, model_b, images, plan: dict, progress: bool = True) -> dict:
    """Every result of the report (see _compute), with torch's CPU threads set by thread_count."""
    with torch_threads(thread_count(settings, model_a, model_b)):
        return _compute(settings, model_a, model_b, images, plan, progress)


def _compute(settings: Settings, model_a, model_b, images, plan: dict, progress: bool = True) -> dict:
    """Every result of the report: {'parts': {name: Part}, 'attention': {...}, 'log': [...], 'n_images': N}.

    Each matrix (full data and each subsample) is cached under <out>/cache and loaded on a rerun.
    """
    from tqdm.auto import tqdm

    from helpers.report_controls import classifier_policy

    cache = Path(settings.out) / "cache"
    fp, log = settings.fingerprint(), []
    parts_idx = intervals.disjoint_subsamples(len(images), settings.repeats, settings.seed) if settings.repeats else []
    try:
        controls = control_models(settings, model_a, model_b)
    except (ValueError, TypeError, RuntimeError) as error:
        raise ReportError(f"The untrained twins or references could not be built: {error}") from None
    jobs = _jobs(settings, model_a, model_b, images, controls)
    # image set outermost, so that each model runs once per image set: the jobs after its first reuse its
    # Grams (helpers.gram_cache), which are kept for the same ImageSet object only
    image_sets = [images] + [subset(images, part) for part in parts_idx]
    steps = [(name, k, fn) for k in range(-1, len(parts_idx)) for name, fn in jobs]
    parts = {name: Part(name, None, [], settings.level) for name, _ in jobs}
    try:
        for name, k, fn in tqdm(steps, desc="CKA parts", disable=not progress):
            where = cache / (f"{name}.npz" if k < 0 else f"{name}_sub{k:02d}.npz")
            result = cached(where, fp, (lambda fn=fn, k=k: fn(image_sets[k + 1])), log)
            if k < 0:
                parts[name].full = result
            else:
                parts[name].subsamples.append(result)
        attention = {w: cached_attention(settings, w, m, images, cache, log) if plan[w] else None
                     for w, m in (("a", model_a), ("b", model_b))}
        fields = {w: cached_receptive_fields(settings, w, m, images, cache, log) for w, m in (("a", model_a), ("b", model_b))}
    except (ValueError, TypeError, KeyError) as error:
        raise ReportError(f"{error}") from None
    return {"parts": parts, "attention": attention, "receptive_fields": fields, "log": log, "n_images": len(images),
            "images_name": images.name,
            "has_labels": images.labels is not None, "plan": plan,
            "attention_exists": {"a": has_attention(model_a), "b": has_attention(model_b)},
            "readings": {w: {"head": classifier_policy(m), "tokens": getattr(settings, f"policy_{w}")}
                         for w, m in (("a", model_a), ("b", model_b))},
            "model_classes": {"a": type(model_a).__name__, "b": type(model_b).__name__}}


def cached_arrays(path: Path, fingerprint: str, n_images: int, compute, log) -> dict:
    """{name: numpy array} saved at `path` by an earlier run with the same settings and image count,
    else compute() (a dict of arrays), saved there with both and returned."""
    if path.exists():
        with np.load(path, allow_pickle=False) as f:
            if str(f["fingerprint"]) == fingerprint and int(f["n_images"]) == n_images:
                log.append(f"{path.name}: loaded (finished earlier)")
                return {k: f[k] for k in f.files if k not in ("fingerprint", "n_images")}
    arrays = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays, n_images=n_images, fingerprint=np.array(fingerprint))
    return arrays


def cached_attention(settings: Settings, which: str, model, images, cache: Path, log) -> dict:
    """{'distances': (blocks, heads) px, 'uniform': px of a uniform head, 'n_images': n}, cached as an .npz.

    Uses the first --attention-count images (helpers.attention.attention_distance_table streams them).
    """
    from helpers.attention import attention_distance_table, uniform_attention_distance

    n = min(len(images), settings.attention_count)

    def compute():
        size = model.patch_embed.patch_size
        patch = int(size[0] if isinstance(size, (tuple, list)) else size)
        return {"distances": attention_distance_table(model, subset(images, range(n)), batch_size=min(64, settings.batch_size)),
                "uniform": np.array(uniform_attention_distance(int(round(model.patch_embed.num_patches ** 0.5)), patch))}

    arrays = cached_arrays(cache / f"attention_{which}.npz", settings.fingerprint(), n, compute, log)
    return {"distances": arrays["distances"], "uniform": float(arrays["uniform"]), "n_images": n}


RF_IMAGES = 32  # images for the receptive fields, as in the paper (Fig. 6)


def cached_receptive_fields(settings: Settings, which: str, model, images, cache: Path, log) -> dict:
    """{'layers', 'radius_px' (L,), 'uniform_px', 'n_images'}: each recorded layer's effective receptive field
    (helpers.receptive_fields: |d centre output / d input|, channels summed) summarised by the radius around its
    centre of mass that holds half the gradient; the first 32 images; cached as an .npz. A model whose layers
    have no spatial centre (outputs neither (B, N, D) tokens nor (B, C, H, W) maps) gets {'error': why}.
    """
    from helpers.data import batches
    from helpers.receptive_fields import mass_radius, receptive_fields, uniform_mass_radius

    n = min(len(images), RF_IMAGES)

    def compute():
        x = next(batches(subset(images, range(n)), model, n))
        maps = receptive_fields(model, x, layers=layers_arg(getattr(settings, f"layers_{which}"))).maps
        return {"layers": np.array(list(maps)), "radius_px": np.array([mass_radius(m) for m in maps.values()]),
                "uniform_px": np.array(uniform_mass_radius(*x.shape[-2:]))}

    try:
        arrays = cached_arrays(cache / f"receptive_fields_{which}.npz", settings.fingerprint(), n, compute, log)
    except (ValueError, RuntimeError) as error:
        log.append(f"receptive fields of model {which.upper()}: not computed ({error})")
        return {"error": str(error)}
    return {"layers": [str(x) for x in arrays["layers"]], "radius_px": arrays["radius_px"],
            "uniform_px": float(arrays["uniform_px"]), "n_images": n}


# --------------------------------------------------------------------------- numbers derived from the parts


def matched_depth(part: Part) -> dict:
    """For each layer of B (column j), the layer of A with the highest CKA: index, name, value with interval.

    agreement: the fraction of subsamples whose best match is the same layer (NaN without subsamples).
    """
    values = part.full.values
    best = values.argmax(axis=0)                        # (Lb,)
    cka, low, high = part.interval_of(lambda v: v.max(axis=0))
    subs = part.sub_values
    agreement = (subs.argmax(axis=1) == best[None]).mean(0) if len(subs) else np.full(len(best), np.nan)
    return {"b_layer": list(part.full.cols), "a_index": best, "a_layer": [part.full.rows[i] for i in best],
            "cka": cka, "ci_low": low, "ci_high": high, "agreement": agreement}


def mean_off_diagonal(values: np.ndarray) -> float:
    """The mean of a square matrix's off-diagonal entries: how alike a model's layers are overall."""
    mask = ~np.eye(len(values), dtype=bool)
    return float(values[mask].mean())


# --------------------------------------------------------------------------- tables


def _fmt(x) -> str:
    return "" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{float(x):.12g}"


def _write_csv(path: Path, header: list, rows: list) -> Path:
    import csv

    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def write_matrix_tables(part: Part, folder: Path) -> list:
    """<name>.csv (one row per layer pair: cka, ci_low, ci_high) and <name>.npz (the same as arrays)."""
    values, low, high = part.interval()
    rows, cols = part.full.rows, part.full.cols
    csv_rows = [[r, c, _fmt(values[i, j]), _fmt(low[i, j]), _fmt(high[i, j])]
                for i, r in enumerate(rows) for j, c in enumerate(cols)]
    paths = [_write_csv(folder / f"{part.name}.csv", ["row_layer", "col_layer", "cka", "ci_low", "ci_high"], csv_rows)]
    np.savez(folder / f"{part.name}.npz", values=values, ci_low=low, ci_high=high, subsample_values=part.sub_values,
             rows=np.array(rows, dtype=str), cols=np.array(cols, dtype=str))
    return paths + [folder / f"{part.name}.npz"]


def write_curve_tables(name: str, columns: dict, folder: Path) -> list:
    """A curve (dict of equal-length columns) as <name>.csv and <name>.npz."""
    header = list(columns)
    n = len(next(iter(columns.values())))
    rows = [[_fmt(columns[h][i]) if not isinstance(columns[h][i], str) else columns[h][i] for h in header] for i in range(n)]
    _write_csv(folder / f"{name}.csv", header, rows)
    np.savez(folder / f"{name}.npz", **{h: np.asarray(columns[h]) for h in header})
    return [folder / f"{name}.csv", folder / f"{name}.npz"]


def curves(results: dict) -> dict:
    """{name: columns} of every curve: matched depth, CKA with the labels, attention distances."""
    parts, out = results["parts"], {}
    m = matched_depth(parts["cross"])
    out["matched_depth"] = {"b_layer": m["b_layer"], "b_index": list(range(len(m["b_layer"]))), "matched_a_layer": m["a_layer"],
                            "matched_a_index": list(m["a_index"]), "cka": m["cka"], "ci_low": m["ci_low"],
                            "ci_high": m["ci_high"], "subsample_agreement": m["agreement"]}
    for w in ("a", "b"):
        if f"labels_{w}" in parts:
            p = parts[f"labels_{w}"]
            v, lo, hi = p.interval()
            n = len(p.full.rows)
            out[f"label_cka_{w}"] = {"layer": list(p.full.rows), "index": list(range(n)),
                                     "relative_depth": [i / max(1, n - 1) for i in range(n)],
                                     "cka": v[:, 0], "ci_low": lo[:, 0], "ci_high": hi[:, 0]}
        rf = results.get("receptive_fields", {}).get(w)
        if rf and "error" not in rf:
            n = len(rf["layers"])
            out[f"receptive_field_{w}"] = {"layer": rf["layers"], "index": list(range(n)),
                                           "relative_depth": [i / max(1, n - 1) for i in range(n)],
                                           "radius_50_px": rf["radius_px"], "uniform_image_px": [rf["uniform_px"]] * n}
        att = results["attention"][w]
        if att is not None:
            d = att["distances"]
            out[f"attention_distance_{w}"] = {"block": [b for b in range(d.shape[0]) for _ in range(d.shape[1])],
                                              "head": [h for _ in range(d.shape[0]) for h in range(d.shape[1])],
                                              "distance_px": d.reshape(-1),
                                              "uniform_head_px": [att["uniform"]] * d.size}
    return out


# --------------------------------------------------------------------------- figures


def _save(fig, name: str, folder: Path) -> list:
    """PNG (200 dpi), PDF and SVG with text kept as text (pdf.fonttype 42, svg.fonttype none)."""
    import matplotlib.pyplot as plt

    paths = []
    with plt.rc_context({"svg.fonttype": "none", "pdf.fonttype": 42}):
        for ext in ("png", "pdf", "svg"):
            fig.savefig(folder / f"{name}.{ext}", bbox_inches="tight", dpi=200 if ext == "png" else None)
            paths.append(folder / f"{name}.{ext}")
    return paths


def heatmap_figure(part: Part, title: str, xlabel: str, ylabel: str):
    import matplotlib.pyplot as plt

    from helpers import plots

    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN - 0.6, 2.9))  # the colour bar and labels take the rest of the column
    plots.cka_heatmap(part.full, ax=ax, title=title, xlabel=xlabel, ylabel=ylabel)
    ax.title.set_fontsize(8)
    return fig


def matched_depth_figure(results: dict, settings: Settings):
    """Top: the layer of A that best matches each layer of B. Bottom: that CKA, with its interval."""
    import matplotlib.pyplot as plt

    m = matched_depth(results["parts"]["cross"])
    x = np.arange(len(m["b_layer"]))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(FIGURE_WIDTH_IN, 3.6), sharex=True)
    top.plot(x, m["a_index"], "o-", color="#0072B2", ms=3, label="all tokens")
    if "cross_head" in results["parts"]:
        top.plot(x, results["parts"]["cross_head"].full.values.argmax(axis=0), "s-", color="#009E73", ms=3,
                 label="classifier reading")
        top.legend(fontsize=6, frameon=False)
    rows = results["parts"]["cross"].full.rows
    top.set_yticks(range(len(rows)))
    top.set_yticklabels(rows, fontsize=6)
    top.set(ylabel=f"best layer of A\n({settings.model_a})", title="Matched depth", ylim=(-0.5, len(rows) - 0.5))
    errors = np.abs(np.stack([m["cka"] - m["ci_low"], m["ci_high"] - m["cka"]]))
    bottom.errorbar(x, m["cka"], yerr=None if np.isnan(errors).all() else errors, fmt="o-", color="#D55E00", ms=3, capsize=2,
                    label="all tokens")
    parts = results["parts"]
    if "cross_head" in parts:
        bottom.plot(x, parts["cross_head"].full.values.max(axis=0), "s-", color="#009E73", ms=3, label="classifier reading")
        bottom.plot(x, parts["twin_cross"].full.values.max(axis=0), "o--", color="#D55E00", alpha=0.5, ms=2,
                    label="untrained twins, all tokens")
        bottom.plot(x, parts["twin_cross_head"].full.values.max(axis=0), "s--", color="#009E73", alpha=0.5, ms=2,
                    label="untrained twins, classifier reading")
        bottom.legend(fontsize=5, frameon=False, loc="lower left")
    bottom.set(ylabel="CKA at the match", xlabel=f"layer of B ({settings.model_b})", ylim=(0, 1.02))
    bottom.set_xticks(x)
    bottom.set_xticklabels(m["b_layer"], rotation=90, fontsize=6)
    for ax in (top, bottom):
        ax.title.set_fontsize(9)
    return fig


def _label_curve(part: Part):
    """(relative depth, cka, error bars or None) of a label-CKA part."""
    v, lo, hi = part.interval()
    n = len(part.full.rows)
    err = np.abs(np.stack([v[:, 0] - lo[:, 0], hi[:, 0] - v[:, 0]]))
    return np.arange(n) / max(1, n - 1), v[:, 0], None if np.isnan(err).all() else err


def label_cka_figure(results: dict, settings: Settings):
    """CKA of each layer with the class labels on a relative-depth axis, with intervals: the classifier reading
    (top) and all tokens (bottom), each model beside its untrained twin (dashed, the floor)."""
    import matplotlib.pyplot as plt

    parts = results["parts"]
    fig, axes = plt.subplots(2, 1, figsize=(FIGURE_WIDTH_IN, 4.4), sharex=True)
    for ax, (reading, x) in zip(axes, (("head", "_head"), ("tokens", ""))):
        for w, colour, marker in (("a", "#0072B2", "o"), ("b", "#D55E00", "s")):
            depth, cka, err = _label_curve(parts[f"labels_{w}{x}"])
            name = f"{getattr(settings, f'model_{w}')} ({results['readings'][w][reading]})"
            ax.errorbar(depth, cka, yerr=err, fmt=marker + "-", ms=3, capsize=2, color=colour, label=name)
            depth, cka, _ = _label_curve(parts[f"twin_labels_{w}{x}"])
            ax.plot(depth, cka, marker + "--", ms=2, color=colour, alpha=0.5, label=f"untrained twin of {w.upper()}")
        ax.set(ylabel="CKA with class labels", ylim=(0, 1.02), title=f"Class information by depth: {READING_LABEL[reading]}")
        ax.title.set_fontsize(9)
        ax.legend(fontsize=6, frameon=False)
    axes[-1].set(xlabel="relative depth (first layer 0, last 1)")
    return fig


def receptive_field_figure(results: dict, settings: Settings):
    """The radius holding half of each layer's receptive field, both models on a relative-depth axis."""
    import matplotlib.pyplot as plt

    c = curves(results)
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN, 2.4))
    for w, colour, marker in (("a", "#0072B2", "o"), ("b", "#D55E00", "s")):
        if f"receptive_field_{w}" in c:
            curve = c[f"receptive_field_{w}"]
            ax.plot(curve["relative_depth"], curve["radius_50_px"], marker + "-", ms=3, color=colour,
                    label=getattr(settings, f"model_{w}"))
            uniform = curve["uniform_image_px"][0]
    ax.axhline(uniform, ls="--", color="0.4", lw=1, label=f"a field spread over the whole image ({uniform:.1f} px)")
    ax.set(xlabel="relative depth (first layer 0, last 1)", ylabel="50%-mass radius (px)",
           title="Effective receptive field by depth")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7, frameon=False)
    return fig


def attention_figure(att: dict, name: str):
    """Mean attention distance of every head by block, with the uniform-attention reference."""
    import matplotlib.pyplot as plt

    d = att["distances"]
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN, 2.4))
    for h in range(d.shape[1]):
        ax.plot(np.arange(d.shape[0]), d[:, h], "o", ms=3, color="#0072B2", alpha=0.8)
    ax.axhline(att["uniform"], ls="--", color="0.4", lw=1, label=f"uniform attention ({att['uniform']:.1f} px)")
    ax.set(xlabel="block", ylabel="mean attention distance (px)", title=f"{name}: attention distance per head")
    ax.set_xticks(np.arange(d.shape[0]))
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7, frameon=False)
    return fig


def figures(results: dict, settings: Settings) -> dict:
    """{file name: matplotlib figure} of every figure of the report."""
    parts, A, B = results["parts"], settings.model_a, settings.model_b
    figs = {"within_a": heatmap_figure(parts["within_a"], f"{A}: CKA between its layers", "layer", "layer"),
            "within_b": heatmap_figure(parts["within_b"], f"{B}: CKA between its layers", "layer", "layer"),
            "cross": heatmap_figure(parts["cross"], f"{A} vs {B}: {_reading_names(results, 'tokens')}", f"layer of B ({B})",
                                    f"layer of A ({A})"),
            "cross_head": heatmap_figure(parts["cross_head"], f"{A} vs {B}: {_reading_names(results, 'head')}",
                                         f"layer of B ({B})", f"layer of A ({A})"),
            "matched_depth": matched_depth_figure(results, settings)}
    if results["has_labels"]:
        figs["label_cka"] = label_cka_figure(results, settings)
    if any(f"receptive_field_{w}" in curves(results) for w in ("a", "b")):
        figs["receptive_fields"] = receptive_field_figure(results, settings)
    for w in ("a", "b"):
        if results["attention"][w] is not None:
            figs[f"attention_distance_{w}"] = attention_figure(results["attention"][w], getattr(settings, f"model_{w}"))
    return figs


# --------------------------------------------------------------------------- words computed from the numbers


def _v(value, low, high) -> str:
    """'0.62 [0.58, 0.66]', or '0.62' without an interval."""
    if np.isnan(low):
        return f"{float(value):.2f}"
    return f"{float(value):.2f} [{float(low):.2f}, {float(high):.2f}]"


READING_LABEL = {"head": "classifier reading", "tokens": "all-token reading"}


def _reading_names(results: dict, reading: str) -> str:
    """'classifier reading (A: cls, B: mean)'."""
    pol = results["readings"]
    return f"{READING_LABEL[reading]} (A: {pol['a'][reading]}, B: {pol['b'][reading]})"


def summary_sentences(results: dict, settings: Settings) -> list:
    """The summary, one computed sentence per item (SUMMARY.md)."""
    parts, A, B = results["parts"], settings.model_a, settings.model_b
    s, R = [], settings.repeats
    iv = (f"{settings.level:.0%} intervals from {R} disjoint subsamples of {results['n_images'] // R} images each"
          if R else "no intervals (--repeats 0)")
    s.append(f"All numbers come from {results['n_images']} images of '{results['images_name']}', minibatches of "
             f"{settings.batch_size}; brackets are {iv} (image sampling only, not other training runs).")
    from helpers import report_controls as rc

    uni = {w: parts[f"within_{w}"].interval_of(mean_off_diagonal) for w in ("a", "b")}
    s.append(f"Mean CKA between different layers of the same model ({_reading_names(results, 'tokens')}): {A} "
             f"{_v(*uni['a'])}, {B} {_v(*uni['b'])} (a description of each model, not a comparison: no order is claimed).")
    s.append(f"The untrained twins (the same architectures with random weights, seed {settings.seed}) are the floor of "
             "every comparison below; " + ("the reference checkpoints give the run-to-run spread." if "ref_cross" in parts
                                          else "no reference checkpoints were given (--reference-a/-b), so the only noise "
                                               "is the image sampling, not a second training run."))
    for r in rc.READINGS:
        x = rc.suffix(r)
        cross = parts[f"cross{x}"]
        values, low, high = cross.interval()
        rows, cols = cross.full.rows, cross.full.cols
        i, j = np.unravel_index(values.argmax(), values.shape)
        twin = parts[f"twin_cross{x}"].full.values
        s.append(f"Cross-model CKA under the {_reading_names(results, r)}: first layers ({rows[0]}, {cols[0]}) "
                 f"{_v(values[0, 0], low[0, 0], high[0, 0])} (untrained twins {twin[0, 0]:.2f}); last layers ({rows[-1]}, "
                 f"{cols[-1]}) {_v(values[-1, -1], low[-1, -1], high[-1, -1])} (twins {twin[-1, -1]:.2f}); the most similar "
                 f"pair is {rows[i]} with {cols[j]}, {_v(values[i, j], low[i, j], high[i, j])} (twins {twin[i, j]:.2f}).")
    judgements = rc.judged(parts, results["has_labels"], settings.level)
    last = {"a": parts["cross"].full.rows[-1], "b": parts["cross"].full.cols[-1]}
    s += rc.sentences(judgements, A, B, last)
    from helpers.report_audit import flags, last_layer_flag

    flag = last_layer_flag(parts, results["has_labels"], {"a": A, "b": B}, results["readings"])
    s += ([flag] if flag else []) + flags(parts, results["has_labels"], {"a": A, "b": B}, results["readings"])
    if results["has_labels"]:
        for w, name in (("a", A), ("b", B)):
            for r in rc.READINGS:
                p = parts[f"labels_{w}{rc.suffix(r)}"]
                k = int(p.full.values[:, 0].argmax())
                twin = parts[f"twin_labels_{w}{rc.suffix(r)}"].full.values[k, 0]
                s.append(f"In {name} under the {READING_LABEL[r]} ({results['readings'][w][r]}), the class labels are most "
                         f"visible at {p.full.rows[k]} (layer {k + 1} of {len(p.full.rows)}, CKA "
                         f"{_v(*(x[k, 0] for x in p.interval()))}; untrained twin {twin:.2f}).")
    else:
        s.append("The images have no class labels, so CKA with the labels is not computed.")
    for w, name in (("a", A), ("b", B)):
        rf = results.get("receptive_fields", {}).get(w)
        if not rf or "error" in rf:
            s.append(f"Receptive fields of {name}: not computed ({(rf or {}).get('error', 'not asked for')}).")
            continue
        r = rf["radius_px"]
        s.append(f"Half of the receptive field of {name} lies within {r[0]:.1f} px of its centre at the first recorded "
                 f"layer ({rf['layers'][0]}) and within {r[-1]:.1f} px at the last ({rf['layers'][-1]}); a field spread "
                 f"over the whole image would need {rf['uniform_px']:.1f} px (first {rf['n_images']} images, one "
                 "reading without an interval).")
    for w, name in (("a", A), ("b", B)):
        att = results["attention"][w]
        if att is None:
            why = "it has no attention layers" if not results["attention_exists"][w] else f"not asked for: --attention {settings.attention}"
            s.append(f"Attention distances of {name}: not applicable ({why}).")
            continue
        d, u = att["distances"], att["uniform"]
        local = int((d < u / 2).sum())
        s.append(f"In {name} the mean attention distance over heads is {d[0].mean():.1f} px in the first block and "
                 f"{d[-1].mean():.1f} px in the last (a uniform head: {u:.1f} px); {local} of {d.size} heads attend "
                 f"within half the uniform distance (first {att['n_images']} images).")
    return s


def _weights(name: str, path=None) -> str:
    """Where a model's weights come from, in words, for METHODS.md: a local file (with its SHA-256), a lite-zoo
    member, or a published timm tag."""
    if path is not None:
        heads = models.file_head_classes(name, path)
        head = f"its own {heads}-class classifier head kept" if heads else "no classifier head in the file"
        return (f"timm architecture '{name.split('.')[0]}' with the weights of the local file {Path(path).name} "
                f"(SHA-256 {file_sha256(path)}; {head}), not published pretrained weights")
    if name in zoo.ZOO:
        try:
            card = models.lite_card(name)
        except FileNotFoundError:
            return f"the course's lite model '{name}' (helpers/zoo.py recipe; no model card found)"
        acc = card.get("test_accuracy")
        acc_text = f", test accuracy {acc:.3f} on {card.get('test_images', '?')} held-out shapes images" if acc else ""
        return (f"the course's lite model '{name}' ({card.get('architecture', 'timm model')}, "
                f"{card.get('parameters', 0):,} parameters, trained by `{card.get('command', 'helpers.train')}`"
                f"{acc_text}; weights data/models/{name}.safetensors)")
    if "." in name:
        return f"timm model '{name}' with its published pretrained weights (tag '{name.split('.', 1)[1]}')"
    return f"timm model '{name}' with timm's default published pretrained weights for that architecture"


def versions() -> dict:
    import matplotlib
    import timm
    import torch

    import subprocess

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent, timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    return {"python": platform.python_version(), "torch": torch.__version__, "timm": timm.__version__,
            "numpy": np.__version__, "matplotlib": matplotlib.__version__, "course_commit": commit}


POLICY_WORDS = {"all": "every token (or spatial position) flattened into one vector per image",
                "cls": "the class (CLS) token only", "spatial": "the patch tokens only, flattened",
                "mean": "the average over tokens (or spatial positions)"}


def command_line(settings: Settings) -> str:
    """The command that reproduces this report."""
    s, d = settings, Settings()
    parts = ["python -m helpers.report", s.model_a, s.model_b, "--images", s.images, "--count", str(s.count or 0)]
    for key in ("layers_a", "layers_b", "policy_a", "policy_b", "batch_size", "repeats", "level", "attention",
                "attention_count", "seed", "threads", "weights_a", "weights_b", "reference_a", "reference_b"):
        if getattr(s, key) != getattr(d, key):
            parts += [f"--{key.replace('_', '-')}", str(getattr(s, key))]
    return " ".join(parts + ["--out", shown_path(s.out)])


def _layer_list(resolved: dict) -> str:
    """'block0 = blocks.0, ...' (label = module) from a CKAMatrix's resolved layers; the module alone when they agree."""
    return ", ".join(label if label == module else f"{label} = {module}" for label, module in resolved.items())


def methods_text(results: dict, settings: Settings) -> str:
    """METHODS.md: a paragraph to paste into an appendix, the settings in brief, and the references."""
    s, parts, v = settings, results["parts"], versions()
    res = {w: parts["cross"].full.meta.get(f"resolved_layers_{w}", {}) for w in ("a", "b")}
    n, R = results["n_images"], s.repeats
    labels = "with class labels" if results["has_labels"] else "without class labels"
    paragraph = (
        f"We compared the internal representations of {s.model_a} (model A: {_weights(s.model_a, s.weights_a)}) and {s.model_b} "
        f"(model B: {_weights(s.model_b, s.weights_b)}) with linear centred kernel alignment (CKA; Kornblith et al., 2019), following "
        f"Raghu et al. (2021). Both models saw the same {n} images from '{results['images_name']}' ({labels}), each "
        f"preprocessed with the model's own configuration (timm's resolve_data_config: resize, crop, mean and standard "
        f"deviation). We recorded {len(res['a'])} layers of A ('{s.layers_a}': {_layer_list(res['a'])}) and {len(res['b'])} "
        f"layers of B ('{s.layers_b}': {_layer_list(res['b'])}). Token policy: for A, {POLICY_WORDS[s.policy_a]}; for B, "
        f"{POLICY_WORDS[s.policy_b]}. Every cross-model and label comparison was also made under each model's classifier "
        f"reading (what its classification head reads; A: {POLICY_WORDS[results['readings']['a']['head']]}; B: "
        f"{POLICY_WORDS[results['readings']['b']['head']]}), and on the untrained twin of each model (the same "
        f"architecture, random initialisation, seed {s.seed} for A and {s.seed + 1} for B) as a floor"
        + (f"; reference checkpoints ({', '.join(_weights(getattr(s, 'model_' + w), getattr(s, 'reference_' + w)) for w in 'ab' if getattr(s, 'reference_' + w))}) "
           "give the run-to-run spread" if s.reference_a or s.reference_b else "") +
        f". A comparison is stated only when both readings get the same verdict under the course's rule (effect against "
        f"max(interval, run-to-run spread), and against the untrained twins). CKA was estimated with the minibatch estimator of Nguyen et al. (2021): unbiased "
        f"HSIC per minibatch of {s.batch_size} images, summed over minibatches (each weighted by m(m-3)) before the "
        f"normalisation, so that no activations are stored. We report CKA between the layers of each model, between "
        f"every layer of A and every layer of B, the matched depth (for each layer of B, the layer of A with the highest "
        f"CKA)")
    if results["has_labels"]:
        paragraph += ", and the CKA of each layer with the one-hot class labels"
    paragraph += "."
    if any(a is not None for a in results["attention"].values()):
        n_att = next(a["n_images"] for a in results["attention"].values() if a is not None)
        paragraph += (f" For models with attention, the mean attention distance of each head (in pixels, patch tokens "
                      f"only, attention renormalised over patch keys) is averaged over the first {n_att} images.")
    fields = [f for f in results.get("receptive_fields", {}).values() if f and "error" not in f]
    if fields:
        paragraph += (f" Effective receptive fields (as in Raghu et al., 2021, Fig. 6): the absolute gradient of each "
                      f"layer's output at its centre location (summed over channels) with respect to the input, "
                      f"averaged over the first {fields[0]['n_images']} images, summarised by the radius around its "
                      f"centre of mass that holds half of the gradient.")
    if R:
        paragraph += (
            f" Intervals ({s.level:.0%}) come from {R} disjoint random subsamples of {n // R} images (seed {s.seed}): "
            f"the value on all {n} images plus or minus t({R - 1}) times the standard deviation of the {R} subsample values "
            f"divided by sqrt({R}). The spread is that of the subsample estimator (CKA on {n // R} images), rescaled to "
            f"{n} images on the assumption that its variance falls as one over the number of images; the intervals "
            f"describe the sampling of images only, not differences between training runs, and their coverage was "
            f"checked on synthetic data (tests/test_intervals.py). Raghu et al. (2021) averaged 20 repeats.")
    else:
        paragraph += " No intervals were computed (--repeats 0)."
    paragraph += (" An image-statistics audit gives, for each recorded layer under both readings, its CKA with each "
                  "image's mean brightness and with its per-channel colour means (pixel values with the model's "
                  "normalisation undone), and the share of its variance along the top principal component (per "
                  "minibatch, averaged); layers whose CKA with these statistics is at least their CKA with the labels "
                  "are flagged in the summary.")
    paragraph += (f" Software: Python {v['python']}, PyTorch {v['torch']}, timm {v['timm']}, NumPy {v['numpy']}, "
                  f"Matplotlib {v['matplotlib']}, course helpers at commit {v['course_commit']}.")
    refs = "\n".join(f"- {r}" for r in references(results, settings))
    return (f"# Methods\n\n{paragraph}\n\nReproduce with:\n\n```\n{command_line(settings)}\n```\n\n"
            f"Every setting is in settings.json.\n\n## References\n\n{refs}\n")


# --------------------------------------------------------------------------- the bundle


def settings_record(results: dict, settings: Settings) -> dict:
    """settings.json: every setting, what the presets resolved to, the software versions."""
    parts = results["parts"]
    return {"settings": asdict(settings), "fingerprint": settings.fingerprint(), "command": command_line(settings),
            "n_images": results["n_images"], "images": results["images_name"], "has_labels": results["has_labels"],
            "subsample_size": results["n_images"] // settings.repeats if settings.repeats else None,
            "resolved_layers_a": parts["cross"].full.meta.get("resolved_layers_a"),
            "resolved_layers_b": parts["cross"].full.meta.get("resolved_layers_b"),
            "estimator": parts["cross"].full.estimator, "interval": "full value +- t * sd(subsamples) / sqrt(R) (helpers.intervals)",
            "attention_distances": {w: results["plan"][w] for w in ("a", "b")},
            "model_classes": results["model_classes"],
            "weights": {"a": _weights(settings.model_a, settings.weights_a), "b": _weights(settings.model_b, settings.weights_b)},
            "readings": results["readings"],
            "versions": versions()}


OUTPUT_NAMES = tuple(f"{prefix}{name}{x}" for prefix in ("", "twin_", "ref_") for x in ("", "_head")
                     for name in ("cross", "labels_a", "labels_b", "stats_a", "stats_b")) + (
    "within_a", "within_b", "matched_depth", "label_cka", "label_cka_a", "label_cka_b", "cross_head",
    "attention_distance_a", "attention_distance_b", "receptive_fields", "receptive_field_a", "receptive_field_b")


def remove_old_outputs(out: Path) -> None:
    """Delete figures and tables an earlier run wrote (only the report's own file names), so none is left stale."""
    for folder in (out / "figures", out / "tables"):
        for path in folder.glob("*"):
            if path.stem in OUTPUT_NAMES and path.suffix in (".png", ".pdf", ".svg", ".csv", ".npz"):
                path.unlink()


def write_bundle(results: dict, settings: Settings) -> list:
    """Write figures/, tables/, settings.json, METHODS.md and SUMMARY.md into settings.out; returns the paths."""
    import matplotlib.pyplot as plt

    out = Path(settings.out)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    remove_old_outputs(out)
    written = []
    for part in results["parts"].values():
        written += write_matrix_tables(part, out / "tables")
    for name, columns in curves(results).items():
        written += write_curve_tables(name, columns, out / "tables")
    names = []
    for name, fig in figures(results, settings).items():
        written += _save(fig, name, out / "figures")
        names.append(name)
        plt.close(fig)
    (out / "settings.json").write_text(json.dumps(settings_record(results, settings), indent=2, default=str))
    (out / "METHODS.md").write_text(methods_text(results, settings))
    from helpers.report_controls import readings_table
    from helpers.report_pages import captions_markdown, overview_html

    lines = summary_sentences(results, settings)
    summary = "\n".join(f"- {line}" for line in lines)
    table = readings_table(results["parts"], results["has_labels"], settings.model_a, settings.model_b, settings.level)
    (out / "SUMMARY.md").write_text(f"# Summary: {settings.model_a} vs {settings.model_b}\n\n{summary}\n\n"
                                    f"## Both readings beside their untrained twins\n\nValues ± half-widths of "
                                    f"{settings.level:.0%} intervals from the disjoint subsamples.\n\n{table}\n")
    (out / "CAPTIONS.md").write_text(captions_markdown(results, settings, names))
    (out / "overview.html").write_text(overview_html(results, settings, lines, table, names))
    return written + [out / name for name in ("settings.json", "METHODS.md", "SUMMARY.md", "CAPTIONS.md", "overview.html")]


def run(settings: Settings, progress: bool = True) -> dict:
    """Load, compute (resuming from <out>/cache) and write the bundle; returns the results, with 'files'."""
    start = time.time()
    model_a, model_b, images, plan = load_inputs(settings)
    results = compute(settings, model_a, model_b, images, plan, progress=progress)
    results["files"] = write_bundle(results, settings)
    results["seconds"] = round(time.time() - start, 1)
    return results


def main(argv=None) -> int:
    """The command line (python -m helpers.report --help). Returns the exit status: 0, or 2 on bad input."""
    settings = settings_from_args(argv)
    try:
        results = run(settings)
    except ReportError as error:
        print(f"helpers.report: error: {error}", file=sys.stderr)
        return 2
    loaded = [line for line in results["log"] if "loaded" in line]
    if loaded:
        print(f"Resumed: {len(loaded)} finished part(s) loaded from {Path(settings.out) / 'cache'}, not recomputed.")
    for line in results["log"]:
        if "recomputed" in line:
            print(f"Note: {line}")
    print(f"Wrote {len(results['files'])} files to {settings.out} in {results['seconds']} s "
          "(overview.html, figures/, tables/, settings.json, METHODS.md, SUMMARY.md, CAPTIONS.md).")
    print((Path(settings.out) / "SUMMARY.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
