"""Known answers, invariances and input errors of helpers.cka (the full-batch reference)."""

import numpy as np
import pytest
import torch

from helpers import cka as C


@pytest.fixture
def kornblith_xy():
    """The data of Kornblith et al.'s reference demo notebook."""
    np.random.seed(1337)
    X = np.random.randn(100, 10)
    Y = np.random.randn(100, 10) + X
    return X, Y


# ---------------------------------------------------------------- known answers


def test_kornblith_demo_values(kornblith_xy):
    X, Y = kornblith_xy
    assert C.cka(C.gram_linear(X), C.gram_linear(Y)) == pytest.approx(0.55761, abs=5e-6)
    assert C.rbf_cka(X, Y, threshold=0.5) == pytest.approx(0.65483, abs=5e-6)
    assert C.cka(C.gram_linear(X), C.gram_linear(Y), debiased=True) == pytest.approx(0.51346, abs=5e-6)


def test_feature_space_form_agrees_with_gram_form(kornblith_xy):
    X, Y = kornblith_xy
    for debiased in (False, True):
        gram_form = C.cka(C.gram_linear(X), C.gram_linear(Y), debiased=debiased)
        assert C.linear_cka(X, Y, debiased=debiased) == pytest.approx(gram_form, abs=1e-12)


def test_unbiased_hsic_equals_dot_of_u_centered_grams(kornblith_xy):
    X, Y = kornblith_xy
    K, L = C.gram_linear(X), C.gram_linear(Y)
    n = len(X)
    via_u_centering = (C.center_gram(K, unbiased=True) * C.center_gram(L, unbiased=True)).sum() / (n * (n - 3))
    assert C.hsic_unbiased(K, L) == pytest.approx(via_u_centering, rel=1e-12)


def test_biased_hsic_equals_feature_centering(kornblith_xy):
    """tr(KHLH)/(n-1)^2 = ||Yc^T Xc||_F^2 / (n-1)^2 for linear kernels."""
    X, Y = kornblith_xy
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    expected = np.sum((Yc.T @ Xc) ** 2) / (len(X) - 1) ** 2
    assert C.hsic(C.gram_linear(X), C.gram_linear(Y)) == pytest.approx(expected, rel=1e-12)


def test_unbiased_hsic_is_unbiased_for_independent_data():
    """For independent X and Y the true HSIC is 0: the unbiased estimate averages near 0, the biased one does not."""
    rng = np.random.default_rng(0)
    biased, unbiased = [], []
    for _ in range(200):
        K = C.gram_linear(rng.normal(size=(20, 5)))
        L = C.gram_linear(rng.normal(size=(20, 5)))
        biased.append(C.hsic(K, L))
        unbiased.append(C.hsic_unbiased(K, L))
    # the biased mean is about p1*p2/n = 1.3 here; the unbiased one is 0 within its standard error
    assert np.mean(biased) > 0.5
    assert abs(np.mean(unbiased)) < 3 * np.std(unbiased) / np.sqrt(len(unbiased))


def test_rbf_bandwidth_uses_numpy_median_over_full_matrix():
    X = np.random.default_rng(1).normal(size=(6, 3))
    sq = ((X[:, None] - X[None]) ** 2).sum(-1)
    sigma_sq = 0.7**2 * np.median(sq)  # even number of entries: mean of the two middle ones
    np.testing.assert_allclose(C.gram_rbf(X, 0.7), np.exp(-sq / (2 * sigma_sq)), atol=1e-12)


# ---------------------------------------------------------------- invariances


def test_invariant_to_orthogonal_transform_and_isotropic_scaling(kornblith_xy):
    X, Y = kornblith_xy
    base = C.linear_cka(X, Y)
    Q, _ = np.linalg.qr(np.random.default_rng(2).normal(size=(10, 10)))
    assert C.linear_cka(X @ Q, Y) == pytest.approx(base, abs=1e-12)
    assert C.linear_cka(1.337 * X, Y) == pytest.approx(base, abs=1e-12)
    assert C.rbf_cka(X @ Q, Y, 0.5) == pytest.approx(C.rbf_cka(X, Y, 0.5), abs=1e-10)
    assert C.linear_cka(X + 5.0, Y) == pytest.approx(base, abs=1e-12)  # centering removes offsets


