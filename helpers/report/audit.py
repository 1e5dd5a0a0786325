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

A few images of very large norm can dominate CKA (Nguyen, Raghu & Kornblith, 2022). The highest-norm audit
(high_norm_audit) recomputes, for each layer under both readings, its CKA with the labels and its matched CKA
(with its best match in the other model) without the layer's k highest-norm images (k = 1% of the images, at
least 5; for a pair the union of both layers' k), from the Grams already computed: no forward pass is repeated.
The report pins those Grams in helpers.gram_cache while its CKA parts run, so that they are still there, and under
torchrun each process sends its shard's to process 0 (audit_grams).
A value that moves by more than the half-width of its interval is flagged (high_norm_flags); no new threshold.

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
    # on the CPU: a GPU's float64 runs at a small fraction of its float32 rate, and a (B, B) matrix is small
    values = torch.linalg.eigvalsh(gram.detach().cpu().double()).clamp(min=0)
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
    from helpers.autocast import forward_dtype
    from helpers.guards import check_batch_size, evaluating
    from helpers.minibatch_cka import MinibatchCKA, centered_gram

    batch_size = check_batch_size(batch_size)
    stats = image_statistics(images, model, batch_size).float()
    capture = _gram_capture(model, layers, policy)
    accumulator = MinibatchCKA(capture.labels, list(COLUMNS))
    shares = []
    with evaluating(model):
        # the dtype cka_matrix runs the same model in (float16 autocast on CUDA), so that its kept Grams are reused
        grams = BatchGrams(model, images, capture, batch_size, forward_dtype(next(model.parameters()).device))
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


# --------------------------------------------------------------------------- CKA without the highest-norm images

HIGH_NORM_SHARE, HIGH_NORM_MIN = 0.01, 5  # drop 1% of the images, at least 5


def high_norm_count(n_images: int) -> int:
    """How many highest-norm images are dropped: 1% of the images, at least 5 (2,048 images: 20)."""
    return max(HIGH_NORM_MIN, int(round(HIGH_NORM_SHARE * n_images)))


def collect_grams(model, images, layers, policy: str, batch_size: int):
    """(layer labels, [(L, B, B) CPU tensors] one per batch): each recorded layer's centred Gram on each batch of
    `images`, from helpers.gram_cache when the report has computed them already (no forward pass repeated)."""
    from helpers.autocast import forward_dtype
    from helpers.compare import _gram_capture
    from helpers.gram_cache import BatchGrams
    from helpers.guards import evaluating

    capture = _gram_capture(model, layers, policy)
    with evaluating(model):
        source = BatchGrams(model, images, capture, batch_size, forward_dtype(next(model.parameters()).device))
        with torch.no_grad(), capture:
            grams = [g.detach().cpu() for g in source]
    return capture.labels, grams


def squared_norms(grams: list, layer: int) -> torch.Tensor:
    """(N,) each image's squared norm at one layer, measured from its batch's mean: the diagonal of the centred Grams
    (the images of a last batch too small to count are left out, as CKA leaves them out)."""
    return torch.cat([g[layer].diagonal() for g in grams]).double()


def highest(norms: torch.Tensor, k: int) -> set:
    """The indices of the k largest entries of norms (N,)."""
    return set(torch.topk(norms, min(k, len(norms))).indices.tolist())


def cka_without(grams_x: list, grams_y: list, drop: set, batch_size: int) -> float:
    """Minibatch CKA of one layer pair (grams_x, grams_y: one (B, B) centred Gram per batch, the same images) with the
    images in `drop` (indices over all batches) removed from every batch's Gram; NaN when no batch keeps 4 images.

    Removing rows and columns of a centred Gram equals the Gram of the remaining images: unbiased HSIC u-centres each
    Gram again (helpers.minibatch_cka), which removes any shift of the features, so no forward pass is needed. A batch
    left with fewer than 4 images is skipped. drop=set() gives the CKA on all the images.
    """
    from helpers.minibatch_cka import MinibatchCKA

    accumulator = MinibatchCKA(["x"], ["y"])
    for b, (gx, gy) in enumerate(zip(grams_x, grams_y)):
        keep = [i for i in range(gx.shape[-1]) if b * batch_size + i not in drop]
        if len(keep) < 4:
            continue
        keep = torch.tensor(keep)
        accumulator.update_grams(gx[keep][:, keep][None], gy[keep][:, keep][None])
    if accumulator.n_batches == 0:  # too few images per batch for the unbiased estimator: nothing to report
        return float("nan")
    return float(accumulator.result().values[0, 0])


