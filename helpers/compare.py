"""Compare the layers of two models (or of one model with itself) over many images with CKA.

    result = cka_matrix("lite-vit", image_set("shapes", count=2048), "sublayers")        # within a model
    result = cka_matrix(vit, images, "blocks", model_b=resnet, layers_b="blocks")       # across models
    plots.cka_heatmap(result); result.save("outputs/vit_vs_resnet.npz")
    label_cka(vit, images, "blocks", policy="cls")        # how much class structure each layer holds
    within_class_cka(resnet, vit, images, "blocks", "blocks", "mean", "cls")  # what is shared beyond the class

Per batch: one forward pass per model; inside each hook the layer's activations become the
Gram of their column-centered rows (float32) at once, so activations are never kept; the
accumulator takes every pair's unbiased HSIC from one matrix product and sums in float64.
Activations never outlive their batch. The Grams of a model on a set of images are kept (up to
helpers.gram_cache.MAX_BYTES in all), so a second comparison of the same model on the same images,
with another model or with the class labels, does not run it again.
"""

from __future__ import annotations

import itertools
import time
from contextlib import ExitStack, nullcontext

import numpy as np
import torch
from tqdm.auto import tqdm

from helpers import models
from helpers.autocast import dtype_name, forward_dtype, guarded
from helpers.attention import attention_of_heads
from helpers.capture import Capture, is_vit
from helpers.data import ImageSet, batches
from helpers.gram_cache import MIN_BATCH, BatchGrams
from helpers.guards import check_batch_size, check_images, check_int, check_model, evaluating
from helpers.minibatch_cka import CKAMatrix, MinibatchCKA, centered_gram


def _gram_of_rows(rows: torch.Tensor) -> torch.Tensor:
    """(B, p) activations (any float dtype) -> (B, B) float32 Gram of centered rows.

    Autocast is switched off here: on CUDA the forward passes run in float16 (helpers.autocast), but
    a half-precision Gram (11- or 8-bit mantissa) would lose the digits CKA needs.
    """
    with torch.autocast(rows.device.type, enabled=False):
        return centered_gram(rows.float())


def _model(model, name: str) -> torch.nn.Module:
    """A model argument: a name is loaded (helpers.models.load), a module is checked and used as it is."""
    return models.load(model) if isinstance(model, str) else check_model(model, name)


def _label(model) -> str:
    return model if isinstance(model, str) else type(model).__name__


def _gram_capture(model, layers, policy, which: str = "") -> Capture:
    """A Capture that turns each layer into its Gram; a bad layer or policy names the argument
    (layers_a / policy_b ... for `which` "a" or "b", plain layers / policy otherwise)."""
    try:
        return Capture(model, layers, policy, transform=_gram_of_rows)
    except (ValueError, TypeError) as error:
        suffix = f"_{which}" if which else ""
        where = f"Model {which.upper()} (" if which else "("
        raise type(error)(f"{where}layers{suffix}={layers!r}, policy{suffix}={policy!r}): {error}") from None


def _too_small(n: int) -> bool:
    """True, with a printed note, for a last batch of 1-3 images: it cannot give an unbiased estimate.

    The same rule as BatchGrams' batch count (gram_cache.MIN_BATCH), so cached and fresh runs skip alike."""
    if n < MIN_BATCH:
        print(f"Note: the last {n} image(s) were skipped (a batch needs at least {MIN_BATCH}).")
    return n < MIN_BATCH


def _skipped(n_images: int, batch_size: int) -> int:
    """How many images the last batch leaves out (1-3, with the same note as _too_small), else 0."""
    last = n_images % batch_size
    return last if last and _too_small(last) else 0


def _resolved(capture: Capture) -> dict:
    """{label: module name (":input" for a module's input)}: what was actually recorded, for .meta."""
    return {t.label: t.module + (":input" if t.where == "input" else "") for t in capture.taps}


def _check_enough(images: ImageSet) -> None:
    if len(images) < 4:
        raise ValueError(f"{len(images)} images are too few: unbiased HSIC needs at least 4 (use 1,000+ for stable values).")


