"""Activation capture (hooks, presets, token policies, errors) and the streaming CKA matrix."""

import numpy as np
import pytest
import timm
import torch

from helpers import cka, zoo
from helpers.capture import Capture, apply_policy, resolve
from helpers.compare import cka_matrix
from helpers.data import image_set


def n_hooks(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_hooks_removed_after_success_and_after_an_exception(vit):
    x = torch.randn(2, 3, 32, 32)
    with Capture(vit, "sublayers") as rec:
        vit(x)
        assert len(rec.take()) == 36
    assert n_hooks(vit) == 0
    with pytest.raises(ZeroDivisionError):
        with Capture(vit, "blocks"):
            vit(x)
            1 / 0
    assert n_hooks(vit) == 0


def test_block_outputs_equal_forward_intermediates(vit):
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad(), Capture(vit, "blocks") as rec:
        vit(x)
        captured = rec.take()
        reference = vit.forward_intermediates(x, output_fmt="NLC", return_prefix_tokens=True,
                                              norm=False, intermediates_only=True)
    for (label, rows), (spatial, prefix) in zip(captured.items(), reference):  # timm returns (patches, prefix)
        torch.testing.assert_close(rows, torch.cat([prefix, spatial], 1).flatten(1))


def test_sublayer_preset_reads_the_residual_stream(vit):
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad(), Capture(vit, "sublayers", policy="all") as rec:
        vit(x)
        f = rec.take()
    block0_input = None
    with torch.no_grad(), Capture(vit, ["blocks.0:input"]) as rec:
        vit(x)
        block0_input = rec.take()["blocks.0:input"]
    # residual after attention = block input + attention output (LayerScale and DropPath are identities)
    torch.testing.assert_close(f["b0.resid"], block0_input + f["b0.attn"])


def test_token_policies():
    tokens = torch.arange(2 * 5 * 3, dtype=torch.float32).reshape(2, 5, 3)  # 1 CLS + 4 patches
    assert apply_policy(tokens, "all", 1).shape == (2, 15)
    torch.testing.assert_close(apply_policy(tokens, "cls", 1), tokens[:, 0])
    assert apply_policy(tokens, "spatial", 1).shape == (2, 12)
    torch.testing.assert_close(apply_policy(tokens, "mean", 1), tokens[:, 1:].mean(1))
    maps = torch.randn(2, 4, 3, 3)
    assert apply_policy(maps, "all", 0).shape == (2, 36)
    with pytest.raises(ValueError, match="no CLS"):
        apply_policy(maps, "cls", 0)
    with pytest.raises(ValueError, match="no CLS"):
        apply_policy(tokens, "cls", 0)


def test_inplace_relu_does_not_overwrite_what_was_captured(resnet):
    with torch.no_grad(), Capture(resnet, ["bn1"]) as rec:
        resnet(torch.randn(2, 3, 32, 32))
        assert (rec.take()["bn1"] < 0).any()  # would be all >= 0 if the in-place ReLU had run over it


def test_presets_exist_for_the_papers_model_families():
    assert len(resolve(timm.create_model("resnet50"), "blocks")) == 16
    assert len(resolve(timm.create_model("resnetv2_50x1_bit"), "sublayers")) == 17
    assert len(resolve(timm.create_model("test_efficientnet"), "blocks")) > 3
    assert [t.label for t in resolve(zoo.build("lite-resnet"), "sublayers")][:2] == ["stem", "layer1.0"]


def test_convnext_and_swin_presets_take_every_block_in_its_own_layout():
    """ConvNeXt: stages.S.blocks.J, channels-first block outputs. Swin: layers.S.blocks.J, channels-last, so 'mean'
    pools over H and W and gives one C-vector per image (reading (B, H, W, C) as (B, C, H, W) would give W values)."""
    convnext = timm.create_model("convnext_atto").eval()
    taps = resolve(convnext, "blocks")
    assert [t.module for t in taps] == [f"stages.{s}.blocks.{j}" for s in range(4) for j in range(len(convnext.stages[s].blocks))]
    assert {t.layout for t in taps} == {"NCHW"}
    swin = timm.create_model("swin_tiny_patch4_window7_224", img_size=64, window_size=2).eval()
    taps = resolve(swin, "sublayers")
    assert taps[0].module == "patch_embed" and {t.layout for t in taps} == {"NHWC"}
    assert [t.module for t in taps[1:]] == [f"layers.{s}.blocks.{j}" for s in range(4) for j in range(len(swin.layers[s].blocks))]
    with torch.no_grad(), Capture(swin, "blocks", policy="mean") as rec:
        swin(torch.randn(2, 3, 64, 64))
        features = rec.take()
    assert features["s3.b1"].shape == (2, swin.num_features)
    with pytest.raises(ValueError, match="presets exist for timm's ViT, MLP-Mixer, ResNet, ResNetV2, EfficientNet, ConvNeXt and Swin"):
        resolve(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3)), "blocks")