def cka_without_highest(X, Y, k: int) -> float:
    """Debiased linear CKA of X (n, p) and Y (n, q), the same n images, without the k images farthest from the mean
    of X and the k farthest from the mean of Y (the union is dropped): the one-batch form of the audit (exercise 16.1).
    """
    X, Y = np.asarray(X, dtype=np.float64), np.asarray(Y, dtype=np.float64)
    if X.ndim != 2 or Y.ndim != 2 or len(X) != len(Y):
        raise ValueError(f"X and Y must be (n, p) and (n, q) features of the same n images, got {X.shape} and {Y.shape}.")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"k={k!r}: give how many highest-norm images to drop from each, an int >= 0.")
    drop = set()
    for F in (X, Y):
        norms = np.linalg.norm(F - F.mean(0), axis=1)
        drop |= set(np.argsort(-norms, kind="stable")[:k].tolist())
    keep = [i for i in range(len(X)) if i not in drop]
    if len(keep) < 4:
        raise ValueError(f"Only {len(keep)} images are left after dropping {len(drop)}: debiased CKA needs at least 4.")
    from helpers.cka import linear_cka

    return float(linear_cka(X[keep], Y[keep], debiased=True))


def moved(value: float, without: float, half_width: float) -> bool | None:
    """True when dropping the images moves the value by more than its noise (the half-width of its interval); None
    without an interval (--repeats 0), or when a value could not be computed: then nothing is judged."""
    if half_width is None or not np.all(np.isfinite([value, without, half_width])):
        return None
    return bool(abs(without - value) > half_width)


def audit_grams(settings, models: dict, shard, readings: dict, w) -> dict | None:
    """{(which, reading): [(L, B, B) CPU Grams] one per batch of the whole image set, in order} on process 0 (None on
    the others) for high_norm_audit. models: {'a': model, 'b': model}; shard: this process's shard of the image set
    (the set itself on one process, None when it got no batch). Each process collects its shard's Grams (from
    helpers.gram_cache when the CKA parts kept them: no forward pass) and process 0 gathers them
    (helpers.report.distributed.gather_batches). Every process must call it, in the same order."""
    from helpers.report.controls import READINGS
    from helpers.report.distributed import gather_batches
    from helpers.report.settings import layers_arg

    out = {}
    for r in READINGS:
        for which, model in models.items():
            layers = layers_arg(getattr(settings, f"layers_{which}"))
            mine = [] if shard is None else collect_grams(model, shard, layers, readings[which][r], settings.batch_size)[1]
            out[which, r] = gather_batches(mine, w)
    return out if w.main else None


def high_norm_audit(settings, model_a, model_b, images, parts: dict, readings: dict, grams: dict | None = None) -> dict:
    """{'<w>_<reading>_<quantity>': array}: for each layer of each model under each reading, its label CKA (labels)
    and its matched CKA (with its best match in the other model, from the full-data cross matrix) on all images
    ('..._all') and without the k highest-norm images ('..._without'; for a layer pair, the union of both layers'
    k), the interval half-width of the value ('..._noise', from the report's subsamples) and the other layer
    ('..._partner'); 'k' the number dropped per layer. Nguyen, Raghu & Kornblith (2022): a few images of very
    large norm can dominate CKA. grams: audit_grams' result (else collected here, from helpers.gram_cache when kept)."""
    from helpers.report.controls import READINGS, suffix
    from helpers.report.settings import layers_arg

    bs, k = settings.batch_size, high_norm_count(len(images))
    labels = None
    if images.labels is not None:
        from helpers.compare import class_indices
        from helpers.minibatch_cka import centered_gram

        one_hot = torch.nn.functional.one_hot(class_indices(images)).float()
        labels = [centered_gram(one_hot[i:i + bs]) for i in range(0, len(images), bs)]
    out = {"k": np.array(k)}
    for r in READINGS:
        x = suffix(r)
        grams_r = {w: grams[w, r] if grams is not None else
                   collect_grams(m, images, layers_arg(getattr(settings, f"layers_{w}")), readings[w][r], bs)[1]
                   for w, m in (("a", model_a), ("b", model_b))}
        cross = parts[f"cross{x}"]
        values, low, high = cross.interval()
        for w, other in (("a", "b"), ("b", "a")):
            n_layers = grams_r[w][0].shape[0]
            tops = {(v, i): highest(squared_norms(grams_r[v], i), k) for v in (w, other)
                    for i in range(grams_r[v][0].shape[0])}
            key = f"{w}_{r}"
            table = {q: [] for q in ("matched_all", "matched_without", "matched_noise", "matched_partner")}
            for i in range(n_layers):
                j = int(values[i].argmax() if w == "a" else values[:, i].argmax())
                cell = (i, j) if w == "a" else (j, i)
                gx, gy = [g[i] for g in grams_r[w]], [g[j] for g in grams_r[other]]
                table["matched_all"].append(cka_without(gx, gy, set(), bs))
                table["matched_without"].append(cka_without(gx, gy, tops[(w, i)] | tops[(other, j)], bs))
                table["matched_noise"].append(float((high[cell] - low[cell]) / 2))
                table["matched_partner"].append(j)
            if labels is not None and f"labels_{w}{x}" in parts:
                lv, llo, lhi = parts[f"labels_{w}{x}"].interval()
                label_grams = labels[:len(grams_r[w])]
                table["labels_all"] = [cka_without([g[i] for g in grams_r[w]], label_grams, set(), bs) for i in range(n_layers)]
                table["labels_without"] = [cka_without([g[i] for g in grams_r[w]], label_grams, tops[(w, i)], bs)
                                           for i in range(n_layers)]
                table["labels_noise"] = [float((lhi[i, 0] - llo[i, 0]) / 2) for i in range(n_layers)]
            out.update({f"{key}_{q}": np.array(v) for q, v in table.items()})
    return out


