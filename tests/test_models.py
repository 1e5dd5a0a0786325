"""Loading models on both tracks: bundled checkpoints, local weight files, and every failure mode."""

import json
import shutil
import time

import pytest
import torch
from safetensors.torch import save_file

from helpers import models, train, zoo

CARDS = sorted(models.MODELS_DIR.glob("*.json"))


def test_core_lite_models_are_bundled():
    names = {c.stem for c in CARDS}
    assert {"lite-vit", "lite-resnet"} <= names, "train them with: python -m helpers.train lite-vit (and lite-resnet)"


def test_every_lite_model_the_notebooks_name_is_bundled():
    names = {c.stem for c in CARDS}
    named = set(models.model_names("lite"))
    assert all(n.startswith("lite-") for n in named)
    assert named <= names, f"named in TRACK_MODELS['lite'] but not in data/models: {sorted(named - names)}"


def test_each_lite_data_series_is_one_seed_ordered_by_data():
    """vit_by_data_seeds: within a seed, one seed and the data fractions its labels say, least data first."""
    for seed_label, series in models.TRACK_MODELS["lite"]["vit_by_data_seeds"].items():
        recipes = [zoo.ZOO[name] for name in series.values()]
        assert {r.seed for r in recipes} == {int(seed_label.split()[-1])}, seed_label
        fractions = [r.data_fraction for r in recipes]
        assert fractions == [float(label.rstrip("%")) / 100 for label in series], (seed_label, fractions)
        assert fractions == sorted(fractions) and fractions[-1] == 1.0, (seed_label, fractions)


@pytest.mark.parametrize("card_path", CARDS, ids=[c.stem for c in CARDS])
def test_bundled_checkpoint_reaches_its_card_accuracy(card_path):
    card = json.loads(card_path.read_text())
    model = models.load(card["name"], device="cpu")
    assert not model.training
    assert abs(train.check_accuracy(model) - card["check_accuracy"]) <= 0.02


@pytest.fixture
def fake_zoo(tmp_path, monkeypatch):
    """A models folder holding one freshly initialised lite-vit checkpoint."""
    monkeypatch.setattr(models, "MODELS_DIR", tmp_path)
    model = zoo.build("lite-vit")
    save_file({k: v.half() for k, v in model.state_dict().items()}, str(tmp_path / "lite-vit.safetensors"))
    return tmp_path, model


def test_lite_checkpoint_round_trip(fake_zoo):
    _, original = fake_zoo
    loaded = models.load("lite-vit", device="cpu")
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        original.eval()
        assert torch.allclose(loaded(x), original(x), atol=1e-2)  # weights stored in float16


def test_corrupt_or_truncated_lite_checkpoint(fake_zoo):
    folder, _ = fake_zoo
    path = folder / "lite-vit.safetensors"
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(ValueError, match="corrupt or truncated"):
        models.load("lite-vit")


def test_full_track_loading_from_a_local_file_matches_the_original(tmp_path):
    """The same code path as a hub download (timm pretrained_cfg_overlay), with a local file."""
    import timm
    original = timm.create_model("test_vit", pretrained=False).eval()
    x = torch.randn(2, 3, 160, 160)
    for path in (tmp_path / "w.safetensors", tmp_path / "w.pth"):
        if path.suffix == ".pth":
            torch.save(original.state_dict(), path)
        else:
            save_file(original.state_dict(), str(path))
        loaded = models.load("test_vit", weights=path, device="cpu")
        with torch.no_grad():
            assert torch.equal(loaded(x), original(x))


@pytest.mark.parametrize("arch, head", [("test_resnet", "fc"), ("test_vit", "head"), ("test_efficientnet", "classifier"),
                                         ("test_convnext", "head.fc")])
