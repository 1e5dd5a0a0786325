"""The streaming accumulator: agreement with full-batch CKA, float32 safety, invariances, merging, errors."""

import os

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from helpers import cka as C
from helpers import minibatch_cka as MB
from helpers.minibatch_cka import CKAMatrix, MinibatchCKA


def make_layers(n=512, seed=0):
    """Three related 'layers' of n examples with different widths, as float64 tensors."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 20, generator=g, dtype=torch.float64)
    return {
        "a": x,
        "b": torch.tanh(x @ torch.randn(20, 30, generator=g, dtype=torch.float64)),
        "c": x[:, :5] + 0.5 * torch.randn(n, 5, generator=g, dtype=torch.float64),
    }


def run(acc, layers_a, layers_b=None, batch=128, order=None):
    n = next(iter(layers_a.values())).shape[0]
    starts = list(range(0, n, batch))
    if order is not None:
        starts = [starts[i] for i in order]
    for s in starts:
        fa = {k: v[s:s + batch] for k, v in layers_a.items()}
        fb = None if layers_b is None else {k: v[s:s + batch] for k, v in layers_b.items()}
        acc.update(fa, fb)
    return acc.result()


def test_one_batch_equals_debiased_cka():
    layers = make_layers(n=300)
    result = run(MinibatchCKA(list(layers)), layers, batch=300)
    for i, a in enumerate(layers):
        for j, b in enumerate(layers):
            expected = C.linear_cka(layers[a], layers[b], debiased=True)
            assert result.values[i, j] == pytest.approx(expected, abs=1e-6)


def test_many_batches_equal_the_sum_formula():
    """CKA_mb = sum_i HSIC1(K_i, L_i) / sqrt(sum_i HSIC1(K_i, K_i) sum_i HSIC1(L_i, L_i)), written out by hand."""
    layers = make_layers()
    result = run(MinibatchCKA(["a", "c"], ["b"]), {k: layers[k] for k in "ac"}, {"b": layers["b"]}, batch=128)
    for i, a in enumerate("ac"):
        sums = np.zeros(3)
        for s in range(0, 512, 128):
            K, L = C.gram_linear(layers[a][s:s + 128]), C.gram_linear(layers["b"][s:s + 128])
            sums += [C.hsic_unbiased(K, L), C.hsic_unbiased(K, K), C.hsic_unbiased(L, L)]
        # float64 features and float64 sums: agreement to float64 rounding, on any machine
        assert result.values[i, 0] == pytest.approx(sums[0] / np.sqrt(sums[1] * sums[2]), abs=1e-12)
    assert (result.rows, result.cols, result.n_examples, result.n_batches) == (["a", "c"], ["b"], 512, 4)


# ---------------------------------------------------------------- unequal batches


def run_sizes(layers_a, layers_b, sizes):
    """Feed consecutive batches of the given sizes; returns the (La, Lb) values."""
    acc, start = MinibatchCKA(list(layers_a), list(layers_b)), 0
    for m in sizes:
        acc.update({k: v[start:start + m] for k, v in layers_a.items()}, {k: v[start:start + m] for k, v in layers_b.items()})
        start += m
    return acc.result().values


def unweighted_sum_formula(a, b, sizes):
    """The formula with every batch's HSIC_1 counted once, whatever its size (what the course did before)."""
    sums, start = np.zeros(3), 0
    for m in sizes:
        K, L = C.gram_linear(a[start:start + m]), C.gram_linear(b[start:start + m])
        sums += [C.hsic_unbiased(K, L), C.hsic_unbiased(K, K), C.hsic_unbiased(L, L)]
        start += m
    return sums[0] / np.sqrt(sums[1] * sums[2])


def test_a_tiny_last_batch_moves_the_value_by_less_than_its_share():
    """260 examples in batches of 256: the last 4 are 1.5% of the images and may move CKA by at most that."""
    share, moved_unweighted = 4 / 260, []
    for seed in range(5):
        layers = make_layers(n=260, seed=seed)
        a, b = {"a": layers["a"]}, {"b": layers["b"]}
        first_256 = run_sizes(a, b, [256])[0, 0]
        assert abs(run_sizes(a, b, [256, 4])[0, 0] - first_256) <= share
        moved_unweighted.append(abs(unweighted_sum_formula(layers["a"], layers["b"], [256, 4]) - first_256))
    assert max(moved_unweighted) > share  # the test can fail: unweighted batches do move it more than their share


