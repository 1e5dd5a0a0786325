"""The check functions accept the reference functions and reject a wrong one with a clear message."""

import numpy as np
import pytest

from helpers import cka, exercises


@pytest.mark.parametrize("check, good", [
    (exercises.check_gram_linear, cka.gram_linear),
    (exercises.check_gram_rbf, cka.gram_rbf),
    (exercises.check_center_gram, lambda K: cka.center_gram(K)),
    (exercises.check_hsic, cka.hsic),
    (exercises.check_cka, lambda K, L: cka.cka(K, L)),
    (exercises.check_hsic_unbiased, cka.hsic_unbiased),
    (exercises.check_minibatch_cka, exercises.minibatch_reference),
])
def test_reference_passes(check, good, capsys):
    check(good)
    assert "✔" in capsys.readouterr().out


def test_common_mistakes_are_caught():
    """An unknown mistake keeps the numbers; known slips are named (every slip: tests/test_slips.py)."""
    with pytest.raises(AssertionError, match="largest difference"):
        exercises.check_gram_linear(lambda X: X.T @ X if X.shape[0] == X.shape[1] else X @ X.T + 1)
    with pytest.raises(AssertionError, match="only the column means"):  # forgot one side of the centering
        exercises.check_center_gram(lambda K: K - K.mean(0))
    with pytest.raises(AssertionError, match="divides by n²"):
        exercises.check_hsic(lambda K, L: np.sum(cka.center_gram(K) * cka.center_gram(L)) / len(K) ** 2)
    with pytest.raises(AssertionError, match="not the median"), np.errstate(all="ignore"):  # percentile(d, 0.5) != median
        exercises.check_gram_rbf(lambda X, t: np.exp(-((X[:, None] - X[None]) ** 2).sum(-1)
                                                     / (2 * t**2 * np.percentile(((X[:, None] - X[None]) ** 2).sum(-1), 0.5))))


def test_notebook_exercise_checks_pass_the_references_and_catch_mistakes(capsys):
    """06's covariate Gram, 08's head distances and 09's equal brightness: references pass, typical slips fail."""
    import torch

    from helpers import attention, compare, data

    exercises.check_gram_without(compare.gram_without)
    exercises.check_head_distances(lambda attn, distances, prefix: attention.mean_attention_distance(attn, 4, prefix))
    exercises.check_equal_brightness(data.equal_brightness)
    assert capsys.readouterr().out.count("✔") == 3

    def centred_only(gram, covariate):  # removes the mean, but not the covariate
        h = torch.eye(len(gram), dtype=torch.float64) - 1 / len(gram)
        return h @ torch.as_tensor(gram, dtype=torch.float64) @ h

    with pytest.raises(AssertionError, match="largest difference"):
        exercises.check_gram_without(centred_only)

    def not_renormalised(attn, distances, prefix):
        return (attn[:, :, prefix:, prefix:] * distances).sum(-1).mean((0, 2))

    with pytest.raises(AssertionError, match="renormalised"):
        exercises.check_head_distances(not_renormalised)

    def shift_once(pixels):
        values = pixels.astype(float)
        return np.clip(np.rint(values + 127.5 - values.mean()), 0, 255).astype(np.uint8)

    with pytest.raises(AssertionError, match="repeat"):
        exercises.check_equal_brightness(shift_once)
    with pytest.raises(AssertionError, match="one shift"):  # stretches the contrast instead of shifting
        exercises.check_equal_brightness(lambda p: np.clip(np.rint(p * (127.5 / p.mean())), 0, 255).astype(np.uint8))


def test_grey_and_equal_brightness_images():
    """changed_images works on tensor image sets; grey keeps shapes and brightness; equal_brightness equalises."""
    from helpers import data

    images = data.image_set("shapes", count=6)
    grey = data.changed_images(images, data.grey, "grey")
    level = data.changed_images(images, data.equal_brightness, "equal brightness")
    assert grey.tensor.shape == images.tensor.shape and grey.labels == images.labels
    assert (grey.tensor[:, 0] == grey.tensor[:, 1]).all() and (grey.tensor[:, 1] == grey.tensor[:, 2]).all()
    assert (grey.tensor.float().mean((1, 2, 3)) - images.tensor.float().mean((1, 2, 3))).abs().max() < 0.5
    assert (level.tensor.float().mean((1, 2, 3)) - 127.5).abs().max() < 0.5
    assert (level.get(3) == level.tensor[3]).all()
    with pytest.raises(ValueError, match="RGB picture"):
        data.grey(np.zeros((3, 5, 3), dtype=np.uint8))
    with pytest.raises(ValueError, match="uint8 array shaped like"):  # a change that returns floats
        data.changed_images(images, lambda p: p / 2.0, "halved")
    from PIL import Image

    photos = data.ImageSet("photos", 2, lambda i: Image.new("RGB", (6, 4), (200, 10, 10 * i)))  # the full track's kind
    grey_photo = np.asarray(data.changed_images(photos, data.grey, "grey").get(1))
    assert grey_photo.shape == (4, 6, 3) and (grey_photo == 73).all()  # (200 + 10 + 10) / 3, rounded


