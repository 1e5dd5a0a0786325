"""Effective receptive fields: known answers (conv stacks, a blind model, uniform attention) and the presets."""

import numpy as np
import pytest
import torch
from timm.models.vision_transformer import VisionTransformer

from helpers import receptive_fields as rf
from helpers import zoo


def conv_stack(k: int) -> torch.nn.Sequential:
    torch.manual_seed(0)
    layers = [torch.nn.Conv2d(3 if i == 0 else 4, 4, 3, padding=1) for i in range(k)]
    for layer in layers:  # positive weights: no cancellation inside the field, exact zeros outside it
        torch.nn.init.uniform_(layer.weight, 0.1, 1.0)
    return torch.nn.Sequential(*layers).eval()


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_k_stacked_3x3_convs_see_exactly_2k_plus_1_pixels(k):
    model = conv_stack(k)
    fields = rf.receptive_fields(model, torch.randn(4, 3, 21, 21), [str(i) for i in range(k)])
    for i in range(k):
        erf = fields.maps[str(i)]
        assert rf.support(erf) == (2 * (i + 1) + 1,) * 2
        assert fields.centres[str(i)] == (10.0, 10.0)
        rows, cols = np.nonzero(erf)
        assert rows.min() == 10 - (i + 1) and cols.max() == 10 + (i + 1)  # centred on the centre pixel


def test_each_channel_reading_is_an_upper_bound_of_the_sum_reading():
    model = conv_stack(2)
    torch.nn.init.normal_(model[1].weight)  # signed weights: channel gradients can cancel in the sum
    x = torch.randn(3, 3, 15, 15)
    summed = rf.receptive_fields(model, x, ["1"]).maps["1"]
    each = rf.receptive_fields(model, x, ["1"], channels="each").maps["1"]
    assert rf.support(each) == rf.support(summed) == (5, 5)
    assert np.all(each * model[1].out_channels >= summed * (1 - 1e-5))  # mean_c |g_c| >= |sum_c g_c| / C (float32)
    assert np.any(each * model[1].out_channels > summed * 1.01)  # and the channels do cancel somewhere


def test_sampled_channels_estimate_the_each_reading():
    vit = zoo.build("lite-vit").eval()
    x = torch.randn(4, 3, 32, 32)
    each = rf.receptive_fields(vit, x, ["blocks.1"], channels="each").maps["blocks.1"]
    all_sampled = rf.receptive_fields(vit, x, ["blocks.1"], channels=64).maps["blocks.1"]  # k = C: every channel once
    np.testing.assert_allclose(all_sampled, each, rtol=1e-4, atol=1e-9)
    few = rf.receptive_fields(vit, x, ["blocks.1"], channels=8).maps["blocks.1"]
    assert rf.support(few) == rf.support(each)
    assert 0.5 < few.sum() / each.sum() < 2


class Blind(torch.nn.Module):
    """Output that ignores the input: a constant map (and a zero-weight conv)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 2, 3, padding=1)
        torch.nn.init.zeros_(self.conv.weight)
        self.const = torch.nn.Parameter(torch.ones(1, 2, 9, 9))

    def forward(self, x):
        return self.conv(x) + self.const.expand(len(x), -1, -1, -1)


def test_a_model_that_ignores_its_input_has_no_field():
    model = Blind().eval()
    fields = rf.receptive_fields(model, torch.randn(2, 3, 9, 9), ["conv"])
    erf = fields.maps["conv"]
    assert erf.shape == (9, 9) and not erf.any()
    assert rf.support(erf) == (0, 0)
    assert np.isnan(rf.mass_radius(erf, fields.centres["conv"]))


def uniform_attention_vit(depth=1) -> VisionTransformer:
    torch.manual_seed(0)
    model = VisionTransformer(img_size=16, patch_size=4, embed_dim=16, depth=depth, num_heads=2, num_classes=3)
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight[:2 * 16].zero_()  # q = k = 0 (bias 0 too): softmax of zeros = uniform
            block.attn.qkv.bias[:2 * 16].zero_()
    return model.eval()


def test_one_uniform_attention_layer_sees_the_whole_image():
    model = uniform_attention_vit()
    fields = rf.receptive_fields(model, torch.randn(8, 3, 16, 16), "both")
    branch = fields.maps["b0.attn.branch"]
    assert np.all(branch > 0) and rf.support(branch) == (16, 16)
    # uniform attention: every patch contributes alike, wherever the centre is
    per_patch = branch.reshape(4, 4, 4, 4).sum((1, 3))
    np.testing.assert_allclose(per_patch, per_patch.mean(), rtol=0.35)
    # the post-residual stream adds the centre patch's own path on top of the uniform mix
    post = fields.maps["b0.attn"]
    assert rf.window_fraction(post, 8, 8, 4) > rf.window_fraction(branch, 8, 8, 4)
    assert fields.centre == (9.5, 9.5)  # grid 4 x 4: centre patch (2, 2), pixels 8-11


def test_uniform_attention_makes_the_branch_centre_independent_but_not_the_post_residual_stream():
    """Shuffle which patch is the centre: the branch map's patch sums stay flat, the post map peaks at its centre."""
    model = uniform_attention_vit()
    fields = rf.receptive_fields(model, torch.randn(8, 3, 16, 16), ["blocks.0.ls1", "blocks.0.norm2:input"])
    branch = fields.maps["blocks.0.ls1"].reshape(4, 4, 4, 4).sum((1, 3))
    post = fields.maps["blocks.0.norm2:input"].reshape(4, 4, 4, 4).sum((1, 3))
    assert post.argmax() == 2 * 4 + 2
    assert post.max() / post.mean() > branch.max() / branch.mean()