def test_unequal_batches_agree_with_one_batch_within_sampling_noise():
    """Batches of 700, 300, 1000 and 48 over 20 random orders of the same 2,048 examples.

    (Equal batches give the sum formula exactly: test_many_batches_equal_the_sum_formula.)
    """
    layers = make_layers(n=2048, seed=7)
    sizes, repeats = [700, 300, 1000, 48], 20
    one_batch = run_sizes({"c": layers["c"]}, {"b": layers["b"]}, [2048])[0, 0]
    weighted, unweighted = [], []
    for seed in range(repeats):
        order = torch.randperm(2048, generator=torch.Generator().manual_seed(seed))
        c, b = layers["c"][order], layers["b"][order]
        weighted.append(run_sizes({"c": c}, {"b": b}, sizes)[0, 0])
        unweighted.append(unweighted_sum_formula(c, b, sizes))
    # no offset from the one-batch value beyond 4 standard errors of the mean over the repeats
    assert abs(np.mean(weighted) - one_batch) <= 4 * np.std(weighted) / np.sqrt(repeats)
    # and less noisy than counting each batch once (the 48 no longer weigh like the 1,000)
    assert np.std(weighted) < np.std(unweighted)


def test_minibatch_estimate_is_close_to_full_batch():
    layers = make_layers(n=2048, seed=5)
    result = run(MinibatchCKA(list(layers)), layers, batch=256)
    full = C.linear_cka(layers["a"], layers["b"], debiased=True)
    assert result.cell("a", "b") == pytest.approx(full, abs=0.02)