def test_a_fine_tuned_head_in_a_local_file_is_kept(tmp_path, arch, head):
    """A student's 10-class fine-tune: timm alone compares num_classes with the published 1,000 and silently gives a
    new random head. The file's own head must come back, with or without num_classes, and a mismatch is an error."""
    import timm
    import warnings
    tuned = timm.create_model(arch, pretrained=False, num_classes=10).eval()
    path = tmp_path / "ft.safetensors"
    save_file(tuned.state_dict(), str(path))
    assert models.file_head_classes(arch, path) == 10
    x = torch.randn(2, 3, 160, 160)
    for kwargs in ({}, {"num_classes": 10}):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "new head" warning either
            loaded = models.load(arch, weights=path, device="cpu", **kwargs)
        assert torch.equal(loaded.get_submodule(head).weight, tuned.get_submodule(head).weight)
        with torch.no_grad():
            assert torch.equal(loaded(x), tuned(x))
    with pytest.raises(ValueError, match="10 classes.*num_classes=5"):
        models.load(arch, weights=path, num_classes=5, device="cpu")


def test_bad_weight_files_are_refused(tmp_path):
    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(b"not a checkpoint at all" * 10)
    with pytest.raises(ValueError, match="corrupt or truncated"):
        models.load("test_vit", weights=garbage)
    pickled = tmp_path / "pickled.pth"
    torch.save({"payload": shutil.copyfile}, pickled)  # an arbitrary object: never unpickled
    with pytest.raises(ValueError):
        models.load("test_vit", weights=pickled)
    with pytest.raises(FileNotFoundError):
        models.load("test_vit", weights=tmp_path / "missing.safetensors")
    with pytest.raises(FileNotFoundError, match="is a folder, not a weights file"):  # was "does not exist"
        models.load("test_vit", weights=tmp_path)


def test_offline_pretrained_request_fails_fast_with_advice(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")  # a host that can never resolve
    start = time.time()
    with pytest.raises(models.WeightsUnavailableError) as info:
        models.load("vit_base_patch16_224.augreg_in21k_ft_in1k")
    assert time.time() - start < 5
    assert "lite" in str(info.value) and "weights=" in str(info.value)


def test_unknown_names_suggest_close_matches():
    with pytest.raises(ValueError, match="Did you mean: lite-vit"):
        models.load("lite-vt")
    with pytest.raises(ValueError, match="vit_base_patch16_224"):
        models.load("vit_bse_patch16_224")


def test_track_can_be_forced(monkeypatch, capsys):
    monkeypatch.setenv(models.TRACK_ENV, "lite")
    assert models.choose_track() == "lite"
    assert "COURSE_TRACK=full" in capsys.readouterr().out
    monkeypatch.setenv(models.TRACK_ENV, "fast")
    with pytest.raises(ValueError, match="lite"):
        models.choose_track()


def test_a_cpu_runtime_that_reaches_the_hub_gets_the_lite_track_and_says_why(monkeypatch, capsys):
    monkeypatch.setenv(models.TRACK_ENV, "auto")
    monkeypatch.setattr(models, "weights_cached", lambda name: False)
    monkeypatch.setattr(models, "hub_reachable", lambda timeout=3.0: True)
    monkeypatch.setattr(models, "pick_device", lambda: torch.device("cpu"))
    assert models.choose_track() == "lite"
    out = capsys.readouterr().out
    assert "no GPU" in out and "COURSE_TRACK=full" in out
    monkeypatch.setattr(models, "pick_device", lambda: torch.device("cuda"))
    assert models.choose_track() == "full"


def test_offline_with_only_some_full_track_weights_cached_gets_the_lite_track(monkeypatch, capsys):
    """Every model the notebooks load must be cached (not only ViT-B) when the hub cannot be reached."""
    monkeypatch.setenv(models.TRACK_ENV, "auto")
    vit = models.TRACK_MODELS["full"]["vit"]
    monkeypatch.setattr(models, "weights_cached", lambda name: name == vit)
    monkeypatch.setattr(models, "hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setattr(models, "pick_device", lambda: torch.device("cuda"))
    assert models.choose_track() == "lite"
    assert f"only 1 of the {len(models.model_names('full'))} full-track models are cached" in capsys.readouterr().out
    monkeypatch.setattr(models, "weights_cached", lambda name: True)  # all cached: no network needed
    assert models.choose_track() == "full"
