"""helpers.measures: known answers, the invariances that separate the measures, and clear errors."""

import math

import numpy as np
import pytest
import torch

from helpers.cka import linear_cka
from helpers.measures import compare_prepared, prepare_gram, similarity_matrices
from helpers.measures import (angular_shape_distance, mutual_knn, procrustes_distance, procrustes_similarity, ranks,
                              rdm, rsa, similarities, spearman)

RNG = np.random.default_rng(0)
X = RNG.normal(size=(60, 8)) * np.linspace(3, 0.5, 8)  # unequal variances, so anisotropic maps change the shape
Q, _ = np.linalg.qr(RNG.normal(size=(8, 8)))             # a random rotation/reflection
A = RNG.normal(size=(8, 8)) + 0.5 * np.eye(8)              # a general invertible linear map
assert abs(np.linalg.det(A)) > 1e-3


def every_measure(X, Y):
    """Each measure as a similarity, 1 = identical (CKA beside the others)."""
    return similarities(X, Y, k=5)


# --------------------------------------------------------------------------- known answers

def test_procrustes_known_answer_by_hand():
    # X: four points on two axes (Frobenius norm 2); Y keeps only the first axis (norm sqrt 2).
    # X̃ᵀỸ = [[1/sqrt2, 0], [0, 0]], nuclear norm 1/sqrt2: angle pi/4, distance sqrt(2 - sqrt 2).
    X = np.array([[1.0, 0], [-1, 0], [0, 1], [0, -1]])
    Y = np.array([[1.0, 0], [-1, 0], [0, 0], [0, 0]])
    assert procrustes_similarity(X, Y) == pytest.approx(1 / math.sqrt(2))
    assert angular_shape_distance(X, Y) == pytest.approx(math.pi / 4)
    assert procrustes_distance(X, Y) == pytest.approx(math.sqrt(2 - math.sqrt(2)))


def test_rsa_known_answer_by_hand():
    # points 0, 1, 3 -> distances (1, 3, 2); points 0, 2, 3 -> (2, 3, 1): rank differences -1, 0, 1,
    # Spearman = 1 - 6 * 2 / (3 * 8) = 0.5
    assert rsa(np.array([[0.0], [1], [3]]), np.array([[0.0], [2], [3]])) == pytest.approx(0.5)
    assert rsa(np.array([[0.0], [1], [3]]), np.array([[0.0], [2], [3]]) * -7 + 4) == pytest.approx(0.5)


def test_mutual_knn_known_answer_by_hand():
    # 2-D points at the angles below (cosine neighbours = nearest angle). X: 0, 10, 80, 90 degrees,
    # neighbours 1, 0, 3, 2. Y: 0, 10, 40, 90 degrees, neighbours 1, 0, 1, 2: three of four agree.
    def at(degrees):
        r = np.radians(degrees)
        return np.stack([np.cos(r), np.sin(r)], 1)
    assert mutual_knn(at([0, 10, 80, 90]), at([0, 10, 40, 90]), k=1) == pytest.approx(0.75)


def test_ranks_average_ties_and_spearman_of_a_reversal():
    assert ranks(np.array([3.0, 1, 3, 2])).tolist() == [3.5, 1, 3.5, 2]
    assert spearman([1, 2, 3, 4], [8, 6, 4, 0]) == pytest.approx(-1)


def test_rdm_euclidean_and_correlation():
    D = rdm(np.array([[0.0, 0], [3, 4], [6, 8]]))
    assert D[0, 1] == pytest.approx(5) and D[0, 2] == pytest.approx(10) and np.allclose(np.diag(D), 0)
    C = rdm(np.array([[1.0, 2, 3], [2, 4, 6], [3, 2, 1]]), "correlation")
    assert C[0, 1] == pytest.approx(0) and C[0, 2] == pytest.approx(2)


# --------------------------------------------------------------------------- the cases that separate the measures

def test_identical_representations_score_one():
    for name, value in every_measure(X, X).items():
        assert value == pytest.approx(1), name


@pytest.mark.parametrize("name, transform", [
    ("rotation", lambda X: X @ Q),
    ("isotropic scaling", lambda X: 4.5 * X),
    ("permuted features", lambda X: X[:, RNG.permutation(X.shape[1])]),
])
def test_every_measure_ignores_rotation_scaling_and_feature_order(name, transform):
    for measure, value in every_measure(X, transform(X)).items():
        assert value == pytest.approx(1), f"{measure} under {name}"