def test_float32_with_large_offset_matches_float64():
    """Without per-batch centering this case cancels catastrophically in float32 (it gives NaN)."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(1024, 768, generator=g, dtype=torch.float64) + 50.0
    Y = 0.5 * X + torch.randn(1024, 768, generator=g, dtype=torch.float64) + 50.0
    r64 = run(MinibatchCKA(["x"], ["y"]), {"x": X}, {"y": Y}, batch=256).values
    r32 = run(MinibatchCKA(["x"], ["y"]), {"x": X.float()}, {"y": Y.float()}, batch=256).values
    assert np.isfinite(r32).all()
    assert abs(r32[0, 0] - r64[0, 0]) < 1e-4


def test_float32_with_a_huge_offset_matches_float64_arithmetic_on_the_same_values():
    """Features varying by about 1 on an offset of 1e6 (16 float32 steps): the float32 path must agree
    with float64 arithmetic on the very same float32 numbers (it was off by 0.57 before)."""
    g = torch.Generator().manual_seed(0)
    Z = torch.randn(512, 64, generator=g, dtype=torch.float64)
    X, Y = (Z + 1e6).float(), (torch.tanh(Z) + 1e6).float()
    r32 = run(MinibatchCKA(["x"], ["y"]), {"x": X}, {"y": Y}, batch=128).values[0, 0]
    reference = C.linear_cka(X.double(), Y.double(), debiased=False)  # full batch, float64, same values
    r64 = run(MinibatchCKA(["x"], ["y"]), {"x": X.double()}, {"y": Y.double()}, batch=128).values[0, 0]
    assert abs(r32 - r64) < 1e-6 and r32 > 0.8 and reference > 0.8


def test_the_blocked_gram_is_the_full_product():
    """symmetric_gram forms only the row blocks on and above the diagonal and copies the rest: sizes
    below, at, just above and between multiples of its block."""
    g = torch.Generator().manual_seed(3)
    for m in (5, MB.GRAM_BLOCK, MB.GRAM_BLOCK + 1, 200, 4 * MB.GRAM_BLOCK):
        X = torch.randn(m, 37, generator=g, dtype=torch.float64)
        torch.testing.assert_close(MB.symmetric_gram(X), X @ X.T, rtol=1e-12, atol=1e-12)


def test_pair_sums_block_by_block_equal_the_unbiased_hsic(monkeypatch):
    """hsic_sums U-centres a few Gram rows at a time; with one row per block its sums must still be
    m(m-3) HSIC_1 of helpers.cka for every pair, cross and self terms alike."""
    g = torch.Generator().manual_seed(4)
    m = 130
    A = [torch.randn(m, w, generator=g, dtype=torch.float64) for w in (3, 20, 50)]
    B = [torch.tanh(A[1] @ torch.randn(20, 9, generator=g, dtype=torch.float64)), torch.randn(m, 4, generator=g, dtype=torch.float64)]
    grams_a = torch.stack([MB.centered_gram(x) for x in A])
    grams_b = torch.stack([MB.centered_gram(y) for y in B])
    monkeypatch.setattr(MB, "U_BLOCK_NUMBERS", 1)  # one Gram row per block
    cross, self_a, self_b = MB.hsic_sums(grams_a, grams_b)
    within, diagonal, _ = MB.hsic_sums(grams_a)
    scale = m * (m - 3)
    for i, x in enumerate(A):
        K = C.gram_linear(x)
        assert self_a[i] == pytest.approx(scale * C.hsic_unbiased(K, K), rel=1e-10)
        assert diagonal[i] == pytest.approx(scale * C.hsic_unbiased(K, K), rel=1e-10)
        for j, y in enumerate(B):
            assert cross[i, j] == pytest.approx(scale * C.hsic_unbiased(K, C.gram_linear(y)), rel=1e-10, abs=1e-10 * scale)
        for j, z in enumerate(A):
            assert within[i, j] == pytest.approx(scale * C.hsic_unbiased(K, C.gram_linear(z)), rel=1e-10, abs=1e-10 * scale)
    for j, y in enumerate(B):
        assert self_b[j] == pytest.approx(scale * C.hsic_unbiased(C.gram_linear(y), C.gram_linear(y)), rel=1e-10)


def test_self_similarity_is_exactly_one():
    layers = {k: v.float() for k, v in make_layers().items()}
    within = run(MinibatchCKA(list(layers)), layers)
    np.testing.assert_allclose(np.diag(within.values), 1.0, atol=1e-6)
    across = run(MinibatchCKA(list(layers), list(layers)), layers, layers)
    # float32 Grams, but U-centred and multiplied in float64 for cross and self terms alike:
    # a representation against an identical copy is 1 to float64 rounding, whatever the BLAS
    np.testing.assert_allclose(np.diag(across.values), 1.0, atol=1e-12)
    np.testing.assert_allclose(within.values, across.values, atol=1e-12)
    np.testing.assert_allclose(within.values, within.values.T, atol=1e-12)


def test_scale_and_batch_order_do_not_matter():
    layers = make_layers()
    base = run(MinibatchCKA(list(layers)), layers).values
    for scale in (1e-3, 1e3):
        scaled = {k: (v * scale).float() for k, v in layers.items()}
        np.testing.assert_allclose(run(MinibatchCKA(list(layers)), scaled).values, base, atol=1e-5)
    shuffled = run(MinibatchCKA(list(layers)), layers, order=[3, 1, 0, 2]).values
    np.testing.assert_allclose(shuffled, base, atol=1e-12)


def test_feature_maps_are_flattened():
    g = torch.Generator().manual_seed(1)
    maps = torch.randn(64, 3, 4, 4, generator=g)
    result = run(MinibatchCKA(["map"], ["flat"]), {"map": maps}, {"flat": maps.reshape(64, -1)}, batch=64)
    assert result.values[0, 0] == pytest.approx(1.0, abs=1e-6)


def test_merge_is_exact():
    layers = make_layers()
    whole = MinibatchCKA(list(layers))
    run(whole, layers)
    first, second = MinibatchCKA(list(layers)), MinibatchCKA(list(layers))
    run(first, {k: v[:256] for k, v in layers.items()})
    run(second, {k: v[256:] for k, v in layers.items()})
    merged = first.merge(second).result()
    np.testing.assert_allclose(merged.values, whole.result().values, atol=1e-12)
    assert (merged.n_examples, merged.n_batches) == (512, 4)


def _distributed_worker(rank, world_size, init_file, out_file):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    layers = make_layers()
    half = {k: v[rank * 256:(rank + 1) * 256] for k, v in layers.items()}
    acc = MinibatchCKA(list(layers))
    run(acc, half)
    result = acc.all_reduce().result()
    if rank == 0:
        result.save(out_file)
    dist.destroy_process_group()


def test_all_reduce_across_two_processes_is_exact(tmp_path):
    out = tmp_path / "result.npz"
    mp.spawn(_distributed_worker, args=(2, str(tmp_path / "init"), str(out)), nprocs=2, join=True)
    whole = MinibatchCKA(list(make_layers()))
    expected = run(whole, make_layers())
    got = CKAMatrix.load(out)
    np.testing.assert_allclose(got.values, expected.values, atol=1e-12)
    assert got.n_examples == 512 and got.n_batches == 4


def test_save_and_load_round_trip(tmp_path):
    layers = make_layers()
    result = run(MinibatchCKA(list(layers)), layers)
    result.meta = {"model": "toy", "token_policy": "all"}
    loaded = CKAMatrix.load(result.save(tmp_path / "m.npz"))
    np.testing.assert_array_equal(loaded.values, result.values)
    assert (loaded.rows, loaded.meta, loaded.estimator) == (result.rows, result.meta, result.estimator)


# ---------------------------------------------------------------- bad input


def test_bad_input_gives_clear_errors():
    x = torch.randn(32, 5)
    with pytest.raises(ValueError, match="twice"):
        MinibatchCKA(["a", "a"])
    with pytest.raises(ValueError, match="at least 4"):
        MinibatchCKA(["a"]).update({"a": x[:3]})
    with pytest.raises(ValueError, match="same images|Feed both"):
        MinibatchCKA(["a"], ["b"]).update({"a": x}, {"b": x[:16]})
    with pytest.raises(ValueError, match="different numbers of examples"):
        MinibatchCKA(["a", "b"]).update({"a": x, "b": x[:16]})
    with pytest.raises(ValueError, match="NaN"):
        MinibatchCKA(["a"]).update({"a": torch.where(x > 1, float("nan"), x)})
    with pytest.raises(KeyError, match="no features"):
        MinibatchCKA(["a", "b"]).update({"a": x})
    with pytest.raises(ValueError, match="pass features_b"):
        MinibatchCKA(["a"], ["b"]).update({"a": x})
    with pytest.raises(RuntimeError, match="No batches"):
        MinibatchCKA(["a"]).result()
    acc = MinibatchCKA(["dead", "alive"])
    acc.update({"dead": torch.ones(32, 5), "alive": x})
    with pytest.raises(ValueError, match=r"\['dead'\].*zero variance"):
        acc.result()


def test_features_constant_up_to_rounding_are_reported_not_turned_into_a_number():
    """A CLS token before attention is the same vector for every image, except for float32 rounding
    in the batched arithmetic. That residue must not pass for variance (it gave CKA -0.001 before)."""
    torch.manual_seed(0)
    row = torch.randn(32) * 7.3
    acc = MinibatchCKA(["cls before attention"], ["varies"])
    for _ in range(4):
        nearly_constant = row * (1 + 1e-7 * torch.randn(256, 32))  # float32 rounding differences per image
        acc.update({"cls before attention": nearly_constant}, {"varies": torch.randn(256, 8)})
    with pytest.raises(ValueError, match="zero variance"):
        acc.result()
    # a small but real variation is kept: 1e-4 of the offset is far above rounding
    small = MinibatchCKA(["small"], ["same"])
    x = row * (1 + 1e-4 * torch.randn(256, 32))
    small.update({"small": x}, {"same": x.double()})
    assert small.result().values[0, 0] == pytest.approx(1.0, abs=1e-3)


def test_a_large_constant_feature_does_not_hide_the_varying_ones():
    """Constancy is judged per feature: a constant channel of size 1e4 beside channels varying at 1e-2."""
    torch.manual_seed(0)
    x = torch.cat([torch.full((256, 1), 1e4), 1e-2 * torch.randn(256, 8)], dim=1)
    acc = MinibatchCKA(["mixed"], ["varying part"])
    acc.update({"mixed": x}, {"varying part": x[:, 1:].double()})
    assert acc.result().values[0, 0] == pytest.approx(1.0, abs=1e-3)
