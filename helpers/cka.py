"""Centered kernel alignment (CKA): Gram matrices, centering, HSIC and CKA.

Every function takes numpy arrays or torch tensors (CPU or CUDA) and returns the same kind:
a matrix for matrix outputs, a Python float for scalar outputs. The arithmetic runs in
float64, so these are the reference implementations the course checks everything against.
For whole layer-by-layer matrices over many images use `MinibatchCKA` (helpers/minibatch_cka.py).

Notation (as in Kornblith et al. 2019 and Raghu et al. 2021):
    X: (n, p) features, one row per example.      K = X X^T: (n, n) Gram matrix.
    H = I - 11^T / n: the centering matrix.         HSIC(K, L) = tr(K H L H) / (n - 1)^2.
    CKA(K, L) = HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)).
"""

from __future__ import annotations

import numpy as np
import torch

from helpers.guards import check_flag

# --------------------------------------------------------------------------- input checks


def as_float64_tensor(A, what: str = "features") -> torch.Tensor:
    """Convert a numpy array or torch tensor to a float64 torch tensor on the same device."""
    if isinstance(A, torch.Tensor):
        if A.is_complex():
            raise TypeError(f"{what} holds complex values; CKA and the other measures compare real features. Pass {what}.real or {what}.abs().")
        return A.detach().to(torch.float64)
    if isinstance(A, np.ndarray) or np.isscalar(A) or isinstance(A, (list, tuple)):
        refuse_masked(A, what)
        try:
            A = np.asarray(A)
        except ValueError:  # a ragged list: numpy's "inhomogeneous shape"
            raise TypeError(f"{what} is a ragged list (rows of different lengths): give one row of the same number of "
                            "features per example, as a numpy array or a torch tensor.") from None
        if np.iscomplexobj(A):  # float64 would drop the imaginary parts with only a warning
            raise TypeError(f"{what} holds complex values; CKA and the other measures compare real features. Pass {what}.real or abs({what}).")
        try:
            return torch.as_tensor(A.astype(np.float64))
        except (TypeError, ValueError):  # strings or objects: numpy's "could not convert string to float"
            raise TypeError(f"{what} holds values that are not numbers ({A.dtype}): give numeric features "
                            "(examples x features), e.g. the activations of a layer.") from None
    raise TypeError(f"{what} must be a numpy array or a torch tensor, got {type(A).__name__}.")


def refuse_masked(A, what: str) -> None:
    """A numpy masked array with hidden entries would be used as if nothing were hidden: refuse it."""
    hidden = int(np.ma.getmaskarray(A).sum()) if np.ma.isMaskedArray(A) else 0
    if hidden:
        raise ValueError(f"{what} is a masked array with {hidden} masked value(s); the values under the mask would be "
                         f"used as if they were data. Drop the examples (rows) that hold them, or fill them first "
                         f"({what}.filled(...)).")


def unit_scaled(A: torch.Tensor) -> torch.Tensor:
    """A times the power of two that brings its largest |value| into [0.5, 1).

    Only the exponents change, so the products and sums of a scale-invariant result (CKA, an RBF Gram with a
    median bandwidth) give the same bits as before; features near float64's limits (1e200, 1e-200) then neither
    overflow to inf nor underflow to 0 in their squares. A zero matrix is returned as it is.
    """
    largest = A.abs().max()
    if largest == 0:
        return A
    return torch.ldexp(A, -torch.frexp(largest).exponent)


def _like_input(result: torch.Tensor, original):
    """Return `result` as numpy when the caller passed numpy, else as a tensor."""
    if isinstance(original, torch.Tensor):
        return result
    return result.cpu().numpy()


def check_features(X, name: str = "X") -> torch.Tensor:
    """Validate an (n, p) feature matrix and return it as a float64 tensor."""
    X = as_float64_tensor(X, name)
    if X.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D (examples x features), got shape {tuple(X.shape)}. "
            f"Flatten each example first, e.g. {name}.reshape(len({name}), -1)."
        )
    if X.shape[0] < 2:
        raise ValueError(f"{name} has {X.shape[0]} example(s); similarity needs at least 2 (use 4+ for unbiased HSIC).")
    if X.shape[1] == 0:
        raise ValueError(f"{name} has 0 features per example (shape {tuple(X.shape)}): there is nothing to compare. "
                         "Check the layer's output, or the slice that made it.")
    if not torch.isfinite(X).all():
        bad = int((~torch.isfinite(X)).sum())
        raise ValueError(f"{name} contains {bad} NaN or inf value(s). Check the layer's output (or the input images) before computing CKA.")
    return X


