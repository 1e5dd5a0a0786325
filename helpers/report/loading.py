"""Stage 2 of the report: the two models (with local weights when given), their untrained twins and references,
and the images, all checked before anything is computed."""

from __future__ import annotations

import os

from helpers import models
from helpers.report.distributed import main_first, world
from helpers.report.settings import ReportError, Settings


def load_model(name: str, which: str, weights=None):
    """A model by name (helpers.models.load, which suggests close names on a typo), with the weights of a local
    file when given (its classifier head kept); errors name the argument."""
    try:
        return models.load(name) if weights is None else models.load(name, weights=weights)
    except (ValueError, FileNotFoundError, TypeError, models.WeightsUnavailableError) as error:
        raise ReportError(f"Model {which} ('{name}'): {error}") from None


def check_layers_and_policy(settings: Settings, which: str, model) -> None:
    """--layers-X resolves in model X (names exist, none twice), and --policy-X cls needs a CLS token: checked
    before any part is computed, the error naming the option."""
    from helpers.capture import resolve
    from helpers.report.settings import layers_arg

    name, layers, policy = (getattr(settings, f"{key}_{which}") for key in ("model", "layers", "policy"))
    try:
        resolve(model, layers_arg(layers) if isinstance(layers, str) else layers)
    except (ValueError, TypeError) as error:
        raise ReportError(f"--layers-{which} {layers}: {error}") from None
    if policy == "cls" and not getattr(model, "num_prefix_tokens", 0):
        raise ReportError(f"--policy-{which} cls: model {which.upper()} ('{name}', {type(model).__name__}) has no CLS "
                          "token. Use all, spatial or mean.")


def load_images(settings: Settings):
    """The image set of --images/--count; an empty or missing folder is a ReportError that says what to do."""
    from helpers.data import image_set

    if settings.count is not None and settings.count < 4:
        raise ReportError(f"--count {settings.count}: CKA needs at least 4 images (use 500+ for stable values).")
    try:
        images = image_set(settings.images, count=settings.count)
    except (ValueError, FileNotFoundError, RuntimeError, TypeError, PermissionError) as error:
        raise ReportError(f"--images {settings.images}: {error}") from None
    if images.labels is not None:  # labels that cannot give a label CKA: found here, not when it divides by 0
        from helpers.compare import class_indices

        try:
            class_indices(images)
        except ValueError as error:
            raise ReportError(f"--images {settings.images}: {error} Or give a folder with at least two class "
                              "subfolders (images straight in the folder, with no subfolders, have no labels).") from None
    return images


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
    # numpy's generators take no negative seed, and torch none of 2**63 or more (the draws use --seed .. --seed + 4):
    # either failed only after the CKA parts
    if not 0 <= settings.seed < 2 ** 32:
        raise ReportError(f"--seed {settings.seed}: give a whole number from 0 to {2 ** 32 - 1} (the default is 0).")
    if settings.threads < 0:
        raise ReportError(f"--threads {settings.threads}: give 0 (auto) or a number of CPU threads, e.g. 2.")
    cores = os.cpu_count() or 1
    if settings.threads > cores:  # more threads than cores only slow torch down; 100,000 ran OpenMP out of memory
        raise ReportError(f"--threads {settings.threads}: this machine has {cores} CPU core(s). Give 0 (auto) or at most "
                          f"{cores}.")
    if settings.attention_count < 1:  # checked here, not after every CKA part has run
        raise ReportError(f"--attention-count {settings.attention_count}: attention distances need at least 1 image "
                          "(the default is 256); to leave them out, use --attention none.")
    model_a, model_b = load_model(settings.model_a, "A", settings.weights_a), load_model(settings.model_b, "B", settings.weights_b)
    for which, model in (("a", model_a), ("b", model_b)):  # both failed mid-run, naming model A for either
        check_layers_and_policy(settings, which, model)
    plan = attention_plan(settings, model_a, model_b)
    # under torchrun process 0 downloads and extracts the images alone, then the others read its folder
    images = main_first(world(), lambda: load_images(settings), f"Loading --images {settings.images}")
    return model_a, model_b, images, plan


MIN_PER_SUBSAMPLE = 20  # images in each disjoint subsample of an interval, at least
MIN_REPEATS = 3         # subsamples an interval needs, at least (with 2, t(1) = 6.3 makes it nearly useless)


def fitted_repeats(asked: int, n_images: int) -> int:
    """The subsamples the report uses for `asked` (--repeats) on n_images: as many as asked, but each of at least
    MIN_PER_SUBSAMPLE images; when that means fewer than asked and fewer than MIN_REPEATS, 0 (no intervals).
    20 asked: 2,048 images give 20 subsamples of 102, 60 images 3 of 20, 59 images none."""
    if not asked:
        return 0
    repeats = min(asked, n_images // MIN_PER_SUBSAMPLE)
    return repeats if repeats == asked or repeats >= MIN_REPEATS else 0


def control_models(settings: Settings, model_a, model_b) -> dict:
    """{'twin': (A's untrained twin, B's), 'ref': (reference of A or A, reference of B or B)}; 'ref' only when a
    --reference is given. The twins are the first untrained draw (helpers.report.floor): both architectures built
    right after torch.manual_seed(--seed)."""
    from helpers.report.floor import draw_models

    out = {"twin": draw_models(settings, model_a, model_b, settings.seed)}
    if settings.reference_a or settings.reference_b:
        out["ref"] = (load_model(settings.model_a, "A (--reference-a)", settings.reference_a) if settings.reference_a else model_a,
                      load_model(settings.model_b, "B (--reference-b)", settings.reference_b) if settings.reference_b else model_b)
    return out