def test_capture_errors(vit):
    x = torch.randn(2, 3, 32, 32)
    with pytest.raises(ValueError, match="Did you mean: blocks.1.attn"):
        Capture(vit, ["blocks.1.atn"])
    with pytest.raises(ValueError, match="matches no module"):
        Capture(vit, ["layer*"])
    with pytest.raises(ValueError, match="given twice"):
        Capture(vit, ["blocks.0", "blocks.0"])
    with pytest.raises(ValueError, match="token policy"):
        Capture(vit, "blocks", policy="first")
    with Capture(vit, ["blocks.0.attn.attn_drop"]) as rec:  # fused attention never calls attn_drop
        vit(x)
        with pytest.raises(RuntimeError, match="fused attention"):
            rec.take()
    with Capture(vit, "blocks") as rec:
        with pytest.raises(RuntimeError, match="inside the"):
            rec.take()
    shared = torch.nn.Linear(4, 4)
    twice = torch.nn.Sequential(shared, torch.nn.ReLU(), shared)
    with Capture(twice, ["0"]) as rec:
        with pytest.raises(RuntimeError, match="ran 2 times"):
            twice(torch.randn(2, 4))
    with Capture(twice, ["0"], on_repeat="last") as rec:
        twice(torch.randn(2, 4))
        assert rec.take()["0"].shape == (2, 4)
    # two passes of the model's parts (not of the model itself) are not one pass with a shared module
    with Capture(vit, ["blocks.0"]) as rec:
        tokens = torch.randn(2, 65, vit.embed_dim)
        vit.blocks(tokens)
        with pytest.raises(RuntimeError, match="outside any call of the model itself"):
            vit.blocks(tokens)
    with Capture(vit, ["blocks.0"]) as rec:  # two whole passes, each taken, are fine
        for _ in range(2):
            vit(x)
            assert rec.take()["blocks.0"].shape[0] == x.shape[0]


# ---------------------------------------------------------------- the streaming matrix


def test_streaming_matrix_equals_direct_computation_on_stored_features(vit, resnet):
    images = image_set("shapes", count=96)
    result = cka_matrix(vit, images, "blocks", model_b=resnet, layers_b="blocks", batch_size=96, progress=False)
    from helpers.data import batches
    with torch.no_grad(), Capture(vit, "blocks") as ra, Capture(resnet, "blocks") as rb:
        vit(next(batches(images, vit, 96)))
        resnet(next(batches(images, resnet, 96)))
        fa, fb = ra.take(), rb.take()
    for i, a in enumerate(fa.values()):
        for j, b in enumerate(fb.values()):
            assert result.values[i, j] == pytest.approx(cka.linear_cka(a, b, debiased=True), abs=1e-4)
    assert result.meta["policy_a"] == "all" and result.rows[0] == "block0" and result.cols[0] == "layer1.0"


def test_model_against_itself_gives_ones_on_the_diagonal_and_different_models_do_not(vit, resnet):
    images = image_set("shapes", count=128)
    within = cka_matrix(vit, images, "blocks", batch_size=64, progress=False)
    np.testing.assert_allclose(np.diag(within.values), 1.0, atol=1e-6)
    across = cka_matrix(vit, images, "blocks", model_b=resnet, batch_size=64, progress=False)  # layers_b defaults to blocks
    assert across.values.max() < 0.99  # catches comparing A with A by mistake
    assert across.meta["layers_b"] == "blocks" and within.meta["layers_b"] == "blocks"  # the preset that ran, recorded
    assert within.n_examples == 128 and within.n_batches == 2


def test_matrix_does_not_depend_on_batch_size_beyond_noise(vit):
    images = image_set("shapes", count=256)
    big = cka_matrix(vit, images, "blocks", batch_size=256, progress=False).values
    small = cka_matrix(vit, images, "blocks", batch_size=128, progress=False).values
    assert np.abs(big - small).max() < 0.05