def check_gram(K, name: str = "K") -> torch.Tensor:
    """Validate an (n, n) Gram matrix and return it as a float64 tensor."""
    K = as_float64_tensor(K, name)
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(f"{name} must be a square (n, n) Gram matrix, got shape {tuple(K.shape)}. Did you pass features? Use gram_linear({name}) first.")
    if K.shape[0] < 2:
        raise ValueError(f"{name} holds {K.shape[0]} example(s); HSIC and CKA need at least 2 (4+ for unbiased HSIC).")
    if not torch.isfinite(K).all():
        raise ValueError(f"{name} contains NaN or inf values. Check the features it was made from.")
    scale = K.abs().max()
    if (K - K.T).abs().max() > 1e-4 * scale:  # far above float32 rounding: not a Gram at all
        raise ValueError(f"{name} is not symmetric, so it is not a Gram matrix (K[i, j] = <x_i, x_j> = K[j, i]). Did you "
                         f"pass a cross product X @ Y.T, or features with as many columns as rows? Build each Gram from "
                         f"one representation: gram_linear(X) and gram_linear(Y).")
    if torch.diagonal(K).min() < -1e-8 * scale:  # a Gram's diagonal holds squared lengths
        raise ValueError(f"{name} has negative values on its diagonal, so it is not a Gram matrix (K[i, i] = |x_i|^2 "
                         ">= 0). Did you pass a distance or a negated kernel?")
    return K


def check_same_examples(A, B, names=("K", "L")) -> None:
    """Both inputs must describe the same examples: same number of rows."""
    if A.shape[0] != B.shape[0]:
        raise ValueError(
            f"{names[0]} has {A.shape[0]} examples but {names[1]} has {B.shape[0]}. CKA compares two "
            "representations of the SAME examples in the same order: pass matching rows."
        )


def check_more_than_two(n: int) -> None:
    """CKA of 2 examples is always 1: centring leaves each representation one direction (x_1 - x_2), so any two agree."""
    if n < 3:
        raise ValueError(f"CKA of {n} examples is always 1 (after centring, any two representations of 2 examples agree), "
                         "so it says nothing. Use at least 3 examples (4+ for unbiased HSIC; hundreds for a useful value).")


def check_enough_for_unbiased(n: int) -> None:
    if n < 4:
        raise ValueError(f"The unbiased HSIC estimator needs at least 4 examples (it divides by n(n-3)); got n = {n}. Use more examples.")


# --------------------------------------------------------------------------- Gram matrices


def gram_linear(X):
    """Linear-kernel Gram matrix.

    X: (n, p) features, one row per example.  Returns K: (n, n) with K[i, j] = <x_i, x_j>.
    """
    Xt = check_features(X, "X")
    K = Xt @ Xt.T
    if not torch.isfinite(K).all():
        raise ValueError("X's Gram overflows float64 (its values are too large). Divide the features by a constant "
                         "first: CKA does not change.")
    return _like_input(K, X)


