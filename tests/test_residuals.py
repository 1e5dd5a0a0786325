"""Norm ratios ||z|| / ||f(z)||: against a direct step-by-step computation, and branches that output zero."""

import numpy as np
import pytest
import torch

from helpers import residuals, zoo


def vit_with_layerscale():
    torch.manual_seed(0)
    from timm.models.vision_transformer import VisionTransformer

    model = VisionTransformer(img_size=16, patch_size=4, embed_dim=16, depth=3, num_heads=2, num_classes=3,
                              init_values=0.3)  # LayerScale on: ls1/ls2 belong to the branch
    with torch.no_grad():
        model.cls_token.normal_()
        for block in model.blocks:
            block.ls1.gamma.uniform_(0.1, 2.0)
            block.ls2.gamma.uniform_(0.1, 2.0)
    return model.eval()


def direct_ratios(model, x):
    """Walk the blocks by hand: (blocks, tokens) mean over images of ||z|| / ||f(z)|| for each branch."""
    attn, mlp = [], []
    with torch.no_grad():
        h = model.norm_pre(model._pos_embed(model.patch_embed(x)))
        for block in model.blocks:
            f = block.ls1(block.attn(block.norm1(h)))
            attn.append((h.norm(dim=-1) / f.norm(dim=-1)).mean(0))
            h = h + f
            g = block.ls2(block.mlp(block.norm2(h)))
            mlp.append((h.norm(dim=-1) / g.norm(dim=-1)).mean(0))
            h = h + g
    return torch.stack(attn).numpy(), torch.stack(mlp).numpy()


def test_vit_ratios_match_a_direct_computation():
    model = vit_with_layerscale()
    x = torch.randn(10, 3, 16, 16)
    attn, mlp = direct_ratios(model, x)
    got = residuals.vit_norm_ratios(model, [x[:4], x[4:]])  # two batches, unequal sizes: a mean over images
    assert got.attn.shape == (3, 17) and got.n_images == 10
    np.testing.assert_allclose(got.attn, attn, rtol=1e-4)
    np.testing.assert_allclose(got.mlp, mlp, rtol=1e-4)
    np.testing.assert_allclose(got.cls("attn"), attn[:, 0], rtol=1e-4)
    np.testing.assert_allclose(got.spatial("mlp"), mlp[:, 1:].mean(1), rtol=1e-4)


def test_cosine_and_per_image_values_match_a_direct_computation():
    model = vit_with_layerscale()
    x = torch.randn(10, 3, 16, 16)
    cos_attn, cos_mlp, ratio_attn = [], [], []
    with torch.no_grad():
        h = model.norm_pre(model._pos_embed(model.patch_embed(x)))
        for block in model.blocks:
            f = block.ls1(block.attn(block.norm1(h)))
            cos_attn.append(torch.nn.functional.cosine_similarity(h, f, dim=-1))  # (images, tokens)
            ratio_attn.append(h.norm(dim=-1) / f.norm(dim=-1))
            h = h + f
            g = block.ls2(block.mlp(block.norm2(h)))
            cos_mlp.append(torch.nn.functional.cosine_similarity(h, g, dim=-1))
            h = h + g
    cos_attn, cos_mlp, ratio_attn = (torch.stack(t, 1).numpy() for t in (cos_attn, cos_mlp, ratio_attn))  # (images, blocks, tokens)
    got = residuals.vit_norm_ratios(model, [x[:4], x[4:]])
    np.testing.assert_allclose(got.cosine["attn"], cos_attn.mean(0), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got.cosine["mlp"], cos_mlp.mean(0), rtol=1e-4, atol=1e-6)
    assert got.per_image["attn"]["ratio"].shape == (10, 3, 2)
    idx = np.array([1, 5, 6, 9])
    np.testing.assert_allclose(got.cls("attn", images=idx), ratio_attn[idx, :, 0].mean(0), rtol=1e-4)
    np.testing.assert_allclose(got.spatial("attn", images=idx), ratio_attn[idx, :, 1:].mean((0, 2)), rtol=1e-4)
    np.testing.assert_allclose(got.spatial("mlp", images=idx, what="cos"), cos_mlp[idx, :, 1:].mean((0, 2)), rtol=1e-4, atol=1e-6)
    # all images through the per-image path give the table's values
    np.testing.assert_allclose(got.spatial("mlp", images=np.arange(10)), got.spatial("mlp"), rtol=1e-10)
    np.testing.assert_allclose(got.cls("attn", images=np.arange(10), what="cos"), got.cls("attn", what="cos"), rtol=1e-10)


