"""Copy a trained lite model (checkpoint and card) into data/models as a zoo member.

    python scripts/bundle_zoo.py /work/out/lite-vit-seed1                 # a folder written by helpers.train --out
    python scripts/bundle_zoo.py /tmp/probes/h8_cm6k_s2 --as lite-vit-seed2   # an R&D probe that is a zoo member

A folder holds one <name>.safetensors and its <name>.json. The card's recipe must be exactly the zoo
recipe of the member it becomes (helpers.zoo.ZOO), or nothing is copied. With --as, a probe trained
under another name with command-line overrides (--seed, --cutmix, --heads, --steps) becomes the member
whose recipe those overrides spell out (so does a probe under its own name): its card keeps the command that was run, under "trained_as",
and "command" becomes the zoo command for the same recipe. The tensors are copied unchanged; only the
name in the safetensors metadata is rewritten, because helpers.models.load checks it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from helpers import zoo  # noqa: E402
from helpers.train import MODELS_DIR  # noqa: E402


def bundle(folder: Path, member: str | None = None, models_dir: Path = MODELS_DIR) -> str:
    """Copy the one model in `folder` into `models_dir` as zoo member `member` (default: its own name)."""
    cards = sorted(folder.glob("*.json"))
    if len(cards) != 1:
        raise SystemExit(f"{folder}: expected one card (<name>.json), found {len(cards)}.")
    card = json.loads(cards[0].read_text())
    member = member or card["name"]
    if member not in zoo.ZOO:
        raise SystemExit(f"{member!r} is not a zoo member; the members are {sorted(zoo.ZOO)}.")
    wanted = zoo.ZOO[member].as_card()
    if card["recipe"] != wanted:
        differ = sorted(k for k in wanted if card["recipe"].get(k) != wanted[k])
        raise SystemExit(f"{folder}: its recipe differs from {member}'s in {differ}; it cannot be bundled as {member}.")
    state = load_file(str(cards[0].with_suffix(".safetensors")))
    overrides = re.search(r"--(steps|seed|cutmix|no-cutmix|heads)\b", card["command"])
    if member != card["name"] or overrides:
        card["trained_as"] = card["command"]
        probe = re.search(r"--probe-every[ =](\d+)", card["command"])
        kernel = re.search(r"--attention[ =](\w+)", card["command"])  # how it was trained, so the command reproduces it
        extra = (f" --probe-every {probe.group(1)}" if probe else "") + (f" --attention {kernel.group(1)}" if kernel else "")
        card["command"] = f"python -m helpers.train {member} --threads {card['threads']}{extra}"
        card["name"] = member
    models_dir.mkdir(parents=True, exist_ok=True)
    save_file(state, str(models_dir / f"{member}.safetensors"), metadata={"name": member})
    (models_dir / f"{member}.json").write_text(json.dumps(card, indent=2) + "\n")
    return member


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--as", dest="member", help="the zoo member it becomes (default: the name in its card)")
    args = parser.parse_args(argv)
    print("bundled", bundle(args.folder, args.member))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
