"""Measure an R&D training probe of the lite zoo against the targets of the zoo-v2 recipe (F2, F3, accuracy).

A probe is a `python -m helpers.train NAME --out DIR ...` run (e.g. --cutmix --heads 8 --seed 1 --steps 3000);
its folder holds NAME.safetensors and NAME.json (the card, with the recipe it was trained with).

    python scripts/measure_probe.py /tmp/probes/h8_cm_s1 [--resnet lite-resnet | --resnet DIR] [--images 1024]
    python scripts/measure_probe.py lite-vit lite-vit-seed1 lite-vit-seed2      # bundled zoo members by name
    python scripts/measure_probe.py --no-cka data/probes/low-contrast/*.json     # kept probe cards: F2 and accuracy

Prints, per probe: check and test accuracy; the lowest and the mean head distance in blocks 0-1, their local
heads, and the last block's range, as fractions of uniform attention (F2 targets: a head below 60% early, every last-block head above 80%);
and for blocks 0 and 1, the CKA of each single head with the ResNet's first stage (`layer1.0`) and its
Spearman rank correlation with the heads' attention distances (F3 target: below -0.5).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from helpers import models, zoo  # noqa: E402
from helpers.compare import head_groups_cka  # noqa: E402
from helpers.train import held_out_images  # noqa: E402


def card_file(folder: Path) -> Path:
    """The one card (<name>.json) of a probe folder."""
    cards = sorted(folder.glob("*.json"))
    if len(cards) != 1:
        raise SystemExit(f"{folder}: expected one card (<name>.json), found {len(cards)}.")
    return cards[0]


def probe_card(where: str) -> dict:
    """The card of a probe folder, of a card file (a kept probe, data/probes/), or of a bundled zoo member."""
    path = Path(where)
    if path.is_dir():
        path = card_file(path)
    if path.suffix == ".json":
        if not path.is_file():
            raise SystemExit(f"{path}: no such card. Give a probe folder, a card file that exists "
                             "(e.g. data/probes/low-contrast/lite-vit.json) or a zoo name (lite-vit).")
        return json.loads(path.read_text())
    return models.lite_card(where)


def load_probe(folder: Path):
    """(model, card) of the one probe checkpoint in `folder`, built from the recipe its card records."""
    card_path = card_file(folder)
    card = json.loads(card_path.read_text())
    recipe = zoo.Recipe(**card["recipe"])  # ViT probes: the card holds the whole vit dict
    model = zoo.build(recipe)
    state = {k: v.float() if v.is_floating_point() else v for k, v in load_file(str(card_path.with_suffix(".safetensors"))).items()}
    model.load_state_dict(state)
    return model.eval(), card


def spearman(a, b) -> float:
    """Rank correlation of two equal-length sequences (no ties expected: distances and CKA are real numbers)."""
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def load_any(where: str):
    """(model, card) of a probe folder, or of a bundled zoo member by name ('lite-vit-seed2')."""
    if Path(where).is_dir():
        return load_probe(Path(where))
    return models.load(where), models.lite_card(where)


def measure(folder: str, resnet_name: str, count: int, cka: bool = True) -> dict:
    """The probe's targets as a dict. folder: a probe folder, a card file (then cka=False), or a zoo name."""
    card = probe_card(folder)
    distances, uniform = card["attention_distance_px"], card["uniform_attention_distance_px"]
    early = distances[0] + distances[1]
    result = {"probe": Path(folder).name, "command": card["command"], "check_accuracy": card["check_accuracy"],
              "test_accuracy": card["test_accuracy"],
              "lowest_early_head_frac": round(min(early) / uniform, 3),
              "mean_early_head_frac": round(sum(early) / len(early) / uniform, 3),
              "local_heads_blocks_0_1": sum(d < 0.6 * uniform for d in early),
              "last_block_frac": [round(min(distances[-1]) / uniform, 3), round(max(distances[-1]) / uniform, 3)]}
    if not cka:
        return result
    vit, resnet = load_any(folder)[0], load_any(resnet_name)[0]
    variant = card["recipe"].get("shapes_variant", "standard")  # the images the probe was trained and tested on
    images = held_out_images(count, variant)
    for block in (0, 1):
        heads = len(distances[block])
        cka = head_groups_cka(vit, resnet, images, {f"head {h}": [h] for h in range(heads)}, ["layer1.0"], block=block)
        values = [float(v) for v in cka.values[:, 0]]
        result[f"block{block}_cka_layer1.0"] = [round(v, 3) for v in values]
        result[f"block{block}_spearman"] = round(spearman(distances[block], values), 2)
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", help="probe folders, kept probe cards (with --no-cka), or names of bundled zoo members")
    parser.add_argument("--resnet", default="lite-resnet", help="the ResNet whose first stage F3 compares with: a zoo name, or a probe's folder")
    parser.add_argument("--images", type=int, default=1024, help="held-out shapes images for the CKA")
    parser.add_argument("--no-cka", action="store_true", help="F2 and accuracy only, from the card (no model is run)")
    args = parser.parse_args(argv)
    for folder in args.folders:
        print(json.dumps(measure(folder, args.resnet, args.images, cka=not args.no_cka)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
