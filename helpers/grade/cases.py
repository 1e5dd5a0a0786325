"""What the grader asks of each exercise function, and how it judges the answers (in its own process).

For every auto-graded exercise: `cases(rng)` draws the inputs (from a seed the student's code never
sees), and `judge(case, yours)` compares what the student's function returned with the course's
reference (helpers.cka and the other helpers modules the notebook checks use), raising AssertionError
with the message the student will read. Messages come from helpers.exercises._compare, so they read
like the notebook's own checks, and a known slip is named from the same table (helpers.slips).

    EXERCISES["gram_linear"].cases(np.random.default_rng(1))   # [Case("30 examples x 5 features", (X,)), ...]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from helpers import cka as reference
from helpers.exercises import (_compare, block_structure_answer, check_equal_brightness_answer, minibatch_reference,
                               reference_block_structure, reference_gap, reference_matched_depth, reference_ridge)
from helpers.slips import name_the_slip


@dataclass
class Model:
    """An argument the sandbox builds itself (helpers.grade.child.build_model), the same as the grader's."""

    kind: str
    seed: int


@dataclass
class Case:
    """One call of the student's function: args are arrays, plain numbers/strings/lists, or a Model."""

    label: str
    args: tuple


@dataclass
class Exercise:
    function: str
    cases: Callable      # rng -> list of Case
    judge: Callable      # (case, yours: dict key -> array; key "" for a plain return) -> None, or AssertionError
    torch: bool = False  # arrays reach the function as torch tensors


# Exercises the grader cannot check outside the notebook, with the reason it tells the teacher.
SKIPPED = {
    "my_mlp_ratio": "needs the notebook's ViT and its blocks, a model the grader does not load",
}
VALUE_EXERCISE = "asks for a value computed in the notebook, not a function"


def _value(yours: dict, case: Case, name: str) -> np.ndarray:
    if not yours:
        raise AssertionError(f"{name} on '{case.label}': no answer came back from your function.")
    if "" not in yours:
        raise AssertionError(f"{name} on '{case.label}': returned a dict ({sorted(yours)}), expected an array or a number.")
    return yours[""]


def by_reference(name: str, reference_fn: Callable, atol: float = 1e-8) -> Callable:
    """A judge that compares the student's answer with reference_fn(*case.args), like the notebook's check,
    and names the slip when the answer is a known wrong one (helpers.slips)."""

    def judge(case: Case, yours: dict) -> None:
        answer = _value(yours, case, name)
        try:
            _compare(name, answer, reference_fn(*case.args), case.label, atol=atol)
        except AssertionError:
            slip = name_the_slip(name, [(case.args, answer)])
            if slip is None:
                raise
            raise AssertionError(f"{name} on '{case.label}': {slip.message}") from None

    return judge


def _high_norm_cases(rng) -> list:
    out = []
    for n, p, q, k in ((50, 6, 5, 3), (30, 4, 40, 2)):
        X = rng.normal(size=(n, p))
        Y = np.hstack([X[:, :2] @ rng.normal(size=(2, 2)), rng.normal(size=(n, q - 2))])
        out.append(Case(f"{n} images, {p} vs {q} features, k={k}", (X, Y, k)))
    X = rng.normal(size=(40, 5))
    X[::10, 0] += 30.0  # four dominant images, far out along a direction both carry
    out.append(Case("4 dominant images, k=4", (X, np.hstack([X[:, :1], rng.normal(size=(40, 3))]), 4)))
    return out


def _high_norm_reference(X, Y, k):
    from helpers.report.audit import cka_without_highest
    return np.float64(cka_without_highest(X, Y, k))


def _procrustes_reference(X, Y):
    from helpers.measures import procrustes_similarity
    return np.float64(procrustes_similarity(X, Y))


def _procrustes_cases(rng) -> list:
    """Exercise 17.1: different widths, a shifted and scaled copy, a rotated copy (which must give 1)."""
    n, p = int(rng.integers(20, 40)), int(rng.integers(4, 8))
    X = rng.normal(size=(n, p)) * np.linspace(2, 0.5, p)
    rotation, _ = np.linalg.qr(rng.normal(size=(p, p)))
    return [Case(f"{n} examples, {p} vs 3 features", (X, rng.normal(size=(n, 3)) + X[:, :3])),
            Case("a shifted, scaled copy", (X, 3 * X + 5)), Case("a rotated copy", (X, X @ rotation))]


# -- inputs

