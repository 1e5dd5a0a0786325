"""Three similarity measures beside CKA: orthogonal Procrustes, RSA and mutual k-nearest neighbours.

Every function compares two representations of the SAME n examples, X: (n, p1) and Y: (n, p2),
rows in the same order (numpy arrays or torch tensors; the arithmetic runs in float64 numpy).
Each measure is defined by what it ignores, its *invariances*: a transformation T with
measure(X, T(X)) = "identical". CKA (helpers/cka.py) ignores translation, rotation and isotropic
scaling; none of the four ignores a general invertible linear map (only CCA-like measures do).

Orthogonal Procrustes (Williams et al. 2021, "Generalized shape metrics on neural representations").
    Centre the columns and scale each matrix to unit Frobenius norm: X̃ = Xc / ||Xc||_F. The best
    rotation Q (QᵀQ = I) of Ỹ onto X̃ minimises ||X̃ - Ỹ Q||_F²; expanding the square gives
    1 + 1 - 2 tr(X̃ᵀ Ỹ Q), and the largest tr(X̃ᵀ Ỹ Q) over rotations is the nuclear norm
    ||X̃ᵀ Ỹ||_* (the sum of singular values of the (p1, p2) matrix X̃ᵀ Ỹ; unequal widths act as
    if the narrower one were padded with zero columns). So
        procrustes_similarity = ||X̃ᵀ Ỹ||_*                 in [0, 1], 1 = same shape
        procrustes_distance   = sqrt(2 - 2 ||X̃ᵀ Ỹ||_*)     in [0, sqrt 2]
        angular_shape_distance = arccos(||X̃ᵀ Ỹ||_*)       in [0, pi/2], a metric on shapes
    Invariant to: translation, rotation/reflection (any orthogonal map, so permuting features),
    isotropic scaling. Not invariant to: anisotropic scaling, general invertible linear maps.
    Unlike CKA (which compares Grams, so squares the singular values) it weighs every direction
    by its standard deviation, not its variance: one high-variance direction dominates it less.

RSA, representational similarity analysis (Kriegeskorte et al. 2008).
    The representational dissimilarity matrix (RDM) holds, for every pair of examples, how far
    apart the representation puts them; here the Euclidean distance ||x_i - x_j|| (the default) or
    the correlation distance 1 - corr(x_i, x_j) (each example's features as a vector). RSA is the
    Spearman rank correlation between the two RDMs' upper triangles (n(n-1)/2 pairs each), in
    [-1, 1]. With Euclidean distances it is invariant to translation, rotation, isotropic scaling,
    and any monotone change of the distances (ranks only). With correlation distances it ignores
    shifting or scaling each example's features, but not rotating them. Not invariant to general
    invertible linear maps.

Mutual k-nearest neighbours (Huh et al. 2024, "The Platonic representation hypothesis").
    Normalise each example to unit length and find its k nearest neighbours by cosine similarity
    (the example itself left out) in X and in Y: N_X(i), N_Y(i). The measure is the mean overlap
        mutual_knn = (1/n) sum_i |N_X(i) ∩ N_Y(i)| / k        in [0, 1]
    About k / (n - 1) for unrelated representations (chance), 1 when the neighbourhoods agree.
    Invariant to rotation, isotropic scaling and scaling each example separately; NOT to
    translation (cosine is measured from the origin). It reads only local structure: the rank of
    the nearest few, not how far anything is.

All four read a representation only through its Gram matrix K = X Xᵀ (inner products of the
examples: distances, cosines and centred Grams all follow from it), so a layer of any width can be
kept as one (n, n) matrix. `prepare_gram(K)` computes each measure's ingredients once per layer and
`similarity_matrices` compares every pair of layers without recomputing them.

    procrustes_distance(X, Y); angular_shape_distance(X, Y); rsa(X, Y); mutual_knn(X, Y, k=10)
    similarity_matrices([prepare_gram(K) for K in grams])  # {measure: (L, L)}
"""

from __future__ import annotations

import math

import numpy as np
import torch

MEASURES = ("linear CKA", "Procrustes", "RSA", "mutual k-NN")  # names as the notebooks print them


# --------------------------------------------------------------------------- input checks


