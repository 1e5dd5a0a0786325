"""The report's two readings and its controls, and the sentences judged by the course's one verdict rule.

Readings. A model's layers can be read two ways, and they can tell different stories:
    classifier reading   what the classifier head reads: the CLS token of a CLS ViT ('cls'), the average over
                         tokens or positions for a GAP ViT, a Mixer or a CNN ('mean');
    all tokens           every token (or spatial position) flattened ('all', or the --policy the user chose).
The all-token reading of a ViT is dominated by its patch tokens, which carry the image itself, so a CLS ViT's
class information is invisible there (notebook 07: lite-vit's CLS token has CKA 0.83 with the labels, its
flattened tokens 0.19). Every comparison is therefore made under both readings.

Controls. The floor is each comparison on FLOOR_DRAWS untrained draws of both architectures (random weights, seeds
--seed .. --seed+4, helpers.report.floor): what the architectures and the images give before any training. The
first draw is the "untrained twin" pair shown beside the trained models in the tables and figures. R2 and R3 also
get a shuffled-image null (helpers.nulls). Optional reference checkpoints (--reference-a/-b, a second seed or
fine-tune) give the run-to-run spread; without them there is none, and each verdict says so.

Sentences. Each comparison (helpers.claims.REPORT_CLAIMS: R1, R2, R3) is judged by helpers.verdicts.judge under
each reading, with the interval half-width from the report's disjoint subsamples, the spread from the references
(or none, recorded) and the floor from the untrained draws. A comparative sentence is written only when both readings get the same verdict;
otherwise the summary says that they disagree and what each shows.
"""

from __future__ import annotations

import numpy as np

from helpers import intervals, verdicts

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


def best_match_last(values) -> float:
    """R2's statistic: the CKA of B's last layer (last column) with its best match in A. (La, Lb) -> float."""
    return float(values[:, -1].max())


def depth_order_missing(values) -> str:
    """Why R3 cannot be measured on an (La, Lb) matrix ('' when it can): its correlation needs an order on both sides.
    With one layer of A every layer of B picks it, and depth_correlation's 0 would read as a measured 'no order'."""
    rows, cols = np.shape(values)
    if rows < 2 or cols < 3:
        return (f"the matched-depth correlation needs at least 2 layers of A and 3 of B (this run: {rows} and {cols}); "
                "give more layers with --layers-a/--layers-b")
    return ""


def depth_correlation(values) -> float:
    """R3's statistic: correlation between the depth of each layer of B and the depth of its best match in A.

    (La, Lb) -> float in [-1, 1]; 0 when every layer of B picks the same layer of A (no order to correlate)."""
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

UNIT = "checkpoint pairs"  # the report's one unit: one trained model of each architecture
REFERENCE_SOURCE = "the reference checkpoints (--reference-a/-b), |effect with them - effect|"
NO_SPREAD_RULE = ("none: one checkpoint of each model and no --reference-a/-b, so the noise is the image interval "
                  "alone")
NO_NOISE = ("not judged: there is no noise estimate (no image intervals and no --reference gives no "
            "run-to-run spread), so no comparison is claimed")


def _spread(parts: dict, name: str, measure) -> float | None:
    """|effect with the reference checkpoints - effect|: how far a second run moves it (None without references)."""
    if f"ref_{name}" not in parts:
        return None
    return abs(measure("ref_") - measure(""))


def _judge(claim: str, value: float, half, spread, draws, seeds, null, measure: str):
    """The verdict of one comparison under one reading (helpers.verdicts.judge, one unit: the trained pair).

    The spread: with reference checkpoints, how far they move the effect (a borrowed spread, named); without, none:
    the noise is the image interval alone and the verdict records that rule (judge needs a spread for one unit, so
    it gets 0 and the rule is rewritten to say there was none). With neither an interval nor a reference there is
    no noise at all, and the comparison is not judged."""
    common = dict(floor_draws=draws, floor_seeds=seeds, unit=UNIT, measure=measure, seeds=["the trained pair"],
                  null=null, note="" if draws else "no untrained floor: the draws were not computed")
    if half is None and spread is None:
        return verdicts.Verdict(claim, "not measured", effects=[value], note=NO_NOISE, floor_draws=draws,
                                floor_seeds=seeds, null=null, unit=UNIT, measure=measure, spread_rule=NO_SPREAD_RULE)
    v = verdicts.judge(claim, [value], None if half is None else [half], spread=0.0 if spread is None else spread,
                       spread_source=REFERENCE_SOURCE, **common)
    if spread is None:
        v.spread_rule = NO_SPREAD_RULE
    return v


def _draws(floor, effect_of_draw) -> tuple:
    """(the effect on each untrained draw, their seeds), or (None, None) without a floor. effect_of_draw(i) -> float."""
    if not floor or not floor.get("values"):
        return None, None
    return [float(effect_of_draw(i)) for i in range(len(floor["seeds"]))], list(floor["seeds"])