def test_presets_for_the_lite_models():
    vit, resnet = zoo.build("lite-vit").eval(), zoo.build("lite-resnet").eval()
    x = torch.randn(2, 3, 32, 32)
    v = rf.receptive_fields(vit, x, "both")
    assert v.labels[:2] == ["b0.attn", "b0.mlp"] and "b5.mlp.branch" in v.labels and len(v.labels) == 24
    assert v.centre == (17.5, 17.5)
    r = rf.receptive_fields(resnet, x, "both")
    assert r.labels[0] == "stem" and "layer4.1" in r.labels and "layer1.0.branch" in r.labels
    assert r.centres["stem"] == (16.5, 16.5) and r.centres["layer4.1"] == (23.5, 23.5)  # 16x16 and 2x2 maps (cell (1, 1) of 16-px cells)
    # the branch of layer1.0 must not include the shortcut: its field is smaller than the block's
    assert rf.support(r.maps["layer1.0.branch"])[0] <= rf.support(r.maps["layer1.0"])[0]


def test_no_skip_block_post_residual_equals_its_branch():
    vit = zoo.build("lite-vit-noskip-1").eval()
    fields = rf.receptive_fields(vit, torch.randn(2, 3, 32, 32), "both")
    np.testing.assert_allclose(fields.maps["b1.attn"], fields.maps["b1.attn.branch"], rtol=1e-5, atol=1e-9)


def test_bad_inputs_fail_clearly():
    vit = zoo.build("lite-vit").eval()
    with pytest.raises(ValueError, match="at most 32"):
        rf.receptive_fields(vit, torch.randn(33, 3, 32, 32))
    with pytest.raises(ValueError, match="No images given"):  # was "NaN or inf ... check its weights"
        rf.receptive_fields(vit, torch.randn(0, 3, 32, 32))
    with pytest.raises(ValueError, match="Did you mean"):
        rf.receptive_fields(vit, torch.randn(2, 3, 32, 32), ["blocks.1.nrom1"])
    with pytest.raises(ValueError, match="eval"):
        rf.receptive_fields(vit.train(), torch.randn(2, 3, 32, 32))
    vit.eval()
    with pytest.raises(RuntimeError, match="inference_mode"), torch.inference_mode():
        rf.receptive_fields(vit, torch.randn(2, 3, 32, 32))
    with pytest.raises(ValueError, match="module names"):
        rf.receptive_fields(conv_stack(2), torch.randn(2, 3, 9, 9), "post")
    with pytest.raises(ValueError, match="channels"):
        rf.receptive_fields(vit, torch.randn(2, 3, 32, 32), channels="mean")


def test_mass_radius_known_answers():
    erf = np.zeros((11, 11))
    erf[5, 5] = 1.0
    assert rf.mass_radius(erf, (5, 5)) == 0.0
    erf[5, 8] = 1.0  # half the mass at the centre, half 3 px away
    assert rf.mass_radius(erf, (5, 5), 0.5) == 0.0 and rf.mass_radius(erf, (5, 5), 0.75) == 3.0
    assert rf.uniform_mass_radius(32, 32, (17.5, 17.5)) > 8
    assert rf.centroid(erf) == (5.0, 6.5) and rf.mass_radius(erf) == 1.5  # around the centre of mass
    assert rf.uniform_mass_radius(31, 31) == rf.mass_radius(np.ones((31, 31)), (15, 15))
    with pytest.raises(ValueError):
        rf.mass_radius(-erf, (5, 5))


@pytest.mark.parametrize("channels", ["sum", "each", 3])
def test_per_image_maps_average_to_the_field_and_match_each_image_alone(channels):
    vit = zoo.build("lite-vit").eval()
    x = torch.randn(5, 3, 32, 32)
    fields = rf.receptive_fields(vit, x, ["blocks.1"], channels=channels, per_image=True)
    stack = fields.image_maps["blocks.1"]
    assert stack.shape == (5, 32, 32)
    np.testing.assert_allclose(fields.on_images(np.arange(5))["blocks.1"], fields.maps["blocks.1"], rtol=1e-12)
    if channels != 3:  # sampled channels are drawn per batch, so one image alone draws others
        alone = rf.receptive_fields(vit, x[2:3], ["blocks.1"], channels=channels).maps["blocks.1"]
        np.testing.assert_allclose(stack[2], alone, rtol=1e-4, atol=1e-9)
    np.testing.assert_allclose(fields.on_images([1, 3])["blocks.1"], stack[[1, 3]].mean(0))


def test_on_images_needs_per_image_maps_and_valid_indices():
    fields = rf.receptive_fields(conv_stack(1), torch.randn(2, 3, 9, 9), ["0"])
    assert fields.image_maps == {}
    with pytest.raises(ValueError, match="per_image=True"):
        fields.on_images([0])
    kept = rf.receptive_fields(conv_stack(1), torch.randn(2, 3, 9, 9), ["0"], per_image=True)
    with pytest.raises(ValueError, match="image indices"):
        kept.on_images([2])
