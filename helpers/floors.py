"""The untrained floor: a claim's effect on several seeded untrained draws, not on one random draw.

Why several. An effect built from argmax picks over near-ties (which ViT block best matches each ResNet
layer, F1.5-F1.6) takes very different values on two untrained models that differ only in their random
weights: over 10 draws, F1.6's floor ran from -0.82 to +0.82. One draw is a coin toss; the protocol
(helpers.verdicts) compares each trained seed with the upper end of at least FLOOR_MIN draws.

Which draws. Draw `s` builds every architecture right after torch.manual_seed(s), which is how
helpers.train builds a seed-s model's starting weights: draw 0 is the seed-0 models' own start. The
global random state is left as it was (torch.random.fork_rng), so taking a floor changes nothing else
in a notebook.

    draws = untrained_draws({"resnet": "lite-resnet", "vit": "lite-vit"})      # FLOOR_SEEDS
    floor = floor_effects(lambda m: effects_of(m["resnet"], m["vit"]), draws)  # {claim: [5 effects]}
    verdicts.judge("F1.6", effects, floor_draws=floor["F1.6"], floor_seeds=floor.seeds)
"""

from __future__ import annotations

import torch

from helpers.guards import check_int
from helpers.verdicts import FLOOR_MIN, check_floor_seeds

FLOOR_SEEDS = tuple(range(FLOOR_MIN))  # 0..4: draw 0 is the seed-0 models' starting weights


def untrained(name: str, seed: int, device=None, **kwargs) -> torch.nn.Module:
    """Model `name` with the random weights of seed `seed` (as helpers.train starts it), global RNG untouched."""
    from helpers import models
    check_int(seed, "seed", 0, "Give the torch seed of the draw, e.g. one of helpers.floors.FLOOR_SEEDS.")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return models.load(name, pretrained=False, device=device, **kwargs)


def untrained_draws(names: dict, seeds=FLOOR_SEEDS, device=None):
    """Yield (seed, {key: untrained model}) for each seed; every architecture of a draw shares its seed.

    names: {key: model name}, e.g. {"resnet": "lite-resnet", "vit": "lite-vit"}. Models are built one draw
    at a time, so only one draw's models are in memory."""
    if not isinstance(names, dict) or not names:
        raise ValueError(f"names must be a non-empty dict {{key: model name}}, e.g. {{'vit': 'lite-vit'}}; got {names!r}.")
    for seed in check_floor_seeds(seeds):  # checked before any model is built
        yield seed, {key: untrained(name, seed, device) for key, name in names.items()}


class FloorDraws(dict):
    """{claim: [effect per draw]} with .seeds, the seed of each draw (the same order)."""

    def __init__(self, values: dict, seeds: list):
        super().__init__(values)
        self.seeds = list(seeds)


def floor_effects(effects_of, draws) -> FloorDraws:
    """Each claim's effect on every draw: effects_of(models) -> {claim: float}; draws from untrained_draws."""
    values, seeds = {}, []
    for seed, models in draws:
        seeds.append(seed)
        effects = effects_of(models)
        if not isinstance(effects, dict):
            raise TypeError(f"effects_of must return {{claim: effect}} for a draw, e.g. {{'F1.1': 0.12}}; got "
                            f"{type(effects).__name__}.")
        for claim, effect in effects.items():
            values.setdefault(claim, []).append(float(effect))
    return FloorDraws(values, check_floor_seeds(seeds))  # a floor of fewer than 5 draws is not one