def _features(rng, with_y: bool = True) -> list:
    """(label, X, Y) feature matrices: tall, wide (p > n), offset from 0, tiny; sizes drawn each time.
    The last case's large, uneven offset makes a missing centring fail by a lot."""
    n, p = int(rng.integers(20, 40)), int(rng.integers(3, 8))
    wide_n, wide_p = int(rng.integers(8, 14)), int(rng.integers(20, 50))
    X1, X2 = rng.normal(size=(n, p)), rng.normal(size=(wide_n, wide_p))
    X3, X4 = rng.normal(loc=3.0, size=(25, 6)), rng.normal(size=(6, 3))
    X5 = rng.normal(size=(20, 6)) + rng.uniform(10, 40, size=6)
    return [
        (f"{n} examples x {p} features", X1, X1 @ rng.normal(size=(p, 7)) + 0.3 * rng.normal(size=(n, 7))),
        (f"{wide_n} examples x {wide_p} features (p > n)", X2, rng.normal(size=(wide_n, 9))),
        ("25 examples, features offset by +3", X3, np.tanh(X3) + rng.normal(size=(25, 6))),
        ("6 examples x 3 features", X4, X4[:, :2] ** 2),
        ("20 examples, 6 vs 11 features, offset by +10 to +40", X5,
         np.hstack([X5[:, :3] ** 2, rng.normal(size=(20, 8))]) - rng.uniform(5, 20, size=11)),
    ]


def _grams(rng) -> list:
    return [Case(label, (X @ X.T, Y @ Y.T)) for label, X, Y in _features(rng)]


def _cka_cases(rng) -> list:
    cases = _grams(rng)
    K = cases[0].args[0]
    return cases + [Case("a representation with itself (CKA must be 1)", (K, K))]


def _minibatch_cases(rng) -> list:
    cases = []
    for batch, batches in ((8, 3), (16, 2)):
        n = batch * batches
        X = rng.normal(size=(n, 10))
        Y = np.tanh(X @ rng.normal(size=(10, 12)))
        cases.append(Case(f"{n} examples in batches of {batch}", (X + rng.uniform(5, 15, size=10), Y, batch)))
    return cases


# -- judges beyond a plain reference

def _judge_record_output(case: Case, yours: dict) -> None:
    import torch

    from helpers.grade.child import build_model

    model_spec, name, x = case.args
    model = build_model(model_spec.kind, model_spec.seed)
    with torch.no_grad():
        first = model[0](torch.from_numpy(x))
        expected = first if name == "0" else model[2](torch.relu(first))
    if int(yours.get("hooks_left", 0)):
        raise AssertionError(f"{int(yours['hooks_left'])} hook(s) still registered after record_output: call handle.remove() "
                             "(use try/finally).")
    got = _value(yours, case, "record_output")
    if name == "0" and got.shape == tuple(expected.shape) and (got >= 0).all():
        raise AssertionError("The output of layer '0' has no negative values: the in-place ReLU overwrote it. Clone inside the hook.")
    _compare(f"record_output('{name}')", got, expected.cpu().numpy(), case.label, atol=1e-6)


def _judge_equal_brightness(case: Case, yours: dict) -> None:
    (pixels,) = case.args
    check_equal_brightness_answer(case.label, pixels, _value(yours, case, "equal_brightness"))


def _judge_block_structure(case: Case, yours: dict) -> None:
    block_structure_answer(case.label, yours, reference_block_structure(*case.args))


def _block_cases(rng) -> list:
    cases = []
    for L, k in ((6, 2), (8, int(rng.integers(2, 7)))):
        values = np.full((L, L), 0.1)
        values[:k, :k] = values[k:, k:] = 0.9
        values = np.clip(values + rng.normal(0, 0.02, (L, L)), 0, 1)
        values = (values + values.T) / 2
        np.fill_diagonal(values, 1)
        cases.append(Case(f"two blocks ({k} + {L - k}), noisy", (values,)))
    return cases + [Case("uniform", (np.ones((5, 5)),))]


def _head_cases(rng) -> list:
    import torch

    cases = []
    for batch, heads, grid, prefix in ((2, 3, 4, 1), (1, 2, 3, 0)):
        tokens = prefix + grid * grid
        logits = 3 * rng.normal(size=(batch, heads, tokens, tokens))
        attn = torch.softmax(torch.from_numpy(logits), dim=-1).cpu().numpy()
        distances = _patch_distances(grid)
        cases.append(Case(f"{batch} image(s), {heads} heads, {grid}x{grid} patches, {'CLS' if prefix else 'no CLS'}",
                          (attn, distances, prefix)))
    return cases


def _patch_distances(grid):
    from helpers.attention import patch_distances

    return patch_distances(grid, 4).cpu().numpy()


def _head_reference(attn, distances, prefix):
    import torch

    from helpers.attention import mean_attention_distance

    return mean_attention_distance(torch.from_numpy(attn), 4, prefix).cpu().numpy()


def _gram_without_cases(rng) -> list:
    cases = []
    for n, p in ((40, 7), (9, 30)):
        covariate = rng.normal(size=n)
        X = rng.normal(size=(n, p)) + 2.0 * covariate[:, None]
        cases.append(Case(f"{n} images x {p} features", (X @ X.T, covariate)))
    return cases


