"""The lite zoo's recipes and parts: position tables, bundled cards that match their recipes."""

import json

import pytest
import torch

from helpers import models, zoo


def _similarity_by_distance(table: torch.Tensor, grid: int) -> torch.Tensor:
    """Cosine similarity between row 0, column 0 and the positions 0..grid-1 along the first row."""
    t = torch.nn.functional.normalize(table, dim=1)
    return t[:grid] @ t[0]


def test_grid_scaled_sincos_makes_distance_legible():
    grid = 8
    grid_scaled = _similarity_by_distance(zoo.sincos_2d(grid, 64, "grid"), grid)
    sequence_scaled = _similarity_by_distance(zoo.sincos_2d(grid, 64, "10000"), grid)
    assert torch.all(grid_scaled[1:4] < grid_scaled[:3]), "similarity should fall over the first patches"
    assert grid_scaled[-1] < 0.6 < sequence_scaled[-1], "far positions should look different only on the grid scale"
    assert zoo.sincos_2d(grid, 64).shape == (grid * grid, 64)


def test_bad_position_settings_are_refused():
    with pytest.raises(ValueError, match="divisible by 4"):
        zoo.sincos_2d(8, 62)
    with pytest.raises(ValueError, match="scale"):
        zoo.sincos_2d(8, 64, "log")
    with pytest.raises(ValueError, match="pos_embed"):
        zoo.build_vit({**zoo.ZOO["lite-vit"].vit, "pos_embed": "sin-cos"})


@pytest.mark.parametrize("card_path", sorted(models.MODELS_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_bundled_card_matches_its_recipe(card_path):
    """`python -m helpers.train NAME` must rebuild what the card describes."""
    card = json.loads(card_path.read_text())
    assert card["recipe"] == zoo.ZOO[card["name"]].as_card(), \
        f"{card['name']}: its recipe changed since it was trained; retrain it or restore the recipe"


def test_every_zoo_model_is_bundled_with_weights_and_a_card():
    """The issue's zoo is complete: each recipe has its safetensors file and its card."""
    for name in zoo.ZOO:
        assert (models.MODELS_DIR / f"{name}.safetensors").is_file(), f"{name}: no weights; train it with python -m helpers.train {name}"
        assert (models.MODELS_DIR / f"{name}.json").is_file(), f"{name}: no model card"


def test_cutmix_pastes_one_box_and_reports_the_area_each_label_keeps():
    from helpers.train import cutmix, experiment

    images = torch.arange(8, dtype=torch.float32)[:, None, None, None].expand(8, 3, 32, 32).contiguous()
    for seed in range(20):
        mixed, order, own = cutmix(images, torch.Generator().manual_seed(seed))
        assert mixed.shape == images.shape and 0.0 <= own <= 1.0
        for i in range(8):
            kept = (mixed[i, 0] == i).float().mean().item()
            expected = own if order[i] != i else 1.0  # an image mixed with itself keeps everything
            assert abs(kept - expected) < 1e-6, (seed, i)
    again = cutmix(images, torch.Generator().manual_seed(3))
    assert torch.equal(again[0], cutmix(images, torch.Generator().manual_seed(3))[0])
    recipe = experiment(zoo.ZOO["lite-vit"], cutmix=True, heads=8, seed=2)
    assert (recipe.cutmix, recipe.vit["num_heads"], recipe.seed, recipe.vit["embed_dim"]) == (True, 8, 2, 64)
    with pytest.raises(SystemExit, match="--heads is for ViTs"):
        experiment(zoo.ZOO["lite-resnet"], heads=8)
