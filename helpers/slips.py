"""The usual wrong answers to the exercises, so that a check can name the slip (01-04's core, and 07-17's).

For each exercise, a short list of Slips: a name, the wrong implementation as a learner would write it,
and the message (what went wrong, and the fix). When a learner's function fails its check,
`name_the_slip` runs every wrong implementation on the same inputs and returns the first one whose
answers match the learner's. The notebook checks (helpers.exercises) and the grader's feedback
(helpers.grade.cases) both read this one table.

    slip = name_the_slip("hsic", [((K, L), yours)])   # -> Slip("divides by n²", ...) or None
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from helpers import cka as reference


@dataclass(frozen=True)
class Slip:
    name: str            # short, the same words in the notebook check and the grader's feedback
    wrong: Callable      # the wrong implementation, called like the exercise's function
    message: str         # what went wrong and the fix, one or two sentences
    rtol: float = 1e-6   # how close to the wrong answer, relative to its largest entry (looser for float32)

    def matches(self, args: tuple, yours) -> bool:
        """True when `yours` is what this wrong implementation returns on `args`."""
        try:
            with np.errstate(all="ignore"):
                wrong = np.asarray(self.wrong(*args), dtype=float)
            yours = np.asarray(yours, dtype=float)
        except Exception:  # noqa: BLE001 - a wrong variant that cannot run on these inputs does not match
            return False
        if yours.shape != wrong.shape or not np.array_equal(np.isnan(yours), np.isnan(wrong)):
            return False
        yours, wrong = np.nan_to_num(yours), np.nan_to_num(wrong)
        # rounding errors scale with the largest entry, so the tolerance does too (an entry near 0 keeps it)
        return bool(np.abs(yours - wrong).max(initial=0) <= self.rtol * np.abs(wrong).max(initial=0) + 1e-8)


def name_the_slip(exercise: str, calls: list):
    """The first known slip of `exercise` that gives the learner's answer on every call, else None.

    calls: [(args, yours), ...], the inputs the check used and what the learner's function returned.
    Call it only for an answer that failed its check: a slip is a wrong answer, never a second right one.
    """
    for slip in SLIPS.get(exercise, []):
        if calls and all(slip.matches(args, yours) for args, yours in calls):
            return slip
    return None


# -- the pieces the wrong variants are built from (all in float64 unless the slip is the dtype)

def _H(n, divisor=None):
    """The (n, n) centring matrix I - 11ᵀ / divisor (divisor n is right; n - 1 is a slip)."""
    return np.eye(n) - np.ones((n, n)) / (divisor or n)


def _centre(K, divisor=None):
    """H K H."""
    return _H(len(K), divisor) @ K @ _H(len(K), divisor)


def _float32(fn):
    """fn run on float32 copies of its array arguments, every sum in float32."""
    return lambda *args: fn(*(np.asarray(a, dtype=np.float32) if isinstance(a, np.ndarray) else a for a in args))


def _sq_distances(X):
    dot = X @ X.T
    return np.maximum(np.diag(dot)[:, None] + np.diag(dot)[None, :] - 2 * dot, 0)


def _rbf(X, threshold, sigma_sq):
    return np.exp(-_sq_distances(X) / (2 * sigma_sq))


def _hsic_unbiased(K, L, keep_diagonal=False, cross_sign=-1.0, cross_factor=2.0):
    """The unbiased HSIC with one of its usual slips switched on."""
    n = len(K)
    K, L = np.array(K, dtype=float), np.array(L, dtype=float)
    if not keep_diagonal:
        np.fill_diagonal(K, 0)
        np.fill_diagonal(L, 0)
    trace = (K * L).sum()
    sums = K.sum() * L.sum() / ((n - 1) * (n - 2))
    cross = cross_factor / (n - 2) * (K.sum(0) @ L.sum(0))
    return float((trace + sums + cross_sign * cross) / (n * (n - 3)))


def _cka_from(hsic_fn, square_root=True):
    def cka(K, L):
        ratio = hsic_fn(K, L) / (hsic_fn(K, K) * hsic_fn(L, L)) ** (0.5 if square_root else 1.0)
        return float(ratio)
    return cka


def _minibatch(X, Y, batch_size, hsic_fn=reference.hsic_unbiased, square_root=True):
    """Minibatch CKA with its HSIC (or its square root) changed."""
    cross = self_x = self_y = 0.0
    for start in range(0, len(X), batch_size):
        K, L = X[start:start + batch_size] @ X[start:start + batch_size].T, Y[start:start + batch_size] @ Y[start:start + batch_size].T
        cross, self_x, self_y = cross + hsic_fn(K, L), self_x + hsic_fn(K, K), self_y + hsic_fn(L, L)
    return cross / (self_x * self_y) ** (0.5 if square_root else 1.0)


def _mean_of_batch_ckas(X, Y, batch_size):
    return float(np.mean([reference.linear_cka(X[s:s + batch_size], Y[s:s + batch_size], debiased=True)
                          for s in range(0, len(X), batch_size)]))


_ARRAY = "returns an array, not a number"
_FLOAT32 = "a float32 sum"
_FLOAT32_FIX = ("the answer is off by float32 rounding: your arrays are float32 (a .float() or astype(np.float32)?). "
                "Compute in float64, e.g. np.asarray(K, dtype=np.float64).")


SLIPS = {
    "gram_linear": [
        Slip("Xᵀ X for X Xᵀ", lambda X: X.T @ X,
             "your Gram is (features × features): Xᵀ X compares neurons. The Gram compares examples: X @ X.T, shape (n, n)."),
        Slip("centred features", lambda X: (X - X.mean(0)) @ (X - X.mean(0)).T,
             "you centred X before the product; the Gram is the plain X @ X.T (centring comes in notebook 02)."),
        Slip("divided by the width", lambda X: X @ X.T / X.shape[1],
             "you divided by the number of features; the Gram matrix is the plain X @ X.T, no division."),
        Slip("divided by n", lambda X: X @ X.T / X.shape[0],
             "you divided by the number of examples; the Gram matrix is the plain X @ X.T, no division."),
    ],
    "gram_rbf": [
        Slip("percentile 0.5, not the median", lambda X, t: _rbf(X, t, t**2 * np.percentile(_sq_distances(X), 0.5)),
             "np.percentile(d, 0.5) is the 0.5th percentile (here 0, hence the nan), not the median: use np.median(d) "
             "(or np.percentile(d, 50))."),
        Slip("threshold not squared", lambda X, t: _rbf(X, t, t * np.median(_sq_distances(X))),
             "threshold scales sigma, so sigma² = threshold² × median(squared distances): square the threshold."),
        Slip("median squared again", lambda X, t: _rbf(X, t, (t * np.median(_sq_distances(X))) ** 2),
             "the median of the SQUARED distances is already sigma² / threshold²: use sigma² = threshold² × median, "
             "without squaring the median again."),
        Slip("no factor 2", lambda X, t: np.exp(-_sq_distances(X) / (t**2 * np.median(_sq_distances(X)))),
             "the RBF kernel is exp(−d² / (2 sigma²)): you left out the 2."),
        Slip("median without the diagonal",
             lambda X, t: _rbf(X, t, t**2 * np.median(_sq_distances(X)[~np.eye(len(X), dtype=bool)])),
             "your median leaves out the zeros on the diagonal; the course (like Kornblith's demo) takes the median "
             "over the full n × n matrix of squared distances, diagonal included."),
    ],
    "center_gram": [
        Slip("columns only", lambda K: K - K.mean(0, keepdims=True),
             "you subtracted only the column means (that is H K); centre both sides, H K H: subtract the row means too."),
        Slip("rows only", lambda K: K - K.mean(1, keepdims=True),
             "you subtracted only the row means (that is K H); centre both sides, H K H: subtract the column means too."),
        Slip("1/(n−1) in the centring matrix", lambda K: _centre(K, len(K) - 1),
             "your centring matrix uses 1/(n−1); H = I − 11ᵀ/n (the n−1 belongs in HSIC, not in H)."),
        Slip("one overall mean", lambda K: K - K.mean(),
             "you subtracted one overall mean; H K H subtracts each row's and each column's mean (and adds the overall "
             "mean back)."),
        Slip("overall mean not added back", lambda K: K - K.mean(0, keepdims=True) - K.mean(1, keepdims=True),
             "you subtracted the row and the column means but did not add the overall mean back: "
             "H K H = K − column means − row means + overall mean."),
        Slip(_FLOAT32, _float32(lambda K: _centre(K)), _FLOAT32_FIX, rtol=1e-3),
    ],
    "hsic": [
        Slip("divides by n²", lambda K, L: np.sum(_centre(K) * _centre(L)) / len(K) ** 2,
             "your HSIC divides by n²; the course's biased HSIC divides by (n−1)²."),
        Slip("no centring", lambda K, L: np.sum(K * L) / (len(K) - 1) ** 2,
             "your HSIC does not centre: HSIC = tr(K H L H) / (n−1)², with H = I − 11ᵀ/n."),
        Slip("H only once", lambda K, L: np.trace(K @ _H(len(K)) @ L) / (len(K) - 1) ** 2,
             "you used H once, tr(K H L); HSIC needs it on both sides, tr(K H L H) / (n−1)²."),
        Slip("no division", lambda K, L: np.sum(_centre(K) * _centre(L)),
             "you forgot to divide: the biased HSIC is tr(K H L H) / (n−1)²."),
        Slip("1/(n−1) in the centring matrix",
             lambda K, L: np.trace(K @ _H(len(K), len(K) - 1) @ L @ _H(len(K), len(K) - 1))
             / (len(K) - 1) ** 2,
             "your centring matrix uses 1/(n−1); H = I − 11ᵀ/n (the n−1 belongs only in the division)."),
        Slip(_ARRAY, lambda K, L: np.atleast_1d(reference.hsic(K, L)),
             "your HSIC returns an array; return one number, e.g. float(np.trace(...) / (n - 1) ** 2)."),
        Slip(_FLOAT32, _float32(lambda K, L: np.sum(_centre(K) * _centre(L)) / (len(K) - 1) ** 2), _FLOAT32_FIX, rtol=1e-3),
    ],
    "cka": [
        Slip("no square root", _cka_from(reference.hsic, square_root=False),
             "you divided by HSIC(K, K) · HSIC(L, L); CKA divides by its square root: sqrt(HSIC(K, K) · HSIC(L, L))."),
        Slip("no centring", lambda K, L: float(np.sum(K * L) / np.sqrt(np.sum(K * K) * np.sum(L * L))),
             "your CKA does not centre the Grams; centre both first (H K H and H L H), then normalise."),
        Slip("columns only", lambda K, L: _cka_from(lambda A, B: np.sum((A - A.mean(0)) * (B - B.mean(0))))(K, L),
             "you centred only one side of each Gram (K − K.mean(0)); centre both sides, H K H."),
        Slip("HSIC, not normalised", lambda K, L: reference.hsic(K, L),
             "you returned HSIC(K, L); CKA divides it by sqrt(HSIC(K, K) · HSIC(L, L))."),
        Slip("the unbiased HSIC", _cka_from(reference.hsic_unbiased),
             "you used the unbiased HSIC; this exercise asks for CKA with notebook 02's biased HSIC "
             "(debiased CKA comes in notebook 04)."),
        Slip(_ARRAY, lambda K, L: np.atleast_1d(reference.cka(K, L)),
             "your CKA returns an array; return one number, e.g. float(...)."),
        Slip(_FLOAT32, _float32(lambda K, L: np.sum(_centre(K) * _centre(L))
                                / np.sqrt(np.sum(_centre(K) ** 2) * np.sum(_centre(L) ** 2))), _FLOAT32_FIX, rtol=1e-3),
    ],
    "hsic_unbiased": [
        Slip("the diagonal kept", lambda K, L: _hsic_unbiased(K, L, keep_diagonal=True),
             "your unbiased HSIC keeps the diagonals of K and L; set both to 0 first (np.fill_diagonal(K, 0) on a copy)."),
        Slip("cross term added", lambda K, L: _hsic_unbiased(K, L, cross_sign=+1.0),
             "the cross term 2/(n−2) · 1ᵀ K L 1 is subtracted, not added."),
        Slip("cross term without the 2", lambda K, L: _hsic_unbiased(K, L, cross_factor=1.0),
             "the cross term is 2/(n−2) · 1ᵀ K L 1: you left out the 2."),
        Slip("the biased HSIC", lambda K, L: reference.hsic(K, L),
             "you returned the biased HSIC of notebook 02; the unbiased one zeroes the diagonals and divides by n(n−3) "
             "(the formula above the exercise)."),
        Slip(_ARRAY, lambda K, L: np.atleast_1d(reference.hsic_unbiased(K, L)),
             "your unbiased HSIC returns an array; return one number, e.g. float(...)."),
    ],
    "minibatch_cka": [
        Slip("a CKA per batch, averaged", _mean_of_batch_ckas,
             "you averaged one CKA per batch; minibatch CKA sums each HSIC over the batches first, then normalises once."),
        Slip("the biased HSIC", lambda X, Y, b: _minibatch(X, Y, b, hsic_fn=reference.hsic),
             "you summed the biased HSIC; minibatch CKA needs the unbiased HSIC in each batch (exercise 4.1)."),
        Slip("no square root", lambda X, Y, b: _minibatch(X, Y, b, square_root=False),
             "you divided by the product of the two sums; divide by its square root."),
        Slip("one CKA over all examples", lambda X, Y, b: reference.linear_cka(X, Y, debiased=True),
             "you computed one CKA over all the examples; the exercise sums the HSICs over batches of batch_size."),
    ],    # notebooks 07-14
    "matched_depth": [
        Slip("best row of each column", lambda v: np.asarray(v).argmax(axis=0) / (np.asarray(v).shape[1] - 1),
             "you took each column's best row (axis=0); take each ROW's best column, values.argmax(axis=1), "
             "one depth per ResNet layer."),
        Slip("divided by the number of columns", lambda v: np.asarray(v).argmax(axis=1) / np.asarray(v).shape[1],
             "divide the column index by (columns − 1), so that the last ViT block is depth 1."),
        Slip("index, not depth", lambda v: np.asarray(v).argmax(axis=1),
             "you returned the column index; divide it by (columns − 1) to get a relative depth between 0 and 1."),
    ],
    "my_mass_radius": [
        Slip("centre as (x, y)", lambda erf, c, f=0.5: _mass_radius(erf, (c[1], c[0]), f),
             "centre is (row, col): measure rows from centre[0] and columns from centre[1]."),
        Slip("share of pixels, not of mass", lambda erf, c, f=0.5: _mass_radius(np.ones_like(erf, dtype=float), c, f),
             "you counted pixels; add up the map's values (its mass) until `fraction` of the total is inside."),
    ],
    "own_patch_rank": [
        Slip("columns, not rows", lambda m: (np.asarray(m) > np.diag(m)[None, :]).sum(axis=0),
             "row t of the map is token t; compare each ROW with its own diagonal entry: (maps > own[:, None]).sum(axis=1)."),
        Slip("own patch counted", lambda m: (np.asarray(m) >= np.diag(m)[:, None]).sum(axis=1),
             "with >= the own patch counts itself; count only the patches scoring strictly higher (>)."),
    ],
    "ridge_weights": [
        Slip("dual form without Φᵀ", lambda P, T, lam: np.linalg.solve(P @ P.T + lam * np.eye(len(P)), T),
             "(ΦΦᵀ + λI)⁻¹ T gives one weight per example; multiply by Φᵀ on the left to get the (p, C) weights."),
        Slip("no lambda", lambda P, T, lam: np.linalg.pinv(P) @ T,
             "that is least squares without the penalty; ridge solves (ΦᵀΦ + λI) W = ΦᵀT."),
    ],
    # notebooks 16-17
    "cka_without_highest": [
        Slip("dropped from X only", lambda X, Y, k: _without_highest(X, Y, k, both=False),
             "you dropped only X's highest-norm images; drop the union of X's k and Y's k."),
        Slip("norms from 0, not from the mean", lambda X, Y, k: _without_highest(X, Y, k, centred=False),
             "measure each image's norm from the mean image, np.linalg.norm(X - X.mean(0), axis=1), not from 0."),
        Slip("the biased CKA", lambda X, Y, k: _without_highest(X, Y, k, debiased=False),
             "use the debiased CKA on the images you keep: linear_cka(X[keep], Y[keep], debiased=True)."),
    ],
    "procrustes_similarity": [
        Slip("not centred", lambda X, Y: _procrustes(X, Y, centre=False),
             "centre each column first (X - X.mean(axis=0)), then scale to unit Frobenius norm."),
        Slip("not scaled to unit norm", lambda X, Y: _procrustes(X, Y, scale=False),
             "divide each centred matrix by its Frobenius norm (np.linalg.norm(X)) before the SVD."),
        Slip("trace, not nuclear norm", lambda X, Y: _procrustes(X, Y, nuclear=False),
             "take the nuclear norm of X̃ᵀỸ (the sum of its singular values), not its trace."),
    ],
    "gap_to_reference": [
        Slip("model minus reference", lambda m, r: np.asarray(m, float) - np.asarray(r, float),
             "the sign is reversed: the gap is reference − model (positive when the model is further from the reference)."),
        Slip("absolute gap", lambda m, r: np.abs(np.asarray(r, float) - np.asarray(m, float)),
             "keep the sign: the gap is reference − model, without abs()."),
    ],
}


def _mass_radius(erf, centre, fraction):
    from helpers.receptive_fields import mass_radius

    return mass_radius(erf, tuple(centre), fraction)


def _without_highest(X, Y, k, both=True, centred=True, debiased=True):
    """Exercise 16.1 with one of its slips switched on."""
    X, Y = np.asarray(X, dtype=float), np.asarray(Y, dtype=float)
    drop = set()
    for F in (X, Y) if both else (X,):
        norms = np.linalg.norm(F - F.mean(0) if centred else F, axis=1)
        drop |= set(np.argsort(-norms, kind="stable")[:k].tolist())
    keep = [i for i in range(len(X)) if i not in drop]
    return float(reference.linear_cka(X[keep], Y[keep], debiased=debiased))


def _procrustes(X, Y, centre=True, scale=True, nuclear=True):
    """Exercise 17.1 with one of its slips switched on."""
    X, Y = np.asarray(X, dtype=float), np.asarray(Y, dtype=float)
    if centre:
        X, Y = X - X.mean(0), Y - Y.mean(0)
    if scale:
        X, Y = X / np.linalg.norm(X), Y / np.linalg.norm(Y)
    product = X.T @ Y
    return float(np.linalg.svd(product, compute_uv=False).sum() if nuclear else np.trace(product))
