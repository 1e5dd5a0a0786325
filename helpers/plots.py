"""One figure style for the whole course, and heatmaps labelled the way the paper draws them."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

CMAP = "magma"  # perceptually uniform, readable in greyscale print


def use_style() -> None:
    """Apply the course style: fixed figure size, readable fonts, PNG output at a modest dpi."""
    plt.rcParams.update({
        "figure.figsize": (6.0, 4.0),
        "figure.dpi": 80,
        "savefig.dpi": 150,
        "font.size": 10,
        "axes.titlesize": 11,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "image.cmap": CMAP,
    })


def save_figure(fig, name: str, folder=None):
    """Save `fig` as outputs/figures/<name>.png and .pdf (for reports); returns the PNG's path.

    name: a file name without extension, e.g. "07_resnet_vs_vit_lite". folder: where to save
    (default: the course's git-ignored outputs/figures).
    """
    from pathlib import Path
    from helpers.course import OUTPUT_DIR

    if not hasattr(fig, "savefig"):
        raise TypeError(f"save_figure needs a matplotlib Figure (fig, ax = plt.subplots()), got {type(fig).__name__}.")
    if not isinstance(name, str) or not name or any(c in name for c in "/\\") or Path(name).suffix:
        raise ValueError(f"Give a plain file name without folder or extension (got '{name}'); PNG and PDF are both written.")
    folder = Path(folder) if folder is not None else OUTPUT_DIR / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    fig.savefig(folder / f"{name}.pdf", bbox_inches="tight")
    fig.savefig(folder / f"{name}.png", bbox_inches="tight")
    return folder / f"{name}.png"


def heatmap(values, rows=None, cols=None, ax=None, title="", xlabel="", ylabel="",
            vmin=0.0, vmax=1.0, colorbar=True, max_ticks=40, cbar_label="CKA"):
    """Draw a matrix with its origin at the bottom-left, like the paper's CKA figures.

    values: (R, C) array; rows / cols: optional tick labels for its rows (y axis) and columns (x axis).
    cbar_label: the colour bar's label ("CKA" by default; e.g. "K[i, j]" for a Gram matrix).
    Returns the matplotlib Axes.
    """
    values = np.asarray(values)
    if values.ndim != 2 or 0 in values.shape:
        raise ValueError(f"values must be a non-empty (rows, columns) matrix, got shape {values.shape}. "
                         "For one row of numbers, pass values[None].")
    for labels, size, axis in ((rows, values.shape[0], "rows"), (cols, values.shape[1], "cols")):
        if labels is not None and len(labels) != size:
            raise ValueError(f"{len(labels)} labels for the {axis} of a matrix of shape {values.shape}: give one label "
                             f"per {'row' if axis == 'rows' else 'column'}, or None.")
    if ax is None:
        _, ax = plt.subplots()
    image = ax.imshow(values, origin="lower", cmap=CMAP, vmin=vmin, vmax=vmax, aspect="auto",
                      interpolation="nearest")
    for axis_labels, set_ticks, set_labels, size in ((cols, ax.set_xticks, ax.set_xticklabels, values.shape[1]),
                                                    (rows, ax.set_yticks, ax.set_yticklabels, values.shape[0])):
        if axis_labels is not None:
            step = max(1, int(np.ceil(size / max_ticks)))
            ticks = list(range(0, size, step))
            set_ticks(ticks)
            set_labels([str(axis_labels[t]) for t in ticks], fontsize=6 if size > 24 else 7)
    if cols is not None:
        plt.setp(ax.get_xticklabels(), rotation=90)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label=cbar_label)
    return ax


def cka_heatmap(result, ax=None, title=None, xlabel="model B layer", ylabel="model A layer", **kwargs):
    """Heatmap of a helpers.minibatch_cka.CKAMatrix with its layer names on the axes."""
    if not all(hasattr(result, a) for a in ("values", "rows", "cols", "n_examples", "n_batches")):
        raise TypeError(f"cka_heatmap draws a CKAMatrix (what cka_matrix returns), got {type(result).__name__}. "
                        "For a plain array use plots.heatmap(values, rows, cols).")
    if title is None:
        title = f"CKA ({result.n_examples} images, {result.n_batches} batches)"
    return heatmap(result.values, result.rows, result.cols, ax=ax, title=title,
                   xlabel=xlabel, ylabel=ylabel, **kwargs)
