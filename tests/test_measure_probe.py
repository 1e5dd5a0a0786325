"""scripts/measure_probe.py: an R&D probe is read from its card and, for F3, run on the images it was trained on."""

import json

import numpy as np
import torch
from safetensors.torch import save_file
from script_module import load_script

from helpers import shapes, zoo
from helpers.models import MODELS_DIR, lite_card
from helpers.train import experiment

measure_probe = load_script("measure_probe")


def test_the_f2_reading_is_the_cards_own_numbers():
    card = lite_card("lite-vit-data03")
    early = np.array(card["attention_distance_px"][0] + card["attention_distance_px"][1])
    uniform = card["uniform_attention_distance_px"]
    result = measure_probe.measure("lite-vit-data03", "lite-resnet", 64, cka=False)
    assert result["local_heads_blocks_0_1"] == int((early < 0.6 * uniform).sum())
    assert result["mean_early_head_frac"] == round(float(early.mean()) / uniform, 3)
    assert result["test_accuracy"] == card["test_accuracy"] and "block0_spearman" not in result
    from_file = measure_probe.measure(str(MODELS_DIR / "lite-vit-data03.json"), "lite-resnet", 64, cka=False)
    assert {**from_file, "probe": result["probe"]} == result  # a kept card file reads the same


def test_a_low_contrast_probe_is_measured_on_low_contrast_images(tmp_path, monkeypatch):
    recipe = experiment(zoo.ZOO["lite-vit"], shapes_variant="low-contrast")
    torch.manual_seed(0)
    model = zoo.build(recipe)
    save_file({k: v.half().contiguous() for k, v in model.state_dict().items()}, str(tmp_path / "probe.safetensors"))
    distances = [[16.0] * 8 for _ in range(6)]
    (tmp_path / "probe.json").write_text(json.dumps({
        "recipe": recipe.as_card(), "command": "python -m helpers.train lite-vit --shapes-variant low-contrast",
        "check_accuracy": 0.1, "test_accuracy": 0.1, "attention_distance_px": distances,
        "uniform_attention_distance_px": 16.55}))
    asked = []
    real_load_split = shapes.load_split
    monkeypatch.setattr(shapes, "load_split",
                        lambda *a, **k: asked.append(k.get("variant")) or real_load_split(*a, **k))
    result = measure_probe.measure(str(tmp_path), "lite-resnet", 32)
    assert asked == ["low-contrast"]
    assert len(result["block0_cka_layer1.0"]) == 8 and np.isfinite(result["block1_spearman"] or 0.0)