def median_of(values: torch.Tensor) -> torch.Tensor:
    """Median as numpy defines it (mean of the two middle values for an even count).

    torch.median returns the lower middle value instead, and torch.quantile refuses
    more than 16M elements, so we take the two middle order statistics ourselves.
    """
    flat = values.reshape(-1)
    k = flat.numel()
    lo = torch.kthvalue(flat, (k + 1) // 2).values
    hi = torch.kthvalue(flat, k // 2 + 1).values
    return (lo + hi) / 2


def gram_rbf(X, threshold: float = 1.0):
    """RBF-kernel Gram matrix with a bandwidth set by the data.

    X: (n, p) features.  Returns K: (n, n), K[i, j] = exp(-|x_i - x_j|^2 / (2 sigma^2)),
    where sigma = threshold * (median pairwise distance). The median runs over the full
    n x n matrix of squared distances, zero diagonal included, as in Kornblith's demo.
    """
    Xt = unit_scaled(check_features(X, "X"))  # the bandwidth follows the scale, so K does not change
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.integer, np.floating)):
        raise TypeError(f"threshold must be a number (a fraction of the median distance, e.g. 0.5), got {threshold!r}.")
    if not (0 < threshold < float("inf")):  # NaN fails too: NaN gave a Gram of NaN, inf one of all ones
        raise ValueError(f"threshold must be positive and finite (a fraction of the median distance), got {threshold}.")
    dot = Xt @ Xt.T
    sq_norms = torch.diagonal(dot)
    sq_distances = (sq_norms[:, None] + sq_norms[None, :] - 2 * dot).clamp_min(0)  # rounding can dip below 0
    sigma_sq = threshold**2 * median_of(sq_distances)
    if sigma_sq == 0:
        raise ValueError("X has a median pairwise distance of 0 (more than half the examples coincide): the RBF bandwidth is undefined. Use a linear kernel or different examples.")
    return _like_input(torch.exp(-sq_distances / (2 * sigma_sq)), X)


# --------------------------------------------------------------------------- centering and HSIC


def center_gram(K, unbiased: bool = False):
    """Center a Gram matrix.

    K: (n, n) symmetric Gram matrix.
    unbiased=False: H K H, the same as centering the features' columns first.
    unbiased=True:  U-centering (Song et al. 2012): zero the diagonal, subtract row/column
                    means with the (n-2) corrections, zero the diagonal again. The dot product
                    of two U-centered Grams divided by n(n-3) is the unbiased HSIC.
    Returns the centered (n, n) matrix.
    """
    Kt = check_gram(K, "K")
    n = Kt.shape[0]
    if unbiased:
        check_enough_for_unbiased(n)
        Kt = Kt.clone()
        Kt.fill_diagonal_(0)
        means = Kt.sum(0) / (n - 2)
        means = means - means.sum() / (2 * (n - 1))
        Kt = Kt - means[:, None] - means[None, :]
        Kt.fill_diagonal_(0)
    else:
        Kt = Kt - Kt.mean(0, keepdim=True)
        Kt = Kt - Kt.mean(1, keepdim=True)
    return _like_input(Kt, K)


def hsic(K, L):
    """Biased HSIC (Gretton et al. 2005), as in the paper: tr(K H L H) / (n - 1)^2.

    K, L: (n, n) Gram matrices of the same n examples.  Returns a float >= 0 (for PSD kernels).
    """
    Kt, Lt = check_gram(K, "K"), check_gram(L, "L")
    check_same_examples(Kt, Lt)
    n = Kt.shape[0]
    Kc = center_gram(Kt)
    Lc = center_gram(Lt)
    return _finite_hsic(float((Kc * Lc).sum() / (n - 1) ** 2))


def hsic_unbiased(K, L):
    """Unbiased HSIC (Song et al. 2012, Eq. 5). Needs n >= 4 and can be slightly negative.

    K, L: (n, n) Gram matrices of the same n examples. With K~, L~ the Grams with zeroed diagonals:
      [tr(K~ L~) + (1^T K~ 1)(1^T L~ 1) / ((n-1)(n-2)) - 2/(n-2) 1^T K~ L~ 1] / (n (n-3))
    """
    Kt, Lt = check_gram(K, "K"), check_gram(L, "L")
    check_same_examples(Kt, Lt)
    n = Kt.shape[0]
    check_enough_for_unbiased(n)
    Kt, Lt = Kt.clone(), Lt.clone()
    Kt.fill_diagonal_(0)
    Lt.fill_diagonal_(0)
    trace_term = (Kt * Lt).sum()  # tr(K~ L~) for symmetric matrices
    sums_term = Kt.sum() * Lt.sum() / ((n - 1) * (n - 2))
    cross_term = 2 / (n - 2) * (Kt.sum(0) @ Lt.sum(0))
    return _finite_hsic(float((trace_term + sums_term - cross_term) / (n * (n - 3))))


