"""Check functions for the exercises: each takes YOUR function, runs it on several cases and
compares it with the reference in helpers.cka.

    from helpers.exercises import check_gram_linear
    check_gram_linear(gram_linear)      # prints one line on success, raises with a diff on failure
"""

from __future__ import annotations

import numpy as np

from helpers import cka as reference


def _feature_cases(seed: int = 0):
    """A few (description, X, Y) cases: tall, wide, offset and tiny feature matrices."""
    rng = np.random.default_rng(seed)
    X1 = rng.normal(size=(30, 5))
    X2 = rng.normal(size=(12, 40))
    X3 = rng.normal(loc=3.0, size=(25, 8))
    X4 = rng.normal(size=(6, 3))
    return [
        ("30 examples x 5 features", X1, X1 @ rng.normal(size=(5, 7)) + 0.3 * rng.normal(size=(30, 7))),
        ("12 examples x 40 features (p > n)", X2, rng.normal(size=(12, 9))),
        ("25 examples, features offset by +3", X3, np.tanh(X3) + rng.normal(size=(25, 8))),
        ("6 examples x 3 features", X4, X4[:, :2] ** 2),
    ]


def _compare(name, yours, expected, case, atol=1e-8):
    yours = np.asarray(yours, dtype=float)
    expected = np.asarray(expected, dtype=float)
    if yours.shape != expected.shape:
        raise AssertionError(f"{name} on '{case}': expected shape {expected.shape}, got {yours.shape}.")
    if not np.allclose(yours, expected, atol=atol, rtol=1e-6):
        diff = np.abs(yours - expected).max()
        raise AssertionError(
            f"{name} on '{case}': largest difference {diff:.3g}.\n"
            f"  expected (start): {np.round(expected.ravel()[:4], 4)}\n"
            f"  yours    (start): {np.round(yours.ravel()[:4], 4)}")


def _run(name, cases, your_call, reference_call):
    for case, X, Y in cases:
        _compare(name, your_call(X, Y), reference_call(X, Y), case)
    print(f"✔ {name} matches helpers.cka on all {len(cases)} cases.")


def check_gram_linear(fn):
    """fn(X) -> (n, n) linear Gram matrix."""
    _run("gram_linear", _feature_cases(), lambda X, Y: fn(X), lambda X, Y: reference.gram_linear(X))


def check_gram_rbf(fn):
    """fn(X, threshold) -> (n, n) RBF Gram matrix, bandwidth = threshold x median distance."""
    for threshold in (0.5, 1.0, 2.0):
        _run(f"gram_rbf(threshold={threshold})", _feature_cases(1),
             lambda X, Y: fn(X, threshold), lambda X, Y: reference.gram_rbf(X, threshold))


def check_center_gram(fn):
    """fn(K) -> H K H, the centered Gram matrix."""
    _run("center_gram", _feature_cases(2), lambda X, Y: fn(X @ X.T),
         lambda X, Y: reference.center_gram(X @ X.T))


def check_hsic(fn):
    """fn(K, L) -> biased HSIC, tr(K H L H) / (n-1)^2."""
    _run("hsic", _feature_cases(3), lambda X, Y: fn(X @ X.T, Y @ Y.T),
         lambda X, Y: reference.hsic(X @ X.T, Y @ Y.T))


def check_cka(fn):
    """fn(K, L) -> linear or any-kernel CKA from two Gram matrices (biased HSIC)."""
    _run("cka", _feature_cases(4), lambda X, Y: fn(X @ X.T, Y @ Y.T),
         lambda X, Y: reference.cka(X @ X.T, Y @ Y.T))
    X = _feature_cases(4)[0][1]
    value = fn(X @ X.T, X @ X.T)
    if not np.isclose(value, 1.0, atol=1e-10):
        raise AssertionError(f"cka(K, K) should be exactly 1, yours gives {value:.6f}.")


def check_hsic_unbiased(fn):
    """fn(K, L) -> unbiased HSIC (Song et al. 2012); needs n >= 4."""
    _run("hsic_unbiased", _feature_cases(5), lambda X, Y: fn(X @ X.T, Y @ Y.T),
         lambda X, Y: reference.hsic_unbiased(X @ X.T, Y @ Y.T))


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
