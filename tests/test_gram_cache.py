"""helpers.gram_cache: a model runs once per set of images, the results are bit for bit those computed afresh,
and anything that changes what the model computes (or the images) makes it run again."""

import numpy as np
import pytest
import torch

from helpers import gram_cache
from helpers.compare import cka_matrix, head_groups_cka, label_cka
from helpers.data import image_set, tensor_set


@pytest.fixture()
def images():
    gram_cache.clear()
    yield image_set("shapes", count=70)  # 4 batches of 16 and a last one of 6
    gram_cache.clear()


@pytest.fixture()
def forward_count():
    """runs(model): how many forward passes `model` has made since the test began. Counted by a global hook,
    so that no hook is registered on the models themselves (hooks are part of their fingerprint)."""
    counts = {}

    def count(module, _args):
        counts[id(module)] = counts.get(id(module), 0) + 1

    handle = torch.nn.modules.module.register_module_forward_pre_hook(count)
    yield lambda model: counts.get(id(model), 0)
    handle.remove()


def _uncached(fn):
    """fn() with the cache switched off: what the helpers computed before the cache existed."""
    saved, gram_cache.MAX_BYTES = gram_cache.MAX_BYTES, 0
    try:
        gram_cache.clear()
        return fn()
    finally:
        gram_cache.MAX_BYTES = saved


def test_reused_grams_give_the_same_values_bit_for_bit(vit, resnet, images):
    calls = {
        "cross": lambda: cka_matrix(resnet, images, "sublayers", model_b=vit, layers_b="blocks", policy_b="cls",
                                    policy_a="mean", batch_size=16, progress=False),
        "within": lambda: cka_matrix(vit, images, "blocks", batch_size=16, progress=False),
        "labels": lambda: label_cka(resnet, images, "sublayers", policy="mean", batch_size=16),
        "heads": lambda: head_groups_cka(vit, resnet, images, {"0-1": [0, 1], "2": [2]}, ["layer1.0"], batch_size=16),
    }
    fresh = {name: _uncached(fn).values for name, fn in calls.items()}
    for name, fn in calls.items():
        fn()  # computes, or reuses what an earlier call kept
        again = fn().values  # reuses
        assert np.array_equal(again, fresh[name]), name


def test_each_model_runs_once_for_every_comparison_on_the_same_images(vit, resnet, images, forward_count):
    runs = forward_count
    cka_matrix(resnet, images, "sublayers", model_b=vit, layers_b="blocks", policy_a="mean", policy_b="cls",
               batch_size=16, progress=False)
    assert (runs(resnet), runs(vit)) == (5, 5)  # 4 batches of 16 and one of 6
    label_cka(resnet, images, "sublayers", policy="mean", batch_size=16)
    cka_matrix(vit, images, "blocks", policy_a="cls", batch_size=16, progress=False)
    assert (runs(resnet), runs(vit)) == (5, 5), "a comparison ran a model again on the same images"
    label_cka(resnet, images, "sublayers", policy="all", batch_size=16)  # a flattened policy: other Grams
    cka_matrix(vit, images, "blocks", policy_a="cls", batch_size=32, progress=False)  # other batches
    assert (runs(resnet), runs(vit)) == (10, 8)
    label_cka(resnet, images, "sublayers", policy="mean", batch_size=16)  # kept from the passes of "all"
    cka_matrix(vit, images, "blocks", policy_a="mean", batch_size=32, progress=False)  # kept from those of "cls"
    assert (runs(resnet), runs(vit)) == (10, 8), "a pooled policy ran a model again"


def test_pooled_policies_come_from_the_same_pass_bit_for_bit(vit, resnet, images, forward_count):
    """Asked for one policy, the cache keeps the pooled ones (mean, cls) from the same passes, each equal to its own
    fresh run; a flattened policy asked for after a pooled one runs the model again."""
    fresh = {(name, policy): _uncached(lambda: cka_matrix(model, images, "blocks", policy_a=policy, batch_size=16,
                                                            progress=False)).values
             for name, model, policies in (("vit", vit, ("all", "cls", "mean", "spatial")), ("resnet", resnet, ("all", "mean")))
             for policy in policies}
    gram_cache.clear()
    before, first = (forward_count(vit), forward_count(resnet)), {}
    for name, policy in fresh:
        model = vit if name == "vit" else resnet
        first[name, policy] = cka_matrix(model, images, "blocks", policy_a=policy, batch_size=16, progress=False).values
    runs = (forward_count(vit) - before[0], forward_count(resnet) - before[1])
    assert runs == (10, 5), "cls or mean after another policy ran the model again"  # 5 batches: all (+cls, mean), spatial
    for key, values in fresh.items():
        assert np.array_equal(first[key], values), key