def test_head_groups_cka_equals_direct_computation_on_one_batch(vit, resnet):
    from helpers.attention import attention_of_heads
    from helpers.compare import head_groups_cka
    from helpers.data import batches

    images = image_set("shapes", count=64)
    groups = {"heads 0+1": [0, 1], "head 3": [3]}
    result = head_groups_cka(vit, resnet, images, groups, ["layer1.0", "layer2.1"], batch_size=64)
    x = next(batches(images, vit, 64))
    heads = attention_of_heads(vit, x, 0)[:, :, 1:]  # patch tokens of every head of block 0
    with torch.no_grad(), Capture(resnet, ["layer1.0", "layer2.1"]) as rec:
        resnet(next(batches(images, resnet, 64)))
        cnn = rec.take()
    for i, group in enumerate(groups.values()):
        for j, features in enumerate(cnn.values()):
            direct = cka.linear_cka(heads[:, group].flatten(1), features, debiased=True)
            assert result.values[i, j] == pytest.approx(direct, abs=1e-4)
    assert result.rows == list(groups) and result.cols == ["layer1.0", "layer2.1"]
    with pytest.raises(ValueError, match="head indices"):
        head_groups_cka(vit, resnet, images, {"bad": [vit.blocks[0].attn.num_heads]}, ["layer1.0"])


def test_label_cka_equals_direct_computation_and_knows_a_perfect_layer(vit):
    from helpers.compare import label_cka
    from helpers.data import ImageSet, batches

    images = image_set("shapes", count=64)
    result = label_cka(vit, images, "blocks", policy="cls", batch_size=64)
    one_hot = torch.nn.functional.one_hot(torch.tensor(images.labels)).float()
    with torch.no_grad(), Capture(vit, "blocks", "cls") as rec:
        vit(next(batches(images, vit, 64)))
        features = rec.take()
    for i, f in enumerate(features.values()):
        assert result.values[i, 0] == pytest.approx(cka.linear_cka(f, one_hot, debiased=True), abs=1e-4)
    assert result.cols == ["class labels"] and result.rows == list(features)

    class Oracle(torch.nn.Module):  # a "layer" that outputs each image's label, one-hot: CKA exactly 1
        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.ones(1))
            self.layer = torch.nn.Identity()
            self.pretrained_cfg = vit.pretrained_cfg  # 32 x 32 input, so the shapes images fit

        def forward(self, x):
            return self.layer(self.scale * one_hot[: len(x)])

    perfect = label_cka(Oracle(), ImageSet("shapes", 64, images.get, images.labels, images.tensor), ["layer"], batch_size=64)
    # the layer's Gram and the labels' Gram are the same float32 numbers, and every product and sum
    # after them is float64: 1 to float64 rounding on any machine (it was 0.99999807 on one CPU
    # when the cross term came from a float32 product and the self terms from float64 sums)
    assert perfect.values[0, 0] == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError, match="no class labels"):
        label_cka(vit, ImageSet("unlabelled", 64, images.get, None, images.tensor), "blocks")


def test_within_class_cka_equals_direct_computation_on_one_batch(vit, resnet):
    from helpers.compare import pooled_features, remove_class_means, within_class_cka

    images = image_set("shapes", count=96)
    result = within_class_cka(resnet, vit, images, "blocks", "blocks", "mean", "cls", batch_size=96)
    fr = pooled_features(resnet, images, "blocks", "mean")
    fv = pooled_features(vit, images, "blocks", "cls")
    assert fr["layer4.1"].shape == (96, 256) and fv["block5"].shape == (96, 64)
    for i, a in enumerate(fr.values()):
        for j, b in enumerate(fv.values()):
            direct = cka.linear_cka(remove_class_means(a, images.labels), remove_class_means(b, images.labels), debiased=True)
            assert result.values[i, j] == pytest.approx(direct, abs=1e-4)
    assert result.meta["class_means_removed"] and result.rows[0] == "layer1.0"