def cka_matrix(model_a, images: ImageSet, layers_a="blocks", model_b=None, layers_b=None,
               policy_a: str = "all", policy_b: str | None = None, batch_size: int = 256,
               amp=None, progress: bool = True, meta: dict | None = None) -> CKAMatrix:
    """Minibatch linear CKA between every layer of model A and every layer of model B.

    model_a, model_b: torch modules or names for helpers.models.load; model_b=None compares A with itself.
    images: a helpers.data.ImageSet; each model gets the images preprocessed its own way, in the same order.
    layers_a, layers_b: a preset ("blocks", "sublayers"), module names or glob patterns (helpers.capture).
    policy_a, policy_b: token policies ("all", "cls", "spatial", "mean"); policy_b defaults to policy_a.
    batch_size: images per minibatch (the paper used 1024; 128-256 give the same values, less memory).
        When it does not divide the number of images, the last, smaller batch counts in
        proportion to its size (helpers.minibatch_cka); a last batch of 1-3 images is skipped, with a note.
    amp: on CUDA the forward passes run under float16 autocast unless amp=False or COURSE_AUTOCAST=off
        ("bf16" for bfloat16; helpers.autocast); Grams stay float32, sums float64. .meta["amp"] says
        whether it really ran (never on the CPU), .meta["amp_dtype"] in which type.
    Models come back in the mode (train or eval) they came in; the analysis runs in eval mode.
    Returns a CKAMatrix: rows = A's layers, columns = B's layers, with what produced it in .meta.
    """
    accumulator, info = cka_state(model_a, images, layers_a, model_b, layers_b, policy_a, policy_b, batch_size,
                                  amp, progress, meta)
    return accumulator.result(info)


def cka_state(model_a, images: ImageSet, layers_a="blocks", model_b=None, layers_b=None,
              policy_a: str = "all", policy_b: str | None = None, batch_size: int = 256,
              amp=None, progress: bool = True, meta: dict | None = None) -> tuple:
    """cka_matrix's sums before they become CKA: (MinibatchCKA, meta dict); arguments as cka_matrix.

    For one shard of the images in a group of processes (helpers.report.distributed): the accumulators
    of the shards are summed (MinibatchCKA.all_reduce) and only the sum is turned into CKA, .result(meta).
    """
    start = time.time()
    check_images(images)
    batch_size = check_batch_size(batch_size)
    _check_enough(images)
    names = {"a": _label(model_a), "b": None if model_b is None else _label(model_b)}
    model_a = _model(model_a, "model_a")
    within = model_b is None
    if within and layers_b is not None:
        raise ValueError("layers_b is given but model_b is not: pass model_b=... to compare two models.")
    model_b = None if within else _model(model_b, "model_b")
    policy_b = policy_a if policy_b is None else policy_b

    capture_a = _gram_capture(model_a, layers_a, policy_a, "a")
    layers_b = layers_a if within else ("blocks" if layers_b is None else layers_b)  # what really runs, for .meta
    capture_b = None if within else _gram_capture(model_b, layers_b, policy_b, "b")
    accumulator = MinibatchCKA(capture_a.labels, None if within else capture_b.labels)
    device = next(model_a.parameters()).device
    dtype = forward_dtype(device, amp)  # None on the CPU

    # Grams already computed for the same model, layers and images are reused (helpers.gram_cache)
    with evaluating(model_a), (nullcontext() if within else evaluating(model_b)):
        grams_a = BatchGrams(model_a, images, capture_a, batch_size, dtype)  # forwards under autocast, Grams float32
        grams_b = None if within else BatchGrams(model_b, images, capture_b, batch_size, dtype)
        skipped = _skipped(len(images), batch_size)
        with ExitStack() as stack:
            for context in (torch.no_grad(), capture_a) + (() if within else (capture_b,)):
                stack.enter_context(context)
            for g_a, g_b in tqdm(zip(grams_a, itertools.repeat(None) if within else grams_b), total=len(grams_a), desc="CKA",
                                 disable=not progress):
                accumulator.update_grams(g_a, g_b)

    info = {"model_a": names["a"], "model_b": names["b"] or names["a"], "layers_a": str(layers_a),
            "layers_b": str(layers_b), "policy_a": policy_a, "policy_b": policy_b,
            "resolved_layers_a": _resolved(capture_a), "resolved_layers_b": _resolved(capture_b or capture_a),
            "images": images.name, "n_images_skipped": skipped, "batch_size": batch_size, "device": str(device),
            "amp": dtype is not None, "amp_dtype": dtype_name(dtype), "amp_requested": amp,
            "seconds": round(time.time() - start, 2), **(meta or {})}
    return accumulator, info


