"""Accuracy of lite models on a contrast variant's held-out images, per bin of the contrast factor.

In a contrast variant (helpers.shapes.CONTRAST_RANGES) every image's shape-background brightness gap is
scaled by its own factor; this script asks where a model's errors sit along that factor.

    python scripts/contrast_bins.py /tmp/probes/mc_s0 /tmp/probes/mc03_s0            # each on its own variant
    python scripts/contrast_bins.py lite-vit lite-vit-seed1 --variant low-contrast   # zoo members on another
    python scripts/contrast_bins.py /tmp/probes/lc_s0 --variant low-contrast --at-least 0.4

Prints one JSON line per model: accuracy on all 10,000 held-out images, per bin of width --width
(from the variant's lowest factor), and on the images whose factor is at least each --at-least value.
"""

from __future__ import annotations

import argparse
import json
import sys

from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from helpers import shapes  # noqa: E402
from measure_probe import load_any  # noqa: E402
from helpers.train import normalise  # noqa: E402


def correct_per_image(model, images_uint8: torch.Tensor, labels: torch.Tensor, batch: int = 500) -> np.ndarray:
    """(N,) bool: whether the model's top class is the label, image by image."""
    with torch.no_grad():
        predicted = torch.cat([model(normalise(images_uint8[i:i + batch])).argmax(1) for i in range(0, len(labels), batch)])
    return (predicted == labels).numpy()


def accuracy_by_factor(correct: np.ndarray, factors: np.ndarray, edges: np.ndarray) -> list:
    """Accuracy in each bin [edges[i], edges[i+1]) (the last bin also takes its upper edge); None for an empty bin."""
    if correct.shape != factors.shape:
        raise ValueError(f"{len(correct)} results but {len(factors)} contrast factors: they must be image by image.")
    result = []
    for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        inside = (factors >= lo) & ((factors <= hi) if i == len(edges) - 2 else (factors < hi))
        result.append(float(correct[inside].mean()) if inside.any() else None)
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", help="probe folders (NAME.json + NAME.safetensors) or zoo member names")
    parser.add_argument("--variant", choices=sorted(shapes.CONTRAST_RANGES), help="default: each model's own variant")
    parser.add_argument("--width", type=float, default=0.2, help="bin width of the contrast factor")
    parser.add_argument("--at-least", type=float, nargs="*", default=[], help="also score images with factor >= these")
    args = parser.parse_args(argv)
    indices = shapes.split_indices("test")
    for where in args.models:
        model, card = load_any(where)
        variant = args.variant or card["recipe"].get("shapes_variant", "standard")
        if variant not in shapes.CONTRAST_RANGES:
            raise SystemExit(f"{where} was trained on {variant!r} images; name a contrast variant with --variant "
                             f"({', '.join(sorted(shapes.CONTRAST_RANGES))}).")
        images, labels = shapes.render(indices, variant=variant)
        factors = shapes.contrast_factors(indices, variant)
        correct = correct_per_image(model.eval(), images, labels)
        lo, hi = shapes.CONTRAST_RANGES[variant]
        edges = np.round(np.arange(lo, hi + 1e-9, args.width), 6)
        edges = edges if edges[-1] >= hi - 1e-9 else np.append(edges, hi)
        print(json.dumps({
            "model": where, "trained_on": card["recipe"].get("shapes_variant", "standard"), "scored_on": variant,
            "accuracy": round(float(correct.mean()), 4),
            "bins": {f"{a:.2f}-{b:.2f}": None if v is None else round(v, 4)
                     for a, b, v in zip(edges[:-1], edges[1:], accuracy_by_factor(correct, factors, edges))},
            "at_least": {f"{t:.2f}": round(float(correct[factors >= t].mean()), 4) for t in args.at_least}}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
