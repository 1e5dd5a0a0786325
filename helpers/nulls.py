"""A permutation null for best-match statistics: what they give when the two models see unrelated images.

A best-match statistic (the matched ViT depth of each ResNet layer, F1.5-F1.7, F10.4; the report's R2 and
R3) picks an argmax over a row of CKA values. Even when the two models share nothing, some column wins
each row, so the statistic is never "zero by default". Its chance level is found by breaking the link
between the two models' rows: model B's rows are shuffled (image i of A is paired with image perm(i) of B)
and the statistic is computed again, SHUFFLES times or more. A trained pair must beat the upper end of
that null, just as it must beat the untrained floor (helpers.floors), which answers another question
(what the architecture gives before training).

The shuffle is within each minibatch, so the per-batch Grams that helpers.compare keeps
(helpers.gram_cache) are reused: no model runs again. For a Gram K_b of B's centred features on one
batch, shuffling the images gives P K_b P^T, the same rows and columns permuted.

    null = shuffled_statistic(effect_fn, resnet, vit, images, "sublayers", "blocks", "all", "all")
"""

from __future__ import annotations

import math
import numbers
from contextlib import ExitStack

import numpy as np
import torch

from helpers.guards import check_images, check_int
from helpers.minibatch_cka import MinibatchCKA

SHUFFLES = 20  # at least this many shuffles for a null


def shuffled_matrices(model_a, model_b, images, layers_a, layers_b, policy_a: str, policy_b: str,
                      batch_size: int = 256, shuffles: int = SHUFFLES, seed: int = 0) -> list:
    """`shuffles` CKA matrices (La, Lb) of A against B with B's images shuffled within each minibatch."""
    from helpers.compare import _gram_capture, _model, evaluating
    from helpers.gram_cache import BatchGrams

    check_int(shuffles, "shuffles", 1, f"The protocol uses {SHUFFLES} or more.")
    check_int(seed, "seed", 0)
    check_images(images)
    model_a, model_b = _model(model_a, "model_a"), _model(model_b, "model_b")
    capture_a = _gram_capture(model_a, layers_a, policy_a, "a")
    capture_b = _gram_capture(model_b, layers_b, policy_b, "b")
    accumulators = [MinibatchCKA(capture_a.labels, capture_b.labels) for _ in range(shuffles)]
    generator = torch.Generator().manual_seed(seed)
    with evaluating(model_a), evaluating(model_b), ExitStack() as stack:
        grams_a = BatchGrams(model_a, images, capture_a, batch_size, None)
        grams_b = BatchGrams(model_b, images, capture_b, batch_size, None)
        for context in (torch.no_grad(), capture_a, capture_b):
            stack.enter_context(context)
        for g_a, g_b in zip(grams_a, grams_b):
            for accumulator in accumulators:
                perm = torch.randperm(g_b.shape[-1], generator=generator).to(g_b.device)
                accumulator.update_grams(g_a, g_b[:, perm][:, :, perm])
    return [a.result().values for a in accumulators]


def shuffled_statistic(statistic, *args, **kwargs) -> list:
    """statistic(values (La, Lb)) -> float or {name: float}, on each shuffled matrix (shuffled_matrices' arguments).

    Returns a list of floats, or {name: [floats]} when the statistic returns a dict."""
    values = [statistic(m) for m in shuffled_matrices(*args, **kwargs)]
    if values and isinstance(values[0], dict):
        return {k: [_number(v[k]) for v in values] for k in values[0]}
    return [_number(v) for v in values]


def _number(value) -> float:
    """One value of the null: a finite number (a NaN would quietly make the null's upper end NaN)."""
    if isinstance(value, (bool, str, bytes)) or not isinstance(value, (numbers.Real, np.ndarray, torch.Tensor)):
        raise TypeError(f"the statistic must return a number (or {{name: number}}), got {value!r}.")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"the statistic gave {value} on a shuffled matrix: a null needs finite values. Check what it "
                         "computes from the (La, Lb) values (an empty argmax? a division by zero?).")
    return value

