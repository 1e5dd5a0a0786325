"""helpers.probes: closed-form ridge probes (F8, F9)."""

import numpy as np
import pytest
import torch

from helpers import probes


def _toy(n_per_class=30, classes=4, p=6, spread=0.1, seed=0):
    """Well separated Gaussian clusters: (n, p) features and (n,) labels."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, p)) * 5
    y = np.repeat(np.arange(classes), n_per_class)
    return centres[y] + spread * rng.normal(size=(len(y), p)), y


def test_pm1_targets():
    t = probes.pm1_targets([2, 0], 3)
    assert t.tolist() == [[-1, -1, 1], [1, -1, -1]]


def test_separable_toy_set_is_probed_perfectly():
    X, y = _toy()
    Xt, yt = _toy(seed=0)[0] + 0.05, y
    acc = probes.few_shot_accuracy(X, y, Xt, yt, shots=5, repeats=3, val_per_class=5)
    assert acc.shape == (3,) and (acc == 1.0).all()


def test_shuffled_labels_give_chance():
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(2000, 20)), np.arange(2000) % 4
    test_X, test_y = rng.normal(size=(2000, 20)), rng.permutation(np.arange(2000) % 4)
    acc = probes.few_shot_accuracy(X, rng.permutation(y), test_X, test_y, shots=None, repeats=2, val_per_class=50)
    assert abs(acc.mean() - 0.25) < 0.03  # chance is 1/4; 2,000 test images give a s.e. of about 0.01


@pytest.mark.parametrize("p", [5, 60])  # the primal (p < n) and the dual (p > n) regime
def test_closed_form_matches_the_normal_equations(p):
    rng = np.random.default_rng(2)
    X, y = rng.normal(size=(40, p)), rng.integers(0, 3, 40)
    test_X = rng.normal(size=(30, p))  # other images than the training ones, so that the dual regime is not trivially perfect
    fit = probes.ridge_probe(X, y, X[:10], y[:10], test_X, y[:30], lambdas=[0.3])
    mean = X.mean(0)
    Xc = X - mean
    s2 = np.linalg.svd(Xc, compute_uv=False) ** 2
    T = probes.pm1_targets(y, 3).numpy()
    W = np.linalg.solve(Xc.T @ Xc + 0.3 * s2.mean() * np.eye(p), Xc.T @ (T - T.mean(0)))
    assert fit["test_accuracy"] == pytest.approx((((test_X - mean) @ W).argmax(1) == y[:30]).mean())


def test_batched_representations_are_probed_independently():
    X, y = _toy(p=3)
    noise = np.random.default_rng(3).normal(size=X.shape)
    stacked = torch.tensor(np.stack([X, noise], 1))  # (n, 2 representations, p)
    acc = probes.few_shot_accuracy(stacked, y, stacked, y, shots=10, repeats=2, val_per_class=5)
    assert acc.shape == (2, 2)
    assert (acc[:, 0] == 1).all() and (acc[:, 1] < 0.6).all()
    # more features than training images (the dual regime): the signal in 3 of 90 columns is still found (87 pure-noise columns cost a little)
    wide = np.hstack([X, np.random.default_rng(4).normal(size=(len(y), 87))])
    fit = probes.ridge_probe(wide[::3], y[::3], wide[1::3], y[1::3], wide[2::3], y[2::3])
    assert wide[::3].shape == (40, 90) and fit["test_accuracy"] > 0.9  # chance is 0.25


def test_bad_inputs_fail_clearly():
    X, y = _toy()
    with pytest.raises(ValueError, match="one label per image"):
        probes.ridge_probe(X, y[:-1], X, y, X, y)
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        probes.ridge_probe(bad, y, X, y, X, y)
    with pytest.raises(ValueError, match="integer class labels"):
        probes.ridge_probe(X, y.astype(float), X, y, X, y)
    with pytest.raises(ValueError, match="trailing shape"):
        probes.ridge_probe(X, y, X[:, :3], y, X, y)
    with pytest.raises(ValueError, match="larger pool"):
        probes.few_shot_accuracy(X, y, X, y, shots=25, val_per_class=10)
    with pytest.raises(ValueError, match="single class"):
        probes.ridge_probe(X[:5], np.zeros(5, int), X, y, X, y)
    with pytest.raises(ValueError, match="positive"):
        probes.ridge_probe(X, y, X, y, X, y, lambdas=[0.0])
    with pytest.raises(ValueError, match="shots must be at least 1"):  # 0 silently meant many-shot
        probes.few_shot_accuracy(X, y, X, y, shots=0)
    with pytest.raises(ValueError, match="repeats must be at least 1"):  # numpy's "need at least one array"
        probes.few_shot_correct(X, y, X, y, shots=2, repeats=0)


def test_torch_tensors_probe_like_numpy_arrays():
    """Features and labels as torch tensors (what a capture gives): few_shot_accuracy raised torch's
    "max(): argument 'dim' must be int" on the labels before; the numbers equal numpy's."""
    X, y = _toy()
    as_torch = [torch.from_numpy(a) for a in (X, y, X + 0.05, y)]
    np.testing.assert_array_equal(probes.few_shot_accuracy(*as_torch, shots=5, repeats=2, val_per_class=5),
                                  probes.few_shot_accuracy(X, y, X + 0.05, y, shots=5, repeats=2, val_per_class=5))
    with pytest.raises(ValueError, match="test_y has 5 labels for 120 feature rows"):
        probes.few_shot_accuracy(X, y, X, y[:5], shots=5, repeats=2, val_per_class=5)
    with pytest.raises(ValueError, match="pool_y has negative labels"):
        probes.few_shot_accuracy(X, y - 1, X, y, shots=5, repeats=2, val_per_class=5)
    with pytest.raises(ValueError, match="class indices 0..1"):  # was torch's IndexError
        probes.pm1_targets([0, 3], 2)


