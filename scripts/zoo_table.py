"""Print the bundled zoo as a markdown table, from the model cards alone (data/README.md's table).

    python scripts/zoo_table.py

Per model: test accuracy (10,000 held-out images), training time and threads, and for ViTs the
attention distances the card records (500 held-out images): the number of local heads in blocks
0-1 (below 60% of uniform attention), the lowest of them, and the last block's range, as % of uniform.
A second table lays out the data-fraction series (the main ViT recipe, differing only in data
fraction and seed): one row per seed, one column per fraction, test accuracy and local heads.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from helpers import zoo  # noqa: E402
from helpers.models import lite_card  # noqa: E402

LOCAL = 0.6  # of uniform: the course's threshold for a local head (notebook 08)


def local_heads(card: dict) -> int:
    """Heads of blocks 0-1 below LOCAL of uniform, in the card's attention distances."""
    distances, uniform = card["attention_distance_px"], card["uniform_attention_distance_px"]
    return sum(d < LOCAL * uniform for d in distances[0] + distances[1])


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
        cells += [str(local_heads(card)), f"{min(early):.1f} px ({min(early) / uniform:.0%})",
                  f"{min(distances[-1]) / uniform:.0%}-{max(distances[-1]) / uniform:.0%}"]
    else:
        cells += ["-", "-", "-"]
    return "| " + " | ".join(cells) + " |"


def data_series() -> dict[int, dict[float, str]]:
    """{seed: {data fraction: member}} for the members that are the main ViT recipe but for fraction and seed."""
    main_vit = zoo.ZOO["lite-vit"]
    series: dict[int, dict[float, str]] = {}
    for name, recipe in zoo.ZOO.items():
        if replace(recipe, data_fraction=1.0, seed=0) == main_vit:
            series.setdefault(recipe.seed, {})[recipe.data_fraction] = name
    return {seed: dict(sorted(row.items())) for seed, row in sorted(series.items())}


def series_cell(name: str) -> str:
    try:
        card = lite_card(name)
    except FileNotFoundError:
        return "not bundled"
    return f"{card['test_accuracy']:.2%} ({local_heads(card)})"


def series_table() -> list[str]:
    """Markdown rows: per seed, test accuracy (local heads in blocks 0-1) at each data fraction."""
    series = data_series()
    fractions = sorted({f for row in series.values() for f in row})
    lines = ["| seed | " + " | ".join(f"{f:.0%} of the data" for f in fractions) + " |",
             "|---|" + "---|" * len(fractions)]
    for seed, row in series.items():
        cells = [series_cell(row[f]) if f in row else "-" for f in fractions]
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    return lines


def main() -> int:
    print("| model | test acc. | training | local heads, blocks 0-1 | lowest head, blocks 0-1 | last block (% of uniform) |")
    print("|---|---|---|---|---|---|")
    for name in zoo.ZOO:
        print(row(name))
    print("\nThe data-fraction series: test accuracy (local heads in blocks 0-1), by seed and data fraction\n")
    print("\n".join(series_table()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