def _finite_hsic(value: float) -> float:
    """HSIC is not scale-invariant, so Grams near float64's limits can overflow it: say so, never return inf."""
    if not np.isfinite(value):
        raise ValueError(f"HSIC came out as {value}: the Grams' values are too large for float64. Divide the features "
                         "by a constant first (HSIC scales with it; CKA does not change).")
    return value


# --------------------------------------------------------------------------- CKA


def _normalise(cross: torch.Tensor, self_k: torch.Tensor, self_l: torch.Tensor, names=("K", "L")) -> float:
    """cross / sqrt(self_k * self_l), with a clear error when a representation has no variance."""
    for value, name in zip((self_k, self_l), names):
        if value <= 0:
            raise ValueError(
                f"{name} has zero variance after centering (every example has the same representation), "
                "so CKA is undefined (0/0). Check that this layer actually depends on the input."
            )
    return float(cross / torch.sqrt(self_k * self_l))


def cka(K, L, debiased: bool = False):
    """CKA between two Gram matrices of the same examples.

    K, L: (n, n) Gram matrices (linear, RBF, any kernel).
    debiased=False: biased HSIC, as in the paper's formula.
    debiased=True:  unbiased HSIC in numerator and denominator (Kornblith's `debiased=True`);
                    needs n >= 4. It is a ratio of unbiased estimators, so still slightly biased.
    Returns a float; 1 means the two representations are equal up to rotation and scale.
    """
    debiased = check_flag(debiased, "debiased")
    Kt, Lt = unit_scaled(check_gram(K, "K")), unit_scaled(check_gram(L, "L"))  # CKA ignores scale
    check_same_examples(Kt, Lt)
    check_more_than_two(Kt.shape[0])
    Kc = center_gram(Kt, unbiased=debiased)
    Lc = center_gram(Lt, unbiased=debiased)
    return _normalise((Kc * Lc).sum(), (Kc * Kc).sum(), (Lc * Lc).sum())


def linear_cka(X, Y, debiased: bool = False):
    """Linear CKA computed in feature space, never forming an n x n matrix.

    X: (n, p1), Y: (n, p2) features of the same n examples. Uses
    vec(Xc Xc^T) . vec(Yc Yc^T) = ||Yc^T Xc||_F^2 for column-centered Xc, Yc, which is
    cheaper than Grams when p < n. Equals cka(gram_linear(X), gram_linear(Y), debiased).
    When either input has more features than examples, the Gram form is cheaper and is used.
    """
    debiased = check_flag(debiased, "debiased")
    Xt, Yt = unit_scaled(check_features(X, "X")), unit_scaled(check_features(Y, "Y"))  # CKA ignores scale
    check_same_examples(Xt, Yt, ("X", "Y"))
    check_more_than_two(Xt.shape[0])
    if max(Xt.shape[1], Yt.shape[1]) > Xt.shape[0]:
        return cka(Xt @ Xt.T, Yt @ Yt.T, debiased=debiased)
    Xc = Xt - Xt.mean(0, keepdim=True)
    Yc = Yt - Yt.mean(0, keepdim=True)

    def dot(A, B):
        """vec(A A^T) . vec(B B^T) for centered A, B; debiased as in Kornblith's demo."""
        value = ((B.T @ A) ** 2).sum()
        if not debiased:
            return value
        n = A.shape[0]
        check_enough_for_unbiased(n)
        a, b = (A * A).sum(1), (B * B).sum(1)  # squared norms = diagonals of the Grams
        return value - n / (n - 2) * (a @ b) + a.sum() * b.sum() / ((n - 1) * (n - 2))

    return _normalise(dot(Xc, Yc), dot(Xc, Xc), dot(Yc, Yc), ("X", "Y"))


def rbf_cka(X, Y, threshold: float = 1.0, debiased: bool = False):
    """CKA with RBF kernels whose bandwidth is `threshold` x the median distance of each input.

    X: (n, p1), Y: (n, p2) features of the same n examples. Returns a float.
    """
    return cka(gram_rbf(X, threshold), gram_rbf(Y, threshold), debiased=debiased)