def test_a_general_invertible_linear_map_changes_every_measure():
    # none of the four is invariant to it (CCA would be); the anisotropic map changes each
    for measure, value in every_measure(X, X @ A).items():
        assert value < 0.99, measure


def test_translation_separates_cosine_knn_from_the_rest():
    shifted = X + 10.0  # far from the origin: every example points the same way
    values = every_measure(X, shifted)
    for measure in ("linear CKA", "Procrustes", "RSA"):
        assert values[measure] == pytest.approx(1), measure
    assert values["mutual k-NN"] < 0.9


def test_one_dominant_direction_moves_cka_more_than_procrustes():
    # stretching one feature 20-fold: CKA weighs variance, Procrustes standard deviation
    stretched = X.copy()
    stretched[:, 4] *= 20
    assert 1 - linear_cka(X, stretched) > 1 - procrustes_similarity(X, stretched)


def test_permuting_the_examples_of_one_side_destroys_the_match():
    order = RNG.permutation(len(X))
    for measure, value in every_measure(X, X[order]).items():
        assert value < 0.6, measure
    for measure, value in every_measure(X[order], X[order] @ Q).items():  # the same permutation on both: unchanged
        assert value == pytest.approx(1), measure


def test_unrelated_representations_mutual_knn_near_chance():
    values = [mutual_knn(RNG.normal(size=(200, 20)), RNG.normal(size=(200, 20)), k=10) for _ in range(5)]
    assert np.mean(values) == pytest.approx(10 / 199, abs=0.03)


def test_torch_inputs_give_the_same_numbers():
    Y = X @ A
    assert procrustes_distance(torch.from_numpy(X), torch.from_numpy(Y)) == pytest.approx(procrustes_distance(X, Y))
    assert rsa(torch.from_numpy(X).float(), Y) == pytest.approx(rsa(X, Y), abs=1e-6)


# --------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("measure", [procrustes_distance, rsa, mutual_knn])
def test_mismatched_examples_are_refused(measure):
    with pytest.raises(ValueError, match="SAME examples"):
        measure(X, X[:-1])


@pytest.mark.parametrize("measure", [procrustes_distance, angular_shape_distance, rsa, mutual_knn])
def test_nan_is_refused(measure):
    bad = X.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        measure(X, bad)


def test_too_few_examples_are_refused():
    with pytest.raises(ValueError, match="at least 3"):
        rsa(X[:2], X[:2])
    with pytest.raises(ValueError, match="at least 12"):
        mutual_knn(X[:11], X[:11], k=10)
    with pytest.raises(ValueError, match="at least 3"):  # of 2 examples any two centred shapes agree: always 1
        procrustes_distance(X[:2], X[:2] ** 3)


@pytest.mark.parametrize("scale", [1e200, 1e-200])
def test_values_near_float64s_limits_give_the_same_numbers(scale):
    """Procrustes gave 0.0 at 1e200 (its squares overflowed) and every measure a false 'zero variance' or 'zero
    vector' error at 1e-200; each input is now taken times a power of two first (helpers.measures._unit_scaled)."""
    Y = X @ A
    assert every_measure(X * scale, Y) == pytest.approx(every_measure(X, Y), rel=1e-9)
    assert rdm(X * scale) / scale == pytest.approx(rdm(X), rel=1e-6, abs=1e-6)  # distances keep the scale


def test_other_bad_inputs_say_what_to_do():
    with pytest.raises(ValueError, match="2-D"):
        procrustes_distance(X[:, 0], X[:, 0])
    with pytest.raises(ValueError, match="zero variance"):
        procrustes_distance(np.ones((5, 3)), X[:5])
    with pytest.raises(ValueError, match="dissimilarity"):
        rsa(X, X, dissimilarity="cosine")
    with pytest.raises(ValueError, match="k must be"):
        mutual_knn(X, X, k=0)
    with pytest.raises(TypeError):
        rsa("X", X)