def test_cka_without_highest_check_passes_the_reference_and_catches_slips(capsys):
    """16.1: the audit's own function passes; dropping from X only, or measuring norms from 0 instead of the mean, fail."""
    from helpers.report.audit import cka_without_highest

    exercises.check_cka_without_highest(cka_without_highest)
    assert "✔" in capsys.readouterr().out

    def from_x_only(X, Y, k):
        X, Y = np.asarray(X, float), np.asarray(Y, float)
        keep = np.sort(np.argsort(-np.linalg.norm(X - X.mean(0), axis=1))[k:])
        return float(cka.linear_cka(X[keep], Y[keep], debiased=True))

    def norms_from_zero(X, Y, k):
        X, Y = np.asarray(X, float), np.asarray(Y, float)
        drop = set(np.argsort(-np.linalg.norm(X, axis=1))[:k]) | set(np.argsort(-np.linalg.norm(Y, axis=1))[:k])
        keep = [i for i in range(len(X)) if i not in drop]
        return float(cka.linear_cka(X[keep], Y[keep], debiased=True))

    for slip, named in ((from_x_only, "only X's highest-norm"), (norms_from_zero, "from the mean image")):
        with pytest.raises(AssertionError, match=named):
            exercises.check_cka_without_highest(slip)


def test_checks_of_notebooks_07_to_15_pass_the_course_and_catch_slips(capsys):
    """07's check fails argmax(axis=0) now (non-square, asymmetric); 11's runs on a small timm ViT."""
    import timm
    import torch

    from helpers import receptive_fields

    exercises.check_matched_depth(exercises.reference_matched_depth)
    exercises.check_mass_radius(receptive_fields.mass_radius)
    exercises.check_ridge_weights(exercises.reference_ridge)
    exercises.check_gap_to_reference(exercises.reference_gap)
    exercises.check_block_structure(exercises.reference_block_structure)
    with pytest.raises(AssertionError, match="best column"):
        exercises.check_matched_depth(lambda values: np.asarray(values).argmax(axis=0) / (np.asarray(values).shape[1] - 1))
    with pytest.raises(AssertionError, match="first .smallest. split"):  # ties broken towards the last split
        exercises.check_block_structure(lambda v: max(reversed([exercises.reference_block_structure(v)]),
                                                      key=lambda s: s["contrast"]) | {"split": len(v) - 1})

    torch.manual_seed(0)
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, embed_dim=24,
                            depth=3, num_heads=2, num_classes=4).eval()
    x = torch.randn(2, 3, 32, 32)

    def mlp_ratio(block, z):
        u = z + block.ls1(block.attn(block.norm1(z)))
        return (u.norm(dim=-1) / block.ls2(block.mlp(block.norm2(u))).norm(dim=-1)).mean(0)

    exercises.check_mlp_ratio(mlp_ratio, vit, x)
    assert capsys.readouterr().out.count("✔") == 6
    with pytest.raises(AssertionError, match="block 0"):  # the attention branch left out of u
        exercises.check_mlp_ratio(lambda block, z: (z.norm(dim=-1) / block.ls2(block.mlp(block.norm2(z))).norm(dim=-1)).mean(0),
                                  vit, x)


def test_a_function_that_changes_its_input_or_a_result_in_place_of_the_function_is_named():
    """A gram_linear that zeroed X in place passed (the reference, computed after it on the same array, was zero
    too); check_gram_linear(5), the result instead of the function, was Python's 'int object is not callable'."""
    import numpy as np
    import pytest

    from helpers import exercises

    def centres_in_place(X):
        X -= X.mean(0)
        return X @ X.T

    with pytest.raises(AssertionError, match="changed its input .* in place"):
        exercises.check_gram_linear(centres_in_place)
    with pytest.raises(TypeError, match="takes your function itself"):
        exercises.check_gram_linear(np.eye(3))
    exercises.check_gram_linear(lambda X: X @ X.T)  # a right answer still passes


def test_an_answer_that_is_not_a_number_or_an_array_is_named():
    """A string, dict, tuple or generator as the answer gave numpy's 'could not convert string to float' or
    'float() argument must be ...' (a str '0.5' was even read as the number 0.5); a list from block_structure
    was told 'your dict has no [...]'. Each check now says what was returned and what to return."""
    import numpy as np
    import pytest
    import torch

    from helpers import exercises

    for wrong, what in (("0.5", "a str; return a number"), ({"hsic": 1.0}, "a dict; return a number"),
                        ((1.0, 2.0), "a tuple; return a number"), ((x for x in "ab"), "a generator")):
        with pytest.raises(AssertionError, match=what):
            exercises.check_hsic(lambda K, L, wrong=wrong: wrong)
    with pytest.raises(AssertionError, match="not an array of numbers"):
        exercises.check_gram_linear(lambda X: [[1.0, 2.0], [3.0]])
    with pytest.raises(AssertionError, match="returned a list; return a dict"):
        exercises.check_block_structure(lambda values: [1, 0.5, 0.9, 0.1])
    exercises.check_gram_linear(lambda X: torch.from_numpy(X @ X.T))  # a tensor or a list of numbers still passes
    exercises.check_gram_linear(lambda X: (X @ X.T).tolist())
    exercises.check_hsic(lambda K, L: np.float32(0) + float(exercises.reference.hsic(K, L)))