def judged(parts: dict, has_labels: bool, level: float, floor: dict | None = None) -> dict:
    """{claim: {reading: Verdict}} for R1 (labels; when the images have labels), R2 and R3, under both readings.

    floor: helpers.report.floor.floor_and_null's {'seeds', 'values': {part: [values per draw]}, 'null'}: each
    effect is also computed on every untrained draw (the floor), and R2/R3 get the shuffled-image null. Without it
    (None) the verdicts have no floor and say so.
    R1's effect is oriented by the classifier reading (positive: the model it shows higher), so that the two
    readings agree only when they show the same order.
    """
    out, values = {}, (floor or {}).get("values", {})
    null = (floor or {}).get("null", {})
    if has_labels:
        a, b = parts["labels_a_head"].full.values[-1, 0], parts["labels_b_head"].full.values[-1, 0]
        sign = 1.0 if a >= b else -1.0
        out["R1"] = {}
        for r in READINGS:
            x = suffix(r)

            def effect(prefix, x=x):
                return sign * (parts[f"{prefix}labels_a{x}"].full.values[-1, 0] - parts[f"{prefix}labels_b{x}"].full.values[-1, 0])

            value, half = _difference(parts[f"labels_a{x}"], parts[f"labels_b{x}"], _last_label, level)
            draws, seeds = _draws(floor, lambda i, x=x: sign * (values[f"labels_a{x}"][i][-1, 0] - values[f"labels_b{x}"][i][-1, 0]))
            spread = _spread(parts, f"labels_a{x}", effect) if f"ref_labels_a{x}" in parts and f"ref_labels_b{x}" in parts else None
            out["R1"][r] = _judge("R1", sign * value, half, spread, draws, seeds, None,
                                  f"last-layer label CKA, ({'A - B' if sign > 0 else 'B - A'})")
    for claim, statistic in (("R2", best_match_last), ("R3", depth_correlation)):
        out[claim] = {}
        for r in READINGS:
            x = suffix(r)
            missing = depth_order_missing(parts[f"cross{x}"].full.values) if claim == "R3" else ""
            if missing:
                out[claim][r] = verdicts.not_measured(claim, missing)
                continue
            value, half = _stat(parts[f"cross{x}"], statistic, level)
            draws, seeds = _draws(floor, lambda i, x=x, statistic=statistic: statistic(values[f"cross{x}"][i]))
            spread = (abs(float(statistic(parts[f"ref_cross{x}"].full.values)) - value)
                      if f"ref_cross{x}" in parts else None)
            out[claim][r] = _judge(claim, value, half, spread, draws, seeds, null.get(f"{claim}{x}"),
                                   {"R2": "best-match CKA of B's last layer", "R3": "matched-depth correlation"}[claim])
    return out


def why_unjudged(by_reading: dict) -> str:
    """The reason a comparison is not judged: no noise estimate, or the verdict's own note (e.g. too few layers)."""
    note = next(v.note for v in by_reading.values() if v.verdict == "not measured")
    return note if note == NO_NOISE else f"not judged: {note}"


def unjudged(by_reading: dict) -> bool:
    """True when a reading has no verdict (no noise estimate: no image intervals and no references)."""
    return any(v.verdict == "not measured" for v in by_reading.values())


def agree(by_reading: dict) -> bool:
    """True when both readings get the same verdict (word and tag): only then is a comparative sentence written."""
    words = {v.words() for v in by_reading.values()}
    return len(words) == 1 and "not measured" not in next(iter(words))


def seeds_text(seeds) -> str:
    """'seeds 0-4' for consecutive seeds, else 'seeds 0, 3, 7'."""
    seeds = [int(s) for s in seeds]
    if seeds == list(range(seeds[0], seeds[0] + len(seeds))) and len(seeds) > 2:
        return f"seeds {seeds[0]}-{seeds[-1]}"
    return "seeds " + ", ".join(map(str, seeds))


def controls_text(v) -> str:
    """', untrained -0.822 to +0.411 over 5 draws (seeds 0-4), shuffled-image null +0.102 (95th percentile of 20)'."""
    out = ""
    if v.floor_draws:
        out += (f", untrained {min(v.floor_draws):+.3f} to {max(v.floor_draws):+.3f} over {len(v.floor_draws)} draws "
                f"({seeds_text(v.floor_seeds)})")
    if v.null:
        out += f", shuffled-image null {verdicts.null_level(v.null):+.3f} (95th percentile of {len(v.null)} shuffles)"
    return out


def beats_null(v) -> bool:
    """True without a null, else when the effect exceeds the null's 95th percentile by more than its noise (the same
    rule as the floor's: helpers.nulls, a trained pair must beat the chance level of a best-match statistic)."""
    return not v.null or not v.noise or v.effects[0] - verdicts.null_level(v.null) > v.noise[0]