def test_prepared_grams_give_the_same_numbers_as_the_features():
    Y = X @ A + RNG.normal(size=X.shape)
    got = compare_prepared(prepare_gram(X @ X.T, k=5), prepare_gram(Y @ Y.T, k=5))
    assert got["Procrustes"] == pytest.approx(procrustes_similarity(X, Y), abs=1e-9)
    assert got["RSA"] == pytest.approx(rsa(X, Y), abs=1e-9)
    assert got["mutual k-NN"] == pytest.approx(mutual_knn(X, Y, k=5))
    assert got["linear CKA"] == pytest.approx(linear_cka(X, Y, debiased=True), abs=1e-9)
    matrices = similarity_matrices([prepare_gram(Z @ Z.T, k=5) for Z in (X, Y, X @ Q)])
    for name, values in matrices.items():
        assert values.shape == (3, 3) and np.allclose(values, values.T), name
        assert values[0, 2] == pytest.approx(1) and values[0, 1] == pytest.approx(got[name]), name


def test_prepare_gram_refuses_bad_grams():
    with pytest.raises(ValueError, match="square"):
        prepare_gram(X)
    with pytest.raises(ValueError, match="at least 12"):
        prepare_gram(np.eye(11), k=10)



def test_procrustes_with_more_features_than_examples_equals_the_direct_nuclear_norm():
    """Wide inputs take a QR shortcut (measures._narrow); it must give the nuclear norm of the full (p1, p2) product."""
    rng = np.random.default_rng(3)
    X, Y = rng.normal(size=(12, 40)), rng.normal(size=(12, 25)) @ rng.normal(size=(25, 30))

    def direct(A, B):
        A, B = A - A.mean(0), B - B.mean(0)
        return np.linalg.svd((A / np.linalg.norm(A)).T @ (B / np.linalg.norm(B)), compute_uv=False).sum()

    assert procrustes_similarity(X, Y) == pytest.approx(direct(X, Y), abs=1e-12)          # both wide
    assert procrustes_similarity(X, Y[:, :5]) == pytest.approx(direct(X, Y[:, :5]), abs=1e-12)  # one wide, one narrow


def test_bad_input_the_measures_used_to_take_silently_or_with_a_raw_error():
    """A masked array's hidden values were used as data; complex values lost their imaginary part with only a warning;
    bfloat16 tensors and zero-width features gave numpy's errors; k = 0 in prepare_gram divided by zero later; and
    rows that all point one way gave a mutual k-NN decided by the order of the rows."""
    masked = np.ma.masked_array(X, mask=np.zeros_like(X, dtype=bool))
    assert procrustes_distance(masked, X ** 3) == procrustes_distance(X, X ** 3)  # nothing hidden: accepted
    masked.mask[0, 0] = True
    for measure in (procrustes_distance, rsa, mutual_knn):
        with pytest.raises(ValueError, match="masked array with 1 masked value"):
            measure(masked, X)
        with pytest.raises(TypeError, match="complex values"):
            measure(X + 1j, X)
        with pytest.raises(ValueError, match="0 features per example"):
            measure(X[:, :0], X)
    as_bf16 = torch.from_numpy(X).to(torch.bfloat16)
    assert procrustes_distance(as_bf16, X) == pytest.approx(procrustes_distance(as_bf16.double().numpy(), X), abs=1e-12)
    with pytest.raises(ValueError, match="k must be a whole number"):
        prepare_gram(X @ X.T, k=0)
    # the building blocks called directly: k = 0 gave no neighbours, k = -1 all but one, k = 2.5 a raw slice error;
    # knn_matrix of too few examples marked every other example (overlap 1 whatever the data), of NaN a random pick
    from helpers.measures import knn_matrix, nearest_neighbours
    for k in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="k must be a whole number"):
            nearest_neighbours(X, k)
        with pytest.raises(ValueError, match="k must be a whole number"):
            knn_matrix(X @ X.T, k)
    with pytest.raises(ValueError, match="at least 12"):
        knn_matrix(X[:8] @ X[:8].T, 10)
    with pytest.raises(ValueError, match="RSA is undefined"):  # the corners of a simplex: every pair equally far apart
        rsa(np.eye(5), X[:5])
    with pytest.raises(ValueError, match="NaN"):
        knn_matrix(np.full((20, 20), np.nan), 2)
    same_direction = np.outer(np.arange(1.0, len(X) + 1), X[0])  # every row a positive multiple of one row
    with pytest.raises(ValueError, match="same cosine similarity"):
        mutual_knn(same_direction, X)
