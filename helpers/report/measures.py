"""The report's conclusions under other similarity measures (--measures): does each one depend on CKA?

For each comparative conclusion of the report (helpers.report.controls: R1 the class-information order of the last
layers, R2 the last layer's counterpart, R3 matched depth follows depth) the same statistic is recomputed with each
other measure of helpers.measures (orthogonal Procrustes, RSA, mutual k-NN) and judged by the same code
(controls.judged: helpers.verdicts, the effect against its subsample interval, the reference spread and the
same 5 untrained draws as CKA, measured here on the measures' images without subsamples), under both readings.
The shuffled-image null is CKA's only (it is computed from CKA's minibatch Grams). SUMMARY.md then says, for each conclusion, whether it agrees across
measures or depends on the measure.

What is computed. The other measures need every pair of images at once, not minibatches, so they run on a fixed
subsample: the first --measure-count images of the set (512 by default; fewer when the set is smaller), in ONE
forward pass per model and reading, each recorded layer read by that reading's token policy and kept as its
(n, n) float64 Gram matrix (helpers.measures reads a representation only through it). The interval comes from the
same Grams on disjoint subsamples of those images (helpers.intervals; as many as --repeats, but each of at least
MIN_PER_SUBSAMPLE images). Process 0 computes all of it in a run with torchrun. Each measure's matrices and floor
draws are saved under <out>/cache (measure_KEY.npz), so a rerun with the same settings loads them like CKA's parts.

Cost on the default report (lite models, one thread): 17.9 s for Procrustes measured on the shared 2-core machine at
load 7.5 before the floor had 5 draws (each further draw adds one forward pass per model and reading), 7.8 s of it the forward passes (one eigendecomposition per layer and image subsample, one SVD per pair of
layers, small when a reading is pooled); a forward pass of --measure-count images at once needs that batch's memory.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import numpy as np
import torch

from helpers.report.cached import arrays_saved, load_arrays, save_arrays
from helpers.report.settings import ReportError

KEYS = {"cka": "CKA", "procrustes": "Procrustes", "rsa": "RSA", "knn": "mutual k-NN"}  # --measures name: printed name
K_NEIGHBOURS = 10          # mutual k-NN's k
MIN_PER_SUBSAMPLE = 50     # images per disjoint subsample of the measures' images, at least
MIN_IMAGES = 2 * MIN_PER_SUBSAMPLE

DESCRIPTIONS = {
    "procrustes": ("orthogonal Procrustes similarity ||X̃ᵀỸ||_* (X̃, Ỹ: the features centred and scaled to unit "
                   "Frobenius norm; 1 minus half its squared distance after the best rotation; the shape metric of "
                   "Williams et al. 2021, which weighs each direction by its standard deviation where CKA weighs it by "
                   "its variance)"),
    "rsa": ("RSA: the Spearman correlation of the two representational dissimilarity matrices of Euclidean distances "
            "between images (Kriegeskorte et al. 2008), which reads only the rank order of the distances"),
    "knn": (f"mutual k-nearest neighbours: the mean share of each image's {K_NEIGHBOURS} nearest neighbours (cosine) "
            "that both representations agree on (Huh et al. 2024), which reads only local structure; with the class "
            f"labels, the share of each image's {K_NEIGHBOURS} nearest neighbours that are of its class"),
}
REFERENCES = {
    "procrustes": "Williams, Kunz, Kornblith & Linderman (2021). Generalized shape metrics on neural representations. NeurIPS.",
    "rsa": "Kriegeskorte, Mur & Bandettini (2008). Representational similarity analysis. Frontiers in Systems Neuroscience 2:4.",
    "knn": "Huh, Cheung, Wang & Isola (2024). The platonic representation hypothesis. ICML.",
}


def measure_keys(text: str) -> list:
    """'cka,procrustes' -> ['procrustes']: the measures beside CKA (CKA, the report's own, is always computed).

    An unknown name is a ReportError listing the valid ones."""
    names = [x.strip().lower() for x in str(text).split(",") if x.strip()]
    if not names:
        raise ReportError(f"--measures {text}: no measure given. Give cka for CKA alone, or several, comma-separated "
                          "(e.g. cka,procrustes,rsa).")
    unknown = [x for x in names if x not in KEYS]
    if unknown:
        raise ReportError(f"--measures {text}: unknown measure(s) {unknown}. Choose from {', '.join(KEYS)} "
                          "(comma-separated, e.g. cka,procrustes,rsa).")
    return [x for x in dict.fromkeys(names) if x != "cka"]


def check(settings) -> list:
    """The other measures asked for, after checking --measures and --measure-count."""
    keys = measure_keys(settings.measures)
    if keys and settings.measure_count < MIN_IMAGES:
        raise ReportError(f"--measure-count {settings.measure_count}: the other measures need at least {MIN_IMAGES} "
                          f"images (two subsamples of {MIN_PER_SUBSAMPLE}); give more, or --measures cka.")
    return keys


def keys_of(measured: dict) -> list:
    """The measures that were computed, in the order asked: the keys of compute_measures' result that name one."""
    return [k for k in measured if k in KEYS]


# --------------------------------------------------------------------------- Grams of the measures' images


def _gram(rows: torch.Tensor) -> torch.Tensor:
    """(n, p) features -> (n, n) float64 Gram X Xᵀ, uncentred (mutual k-NN measures cosines from the origin)."""
    rows = rows.double()
    return rows @ rows.T


def layer_grams(model, images, layers, policies) -> dict:
    """{policy: {layer label: (n, n) float64 numpy Gram}} of every image of `images`, for each token policy in
    `policies` (e.g. ["all", "cls"]), all from one forward pass (helpers.capture): a reading costs no second pass."""
    from helpers.capture import Capture
    from helpers.data import batches
    from helpers.guards import evaluating

    with torch.no_grad(), evaluating(model), ExitStack() as stack:
        captures = {p: stack.enter_context(Capture(model, layers, p, transform=_gram)) for p in dict.fromkeys(policies)}
        model(next(batches(images, model, len(images))))
        return {p: {name: gram.detach().cpu().numpy() for name, gram in capture.take().items()}
                for p, capture in captures.items()}


def readings_grams(ma, mb, images, la, lb, readings: dict) -> dict:
    """{reading: (A's layer Grams, B's)} for readings {reading: (A's policy, B's policy)}: one pass per model."""
    grams_a = layer_grams(ma, images, la, [pa for pa, _ in readings.values()])
    grams_b = layer_grams(mb, images, lb, [pb for _, pb in readings.values()])
    return {r: (grams_a[pa], grams_b[pb]) for r, (pa, pb) in readings.items()}


def label_gram(labels, classes) -> np.ndarray:
    """(n, n) float64 Gram of the one-hot class labels: 1 for a pair of the same class, else 0."""
    index = np.searchsorted(np.asarray(classes), np.asarray(list(labels)))
    return (index[:, None] == index[None, :]).astype(np.float64)


# --------------------------------------------------------------------------- one measure from Grams


def prepare(K: np.ndarray, key: str):
    """What measure `key` needs of one representation, from its (n, n) float64 Gram K: the same function
    helpers.measures.prepare_gram uses for it (procrustes_factor, rsa_vector, knn_matrix), only the one asked for."""
    from helpers import measures

    K = np.asarray(K, dtype=np.float64)
    if key == "procrustes":
        return measures.procrustes_factor(K)
    if key == "rsa":
        return measures.rsa_vector(K)
    return measures.knn_matrix(K, K_NEIGHBOURS)


def prepare_labels(K: np.ndarray, key: str):
    """prepare() for the class labels' Gram. For mutual k-NN every image of a class is equally near, so the labels'
    'neighbours' of an image are all the others of its class: the similarity of a layer with the labels is then the
    share of each image's K_NEIGHBOURS nearest neighbours in the layer that are of its class (1: all are)."""
    if key != "knn":
        return prepare(K, key)
    same = np.asarray(K) > 0.5
    np.fill_diagonal(same, False)
    return same


def similarity(a, b, key: str) -> float:
    """The similarity of two prepared representations of the same images under measure `key` (1 = same)."""
    if key == "procrustes":
        from helpers.measures import procrustes_of_factors

        return procrustes_of_factors(a, b)
    if key == "rsa":
        return float(a @ b)
    return float((a & b).sum() / (len(a) * K_NEIGHBOURS))


def matrix(prepared_a: list, prepared_b: list, key: str) -> np.ndarray:
    """(La, Lb) similarities of every prepared layer of A with every prepared layer of B."""
    return np.array([[similarity(a, b, key) for b in prepared_b] for a in prepared_a])


# --------------------------------------------------------------------------- the report's parts, re-measured


def compute_measures(settings, model_a, model_b, images, controls: dict, floor: bool = True, cache=None,
                     log=None) -> dict:
    """{key: {'parts': {name: Part}, 'floor': {...}, 'judgements': controls.judged(...)}} for each measure beside CKA,
    and 'n_images', 'repeats': the images used ({'n_images', 'note'} when there are too few). controls: the untrained
    twins and references, {'twin': (A's, B's), 'ref': ...} as compute's results['controls']. Parts have the report's
    names (cross, cross_head, labels_a, twin_cross, ...), so controls.judged judges them exactly as it judges CKA's.
    floor: also measure every untrained draw of helpers.report.floor (the twins are its first; the others on these
    images only, without subsamples), the same floor as CKA's. cache: a folder (the report's <out>/cache): each
    measure's values are saved there (measure_KEY.npz, with the settings' fingerprint) and loaded on a rerun with the
    same settings, which then runs no model and no decomposition; log: the list the report's log lines go to."""
    from helpers import intervals
    from helpers.data import subset
    from helpers.minibatch_cka import CKAMatrix
    from helpers.report.compute import Part
    from helpers.report.controls import judged, suffix
    from helpers.report.floor import FLOOR_PARTS, draw_models, draw_seeds
    from helpers.report.settings import layers_arg

    keys = check(settings)
    if not keys:
        return {}
    n = min(settings.measure_count, len(images))
    if n < MIN_IMAGES:  # a small set: the report stands on CKA alone, and says so
        return {"n_images": n, "note": f"The other measures ({', '.join(KEYS[k] for k in keys)}) were not computed: they "
                                       f"need at least {MIN_IMAGES} images and the set has {n}."}
    chosen = subset(images, range(n))
    repeats = min(settings.repeats, n // MIN_PER_SUBSAMPLE) if settings.repeats else 0
    parts_idx = intervals.disjoint_subsamples(n, repeats, settings.seed) if repeats else []
    la, lb = layers_arg(settings.layers_a), layers_arg(settings.layers_b)
    out = {"n_images": n, "repeats": repeats}
    samples = [None] + list(parts_idx)  # all n images, then each disjoint subsample
    seeds = draw_seeds(settings.seed) if floor and "twin" in controls else []
    has_labels = images.labels is not None
    paths = {key: None if cache is None else Path(cache) / f"measure_{key}.npz" for key in keys}
    saved = {key: paths[key] is not None and arrays_saved(paths[key], settings.fingerprint(), n) for key in keys}
    for key in [k for k in keys if saved[k]]:  # a rerun with the same settings: no model runs, nothing is decomposed
        parts, floor_of_key = _load_measure(paths[key], key, samples, n, settings.level, seeds, log)
        out[key] = {"parts": parts, "floor": floor_of_key, "judgements": judged(parts, has_labels, settings.level, floor_of_key)}
    keys = [k for k in keys if not saved[k]]
    if not keys:
        return out
    sets = [("", model_a, model_b)] + [(f"{k}_", ma, mb) for k, (ma, mb) in controls.items()]
    labels = None
    if has_labels:
        labels = {"class labels": label_gram(chosen.labels, np.unique(np.asarray(list(images.labels))))}
    grams = {}
    for prefix, ma, mb in sets:
        for r, pair in readings_grams(ma, mb, chosen, la, lb, _policies(settings, ma, mb)).items():
            grams[prefix, r] = pair
    drawn = []  # per further draw: {(reading): (Grams of A's layers, Grams of B's)}, on all n images only
    for seed in seeds[1:]:
        ma, mb = draw_models(settings, model_a, model_b, seed)
        drawn.append(readings_grams(ma, mb, chosen, la, lb, _policies(settings, ma, mb)))
    for key in keys:
        def prepared(grams_of_layers: dict, how=prepare) -> list:
            """[[prepared layer for each layer] for all images, then for each subsample]"""
            return [[how(K if idx is None else K[np.ix_(idx, idx)], key) for K in grams_of_layers.values()]
                    for idx in samples]

        def part(name, rows, cols, pa, pb):
            full, *subs = [CKAMatrix(matrix(a, b, key), rows, cols, estimator=KEYS[key],
                                     n_examples=n if idx is None else len(idx)) for a, b, idx in zip(pa, pb, samples)]
            return Part(name, full, subs, settings.level)

        parts = {}
        label_prepared = None if labels is None else prepared(labels, prepare_labels)
        for (prefix, r), (ga, gb) in grams.items():
            x, pa, pb = suffix(r), prepared(ga), prepared(gb)
            parts[f"{prefix}cross{x}"] = part(f"{prefix}cross{x}", list(ga), list(gb), pa, pb)
            if labels is not None:  # R1 reads the last layers only
                for w, g, p in (("a", ga, pa), ("b", gb, pb)):
                    parts[f"{prefix}labels_{w}{x}"] = part(f"{prefix}labels_{w}{x}", [list(g)[-1]], ["class labels"],
                                                           [layers[-1:] for layers in p], label_prepared)
        floor_of_key = None
        if seeds:  # each further draw measured on all n images: the same statistics as the parts, no subsamples
            values = {name: [parts[f"twin_{name}"].full.values] for name in FLOOR_PARTS if f"twin_{name}" in parts}
            label_full = None if labels is None else [prepare_labels(K, key) for K in labels.values()]
            for grams_of_draw in drawn:
                for r, (ga, gb) in grams_of_draw.items():
                    pa, pb = ([prepare(K, key) for K in g.values()] for g in (ga, gb))
                    values[f"cross{suffix(r)}"].append(matrix(pa, pb, key))
                    if labels is not None:
                        for w, p in (("a", pa), ("b", pb)):
                            values[f"labels_{w}{suffix(r)}"].append(matrix(p[-1:], label_full, key))
            floor_of_key = {"seeds": seeds, "values": values, "null": {}}
        if paths[key] is not None:
            _save_measure(paths[key], parts, floor_of_key, settings.fingerprint(), n)
        out[key] = {"parts": parts, "floor": floor_of_key,
                    "judgements": judged(parts, labels is not None, settings.level, floor_of_key)}
    return out


def _save_measure(path, parts: dict, floor_of_key: dict | None, fingerprint: str, n: int) -> None:
    """One measure's parts (values on all images and on each subsample, layer names) and its floor draws, as
    arrays in one .npz (helpers.report.cached.save_arrays: loaded only with the same settings and n)."""
    arrays = {}
    for name, part in parts.items():
        arrays[f"{name}@full"] = part.full.values
        arrays[f"{name}@subs"] = part.sub_values
        arrays[f"{name}@rows"], arrays[f"{name}@cols"] = np.array(part.full.rows), np.array(part.full.cols)
    for name, draws in (floor_of_key or {}).get("values", {}).items():
        arrays[f"{name}@floor"] = np.stack(draws)
    save_arrays(path, arrays, fingerprint, n)


def _load_measure(path, key: str, samples: list, n: int, level: float, seeds: list, log) -> tuple:
    """(parts, floor) of one measure as _save_measure wrote them; `samples` as compute_measures' (None, then the
    index of each subsample)."""
    from helpers.minibatch_cka import CKAMatrix
    from helpers.report.compute import Part

    arrays = load_arrays(path)
    if log is not None:
        log.append(f"{Path(path).name}: loaded (finished earlier)")
    parts = {}
    for name in [k[:-len("@full")] for k in arrays if k.endswith("@full")]:
        rows, cols = [str(x) for x in arrays[f"{name}@rows"]], [str(x) for x in arrays[f"{name}@cols"]]
        full, *subs = [CKAMatrix(values, rows, cols, estimator=KEYS[key], n_examples=n if idx is None else len(idx))
                       for values, idx in zip([arrays[f"{name}@full"], *arrays[f"{name}@subs"]], samples)]
        parts[name] = Part(name, full, subs, level)
    floor_values = {k[:-len("@floor")]: list(v) for k, v in arrays.items() if k.endswith("@floor")}
    floor_of_key = {"seeds": seeds, "values": floor_values, "null": {}} if seeds else None
    return parts, floor_of_key


def _policies(settings, ma, mb) -> dict:
    """{reading: (policy of A, policy of B)} for the classifier reading ('head') and all tokens ('tokens')."""
    from helpers.report.controls import classifier_policy

    return {"head": (classifier_policy(ma), classifier_policy(mb)), "tokens": (settings.policy_a, settings.policy_b)}


# --------------------------------------------------------------------------- the words


CLAIM_WORDS = {"R1": "the class-information order of the last layers (R1)",
               "R2": "the last layer of B has a counterpart in A beyond the untrained draws (R2)",
               "R3": "matched depth follows depth beyond the untrained draws (R3)"}


def conclusion(by_reading: dict) -> str:
    """One word for a claim under one measure, from its verdicts under both readings (as the summary decides)."""
    from helpers.report.controls import agree, learned, unjudged

    if unjudged(by_reading):
        return "not judged"
    if not agree(by_reading):
        return "readings disagree"
    if not learned(by_reading):
        return "not shown"
    if "A - B" in by_reading["head"].measure:
        return "holds, A higher"
    if "B - A" in by_reading["head"].measure:
        return "holds, B higher"
    return "holds"


def sentences(measured: dict, cka_judgements: dict, A: str, B: str) -> list:
    """One sentence per judged conclusion: 'agrees across measures (CKA: holds; Procrustes: holds)', the same with
    ', and no measure supports it' when every measure finds the readings disagree or the effect not shown, or
    'DEPENDS ON THE MEASURE (...)'."""
    keys = keys_of(measured)
    if not keys:
        return [measured["note"]] if "note" in measured else []
    out = []
    for claim in cka_judgements:
        words = {"CKA": conclusion(cka_judgements[claim])}
        words.update({KEYS[k]: conclusion(measured[k]["judgements"][claim]) for k in keys})
        listed = "; ".join(f"{m}: {w}" for m, w in words.items())
        what = CLAIM_WORDS[claim].replace(" B ", f" {B} ").replace(" A ", f" {A} ")
        same = len(set(words.values())) == 1
        holds = next(iter(words.values())).startswith("holds")
        verdict = ("agrees across measures" + ("" if holds else ", and no measure supports it")) if same \
            else "DEPENDS ON THE MEASURE"
        out.append(f"{what[0].upper()}{what[1:]}: {verdict} ({listed}; the other measures on the first "
                   f"{measured['n_images']} images).")
    return out


def table(measured: dict, cka_judgements: dict) -> str:
    """Markdown: each claim and reading, its effect against its noise, the untrained draws and the verdict, per measure."""
    from helpers.report.controls import READING_WORDS, _effect_text

    keys = keys_of(measured)
    if not keys:
        return ""
    rows = ["| conclusion | reading | " + " | ".join(["CKA"] + [KEYS[k] for k in keys]) + " |",
            "|---|---|" + "---|" * (1 + len(keys))]
    for claim, by_reading in cka_judgements.items():
        for r in by_reading:
            cells = [_effect_text(by_reading[r])] + [_effect_text(measured[k]["judgements"][claim][r]) for k in keys]
            rows.append(f"| {claim} | {READING_WORDS[r]} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


CLAIMS_HEADER = ["claim", "reading", "measure", "effect", "noise", "spread_rule", "untrained_draws", "untrained_seeds",
                 "untrained_min", "untrained_max", "null_shuffles", "null_95th", "verdict"]


def verdict_row(claim: str, reading: str, name: str, v) -> list:
    """One row of CLAIMS_HEADER for a Verdict: its effect and noise, the untrained draws (count, seeds, range) and
    the shuffled-image null (count, 95th percentile; empty for R1 and the other measures)."""
    from helpers.verdicts import null_level

    draws, null = v.floor_draws or [], v.null or []
    return [claim, reading, name, v.effects[0] if v.effects else None, v.noise[0] if v.noise else None, v.spread_rule,
            len(draws), " ".join(str(s) for s in (v.floor_seeds or [])), min(draws) if draws else None,
            max(draws) if draws else None, len(null), null_level(null) if null else None, v.words()]


def claims_rows(measured: dict, cka_judgements: dict) -> list:
    """Rows (CLAIMS_HEADER) for tables/verdicts.csv and measure_claims.csv: each claim, reading and measure."""
    keys = keys_of(measured)
    rows = []
    for claim, by_reading in cka_judgements.items():
        for r in by_reading:
            for name, v in [("CKA", by_reading[r])] + [(KEYS[k], measured[k]["judgements"][claim][r]) for k in keys]:
                rows.append(verdict_row(claim, r, name, v))
    return rows


def methods_paragraph(measured: dict) -> str:
    """METHODS.md's paragraph on the other measures (empty without any)."""
    keys = keys_of(measured)
    if not keys:
        return ""
    described = "; ".join(DESCRIPTIONS[k] for k in keys)
    cited = " ".join(REFERENCES[k] for k in keys)
    return (f"\n## Other similarity measures\n\nEach comparative conclusion was recomputed with {described}. They "
            f"compare every pair of images at once, so they ran on the first {measured['n_images']} images of the set "
            f"(one forward pass per model and reading, each layer kept as its Gram matrix), with intervals from "
            f"{measured['repeats']} disjoint subsamples of those images, and were judged by the same rule as CKA (the "
            "effect against its interval and any reference spread, and against the same untrained draws, measured on "
            f"these images), under both readings. A conclusion agrees across measures when every measure reaches the same verdict.\n\n{cited}\n")


def caption(measured: dict) -> str:
    """CAPTIONS.md's entry for the measures' tables (empty without other measures)."""
    keys = keys_of(measured)
    if not keys:
        return ""
    names = ", ".join(KEYS[k] for k in keys)
    return (f"\n**tables/measure_claims.csv** Each comparative conclusion (R1-R3) under both readings and each measure "
            f"(CKA, {names}): the effect, its noise, the untrained draws (count, seeds, range), CKA's shuffled-image null and the verdict of helpers.verdicts; "
            f"{names} on the first {measured['n_images']} images, with {measured['repeats']} disjoint subsamples for "
            f"the noise. **tables/measure_<name>.npz** every matrix those verdicts rest on, with its subsample values.\n")