def test_remove_class_means_leaves_only_within_class_variation():
    from helpers.compare import remove_class_means

    labels = torch.tensor([0, 0, 1, 1, 1])
    features = torch.tensor([[1.0, 2.0], [3.0, 2.0], [10.0, 0.0], [11.0, 3.0], [12.0, 6.0]])
    centred = remove_class_means(features, labels)
    assert torch.allclose(centred, torch.tensor([[-1.0, 0.0], [1.0, 0.0], [-1.0, -3.0], [0.0, 0.0], [1.0, 3.0]], dtype=torch.float64))
    with pytest.raises(ValueError, match="one label per image"):
        remove_class_means(features, labels[:4])
    # labels need not be 0..K-1: the same result for classes 3 and 7
    assert torch.allclose(remove_class_means(features, labels * 4 + 3), centred)


def test_within_class_cka_refuses_what_it_cannot_do(vit, resnet, monkeypatch):
    from helpers import compare
    from helpers.data import ImageSet

    images = image_set("shapes", count=64)
    with pytest.raises(ValueError, match="no class labels"):
        compare.within_class_cka(resnet, vit, ImageSet("unlabelled", 64, images.get, None, images.tensor))
    monkeypatch.setattr(compare, "MAX_KEPT_VALUES", 1000)
    with pytest.raises(MemoryError, match="pooled token policy"):
        compare.pooled_features(vit, images, "blocks", "all")


def test_regress_out_leaves_nothing_the_covariate_explains():
    from helpers.compare import regress_out

    g = torch.Generator().manual_seed(0)
    brightness = torch.rand(200, generator=g)
    rest = torch.randn(200, 5, generator=g)
    features = 3.0 * brightness[:, None] + rest + 7.0
    left = regress_out(features, brightness)
    assert left.dtype == torch.float64 and left.shape == (200, 5)
    assert torch.allclose(left.mean(0), torch.zeros(5, dtype=torch.float64), atol=1e-10)            # no constant left
    assert torch.allclose(brightness.double() @ left, torch.zeros(5, dtype=torch.float64), atol=1e-9)  # nothing linear in it
    assert float(cka.linear_cka(left, rest.double())) > 0.99  # and the rest survives
    with pytest.raises(ValueError, match="one row per image"):
        regress_out(features, brightness[:10])


def test_gram_without_equals_the_gram_of_regressed_features():
    from helpers.compare import gram_without, regress_out

    g = torch.Generator().manual_seed(1)
    X = torch.randn(40, 7, generator=g, dtype=torch.float64)
    covariate = torch.rand(40, generator=g)
    left = regress_out(X, covariate)
    assert torch.allclose(gram_without(X @ X.T, covariate), left @ left.T, atol=1e-10)
    with pytest.raises(ValueError, match="one row per image"):
        gram_without(X @ X.T, covariate[:5])


@pytest.mark.parametrize("name", ["lite-mixer", "lite-efficientnet"])
def test_presets_and_policies_work_for_mixers_and_efficientnets(name):
    torch.manual_seed(0)
    model = zoo.build(name).eval()
    x = torch.randn(4, 3, 32, 32)
    for preset, per_block in (("blocks", 1), ("sublayers", 5)):
        with torch.no_grad(), Capture(model, preset) as rec:
            model(x)
            features = rec.take()
        if name == "lite-mixer":
            assert len(features) == per_block * len(model.blocks)
            assert all(f.shape[0] == 4 for f in features.values())
    with pytest.raises(ValueError, match="CLS"):
        Capture(model, "blocks", policy="cls")  # neither has a CLS token
    if name == "lite-mixer":
        with torch.no_grad(), Capture(model, "blocks", policy="mean") as rec:
            model(x)
            assert rec.take()["block0"].shape == (4, 64)  # the mean over the 64 tokens, one row of 64 channels
    result = cka_matrix(model, image_set("shapes", count=16), "blocks", batch_size=16, progress=False)
    np.testing.assert_allclose(np.diag(result.values), 1.0, atol=1e-12)


def test_grams_stay_float32_under_autocast():
    """cka_matrix(amp=True) runs the forward passes in bfloat16; the Grams in the hooks must not follow."""
    from helpers.compare import _gram_of_rows
    rows = torch.randn(16, 40)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert (rows @ rows.T).dtype == torch.bfloat16  # what autocast does to a plain matmul
        gram = _gram_of_rows(rows)
    assert gram.dtype == torch.float32
    centred = rows - rows.mean(0)
    torch.testing.assert_close(gram, centred @ centred.T, rtol=1e-5, atol=1e-4)
