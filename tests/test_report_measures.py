"""helpers.report --measures: the report's conclusions recomputed and judged under other similarity measures.

The checks of the default bundle's measures (CKA and Procrustes) use tests/test_report.py's bundle, made once."""

import numpy as np
import pytest

from helpers import measures as reference
from helpers import report
from helpers.report import measures


def test_unknown_measure_lists_the_valid_ones(tmp_path, capsys):
    assert report.main(["--measures", "cka,cosine", "--out", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert "cosine" in error and all(name in error for name in measures.KEYS)
    assert measures.measure_keys("CKA, procrustes,procrustes") == ["procrustes"]
    assert measures.measure_keys("cka") == []


@pytest.mark.parametrize("width", [3, 40, 500])
def test_each_measure_from_grams_equals_helpers_measures(width):
    rng = np.random.default_rng(width)
    X = rng.normal(size=(120, width)) + 2.0
    Y = X[:, :min(width, 30)] @ rng.normal(size=(min(width, 30), 20)) + rng.normal(size=(120, 20))
    prepared = {key: [measures.prepare(Z @ Z.T, key) for Z in (X, Y)] for key in ("procrustes", "rsa", "knn")}
    got = {key: measures.similarity(*p, key) for key, p in prepared.items()}
    assert got["procrustes"] == pytest.approx(reference.procrustes_similarity(X, Y), abs=1e-9)
    assert got["rsa"] == pytest.approx(reference.rsa(X, Y), abs=1e-9)
    assert got["knn"] == pytest.approx(reference.mutual_knn(X, Y, measures.K_NEIGHBOURS), abs=1e-12)


def test_too_few_images_for_the_measures(tmp_path, capsys):
    """--measure-count below 100 is refused; a set of fewer images is reported on CKA alone, with a sentence saying so."""
    assert report.main(["--measure-count", "60", "--out", str(tmp_path)]) == 2
    assert "--measure-count 60" in capsys.readouterr().err
    settings = report.Settings(count=60, out=str(tmp_path))
    measured = measures.compute_measures(settings, None, None, [None] * 60, {})
    assert measures.keys_of(measured) == [] and measures.table(measured, {}) == ""
    assert measures.sentences(measured, {}, "A", "B") == [
        "The other measures (Procrustes) were not computed: they need at least 100 images and the set has 60."]


def test_knn_with_the_labels_is_the_share_of_neighbours_of_the_same_class():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), 30)
    K_labels = measures.label_gram(labels, np.arange(4))
    clustered = np.eye(4)[labels] * 10 + rng.normal(size=(120, 4)) * 0.1 + 1  # neighbours all of the same class
    noise = rng.normal(size=(120, 8)) + 1  # neighbours of any class: about a quarter share it
    same = measures.prepare_labels(K_labels, "knn")
    assert measures.similarity(measures.prepare(clustered @ clustered.T, "knn"), same, "knn") == 1.0
    assert 0.1 < measures.similarity(measures.prepare(noise @ noise.T, "knn"), same, "knn") < 0.4