def _features(A, name: str, min_examples: int = 2) -> np.ndarray:
    """A (n, p) float64 numpy array with a clear error for wrong shapes, NaN, or too few examples."""
    from helpers.cka import as_float64_tensor

    if not isinstance(A, (torch.Tensor, np.ndarray, list, tuple)):
        raise TypeError(f"{name} must be a numpy array or a torch tensor, got {type(A).__name__}.")
    A = as_float64_tensor(A, name).cpu().numpy()  # refuses complex values and masked entries; takes float16, bfloat16
    if A.ndim != 2:
        raise ValueError(f"{name} must be 2-D (examples x features), got shape {A.shape}. "
                         f"Flatten each example first, e.g. {name}.reshape(len({name}), -1).")
    if A.shape[0] < min_examples:
        raise ValueError(f"{name} has {A.shape[0]} example(s); this measure needs at least {min_examples}. Use more examples.")
    if A.shape[1] == 0:
        raise ValueError(f"{name} has 0 features per example (shape {A.shape}): there is nothing to compare. "
                         "Check the layer's output, or the slice that made it.")
    if not np.isfinite(A).all():
        raise ValueError(f"{name} contains {int((~np.isfinite(A)).sum())} NaN or inf value(s). Check the layer's output first.")
    return A


def _pair(X, Y, min_examples: int = 2):
    """Both checked, each times a power of two (_unit_scaled): every measure of a pair ignores scale."""
    X, Y = _features(X, "X", min_examples), _features(Y, "Y", min_examples)
    if len(X) != len(Y):
        raise ValueError(f"X has {len(X)} examples but Y has {len(Y)}. The measures compare two representations "
                         "of the SAME examples in the same order: pass matching rows.")
    return _unit_scaled(X), _unit_scaled(Y)


def _exponent(A: np.ndarray) -> int:
    """The power of two of A's largest |value| (0 for a zero matrix): A / 2**e has its largest value in [0.5, 1)."""
    largest = np.abs(A).max()
    return 0 if largest == 0 else int(np.frexp(largest)[1])


def _unit_scaled(A: np.ndarray) -> np.ndarray:
    """A / 2**_exponent(A): the same bits for a scale-invariant measure (only exponents change), and no overflow to
    inf (or underflow to 0) in the squares of values near float64's limits."""
    return np.ldexp(A, -_exponent(A))


def _unit_shape(A: np.ndarray, name: str) -> np.ndarray:
    """Columns centred, then scaled to Frobenius norm 1: (n, p) -> (n, p)."""
    A = A - A.mean(0, keepdims=True)
    norm = np.linalg.norm(A)
    if norm == 0:
        raise ValueError(f"{name} is the same for every example (zero variance after centering): its shape is undefined.")
    return A / norm


# --------------------------------------------------------------------------- orthogonal Procrustes


def _narrow(A: np.ndarray) -> np.ndarray:
    """(n, p) -> (n, min(n, p)) with the same A Aᵀ, so the same singular values of Aᵀ Y for any Y.

    With p > n, Aᵀ = Q R (Q: (p, n) orthonormal columns) gives Aᵀ Y = Q (R Y), whose singular values
    are those of R Y: an (n, n) factor replaces a (p, p2) product (d = 3,000 features, n = 100: 30 times less work).
    """
    return A if A.shape[1] <= A.shape[0] else np.linalg.qr(A.T, mode="r").T


def procrustes_similarity(X, Y) -> float:
    """||X̃ᵀ Ỹ||_*, the nuclear norm of the centred, unit-norm cross-covariance: X (n, p1), Y (n, p2) -> [0, 1]."""
    X, Y = _pair(X, Y, 3)  # of 2 examples, any two centred shapes are one line: the similarity is always 1
    value = np.linalg.svd(_narrow(_unit_shape(X, "X")).T @ _narrow(_unit_shape(Y, "Y")), compute_uv=False).sum()
    return float(min(value, 1.0))  # rounding can leave it a hair above 1


