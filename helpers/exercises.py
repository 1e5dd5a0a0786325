"""Check functions for the exercises: each takes YOUR function, runs it on several cases and
compares it with the reference in helpers.cka.

    from helpers.exercises import check_gram_linear
    check_gram_linear(gram_linear)      # prints one line on success, raises with a diff on failure
"""

from __future__ import annotations

import numbers

import numpy as np
import torch

from helpers import cka as reference
from helpers.effects import mixer, structure
from helpers.slips import name_the_slip


def _feature_cases(seed: int = 0):
    """A few (description, X, Y) cases: tall, wide, offset and tiny feature matrices, X and Y of different widths.

    The large, uneven mean offset makes a missing centring fail by a lot, not by a rounding-sized amount."""
    rng = np.random.default_rng(seed)
    X1 = rng.normal(size=(30, 5))
    X2 = rng.normal(size=(12, 40))
    X3 = rng.normal(loc=3.0, size=(25, 8))
    X4 = rng.normal(size=(6, 3))
    X5 = rng.normal(size=(20, 6)) + rng.uniform(10, 40, size=6)
    return [
        ("30 examples x 5 features", X1, X1 @ rng.normal(size=(5, 7)) + 0.3 * rng.normal(size=(30, 7))),
        ("12 examples x 40 features (p > n)", X2, rng.normal(size=(12, 9))),
        ("25 examples, features offset by +3", X3, np.tanh(X3) + rng.normal(size=(25, 8))),
        ("6 examples x 3 features", X4, X4[:, :2] ** 2),
        ("20 examples, 6 vs 11 features, offset by +10 to +40", X5,
         np.hstack([X5[:, :3] ** 2, rng.normal(size=(20, 8))]) - rng.uniform(5, 20, size=11)),
    ]


def _gram_cases(seed: int) -> list:
    """(description, (K, L)): the linear Grams of _feature_cases."""
    return [(case, (X @ X.T, Y @ Y.T)) for case, X, Y in _feature_cases(seed)]


def _compare(name, yours, expected, case, atol=1e-8, rtol=1e-6):
    if yours is None:
        raise AssertionError(f"{name} on '{case}': your function returned None. Did you forget the `return`?")
    if not isinstance(yours, (np.ndarray, torch.Tensor, list, tuple, numbers.Real, np.generic)) or (
            isinstance(yours, tuple) and not isinstance(expected, tuple)):
        raise AssertionError(f"{name} on '{case}': your function returned a {type(yours).__name__}; return "
                             f"{'a number' if np.ndim(expected) == 0 else 'an array'}, as the exercise asks.")
    try:
        yours = np.asarray(yours.detach().cpu() if isinstance(yours, torch.Tensor) else yours, dtype=float)
    except (TypeError, ValueError):  # a ragged list, or a list of strings
        raise AssertionError(f"{name} on '{case}': your function's answer is not an array of numbers.") from None
    expected = np.asarray(expected, dtype=float)
    if yours.shape != expected.shape:
        raise AssertionError(f"{name} on '{case}': expected shape {expected.shape}, got {yours.shape}.")
    if not np.allclose(yours, expected, atol=atol, rtol=rtol):
        diff = np.abs(yours - expected).max()
        raise AssertionError(
            f"{name} on '{case}': largest difference {diff:.3g}.\n"
            f"  expected (start): {np.round(expected.ravel()[:4], 4)}\n"
            f"  yours    (start): {np.round(yours.ravel()[:4], 4)}")