def test_not_invariant_to_arbitrary_invertible_map(kornblith_xy):
    X, Y = kornblith_xy
    A = np.random.default_rng(3).normal(size=(10, 10))
    assert abs(np.linalg.det(A)) > 1e-3
    assert abs(C.linear_cka(X @ A, Y) - C.linear_cka(X, Y)) > 0.01


def test_self_similarity_is_one(kornblith_xy):
    X, _ = kornblith_xy
    for debiased in (False, True):
        assert C.linear_cka(X, X, debiased) == pytest.approx(1.0, abs=1e-12)
        assert C.cka(C.gram_rbf(X), C.gram_rbf(X), debiased) == pytest.approx(1.0, abs=1e-12)


def test_numpy_and_torch_give_the_same_answers(kornblith_xy):
    X, Y = kornblith_xy
    Xt, Yt = torch.from_numpy(X).float(), torch.from_numpy(Y).float()
    K = C.gram_linear(Xt)
    assert isinstance(K, torch.Tensor) and isinstance(C.gram_linear(X), np.ndarray)
    assert C.linear_cka(Xt, Yt) == pytest.approx(C.linear_cka(X, Y), abs=1e-6)
    assert C.cka(K, C.gram_linear(Yt), debiased=True) == pytest.approx(0.51346, abs=1e-5)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("call, message", [
    (lambda X, Y: C.linear_cka(X, Y[:50]), "same examples|SAME examples"),
    (lambda X, Y: C.cka(C.gram_linear(X), C.gram_linear(Y[:50])), "SAME examples"),
    (lambda X, Y: C.linear_cka(X[:3], Y[:3], debiased=True), "at least 4"),
    (lambda X, Y: C.hsic_unbiased(C.gram_linear(X[:3]), C.gram_linear(Y[:3])), "at least 4"),
    (lambda X, Y: C.linear_cka(np.where(X > 2, np.nan, X), Y), "NaN"),
    (lambda X, Y: C.linear_cka(np.where(X > 2, np.inf, X), Y), "NaN or inf"),
    (lambda X, Y: C.linear_cka(np.ones_like(X), Y), "zero variance"),
    (lambda X, Y: C.linear_cka(X.reshape(100, 2, 5), Y), "2-D"),
    (lambda X, Y: C.cka(X, Y), "square"),
    (lambda X, Y: C.cka(X[:10] @ Y[:10].T, C.gram_linear(Y[:10])), "not symmetric"),  # a cross product, not a Gram
    (lambda X, Y: C.cka(-C.gram_linear(X), C.gram_linear(Y)), "negative values on its diagonal"),
    (lambda X, Y: C.hsic(np.ones((1, 1)), np.ones((1, 1))), "at least 2"),  # was 'too large for float64'
    (lambda X, Y: C.linear_cka(X[:2], Y[:2]), "always 1"),  # was 1.0000000000000002 whatever X and Y
    (lambda X, Y: C.cka(C.gram_linear(X[:2]), C.gram_linear(Y[:2])), "always 1"),
    (lambda X, Y: C.linear_cka(X[:, :0], Y), "0 features per example"),
    (lambda X, Y: C.linear_cka(np.ma.masked_array(X, mask=X > 2), Y), "masked array"),
    (lambda X, Y: C.gram_rbf(X, float("nan")), "positive and finite"),  # was a Gram of NaN
    (lambda X, Y: C.gram_rbf(X, float("inf")), "positive and finite"),  # was a Gram of ones
])
def test_bad_input_gives_clear_error(kornblith_xy, call, message):
    X, Y = kornblith_xy
    with pytest.raises(ValueError, match=message):
        call(X, Y)