def procrustes_distance(X, Y) -> float:
    """min over rotations Q of ||X̃ - Ỹ Q||_F = sqrt(2 - 2 ||X̃ᵀ Ỹ||_*): X (n, p1), Y (n, p2) -> [0, sqrt 2]."""
    return math.sqrt(max(0.0, 2 - 2 * procrustes_similarity(X, Y)))


def angular_shape_distance(X, Y) -> float:
    """arccos ||X̃ᵀ Ỹ||_* (Williams et al. 2021), a metric: X (n, p1), Y (n, p2) -> [0, pi/2] radians."""
    return math.acos(procrustes_similarity(X, Y))


# --------------------------------------------------------------------------- RSA


def rdm(X, dissimilarity: str = "euclidean") -> np.ndarray:
    """Representational dissimilarity matrix: X (n, p) -> (n, n), zero diagonal.

    'euclidean': ||x_i - x_j||;  'correlation': 1 - Pearson correlation of x_i and x_j over features.
    """
    X = _features(X, "X", 3)
    shift = _exponent(X)  # the distances of X / 2**shift, times 2**shift: the same bits, and no overflow
    X = np.ldexp(X, -shift)
    if dissimilarity == "euclidean":
        squared = (X * X).sum(1)
        return np.ldexp(np.sqrt(np.clip(squared[:, None] + squared[None, :] - 2 * X @ X.T, 0, None)), shift)
    if dissimilarity == "correlation":
        if X.shape[1] < 2:
            raise ValueError("correlation distance needs at least 2 features per example; use dissimilarity='euclidean'.")
        rows = X - X.mean(1, keepdims=True)
        norms = np.linalg.norm(rows, axis=1)
        if (norms == 0).any():
            raise ValueError(f"{int((norms == 0).sum())} example(s) have the same value in every feature: their correlation "
                             "is undefined. Use dissimilarity='euclidean'.")
        rows = rows / norms[:, None]
        return 1 - rows @ rows.T
    raise ValueError(f"dissimilarity must be 'euclidean' or 'correlation', got {dissimilarity!r}.")


def ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..m of a 1-D array, ties given their average rank (as Spearman's correlation needs)."""
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    starts = np.r_[True, sorted_values[1:] != sorted_values[:-1]]  # the first of each run of equal values
    group = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)
    last = np.r_[first[1:], len(values)] - 1
    out = np.empty(len(values))
    out[order] = (first[group] + last[group]) / 2 + 1
    return out


def spearman(a, b) -> float:
    """Spearman's rank correlation of two 1-D arrays of the same length: the Pearson correlation of their ranks."""
    ra, rb = ranks(a), ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denominator = math.sqrt((ra @ ra) * (rb @ rb))
    if denominator == 0:
        raise ValueError("one of the two arrays has every value tied (all ranks equal): the rank correlation is undefined.")
    return float(ra @ rb / denominator)


def rsa(X, Y, dissimilarity: str = "euclidean") -> float:
    """Spearman correlation of the two RDMs' upper triangles: X (n, p1), Y (n, p2), n >= 3 -> [-1, 1]."""
    X, Y = _pair(X, Y, 3)
    upper = np.triu_indices(len(X), k=1)
    a, b = rdm(X, dissimilarity)[upper], rdm(Y, dissimilarity)[upper]
    if np.ptp(a) == 0 or np.ptp(b) == 0:  # spearman would refuse it in words about arrays, not examples
        raise ValueError("one RDM has all pairs equally far apart (every rank tied): RSA is undefined. Check the layer.")
    return spearman(a, b)


# --------------------------------------------------------------------------- mutual k-nearest neighbours


def _check_k(k) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a whole number >= 1, got {k!r}.")


def _refuse_all_tied(cosine: np.ndarray, name: str) -> None:
    """Every pair of examples equally similar (all rows point one way): which k are 'nearest' is then only the
    order of the rows, not the representation."""
    off = cosine[~np.eye(len(cosine), dtype=bool)]
    if off.max() - off.min() <= 1e-12:
        raise ValueError(f"in {name} every pair of examples has the same cosine similarity (every row points the same way), "
                         "so nearest neighbours are undefined. Check the layer (it may not depend on the input), or use a "
                         "measure without neighbours.")


