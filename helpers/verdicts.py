"""One rule decides whether a claim of the paper holds on a track: the measured effect against its controls.

Every claim (F1.1, F1.2, ... in `CLAIMS`) is turned into one signed number per training run (seed),
its *effect*, with the sign chosen so that a positive effect is the paper's direction. For example
F1.1 "the ViT is more uniform than the ResNet" has effect = mean off-diagonal CKA of the ViT minus
that of the ResNet. Three controls say how large an effect must be before it counts:

    interval   the half-width of a 90% interval of the effect over image subsamples
               (helpers.intervals): how much the number moves with the images drawn.
    spread     the run-to-run spread: how far apart two runs that should agree come out (a second
               seed, or a reference model). One number for the claim, in the effect's units.
    floor      the same effect measured on the untrained twins (random weights, same architecture).

The rule, stated once (the README repeats it):

    noise of seed i     = max(interval_i, spread)        (with neither measured, the verdict is "not measured")
    seed i shows it     if effect_i >  noise_i
    seed i reverses it  if effect_i < -noise_i

    holds                  every seed shows it, and there are at least two seeds
    holds in k of n seeds  k seeds show it, 0 < k (one seed alone is never more than "holds in 1 of 1")
    opposite               no seed shows it and more than half reverse it
    within noise           no seed shows it, at most half reverse it
    not measured           no effect was measured on this track

    "not learned" is written next to a verdict that holds (in some or all seeds) when, in every seed
    that shows it, the effect exceeds the untrained floor by no more than that seed's noise
    (effect_i - floor <= max(noise_i, floor interval)): the architecture shows it before training.

Claims of sameness ("A performs like B") use `judge_alike`: effect = |A - B|, and a seed shows the
claim when the difference is within its noise; none within noise is "opposite" (they differ).

    v = judge("F1.1", effects=[0.284, 0.307], intervals=[0.010, 0.012], spread=0.02, floor=0.131)
    v.verdict            # 'holds'
    print(v.line())      # F1.1  holds  | effect +0.284, +0.307 | noise 0.020, 0.020 | untrained +0.131
    save("06", [v], track)               # outputs/verdicts/lite/06.json, read back by the scorecard
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from helpers.claims import CLAIMS, REPORT_CLAIMS, claims_of

LEVEL = 0.9  # the image-subsample intervals are 90% intervals (helpers.intervals.subsample_interval)
VERDICTS = ("holds", "holds in k of n seeds", "within noise", "opposite", "not measured")
NOT_LEARNED = "not learned"


@dataclass
class Verdict:
    """A claim's verdict on one track, with the numbers it rests on (all in the effect's units)."""

    claim: str                                    # "F1.1"
    verdict: str                                  # one of VERDICTS, with k and n filled in
    effects: list = field(default_factory=list)   # one per seed; > 0 is the paper's direction
    noise: list = field(default_factory=list)     # max(interval_i, spread) per seed
    intervals: list | None = None                 # image-subsample half-widths per seed
    spread: float | None = None                   # run-to-run spread
    floor: float | None = None                    # the untrained twin's effect
    tag: str = ""                                 # "not learned", or ""
    seeds: list = field(default_factory=list)     # labels of the runs, e.g. ["seed 0", "seed 1"]
    measure: str = ""                             # what the effect is, in words
    note: str = ""                                # what the reader should know next to the numbers
    alike: bool = False                           # a claim of sameness (judge_alike)

    @property
    def shown(self) -> int:
        """How many seeds show the claim."""
        return sum(_shows(e, z, self.alike) for e, z in zip(self.effects, self.noise))

    def words(self) -> str:
        """The verdict with its tag: 'holds in 2 of 3 seeds (not learned)'."""
        return f"{self.verdict} ({self.tag})" if self.tag else self.verdict

    def numbers(self) -> str:
        """The evidence in one line: effects per seed, the noise each was judged against, the floor."""
        if not self.noise:
            measured = ("effect " + ", ".join(f"{e:+.3f}" for e in self.effects) + "; ") if self.effects else ""
            return measured + (self.note or "not measured on this track")
        parts = ["effect " + ", ".join(f"{e:+.3f}" for e in self.effects)]
        parts.append("noise " + ", ".join(f"{z:.3f}" for z in self.noise))
        if self.floor is not None:
            parts.append(f"untrained {self.floor:+.3f}")
        if self.seeds:
            parts.append(", ".join(self.seeds))
        return " | ".join(parts)

    def line(self) -> str:
        return f"{self.claim:6s} {self.words():38s} | {self.numbers()}"


def _check_numbers(name: str, values, n: int | None = None) -> list:
    values = [float(v) for v in np.ravel(np.asarray(values, dtype=np.float64))]
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"{name} has a NaN or infinite value ({values}): a verdict needs measured numbers; "
                         "find where the measurement broke, or pass effects=[] for 'not measured'.")
    if n is not None and len(values) != n:
        raise ValueError(f"{name} has {len(values)} values for {n} effects: give one per seed, in the same order.")
    return values


def _noise(effects: list, intervals, spread) -> list:
    """max(interval_i, spread) per seed; at least one of the two must be given."""
    if intervals is None and spread is None:
        raise ValueError("a verdict needs a noise estimate: give intervals= (half-widths over image subsamples, "
                         "helpers.intervals) or spread= (the run-to-run spread), or both.")
    half = _check_numbers("intervals", intervals, len(effects)) if intervals is not None else [0.0] * len(effects)
    spread_ = 0.0 if spread is None else _check_numbers("spread", [spread])[0]
    if min(half + [spread_]) < 0:
        raise ValueError(f"interval half-widths and the spread are sizes and cannot be negative (got {half}, {spread_}).")
    return [max(h, spread_) for h in half]


def _shows(effect: float, noise: float, alike: bool) -> bool:
    return abs(effect) <= noise if alike else effect > noise


def _verdict_word(shown: int, reversed_: int, n: int) -> str:
    if n == 0:
        return "not measured"
    if shown == n and n >= 2:
        return "holds"
    if shown > 0:
        return f"holds in {shown} of {n} seeds"
    return "opposite" if reversed_ > n / 2 else "within noise"


def _known(claim: str) -> str:
    if claim not in CLAIMS and claim not in REPORT_CLAIMS:  # REPORT_CLAIMS: helpers.report's comparisons (R1, ...)
        from difflib import get_close_matches
        close = get_close_matches(claim, list(CLAIMS), n=3)
        raise KeyError(f"unknown claim {claim!r}" + (f"; did you mean {', '.join(close)}?" if close else "")
                       + " The numbered claims are in helpers/claims.py.")
    return claim


def judge(claim: str, effects, intervals=None, spread=None, floor=None, floor_interval: float = 0.0,
          seeds=None, measure: str = "", note: str = "") -> Verdict:
    """The verdict of `claim` from its effect per seed and its controls (module docstring).

    effects: (n,) one signed effect per seed, > 0 in the paper's direction; [] means not measured.
    intervals: (n,) half-widths of each effect's 90% interval over image subsamples, or None.
    spread: the run-to-run spread (a number >= 0), or None. At least one of intervals and spread.
    floor: the untrained twin's effect (a number), or None when there is no untrained control.
    floor_interval: the half-width of the floor's own interval.
    """
    _known(claim)
    effects = _check_numbers("effects", effects)
    seeds = list(seeds) if seeds is not None else []
    if seeds and len(seeds) != len(effects):
        raise ValueError(f"{len(seeds)} seed labels for {len(effects)} effects: give one label per effect.")
    if not effects:
        return Verdict(claim, "not measured", measure=measure, note=note)
    if intervals is None and spread is None:  # e.g. a full-track run on too few images for an interval, one model
        return Verdict(claim, "not measured", effects, [], None, None, floor, "", seeds, measure,
                       "no noise estimate: too few images for an interval over subsamples, and no second run")
    noise = _noise(effects, intervals, spread)
    shown = [_shows(e, z, alike=False) for e, z in zip(effects, noise)]
    reversed_ = sum(e < -z for e, z in zip(effects, noise))
    tag = ""
    if floor is not None:
        floor = _check_numbers("floor", [floor])[0]
        learned = [e - floor > max(z, floor_interval) for e, z, s in zip(effects, noise, shown) if s]
        if any(shown) and not any(learned):
            tag = NOT_LEARNED
    return Verdict(claim, _verdict_word(sum(shown), reversed_, len(effects)), effects, noise,
                   None if intervals is None else _check_numbers("intervals", intervals),
                   None if spread is None else float(spread), floor, tag, seeds, measure, note)


def judge_alike(claim: str, differences, intervals=None, spread=None, seeds=None, measure: str = "",
                note: str = "") -> Verdict:
    """The verdict of a claim of sameness: seed i shows it when |difference_i| <= its noise.

    differences: (n,) A - B per seed. All within noise: holds; some: holds in k of n seeds;
    none: opposite (the two differ beyond noise). There is no untrained floor for sameness.
    """
    _known(claim)
    differences = _check_numbers("differences", differences)
    if not differences:
        return Verdict(claim, "not measured", measure=measure, note=note, alike=True)
    if intervals is None and spread is None:
        return Verdict(claim, "not measured", differences, [], None, None, None, "", list(seeds or []), measure,
                       "no noise estimate: too few images for an interval over subsamples, and no second run", True)
    noise = _noise(differences, intervals, spread)
    shown = sum(_shows(d, z, alike=True) for d, z in zip(differences, noise))
    word = "opposite" if shown == 0 else _verdict_word(shown, 0, len(differences))
    return Verdict(claim, word, differences, noise, None if intervals is None else _check_numbers("intervals", intervals),
                   None if spread is None else float(spread), None, "", list(seeds or []), measure, note, alike=True)


def not_measured(claim: str, why: str) -> Verdict:
    """A claim this track does not measure, with the reason (e.g. 'one Mixer size only')."""
    return Verdict(_known(claim), "not measured", note=why)


# ---------------------------------------------------------------------------------------------
# Saving, showing and reading verdicts

def verdict_dir(track: str, root=None) -> Path:
    """Where a notebook saves its verdicts: OUTPUT_DIR/verdicts/TRACK (or root/TRACK)."""
    from helpers.course import OUTPUT_DIR
    return Path(root if root is not None else OUTPUT_DIR / "verdicts") / track


def show(verdicts: list) -> None:
    """Print the verdict table: one line per claim, with its numbers."""
    for v in verdicts:
        print(v.line())


def show_words(verdicts: list) -> None:
    """Print only the claim numbers and verdict words (stable across machines: nbval checks this output)."""
    for v in verdicts:
        print(f"{v.claim:6s} {v.words()}")


def save(notebook: str, verdicts: list, track: str, root=None) -> Path:
    """Write `verdicts` of notebook `notebook` ('06') as JSON under verdict_dir(track). Returns the file."""
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
    record = {"notebook": notebook, "track": track, "verdicts": [_rounded(asdict(v)) for v in verdicts]}
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    return path


def _rounded(record: dict) -> dict:
    """Numbers to 4 decimals, so the saved file does not change with the last bits of float arithmetic."""
    def r(x):
        if isinstance(x, float):
            return round(x, 4)
        if isinstance(x, list):
            return [r(y) for y in x]
        return x
    return {k: r(v) for k, v in record.items()}


def load(track: str, root=None) -> dict:
    """Every saved verdict of a track: {claim: Verdict}, read from verdict_dir(track, root)."""
    out = {}
    folder = verdict_dir(track, root)
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        for record in json.loads(path.read_text())["verdicts"]:
            verdict = Verdict(**record)
            if verdict.claim in out:
                raise ValueError(f"claim {verdict.claim} is judged in two notebooks ({path.name} and another) under {folder}.")
            out[verdict.claim] = verdict
    return out