@pytest.mark.parametrize("scale", [1e200, 1e-200])
def test_values_near_float64s_limits_give_the_same_cka_not_nan(kornblith_xy, scale):
    """CKA ignores scale, but X's squares overflowed to inf (a silent NaN) at 1e200 and underflowed to 0 (a false
    'zero variance' error) at 1e-200. Each input is now taken times a power of two first, which changes no bit."""
    X, Y = kornblith_xy
    for debiased in (False, True):
        assert C.linear_cka(X * scale, Y, debiased=debiased) == pytest.approx(C.linear_cka(X, Y, debiased=debiased), rel=1e-12)
        assert C.rbf_cka(X * scale, Y, debiased=debiased) == pytest.approx(C.rbf_cka(X, Y, debiased=debiased), rel=1e-12)
    K, L = C.gram_linear(X), C.gram_linear(Y)
    assert C.cka(K * scale, L) == pytest.approx(C.cka(K, L), rel=1e-12)
    assert C.unit_scaled(torch.from_numpy(X * 2.0 ** 40)).equal(C.unit_scaled(torch.from_numpy(X)))  # only exponents change


def test_an_overflowing_gram_or_hsic_is_an_error_not_inf(kornblith_xy):
    X, Y = kornblith_xy
    with pytest.raises(ValueError, match="overflows float64"):
        C.gram_linear(X * 1e160)
    K, L = C.gram_linear(X * 1e100), C.gram_linear(Y * 1e100)  # finite Grams whose products are not
    with pytest.raises(ValueError, match="too large for float64"):
        C.hsic(K, L)
    with pytest.raises(ValueError, match="too large for float64"):
        C.hsic_unbiased(K, L)


def test_complex_features_are_refused_not_silently_made_real(kornblith_xy):
    X, Y = kornblith_xy
    for complex_x in (X + 1j * X, torch.from_numpy(X + 1j * X)):
        with pytest.raises(TypeError, match="complex values"):
            C.linear_cka(complex_x, Y)


def test_features_that_are_not_numbers_are_named(kornblith_xy):
    """Strings and ragged lists raised numpy's 'could not convert string to float' or 'inhomogeneous shape'."""
    X, Y = kornblith_xy
    with pytest.raises(TypeError, match="not numbers"):
        C.linear_cka(np.array([["a", "b"]] * len(Y)), Y)
    with pytest.raises(TypeError, match="ragged list"):
        C.linear_cka([[1.0, 2.0], [3.0]] + [[1.0, 2.0]] * (len(Y) - 2), Y)
    assert C.linear_cka(X.tolist(), Y) == pytest.approx(C.linear_cka(X, Y), abs=1e-15)  # a list of numbers is fine


def test_no_clamping_debiased_cka_can_leave_0_1():
    """Debiased CKA of small independent samples is sometimes negative: we report it, never clip."""
    rng = np.random.default_rng(4)
    values = [C.linear_cka(rng.normal(size=(8, 3)), rng.normal(size=(8, 3)), debiased=True) for _ in range(50)]
    assert min(values) < 0


def test_options_that_must_be_true_or_false_refuse_strings(kornblith_xy):
    """debiased='no' is a non-empty string, so it used to count as True and gave debiased CKA."""
    X, Y = kornblith_xy
    with pytest.raises(TypeError, match="debiased must be True or False"):
        C.linear_cka(X, Y, debiased="no")
    with pytest.raises(TypeError, match="debiased must be True or False"):
        C.cka(C.gram_linear(X), C.gram_linear(Y), debiased=0)
    assert C.linear_cka(X, Y, debiased=np.bool_(True)) == C.linear_cka(X, Y, debiased=True)
    with pytest.raises(TypeError, match="threshold must be a number"):
        C.gram_rbf(X, "0.5")


def test_a_float32_gram_passes_the_symmetry_check():
    """float32 products can differ from their transposes in the last bits: that is rounding, not a wrong input."""
    A, B = torch.randn(300, 4000), torch.randn(300, 900)
    assert 0 < C.cka(A @ A.T, B @ B.T) < 1
