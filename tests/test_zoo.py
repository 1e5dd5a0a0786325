"""The lite zoo's recipes and parts: position tables, bundled cards that match their recipes."""

import json
from pathlib import Path

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


def test_training_with_the_explicit_attention_kernel(tmp_path, monkeypatch):
    """--attention explicit: the same maths as timm's fused kernel (logits and gradients agree to float
    rounding on one batch), recorded in the card's command, and refused for models without attention."""
    from contextlib import nullcontext

    from helpers import attention, train

    model = zoo.build("lite-vit")
    images = torch.randn(16, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    results = {}
    for kernel in ("fused", "explicit"):
        model.zero_grad()
        with attention.explicit_attention(model) if kernel == "explicit" else nullcontext():
            logits = model(images)
        logits.square().sum().backward()
        results[kernel] = logits.detach(), torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])
    assert all(m.fused_attn for m in model.modules() if hasattr(m, "fused_attn"))  # the default is back
    (logits_f, grads_f), (logits_e, grads_e) = results["fused"], results["explicit"]
    assert not torch.equal(grads_f, grads_e)  # two code paths really ran
    torch.testing.assert_close(logits_e, logits_f, rtol=1e-5, atol=1e-5)
    assert float((grads_e - grads_f).abs().max()) < 1e-5 * float(grads_f.abs().max())

    monkeypatch.setattr(train, "accuracy", lambda *args, **kwargs: 0.0)  # the wiring is under test, not the 12,000 test images
    kernels_in_training, real_train = [], train.train

    def spy(model, recipe, **kwargs):
        kernels_in_training.append({m.fused_attn for m in model.modules() if hasattr(m, "fused_attn")})
        return real_train(model, recipe, **kwargs)

    monkeypatch.setattr(train, "train", spy)
    assert train.main(["lite-vit-data01", "--steps", "2", "--threads", "1", "--attention", "explicit", "--out", str(tmp_path)]) == 0
    assert kernels_in_training == [{False}]  # every block trained on the explicit path
    assert "--attention explicit" in json.loads((tmp_path / "lite-vit-data01.json").read_text())["command"]
    with pytest.raises(SystemExit, match="--attention is for ViTs"):
        train.main(["lite-resnet", "--attention", "explicit", "--out", str(tmp_path)])


@pytest.mark.parametrize("argv, advice", [
    (["--steps", "0"], "at least 1 training step"),         # a TypeError after training
    (["--heads", "5"], "give one of [1, 2, 4, 8"),          # timm's AssertionError
    (["--heads", "0"], "give one of [1, 2, 4, 8"),          # ZeroDivisionError
    (["--threads", "0"], "--threads 0: give 1 to"),         # torch's RuntimeError
    (["--threads", "100000"], "--threads 100000: give 1 to"),  # a segmentation fault
    (["--probe-every", "-1"], "no probes"),
    (["--out", ""], "give the folder"),                     # wrote the checkpoint into the current folder
])
def test_the_training_command_refuses_bad_arguments_before_training(argv, advice, capsys, monkeypatch, tmp_path):
    from helpers import train

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(train, "train", lambda *a, **k: pytest.fail("training started"))
    with pytest.raises(SystemExit) as stop:
        train.main(["lite-vit", *argv])
    assert stop.value.code == 2 and advice in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SystemExit):  # a file as --out
        train.main(["lite-vit", "--out", str(Path(train.__file__))])