def test_layerscale_is_part_of_the_branch():
    model = vit_with_layerscale()
    x = torch.randn(4, 3, 16, 16)
    before = residuals.vit_norm_ratios(model, x).attn[0]
    with torch.no_grad():
        model.blocks[0].ls1.gamma.mul_(0.5)  # halving the scale halves ||f||, doubles the ratio of block 0
    np.testing.assert_allclose(residuals.vit_norm_ratios(model, x).attn[0], 2 * before, rtol=1e-4)


def test_a_branch_that_outputs_zero_gives_an_infinite_ratio():
    model = vit_with_layerscale()
    with torch.no_grad():
        model.blocks[1].attn.proj.weight.zero_()
        model.blocks[1].attn.proj.bias.zero_()
    got = residuals.vit_norm_ratios(model, torch.randn(4, 3, 16, 16))
    assert np.all(np.isinf(got.attn[1]))
    assert np.all(np.isfinite(got.attn[[0, 2]])) and np.all(np.isfinite(got.mlp))


def test_no_skip_block_has_no_ratio():
    model = zoo.build("lite-vit-noskip-3").eval()
    got = residuals.vit_norm_ratios(model, torch.randn(2, 3, 32, 32))
    assert np.all(np.isnan(got.attn[3])) and np.all(np.isnan(got.mlp[3]))
    assert np.all(np.isfinite(got.attn[[0, 1, 2, 4, 5]]))
    assert np.all(np.isfinite(got.f_norm["attn"][3]))  # what the branch adds is still measured
    assert np.all(np.isnan(got.cosine["attn"][3])) and np.all(np.isnan(got.per_image["mlp"]["ratio"][:, 3]))


def test_resnet_ratios_match_a_direct_computation_and_zero_branch():
    torch.manual_seed(0)
    model = zoo.build("lite-resnet").eval()
    with torch.no_grad():
        for m in model.modules():  # non-trivial BatchNorm statistics
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 2)
    x = torch.randn(6, 3, 32, 32)
    with torch.no_grad():
        h = model.maxpool(model.act1(model.bn1(model.conv1(x))))
        h = model.layer1(h)
        block = model.layer2[0]
        shortcut = block.downsample(h)
        branch = block.bn2(block.conv2(block.act1(block.bn1(block.conv1(h)))))
        expected = float((shortcut.norm(dim=1) / branch.norm(dim=1)).mean())
        h0 = model.maxpool(model.act1(model.bn1(model.conv1(x))))
        b0 = model.layer1[0]
        expected0 = float((h0.norm(dim=1) / b0.bn2(b0.conv2(b0.act1(b0.bn1(b0.conv1(h0))))).norm(dim=1)).mean())
    got = residuals.resnet_norm_ratios(model, [x[:2], x[2:]])
    assert list(got)[:3] == ["layer1.0", "layer1.1", "layer2.0"] and len(got) == 8
    assert got["layer2.0"] == pytest.approx(expected, rel=1e-5)
    assert got["layer1.0"] == pytest.approx(expected0, rel=1e-5)
    with torch.no_grad():
        model.layer3[1].bn2.weight.zero_()
        model.layer3[1].bn2.bias.zero_()
    assert np.isinf(residuals.resnet_norm_ratios(model, x)["layer3.1"])
    names, per_image = residuals.resnet_image_ratios(model, [x[:2], x[2:]])
    assert names == list(got) and per_image.shape == (6, 8)
    assert np.isinf(per_image[:, names.index("layer3.1")]).all()


def test_wrong_model_kinds_fail_clearly():
    with pytest.raises(ValueError, match="resnet_norm_ratios"):
        residuals.vit_norm_ratios(zoo.build("lite-resnet").eval(), torch.randn(2, 3, 32, 32))
    with pytest.raises(ValueError, match="vit_norm_ratios"):
        residuals.resnet_norm_ratios(zoo.build("lite-vit").eval(), torch.randn(2, 3, 32, 32))
    with pytest.raises(ValueError, match="eval"):
        residuals.vit_norm_ratios(zoo.build("lite-vit").train(), torch.randn(2, 3, 32, 32))
    with pytest.raises(ValueError, match="no CLS"):
        residuals.vit_norm_ratios(zoo.build("lite-vit-gap").eval(), torch.randn(2, 3, 32, 32)).cls("attn")
