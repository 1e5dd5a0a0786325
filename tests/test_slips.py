"""The exercise checks name each usual slip (helpers.slips), and never call a right answer a slip.

Each slip is written here again, the way a learner would write it (not the table's own code), and the
check must name it. Right answers (the notebooks' own solutions, and other formulas for the same thing)
must pass."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import cka, exercises, slips
from helpers.grade import cases as grade_cases

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

CHECKS = {"gram_linear": exercises.check_gram_linear, "gram_rbf": exercises.check_gram_rbf,
          "center_gram": exercises.check_center_gram, "hsic": exercises.check_hsic, "cka": exercises.check_cka,
          "hsic_unbiased": exercises.check_hsic_unbiased, "minibatch_cka": exercises.check_minibatch_cka,
          "matched_depth": exercises.check_matched_depth, "my_mass_radius": exercises.check_mass_radius,
          "own_patch_rank": exercises.check_own_patch_rank, "ridge_weights": exercises.check_ridge_weights,
          "gap_to_reference": exercises.check_gap_to_reference,
          "cka_without_highest": exercises.check_cka_without_highest,
          "procrustes_similarity": exercises.check_procrustes_similarity}
CORE = ["gram_linear", "gram_rbf", "center_gram", "hsic", "cka", "hsic_unbiased", "minibatch_cka"]


def _H(n, divisor=None):
    return np.eye(n) - 1 / (divisor or n)


def _sq(X):
    return ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)


def _unbiased(K, L, zero_diagonal=True, sign=-1, two=2):
    n = K.shape[0]
    Kt, Lt = K.copy(), L.copy()
    if zero_diagonal:
        np.fill_diagonal(Kt, 0)
        np.fill_diagonal(Lt, 0)
    return float(((Kt * Lt).sum() + Kt.sum() * Lt.sum() / ((n - 1) * (n - 2)) + sign * two / (n - 2) * (Kt.sum(0) @ Lt.sum(0)))
                 / (n * (n - 3)))


def _minibatch(X, Y, b, hsic_fn=_unbiased, root=0.5):
    cross = sx = sy = 0.0
    for s in range(0, len(X), b):
        K, L = X[s:s + b] @ X[s:s + b].T, Y[s:s + b] @ Y[s:s + b].T
        cross, sx, sy = cross + hsic_fn(K, L), sx + hsic_fn(K, K), sy + hsic_fn(L, L)
    return cross / (sx * sy) ** root


def _biased(K, L):
    n = len(K)
    return np.trace(K @ _H(n) @ L @ _H(n)) / (n - 1) ** 2


def _torch32_hsic(K, L):
    Kt, Lt = torch.tensor(K).float(), torch.tensor(L).float()
    Kc = Kt - Kt.mean(0) - Kt.mean(1, keepdim=True) + Kt.mean()
    Lc = Lt - Lt.mean(0) - Lt.mean(1, keepdim=True) + Lt.mean()
    return (Kc * Lc).sum() / (len(K) - 1) ** 2


# (exercise, slip name, the slip as a learner writes it)
AS_A_LEARNER_WRITES_IT = [
    ("gram_linear", "Xᵀ X for X Xᵀ", lambda X: np.dot(X.T, X)),
    ("gram_linear", "centred features", lambda X: (X - np.mean(X, axis=0)) @ (X - np.mean(X, axis=0)).T),
    ("gram_linear", "divided by the width", lambda X: np.einsum("ip,jp->ij", X, X) / X.shape[1]),
    ("gram_linear", "divided by n", lambda X: X @ X.T / len(X)),
    ("gram_rbf", "percentile 0.5, not the median", lambda X, t: np.exp(-_sq(X) / (2 * t**2 * np.percentile(_sq(X), 0.5)))),
    ("gram_rbf", "threshold not squared", lambda X, t: np.exp(-_sq(X) / (2 * t * np.median(_sq(X))))),
    ("gram_rbf", "median squared again", lambda X, t: np.exp(-_sq(X) / (2 * (t * np.median(_sq(X))) ** 2))),
    ("gram_rbf", "no factor 2", lambda X, t: np.exp(-_sq(X) / (t**2 * np.median(_sq(X))))),
    ("gram_rbf", "median without the diagonal",
     lambda X, t: np.exp(-_sq(X) / (2 * t**2 * np.median(_sq(X)[np.triu_indices(len(X), 1)])))),
    ("center_gram", "columns only", lambda K: K - K.mean(axis=0)),
    ("center_gram", "rows only", lambda K: (K.T - K.mean(axis=1)).T),
    ("center_gram", "1/(n−1) in the centring matrix", lambda K: _H(len(K), len(K) - 1) @ K @ _H(len(K), len(K) - 1)),
    ("center_gram", "one overall mean", lambda K: K - np.mean(K)),
    ("center_gram", "overall mean not added back", lambda K: K - K.mean(0)[None, :] - K.mean(1)[:, None]),
    ("center_gram", "a float32 sum",
     lambda K: (lambda Kf: Kf - Kf.mean(0) - Kf.mean(1, keepdims=True) + Kf.mean())(K.astype(np.float32))),
    ("hsic", "divides by n²", lambda K, L: float(np.trace(K @ _H(len(K)) @ L @ _H(len(K))) / len(K) ** 2)),
    ("hsic", "no centring", lambda K, L: float(np.trace(K @ L) / (len(K) - 1) ** 2)),
    ("hsic", "H only once", lambda K, L: float(np.trace(K @ _H(len(K)) @ L) / (len(K) - 1) ** 2)),
    ("hsic", "no division", lambda K, L: float(np.trace(K @ _H(len(K)) @ L @ _H(len(K))))),
    ("hsic", "1/(n−1) in the centring matrix",
     lambda K, L: np.trace(K @ _H(len(K), len(K) - 1) @ L @ _H(len(K), len(K) - 1)) / (len(K) - 1) ** 2),
    ("hsic", "returns an array, not a number", lambda K, L: np.array([_biased(K, L)])),
    ("hsic", "a float32 sum", lambda K, L: float(_torch32_hsic(K, L))),
    ("cka", "no square root", lambda K, L: _biased(K, L) / (_biased(K, K) * _biased(L, L))),
    ("cka", "no centring", lambda K, L: np.trace(K @ L) / np.sqrt(np.trace(K @ K) * np.trace(L @ L))),
    ("cka", "columns only", lambda K, L: (lambda Kc, Lc: (Kc * Lc).sum() / np.sqrt((Kc**2).sum() * (Lc**2).sum()))(
        K - K.mean(0), L - L.mean(0))),
    ("cka", "HSIC, not normalised", _biased),
    ("cka", "the unbiased HSIC", lambda K, L: _unbiased(K, L) / np.sqrt(_unbiased(K, K) * _unbiased(L, L))),
    ("cka", "returns an array, not a number",
     lambda K, L: np.array([[_biased(K, L) / np.sqrt(_biased(K, K) * _biased(L, L))]]).ravel()),
    ("cka", "a float32 sum", lambda K, L: float(_torch32_hsic(K, L) / torch.sqrt(_torch32_hsic(K, K) * _torch32_hsic(L, L)))),
    ("hsic_unbiased", "the diagonal kept", lambda K, L: _unbiased(K, L, zero_diagonal=False)),
    ("hsic_unbiased", "cross term added", lambda K, L: _unbiased(K, L, sign=+1)),
    ("hsic_unbiased", "cross term without the 2", lambda K, L: _unbiased(K, L, two=1)),
    ("hsic_unbiased", "the biased HSIC", _biased),
    ("hsic_unbiased", "returns an array, not a number", lambda K, L: np.atleast_1d(_unbiased(K, L))),
    ("minibatch_cka", "a CKA per batch, averaged",
     lambda X, Y, b: np.mean([_minibatch(X[s:s + b], Y[s:s + b], b) for s in range(0, len(X), b)])),
    ("minibatch_cka", "the biased HSIC", lambda X, Y, b: _minibatch(X, Y, b, hsic_fn=_biased)),
    ("minibatch_cka", "no square root", lambda X, Y, b: _minibatch(X, Y, b, root=1.0)),
    ("minibatch_cka", "one CKA over all examples", lambda X, Y, b: _minibatch(X, Y, len(X))),
    ("matched_depth", "best row of each column", lambda v: np.argmax(v, axis=0) / (np.shape(v)[1] - 1)),
    ("matched_depth", "divided by the number of columns", lambda v: np.array([row.argmax() / len(row) for row in v])),
    ("matched_depth", "index, not depth", lambda v: np.asarray(v).argmax(1)),
    ("my_mass_radius", "centre as (x, y)", lambda erf, c, f=0.5: _radius(erf, c[::-1], f)),
    ("my_mass_radius", "share of pixels, not of mass", lambda erf, c, f=0.5: _radius(np.ones(np.shape(erf)), c, f)),
    ("own_patch_rank", "columns, not rows", lambda m: (m > m.diagonal()).sum(axis=0)),
    ("own_patch_rank", "own patch counted", lambda m: np.array([(row >= row[i]).sum() for i, row in enumerate(m)])),
    ("ridge_weights", "dual form without Φᵀ", lambda P, T, lam: np.linalg.inv(P @ P.T + lam * np.eye(len(P))) @ T),
    ("ridge_weights", "no lambda", lambda P, T, lam: np.linalg.lstsq(P, T, rcond=None)[0]),
    ("cka_without_highest", "dropped from X only", lambda X, Y, k: _kept_cka(X, Y, np.argsort(-np.linalg.norm(X - X.mean(0), axis=1))[:k])),
    ("cka_without_highest", "norms from 0, not from the mean", lambda X, Y, k: _kept_cka(
        X, Y, np.union1d(np.argsort(-np.linalg.norm(X, axis=1))[:k], np.argsort(-np.linalg.norm(Y, axis=1))[:k]))),
    ("cka_without_highest", "the biased CKA", lambda X, Y, k: _kept_cka(X, Y, np.union1d(
        np.argsort(-np.linalg.norm(X - X.mean(0), axis=1))[:k], np.argsort(-np.linalg.norm(Y - Y.mean(0), axis=1))[:k]), False)),
    ("procrustes_similarity", "not centred", lambda X, Y: np.linalg.norm((X / np.linalg.norm(X)).T @ (Y / np.linalg.norm(Y)), "nuc")),
    ("procrustes_similarity", "not scaled to unit norm",
     lambda X, Y: np.linalg.norm((X - X.mean(0)).T @ (Y - Y.mean(0)), "nuc")),
    ("procrustes_similarity", "trace, not nuclear norm", lambda X, Y: np.trace(
        ((X - X.mean(0)) / np.linalg.norm(X - X.mean(0))).T @ ((Y - Y.mean(0)) / np.linalg.norm(Y - Y.mean(0))))),
    ("gap_to_reference", "model minus reference", lambda m, r: np.subtract(m, r)),
    ("gap_to_reference", "absolute gap", lambda m, r: abs(np.subtract(r, m))),
]


def _kept_cka(X, Y, drop, debiased=True):
    keep = np.setdiff1d(np.arange(len(X)), drop)
    return cka.linear_cka(X[keep], Y[keep], debiased=debiased)


def _radius(erf, centre, fraction):
    """The mass radius written out, as a learner would."""
    rows, cols = np.indices(np.shape(erf))
    distance = np.hypot(rows - centre[0], cols - centre[1]).ravel()
    order = np.argsort(distance, kind="stable")
    share = np.cumsum(np.ravel(erf)[order]) / np.sum(erf)
    return float(distance[order][np.searchsorted(share, fraction - 1e-12)])


def test_every_slip_in_the_table_is_tried_here():
    tried = {(exercise, name) for exercise, name, _ in AS_A_LEARNER_WRITES_IT}
    table = {(exercise, slip.name) for exercise, table_slips in slips.SLIPS.items() for slip in table_slips}
    assert tried == table
    assert all(len(slips.SLIPS[exercise]) >= 3 for exercise in CORE)
    assert set(slips.SLIPS) == set(CHECKS)


@pytest.mark.parametrize("exercise, name, learner", AS_A_LEARNER_WRITES_IT,
                         ids=[f"{e}: {n}" for e, n, _ in AS_A_LEARNER_WRITES_IT])
def test_the_check_names_the_slip(exercise, name, learner):
    slip = next(s for s in slips.SLIPS[exercise] if s.name == name)
    with pytest.raises(AssertionError) as failure, np.errstate(all="ignore"):
        CHECKS[exercise](learner)
    assert slip.message in str(failure.value)


def test_an_unknown_mistake_keeps_the_numbers():
    with pytest.raises(AssertionError, match="largest difference") as failure:
        exercises.check_hsic(lambda K, L: cka.hsic(K, L) + 0.01)
    assert not any(s.message in str(failure.value) for s in slips.SLIPS["hsic"])
    with pytest.raises(AssertionError, match="returned None"):
        exercises.check_gram_linear(lambda X: None)


def _solutions(notebook: str) -> dict:
    """The functions the notebook's solution cells define, run in one namespace (in notebook order)."""
    namespace = {"np": np, "torch": torch}
    cells = json.loads((NOTEBOOKS / notebook).read_text(encoding="utf-8"))["cells"]
    for cell in cells:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and "### BEGIN SOLUTION" in source:
            exec(source, namespace)  # noqa: S102 - the course's own solution code
    return namespace


