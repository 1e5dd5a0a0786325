"""The generated dataset is deterministic, nested and balanced; image sources give clear errors."""

import numpy as np
import pytest
import torch

from helpers import data, shapes, zoo


def test_same_seed_and_index_give_the_same_image():
    a, la = shapes.render([5, 17, 40_123])
    b, lb = shapes.render([40_123, 5])  # alone or in another batch: the same image
    assert torch.equal(a[0], b[1]) and torch.equal(a[2], b[0]) and la[0] == lb[1]
    c, _ = shapes.render([5], seed=1)
    assert not torch.equal(a[0], c[0])


def test_subsets_are_nested_and_labels_balanced():
    fractions = (0.03, 0.1, 0.3, 1.0)
    sets = [shapes.split_indices("train", f) for f in fractions]
    for small, large in zip(sets, sets[1:]):
        assert set(small) < set(large)
    for idx in sets:
        counts = np.bincount(idx % 10, minlength=10)
        assert counts.min() == counts.max()
    assert not set(shapes.split_indices("test")) & set(sets[-1])


@pytest.mark.parametrize("variant", shapes.VARIANTS)
def test_colour_alone_does_not_give_the_class(variant):
    """A nearest-class-mean classifier on mean colour is at chance (10%)."""
    images, labels = shapes.load_split("train", count=4000, variant=variant)
    colour = images.float().mean(dim=(2, 3))
    means = torch.stack([colour[labels == c].mean(0) for c in range(10)])
    test_images, test_labels = shapes.load_split("test", count=2000, variant=variant)
    predicted = torch.cdist(test_images.float().mean(dim=(2, 3)), means).argmin(1)
    assert (predicted == test_labels).float().mean() < 0.2


def _brightness_gap(images):
    """(B,) grey-level gap between the middle 8 x 8 px (the shape) and the left border strip (background)."""
    grey = images.float().mean(1)
    return (grey[:, 12:20, 12:20].mean((1, 2)) - grey[:, :, :3].mean((1, 2))).abs()


@pytest.mark.parametrize("variant", sorted(shapes.CONTRAST_RANGES))
def test_contrast_variants_change_only_the_colour_gap(variant):
    """Same labels, same shapes; the brightness gap between the shape and its surround shrinks."""
    indices = list(range(0, 400, 2))
    standard, labels = shapes.render(indices)  # unchanged by the variants: tests/test_models re-scores every card on them
    faint, faint_labels = shapes.render(indices, variant=variant)
    assert torch.equal(labels, faint_labels)
    ratio = _brightness_gap(faint).mean() / _brightness_gap(standard).mean()
    lo, hi = shapes.CONTRAST_RANGES[variant]
    assert lo < ratio < hi, f"mean brightness gap shrank to {ratio:.2f} of the standard one"
    assert (_brightness_gap(faint) <= _brightness_gap(standard) + 3).float().mean() > 0.95  # pixel noise, rounding


def test_mid_contrast_is_milder_than_low_contrast():
    indices = list(range(1, 400, 2))
    low, mid = (_brightness_gap(shapes.render(indices, variant=v)[0]) for v in ("low-contrast", "mid-contrast"))
    assert mid.mean() > 1.1 * low.mean()  # factors 0.4 + 0.6u against 0.2 + 0.8u: 0.7 against 0.6 on average
    assert (mid >= low - 3).float().mean() > 0.95  # image by image, from the same random column


def test_shapes_variants_are_checked_and_recorded_in_the_recipe():
    from helpers.train import experiment

    with pytest.raises(ValueError, match="standard, low-contrast, mid-contrast"):
        shapes.render([0], variant="low contrast")
    with pytest.raises(ValueError, match="Unknown shapes variant"):
        shapes.load_split("test", count=1, variant="hard")
    assert "shapes_variant" not in zoo.ZOO["lite-vit"].describe()  # bundled cards predate variants
    recipe = experiment(zoo.ZOO["lite-vit-data03"], shapes_variant="low-contrast")
    assert recipe.describe()["shapes_variant"] == "low-contrast" and recipe.data_fraction == 0.03
    assert zoo.Recipe(**recipe.as_card()) == recipe  # a probe's card rebuilds its recipe


def test_image_sources_errors(tmp_path):
    with pytest.raises(ValueError, match="No images found"):
        data.image_set(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="not a folder"):
        data.image_set(str(tmp_path / "missing"))
    with pytest.raises(IndexError):
        shapes.render([10**7])


def test_folder_images_are_preprocessed_with_the_models_own_config(tmp_path):
    from PIL import Image
    import timm
    for i in range(3):
        Image.fromarray((np.random.default_rng(i).random((40, 50, 3)) * 255).astype(np.uint8)).save(tmp_path / f"{i}.png")
    model = timm.create_model("test_vit", pretrained=False)
    batch = next(data.batches(data.image_set(str(tmp_path)), model, batch_size=8))
    assert batch.shape == (3, 3, 160, 160)


def test_lite_models_use_their_data_config():
    model = zoo.build("lite-vit")
    images = data.image_set("shapes", count=8)
    batch = next(data.batches(images, model, batch_size=8))
    assert batch.shape == (8, 3, 32, 32)
    expected = (images.get(0).float() / 255 - 0.5) / 0.25
    assert torch.allclose(batch[0], expected)


def test_class_folders_are_mixed_and_labelled(tmp_path):
    """A class-sorted folder must not give single-class minibatches or drop classes under `count`."""
    from PIL import Image
    for k, c in enumerate(("cat", "dog", "eel")):
        (tmp_path / c).mkdir()
        for i in range(20):
            Image.new("RGB", (8, 8), (i, 50 * k, 0)).save(tmp_path / c / f"{i:02d}.png")
    images = data.image_set(str(tmp_path), count=12)
    assert len(images) == 12 and set(images.labels) == {0, 1, 2}
    again = data.image_set(str(tmp_path))
    assert again.labels[:12] == images.labels  # the same fixed order on every call
    assert sorted(again.labels) == [0] * 20 + [1] * 20 + [2] * 20
    for i in range(len(images)):  # each image's label is its own folder's
        assert images.get(i).getpixel((0, 0))[1] == 50 * images.labels[i]


def test_a_flat_folder_has_no_labels(tmp_path):
    from PIL import Image
    for i in range(3):
        Image.new("RGB", (8, 8)).save(tmp_path / f"{i}.png")
    assert data.image_set(str(tmp_path)).labels is None
