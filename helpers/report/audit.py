"""The report's image-statistics audit: how much of each recorded layer simple image statistics explain.

A low-level statistic of the images (their brightness, their colour) can dominate CKA: notebooks 06 and
09 measured brightness doing exactly this on the lite track, and a cross-model matrix in which every
layer of one model is alike to the first layer of the other is its mark. For each recorded layer the
audit gives
    its CKA with the mean brightness of each image, and with the per-channel colour means (R, G, B);
    the share of its variance along its top principal component (per minibatch, averaged): a share near
    1 means one direction, often one image statistic, carries the layer.
SUMMARY.md names the layers whose CKA with an image statistic is as large as their CKA with the class
labels, so that a reader knows which comparisons these statistics could explain.

    audit = statistics_cka(model, images, "blocks", policy="all")   # CKAMatrix: rows layers, 2 columns
    audit.meta["top_pc_share"]                                       # one share per layer
"""

from __future__ import annotations

import numpy as np
import torch

COLUMNS = ("mean brightness", "colour means (R, G, B)")


def image_statistics(images, model, batch_size: int = 256) -> torch.Tensor:
    """(N, 4) float64: each image's mean brightness and its mean red, green and blue, in pixel units 0-1, as the
    model sees it (its own preprocessing, normalisation undone)."""
    from timm.data import resolve_data_config

    from helpers.data import batches

    config = resolve_data_config(model=model, use_test_size=True)
    mean = torch.tensor(config["mean"], dtype=torch.float64)[None, :]
    std = torch.tensor(config["std"], dtype=torch.float64)[None, :]
    rows = []
    with torch.no_grad():
        for x in batches(images, model, batch_size):
            colour = x.double().mean((2, 3)).cpu() * std + mean  # (B, 3): normalisation is per channel, affine
            rows.append(torch.cat([colour.mean(1, keepdim=True), colour], dim=1))
    return torch.cat(rows)


def _top_share(gram: torch.Tensor) -> float:
    """Share of the variance along the top principal component, from one minibatch's centered Gram (B, B)."""
    values = torch.linalg.eigvalsh(gram.double()).clamp(min=0)
    total = float(values.sum())
    return float(values[-1] / total) if total > 0 else float("nan")


def statistics_cka(model, images, layers="blocks", policy: str = "all", batch_size: int = 256):
    """CKAMatrix (rows: layers, columns: COLUMNS) of each layer with the images' brightness and colour means, with
    meta['top_pc_share']: each layer's top-principal-component share of variance, averaged over the minibatches.

    The Grams are helpers.gram_cache's: after cka_matrix or label_cka on the same images, no forward pass is repeated.
    """
    return statistics_result(*statistics_state(model, images, layers, policy, batch_size))


def statistics_state(model, images, layers="blocks", policy: str = "all", batch_size: int = 256) -> tuple:
    """statistics_cka's sums before they become CKA: (MinibatchCKA, meta), meta['summed'] holding each layer's sum
    of top-PC shares and its count of minibatches (sums, so that shards of the images can be added up)."""
    from helpers.compare import _gram_capture
    from helpers.gram_cache import BatchGrams
    from helpers.guards import check_batch_size, evaluating
    from helpers.minibatch_cka import MinibatchCKA, centered_gram

    batch_size = check_batch_size(batch_size)
    stats = image_statistics(images, model, batch_size).float()
    capture = _gram_capture(model, layers, policy)
    accumulator = MinibatchCKA(capture.labels, list(COLUMNS))
    shares = []
    with evaluating(model):
        grams = BatchGrams(model, images, capture, batch_size)
        with torch.no_grad(), capture:
            for index, model_grams in enumerate(grams):
                part = stats[index * batch_size:(index + 1) * batch_size].to(model_grams.device)
                targets = torch.stack([centered_gram(part[:, :1]), centered_gram(part[:, 1:])])
                accumulator.update_grams(model_grams, targets)
                shares.append([_top_share(g) for g in model_grams])
    shares = np.array(shares).reshape(-1, len(capture.labels))
    info = {"model_a": type(model).__name__, "model_b": "image statistics", "layers_a": str(layers), "policy_a": policy,
            "images": images.name, "batch_size": batch_size,
            "summed": {"top_pc_share_sum": np.nansum(shares, axis=0).tolist(),
                       "top_pc_share_count": (~np.isnan(shares)).sum(axis=0).astype(float).tolist()}}
    return accumulator, info