def _effect_text(v) -> str:
    if not v.noise:
        return (f"{v.effects[0]:+.3f} (no noise estimate{controls_text(v)})" if v.effects else "not measured")
    spread = f", reference spread {v.spread:.3f}" if v.spread_rule.startswith("borrowed") else ""
    chance = "" if beats_null(v) else "; NOT above the shuffled-image null by more than its noise"
    return f"{v.effects[0]:+.3f} against noise {v.noise[0]:.3f}{spread}{controls_text(v)}: {v.words()}{chance}"


def _learned(v) -> bool:
    """The trained pair shows the comparison, beyond the upper end of the untrained draws (no tag) and, for R2/R3,
    above the shuffled-image null by more than its noise."""
    return v.shown > 0 and not v.tag and beats_null(v)


def learned(by_reading: dict) -> bool:
    """True when the comparison is shown and learned (_learned) under every reading."""
    return all(_learned(v) for v in by_reading.values())


FLOOR_WORDS = "untrained copies of both architectures"


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
            s.append(f"{what}: {why_unjudged(vs)} ({both}).")
        elif agree(vs) and learned(vs):
            s.append(f"{what}: both readings agree that {higher} holds more class information than {lower}, beyond "
                     f"the {FLOOR_WORDS} ({both}).")
        elif agree(vs):
            s.append(f"{what}: both readings give the same verdict, and it claims no learned order: {both}.")
        else:
            s.append(f"{what}: the two readings DISAGREE, so no order is claimed. Under the {both}. Which one answers "
                     "your question depends on what you ask: the classifier reading is what the head uses; all tokens "
                     "include the patch tokens, which carry the image itself.")
    texts = {"R2": (f"the last recorded layer of {B} ({layer_names['b']}) has a counterpart in {A} that is more alike "
                    f"than in the {FLOOR_WORDS}", "best-match CKA of that layer"),
             "R3": (f"matched depth follows depth (deeper layers of {B} match deeper layers of {A}), beyond the "
                    f"{FLOOR_WORDS}", "correlation of the depths")}
    for claim, (claim_words, measure) in texts.items():
        vs = judgements[claim]
        both = "; ".join(f"{READING_WORDS[r]} {_effect_text(v)}" for r, v in vs.items())
        if unjudged(vs):
            s.append(f"Whether {claim_words}: {why_unjudged(vs)} ({measure}: {both}).")
        elif agree(vs) and learned(vs):
            s.append(f"Both readings agree that {claim_words} ({measure}: {both}).")
        elif agree(vs):
            s.append(f"Both readings agree that it is NOT shown that {claim_words} ({measure}: {both}).")
        else:
            s.append(f"The readings DISAGREE on whether {claim_words}, so no claim is made ({measure}: {both}).")
    return s


def readings_table(parts: dict, has_labels: bool, A: str, B: str, level: float, floor: dict | None = None) -> str:
    """A markdown table of the key numbers under both readings: the trained models, the first untrained draw (the
    twins, with its interval), the range over all untrained draws (floor: floor_and_null's dict) and the reference."""
    n = len((floor or {}).get("seeds", []))
    rows = [f"| quantity | reading | trained | untrained twins | untrained, {n} draws | reference |",
            "|---|---|---|---|---|---|"]

    def cell(name, statistic):
        if name not in parts:
            return "-"
        if statistic is depth_correlation and depth_order_missing(parts[name].full.values):
            return "not defined"
        value, half = _stat(parts[name], statistic, level)
        return f"{value:.3f}" + (f" ± {half:.3f}" if half is not None else "")

    def drawn(name, statistic):
        if statistic is depth_correlation and name in parts and depth_order_missing(parts[name].full.values):
            return "not defined"
        draws = [float(statistic(v)) for v in (floor or {}).get("values", {}).get(name, [])]
        return f"{min(draws):.3f} to {max(draws):.3f}" if draws else "-"

    quantities = []
    if has_labels:
        quantities += [(f"label CKA, last layer of {A}", "labels_a", _last_label),
                       (f"label CKA, last layer of {B}", "labels_b", _last_label)]
    quantities += [(f"CKA with image statistics (brightness or colour), last layer of {A}", "stats_a", _last_stat),
                   (f"CKA with image statistics (brightness or colour), last layer of {B}", "stats_b", _last_stat)]
    quantities += [(f"best-match CKA of the last layer of {B}", "cross", best_match_last),
                   ("matched-depth correlation", "cross", depth_correlation)]
    for what, name, statistic in quantities:
        for r in READINGS:
            x = suffix(r)
            rows.append(f"| {what} | {READING_WORDS[r]} | {cell(name + x, statistic)} | {cell('twin_' + name + x, statistic)} "
                        f"| {drawn(name + x, statistic)} | {cell('ref_' + name + x, statistic)} |")
    return "\n".join(rows)
