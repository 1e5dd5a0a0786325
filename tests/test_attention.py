"""Attention maps of timm ViTs and the mean attention distance."""

import pytest
import torch

from helpers import attention, zoo


def test_attention_maps_are_probabilities_and_model_is_left_unchanged():
    model = zoo.build("lite-vit").eval()
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        before = model(x)
    maps = attention.attention_maps(model, x)
    H = model.blocks[0].attn.num_heads
    assert len(maps) == 6 and maps[0].shape == (3, H, 65, 65)
    for a in maps:
        torch.testing.assert_close(a.sum(-1), torch.ones(a.shape[:-1]))
    assert all(blk.attn.fused_attn == zoo.build("lite-vit").blocks[0].attn.fused_attn for blk in model.blocks)
    with torch.no_grad():
        torch.testing.assert_close(model(x), before)


def test_attention_maps_reproduce_the_attention_output():
    """softmax(qk^T) @ v, merged over heads and projected, equals the block's own attention output."""
    model = zoo.build("lite-vit").eval()
    x = torch.randn(2, 3, 32, 32)
    block = model.blocks[0]
    seen = {}
    block.norm1.register_forward_hook(lambda m, i, o: seen.__setitem__("in", o))
    block.attn.register_forward_hook(lambda m, i, o: seen.__setitem__("out", o))
    probs = attention.attention_maps(model, x)[0]
    B, N, C = seen["in"].shape
    H = block.attn.num_heads
    qkv = block.attn.qkv(seen["in"]).reshape(B, N, 3, H, C // H).permute(2, 0, 3, 1, 4)
    mixed = (probs @ qkv[2]).transpose(1, 2).reshape(B, N, C)
    torch.testing.assert_close(block.attn.proj(mixed), seen["out"], atol=1e-5, rtol=1e-5)


def test_mean_attention_distance_known_cases():
    grid, patch = 4, 8
    uniform = torch.full((1, 1, grid * grid, grid * grid), 1.0 / (grid * grid))
    assert attention.mean_attention_distance(uniform, patch, 0)[0] == pytest.approx(attention.uniform_attention_distance(grid, patch))
    self_only = torch.eye(grid * grid)[None, None]
    assert attention.mean_attention_distance(self_only, patch, 0)[0] == 0
    # with a CLS token that takes half of every row: renormalised over patches, the distance is unchanged
    with_cls = torch.zeros(1, 1, 17, 17)
    with_cls[0, 0, :, 0] = 0.5
    with_cls[0, 0, 1:, 1:] = 0.5 * torch.eye(16)
    assert attention.mean_attention_distance(with_cls, patch, 1)[0] == 0
    # uniform attention over an 8x8 grid of 4-px patches, the lite ViT's grid
    assert attention.uniform_attention_distance(8, 4) == pytest.approx(16.55, abs=0.01)


def test_a_patch_size_or_grid_of_zero_is_refused():
    """A patch size of 0 px gave every head a mean distance of 0 (a 'local' head), a grid of 0 a NaN reference."""
    uniform = torch.full((1, 1, 16, 16), 1 / 16)
    with pytest.raises(ValueError, match="patch size in pixels"):
        attention.mean_attention_distance(uniform, 0, 0)
    with pytest.raises(ValueError, match="patch grid's side"):
        attention.uniform_attention_distance(0, 4)


def test_models_without_attention_are_refused():
    with pytest.raises(ValueError, match="timm ViTs"):
        attention.attention_maps(zoo.build("lite-resnet"), torch.randn(1, 3, 32, 32))


def test_distance_table_streams_batches_without_changing_the_answer():
    from helpers.data import image_set, preprocess_for

    torch.manual_seed(0)
    model = zoo.build("lite-vit").eval()
    images = image_set("shapes", count=40)
    table = attention.attention_distance_table(model, images, batch_size=16)  # batches of 16, 16, 8
    maps = attention.attention_maps(model, preprocess_for(model)(images.tensor))
    direct = torch.stack([attention.mean_attention_distance(a, 4, 1) for a in maps]).numpy()
    assert table.shape == (6, model.blocks[0].attn.num_heads)
    assert abs(table - direct).max() < 1e-9


def test_distance_table_per_image_averages_to_the_table():
    """per_image=True gives each image's own distances; their mean over images is the table, and a subset's
    mean is the table of that subset (what intervals over image subsamples use)."""
    from helpers.data import image_set, preprocess_for, subset

    torch.manual_seed(0)
    model = zoo.build("lite-vit").eval()
    images = image_set("shapes", count=40)
    table = attention.attention_distance_table(model, images, batch_size=16)
    rows = attention.attention_distance_table(model, images, batch_size=16, per_image=True)
    assert rows.shape == (40,) + table.shape
    assert abs(rows.mean(axis=0) - table).max() < 1e-9
    some = [3, 17, 22, 39, 5]
    assert abs(rows[some].mean(axis=0) - attention.attention_distance_table(model, subset(images, some))).max() < 1e-9
    first_two = attention.attention_distance_table(model, images, batch_size=16, blocks=2, per_image=True)
    assert first_two.shape == (40, 2, table.shape[1]) and abs(first_two - rows[:, :2]).max() < 1e-12
    maps = attention.attention_maps(model, preprocess_for(model)(images.tensor[:4]))
    per = attention.mean_attention_distance(maps[0], 4, 1, per_image=True)
    assert per.shape == (4, table.shape[1])
    assert torch.allclose(per.mean(0), attention.mean_attention_distance(maps[0], 4, 1), atol=1e-12)


def test_head_outputs_are_what_the_projection_mixes():
    torch.manual_seed(0)
    model = zoo.build("lite-vit").eval()
    x = torch.randn(3, 3, 32, 32)
    heads = attention.attention_of_heads(model, x, block=2)  # (B, heads, N, head_dim)
    H = model.blocks[2].attn.num_heads
    assert heads.shape == (3, H, 65, 64 // H)
    captured = []
    handle = model.blocks[2].attn.register_forward_hook(lambda _m, _i, out: captured.append(out))
    with torch.no_grad():
        model(x)
    handle.remove()
    concatenated = heads.permute(0, 2, 1, 3).reshape(3, 65, 64)
    assert torch.allclose(model.blocks[2].attn.proj(concatenated), captured[0], atol=1e-6)


def test_head_outputs_stop_the_forward_pass_at_their_block():
    """One pass up to the block asked for: later blocks and the head never run, and the model is left as it was."""
    torch.manual_seed(0)
    model = zoo.build("lite-vit").train()
    later = []
    handles = [model.blocks[1].register_forward_hook(lambda *_: later.append("blocks.1")),
               model.head.register_forward_hook(lambda *_: later.append("head"))]
    heads = attention.attention_of_heads(model, torch.randn(2, 3, 32, 32), block=0)
    H = model.blocks[0].attn.num_heads
    assert heads.shape == (2, H, 65, 64 // H) and later == []
    assert model.training and not model.blocks[0].attn.proj._forward_pre_hooks
    for handle in handles:
        handle.remove()
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)  # a normal pass afterwards


def test_the_first_blocks_alone_give_the_same_distances_and_stop_the_pass():
    from helpers.data import image_set

    torch.manual_seed(0)
    model = zoo.build("lite-vit").eval()
    images = image_set("shapes", count=24)
    whole = attention.attention_distance_table(model, images, batch_size=16)
    ran = []
    handle = model.blocks[2].register_forward_hook(lambda *_: ran.append("blocks.2"))
    first_two = attention.attention_distance_table(model, images, batch_size=16, blocks=2)
    handle.remove()
    assert first_two.shape == (2, whole.shape[1]) and (first_two == whole[:2]).all()
    assert ran == [], "the blocks after the last one asked for ran"
    assert len(attention.attention_maps(model, torch.randn(2, 3, 32, 32), blocks=6)) == 6
    for bad in (0, 7, 1.5, True):
        with pytest.raises(ValueError, match="blocks="):
            attention.attention_maps(model, torch.randn(2, 3, 32, 32), blocks=bad)
