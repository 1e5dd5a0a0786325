"""The report's controls for R1-R3: the untrained floor over several seeded draws, and the shuffled-image null.

Floor. One random draw of untrained weights is not a floor for R2 and R3: they are built from argmax picks over
near-ties, and the matched-depth correlation of two untrained lite models ran from -0.82 to +0.82 over draws
(issue 40). So the report measures each comparison on FLOOR_DRAWS untrained draws, seeds --seed .. --seed+4:
draw s builds both architectures right after torch.manual_seed(s) (helpers.floors.untrained), so draw 0 of
--seed 0 is the seed-0 models' own start. The first draw is the report's "untrained twin" pair (its matrices,
with intervals, are in tables/twin_*); the others are computed on all images only, without subsample intervals,
since the protocol compares the trained pair with their upper end (helpers.verdicts). Cost: each further draw
runs each untrained model once per reading over the images (its cross and label CKA share those Grams).

Null. R2 (the best-match CKA of B's last layer) and R3 (the matched-depth correlation) pick an argmax in every
row, so they are never "zero by default". helpers.nulls shuffles which image B's rows belong to, SHUFFLES times,
from the Grams already computed (no model runs again), and the statistic on each shuffle is the chance level
printed beside the floor.

    floor = floor_and_null(settings, model_a, model_b, images, results)   # {'seeds', 'values', 'null', 'shuffles'}
    controls.judged(parts, has_labels, level, floor)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from helpers import floors, nulls, zoo
from helpers.verdicts import FLOOR_MIN

FLOOR_DRAWS = FLOOR_MIN           # untrained draws per comparison (the protocol's minimum)
SHUFFLES = nulls.SHUFFLES         # shuffles of the permutation null (20)
FLOOR_PARTS = ("cross", "cross_head", "labels_a", "labels_a_head", "labels_b", "labels_b_head")


def draw_seeds(base: int) -> list:
    """The seeds of the untrained draws: base, base+1, ..., base+FLOOR_DRAWS-1."""
    return list(range(int(base), int(base) + FLOOR_DRAWS))


def _untrained(name: str, like, seed: int):
    """Model `name` with the random weights of draw `seed`, on `like`'s device; a timm model keeps `like`'s classes."""
    device = next(like.parameters()).device
    extra = {} if name in zoo.ZOO else {"num_classes": getattr(like, "num_classes", 1000)}
    return floors.untrained(name, seed, device, **extra)


def draw_models(settings, model_a, model_b, seed: int) -> tuple:
    """(A's architecture, B's) with random weights, each built right after torch.manual_seed(seed); global RNG untouched."""
    return _untrained(settings.model_a, model_a, seed), _untrained(settings.model_b, model_b, seed)


def _readings(settings, ma, mb) -> dict:
    """{part suffix: (policy of A, policy of B)}: '' all tokens (--policy), '_head' the classifier reading."""
    from helpers.report.controls import classifier_policy

    return {"": (settings.policy_a, settings.policy_b), "_head": (classifier_policy(ma), classifier_policy(mb))}


def draw_values(settings, ma, mb, images) -> dict:
    """{part name: (rows, cols) CKA values} of one untrained pair on all images: cross and label CKA, both readings."""
    from helpers.compare import cka_matrix, label_cka_state
    from helpers.report.settings import layers_arg

    la, lb = layers_arg(settings.layers_a), layers_arg(settings.layers_b)
    classes = None if images.labels is None else np.unique(np.asarray(list(images.labels)))
    out = {}
    for x, (pa, pb) in _readings(settings, ma, mb).items():
        out[f"cross{x}"] = cka_matrix(ma, images, la, model_b=mb, layers_b=lb, policy_a=pa, policy_b=pb,
                                      batch_size=settings.batch_size, progress=False).values
        if classes is not None:  # the label CKA reuses the Grams the cross matrix just computed (helpers.gram_cache)
            for w, m, layers, p in (("a", ma, la, pa), ("b", mb, lb, pb)):
                accumulator, info = label_cka_state(m, images, layers, policy=p, batch_size=settings.batch_size,
                                                    classes=classes)
                out[f"labels_{w}{x}"] = accumulator.result(info).values
    return out


def null_values(settings, model_a, model_b, images) -> dict:
    """{'R2_head': [SHUFFLES floats], 'R3_head': ..., 'R2': ..., 'R3': ...}: the statistics with B's images shuffled."""
    from helpers.report.controls import best_match_last, depth_correlation
    from helpers.report.settings import layers_arg

    la, lb = layers_arg(settings.layers_a), layers_arg(settings.layers_b)
    out = {}
    for x, (pa, pb) in _readings(settings, model_a, model_b).items():
        null = nulls.shuffled_statistic(lambda v: {"R2": best_match_last(v), "R3": depth_correlation(v)},
                                        model_a, model_b, images, la, lb, pa, pb, settings.batch_size,
                                        shuffles=SHUFFLES, seed=settings.seed)
        out.update({f"{claim}{x}": np.asarray(values) for claim, values in null.items()})
    return out


def floor_and_null(settings, model_a, model_b, images, results: dict, log=None) -> dict:
    """The floor over the untrained draws and the null, each cached under <out>/cache (a rerun loads them).

    Returns {'seeds': [FLOOR_DRAWS seeds], 'values': {part name: [values on each draw]}, 'null': {name: [floats]},
    'shuffles': SHUFFLES}. Draw 0 (seed --seed) is the untrained twins already computed (results['parts']['twin_*'])."""
    from helpers.report.compute import cached_arrays

    cache, fp, log = Path(settings.out) / "cache", settings.fingerprint(), results["log"] if log is None else log
    parts, seeds = results["parts"], draw_seeds(settings.seed)
    values = {name: [parts[f"twin_{name}"].full.values] for name in FLOOR_PARTS if f"twin_{name}" in parts}
    null = cached_arrays(cache / "null.npz", fp, len(images), lambda: null_values(settings, model_a, model_b, images), log)
    for seed in seeds[1:]:
        def compute(seed=seed):
            return draw_values(settings, *draw_models(settings, model_a, model_b, seed), images)

        drawn = cached_arrays(cache / f"floor_draw_{seed}.npz", fp, len(images), compute, log)
        for name in values:
            values[name].append(drawn[name])
    return {"seeds": seeds, "values": values, "null": {k: [float(v) for v in null[k]] for k in null},
            "shuffles": SHUFFLES}