def statistics_result(accumulator, info: dict):
    """The CKAMatrix of statistics_cka from the (possibly summed over processes) state of statistics_state."""
    info = dict(info)
    summed = info.pop("summed")
    with np.errstate(invalid="ignore", divide="ignore"):  # a layer with no finite share gets NaN, as nanmean gives
        share = np.asarray(summed["top_pc_share_sum"]) / np.asarray(summed["top_pc_share_count"])
    info["top_pc_share"] = [float(x) for x in np.where(np.asarray(summed["top_pc_share_count"]) > 0, share, np.nan)]
    return accumulator.result(info)


def flags(parts: dict, has_labels: bool, names: dict, readings: dict) -> list:
    """Sentences naming, for each model and reading, the layers whose CKA with an image statistic is at least their
    CKA with the class labels (a description with its numbers: no verdict), and each layer's top-PC share."""
    from helpers.report.controls import READING_WORDS, READINGS, suffix

    out = []
    for w in ("a", "b"):
        for r in READINGS:
            x = suffix(r)
            audit = parts.get(f"stats_{w}{x}")
            if audit is None:
                continue
            values, rows = audit.full.values, audit.full.rows
            best = values.max(axis=1)
            which = [COLUMNS[int(k)] for k in values.argmax(axis=1)]
            share = audit.full.meta.get("top_pc_share", [float("nan")] * len(rows))
            head = f"Image-statistics audit of {names[w]} ({READING_WORDS[r]}, {readings[w][r]})"
            text = (f"{head}: CKA with simple image statistics from {best.min():.2f} to {best.max():.2f} over its layers "
                    f"(last layer {rows[-1]}: {best[-1]:.2f}, {which[-1]}); top principal component share from "
                    f"{np.nanmin(share):.2f} to {np.nanmax(share):.2f} (last layer {share[-1]:.2f}).")
            if has_labels and f"labels_{w}{x}" in parts:
                labels = parts[f"labels_{w}{x}"].full.values[:, 0]
                explained = [f"{rows[i]} ({best[i]:.2f} vs labels {labels[i]:.2f})" for i in range(len(rows))
                             if best[i] >= labels[i]]
                text += (f" FLAG: at {', '.join(explained)} an image statistic matches the layer at least as well as "
                         "the class labels do, so a comparison at these layers may reflect the images' brightness or "
                         "colour rather than what the model learned." if explained else
                         " At every layer the class labels match it better than these statistics do.")
            out.append(text)
    return out


def last_layer_flag(parts: dict, has_labels: bool, names: dict, readings: dict) -> str | None:
    """A sentence flagging the comparisons above when, under some reading, a compared last layer matches an image
    statistic at least as well as it matches the class labels (None when none does, or without labels)."""
    from helpers.report.controls import READINGS, suffix

    if not has_labels:
        return None
    found = []
    for r in READINGS:
        for w in ("a", "b"):
            audit, labels = parts.get(f"stats_{w}{suffix(r)}"), parts.get(f"labels_{w}{suffix(r)}")
            if audit is None or labels is None:
                continue
            stat, label = float(audit.full.values[-1].max()), float(labels.full.values[-1, 0])
            if stat >= label:
                found.append(f"under {'the classifier reading' if r == 'head' else 'all tokens'} ({readings[w][r]}), the last layer of {names[w]} matches "
                             f"the images' brightness or colour (CKA {stat:.2f}) at least as well as the labels ({label:.2f})")
    if not found:
        return None
    return ("AUDIT FLAG for the comparisons above: " + "; ".join(found) + ". What that reading shows about this layer "
            "may be an image statistic rather than what the model learned; rely on the other reading for it.")
