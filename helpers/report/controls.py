"""The report's two readings and its controls, and the sentences judged by the course's one verdict rule.

Readings. A model's layers can be read two ways, and they can tell different stories:
    classifier reading   what the classifier head reads: the CLS token of a CLS ViT ('cls'), the average over
                         tokens or positions for a GAP ViT, a Mixer or a CNN ('mean');
    all tokens           every token (or spatial position) flattened ('all', or the --policy the user chose).
The all-token reading of a ViT is dominated by its patch tokens, which carry the image itself, so a CLS ViT's
class information is invisible there (notebook 07: lite-vit's CLS token has CKA 0.83 with the labels, its
flattened tokens 0.19). Every comparison is therefore made under both readings.

Controls. The untrained twin of each model (same architecture, random initialisation, seeded) is the floor: what
the architecture and the images give before any training. Optional reference checkpoints (--reference-a/-b, a
second seed or fine-tune) give the run-to-run spread.

Sentences. Each comparison (helpers.claims.REPORT_CLAIMS: R1, R2, R3) is judged by helpers.verdicts.judge under
each reading, with the interval half-width from the report's disjoint subsamples, the spread from the references
and the floor from the twins. A comparative sentence is written only when both readings get the same verdict;
otherwise the summary says that they disagree and what each shows.
"""

from __future__ import annotations

import numpy as np
import torch

from helpers import intervals, models, verdicts, zoo

READINGS = ("head", "tokens")  # part-name suffixes: "_head" for the classifier reading, "" for all tokens
READING_WORDS = {"head": "classifier reading", "tokens": "all tokens"}


def suffix(reading: str) -> str:
    """The part-name suffix of a reading: 'labels_a' (all tokens), 'labels_a_head' (classifier reading)."""
    return "_head" if reading == "head" else ""


def classifier_policy(model) -> str:
    """The token policy the classifier head reads: 'cls' for a ViT that pools its CLS token, else 'mean'
    (a GAP ViT, a Mixer, a CNN: the head reads the average over tokens or positions)."""
    prefix = int(getattr(model, "num_prefix_tokens", 0) or 0)
    return "cls" if prefix and getattr(model, "global_pool", None) == "token" else "mean"


def untrained_twin(name: str, like, seed: int = 0):
    """Model `name` with random weights (same architecture, initialisation seeded by `seed`), on `like`'s device.

    The twin of a local checkpoint is its timm architecture; the twin of a lite model is its zoo recipe.
    """
    device = next(like.parameters()).device
    with torch.random.fork_rng(devices=[]):  # leave the caller's random state untouched
        torch.manual_seed(seed)
        if name in zoo.ZOO:
            twin = models.load(name, pretrained=False, device=device)
        else:
            twin = models.load(name, pretrained=False, device=device, num_classes=getattr(like, "num_classes", 1000))
    return twin


# --------------------------------------------------------------------------- statistics with their subsamples


def _half_width(value: float, subs: list, level: float):
    """Half-width of the subsample interval of a number (None with fewer than 2 subsamples)."""
    if len(subs) < 2:
        return None
    low, high = intervals.subsample_interval(value, subs, level)
    return float((high - low) / 2)


def _stat(part, statistic, level: float):
    """(value on all images, interval half-width or None) of statistic(values matrix) of a Part."""
    value = float(statistic(part.full.values))
    return value, _half_width(value, [float(statistic(s.values)) for s in part.subsamples], level)


def _last_label(values):
    return values[-1, 0]


def _last_stat(values):
    return values[-1].max()


def _last_match(values):
    return values[:, -1].max()


def _depth_correlation(values):
    """Correlation between the depth of each layer of B and the depth of its best match in A (0 when constant)."""
    best = values.argmax(axis=0)
    if len(best) < 3 or np.ptp(best) == 0:
        return 0.0
    return float(np.corrcoef(np.arange(len(best)), best)[0, 1])


def _difference(part_x, part_y, statistic, level: float):
    """(value, half-width) of statistic(x) - statistic(y), subsample by subsample (the same images in both)."""
    value = float(statistic(part_x.full.values) - statistic(part_y.full.values))
    subs = [float(statistic(x.values) - statistic(y.values)) for x, y in zip(part_x.subsamples, part_y.subsamples)]
    return value, _half_width(value, subs, level)


# --------------------------------------------------------------------------- the judged comparisons


def _spread(parts: dict, name: str, measure) -> float | None:
    """|effect with the reference checkpoints - effect|: how far a second run moves it (None without references)."""
    if f"ref_{name}" not in parts:
        return None
    return abs(measure("ref_") - measure(""))


def judged(parts: dict, has_labels: bool, level: float) -> dict:
    """{claim: {reading: Verdict}} for R1 (labels; when the images have labels), R2 and R3, under both readings.

    R1's effect is oriented by the classifier reading (positive: the model it shows higher), so that the two
    readings agree only when they show the same order.
    """
    out = {}
    if has_labels:
        a, b = parts["labels_a_head"].full.values[-1, 0], parts["labels_b_head"].full.values[-1, 0]
        sign = 1.0 if a >= b else -1.0
        out["R1"] = {}
        for r in READINGS:
            x = suffix(r)

            def effect(prefix, x=x):
                return sign * (parts[f"{prefix}labels_a{x}"].full.values[-1, 0] - parts[f"{prefix}labels_b{x}"].full.values[-1, 0])

            value, half = _difference(parts[f"labels_a{x}"], parts[f"labels_b{x}"], _last_label, level)
            floor, floor_half = _difference(parts[f"twin_labels_a{x}"], parts[f"twin_labels_b{x}"], _last_label, level)
            spread = _spread(parts, f"labels_a{x}", effect) if f"ref_labels_a{x}" in parts and f"ref_labels_b{x}" in parts else None
            out["R1"][r] = verdicts.judge("R1", [sign * value], None if half is None else [half], spread, sign * floor,
                                          floor_half or 0.0, measure=f"last-layer label CKA, ({'A - B' if sign > 0 else 'B - A'})")
    for claim, statistic in (("R2", _last_match), ("R3", _depth_correlation)):
        out[claim] = {}
        for r in READINGS:
            x = suffix(r)
            value, half = _stat(parts[f"cross{x}"], statistic, level)
            floor, floor_half = _stat(parts[f"twin_cross{x}"], statistic, level)
            spread = (abs(float(statistic(parts[f"ref_cross{x}"].full.values)) - value)
                      if f"ref_cross{x}" in parts else None)
            out[claim][r] = verdicts.judge(claim, [value], None if half is None else [half], spread, floor, floor_half or 0.0)
    return out