@pytest.mark.parametrize("notebook, exercise", [
    ("01_gram_matrices.ipynb", "gram_linear"), ("01_gram_matrices.ipynb", "gram_rbf"),
    ("02_hsic.ipynb", "center_gram"), ("02_hsic.ipynb", "hsic"), ("03_cka.ipynb", "cka"),
    ("04_minibatch_cka.ipynb", "hsic_unbiased"), ("04_minibatch_cka.ipynb", "minibatch_cka")])
def test_the_notebooks_own_solutions_pass(notebook, exercise, capsys):
    CHECKS[exercise](_solutions(notebook)[exercise])
    assert "✔" in capsys.readouterr().out


def _u_centred_hsic(K, L):
    n = len(K)
    return float(np.sum(cka.center_gram(K, unbiased=True) * cka.center_gram(L, unbiased=True)) / (n * (n - 3)))


# Right answers written another way: each must pass, so none can be called a slip.
EQUIVALENT = [
    ("gram_linear", lambda X: np.einsum("ip,jp->ij", X, X)),
    ("gram_linear", lambda X: torch.from_numpy(X) @ torch.from_numpy(X).T),
    ("gram_rbf", lambda X, t: np.exp(-_sq(X) / (2 * (t * np.sqrt(np.median(_sq(X)))) ** 2))),
    ("center_gram", lambda K: _H(len(K)) @ K @ _H(len(K))),
    ("center_gram", lambda K: K - K.mean(0) - K.mean(1, keepdims=True) + K.mean()),
    ("hsic", lambda K, L: np.trace(_H(len(K)) @ K @ _H(len(K)) @ L) / (len(K) - 1) ** 2),  # centring one Gram is enough
    ("hsic", lambda K, L: np.array(_biased(K, L))),  # a 0-d array is a number
    ("cka", lambda K, L: (lambda Kc, Lc: np.sum(Kc * Lc) / np.linalg.norm(Kc) / np.linalg.norm(Lc))(
        _H(len(K)) @ K @ _H(len(K)), _H(len(K)) @ L @ _H(len(K)))),
    ("cka", lambda K, L: float(np.trace(K @ _H(len(K)) @ L @ _H(len(K))) / len(K) ** 2
                               / np.sqrt(np.trace(K @ _H(len(K)) @ K @ _H(len(K))) / len(K) ** 2
                                         * np.trace(L @ _H(len(K)) @ L @ _H(len(K))) / len(K) ** 2))),  # n² cancels
    ("hsic_unbiased", _u_centred_hsic),
    ("minibatch_cka", lambda X, Y, b: _minibatch(X, Y, b, hsic_fn=_u_centred_hsic)),
    ("matched_depth", lambda v: np.array([np.argmax(row) for row in v]) / (np.shape(v)[1] - 1)),
    ("ridge_weights", lambda P, T, lam: P.T @ np.linalg.solve(P @ P.T + lam * np.eye(len(P)), T)),  # the dual form
    ("gap_to_reference", lambda m, r: -(np.asarray(m) - np.asarray(r))),
]