def nearest_neighbours(X, k: int) -> np.ndarray:
    """The k nearest neighbours of each example by cosine similarity, itself left out: X (n, p) -> (n, k) indices."""
    _check_k(k)  # k = 0 gave no neighbours, k = -1 all of them but one: mutual_knn's rule, for direct callers too
    X = _unit_scaled(_features(X, "X", k + 2))  # norms of values near float64's limits would overflow
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    if (norms == 0).any():
        raise ValueError(f"{int((norms == 0).sum())} example(s) are the zero vector: cosine similarity is undefined for them.")
    unit = X / norms
    similarity = unit @ unit.T
    _refuse_all_tied(similarity, "X")
    np.fill_diagonal(similarity, -np.inf)  # an example is not its own neighbour
    return np.argsort(-similarity, axis=1, kind="stable")[:, :k]


def mutual_knn(X, Y, k: int = 10) -> float:
    """Mean fraction of each example's k nearest neighbours shared by X and Y: X (n, p1), Y (n, p2) -> [0, 1].

    Needs n >= k + 2 (so that chance, k / (n - 1), is below 1).
    """
    _check_k(k)
    X, Y = _pair(X, Y, k + 2)
    nx, ny = nearest_neighbours(X, k), nearest_neighbours(Y, k)
    shared = [len(np.intersect1d(a, b)) for a, b in zip(nx, ny)]
    return float(np.mean(shared) / k)


# --------------------------------------------------------------------------- all at once


def similarities(X, Y, k: int = 10) -> dict:
    """Every measure as a similarity (1 = identical): {name in MEASURES: float}. X (n, p1), Y (n, p2)."""
    from helpers.cka import linear_cka

    return {"linear CKA": linear_cka(X, Y), "Procrustes": procrustes_similarity(X, Y), "RSA": rsa(X, Y),
            "mutual k-NN": mutual_knn(X, Y, k)}


# --------------------------------------------------------------------------- many layers at once, from Grams


def procrustes_factor(K: np.ndarray) -> np.ndarray:
    """(n, n) float64 Gram X Xᵀ -> F (n, r): F Fᵀ is the centred Gram scaled to trace 1, kept to its r non-zero
    directions. The nuclear norm of F_xᵀ F_y is ||X̃ᵀỸ||_* (procrustes_of_factors), and r <= p keeps it cheap for
    pooled features. torch's eigh, so that torch's thread setting holds (numpy's BLAS threads fight over busy cores)."""
    from helpers.cka import center_gram

    centred = np.asarray(center_gram(K))
    trace = np.trace(centred)
    if trace <= 0:
        raise ValueError("the representation is the same for every example (zero variance after centering): "
                         "Procrustes is undefined. Check the layer, or leave it out.")
    values, vectors = torch.linalg.eigh(torch.from_numpy(centred / trace))
    keep = values > 1e-12 * values[-1]  # rounding noise, not directions of the data
    return (vectors[:, keep] * values[keep].sqrt()).cpu().numpy()


def procrustes_of_factors(F_x: np.ndarray, F_y: np.ndarray) -> float:
    """||X̃ᵀỸ||_* from two procrustes_factor outputs of the same examples: (n, r_x), (n, r_y) -> [0, 1]."""
    value = float(torch.linalg.svdvals(torch.from_numpy(F_x.T @ F_y)).sum())
    return min(value, 1.0)  # rounding can leave it a hair above 1


def rsa_vector(K: np.ndarray) -> np.ndarray:
    """(n, n) Gram -> the centred, unit-length ranks of the Euclidean distances between examples (upper triangle):
    the dot product of two of them is RSA's Spearman correlation."""
    n, diagonal = len(K), np.diag(K)
    upper = np.triu_indices(n, k=1)
    r = ranks(np.sqrt(np.clip(diagonal[:, None] + diagonal[None, :] - 2 * K, 0, None))[upper])
    r = r - r.mean()
    norm = np.linalg.norm(r)
    if norm == 0:  # the same rule as spearman(): a unit vector of zeros would be NaN, a silent number later
        raise ValueError("every pair of examples is equally far apart (every rank of the RDM tied): RSA is undefined. "
                         "Check the layer (it may not depend on the input), or leave it out.")
    return r / norm


