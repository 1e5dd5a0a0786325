"""The pieces the full-track rehearsal rests on, each tested alone (fast): the image cap,
the output and download folders, the hub-cache route of models.load, the Imagenette folder."""

import os
import subprocess
import sys

import pytest
import torch

import rehearsal
from helpers import course, data, models


def test_max_images_caps_every_image_set_and_says_so(monkeypatch, capsys):
    monkeypatch.setenv(data.MAX_IMAGES_ENV, "12")
    assert len(data.image_set("shapes", count=100)) == 12
    assert "COURSE_MAX_IMAGES=12: using 12" in capsys.readouterr().out
    assert len(data.image_set("shapes", count=5)) == 5  # below the cap: as asked, nothing said
    assert capsys.readouterr().out == ""
    monkeypatch.setenv(data.MAX_IMAGES_ENV, "many")
    with pytest.raises(ValueError, match="whole number"):
        data.image_set("shapes", count=5)


def test_output_and_download_folders_follow_their_variables(tmp_path):
    code = "from helpers import course, data; print(course.OUTPUT_DIR); print(data.DOWNLOAD_DIR)"
    env = {**os.environ, "COURSE_OUTPUT_DIR": str(tmp_path / "out"), "COURSE_DOWNLOAD_DIR": str(tmp_path / "dl")}
    printed = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert printed.split() == [str(tmp_path / "out"), str(tmp_path / "dl")]
    assert course.shown_path(course.REPO_ROOT / "outputs" / "x.npz") == os.path.join("outputs", "x.npz")
    assert course.shown_path(tmp_path / "x.npz") == str(tmp_path / "x.npz")


def test_load_takes_pretrained_weights_from_a_hub_cache(tmp_path, monkeypatch):
    """The full track's route (weights_cached -> timm -> huggingface_hub, offline) on a cache in the hub's layout."""
    from huggingface_hub import constants

    name = "vit_tiny_patch16_224.augreg_in21k_ft_in1k"
    snapshot = rehearsal.write_random_weights(name, tmp_path, seed=3)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    assert snapshot.is_symlink() and models.weights_cached(name)
    model = models.load(name, device="cpu")
    from safetensors.torch import load_file

    written = load_file(str(snapshot))
    assert all(torch.equal(model.state_dict()[k], v) for k, v in written.items())
    assert not models.weights_cached("vit_tiny_patch16_224.augreg_in21k")  # the other tag is not cached


def test_imagenette_folder_reads_as_torchvisions_imagenette(tmp_path, monkeypatch):
    root = rehearsal.imagenette_folder(tmp_path, per_class=3)
    monkeypatch.setattr(data, "DOWNLOAD_DIR", root)
    images = data.image_set("imagenette", count=6)
    assert len(images) == 6 and sorted(images.labels) == [0, 0, 0, 1, 1, 1]  # sorted WNIDs: tench 0, church 1
    assert min(images.get(0).size) == 320
    vit = models.load("vit_tiny_patch16_224", pretrained=False, device="cpu")
    assert next(data.batches(images, vit, 4)).shape == (4, 3, 224, 224)


def test_findings_notebooks_ask_colab_for_a_gpu():
    """05-16 (and their student copies) open on a Colab T4 GPU runtime, as Colab itself writes it; 00-04 on a CPU."""
    import json

    for path in sorted(course.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb")) + sorted((course.NOTEBOOKS_DIR / "student").glob("[0-9][0-9]_*.ipynb")):
        meta = json.loads(path.read_text(encoding="utf-8"))["metadata"]
        if int(path.name[:2]) >= 5:
            assert meta.get("accelerator") == "GPU" and meta.get("colab", {}).get("gpuType") == "T4", path
        else:
            assert "accelerator" not in meta, f"{path}: a CPU notebook need not take a GPU runtime"
