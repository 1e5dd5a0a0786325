"""One protocol decides whether a claim of the paper holds on a track: the effect per run against its controls.

Every claim (F1.1, F1.2, ... in helpers.claims) is turned into one signed number per independent training
run, its *effect*, signed so that a positive effect is the paper's direction (helpers.effects computes
each claim's effect; notebooks, notebook 17 and the report only call it). The protocol, stated once (the
README's "How a claim is judged" repeats it):

    unit       what is counted: independent training runs of the model the claim is about ("ViT seeds").
               Where each unit is paired with several runs of another model ("each against 2 ResNet
               seeds"), the unit's effect is the mean over its partners. Units that are different
               models with one seed each ("blocks 1, 3, 5, one seed each") are *shown in k of n*, never
               "holds": "holds" needs at least two independent seeds of the same model.
    interval   half-width of the effect's 90% interval over image subsamples (helpers.intervals), per unit.
    spread     ONE definition: the range (max - min) of the effect over the independently trained units,
               and over each unit's partners when it has several, the larger. A claim with fewer than two
               units, or whose units are different models, borrows a spread from a named source
               (spread=, spread_source=), and says so.
    noise_i    max(interval_i, spread).
    floor      the same effect on at least FLOOR_MIN untrained draws (same architecture, random weights,
               seeds recorded; helpers.floors). Unit i is *learned* when effect_i - max(draws) > noise_i:
               beyond the upper end of what random weights give, by more than its noise.

    unit i shows the claim      effect_i >  noise_i           (a sameness claim: |effect_i| <= noise_i)
    unit i reverses it          effect_i < -noise_i

    holds                       every unit shows it, at least two units, units are seeds of one model
    holds in k of n <unit>      0 < k < n, or one seed alone ("holds in 1 of 1 seeds")
    shown in k of n <unit>      units that are not seeds of one model (one seed each), 0 < k
    opposite                    no unit shows it and more than half reverse it ("opposite in 1 of 1" for one)
    within noise                no unit shows it, at most half reverse it
    not measured                no effect was measured on this track

Tags beside a verdict that shows the claim: "learned in k of n" when k of the n showing units are learned
(no tag when all are); "below the untrained draws" when every showing unit is under the draws' lower end.

Size. A claim whose statement has a size in the paper carries the paper's number (helpers.claims.SIZES, in
the effect's units). Its verdict judges direction (above) and size separately: "size 0.1x the paper's".
Sameness. A claim that two things are alike is judged on |difference| <= noise, written with "≈".
Best matches. Statistics built from argmax picks (F1.5-F1.7, F10.4, the report's R2/R3) also get a
permutation null (helpers.nulls): the statistic with the images of one model shuffled, >= 20 times.
Robustness. Each verdict records whether its words change when the floor is any single draw instead of
all of them, or under the alternative spreads the caller names (alternatives=), and names what changes.

    v = judge("F1.1", effects=[0.28, 0.30, 0.27], intervals=[0.01, 0.01, 0.01],
              floor_draws=[0.18, 0.12, 0.20, 0.15, 0.17], floor_seeds=[0, 1, 2, 3, 4])
    v.words()     # 'holds (3 of 3 seeds)'
    save("06", [v], track)          # outputs/verdicts/lite/06.json, read back by the scorecard
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np

from helpers.claims import CLAIMS, REPORT_CLAIMS, SAMENESS, SIZES, claims_of
from helpers.guards import check_flag

LEVEL = 0.9          # the image-subsample intervals are 90% intervals (helpers.intervals.subsample_interval)
FLOOR_MIN = 5        # untrained draws a floor needs
DECIMALS = 6         # saved numbers; RESULTS.md and the notebooks print 3 of them
KINDS = ("holds", "holds in part", "within noise", "opposite", "not measured")
SPREAD_RULE = "range of the effect over the independently trained units (and over each unit's partners)"


@dataclass
class Verdict:
    """A claim's verdict on one track, with every number it rests on (all in the effect's units)."""

    claim: str                                    # "F1.1"
    verdict: str                                  # "holds", "holds in 2 of 3 ViT seeds", "opposite", ...
    effects: list = field(default_factory=list)   # one per unit; > 0 is the paper's direction
    noise: list = field(default_factory=list)     # max(interval_i, spread) per unit
    intervals: list | None = None                 # image-subsample half-widths per unit
    spread: float | None = None                   # the run-to-run spread
    floor: float | None = None                    # the upper end (max) of the untrained draws' effects
    tag: str = ""                                 # "learned in 1 of 3", "below the untrained draws", or ""
    seeds: list = field(default_factory=list)     # labels of the units, e.g. ["seed 0", "seed 1"]
    measure: str = ""                             # what the effect is, in words
    note: str = ""                                # what the reader should know next to the numbers
    alike: bool = False                           # a claim of sameness
    kind: str = "not measured"                    # one of KINDS
    unit: str = "seeds"                           # what a unit is ("ViT seeds (each against 2 ResNet seeds)")
    replicated: bool = True                       # units are independent seeds of one model
    spread_rule: str = ""                         # how the spread was obtained
    partners: list | None = None                  # per unit, the effects against each partner run
    floor_draws: list | None = None               # the effect on each untrained draw
    floor_seeds: list | None = None               # the seed of each draw
    learned: list | None = None                   # per unit: beyond the untrained draws by more than its noise
    size: str = ""                                # "size 0.10x the paper's 0.35" for claims with a paper size
    null: list | None = None                      # a permutation null of the statistic (helpers.nulls)
    robustness: str = ""                          # what the verdict depends on, or that it does not

    @property
    def shown(self) -> int:
        """How many units show the claim."""
        return sum(_shows(e, z, self.alike) for e, z in zip(self.effects, self.noise))

    def words(self) -> str:
        """The verdict in words with its unit, tag and size: 'holds (3 of 3 seeds; learned in 1 of 3)'."""
        if self.kind == "not measured":
            return "not measured"
        head = ("≈ " if self.alike else "") + self.verdict
        inside = [f"{len(self.effects)} of {len(self.effects)} {_flat(self.unit)}"] if self.verdict == "holds" else []
        inside += [self.tag] if self.tag else []
        words = head + (f" ({'; '.join(inside)})" if inside else "")
        return words + (f"; {self.size}" if self.size else "")

    def numbers(self) -> str:
        """The evidence in one line: effects per unit, their noise, the untrained draws and the null."""
        if not self.noise:
            measured = ("effect " + ", ".join(f"{e:+.3f}" for e in self.effects) + "; ") if self.effects else ""
            return measured + (self.note or "not measured on this track")
        parts = [("|difference| ≤ noise; difference " if self.alike else "effect ") + ", ".join(f"{e:+.3f}" for e in self.effects)]
        parts.append("noise " + ", ".join(f"{z:.3f}" for z in self.noise) + f" (spread {self.spread_rule})")
        if self.floor_draws:
            parts.append(f"untrained {min(self.floor_draws):+.3f} to {max(self.floor_draws):+.3f} "
                         f"over {len(self.floor_draws)} draws (seeds {', '.join(str(s) for s in self.floor_seeds)})")
        if self.null:
            parts.append(f"shuffled-image null {null_level(self.null):+.3f} (95th percentile of {len(self.null)})")
        if self.seeds:
            parts.append(", ".join(self.seeds))
        return " | ".join(parts)

    def line(self) -> str:
        return f"{self.claim:6s} {self.words():44s} | {self.numbers()}"


def _flat(unit: str) -> str:
    """'ViT seeds (each against 2 ResNet seeds)' -> 'ViT seeds, each against 2 ResNet seeds', so that a verdict
    never nests parentheses: 'holds (3 of 3 ViT seeds, each against 2 ResNet seeds; learned in 0 of 3)'."""
    return unit.replace(" (", ", ").replace(")", "")


# ---------------------------------------------------------------------------------------------
# Checking what comes in

def _check_numbers(name: str, values, n: int | None = None) -> list:
    """values as a list of floats: one number each (a 1-D sequence, or one number), all finite, n of them if given."""
    array = np.asarray(values)
    if array.dtype.kind not in "iuf" or isinstance(values, (str, bytes)):  # a string, True/False, None or a ragged list
        raise TypeError(f"{name} must be numbers, got {values!r}: pass the measured values as floats.")
    if array.ndim > 1:  # np.ravel used to flatten a table into one list of units
        raise ValueError(f"{name} must be one number per unit (1-D), got shape {array.shape}.")
    values = [float(v) for v in np.ravel(array.astype(np.float64))]
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"{name} has a NaN or infinite value ({values}): a verdict needs measured numbers; "
                         "find where the measurement broke, or pass effects=[] for 'not measured'.")
    if n is not None and len(values) != n:
        raise ValueError(f"{name} has {len(values)} values for {n} effects: give one per unit (seed), in the same order.")
    return values


def _units(effects) -> tuple:
    """effects as given -> (one effect per unit, partner effects per unit or None).

    effects: (n,) numbers, or (n, p) lists: unit i against each of its p partner runs (mean = the unit's effect)."""
    if len(effects) and all(isinstance(e, (list, tuple, np.ndarray)) for e in effects):
        partners = [_check_numbers(f"effects of unit {i}", e) for i, e in enumerate(effects)]
        if any(len(p) == 0 for p in partners):
            raise ValueError("a unit with no partner effects: give each unit at least one effect.")
        return [float(np.mean(p)) for p in partners], partners
    return _check_numbers("effects", effects), None


def _known(claim: str) -> str:
    if claim not in CLAIMS and claim not in REPORT_CLAIMS:  # REPORT_CLAIMS: helpers.report's comparisons (R1, ...)
        from difflib import get_close_matches
        close = get_close_matches(claim, list(CLAIMS) + list(REPORT_CLAIMS), n=3)
        raise KeyError(f"unknown claim {claim!r}" + (f"; did you mean {', '.join(close)}?" if close else "")
                       + " The numbered claims are in helpers/claims.py.")
    return claim


# ---------------------------------------------------------------------------------------------
# The protocol's pieces, each a short function

def seed_spread(effects: list, partners: list | None = None) -> float:
    """The one spread: range of the units' effects, and of each unit's partner effects, the larger. (n,) -> float."""
    effects = _check_numbers("effects", effects)  # a NaN made the range 0.0 (every comparison with NaN is False)
    partners = [_check_numbers("partner effects", p) for p in (partners or [])]
    ranges = [max(effects) - min(effects)] if len(effects) >= 2 else []
    ranges += [max(p) - min(p) for p in partners if len(p) >= 2]
    if not ranges:
        raise ValueError("one unit with one run has no spread of its own: pass spread= and spread_source= "
                         "(borrowed from a named source, e.g. 'the ViT seeds of F1.1').")
    return float(max(ranges))


def _shows(effect: float, noise: float, alike: bool) -> bool:
    return abs(effect) <= noise if alike else effect > noise


def _verdict_word(shown: int, reversed_: int, n: int, unit: str, replicated: bool, alike: bool) -> tuple:
    """(verdict, kind) from the counts of units that show and reverse the claim."""
    if n == 0:
        return "not measured", "not measured"
    if alike and shown == 0:
        return ("opposite" if n >= 2 else f"opposite in 1 of 1 {_flat(unit)}"), "opposite"  # they differ beyond noise
    if shown == n and n >= 2 and replicated:
        return "holds", "holds"
    if shown > 0:
        return f"{'holds' if replicated else 'shown'} in {shown} of {n} {_flat(unit)}", "holds in part"
    if reversed_ > n / 2:
        return ("opposite" if n >= 2 and replicated else f"opposite in {reversed_} of {n} {_flat(unit)}"), "opposite"
    return "within noise", "within noise"


def learned_tag(effects: list, noise: list, draws: list | None, alike: bool = False) -> tuple:
    """(per-unit learned flags or None, tag): each showing unit against the upper end of the untrained draws."""
    if not draws or alike:
        return None, ""
    top, bottom = max(draws), min(draws)
    learned = [e - top > z for e, z in zip(effects, noise)]
    showing = [i for i, (e, z) in enumerate(zip(effects, noise)) if _shows(e, z, False)]
    if not showing:
        return learned, ""
    if all(effects[i] < bottom - noise[i] for i in showing):
        return learned, "below the untrained draws"
    k = sum(learned[i] for i in showing)
    return learned, "" if k == len(showing) else f"learned in {k} of {len(showing)}"


def size_words(claim: str, effects: list) -> str:
    """'size 0.10x the paper's 0.35' (median over units) for a claim with a paper size, else ''."""
    paper = SIZES.get(claim)
    if paper is None or not effects:
        return ""
    ratio = float(np.median(effects)) / paper.value
    how = "about the paper's" if 0.5 <= ratio <= 2 else ("smaller than the paper's" if ratio < 0.5 else "larger than the paper's")
    return f"size {how}: {ratio:.2f}x its {paper.value:g} ({paper.words})"


def null_level(null: list, level: float = 0.95) -> float:
    """The permutation null's upper quantile: the chance level a statistic must beat."""
    values = _check_numbers("null", null)
    if not values:
        raise ValueError("the null has no values: shuffle the images at least 20 times (helpers.nulls).")
    if not 0 < level < 1:
        raise ValueError(f"level must be between 0 and 1 (e.g. 0.95), got {level}.")
    return float(np.quantile(np.asarray(values), level))


# ---------------------------------------------------------------------------------------------
# Judging

def judge(claim: str, effects, intervals=None, *, spread=None, spread_source: str = "", floor_draws=None,
          floor_seeds=None, unit: str = "seeds", replicated: bool = True, seeds=None, measure: str = "",
          note: str = "", null=None, alternatives: dict | None = None, alike: bool | None = None) -> Verdict:
    """The verdict of `claim` under the one protocol (module docstring).

    effects: (n,) one signed effect per unit (> 0 is the paper's direction), or (n, p) per unit against each of
        p partner runs; [] means not measured. For a sameness claim: the difference A - B per unit.
    intervals: (n,) 90% half-widths over image subsamples (for partners: the largest of each unit's), or None.
    spread, spread_source: only with fewer than two units (or units that are different models) and no
        partners: a borrowed spread and where it comes from.
    floor_draws, floor_seeds: the effect on >= FLOOR_MIN untrained draws and their seeds (helpers.floors).
    unit, replicated: what a unit is; replicated=False when the units are different models, one seed each.
    null: a permutation null of the statistic (helpers.nulls), printed beside the floor.
    alternatives: {name: spread} other spread conventions to test the verdict against (robustness).
    alike: a sameness claim; by default helpers.claims.SAMENESS says.
    """
    _known(claim)
    alike = claim in SAMENESS if alike is None else check_flag(alike, "alike")
    replicated = check_flag(replicated, "replicated")
    if not isinstance(unit, str) or not unit.strip():
        raise ValueError(f"unit names what an effect was measured on (e.g. 'ViT seeds'), got {unit!r}.")
    if isinstance(effects, (str, bytes)):
        raise TypeError(f"effects must be numbers, got {effects!r}: pass the measured values as floats.")
    effects, partners = _units(list(effects) if effects is not None else [])
    seeds = [str(s) for s in seeds] if seeds is not None else []  # labels, e.g. 'seed 0'
    if seeds and len(seeds) != len(effects):
        raise ValueError(f"{len(seeds)} unit labels for {len(effects)} effects: give one label per effect.")
    if len(set(seeds)) < len(seeds):
        raise ValueError(f"unit labels {seeds} repeat a label: each effect is one unit (one training run), named once.")
    if null is not None and len(_check_numbers("null", null)) == 0:
        raise ValueError("null is empty: give the statistic under every shuffle (helpers.nulls), or leave null out.")
    if not effects:
        return Verdict(claim, "not measured", measure=measure, note=note, alike=alike)
    half = _check_numbers("intervals", intervals, len(effects)) if intervals is not None else None
    spread, rule = _spread(effects, partners, spread, spread_source, replicated)
    if half is not None and min(half) < 0:
        raise ValueError(f"interval half-widths are sizes and cannot be negative (got {half}).")
    noise = [max(h, spread) for h in (half or [0.0] * len(effects))]
    draws, draw_seeds = _floor(floor_draws, floor_seeds, alike)
    verdict, kind = _judged(effects, noise, unit, replicated, alike)
    learned, tag = learned_tag(effects, noise, draws, alike)
    v = Verdict(claim, verdict, effects, noise, half, spread, None if draws is None else max(draws), tag, seeds,
                measure, note, alike, kind, unit, replicated, rule, partners, draws, draw_seeds, learned,
                "" if kind in ("not measured",) else size_words(claim, effects),
                None if null is None else _check_numbers("null", null))
    v.robustness = robustness(v, alternatives or {})
    return v


def judge_alike(claim: str, differences, intervals=None, **kwargs) -> Verdict:
    """A claim of sameness ("A performs like B"): unit i shows it when |difference_i| <= its noise."""
    return judge(claim, differences, intervals, alike=True, **kwargs)


def _spread(effects: list, partners, spread, source: str, replicated: bool = True) -> tuple:
    """(spread, rule): the units' own range, or a borrowed spread when there are too few units to have one.

    Units that are different models (replicated=False) have no seed spread of their own: their range measures
    how the models differ, not how a rerun moves, so they borrow one too (or use their partners' range)."""
    own = (replicated and len(effects) >= 2) or any(len(p) >= 2 for p in (partners or []))
    if own:
        if spread is not None:
            raise ValueError(f"{len(effects)} units have a spread of their own ({SPREAD_RULE}); do not pass spread=.")
        return seed_spread(effects if replicated else effects[:1], partners), SPREAD_RULE
    if spread is None or not source:
        raise ValueError(("one unit has" if replicated else "units that are different models have") + " no seed spread of "
                         "their own: pass spread= with spread_source= naming where it is borrowed from (e.g. "
                         "spread=v.spread, spread_source='the ViT seeds of F1.1').")
    value = _check_numbers("spread", [spread])[0]
    if value < 0:
        raise ValueError(f"the spread is a size and cannot be negative (got {value}).")
    return value, f"borrowed: {source}"


def _floor(draws, seeds, alike: bool) -> tuple:
    if draws is None:
        return None, None
    if alike:
        raise ValueError("a sameness claim has no untrained floor: leave floor_draws out.")
    draws = _check_numbers("floor_draws", draws)
    if len(draws) < FLOOR_MIN:
        raise ValueError(f"the floor needs at least {FLOOR_MIN} untrained draws (got {len(draws)}): one random draw is "
                         "not a floor; use helpers.floors.untrained_draws.")
    seeds = list(seeds) if seeds is not None else []
    if len(seeds) != len(draws):
        raise ValueError(f"{len(seeds)} floor seeds for {len(draws)} draws: record the seed of every draw (floor_seeds=).")
    return draws, check_floor_seeds(seeds)


def check_floor_seeds(seeds) -> list:
    """The seeds of a floor's untrained draws, as a list: at least FLOOR_MIN, none twice (one seed twice is one
    draw counted twice: the same seed builds the same untrained model)."""
    seeds = list(seeds)
    if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise TypeError(f"floor seeds must be whole numbers of 0 or more (the torch seeds of the draws), got {seeds}.")
    if len(seeds) < FLOOR_MIN:
        raise ValueError(f"a floor needs at least {FLOOR_MIN} untrained draws (got seeds {seeds}): one random draw is "
                         "not a floor; use helpers.floors.untrained_draws.")
    if len(set(seeds)) < len(seeds):
        raise ValueError(f"floor seeds {seeds} repeat a seed: the same seed builds the same untrained model, so give "
                         f"{len(seeds)} different ones (helpers.floors.FLOOR_SEEDS).")
    return seeds


def _judged(effects: list, noise: list, unit: str, replicated: bool, alike: bool) -> tuple:
    shown = sum(_shows(e, z, alike) for e, z in zip(effects, noise))
    reversed_ = 0 if alike else sum(e < -z for e, z in zip(effects, noise))
    return _verdict_word(shown, reversed_, len(effects), unit, replicated, alike)


def robustness(v: Verdict, alternatives: dict) -> str:
    """What the verdict's words depend on: each single floor draw, and each alternative spread named."""
    changes = []
    for name, spread in alternatives.items():
        if not isinstance(name, str) or _check_numbers(f"the alternative spread {name!r}", [spread])[0] < 0:
            raise ValueError(f"alternatives are {{name: spread}}, a spread being a size of 0 or more; got {name!r}: {spread!r}.")
    if v.floor_draws and len(v.floor_draws) > 1:
        single = [learned_tag(v.effects, v.noise, [d])[1] for d in v.floor_draws]
        differ = [s for s, t in zip(v.floor_seeds, single) if t != v.tag]
        if differ:
            changes.append(f"with one draw as the floor, the tag changes for draw seeds {', '.join(map(str, differ))}")
    for name, spread in alternatives.items():
        noise = [max(h, float(spread)) for h in (v.intervals or [0.0] * len(v.effects))]
        word, _ = _judged(v.effects, noise, v.unit, v.replicated, v.alike)
        if word != v.verdict:
            changes.append(f"with {name} as the spread ({float(spread):.3f}): {word}")
    tested = (["any single floor draw"] if v.floor_draws else []) + list(alternatives)
    if changes:
        return "depends: " + "; ".join(changes)
    return ("the same under " + ", ".join(tested)) if tested else ""


def not_measured(claim: str, why: str) -> Verdict:
    """A claim this track does not measure, with the reason (e.g. 'one Mixer size only')."""
    return Verdict(_known(claim), "not measured", note=why, alike=claim in SAMENESS)


# ---------------------------------------------------------------------------------------------
# Showing, saving and reading verdicts

def verdict_dir(track: str, root=None) -> Path:
    """Where a notebook saves its verdicts: OUTPUT_DIR/verdicts/TRACK (or root/TRACK)."""
    from helpers.course import OUTPUT_DIR
    if track not in ("lite", "full"):  # a typo would save (or look for) verdicts where RESULTS.md never reads them
        raise ValueError(f"track must be 'lite' or 'full' (models.choose_track() gives it), got {track!r}.")
    return Path(root if root is not None else OUTPUT_DIR / "verdicts") / track


def show(verdicts: list) -> None:
    """Print the verdict table: one line per claim, with its numbers."""
    for v in verdicts:
        print(v.line())


def show_words(verdicts: list) -> None:
    """Print only the claim numbers and verdict words (stable across machines: nbval checks this output)."""
    for v in verdicts:
        print(f"{v.claim:6s} {v.words()}")


def show_compact(verdicts: list) -> None:
    """The compact table a notebook leads with: claim, the paper's statement, verdict, effect against the paper."""
    for v in verdicts:
        statement = (CLAIMS.get(v.claim) or REPORT_CLAIMS[v.claim]).statement
        effect = ", ".join(f"{e:+.3f}" for e in v.effects) if v.effects else "-"
        paper = SIZES.get(v.claim)
        against = f" (paper: {paper.value:g})" if paper else ""
        print(f"{v.claim:6s} {statement}\n       -> {v.words()}\n       effect {effect}{against}")


def save(notebook: str, verdicts: list, track: str, root=None) -> Path:
    """Write `verdicts` of notebook `notebook` ('06') as JSON under verdict_dir(track). Returns the file."""
    strangers = [v for v in verdicts if not isinstance(v, Verdict)]
    if strangers:
        raise TypeError(f"save takes the Verdicts that judge() returns, got {strangers[0]!r}.")
    claims = [v.claim for v in verdicts]
    if len(set(claims)) != len(claims):
        raise ValueError(f"claims judged twice in notebook {notebook}: {sorted(c for c in claims if claims.count(c) > 1)}")
    expected = claims_of(notebook)
    if sorted(claims) != sorted(expected):
        raise ValueError(f"notebook {notebook} judges {sorted(claims)}, but helpers/claims.py gives it {expected}: "
                         "judge every claim of the notebook (not_measured() for one this track cannot measure), and no other.")
    folder = verdict_dir(track, root)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{notebook}.json"
    record = {"notebook": notebook, "track": track, "verdicts": [rounded(asdict(v)) for v in verdicts]}
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    return path


def rounded(value):
    """Numbers to DECIMALS places, so a saved file does not change with the last bits of float arithmetic."""
    if isinstance(value, float):
        return round(value, DECIMALS)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def from_record(record: dict) -> Verdict:
    """A Verdict from its saved dict (keys this version does not know are an error, not dropped)."""
    known = {f.name for f in fields(Verdict)}
    unknown = set(record) - known
    if unknown:
        raise ValueError(f"a saved verdict has fields {sorted(unknown)} this course version does not know: "
                         "re-run the notebook that saved it.")
    return Verdict(**record)


def load(track: str, root=None) -> dict:
    """Every saved verdict of a track: {claim: Verdict}, read from verdict_dir(track, root)."""
    out = {}
    folder = verdict_dir(track, root)
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            records = json.loads(path.read_text())["verdicts"]
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path} is not a verdict file this course wrote ({type(error).__name__}: {error}): "
                             "re-run the notebook that saves it, or remove the file.") from None
        for record in records:
            verdict = from_record(record)
            if verdict.claim in out:
                raise ValueError(f"claim {verdict.claim} is judged in two notebooks ({path.name} and another) under {folder}.")
            out[verdict.claim] = verdict
    return out
