"""helpers.localization: token-by-patch CKA maps (F7), validated on a model that IS its input patches."""

import numpy as np
import pytest
import torch

from helpers import cka, localization


class PatchModel(torch.nn.Module):
    """A 'ViT' whose final-block output at each grid position is exactly the raw input patch there.

    (B, 3, H, W) -> (B, 1 + (H/P)(W/P), 3*P*P): a CLS token of zeros plus one token per patch.
    """

    def __init__(self, patch=4, cls=True):
        super().__init__()
        self.patch, self.num_prefix_tokens = patch, int(cls)
        self.blocks = torch.nn.Sequential(torch.nn.Identity())
        self.scale = torch.nn.Parameter(torch.ones(()))

    def forward(self, x):
        tokens = localization.patch_grid(x, self.patch) * self.scale
        if self.num_prefix_tokens:
            tokens = torch.cat([torch.zeros_like(tokens[:, :1]), tokens], 1)
        return self.blocks(tokens)


def _images(n=200, size=16, seed=0):
    return torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(seed))


def test_patch_grid_order_is_row_major():
    x = torch.arange(2 * 3 * 4 * 4, dtype=torch.float32).reshape(2, 3, 4, 4)
    p = localization.patch_grid(x, 2)
    assert p.shape == (2, 4, 12)
    # position 1 is row 0, column 1: pixels (0..1, 2..3) of every channel
    assert torch.equal(p[0, 1].reshape(3, 2, 2), x[0, :, 0:2, 2:4])
    assert torch.equal(p[1, 2].reshape(3, 2, 2), x[1, :, 2:4, 0:2])


def test_synthetic_model_peaks_exactly_at_its_own_patch():
    images = _images()
    tokens = localization.capture_tokens(PatchModel(patch=4), images, ["blocks.0"])["blocks.0"]
    assert tokens.prefix == 1 and tokens.grid == (4, 4) and tokens.values.shape == (200, 17, 48)
    maps = localization.localization_maps(tokens.spatial, localization.patch_grid(images, 4))
    assert maps.shape == (16, 16)
    assert torch.equal(maps.argmax(1), torch.arange(16))           # every heatmap peaks at its own position
    assert torch.allclose(maps.diagonal(), torch.ones(16, dtype=torch.float64), atol=1e-10)
    scores = localization.localization_scores(maps, tokens.grid)
    assert (scores["rank"] == 0).all() and (scores["contrast"] > 0.9).all()


@pytest.mark.parametrize("n", [50, 6])  # more images than features, and fewer (the full track's wide layers, few images)
def test_maps_match_linear_cka_entry_by_entry(n):
    g = torch.Generator().manual_seed(1)
    X, Y = torch.randn(n, 3, 5, generator=g, dtype=torch.float64), torch.randn(n, 4, 7, generator=g, dtype=torch.float64)
    Y[:, 2] += X[:, 1] @ torch.randn(5, 7, generator=g, dtype=torch.float64)
    for debiased in (False, True):
        maps = localization.localization_maps(X, Y, debiased=debiased, chunk=2)
        expected = [[cka.linear_cka(X[:, t], Y[:, q], debiased=debiased) for q in range(4)] for t in range(3)]
        np.testing.assert_allclose(maps.numpy(), np.array(expected), atol=1e-10)
        grams = localization.localization_maps(X, Y, debiased=debiased, chunk=2, form="grams")
        np.testing.assert_allclose(grams.numpy(), np.array(expected), atol=1e-10)
        fast = localization.localization_maps(X.float(), Y.float(), debiased=debiased)  # float32 products
        np.testing.assert_allclose(fast.numpy(), np.array(expected), atol=1e-5)


def _direct_gram_maps(X, Y, debiased):
    """The Gram form written out whole: every (n, n) Gram of both sides at once, U-centred out of place."""
    def grams(A):
        A = A.double() - A.double().mean(0)
        G = torch.einsum("ntd,mtd->tnm", A, A)
        if debiased:
            n = G.shape[1]
            G = G * (1 - torch.eye(n, dtype=G.dtype))
            means = G.sum(1) / (n - 2)
            means = means - means.sum(1, keepdim=True) / (2 * (n - 1))
            G = (G - means[:, :, None] - means[:, None, :]) * (1 - torch.eye(n, dtype=G.dtype))
        return G.reshape(len(G), -1)
    GX, GY = grams(X), grams(Y)
    return (GX @ GY.T) / (GX.norm(dim=1)[:, None] * GY.norm(dim=1)[None])