def test_the_grams_asked_for_are_kept_before_the_pooled_ones(vit, images, monkeypatch):
    """With room for one set only, the set kept is the one asked for, not one computed beside it."""
    cka_matrix(vit, images, "blocks", policy_a="all", batch_size=16, progress=False)
    one_set = gram_cache.kept_bytes() // len(gram_cache._CACHE)
    monkeypatch.setattr(gram_cache, "MAX_BYTES", one_set)
    gram_cache.clear()
    cka_matrix(vit, images, "blocks", policy_a="all", batch_size=16, progress=False)
    assert [key[2] for key in gram_cache._CACHE] == ["all"]


@pytest.mark.parametrize("change", ["through .data", "load_state_dict", "a buffer", "a setting", "a hook"])
def test_a_changed_model_runs_again(resnet, images, forward_count, change):
    run = lambda: label_cka(resnet, images, "sublayers", policy="mean", batch_size=16).values
    before = run()
    state = {k: v.clone() for k, v in resnet.state_dict().items()}
    handle = None
    if change == "through .data":  # bypasses autograd's version counter: only a check by value sees it
        resnet.conv1[0].weight.data.copy_(torch.randn(resnet.conv1[0].weight.shape))
    elif change == "load_state_dict":
        resnet.load_state_dict({k: v * 1.5 if v.is_floating_point() else v for k, v in state.items()})
    elif change == "a buffer":  # BatchNorm statistics (a training step updates them without a version bump)
        resnet.bn1.running_mean.data += 1
    elif change == "a setting":
        resnet.layer1[0].act1.inplace = not resnet.layer1[0].act1.inplace
    else:
        handle = resnet.layer1.register_forward_hook(lambda _m, _i, out: out + 1)
    try:
        after = run()
        assert forward_count(resnet) == 10, f"a model changed {change} was not run again"
        if change != "a setting":
            assert not np.array_equal(before, after)
    finally:
        if handle:
            handle.remove()
        resnet.load_state_dict(state)
        resnet.layer1[0].act1.inplace = True


def test_new_or_changed_images_run_again(vit, forward_count):
    gram_cache.clear()
    pixels = image_set("shapes", count=32).tensor.clone()
    images = tensor_set(pixels)
    first = cka_matrix(vit, images, "blocks", batch_size=16, progress=False).values
    cka_matrix(vit, tensor_set(pixels), "blocks", batch_size=16, progress=False)  # an equal set, another object
    assert forward_count(vit) == 4
    pixels[:8] = 255 - pixels[:8]  # the same object, its images edited in place
    edited = cka_matrix(vit, images, "blocks", batch_size=16, progress=False).values
    assert forward_count(vit) == 6 and not np.array_equal(first, edited)
    gram_cache.clear()


def test_memory_stays_within_its_budget(vit, images, monkeypatch):
    cka_matrix(vit, images, "blocks", batch_size=16, progress=False)
    one_set = gram_cache.kept_bytes() // len(gram_cache._CACHE)  # the policy asked for, and the others beside it
    assert one_set > 0 and len(gram_cache._CACHE) == 3  # all, and cls and mean beside it
    monkeypatch.setattr(gram_cache, "MAX_BYTES", 2 * one_set)
    gram_cache.clear()
    for policy in ("cls", "mean", "spatial"):
        cka_matrix(vit, images, "blocks", policy_a=policy, batch_size=16, progress=False)
        assert gram_cache.kept_bytes() <= 2 * one_set
    monkeypatch.setattr(gram_cache, "MAX_BYTES", one_set - 1)  # a set too big to keep alone is not kept
    gram_cache.clear()
    cka_matrix(vit, images, "blocks", batch_size=16, progress=False)
    assert gram_cache.kept_bytes() == 0
