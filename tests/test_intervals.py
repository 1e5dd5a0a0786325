"""helpers.intervals: disjoint subsamples, the t quantile, and the coverage of the interval on synthetic data."""

import numpy as np
import pytest
import torch

from helpers.intervals import covers, disjoint_subsamples, subsample_interval, t_quantile
from helpers.minibatch_cka import MinibatchCKA

P = 6  # features of each synthetic representation


def _draw(n: int, rng: np.random.Generator):
    """n examples of two related representations: X linear in a latent Z, Y a noisy nonlinear map of Z."""
    z = rng.standard_normal((n, 4))
    x = z @ np.array([[1.0, 0.5, 0, 0, 0.2, 0], [0, 1, 0.3, 0, 0, 0], [0, 0, 1, 0, 0, 0.4], [0, 0, 0, 0.6, 0, 0]]) \
        + 0.8 * rng.standard_normal((n, P))
    y = np.tanh(z @ rng_fixed_mix()) + 0.6 * rng.standard_normal((n, P))
    return x, y


def rng_fixed_mix():
    return np.random.default_rng(123).standard_normal((4, P))


def _population_cka(rng) -> float:
    """Linear CKA of the distribution itself, from 400,000 examples (feature-space form; its bias is ~1e-5)."""
    x, y = _draw(400_000, rng)
    x, y = x - x.mean(0), y - y.mean(0)
    return float(np.linalg.norm(x.T @ y) ** 2 / (np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y)))


def _accumulate(x, y, batch: int) -> MinibatchCKA:
    acc = MinibatchCKA(["x"], ["y"])
    for start in range(0, len(x), batch):
        acc.update([torch.as_tensor(x[start:start + batch])], [torch.as_tensor(y[start:start + batch])])
    return acc


def _trial(rng, n=1000, repeats=10, batch=100, levels=(0.5, 0.9)):
    """One data set: the full-data minibatch CKA, and the interval from `repeats` disjoint subsamples."""
    x, y = _draw(n, rng)
    parts = disjoint_subsamples(n, repeats, seed=int(rng.integers(1 << 31)))
    accs = [_accumulate(x[idx], y[idx], batch) for idx in parts]
    subs = [a.result().values[0, 0] for a in accs]
    full = accs[0]
    for a in accs[1:]:
        full.merge(a)  # all images, the same batches: the full-data estimate
    value = full.result().values[0, 0]
    return value, {level: subsample_interval(value, subs, level) for level in levels}


def test_t_quantile_known_values():
    assert t_quantile(0.95, 9) == pytest.approx(1.8331, abs=1e-4)
    assert t_quantile(0.975, 19) == pytest.approx(2.0930, abs=1e-4)
    assert t_quantile(0.75, 1) == pytest.approx(1.0, abs=1e-4)  # Cauchy: tan(pi/4)
    assert t_quantile(0.95, 10_000) == pytest.approx(1.6449, abs=1e-3)  # -> normal


def test_t_quantile_is_integrated_once_per_level_and_dof():
    """Cached: the same number as a fresh integration, for an int or a float dof; bad input still raises."""
    from helpers.intervals import _t_quantile

    first = t_quantile(0.95, 7)
    hits = _t_quantile.cache_info().hits
    assert t_quantile(0.95, 7.0) == first == _t_quantile.__wrapped__(0.95, 7)
    assert _t_quantile.cache_info().hits == hits + 1
    for p, dof in ((1.0, 7), (0.95, 0), (float("nan"), 7)):
        with pytest.raises(ValueError, match="t_quantile needs"):
            t_quantile(p, dof)


def test_disjoint_subsamples_are_disjoint_equal_and_seeded():
    parts = disjoint_subsamples(103, 10, seed=3)
    assert len(parts) == 10 and all(len(p) == 10 for p in parts)
    assert len(np.unique(np.concatenate(parts))) == 100
    assert all(np.array_equal(a, b) for a, b in zip(parts, disjoint_subsamples(103, 10, seed=3)))
    with pytest.raises(ValueError, match="fewer repeats"):
        disjoint_subsamples(30, 10)
    with pytest.raises(ValueError, match="at least 2"):
        disjoint_subsamples(100, 1)
    with pytest.raises(ValueError, match="seed must be a whole number of 0 or more"):  # numpy's own words before
        disjoint_subsamples(100, 2, seed=-1)


def test_interval_shapes_and_errors():
    low, high = subsample_interval(np.zeros((2, 3)), np.random.default_rng(0).standard_normal((5, 2, 3)))
    assert low.shape == high.shape == (2, 3) and (low < 0).all() and (high > 0).all()
    with pytest.raises(ValueError, match="R >= 2"):
        subsample_interval(0.5, [0.4])
    with pytest.raises(ValueError, match="level"):
        subsample_interval(0.5, [0.4, 0.6], level=90)


def test_coverage_is_near_nominal_on_synthetic_data():
    """Over 400 synthetic data sets the 90% interval covers the distribution's CKA about 360 times and the
    50% interval about 200 times. The bounds are the binomial count at the nominal rate plus or minus 4
    standard deviations (90%: 360 +- 24; 50%: 200 +- 40), so a right interval fails about once in 16,000
    runs whatever the seed. The 50% check keeps it honest: an interval made too wide to miss would cover
    far more than 240 times at 50%, one made too narrow far fewer than 336 at 90%."""
    rng = np.random.default_rng(0)
    truth = _population_cka(rng)
    trials = 400
    hits = {0.5: 0, 0.9: 0}
    widths = []
    for _ in range(trials):
        _, intervals = _trial(rng)
        for level, (low, high) in intervals.items():
            hits[level] += int(covers(low, high, truth))
        widths.append(intervals[0.9][1] - intervals[0.9][0])
    assert 0.2 < truth < 0.8  # a CKA value away from the bounds, where the test means something
    for level, count in hits.items():
        expected, sd = trials * level, np.sqrt(trials * level * (1 - level))
        assert abs(count - expected) <= 4 * sd, (level, count, expected)
    assert 0.005 < np.median(widths) < 0.2  # informative: neither a point nor the whole range


def test_statistic_interval_of_a_mean_matches_the_t_interval_of_its_parts():
    from helpers.intervals import disjoint_subsamples, statistic_interval, t_quantile
    x = np.random.default_rng(1).normal(size=800)
    full, half = statistic_interval(lambda idx: x[idx].mean(), 800, repeats=8)
    parts = [x[idx].mean() for idx in disjoint_subsamples(800, 8)]
    assert full == pytest.approx(x.mean())
    assert half == pytest.approx(t_quantile(0.95, 7) * np.std(parts, ddof=1) / np.sqrt(8))
    # an array statistic gives an array of half-widths
    full2, half2 = statistic_interval(lambda idx: np.array([x[idx].mean(), 2 * x[idx].mean()]), 800, repeats=8)
    assert half2.shape == (2,) and half2[1] == pytest.approx(2 * half)