def head_groups_cka(vit, cnn, images: ImageSet, head_groups: dict, cnn_layers, block: int = 0,
                    batch_size: int = 256, progress: bool = False, amp=None) -> CKAMatrix:
    """Minibatch linear CKA between groups of one ViT block's attention heads and CNN layers (F3, Fig. 5).

    head_groups: {label: [head indices]}; a group's representation is its heads' outputs
    softmax(q k^T) v before the output projection, patch tokens only (CLS left out), flattened
    per image: (B, patches * heads_in_group * head_dim).
    cnn_layers: names, globs or a preset for helpers.capture (each flattened per image).
    amp: forwards under autocast on CUDA, as in cka_matrix.
    Returns a CKAMatrix: rows = head groups, columns = CNN layers.
    """
    start = time.time()
    vit, cnn = _model(vit, "vit"), _model(cnn, "cnn")
    check_images(images)
    batch_size = check_batch_size(batch_size)
    _check_enough(images)
    if not is_vit(vit):
        raise TypeError(f"vit must be a timm VisionTransformer (attention heads), got {type(vit).__name__}.")
    block = check_int(block, "block", 0)
    if block >= len(vit.blocks):
        raise ValueError(f"block {block} does not exist: the ViT has blocks 0..{len(vit.blocks) - 1}.")
    heads = vit.blocks[block].attn.num_heads
    if not isinstance(head_groups, dict):
        raise TypeError(f"head_groups must be a dict {{label: [head indices]}}, got {type(head_groups).__name__}.")
    bad = sorted({h for group in head_groups.values() for h in group
                  if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or not 0 <= h < heads}, key=str)
    repeated = any(len(set(group)) < len(group) for group in head_groups.values())  # a head counted twice in a group
    if bad or repeated or not head_groups or not all(head_groups.values()):
        raise ValueError(f"head_groups must be non-empty lists of distinct head indices 0..{heads - 1} of block {block}; "
                         f"got {head_groups}.")
    capture = Capture(cnn, cnn_layers, transform=_gram_of_rows)
    accumulator = MinibatchCKA(list(head_groups), capture.labels)
    dtype = forward_dtype(next(cnn.parameters()).device, amp)
    prefix = vit.num_prefix_tokens
    _skipped(len(images), batch_size)
    with evaluating(vit), evaluating(cnn):
        cnn_grams = BatchGrams(cnn, images, capture, batch_size, dtype)  # one CNN pass serves every grouping of the heads
        with torch.no_grad(), capture:
            for x_vit, grams in tqdm(zip(batches(images, vit, batch_size), cnn_grams), total=len(cnn_grams),
                                     desc="CKA", disable=not progress):
                outputs = guarded(lambda x_vit=x_vit: attention_of_heads(vit, x_vit, block)[:, :, prefix:], dtype,
                                  f"{type(vit).__name__}'s forward pass")  # (B, heads, patches, head_dim)
                groups = torch.stack([_gram_of_rows(outputs[:, group].flatten(1)) for group in head_groups.values()])
                accumulator.update_grams(groups, grams)
    info = {"model_a": type(vit).__name__, "model_b": type(cnn).__name__, "block": block,
            "head_groups": {k: list(v) for k, v in head_groups.items()}, "layers_b": str(cnn_layers),
            "images": images.name, "batch_size": batch_size, "amp": dtype is not None, "amp_dtype": dtype_name(dtype),
            "seconds": round(time.time() - start, 2)}
    return accumulator.result(info)


def class_indices(images: ImageSet) -> torch.Tensor:
    """images.labels as class indices 0..K-1, (N,) int64; labels may be ints or strings (class names).

    Refuses what cannot give a right answer: no labels, one label per image missing, one class only, or
    every image of a class of its own.
    """
    if images.labels is None:
        raise ValueError(f"The image set '{images.name}' has no class labels. Use 'shapes', 'cifar10', 'imagenette' "
                         "or a folder with one subfolder per class.")
    labels = np.asarray(list(images.labels))
    if labels.ndim != 1 or len(labels) != len(images):
        raise ValueError(f"The image set '{images.name}' has {len(images)} images but {labels.size} labels "
                         f"(shape {labels.shape}): give exactly one class label per image.")
    classes, indices = np.unique(labels, return_inverse=True)
    if len(classes) < 2:
        raise ValueError(f"All {len(images)} images have the same label ({classes[0]!r}): CKA with the class labels "
                         "needs at least two classes. Use more images or a source with several classes.")
    if len(classes) == len(labels):  # the labels' Gram then says only "an image is its own class": no variance
        raise ValueError(f"Each of the {len(images)} images has a class of its own: CKA with the class labels needs "
                         "some images that share a class. Use more images (20 or more).")
    return torch.as_tensor(indices.reshape(-1), dtype=torch.int64)


