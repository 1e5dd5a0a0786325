"""Print the bundled zoo as a markdown table, from the model cards alone (data/README.md's table).

    python scripts/zoo_table.py

Per model: test accuracy (10,000 held-out images), training time and threads, and for ViTs the
attention distances the card records (500 held-out images): the number of local heads in blocks
0-1 (below 60% of uniform attention), the lowest of them, and the last block's range, as % of uniform.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from helpers import zoo  # noqa: E402
from helpers.models import lite_card  # noqa: E402

LOCAL = 0.6  # of uniform: the course's threshold for a local head (notebook 08)


def row(name: str) -> str:
    try:
        card = lite_card(name)
    except FileNotFoundError:
        return f"| `{name}` | not bundled | | | | |"
    if card["recipe"] != zoo.ZOO[name].as_card():
        return f"| `{name}` | bundled card has another recipe than helpers/zoo.py: retrain it | | | | |"
    minutes = f"{card['train_seconds'] / 60:.0f} min, {card['threads']} thread{'s' if card['threads'] > 1 else ''}"
    cells = [f"`{name}`", f"{card['test_accuracy']:.2%}", minutes]
    if "attention_distance_px" in card:
        distances, uniform = card["attention_distance_px"], card["uniform_attention_distance_px"]
        early = distances[0] + distances[1]
        local = sum(d < LOCAL * uniform for d in early)
        cells += [str(local), f"{min(early):.1f} px ({min(early) / uniform:.0%})",
                  f"{min(distances[-1]) / uniform:.0%}-{max(distances[-1]) / uniform:.0%}"]
    else:
        cells += ["-", "-", "-"]
    return "| " + " | ".join(cells) + " |"


def main() -> int:
    print("| model | test acc. | training | local heads, blocks 0-1 | lowest head, blocks 0-1 | last block (% of uniform) |")
    print("|---|---|---|---|---|---|")
    for name in zoo.ZOO:
        print(row(name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
