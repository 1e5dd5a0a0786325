"""What a learner can feed the helpers: never a silent wrong number, never leaked state, and a clear
error (naming the argument and what to do) instead of a raw library error."""


import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from helpers import attention, models, zoo
from helpers.capture import Capture
from helpers.compare import cka_matrix, head_groups_cka, label_cka
from helpers.data import ImageSet, image_set, read_rgb, tensor_set
from helpers.minibatch_cka import CKAMatrix


@pytest.fixture(scope="module")
def images():
    return image_set("shapes", count=32)


# ---------------------------------------------------------------- images


def write_png16_grey(path, values: np.ndarray) -> None:
    Image.fromarray(values.astype(np.uint16)).save(path)


def test_16_bit_images_are_scaled_not_clipped(tmp_path):
    write_png16_grey(tmp_path / "g.png", np.full((8, 8), 40000))
    rgb = np.asarray(read_rgb(tmp_path / "g.png"))
    assert rgb.dtype == np.uint8 and (rgb == round(40000 / 257)).all()  # 156, where a plain convert gives 255


def test_transparent_pixels_are_laid_over_white_and_palettes_expanded(tmp_path):
    rgba = np.zeros((4, 4, 4), np.uint8)
    rgba[..., 0] = 200                      # hidden red everywhere
    rgba[:2, :, 3] = 255                    # top half opaque, bottom half fully transparent
    Image.fromarray(rgba, "RGBA").save(tmp_path / "a.png")
    out = np.asarray(read_rgb(tmp_path / "a.png"))
    assert (out[:2] == [200, 0, 0]).all() and (out[2:] == 255).all()
    palette = Image.fromarray(rgba, "RGBA").convert("P")
    palette.info["transparency"] = palette.getpixel((0, 3))
    palette.save(tmp_path / "p.png", transparency=palette.getpixel((0, 3)))
    assert (np.asarray(read_rgb(tmp_path / "p.png"))[3] == 255).all()