def _call_on_copies(name, fn, case, args):
    """fn(*args) on copies of the array arguments; an AssertionError that names the slip when fn changed them.

    A function that writes into its input (X -= X.mean(0)) changes the caller's data, and the reference,
    computed after it on the same arrays, would have agreed with a wrong answer."""
    copies = [a.copy() if isinstance(a, np.ndarray) else a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    yours = fn(*copies)
    for i, (given, after) in enumerate(zip(args, copies)):
        if isinstance(given, (np.ndarray, torch.Tensor)) and not np.array_equal(np.asarray(given), np.asarray(after),
                                                                                   equal_nan=True):
            raise AssertionError(f"{name} on '{case}': your function changed its input (argument {i + 1}) in place, so "
                                 "the caller's data changed too. Work on a new array: X = X - X.mean(0), not X -= "
                                 "X.mean(0).")
    return yours


def _run(exercise, cases, fn, reference_fn, name=None, atol=1e-8, source="helpers.cka", rtol=1e-6):
    """Compare fn(*args) with reference_fn(*args) on every (description, args) case.

    On a failure, the answers are compared with the usual wrong ones (helpers.slips): a known slip is
    named with its fix; anything else keeps the case and the numbers."""
    name = name or exercise
    if not callable(fn):  # check_gram_linear(gram_linear(X)) instead of check_gram_linear(gram_linear)
        raise TypeError(f"The check of {name} takes your function itself (pass `{name}`, not `{name}(...)`), not "
                        f"what it returned (a {type(fn).__name__}).")
    answers = [_call_on_copies(name, fn, case, args) for case, args in cases]
    try:
        for (case, args), yours in zip(cases, answers):
            _compare(name, yours, reference_fn(*args), case, atol, rtol)
    except AssertionError as failure:
        slip = name_the_slip(exercise, [(args, yours) for (_, args), yours in zip(cases, answers)])
        if slip is None:
            raise
        raise AssertionError(f"{name}: {slip.message}") from failure
    print(f"✔ {name} matches {source} on all {len(cases)} cases.")


def check_gram_linear(fn):
    """fn(X) -> (n, n) linear Gram matrix."""
    _run("gram_linear", [(case, (X,)) for case, X, _ in _feature_cases()], fn, reference.gram_linear)


def check_gram_rbf(fn):
    """fn(X, threshold) -> (n, n) RBF Gram matrix, bandwidth = threshold x median distance."""
    for threshold in (0.5, 1.0, 2.0):
        _run("gram_rbf", [(case, (X, threshold)) for case, X, _ in _feature_cases(1)], fn, reference.gram_rbf,
             name=f"gram_rbf(threshold={threshold})")


def check_center_gram(fn):
    """fn(K) -> H K H, the centered Gram matrix."""
    _run("center_gram", [(case, (K,)) for case, (K, _) in _gram_cases(2)], fn, reference.center_gram)


def check_hsic(fn):
    """fn(K, L) -> biased HSIC, tr(K H L H) / (n-1)^2."""
    _run("hsic", _gram_cases(3), fn, reference.hsic)


def check_cka(fn):
    """fn(K, L) -> linear or any-kernel CKA from two Gram matrices (biased HSIC)."""
    _run("cka", _gram_cases(4), fn, reference.cka)
    K = _gram_cases(4)[0][1][0]
    value = fn(K, K)
    if not np.isclose(value, 1.0, atol=1e-10):
        raise AssertionError(f"cka(K, K) should be exactly 1, yours gives {float(np.ravel(value)[0]):.6f}.")


def check_hsic_unbiased(fn):
    """fn(K, L) -> unbiased HSIC (Song et al. 2012); needs n >= 4."""
    _run("hsic_unbiased", _gram_cases(5), fn, reference.hsic_unbiased)


def minibatch_reference(X, Y, batch_size):
    """Minibatch CKA of exercise 4.2 by helpers.minibatch_cka: X (n, p1), Y (n, p2), n a multiple of batch_size."""
    from helpers.minibatch_cka import MinibatchCKA

    accumulator = MinibatchCKA(["X"], ["Y"])
    for start in range(0, len(X), batch_size):
        accumulator.update({"X": X[start:start + batch_size]}, {"Y": Y[start:start + batch_size]})
    return accumulator.result().cell("X", "Y")


def check_minibatch_cka(fn):
    """fn(X, Y, batch_size) -> minibatch CKA (unbiased HSIC summed over consecutive batches)."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(48, 10))
    offset = rng.uniform(5, 15, size=10)  # so that a missing centring fails clearly
    cases = [("48 examples in batches of 8, 10 vs 12 features", (X + offset, np.tanh(X @ rng.normal(size=(10, 12))), 8)),
             ("48 examples in batches of 16, 10 vs 5 features", (X + offset, X[:, :5] ** 2 + rng.normal(size=(48, 5)), 16))]
    _run("minibatch_cka", cases, fn, minibatch_reference, atol=1e-6, source="helpers.minibatch_cka")


def check_record_output(fn):
    """fn(model, module_name, x) -> the output of module `module_name` during model(x); hooks removed after."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(inplace=True), torch.nn.Linear(5, 3))
    x = torch.randn(4, 6)
    expected = {"0": model[0](x), "2": model[2](torch.relu(model[0](x)))}
    for name, value in expected.items():
        got = fn(model, name, x)
        if got is None:
            raise AssertionError(f"record_output(model, '{name}', x) returned None: did the hook store the output?")
        _compare(f"record_output('{name}')", got.detach(), value.detach(), "a 3-layer MLP", atol=1e-6)
    leftover = sum(len(m._forward_hooks) for m in model.modules())
    if leftover:
        raise AssertionError(f"{leftover} hook(s) still registered after record_output: call handle.remove() (use try/finally).")
    if (fn(model, "0", x) >= 0).all():
        raise AssertionError("The output of layer '0' has no negative values: the in-place ReLU overwrote it. Clone inside the hook.")
    print("✔ record_output returns the right outputs, survives the in-place ReLU and removes its hook.")


def check_gram_without(fn):
    """fn(gram, covariate) -> the (N, N) Gram after regressing `covariate` (N,) and a constant out of the features."""
    import torch

    from helpers.compare import gram_without

    rng = np.random.default_rng(6)
    for case, n, p in [("40 images x 7 features", 40, 7), ("9 images x 30 features (p > n)", 9, 30)]:
        X = torch.from_numpy(rng.normal(size=(n, p)))
        covariate = torch.from_numpy(rng.normal(size=n))
        X = X + 2.0 * covariate[:, None]  # features that carry the covariate, as the layers carry brightness
        got = fn(X @ X.T, covariate)
        if got is None:
            raise AssertionError("your function returned None: return the new Gram matrix.")
        _compare("gram_without_covariate", torch.as_tensor(got, dtype=torch.float64), gram_without(X @ X.T, covariate), case)
        leftover = torch.as_tensor(got, dtype=torch.float64) @ covariate
        if leftover.abs().max() > 1e-6 * (1 + float(X.abs().max()) ** 2):
            raise AssertionError("the new Gram still 'sees' the covariate (G @ covariate is not 0): subtract its fit, not only the mean.")
    print("✔ gram_without_covariate matches helpers.compare.gram_without, and nothing of the covariate is left.")


def check_head_distances(fn):
    """fn(attn, distances, prefix) -> (heads,) mean attention distance of each head, CLS left out and renormalised."""
    import torch

    from helpers.attention import mean_attention_distance, patch_distances

    torch.manual_seed(8)
    for case, (batch, heads, grid, prefix) in {"2 images, 3 heads, 4x4 patches, CLS": (2, 3, 4, 1),
                                               "1 image, 2 heads, 3x3 patches, no CLS": (1, 2, 3, 0)}.items():
        tokens = prefix + grid * grid
        attn = torch.softmax(3 * torch.randn(batch, heads, tokens, tokens, dtype=torch.float64), dim=-1)
        got = fn(attn, patch_distances(grid, 4), prefix)
        if got is None:
            raise AssertionError("your function returned None: return one distance per head.")
        got = torch.as_tensor(got, dtype=torch.float64)
        expected = mean_attention_distance(attn, 4, prefix)
        if got.shape != expected.shape:
            raise AssertionError(f"{case}: expected one number per head, shape {tuple(expected.shape)}, got {tuple(got.shape)}.")
        if prefix and torch.allclose(got, (attn[:, :, prefix:, prefix:] * patch_distances(grid, 4)).sum(-1).mean((0, 2))):
            raise AssertionError(f"{case}: the rows were not renormalised over the patches after dropping CLS.")
        _compare("head_distances", got, expected, case, atol=1e-9)
    print("✔ head_distances matches helpers.attention.mean_attention_distance, CLS left out and rows renormalised.")


def check_equal_brightness_answer(case: str, pixels: np.ndarray, got: np.ndarray) -> None:
    """Raise AssertionError unless `got` is `pixels` moved to mean 127.5 by one shift, clipped to 0-255 (uint8).

    Shared by the notebook's check and the grader (helpers.grade.cases), which judges a returned array.
    """
    if got.shape != pixels.shape or got.dtype != np.uint8:
        raise AssertionError(f"{case}: expected a uint8 array of shape {pixels.shape}, got {got.dtype} {got.shape}.")
    if abs(got.mean() - 127.5) >= 0.5:
        raise AssertionError(f"{case}: mean {got.mean():.2f}, expected 127.5 within 0.5. Clipping moves the mean back: "
                             "shift, clip, and repeat until it stays.")
    inside = (got > 0) & (got < 255)
    shift = got.astype(int) - pixels.astype(int)
    if inside.any() and np.ptp(shift[inside]) > 1:
        raise AssertionError(f"{case}: the picture changed by different amounts in different places; add one shift to every value.")


def check_equal_brightness(fn):
    """fn(pixels) -> uint8 array of the same shape with mean brightness 127.5 (within 0.5), clipped to 0-255."""
    rng = np.random.default_rng(9)
    cases = {"a mid-grey picture (3, 8, 8)": rng.integers(60, 140, size=(3, 8, 8)).astype(np.uint8),
             "a dark picture with a white spot (8, 8, 3)": np.where(rng.random((8, 8, 3)) < 0.05, 255,
                                                                    rng.integers(0, 40, size=(8, 8, 3))).astype(np.uint8)}
    for case, pixels in cases.items():
        got = fn(pixels)
        if got is None:
            raise AssertionError("your function returned None: return the new picture.")
        check_equal_brightness_answer(case, pixels, np.asarray(got))
    print("✔ equal_brightness moves every picture to mean 127.5 by one shift, clipped to 0-255.")


def check_procrustes_similarity(fn):
    """fn(X, Y) -> the nuclear norm of X̃ᵀỸ (column-centred, unit Frobenius norm): the orthogonal Procrustes similarity."""
    from helpers.measures import procrustes_similarity

    rng = np.random.default_rng(17)
    X = rng.normal(size=(30, 6)) * np.linspace(2, 0.5, 6)
    rotation, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    cases = {"30 examples, 6 vs 4 features": (X, rng.normal(size=(30, 4)) + X[:, :4]),
             "30 examples, 6 vs 9 features": (X, np.hstack([X, rng.normal(size=(30, 3))])),
             "a shifted, scaled copy": (X, 3 * X + 5)}
    _run("procrustes_similarity", list(cases.items()), fn, procrustes_similarity, source="helpers.measures")
    if abs(float(fn(X, X @ rotation)) - 1) > 1e-8:
        raise AssertionError("a rotated copy of X should give 1: did you take the nuclear norm (sum of singular values), "
                             "not the trace of X̃ᵀỸ?")
    print("✔ procrustes_similarity gives 1 for a rotated copy of X.")


def _high_norm_cases(seed: int = 16) -> list:
    """(description, X, Y, k): random features, a few dominant images along a shared direction, and k = 0."""
    rng = np.random.default_rng(seed)
    shared = rng.normal(size=(60, 3))
    X = np.hstack([shared, rng.normal(size=(60, 5))])
    Y = np.hstack([shared @ rng.normal(size=(3, 3)), rng.normal(size=(60, 4))])
    dominant = shared.copy()
    dominant[::20, 0] = 40.0  # three images far out along a direction both layers carry
    Xd = np.hstack([dominant, rng.normal(size=(60, 5))])
    Yd = np.hstack([dominant @ rng.normal(size=(3, 3)), rng.normal(size=(60, 4))])
    return [("60 images, 8 vs 7 features, k=3", X, Y, 3), ("3 dominant images, k=3", Xd, Yd, 3),
            ("k=0: nothing dropped", X, Y, 0), ("40 images, 12 vs 50 features, k=5", rng.normal(size=(40, 12)),
                                                rng.normal(size=(40, 50)), 5)]


def check_cka_without_highest(fn):
    """fn(X, Y, k) -> debiased linear CKA without the k highest-norm images of X and of Y (their union)."""
    from helpers.report.audit import cka_without_highest

    _run("cka_without_highest", [(case, (X, Y, k)) for case, X, Y, k in _high_norm_cases()], fn, cka_without_highest,
         source="helpers.report.audit, dominant images included,")


# -- notebooks 07-15: checks on non-square, asymmetric cases, and the course's answers that the cells
#    below an exercise use while it is unsolved (here, so that no student copy shows them under the stub)

def reference_matched_depth(values) -> np.ndarray:
    """(rows, columns) CKA -> (rows,) relative depth of each row's best column: helpers.effects.structure.matched_depth,
    the one definition notebook 07's effects use."""
    return structure.matched_depth(values)


def check_matched_depth(fn):
    """fn(values) -> (rows,) relative depth of each row's best column (exercise 7.1).

    The matrices are non-square and their row and column maxima differ, so the best row of each
    column (argmax over axis 0) fails here instead of in the cells below."""
    rng = np.random.default_rng(7)
    example = np.array([[0.9, 0.5, 0.1, 0.2],
                        [0.2, 0.3, 0.8, 0.1],
                        [0.1, 0.4, 0.7, 0.3],
                        [0.6, 0.9, 0.2, 0.1],
                        [0.1, 0.2, 0.3, 0.95]])
    cases = [("a 5 x 4 example", (example,)), ("9 ResNet layers x 6 ViT blocks", (rng.random((9, 6)),)),
             ("3 ResNet layers x 8 ViT blocks", (rng.random((3, 8)),))]
    _run("matched_depth", cases, fn, reference_matched_depth, source="the course's version")


def check_mass_radius(fn):
    """fn(erf, centre, fraction) -> radius (px) of the smallest disc around centre (row, col) holding `fraction` of the mass."""
    from helpers.receptive_fields import mass_radius

    rng = np.random.default_rng(0)
    cases = [("a uniform 9 x 9 map, centre (4, 4)", (np.ones((9, 9)), (4, 4), 0.5)),
             ("a random 7 x 12 map, centre (2.0, 8.5), fraction 0.9", (rng.random((7, 12)), (2.0, 8.5), 0.9)),
             ("a diagonal 10 x 10 map from a corner, fraction 0.25", (np.eye(10), (0, 0), 0.25)),
             ("one bright spot in a 6 x 11 map, centre (1, 3)", (np.pad(np.ones((1, 1)), ((4, 1), (9, 1))) + 0.01, (1, 3), 0.5))]
    _run("my_mass_radius", cases, fn, mass_radius, source="helpers.receptive_fields.mass_radius")


def check_mlp_ratio(fn, vit, x, blocks=None):
    """fn(block, z) -> (tokens,) ratio ||u|| / ||f(u)|| of the MLP branch, for the inputs z of `vit`'s blocks on images x."""
    import torch

    from helpers.residuals import vit_norm_ratios

    blocks = blocks or (0, 2, len(vit.blocks) - 1)
    reference = vit_norm_ratios(vit, x).mlp
    inputs = {}
    hooks = [vit.blocks[i].register_forward_pre_hook(lambda _m, inp, i=i: inputs.__setitem__(i, inp[0])) for i in blocks]
    try:
        with torch.no_grad():
            vit(x)
    finally:
        for hook in hooks:
            hook.remove()
    cases = [(f"block {i}", (vit.blocks[i], inputs[i])) for i in blocks]

    def yours(block, z):
        with torch.no_grad():
            out = fn(block, z)
        return out.detach().cpu().numpy() if torch.is_tensor(out) else out

    expected = {id(block): reference[i] for i, (_, (block, _)) in zip(blocks, cases)}
    # float32 models: the same sums in another order differ in the 7th digit
    _run("my_mlp_ratio", cases, yours, lambda block, z: expected[id(block)], atol=1e-6, rtol=1e-4, source="helpers.residuals")


def check_own_patch_rank(fn, extra: dict | None = None):
    """fn(maps) -> (T,) how many patches score higher than each token's own, for a (T, T) token-by-patch map.

    extra: more {description: (T, T) map} cases, e.g. the notebook's own maps."""
    from helpers.localization import localization_scores

    rng = np.random.default_rng(12)
    cases = []
    for rows, cols in ((3, 4), (2, 5), (4, 4)):  # non-square grids; random maps are not symmetric
        maps = rng.random((rows * cols, rows * cols))
        cases.append((f"{rows * cols} tokens on a {rows} x {cols} grid", (maps,)))
    cases += [(label, (np.asarray(maps),)) for label, maps in (extra or {}).items()]
    # the rank does not depend on the grid's shape, so one row of T patches stands for every grid
    _run("own_patch_rank", cases, fn, lambda maps: localization_scores(maps, (1, len(maps)))["rank"],
         source="helpers.localization")


def reference_ridge(Phi, T, lam):
    """Ridge weights (p, C) from the SVD of Phi (n, p), for targets T (n, C): V diag(s / (s² + lam)) Uᵀ T."""
    U, s, Vt = np.linalg.svd(Phi, full_matrices=False)
    return Vt.T @ np.diag(s / (s ** 2 + lam)) @ U.T @ T


def check_ridge_weights(fn):
    """fn(Phi, T, lam) -> (p, C) ridge weights, for more examples than features and for fewer."""
    rng = np.random.default_rng(0)
    cases = []
    for n, p in ((50, 8), (8, 50)):
        Phi = rng.normal(size=(n, p)) + rng.uniform(-2, 2, size=p)
        T = np.where(np.eye(3)[rng.integers(0, 3, n)] > 0, 1.0, -1.0)  # (n, 3) targets, +1 for the class
        cases.append((f"{n} examples x {p} features, 3 classes, lambda 0.7", (Phi, T, 0.7)))
    _run("ridge_weights", cases, fn, reference_ridge, source="the SVD form")


def reference_gap(model_cka, reference_cka) -> np.ndarray:
    """(blocks,) or (1 + subsamples, blocks) CKA of a model and of the seed reference -> reference - model, same shape."""
    return np.asarray(reference_cka, dtype=float) - np.asarray(model_cka, dtype=float)


def check_gap_to_reference(fn):
    """fn(model_cka, reference_cka) -> reference - model, the same shape as the inputs (exercise 14.1)."""
    rng = np.random.default_rng(14)
    cases = [("2 blocks", (np.array([0.9, 0.8]), np.array([0.95, 0.7]))),
             ("1 + 4 subsamples x 6 blocks", (rng.random((5, 6)), rng.random((5, 6)))),
             ("2 x 3, all zero against all one", (np.zeros((2, 3)), np.ones((2, 3))))]
    _run("gap_to_reference", cases, fn, reference_gap, atol=1e-12, source="the course's version")


def reference_block_structure(values) -> dict:
    """The best split of a (L, L) similarity matrix into two consecutive blocks (exercise 15.1):
    {"split", "contrast", "within", "between"}; ties go to the first (smallest) split.
    helpers.effects.mixer.block_structure, the one definition notebook 15's effects use."""
    return mixer.block_structure(values)


def block_structure_answer(case: str, yours, expected: dict) -> None:
    """Raise AssertionError unless `yours` (a dict, or the grader's arrays) gives `expected`'s split and scores.
    Shared by the notebook's check and the grader (helpers.grade.cases)."""
    if not hasattr(yours, "keys"):  # a list has no keys: "your dict has no ..." misread it
        raise AssertionError(f"{case}: your function returned {'None' if yours is None else 'a ' + type(yours).__name__}; "
                             "return a dict with split, contrast, within and between.")
    missing = [key for key in expected if key not in yours]
    if missing:
        raise AssertionError(f"{case}: your dict has no {missing}; return split, contrast, within and between.")
    if int(yours["split"]) != expected["split"]:
        raise AssertionError(f"{case}: split {int(yours['split'])}, expected {expected['split']}. "
                             "On a tie, keep the first (smallest) split.")
    for key in ("contrast", "within", "between"):
        _compare(f"block_structure['{key}']", yours[key], expected[key], case)


def check_block_structure(fn, extra: dict | None = None):
    """fn(values) -> {"split", "contrast", "within", "between"} for a (L, L) similarity matrix.

    extra: more {description: matrix} cases, e.g. the notebook's own Mixer matrix."""
    rng = np.random.default_rng(0)
    two_blocks = np.full((6, 6), 0.1)
    two_blocks[:2, :2] = two_blocks[2:, 2:] = 0.9
    np.fill_diagonal(two_blocks, 1)
    uneven = np.clip(np.where(np.add.outer(np.arange(7) >= 5, np.arange(7) >= 5) != 1, 0.8, 0.2)
                     + rng.normal(0, 0.05, (7, 7)), 0, 1)  # blocks of 5 + 2, and not symmetric
    np.fill_diagonal(uneven, 1)
    cases = {"uniform": np.ones((5, 5)), "two blocks (2 + 4)": two_blocks, "noisy, not symmetric (5 + 2)": uneven,
             **(extra or {})}
    for case, values in cases.items():
        block_structure_answer(case, fn(values), reference_block_structure(values))
    print(f"✔ block_structure passes {len(cases)} cases.")