@pytest.mark.parametrize("features_x, features_y, holds_patches", [(9, 3, False), (3, 9, True)])
def test_gram_form_in_blocks_equals_the_whole_gram_stack(features_x, features_y, holds_patches):
    # gram_gib fits 2 Grams: several blocks of the side held and chunks of 3 of the other, on either side
    g, n = torch.Generator().manual_seed(3), 40
    X, Y = torch.randn(n, 7, features_x, generator=g), torch.randn(n, 5, features_y, generator=g)
    Y[:, 1, :3] += X[:, 4, :3]
    two_grams = 2 * n * n * 8 / 2 ** 30
    assert localization._gram_blocks(X, Y, n, 3, two_grams) == (holds_patches, 2)
    for debiased in (False, True):
        maps = localization.localization_maps(X, Y, debiased=debiased, chunk=3, form="grams", gram_gib=two_grams)
        whole = localization.localization_maps(X, Y, debiased=debiased, form="grams")
        expected = _direct_gram_maps(X, Y, debiased)
        assert maps.shape == (7, 5) and maps.dtype == torch.float64
        np.testing.assert_allclose(maps.numpy(), expected.numpy(), rtol=1e-12, atol=1e-14)  # float64 rounding only
        np.testing.assert_allclose(whole.numpy(), expected.numpy(), rtol=1e-12, atol=1e-14)


def test_capture_fills_the_same_tokens_as_a_forward_pass():
    images = _images(n=21)  # batches of 8, 8 and 5
    tokens = localization.capture_tokens(PatchModel(4), images, ["blocks.0"], batch_size=8)["blocks.0"]
    assert tokens.values.dtype == torch.float32 and tokens.values.shape == (21, 17, 48)
    torch.testing.assert_close(tokens.spatial, localization.patch_grid(images, 4), rtol=0, atol=0)


def test_cnn_tokens_are_channels_at_one_position_and_pool():
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 5, 1))
    images = _images(n=8, size=8)
    tokens = localization.capture_tokens(conv, images, ["0"])["0"]
    assert tokens.prefix == 0 and tokens.grid == (8, 8) and tokens.values.shape == (8, 64, 5)
    with torch.no_grad():
        out = conv(images)
    assert torch.allclose(tokens.values[:, 8 * 2 + 3], out[:, :, 2, 3])
    pooled = localization.capture_tokens(conv, images, ["0"], pool_to=(2, 2))["0"]
    assert pooled.grid == (2, 2) and torch.allclose(pooled.values[:, 0], out[:, :, :4, :4].mean((2, 3)), atol=1e-6)
    with pytest.raises(ValueError, match="no CLS"):
        tokens.cls


def test_position_kinds():
    kinds = localization.position_kinds((3, 4)).reshape(3, 4)
    assert list(kinds[0]) == ["corner", "edge", "edge", "corner"]
    assert list(kinds[1]) == ["edge", "interior", "interior", "edge"]


def test_scores_by_hand():
    maps = np.array([[0.9, 0.5, 0.2, 0.1],    # own patch the peak: margin 0.4
                     [0.6, 0.3, 0.3, 0.0],    # own below patch 0: margin -0.3, rank 1
                     [0.1, 0.1, 0.5, 0.5],    # a tie with patch 3: margin 0, rank 0
                     [0.0, 0.0, 0.0, 0.3]])
    scores = localization.localization_scores(maps, (2, 2))
    np.testing.assert_allclose(scores["margin"], [0.4, -0.3, 0.0, 0.3])
    np.testing.assert_allclose(scores["contrast"], [0.9 - 0.8 / 3, 0.3 - 0.9 / 3, 0.5 - 0.7 / 3, 0.3])
    assert list(scores["rank"]) == [0, 1, 0, 0]
    summary = localization.summarise(scores)
    assert summary["all"]["margin"] == pytest.approx(0.1) and summary["corner"]["own_is_peak"] == 0.75