def test_a_truncated_file_is_named(tmp_path):
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(tmp_path / "ok.jpg")
    data = (tmp_path / "ok.jpg").read_bytes()
    (tmp_path / "cut.jpg").write_bytes(data[: len(data) // 3])
    with pytest.raises(ValueError, match="cut.jpg"):
        read_rgb(tmp_path / "cut.jpg")
    (tmp_path / "fake.png").write_text("not an image")
    with pytest.raises(ValueError, match="fake.png"):
        read_rgb(tmp_path / "fake.png")


def test_nested_subfolders_belong_to_their_top_level_class(tmp_path):
    for rel in ("cat/a.png", "cat/deep/b.png", "dog/c.png", "dog/x/y/d.png"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), (10, 20, 30)).save(tmp_path / rel)
    found = image_set(str(tmp_path))
    assert sorted(found.labels) == [0, 0, 1, 1]
    Image.new("RGB", (8, 8)).save(tmp_path / "loose.png")  # one image outside any class folder
    with pytest.warns(UserWarning, match="no labels"):
        assert image_set(str(tmp_path)).labels is None


@pytest.mark.parametrize("count", [0, -3, 2.5, "10", True])
def test_impossible_counts_are_refused(count):
    with pytest.raises((ValueError, TypeError), match="count"):
        image_set("shapes", count=count)


@pytest.mark.parametrize("typo, meant", [("shapez", "shapes"), ("Imagenet", "imagenette"), ("cifar-10", "cifar10")])
def test_a_misspelt_image_source_suggests_the_name(typo, meant):
    """A source name that is not a folder was only 'not a folder'; a close one is now suggested."""
    with pytest.raises(FileNotFoundError, match=f"Did you mean '{meant}'"):
        image_set(typo)


def test_a_count_above_what_exists_says_what_it_returns(tmp_path, capsys):
    for i in range(3):
        Image.new("RGB", (8, 8)).save(tmp_path / f"{i}.png")
    assert len(image_set(str(tmp_path), count=10)) == 3
    assert "10 images were asked for" in capsys.readouterr().out


def test_tensors_are_wrapped_not_guessed(vit, images):
    with pytest.raises(TypeError, match="tensor_set"):
        image_set(images.tensor)
    with pytest.raises(TypeError, match="ImageSet"):
        cka_matrix(vit, images.tensor)
    own = tensor_set(images.tensor, images.labels)
    np.testing.assert_allclose(cka_matrix(vit, own, progress=False).values, cka_matrix(vit, images, progress=False).values)
    with pytest.raises(ValueError, match="uint8"):
        tensor_set(images.tensor.float())


# ---------------------------------------------------------------- hooks


def test_policies_on_outputs_without_a_cls_token(vit):
    x = torch.randn(2, 3, 32, 32)
    with pytest.raises(ValueError, match="no CLS token"):
        with torch.no_grad(), Capture(vit, ["patch_embed"], policy="cls"):
            vit(x)
    with torch.no_grad(), Capture(vit, ["patch_embed", "blocks.0"], policy="spatial") as rec:
        vit(x)
        got = rec.take()
        tokens = vit.patch_embed(x)
    assert got["patch_embed"].shape == (2, 64 * 64)  # all 64 patch tokens: none dropped as if it were CLS
    torch.testing.assert_close(got["patch_embed"], tokens.flatten(1))
    assert got["blocks.0"].shape == (2, 64 * 64)     # the block output: CLS dropped


def test_a_transform_returning_a_view_is_not_overwritten_later(resnet):
    x = torch.randn(4, 3, 32, 32)
    with torch.no_grad(), Capture(resnet, ["bn1"], transform=lambda rows: rows) as rec:  # bn1 -> in-place ReLU
        resnet(x)
        kept = rec.take()["bn1"]
    assert (kept < 0).any()  # the ReLU that followed did not zero what was kept


def test_layers_must_be_names(vit, images):
    for bad in (vit.blocks[0], None, 3, [vit.blocks[0]], []):
        with pytest.raises((TypeError, ValueError), match="layers"):
            cka_matrix(vit, images, layers_a=bad, progress=False)


# ---------------------------------------------------------------- loading


@pytest.fixture
def fake_zoo(tmp_path, monkeypatch):
    monkeypatch.setattr(models, "MODELS_DIR", tmp_path)
    return tmp_path, zoo.build("lite-vit")


def test_lite_names_refuse_arguments_they_would_ignore():
    with pytest.raises(ValueError, match="weights="):
        models.load("lite-vit", weights="my.safetensors")
    with pytest.raises(ValueError, match="num_classes"):
        models.load("lite-vit", num_classes=3)


def test_a_checkpoint_naming_another_model_is_refused(fake_zoo, tmp_path):
    folder, model = fake_zoo
    save_file(model.state_dict(), str(folder / "lite-vit.safetensors"), metadata={"name": "lite-vit-gap"})
    with pytest.raises(ValueError, match="lite-vit-gap"):
        models.load("lite-vit", device="cpu")
    import timm
    path = tmp_path / "w.safetensors"
    save_file(timm.create_model("test_vit").state_dict(), str(path), metadata={"name": "resnet50"})
    with pytest.raises(ValueError, match="resnet50"):
        models.load("test_vit", weights=path, device="cpu")


def test_non_finite_weights_are_refused(fake_zoo, tmp_path):
    folder, model = fake_zoo
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["blocks.2.mlp.fc1.weight"][0, 0] = float("nan")
    save_file(state, str(folder / "lite-vit.safetensors"), metadata={"name": "lite-vit"})
    with pytest.raises(ValueError, match="NaN or inf.*blocks.2.mlp.fc1.weight"):
        models.load("lite-vit", device="cpu")
    import timm
    state = timm.create_model("test_vit").state_dict()
    state["head.weight"][0, 0] = float("inf")
    save_file(state, str(tmp_path / "w.safetensors"))
    with pytest.raises(ValueError, match="NaN or inf"):
        models.load("test_vit", weights=tmp_path / "w.safetensors", device="cpu")


def test_pickled_and_corrupt_files_get_the_courses_advice_not_torchs(tmp_path):
    import timm
    model = timm.create_model("test_vit")
    torch.save(model, tmp_path / "whole_model.pth")  # a pickled module, not a state dict
    (tmp_path / "cut.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":")
    for path in (tmp_path / "whole_model.pth", tmp_path / "cut.safetensors"):
        with pytest.raises(ValueError) as info:
            models.load("test_vit", weights=path)
        assert "state_dict" in str(info.value) and "weights_only=False" not in str(info.value)


def test_a_misspelt_pretrained_tag_suggests_the_real_ones():
    with pytest.raises(ValueError, match="resnet50.tv_in1k"):
        models.load("resnet50.tv_in1")


def test_a_new_classifier_head_is_announced():
    with pytest.warns(UserWarning, match="randomly initialised classifier head"):
        with pytest.raises(models.WeightsUnavailableError):  # offline in the tests: the warning comes first
            models.load("resnet50.tv_in1k", num_classes=10)


def test_hf_hub_offline_is_honoured(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert models.hub_reachable() is False


def test_a_hub_that_answers_but_cannot_serve_ends_in_the_offline_message(monkeypatch):
    import timm
    monkeypatch.setattr(models, "weights_cached", lambda name: False)
    monkeypatch.setattr(models, "hub_reachable", lambda timeout=3.0: True)

    def failing_download(*args, **kwargs):
        raise OSError("503 Service Unavailable")
    monkeypatch.setattr(timm, "create_model", failing_download)
    with pytest.raises(models.WeightsUnavailableError, match="lite track"):
        models.load("resnet50.tv_in1k")


def test_a_bad_course_device_is_explained(monkeypatch):
    from helpers.course import pick_device
    for value in ("gpu", "cuda:x", "xpu"):
        monkeypatch.setenv("COURSE_DEVICE", value)
        with pytest.raises(ValueError, match="COURSE_DEVICE"):
            pick_device()
    monkeypatch.setenv("COURSE_DEVICE", "mps")  # no float64 on Apple's MPS: refused, whatever the machine
    with pytest.raises(ValueError, match="float64.*COURSE_DEVICE=cpu"):
        pick_device()


def test_a_nested_new_output_folder_is_made(tmp_path, monkeypatch):
    from helpers import course
    nested = tmp_path / "drive" / "MyDrive" / "course-outputs"
    monkeypatch.setattr(course, "OUTPUT_DIR", nested)
    course.start(quiet=True)
    assert nested.is_dir()


def test_folders_and_sizes_from_the_environment_are_checked(tmp_path, monkeypatch):
    """A file as COURSE_OUTPUT_DIR or COURSE_IMAGE_CACHE_DIR raised a bare FileExistsError; COURSE_IMAGE_CACHE_GB=inf
    an OverflowError."""
    from helpers import course, image_cache
    a_file = tmp_path / "notes.txt"
    a_file.write_text("")
    monkeypatch.setattr(course, "OUTPUT_DIR", a_file)
    with pytest.raises(ValueError, match="COURSE_OUTPUT_DIR=.* is a file"):
        course.start(quiet=True)
    monkeypatch.setenv(image_cache.DIR_ENV, str(a_file))
    with pytest.raises(ValueError, match="COURSE_IMAGE_CACHE_DIR=.* is a file"):
        image_cache.cache_dir()
    monkeypatch.setenv(image_cache.CAP_ENV, "inf")
    with pytest.raises(ValueError, match="size in GB"):
        image_cache.cap_bytes()


# ---------------------------------------------------------------- state and records


def test_models_come_back_in_the_mode_they_came_in(vit, resnet, images):
    vit.train()
    vit.blocks[1].eval()  # a mixed state must come back exactly
    before = [m.training for m in vit.modules()]
    cka_matrix(vit, images, progress=False)
    label_cka(vit, images)
    attention.attention_maps(vit, torch.randn(2, 3, 32, 32))
    head_groups_cka(vit, resnet, images, {"all": [0, 1, 2, 3]}, ["layer1.0"])
    assert [m.training for m in vit.modules()] == before
    vit.eval()


def test_meta_records_what_ran_and_save_returns_the_path_written(vit, resnet, images, tmp_path):
    result = cka_matrix(vit, images, "blocks", model_b=resnet, layers_b="layer*.?", amp=True, progress=False)
    assert result.meta["amp"] is False and result.meta["amp_requested"] is True  # no autocast on the CPU
    assert result.meta["resolved_layers_a"]["block0"] == "blocks.0"
    assert list(result.meta["resolved_layers_b"]) == result.cols
    written = result.save(tmp_path / "matrix")
    assert written.exists() and written.name == "matrix.npz"
    assert CKAMatrix.load(written).cols == result.cols


# ---------------------------------------------------------------- clear errors


@pytest.mark.parametrize("batch_size", [2, 3, 4.0, "64", None])
def test_batch_size_must_be_an_int_of_at_least_4(vit, images, batch_size):
    with pytest.raises((ValueError, TypeError), match="batch_size"):
        cka_matrix(vit, images, batch_size=batch_size, progress=False)


def test_foreign_or_corrupt_matrix_files(tmp_path):
    np.save(tmp_path / "a.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    np.savez(tmp_path / "other.npz", weights=np.eye(3))
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04 broken")
    for name in ("a.npy", "other.npz", "junk.npz"):
        with pytest.raises(ValueError, match="CKA matrix") as info:
            CKAMatrix.load(tmp_path / name)
        assert "allow_pickle" not in str(info.value)


def test_unknown_cell_names_suggest_close_matches():
    matrix = CKAMatrix(np.eye(2), ["block0", "block1"], ["layer1.0", "layer2.0"])
    with pytest.raises(KeyError, match="block1"):
        matrix.cell("blok1", "layer1.0")


def test_attention_helpers_refuse_cnns_and_unbatched_images(vit, resnet):
    with pytest.raises(ValueError, match="timm ViTs"):
        attention.attention_of_heads(resnet, torch.randn(2, 3, 32, 32), 0)
    with pytest.raises(ValueError, match=r"images\[None\]"):
        attention.attention_maps(vit, torch.randn(3, 32, 32))


def test_class_labels_as_strings_or_too_few(vit, images):
    names = [f"class {label}" for label in images.labels]
    as_strings = label_cka(vit, ImageSet("named", len(images), images.get, names, images.tensor))
    np.testing.assert_allclose(as_strings.values, label_cka(vit, images).values, atol=1e-12)
    with pytest.raises(ValueError, match="one class label per image"):
        label_cka(vit, ImageSet("short", len(images), images.get, images.labels[:10], images.tensor))
    with pytest.raises(ValueError, match="at least two classes"):
        label_cka(vit, ImageSet("one", len(images), images.get, [0] * len(images), images.tensor))
    with pytest.raises(ValueError, match="a class of its own"):  # was "Layer(s) ['class labels'] have zero variance"
        label_cka(vit, ImageSet("each", len(images), images.get, list(range(len(images))), images.tensor))


def test_a_policy_that_fits_model_a_but_not_model_b_is_named(vit, resnet, images):
    with pytest.raises(ValueError, match="policy_b='cls'"):
        cka_matrix(vit, images, model_b=resnet, policy_a="cls", progress=False)


def test_float_image_tensors_are_not_guessed_at(vit):
    from helpers.data import preprocess_for
    with pytest.raises(ValueError, match="uint8"):
        preprocess_for(vit)(torch.rand(3, 32, 32))


def test_helpers_for_covariates_and_classes_refuse_or_accept_clearly():
    from helpers.compare import regress_out, remove_class_means
    x = torch.randn(12, 3, dtype=torch.float64)
    names = ["cat", "dog", "owl"] * 4
    np.testing.assert_allclose(remove_class_means(x, names), remove_class_means(x, [0, 1, 2] * 4))
    with pytest.raises(ValueError, match="NaN"):
        regress_out(x, torch.tensor([float("nan")] + [0.0] * 11))
    with pytest.raises(ValueError, match="probabilities"):
        attention.mean_attention_distance(torch.randn(1, 2, 65, 65), 4, 1)
    uniform = torch.full((1, 2, 5, 5), 0.2)  # 5 tokens: with 1 prefix token a 2 x 2 grid of patches
    assert attention.mean_attention_distance(uniform, 4, 1).shape == (2,)
    for prefix in (5, 7):  # every token, or more than all of them, called a prefix token: no patches left to measure
        with pytest.raises(ValueError, match="num_prefix_tokens"):
            attention.mean_attention_distance(uniform, 4, prefix)


def test_a_bad_device_argument_is_explained():
    with pytest.raises(ValueError, match="device="):
        models.load("lite-vit", device="gpu")


def test_photos_are_upright_and_hidden_files_ignored(tmp_path):
    wide = Image.new("RGB", (40, 20), (200, 10, 10))
    exif = wide.getexif()
    exif[0x0112] = 6  # EXIF orientation: "rotate 90 degrees to view"
    wide.save(tmp_path / "phone.jpg", exif=exif)
    assert read_rgb(tmp_path / "phone.jpg").size == (20, 40)
    (tmp_path / "._phone.jpg").write_bytes(b"\x00\x05\x16\x07 AppleDouble")  # macOS metadata, not an image
    (tmp_path / ".ipynb_checkpoints").mkdir()
    wide.save(tmp_path / ".ipynb_checkpoints" / "copy.jpg")
    assert len(image_set(str(tmp_path))) == 1


def test_a_module_whose_output_is_not_a_tensor_is_explained():
    class Dicty(torch.nn.Module):
        def forward(self, x):
            return {"out": x}

    class Wrapper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Dicty()

        def forward(self, x):
            return self.inner(x)["out"]

    model = Wrapper()
    with pytest.raises(TypeError, match="not a tensor"):
        with Capture(model, ["inner"]):
            model(torch.randn(2, 3))


def test_analysis_helpers_refuse_non_finite_or_wrong_inputs_and_keep_the_mode(vit):
    from helpers import localization, probes, receptive_fields, residuals
    nan_images = torch.full((2, 3, 32, 32), float("nan"))
    with pytest.raises(ValueError, match="NaN"):
        receptive_fields.receptive_fields(vit, nan_images)
    with pytest.raises(ValueError, match="float"):
        receptive_fields.receptive_fields(vit, torch.zeros(2, 3, 32, 32, dtype=torch.uint8))
    with pytest.raises(ValueError, match="NaN"):
        residuals.vit_norm_ratios(vit, [nan_images])
    with pytest.raises(ValueError, match="integer class labels"):
        probes.ridge_probe(torch.randn(10, 5), ["a", "b"] * 5, torch.randn(4, 5), ["a", "b"] * 2,
                           torch.randn(4, 5), ["a", "b"] * 2)
    vit.train()
    localization.capture_tokens(vit, image_set("shapes", count=8), ["blocks.5"])
    assert vit.training  # back in the mode it came in
    vit.eval()


def test_summaries_refuse_inputs_that_gave_a_silent_number():
    """Each of these returned a number (or NaN) without a word before; the accepted neighbours still work."""
    from helpers import intervals, localization, probes, receptive_fields
    from helpers.compare import gram_without, remove_class_means
    # an interval of a number whose subsample was NaN was silently NaN; NaN in the same cell everywhere stays a marker
    with pytest.raises(ValueError, match="Subsample 1 gave NaN"):
        intervals.subsample_interval(0.5, [0.4, float("nan"), 0.6])
    low, high = intervals.subsample_interval([0.5, float("nan")], [[0.4, float("nan")], [0.6, float("nan")]])
    assert np.isfinite(low[0]) and np.isnan(high[1])
    with pytest.raises(ValueError, match="infinite"):
        intervals.subsample_interval(0.5, [0.4, float("inf")])
    with pytest.raises(ValueError, match="low is above high"):
        intervals.covers(1.0, 0.0, 0.5)
    # receptive-field summaries: a negative top read the window from the far edge; an outside window gave 0.0
    erf = np.ones((8, 8))
    assert receptive_fields.window_fraction(erf, 2, 2, 4) == 0.25
    for top, left, size in ((-2, -2, 4), (6, 0, 4), (0, 0, 0)):
        with pytest.raises(ValueError, match="not inside"):
            receptive_fields.window_fraction(erf, top, left, size)
    with pytest.raises(ValueError, match="threshold"):
        receptive_fields.support(np.pad(erf, 4), -0.5)  # counted the zero border as support
    with pytest.raises(ValueError, match="1x1"):
        receptive_fields.uniform_mass_radius(0, 0)
    # localization: the biased CKA of 2 images is 1 for every token and patch; NaN maps gave NaN scores
    tokens, patches = torch.randn(2, 4, 3), torch.randn(2, 4, 5)
    with pytest.raises(ValueError, match="always 1"):
        localization.localization_maps(tokens, patches, debiased=False)
    maps = localization.localization_maps(torch.randn(6, 4, 3), torch.randn(6, 4, 5), debiased=False)
    assert localization.localization_scores(maps, (2, 2))["own"].shape == (4,)
    with pytest.raises(ValueError, match="NaN"):
        localization.localization_scores(maps * float("nan"), (2, 2))
    with pytest.raises(ValueError, match="1x1"):
        localization.position_kinds((0, 3))
    for grid in (2, (2.0, 2), (2, 2, 1), "22", (True, 2)):  # raw unpacking/indexing errors, or True read as 1
        with pytest.raises(TypeError, match="grid must be"):
            localization.localization_scores(maps, grid)
    assert localization.localization_scores(maps, np.array([2, 2]))["own"].shape == (4,)
    # probes: no validation image per class ended in numpy's IndexError
    x, y = torch.randn(20, 5), np.repeat(np.arange(4), 5)
    with pytest.raises(ValueError, match="val_per_class"):
        probes.few_shot_accuracy(x, y, x, y, shots=2, repeats=1, val_per_class=0)
    # classes and Grams: NaN labels became classes of their own; features in place of a Gram gave torch's shape error
    with pytest.raises(ValueError, match="NaN"):
        remove_class_means(torch.randn(4, 2), [0.0, 1.0, float("nan"), 1.0])
    with pytest.raises(ValueError, match="square"):
        gram_without(torch.randn(20, 8), torch.randn(20))


def test_a_vit_given_images_of_another_size_says_which_size_it_takes(vit):
    """timm's bare AssertionError ('Input height (48) doesn't match model (32)') becomes advice, in every helper
    that takes a raw batch."""
    from helpers import receptive_fields, residuals
    wrong = torch.rand(2, 3, 48, 48)
    for call in (lambda: attention.attention_maps(vit, wrong), lambda: attention.attention_of_heads(vit, wrong, 0),
                 lambda: receptive_fields.receptive_fields(vit, wrong), lambda: residuals.vit_norm_ratios(vit, [wrong])):
        with pytest.raises(ValueError, match="takes 32x32 inputs"):
            call()
    assert len(attention.attention_maps(vit, torch.rand(2, 3, 32, 32))) == len(vit.blocks)


def test_subsets_labels_nulls_and_saved_matrices_refuse_quiet_mistakes(vit, images, tmp_path):
    """subset([-1]) gave the last image, subset([0.5]) the first, a True/False mask image 1 sixteen times and
    subset([100]) a bare IndexError; tensor_set took -1 and 0.5 as labels; a null of NaN statistics was a list of
    NaN; CKAMatrix.save('folder') wrote folder.npz beside the folder; batches('lite-vit', ...) an AttributeError."""
    from helpers import nulls
    from helpers.data import batches, subset
    assert subset(images, np.array([3, 1])).labels == [images.labels[3], images.labels[1]]
    for indices, error in (([-1], IndexError), ([100], IndexError), ([0.5], ValueError), ([], ValueError),
                           (np.ones(32, bool), TypeError)):
        with pytest.raises(error, match="indices"):
            subset(images, indices)
    pixels = torch.zeros(4, 3, 8, 8, dtype=torch.uint8)
    for labels in ([0, 1, -1, 2], [0, 0.5, 1, 1]):
        with pytest.raises(ValueError, match="class indices"):
            tensor_set(pixels, labels=labels)
    few = subset(images, range(8))
    with pytest.raises(ValueError, match="finite"):
        nulls.shuffled_statistic(lambda m: float("nan"), vit, vit, few, "blocks.0", "blocks.1", "all", "all", shuffles=2)
    with pytest.raises(TypeError, match="shuffles"):
        nulls.shuffled_matrices(vit, vit, few, "blocks.0", "blocks.1", "all", "all", shuffles=2.5)
    matrix = CKAMatrix(np.eye(2), ["a", "b"], ["c", "d"])
    with pytest.raises(IsADirectoryError, match="folder"):
        matrix.save(tmp_path)
    assert matrix.save(tmp_path / "m").name == "m.npz"
    with pytest.raises(TypeError, match="torch.nn.Module"):
        next(batches(images, "lite-vit", 8))


def test_claim_effects_refuse_inputs_that_gave_a_number():
    """Each returned a number before: a uniform distance of 0 (every head 'global'), no test images (a
    ZeroDivisionError), a uniform r50 of 0, a missing block (list.index's bare message), a reference CKA of 0 (inf),
    accuracies of two shapes (broadcast), lower blocks that select none (NaN with a warning), no matched depths."""
    from helpers.effects import attention as f2, mixer as f10, probes as f8, receptive as f4, skips as f5, structure as f1
    checks = [(lambda: f2.mix(np.full((6, 8), 10.0), 0), "uniform"),
              (lambda: f2.accuracy_drop_half_width(0.9, 0, 0.8, 100), "numbers of test images"),
              (lambda: f4.midway(3.0, 0.0), "uniform_r50"),
              (lambda: f5.cut(["b0.norm1", "b0.attn"], 7), "No layer 'b7.attn'"),
              (lambda: f10.relative_same_depth(np.eye(3), np.zeros((3, 3))), "second seed"),
              (lambda: f8.probe_gain([0.6, 0.7], [0.5]), "same shape"),
              (lambda: f8.top_minus_lower([0.1, 0.2], slice(5, 9)), "selects none"),
              (lambda: f1.climb([]), "matched depths")]
    for call, message in checks:
        with pytest.raises(ValueError, match=message):
            call()
    assert f2.accuracy_drop_half_width(0.9, 1000, 0.8, 1000) > 0 and f5.cut(["b0.norm1", "b0.attn"], 0) == 1


def test_loading_and_capturing_refuse_arguments_that_were_taken_or_crashed(vit, resnet, images, tmp_path):
    """models.load(pretrained='no') fetched the pretrained weights; a state dict as weights= and device='cuda:7' on
    a machine without one raised raw torch errors (the device only after the model was built); amp='yes' passed on
    the CPU and failed only on a GPU; a prefix count that leaves no patch tokens gave (B, 0) rows; a head twice
    in a group of head_groups_cka was accepted."""
    from helpers.capture import apply_policy
    with pytest.raises(TypeError, match="pretrained must be True or False"):
        models.load("lite-vit", pretrained="no")
    with pytest.raises(TypeError, match="path of a .safetensors"):
        models.load("resnet18", weights={"fc.weight": torch.zeros(1)})
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            models.load("lite-vit", device="cuda:7")
    with pytest.raises(ValueError, match="amp='yes'"):
        cka_matrix(vit, image_set("shapes", count=8), "blocks.0", amp="yes", progress=False)
    for prefix in (5, 9):
        with pytest.raises(ValueError, match="leaves no patch tokens"):
            apply_policy(torch.randn(2, 5, 8), "spatial", prefix)
    assert apply_policy(torch.randn(2, 5, 8), "spatial", 1).shape == (2, 32)
    with pytest.raises(ValueError, match="distinct head indices"):
        head_groups_cka(vit, resnet, image_set("shapes", count=8), {"a": [0, 0]}, ["layer1.0"])


def test_a_matrix_with_holes_and_an_rdm_of_ties_are_refused():
    """CKAMatrix took NaN values, and argmax read a NaN as the best match; rsa_vector of a layer whose images are all
    equally far apart (the report's RSA path) gave a vector of NaN, where rsa() already refused."""
    from helpers import measures
    with pytest.raises(ValueError, match="1 NaN or inf"):
        CKAMatrix(np.array([[0.5, np.nan]]), ["a"], ["c", "d"])
    constant = np.ones((12, 12))
    with pytest.raises(ValueError, match="every rank of the RDM tied"):
        measures.rsa_vector(constant)
    X = np.random.default_rng(0).normal(size=(12, 3))
    assert measures.rsa_vector(X @ X.T) @ measures.rsa_vector(X @ X.T) == pytest.approx(1.0)


def test_figures_attention_residuals_shapes_and_the_zoo_name_the_mistake(vit):
    """Each gave a raw library error or a silent number: heatmap of a 1-D or 3-D array (matplotlib's 'Invalid shape')
    or with too few labels (IndexError); cka_heatmap of an array (AttributeError); attention maps of NaN images (maps
    of NaN); patch_distances(2.5) (a 2x2 grid); resnet_norm_ratios of NaN images (NaN ratios, where the ViT's refused);
    shapes.render([0.5]) (image 0), load_split(count=-1) (all but the last image) and count=0 (torch.cat's error);
    sincos_2d(0, 8) (an empty table); zoo.build('lite-vitt') (a bare KeyError)."""
    import matplotlib
    matplotlib.use("agg")
    from helpers import attention, plots, residuals, shapes, zoo
    for values, labels in ((np.ones(3), None), (np.ones((2, 2, 2)), None), (np.zeros((0, 0)), None)):
        with pytest.raises(ValueError, match="matrix"):
            plots.heatmap(values, rows=labels)
    with pytest.raises(ValueError, match="1 labels for the rows"):
        plots.heatmap(np.eye(2), rows=["a"])
    with pytest.raises(TypeError, match="CKAMatrix"):
        plots.cka_heatmap(np.eye(2))
    images = torch.full((2, 3, 32, 32), float("nan"))
    with pytest.raises(ValueError, match="NaN or inf"):
        attention.attention_maps(vit, images)
    with pytest.raises(ValueError, match="grid=2.5"):
        attention.patch_distances(2.5, 4)
    resnet = models.load("lite-resnet")
    with pytest.raises(ValueError, match="NaN or inf"):
        residuals.resnet_norm_ratios(resnet, images)
    with pytest.raises(ValueError, match="whole image numbers"):
        shapes.render([0.5])
    assert shapes.render(np.array([3.0]))[1].tolist() == shapes.render([3])[1].tolist()  # whole floats still read
    for count in (0, -1):
        with pytest.raises(ValueError, match="count"):
            shapes.load_split("test", count=count)
    with pytest.raises(ValueError, match="grid"):
        zoo.sincos_2d(0, 8)
    with pytest.raises(KeyError, match="did you mean lite-vit"):
        zoo.build("lite-vitt")


def test_floors_claims_and_token_captures_name_the_mistake(vit):
    """Each gave a silent result or a raw error: untrained(name, -1), (1.5) and ('0') built a model (torch took the
    seed as given); untrained_draws({}) yielded five empty draws; floor_effects over no draws gave an empty floor, and
    an effects_of that returned a number an AttributeError; claims_of('07_vit_vs_resnet') and claims_of(7) gave [];
    capture_tokens with no layers said 'No images were given', with max_gib=nan had no limit, with pool_to=(0, 0)
    gave empty tokens and with pool_to=(3,) torch's error; summarise({}) a KeyError."""
    from helpers import claims, floors, localization
    for seed, error in ((-1, ValueError), (1.5, TypeError), ("0", TypeError)):
        with pytest.raises(error, match="seed"):
            floors.untrained("lite-vit", seed)
    with pytest.raises(ValueError, match="non-empty dict"):
        next(floors.untrained_draws({}))
    with pytest.raises(ValueError, match="at least 5 untrained draws"):
        floors.floor_effects(lambda m: {"F1.1": 0.1}, [])
    with pytest.raises(TypeError, match="must return"):
        floors.floor_effects(lambda m: 0.1, [(s, None) for s in range(5)])
    assert floors.floor_effects(lambda m: {"F1.1": m}, [(s, s / 10) for s in range(5)])["F1.1"] == [0, 0.1, 0.2, 0.3, 0.4]
    for notebook in ("07_vit_vs_resnet", 7):
        with pytest.raises(ValueError, match="two-digit"):
            claims.claims_of(notebook)
    assert claims.claims_of("16") == [] and claims.claims_of("06")
    images = torch.zeros(4, 3, 32, 32)
    for kwargs, message in (({"layers": []}, "layers is empty"), ({"layers": ["blocks.0"], "max_gib": float("nan")}, "max_gib"),
                            ({"layers": ["blocks.0"], "pool_to": (0, 0)}, "pool_to"), ({"layers": ["blocks.0"], "pool_to": (3,)}, "pool_to")):
        with pytest.raises(ValueError, match=message):
            localization.capture_tokens(vit, images, **kwargs)
    with pytest.raises(ValueError, match="localization_scores"):
        localization.summarise({})


def test_the_accumulator_and_the_matrix_refuse_quiet_miscounts():
    """MinibatchCKA('ab') took the layers 'a' and 'b'; acc.merge(acc) counted its batches twice (32 examples from 16);
    merge('x') raised AttributeError, result('meta') dict's own ValueError; a CKAMatrix with a row name twice was
    built, and cell() read the first of them."""
    from helpers.minibatch_cka import MinibatchCKA
    with pytest.raises(TypeError, match="list of layer names"):
        MinibatchCKA("ab")
    acc = MinibatchCKA(["a"])
    acc.update({"a": torch.randn(16, 5, generator=torch.Generator().manual_seed(0))})
    with pytest.raises(ValueError, match="cannot merge itself"):
        acc.merge(acc)
    with pytest.raises(TypeError, match="another MinibatchCKA"):
        acc.merge("x")
    with pytest.raises(TypeError, match="meta must be a dict"):
        acc.result("meta")
    assert acc.result().n_examples == 16
    with pytest.raises(ValueError, match="appear twice"):
        CKAMatrix(np.eye(2), ["a", "a"], ["c", "d"])


def test_a_cka_matrix_refuses_counts_that_are_not_counts():
    """CKAMatrix(n_examples=-1) or n_batches=2.5 was kept and printed in the heatmap's title and the saved file."""
    for counts, error in ((dict(n_examples=-1), ValueError), (dict(n_batches=2.5), TypeError),
                          (dict(n_examples="512"), TypeError), (dict(n_batches=True), TypeError)):
        with pytest.raises(error, match="n_examples|n_batches"):
            CKAMatrix(np.eye(2), ["a", "b"], ["c", "d"], **counts)
    assert CKAMatrix(np.eye(2), ["a", "b"], ["c", "d"], n_examples=np.int64(512)).n_examples == 512


def test_a_seed_that_is_not_a_whole_number_is_named():
    """course.start(seed=1.5) and seed='0' raised numpy's 'Cannot cast scalar from dtype' and seed=None int()'s error;
    True was taken as the seed 1."""
    from helpers import course
    for seed, error in ((1.5, TypeError), ("0", TypeError), (None, TypeError), (True, TypeError), (-1, ValueError),
                        (2 ** 40, ValueError)):
        with pytest.raises(error, match="seed"):
            course.start(seed=seed, quiet=True)