def label_cka(model, images: ImageSet, layers="blocks", policy: str = "all", batch_size: int = 256,
              progress: bool = False, amp=None) -> CKAMatrix:
    """Minibatch linear CKA between each layer and the class labels: how much class structure a layer holds.

    The labels enter as one-hot rows (B, classes), whose Gram says "same class or not"; a layer
    whose examples cluster exactly by class gets 1, one that ignores the class gets about 0.
    images: an ImageSet with .labels (shapes, cifar10, imagenette, a folder of class subfolders).
    layers, policy, amp: as in cka_matrix. Returns a CKAMatrix: rows = layers, one column "class labels".
    """
    accumulator, info = label_cka_state(model, images, layers, policy, batch_size, progress, amp=amp)
    return accumulator.result(info)


def label_cka_state(model, images: ImageSet, layers="blocks", policy: str = "all", batch_size: int = 256,
                    progress: bool = False, classes=None, amp=None) -> tuple:
    """label_cka's sums before they become CKA: (MinibatchCKA, meta dict), as cka_state.

    classes: every class of the whole image set when `images` is one shard of it: the one-hot columns are then
    the same in every shard, and so is the float32 rounding of the label Grams (None: the classes of `images`).
    """
    check_images(images)
    batch_size = check_batch_size(batch_size)
    _check_enough(images)
    if classes is None:
        one_hot = torch.nn.functional.one_hot(class_indices(images)).float()
    else:
        classes, labels = np.asarray(classes), np.asarray(list(images.labels))
        index = np.searchsorted(classes, labels).clip(0, len(classes) - 1)
        if not (classes[index] == labels).all():
            raise ValueError(f"Some labels of '{images.name}' are not among the classes given: {sorted(set(labels) - set(classes))}.")
        one_hot = torch.nn.functional.one_hot(torch.as_tensor(index), len(classes)).float()
    start = time.time()
    model = _model(model, "model")
    capture = _gram_capture(model, layers, policy)
    accumulator = MinibatchCKA(capture.labels, ["class labels"])
    _skipped(len(images), batch_size)
    with evaluating(model):
        dtype = forward_dtype(next(model.parameters()).device, amp)
        grams = BatchGrams(model, images, capture, batch_size, dtype)  # reused when cka_matrix has computed them
        with torch.no_grad(), capture:
            for index, model_grams in enumerate(tqdm(grams, desc="CKA", disable=not progress)):
                labels = one_hot[index * batch_size:(index + 1) * batch_size].to(model_grams.device)
                accumulator.update_grams(model_grams, centered_gram(labels)[None])
    info = {"model_a": type(model).__name__, "model_b": "class labels", "layers_a": str(layers), "policy_a": policy,
            "resolved_layers_a": _resolved(capture), "amp": dtype is not None, "amp_dtype": dtype_name(dtype),
            "images": images.name, "batch_size": batch_size, "seconds": round(time.time() - start, 2)}
    return accumulator, info


MAX_KEPT_VALUES = 2**28  # features kept in memory by within_class_cka: 1 GiB of float32


def pooled_features(model, images: ImageSet, layers, policy: str, batch_size: int = 256, amp=None) -> dict:
    """Every image's representation at each layer, kept in memory: {layer: (N, p) float32 tensor on the CPU}.

    Meant for pooled token policies ("cls", "mean"), whose p is small; refuses more than
    MAX_KEPT_VALUES numbers in all, with advice, instead of running out of memory. amp: as in cka_matrix
    (the features are float32 whatever the forward pass ran in).
    """
    model = _model(model, "model")
    check_images(images)
    dtype = forward_dtype(next(model.parameters()).device, amp)
    kept, total = {}, 0
    with torch.no_grad(), evaluating(model), Capture(model, layers, policy) as capture:
        for x in batches(images, model, batch_size):
            def forward(x=x):
                model(x)
                return capture.take()

            for name, rows in guarded(forward, dtype, f"{type(model).__name__}'s forward pass").items():
                kept.setdefault(name, []).append(rows.float().cpu())
                total += rows.numel()
            if total > MAX_KEPT_VALUES:
                raise MemoryError(f"Keeping every image's features of {list(kept)} needs more than {MAX_KEPT_VALUES:,} numbers. "
                                  "Use a pooled token policy ('cls' or 'mean'), fewer layers or fewer images.")
    return {name: torch.cat(parts) for name, parts in kept.items()}


def _design(covariates, n: int, device) -> torch.Tensor:
    """(n, 1 + k) float64 design matrix [1, covariates] for least squares, checked to have n rows."""
    covariates = torch.as_tensor(covariates, dtype=torch.float64).to(device)
    if covariates.ndim == 1:
        covariates = covariates[:, None]
    if len(covariates) != n:
        raise ValueError(f"{n} examples but {len(covariates)} covariate rows: covariates need one row per image.")
    return torch.cat([torch.ones(n, 1, dtype=torch.float64, device=device), covariates], dim=1)