@pytest.mark.parametrize("exercise, right", EQUIVALENT, ids=[e for e, _ in EQUIVALENT])
def test_an_equivalent_formula_passes(exercise, right, capsys):
    CHECKS[exercise](right)
    assert "✔" in capsys.readouterr().out


def test_no_slip_matches_the_reference_on_the_graders_inputs():
    """On the grader's random inputs each slip fails (float32 rounding may not), is named wherever it fails,
    and the reference passes every case."""
    references = {"gram_linear": cka.gram_linear, "gram_rbf": cka.gram_rbf, "center_gram": cka.center_gram,
                  "hsic": cka.hsic, "cka": cka.cka, "hsic_unbiased": cka.hsic_unbiased,
                  "minibatch_cka": exercises.minibatch_reference, "matched_depth": exercises.reference_matched_depth,
                  "my_mass_radius": lambda erf, c, f: _radius(erf, c, f), "own_patch_rank": lambda m: (m > m.diagonal()[:, None]).sum(1),
                  "ridge_weights": exercises.reference_ridge, "gap_to_reference": exercises.reference_gap,
                  "cka_without_highest": _reference_without_highest, "procrustes_similarity": _reference_procrustes}
    rng = np.random.default_rng(42)
    for exercise, table_slips in slips.SLIPS.items():
        graded = grade_cases.EXERCISES[exercise]
        cases = graded.cases(rng)
        for slip in table_slips:
            named = []
            for case in cases:
                with np.errstate(all="ignore"):
                    answer = np.asarray(slip.wrong(*case.args), dtype=float)
                try:
                    graded.judge(case, {"": answer})
                except AssertionError as failure:
                    named.append(slip.message in str(failure))
            # float32 rounding may stay inside the tolerance on some draws: then it is no mistake there
            assert named or slip.name == "a float32 sum", f"{exercise}: {slip.name} passes the grader"
            assert all(named), f"{exercise}: {slip.name} is not named in the grader's feedback"
        for case in cases:
            graded.judge(case, {"": np.asarray(references[exercise](*case.args), dtype=float)})


def _reference_without_highest(X, Y, k):
    from helpers.report.audit import cka_without_highest
    return cka_without_highest(X, Y, k)


def _reference_procrustes(X, Y):
    from helpers.measures import procrustes_similarity
    return procrustes_similarity(X, Y)