def unjudged(by_reading: dict) -> bool:
    """True when a reading has no verdict (no noise estimate: --repeats 0 and no references)."""
    return any(v.verdict == "not measured" for v in by_reading.values())


NO_NOISE = ("not judged: there is no noise estimate (--repeats 0 gives no image intervals and no --reference gives no "
            "run-to-run spread), so no comparison is claimed")


def agree(by_reading: dict) -> bool:
    """True when both readings get the same verdict (word and tag): only then is a comparative sentence written."""
    words = {v.words() for v in by_reading.values()}
    return len(words) == 1 and "not measured" not in next(iter(words))


def _effect_text(v) -> str:
    if not v.noise:
        return f"{v.effects[0]:+.3f} (no noise estimate)" if v.effects else "not measured"
    floor = f", untrained twins {v.floor:+.3f}" if v.floor is not None else ""
    spread = f", reference spread {v.spread:.3f}" if v.spread is not None else ""
    return f"{v.effects[0]:+.3f} against noise {v.noise[0]:.3f}{spread}{floor}: {v.words()}"


def _learned(v) -> bool:
    return v.shown > 0 and v.tag != verdicts.NOT_LEARNED


def sentences(judgements: dict, A: str, B: str, layer_names: dict) -> list:
    """The summary's comparative sentences, one per claim, each from judgements (see judged)."""
    s = []
    if "R1" in judgements:
        vs = judgements["R1"]
        higher, lower = (A, B) if "A - B" in vs["head"].measure else (B, A)
        both = "; ".join(f"{READING_WORDS[r]} {_effect_text(v)}" for r, v in vs.items())
        what = (f"Class information of the last recorded layers ({A}: {layer_names['a']}, {B}: {layer_names['b']}; "
                f"difference in CKA with the labels, {higher} minus {lower})")
        if unjudged(vs):
            s.append(f"{what}: {NO_NOISE} ({both}).")
        elif agree(vs) and _learned(vs["head"]):
            s.append(f"{what}: both readings agree that {higher} holds more class information than {lower}, beyond the "
                     f"untrained twins ({both}).")
        elif agree(vs):
            s.append(f"{what}: both readings give the same verdict, and it claims no learned order: {both}.")
        else:
            s.append(f"{what}: the two readings DISAGREE, so no order is claimed. Under the {both}. Which one answers "
                     "your question depends on what you ask: the classifier reading is what the head uses; all tokens "
                     "include the patch tokens, which carry the image itself.")
    texts = {"R2": (f"the last recorded layer of {B} ({layer_names['b']}) has a counterpart in {A} that is more alike "
                    "than in the untrained twins", "best-match CKA of that layer"),
             "R3": (f"matched depth follows depth (deeper layers of {B} match deeper layers of {A}), beyond the untrained "
                    "twins", "correlation of the depths")}
    for claim, (claim_words, measure) in texts.items():
        vs = judgements[claim]
        both = "; ".join(f"{READING_WORDS[r]} {_effect_text(v)}" for r, v in vs.items())
        if unjudged(vs):
            s.append(f"Whether {claim_words}: {NO_NOISE} ({measure}: {both}).")
        elif agree(vs) and _learned(vs["head"]):
            s.append(f"Both readings agree that {claim_words} ({measure}: {both}).")
        elif agree(vs):
            s.append(f"Both readings agree that it is NOT shown that {claim_words} ({measure}: {both}).")
        else:
            s.append(f"The readings DISAGREE on whether {claim_words}, so no claim is made ({measure}: {both}).")
    return s


def readings_table(parts: dict, has_labels: bool, A: str, B: str, level: float) -> str:
    """A markdown table of the key numbers under both readings, the trained models beside their untrained twins."""
    rows = ["| quantity | reading | trained | untrained twins | reference |", "|---|---|---|---|---|"]

    def cell(name, statistic):
        if name not in parts:
            return "-"
        value, half = _stat(parts[name], statistic, level)
        return f"{value:.3f}" + (f" ± {half:.3f}" if half is not None else "")

    quantities = []
    if has_labels:
        quantities += [(f"label CKA, last layer of {A}", "labels_a", _last_label),
                       (f"label CKA, last layer of {B}", "labels_b", _last_label)]
    quantities += [(f"CKA with image statistics (brightness or colour), last layer of {A}", "stats_a", _last_stat),
                   (f"CKA with image statistics (brightness or colour), last layer of {B}", "stats_b", _last_stat)]
    quantities += [(f"best-match CKA of the last layer of {B}", "cross", _last_match),
                   ("matched-depth correlation", "cross", _depth_correlation)]
    for what, name, statistic in quantities:
        for r in READINGS:
            x = suffix(r)
            rows.append(f"| {what} | {READING_WORDS[r]} | {cell(name + x, statistic)} | {cell('twin_' + name + x, statistic)} "
                        f"| {cell('ref_' + name + x, statistic)} |")
    return "\n".join(rows)