def regress_out(features: torch.Tensor, covariates: torch.Tensor) -> torch.Tensor:
    """(N, p) features minus their least-squares fit on (N, k) covariates and a constant.

    What is left cannot be explained linearly by the covariates: e.g. each image's brightness
    (k = 1), or its class as one-hot rows (then this subtracts each class's mean).
    Returns float64.
    """
    features = torch.as_tensor(features, dtype=torch.float64)
    design = _design(covariates, len(features), features.device)
    if not (torch.isfinite(features).all() and torch.isfinite(design).all()):
        raise ValueError("regress_out: the features or the covariates contain NaN or inf; every output row would be wrong. "
                         "Remove those examples first.")
    return features - design @ (torch.linalg.pinv(design) @ features)  # pinv: safe for collinear covariates


def gram_without(gram: torch.Tensor, covariates: torch.Tensor) -> torch.Tensor:
    """The (N, N) Gram of features after regress_out(features, covariates), from the Gram alone.

    Regressing out is X -> M X with M = I - D (D^T D)^-1 D^T (D = [1, covariates]), so the Gram
    X X^T becomes M X X^T M: no need to keep the features. Returns float64.
    """
    gram = torch.as_tensor(gram, dtype=torch.float64)
    if gram.ndim != 2 or gram.shape[0] != gram.shape[1]:
        raise ValueError(f"gram must be a square (N, N) Gram matrix (features @ features.T), got shape {tuple(gram.shape)}.")
    design = _design(covariates, len(gram), gram.device)
    residual_maker = torch.eye(len(gram), dtype=torch.float64, device=gram.device) - design @ torch.linalg.pinv(design)
    return residual_maker @ gram @ residual_maker


def remove_class_means(features: torch.Tensor, labels) -> torch.Tensor:
    """(N, p) features minus the mean of each example's class (float64): what varies *within* the classes."""
    labels = np.asarray(labels.cpu() if isinstance(labels, torch.Tensor) else list(labels))
    if labels.ndim != 1 or len(labels) != len(features):
        raise ValueError(f"{len(features)} feature rows but {labels.size} labels: give one label per image.")
    if labels.dtype.kind == "f" and not np.isfinite(labels).all():
        raise ValueError("labels contain NaN or inf: each image needs its class. Remove those images first.")
    _, classes = np.unique(labels, return_inverse=True)  # 0..K-1 for the K classes present (ints or names)
    one_hot = torch.nn.functional.one_hot(torch.as_tensor(classes.reshape(-1), dtype=torch.int64))
    return regress_out(features, one_hot[:, 1:])  # the first class is the constant


def within_class_cka(model_a, model_b, images: ImageSet, layers_a="blocks", layers_b="blocks",
                     policy_a: str = "mean", policy_b: str = "cls", batch_size: int = 256, amp=None) -> CKAMatrix:
    """Minibatch linear CKA after removing each class's mean from every layer: do two layers share
    anything beyond the class structure?

    Two good classifiers of the same classes have similar last layers just because both sort the
    images by class; this removes that shared part (class means over all images) and compares
    what is left. Every image's features are kept in memory (pooled_features), so use pooled
    policies. Same estimator, batches and autocast (amp) as cka_matrix. Returns a CKAMatrix (rows = A's layers).
    """
    check_images(images)
    batch_size = check_batch_size(batch_size)
    _check_enough(images)
    labels = class_indices(images)
    start = time.time()
    features_a = {k: remove_class_means(v, labels) for k, v in pooled_features(model_a, images, layers_a, policy_a, batch_size, amp).items()}
    features_b = {k: remove_class_means(v, labels) for k, v in pooled_features(model_b, images, layers_b, policy_b, batch_size, amp).items()}
    accumulator = MinibatchCKA(list(features_a), list(features_b))
    for begin in range(0, len(images), batch_size):
        stop = begin + batch_size
        if _too_small(min(stop, len(images)) - begin):
            break
        accumulator.update([f[begin:stop] for f in features_a.values()], [f[begin:stop] for f in features_b.values()])
    info = {"model_a": _label(model_a), "model_b": _label(model_b), "layers_a": str(layers_a), "layers_b": str(layers_b),
            "policy_a": policy_a, "policy_b": policy_b, "class_means_removed": True, "images": images.name, "batch_size": batch_size,
            "seconds": round(time.time() - start, 2)}
    return accumulator.result(info)