def knn_matrix(K: np.ndarray, k: int) -> np.ndarray:
    """(n, n) Gram -> (n, n) bool: row i marks example i's k nearest neighbours by cosine (itself excluded).

    Unlike mutual_knn, it takes rows that all point one way (ties broken by row order): prepare_gram serves every
    measure at once, and a one-number-per-image representation (notebook 17's brightness) is read by the other three
    while its k-NN, which sees only each number's sign, is left unread."""
    _check_k(k)
    K = np.asarray(K)
    n, diagonal = len(K), np.diag(K)
    if not np.isfinite(K).all():  # NaN cosines sort anywhere: neighbours would be picked at random
        raise ValueError("K contains NaN or inf values. Check the features it was made from.")
    if n < k + 2:  # k >= n - 1 marks every other example: the overlap is 1 whatever the data
        raise ValueError(f"K has {n} examples; k = {k} neighbours need at least {k + 2}. Use more examples or a smaller k.")
    if (diagonal <= 0).any():
        raise ValueError(f"{int((diagonal <= 0).sum())} example(s) are the zero vector: cosine neighbours are undefined. "
                         "Check the layer, or use a measure without neighbours.")
    cosine = K / np.sqrt(diagonal[:, None] * diagonal[None, :])
    np.fill_diagonal(cosine, -np.inf)  # an example is not its own neighbour
    neighbours = np.zeros((n, n), dtype=bool)
    np.put_along_axis(neighbours, np.argsort(-cosine, axis=1, kind="stable")[:, :k], True, axis=1)
    return neighbours


def prepare_gram(K, k: int = 10) -> dict:
    """Each measure's ingredients from one representation's (n, n) Gram matrix K = X Xᵀ (uncentred).

    'cka': the U-centred Gram (unbiased HSIC, as the course's CKA); 'procrustes': procrustes_factor(K);
    'rsa': rsa_vector(K); 'knn': knn_matrix(K, k).
    """
    from helpers.cka import as_float64_tensor, center_gram

    _check_k(k)
    K = as_float64_tensor(K, "K").cpu().numpy()  # as the features: complex values and masked entries refused
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(f"K must be a square (n, n) Gram matrix, got shape {K.shape}. For features use X @ X.T.")
    if not np.isfinite(K).all():
        raise ValueError("K contains NaN or inf values. Check the features it was made from.")
    if len(K) < k + 2:
        raise ValueError(f"K has {len(K)} examples; mutual k-NN with k = {k} needs at least {k + 2}. Use more examples or a smaller k.")
    unbiased = np.asarray(center_gram(K, unbiased=True))
    return {"cka": unbiased / np.linalg.norm(unbiased), "procrustes": procrustes_factor(K), "rsa": rsa_vector(K),
            "knn": knn_matrix(K, k), "k": k}


def compare_prepared(a: dict, b: dict) -> dict:
    """The four similarities of two prepared representations of the same examples: {name in MEASURES: float}."""
    if a["knn"].shape != b["knn"].shape or a["k"] != b["k"]:
        raise ValueError("the two representations were prepared on different numbers of examples or with different k.")
    return {"linear CKA": float((a["cka"] * b["cka"]).sum()), "Procrustes": procrustes_of_factors(a["procrustes"], b["procrustes"]),
            "RSA": float(a["rsa"] @ b["rsa"]), "mutual k-NN": float((a["knn"] & b["knn"]).sum() / (len(a["knn"]) * a["k"]))}


def similarity_matrices(prepared_a: list, prepared_b: list | None = None) -> dict:
    """Every pair of layers under every measure: lists of prepare_gram outputs -> {name: (La, Lb) array}.

    With prepared_b None, the layers of one model against themselves (symmetric, only half computed).
    """
    same = prepared_b is None
    prepared_b = prepared_a if same else prepared_b
    out = {name: np.zeros((len(prepared_a), len(prepared_b))) for name in MEASURES}
    for i, a in enumerate(prepared_a):
        for j, b in enumerate(prepared_b):
            if same and j < i:
                for name in MEASURES:
                    out[name][i, j] = out[name][j, i]
                continue
            for name, value in compare_prepared(a, b).items():
                out[name][i, j] = value
    return out