def _gram_without_reference(gram, covariate):
    import torch

    from helpers.compare import gram_without

    return gram_without(torch.from_numpy(gram), torch.from_numpy(covariate)).cpu().numpy()


def _localization_rank(maps):
    from helpers.localization import localization_scores

    side = int(round(len(maps) ** 0.5))
    return localization_scores(maps, (side, side))["rank"]


def _brightness_cases(rng) -> list:
    spot = np.where(rng.random((8, 8, 3)) < 0.05, 255, rng.integers(0, 40, size=(8, 8, 3)))
    return [Case("a mid-grey picture (3, 8, 8)", (rng.integers(60, 140, size=(3, 8, 8)).astype(np.uint8),)),
            Case("a dark picture with a white spot (8, 8, 3)", (spot.astype(np.uint8),))]


def _mass_radius_cases(rng) -> list:
    k = int(rng.integers(8, 14))
    return [Case("a uniform 9x9 map, centre (4, 4)", (np.ones((9, 9)), [4.0, 4.0], 0.5)),
            Case(f"a random {k}x{k} map, fraction 0.9", (rng.random((k, k)), [float(rng.uniform(2, k - 2)), 3.5], 0.9)),
            Case("a diagonal 10x10 map from a corner, fraction 0.25", (np.eye(10), [0.0, 0.0], 0.25))]


def _mass_radius_reference(erf, centre, fraction):
    from helpers.receptive_fields import mass_radius

    return mass_radius(erf, tuple(centre), fraction)


def _ridge_cases(rng) -> list:
    out = []
    for n, p in ((50, 8), (8, 50)):
        Phi = rng.normal(size=(n, p))
        T = np.where(np.eye(3)[rng.integers(0, 3, n)] > 0, 1.0, -1.0)
        out.append(Case(f"{n} examples x {p} features, lambda 0.7", (Phi, T, 0.7)))
    return out


EXERCISES = {e.function: e for e in [
    Exercise("gram_linear", lambda rng: [Case(label, (X,)) for label, X, _ in _features(rng)],
             by_reference("gram_linear", reference.gram_linear)),
    Exercise("gram_rbf", lambda rng: [Case(f"{label}, threshold {t}", (X, t))
                                      for t, (label, X, _) in zip((0.5, 1.0, 3.0), _features(rng))],
             by_reference("gram_rbf", reference.gram_rbf)),
    Exercise("center_gram", lambda rng: [Case(c.label, c.args[:1]) for c in _grams(rng)],
             by_reference("center_gram", reference.center_gram)),
    Exercise("hsic", _grams, by_reference("hsic", reference.hsic)),
    Exercise("cka", _cka_cases, by_reference("cka", reference.cka, atol=1e-10)),
    Exercise("hsic_unbiased", _grams, by_reference("hsic_unbiased", reference.hsic_unbiased)),
    Exercise("minibatch_cka", _minibatch_cases, by_reference("minibatch_cka", minibatch_reference, atol=1e-6)),
    Exercise("record_output", lambda rng: [Case(f"a 3-layer MLP, layer '{name}'",
                                                (Model("mlp", int(rng.integers(1 << 30))), name,
                                                 rng.normal(size=(4, 6)).astype(np.float32))) for name in ("0", "2")],
             _judge_record_output, torch=True),
    Exercise("gram_without_covariate", _gram_without_cases,
             by_reference("gram_without_covariate", _gram_without_reference), torch=True),
    Exercise("matched_depth", lambda rng: [Case(f"{r} x {c} CKA values", (rng.random((r, c)),)) for r, c in ((4, 6), (7, 3))],
             by_reference("matched_depth", reference_matched_depth)),
    Exercise("head_distances", _head_cases, by_reference("head_distances", _head_reference, atol=1e-9), torch=True),
    Exercise("equal_brightness", _brightness_cases, _judge_equal_brightness),
    Exercise("my_mass_radius", _mass_radius_cases, by_reference("my_mass_radius", _mass_radius_reference)),
    Exercise("own_patch_rank", lambda rng: [Case(f"{g * g} tokens on a {g}x{g} grid", (rng.random((g * g, g * g)),))
                                            for g in (3, 4)],
             by_reference("own_patch_rank", _localization_rank)),
    Exercise("ridge_weights", _ridge_cases, by_reference("ridge_weights", reference_ridge)),
    Exercise("gap_to_reference", lambda rng: [Case("6 blocks", (rng.random(6), rng.random(6))),
                                              Case("2 halves x 4 blocks", (rng.random((2, 4)), rng.random((2, 4))))],
             by_reference("gap_to_reference", reference_gap)),
    Exercise("block_structure", _block_cases, _judge_block_structure),
    Exercise("procrustes_similarity", _procrustes_cases, by_reference("procrustes_similarity", _procrustes_reference)),
    Exercise("cka_without_highest", _high_norm_cases, by_reference("cka_without_highest", _high_norm_reference)),
]}