def test_bad_inputs_fail_clearly():
    X, Y = torch.randn(10, 2, 3), torch.randn(9, 2, 3)
    with pytest.raises(ValueError, match="same images"):
        localization.localization_maps(X, Y)
    with pytest.raises(ValueError, match="at least 4"):
        localization.localization_maps(X[:3], X[:3])
    bad = X.clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        localization.localization_maps(bad, X)
    with pytest.raises(ValueError, match="positions, features"):
        localization.localization_maps(X[:, 0], X)
    with pytest.raises(ValueError, match="zero variance"):
        localization.localization_maps(torch.ones(10, 2, 3), X)
    with pytest.raises(ValueError, match="Did you mean: blocks.0"):
        localization.capture_tokens(PatchModel(), _images(8), ["blocks.O"])
    with pytest.raises(ValueError, match="divisor"):
        localization.patch_grid(_images(2, 10), 4)
    with pytest.raises(ValueError, match="same grid"):
        localization.localization_scores(torch.zeros(4, 9), (2, 2))


def test_capture_tokens_refuses_more_memory_than_allowed(vit):
    """After one batch the whole capture is sized up: over max_gib it stops with the numbers, before the rest runs."""
    from helpers.data import image_set

    images = image_set("shapes", count=64)
    per_image = 6 * 65 * 64 * 4  # 6 blocks x 65 tokens x 64 features, float32
    with pytest.raises(MemoryError, match="64 images"):
        localization.capture_tokens(vit, images, [f"blocks.{i}" for i in range(6)], batch_size=16,
                                    max_gib=per_image * 63 / 2 ** 30)
    kept = localization.capture_tokens(vit, images, [f"blocks.{i}" for i in range(6)], batch_size=16,
                                       max_gib=per_image * 64 / 2 ** 30)
    assert kept["blocks.5"].values.shape == (64, 65, 64)


def test_capture_tokens_reads_swin_maps_channels_last():
    """timm's Swin writes (B, H, W, C) maps: capture_tokens must give H*W tokens of C channels, the same tokens as
    permuting the stage's output by hand (reading it as (B, C, H, W) would give W*C 'tokens' of H values)."""
    import timm

    torch.manual_seed(0)
    swin = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=64, window_size=2,
                             num_classes=10).eval()
    x = torch.randn(3, 3, 64, 64)
    tokens = localization.capture_tokens(swin, x, ["layers.1"], batch_size=3)["layers.1"]
    with torch.no_grad():
        maps = swin.layers[1](swin.layers[0](swin.patch_embed(x)))  # (B, H, W, C)
    b, h, w, c = maps.shape
    assert tokens.grid == (h, w)
    assert torch.allclose(tokens.spatial, maps.reshape(b, h * w, c), atol=1e-6)


@pytest.mark.parametrize("form", ["features", "grams"])
def test_maps_run_where_the_device_says_moving_slices_only(monkeypatch, form):
    """Notebook 12 on a GPU: every float64 slice is made on the chosen device (the course's by default),
    whatever device the captured tokens sit on, and the maps come back on the CPU, equal to the CPU maps."""
    rng = np.random.default_rng(3)
    tokens = torch.as_tensor(rng.normal(size=(12, 5, 6)), dtype=torch.float32)
    patches = torch.as_tensor(rng.normal(size=(12, 4, 3)), dtype=torch.float32)
    seen, centred = [], localization._centred
    monkeypatch.setattr(localization, "_centred", lambda A, start, stop, device=None: seen.append(device) or centred(A, start, stop, device))
    monkeypatch.setattr(localization, "pick_device", lambda: torch.device("cpu"))  # stands in for "cuda" here
    by_default = localization.localization_maps(tokens, patches, form=form)
    assert seen and all(device == torch.device("cpu") for device in seen), seen
    explicit = localization.localization_maps(tokens, patches, form=form, device="cpu")
    assert by_default.device.type == "cpu" and torch.equal(by_default, explicit)
