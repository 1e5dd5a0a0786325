"""Figure helpers: heatmaps and saving figures for reports."""

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from helpers import plots  # noqa: E402
from helpers.minibatch_cka import MinibatchCKA  # noqa: E402


def test_save_figure_writes_png_and_pdf(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    path = plots.save_figure(fig, "a_figure", folder=tmp_path / "figs")
    assert path == tmp_path / "figs" / "a_figure.png"
    assert path.read_bytes()[:4] == b"\x89PNG" and (tmp_path / "figs" / "a_figure.pdf").read_bytes()[:4] == b"%PDF"
    for bad in ("sub/name", "name.png", ""):
        with pytest.raises(ValueError, match="plain file name"):
            plots.save_figure(fig, bad, folder=tmp_path)
    plt.close(fig)


def test_cka_heatmap_labels_rows_and_columns():
    acc = MinibatchCKA(["a0", "a1"], ["b0", "b1", "b2"])
    rng = np.random.default_rng(0)
    acc.update([rng.normal(size=(16, 5)), rng.normal(size=(16, 3))], [rng.normal(size=(16, 4)) for _ in range(3)])
    fig, ax = plt.subplots()
    plots.cka_heatmap(acc.result({}), ax=ax)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["b0", "b1", "b2"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a0", "a1"]
    plt.close(fig)