def test_fit_shots_shrinks_only_when_a_class_is_short(capsys):
    labels = np.array([0] * 30 + [1] * 25)
    assert probes.fit_shots(labels, 10, 10) == (10, 10)  # enough: unchanged, nothing printed
    assert capsys.readouterr().out == ""
    assert probes.fit_shots(np.array([0] * 6 + [1] * 3), 10, 10) == (2, 1)  # smallest class: 3 = 2 shots + 1
    assert "smallest class has 3 images" in capsys.readouterr().out
    train, val = probes.few_shot_split(np.array([0] * 6 + [1] * 3), 2, 1, seed=0)  # the fitted split works
    assert len(train) == 4 and len(val) == 2
    with pytest.raises(ValueError, match="at least 1 shot"):
        probes.fit_shots(np.array([0, 0, 0, 1]), 10, 10)


@pytest.mark.parametrize("stacked", [False, True])  # one representation (n, p), and T of them (n, T, p)
def test_per_image_outcomes_give_the_same_accuracies(stacked):
    rng = np.random.default_rng(3)
    X, y = _toy(n_per_class=25, classes=3, p=8, spread=3.0, seed=4)   # overlapping clusters: some test errors
    test_X, test_y = _toy(n_per_class=20, classes=3, p=8, spread=3.0, seed=5)
    if stacked:
        X = np.stack([X, X + rng.normal(size=X.shape)], 1)
        test_X = np.stack([test_X, test_X + rng.normal(size=test_X.shape)], 1)
    acc = probes.few_shot_accuracy(X, y, test_X, test_y, shots=5, repeats=3, val_per_class=5, seed=2)
    hit = probes.few_shot_correct(X, y, test_X, test_y, shots=5, repeats=3, val_per_class=5, seed=2)
    assert hit.dtype == bool and hit.shape == acc.shape + (len(test_y),)
    np.testing.assert_allclose(hit.mean(-1), acc, rtol=0, atol=1e-12)
    assert 0 < acc.min() and acc.max() < 1                            # the case is not trivial
    one = probes.ridge_probe_correct(X[:30], y[:30], X[30:45], y[30:45], test_X, test_y)
    fit = probes.ridge_probe(X[:30], y[:30], X[30:45], y[30:45], test_X, test_y)
    np.testing.assert_allclose(one["correct"].mean(-1), fit["test_accuracy"], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(one["lambda"], fit["lambda"])
    # the outcome of each test image does not depend on the other test images
    part = probes.few_shot_correct(X, y, test_X[::2], test_y[::2], shots=5, repeats=3, val_per_class=5, seed=2)
    np.testing.assert_array_equal(part, hit[..., ::2])
