"""The check functions accept the reference functions and reject a wrong one with a clear message."""

import numpy as np
import pytest

from helpers import cka, exercises


@pytest.mark.parametrize("check, good", [
    (exercises.check_gram_linear, cka.gram_linear),
    (exercises.check_gram_rbf, cka.gram_rbf),
    (exercises.check_center_gram, lambda K: cka.center_gram(K)),
    (exercises.check_hsic, cka.hsic),
    (exercises.check_cka, lambda K, L: cka.cka(K, L)),
    (exercises.check_hsic_unbiased, cka.hsic_unbiased),
])
def test_reference_passes(check, good, capsys):
    check(good)
    assert "✔" in capsys.readouterr().out


def test_common_mistakes_are_caught():
    with pytest.raises(AssertionError, match="largest difference"):
        exercises.check_gram_linear(lambda X: X.T @ X if X.shape[0] == X.shape[1] else X @ X.T + 1)
    with pytest.raises(AssertionError, match="largest difference"):  # forgot one side of the centering
        exercises.check_center_gram(lambda K: K - K.mean(0))
    with pytest.raises(AssertionError, match="largest difference"):  # divided by n^2 instead of (n-1)^2
        exercises.check_hsic(lambda K, L: np.sum(cka.center_gram(K) * cka.center_gram(L)) / len(K) ** 2)
    with pytest.raises(AssertionError, match="largest difference"), np.errstate(all="ignore"):  # percentile(d, 0.5) != median
        exercises.check_gram_rbf(lambda X, t: np.exp(-((X[:, None] - X[None]) ** 2).sum(-1)
                                                     / (2 * t**2 * np.percentile(((X[:, None] - X[None]) ** 2).sum(-1), 0.5))))
