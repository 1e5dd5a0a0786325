"""scripts/contrast_bins.py and helpers.shapes.contrast_factors: where along the contrast factor a model errs."""

import json

import numpy as np
import pytest
from script_module import load_script

from helpers import models, shapes
from helpers.train import accuracy

contrast_bins = load_script("contrast_bins")


def test_accuracy_by_factor_known_answer():
    correct = np.array([True, False, True, True, False])
    factors = np.array([0.25, 0.35, 0.5, 1.0, 0.8])
    edges = np.array([0.2, 0.4, 0.6, 0.8, 1.0])
    # 0.8 falls in the last bin, and so does 1.0 (its upper edge is included); 0.6-0.8 is empty
    assert contrast_bins.accuracy_by_factor(correct, factors, edges) == [0.5, 1.0, None, 0.5]
    with pytest.raises(ValueError, match="image by image"):
        contrast_bins.accuracy_by_factor(correct, factors[:3], edges)


def test_contrast_factors_are_the_ones_render_uses(monkeypatch):
    indices = np.arange(50_000, 50_040)
    assert np.array_equal(shapes.contrast_factors(indices, "standard"), np.ones(40))
    used = []
    real = shapes._scale_contrast
    monkeypatch.setattr(shapes, "_scale_contrast", lambda fg, bg, f: used.append(f.numpy()) or real(fg, bg, f))
    for variant, (lo, hi) in shapes.CONTRAST_RANGES.items():
        factors = shapes.contrast_factors(indices, variant)
        assert lo <= factors.min() and factors.max() <= hi and factors.std() > 0.1
        shapes.render(indices, variant=variant)
        assert np.array_equal(used.pop(), factors)
    with pytest.raises(ValueError, match="Unknown shapes variant"):
        shapes.contrast_factors(indices, "faint")


def test_the_script_scores_a_zoo_member_on_a_variant(monkeypatch, capsys):
    few = shapes.split_indices("test")[:300]
    monkeypatch.setattr(shapes, "split_indices", lambda split, fraction=1.0: few)
    assert contrast_bins.main(["lite-vit", "--variant", "mid-contrast", "--at-least", "0.7"]) == 0
    result = json.loads(capsys.readouterr().out)
    images, labels = shapes.render(few, variant="mid-contrast")
    assert result["accuracy"] == round(accuracy(models.load("lite-vit"), images, labels), 4)
    assert list(result["bins"]) == ["0.40-0.60", "0.60-0.80", "0.80-1.00"] and list(result["at_least"]) == ["0.70"]
    factors = shapes.contrast_factors(few, "mid-contrast")
    counts = np.histogram(factors, bins=[0.4, 0.6, 0.8, 1.0])[0]
    assert np.isclose(sum(c * result["bins"][k] for c, k in zip(counts, result["bins"])) / len(few), result["accuracy"], atol=1e-3)
    with pytest.raises(SystemExit, match="--variant"):
        contrast_bins.main(["lite-vit"])  # a standard model needs a variant named