def high_norm_rows(audit: dict, names: dict, layers: dict) -> list:
    """[(model, reading, layer, comparison, partner, cka_all, cka_without, noise, moved)] of the audit arrays, the rows
    of tables/high_norm_audit.csv; layers: {'a': [labels], 'b': [labels]}; moved is None without an interval."""
    from helpers.report.controls import READINGS

    rows = []
    for w, other in (("a", "b"), ("b", "a")):
        for r in READINGS:
            key = f"{w}_{r}"
            for q in ("labels", "matched"):
                if f"{key}_{q}_all" not in audit:
                    continue
                for i, (v, wo, noise) in enumerate(zip(audit[f"{key}_{q}_all"], audit[f"{key}_{q}_without"],
                                                       audit[f"{key}_{q}_noise"])):
                    partner = "class labels" if q == "labels" else layers[other][int(audit[f"{key}_matched_partner"][i])]
                    rows.append((names[w], r, layers[w][i], q, partner, float(v), float(wo), float(noise),
                                 moved(float(v), float(wo), float(noise))))
    return rows


def high_norm_columns(audit: dict, layers: dict) -> dict:
    """tables/high_norm_audit.*: high_norm_rows as columns (models named A and B; moved: yes, no or not judged)."""
    names = ("model", "reading", "layer", "comparison", "partner", "cka_all", "cka_without", "noise", "moved")
    rows = high_norm_rows(audit, {"a": "A", "b": "B"}, layers)
    columns = {n: [row[i] for row in rows] for i, n in enumerate(names)}
    columns["moved"] = ["not judged" if x is None else ("yes" if x else "no") for x in columns["moved"]]
    return columns


def high_norm_flags(audit: dict, names: dict, layers: dict) -> list:
    """SUMMARY.md's sentences of the highest-norm audit: for each model and reading, the layers whose label or
    matched CKA moves by more than its noise without the k highest-norm images; first a FLAG for the comparisons
    above when a value they use moves (the last layers' label CKA, R1; the last layer of B's matched CKA, R2)."""
    from helpers.report.controls import READING_WORDS

    k = int(audit["k"])
    rows = high_norm_rows(audit, names, layers)
    if all(row[-1] is None for row in rows):
        return [f"Highest-norm audit (CKA without each layer's {k} highest-norm images): not judged, there are no "
                "intervals (--repeats 0) to tell a move from noise; the values are in tables/high_norm_audit.csv."]
    last = {names["a"]: layers["a"][-1], names["b"]: layers["b"][-1]}
    used = [row for row in rows if row[-1] and row[2] == last[row[0]] and
            (row[3] == "labels" or (row[3] == "matched" and row[0] == names["b"]))]
    out = []
    if used:
        what = "; ".join(f"the {'label' if row[3] == 'labels' else 'matched'} CKA of {row[0]}'s last layer {row[2]} "
                         f"({READING_WORDS[row[1]]}) goes from {row[5]:.3f} to {row[6]:.3f} (noise {row[7]:.3f})"
                         for row in used)
        ups = {row[6] > row[5] for row in used}  # which way the values go without the images
        effect = ("so these few images lower a value the comparisons use" if ups == {True} else
                  "so these few images raise a value the comparisons use" if ups == {False} else
                  "so these few images move values the comparisons use (some up, some down)")
        out.append(f"HIGH-NORM FLAG for the comparisons above: without the {k} highest-norm images {what}: more than its "
                   f"noise, {effect} (a few images of very large norm can dominate CKA: Nguyen, Raghu & Kornblith, "
                   "2022). Look at them, and at tables/high_norm_audit.csv, before relying on that comparison.")
    for name in (names["a"], names["b"]):
        for r in READING_WORDS:
            mine = [row for row in rows if row[0] == name and row[1] == r]
            if not mine:
                continue
            hits = [f"{row[2]} {'with the labels' if row[3] == 'labels' else 'with ' + row[4]} {row[5]:.3f} -> "
                    f"{row[6]:.3f} (noise {row[7]:.3f})" for row in mine if row[-1]]
            head = (f"Highest-norm audit of {name} ({READING_WORDS[r]}; each layer's {k} highest-norm images dropped, "
                    f"{len(mine)} values)")
            out.append(f"{head}: FLAG, these move by more than their noise: {'; '.join(hits)}." if hits else
                       f"{head}: no label or matched CKA moves by more than its noise.")
    return out
