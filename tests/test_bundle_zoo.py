"""scripts/bundle_zoo.py: a trained model becomes a zoo member only with that member's exact recipe."""

import json
import shutil

import pytest
from safetensors import safe_open
from script_module import load_script

from helpers import zoo
from helpers.train import MODELS_DIR

bundle_zoo = load_script("bundle_zoo")


def probe_folder(tmp_path, recipe, command):
    """A folder like `helpers.train --out` writes: lite-vit.safetensors (any weights) and its card."""
    folder = tmp_path / "probe"
    folder.mkdir()
    shutil.copy(MODELS_DIR / "lite-vit.safetensors", folder / "lite-vit.safetensors")
    card = {"name": "lite-vit", "recipe": recipe.as_card(), "threads": 1, "command": command}
    (folder / "lite-vit.json").write_text(json.dumps(card))
    return folder


def test_a_probe_with_overrides_becomes_the_member_its_recipe_spells(tmp_path):
    command = "python -m helpers.train lite-vit --seed 2 --threads 1 --probe-every 2000"
    folder = probe_folder(tmp_path, zoo.ZOO["lite-vit-seed2"], command)
    out = tmp_path / "models"
    assert bundle_zoo.bundle(folder, "lite-vit-seed2", models_dir=out) == "lite-vit-seed2"
    card = json.loads((out / "lite-vit-seed2.json").read_text())
    assert card["name"] == "lite-vit-seed2" and card["trained_as"] == command
    assert card["command"] == "python -m helpers.train lite-vit-seed2 --threads 1 --probe-every 2000"
    with safe_open(str(out / "lite-vit-seed2.safetensors"), "pt") as f:
        assert f.metadata()["name"] == "lite-vit-seed2"


def test_a_recipe_that_differs_is_refused(tmp_path):
    folder = probe_folder(tmp_path, zoo.ZOO["lite-vit-seed1"], "python -m helpers.train lite-vit --seed 1")
    with pytest.raises(SystemExit, match="seed"):
        bundle_zoo.bundle(folder, "lite-vit-seed2", models_dir=tmp_path / "models")
    with pytest.raises(SystemExit, match="not a zoo member"):
        bundle_zoo.bundle(folder, "lite-vit-seed9", models_dir=tmp_path / "models")


def test_the_attention_kernel_a_probe_was_trained_with_stays_in_the_command(tmp_path):
    command = "python -m helpers.train lite-vit --seed 2 --threads 1 --attention explicit"
    folder = probe_folder(tmp_path, zoo.ZOO["lite-vit-seed2"], command)
    bundle_zoo.bundle(folder, "lite-vit-seed2", models_dir=tmp_path / "models")
    card = json.loads((tmp_path / "models" / "lite-vit-seed2.json").read_text())
    assert card["command"] == "python -m helpers.train lite-vit-seed2 --threads 1 --attention explicit"
