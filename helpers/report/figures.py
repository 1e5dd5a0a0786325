"""Stage 4 of the report: the figures, one function each, sized for one A4 column."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from helpers.report.compute import Part, curves, matched_depth
from helpers.report.settings import ReportError, Settings
from helpers.report.text import READING_LABEL, _reading_names

FIGURE_WIDTH_IN = 3.35  # one A4 column (8.5 cm)
VECTOR_FORMATS = ("pdf", "svg")


def vector_formats(text: str) -> list:
    """--vector-figures 'pdf,svg' -> ['pdf', 'svg']; 'none' -> []. An unknown format is a ReportError."""
    names = [x.strip().lower() for x in str(text).split(",") if x.strip()]
    if names == ["none"]:
        return []
    unknown = [x for x in names if x not in VECTOR_FORMATS]
    if unknown or not names:
        what = f"unknown format(s) {unknown}" if unknown else "no format given"
        raise ReportError(f"--vector-figures {text}: {what}. Give pdf, svg or both (comma-separated), "
                          "or none for PNG only.")
    return list(dict.fromkeys(names))


def _save(fig, name: str, folder: Path, vector: tuple = VECTOR_FORMATS) -> list:
    """PNG (200 dpi), and each of the `vector` formats (PDF, SVG) with text kept as text (pdf.fonttype 42,
    svg.fonttype none). Returns the paths written."""
    import matplotlib.pyplot as plt

    paths = []
    with plt.rc_context({"svg.fonttype": "none", "pdf.fonttype": 42}):
        for ext in ("png", *vector):
            fig.savefig(folder / f"{name}.{ext}", bbox_inches="tight", dpi=200 if ext == "png" else None)
            paths.append(folder / f"{name}.{ext}")
    return paths


def heatmap_figure(part: Part, title: str, xlabel: str, ylabel: str):
    import matplotlib.pyplot as plt

    from helpers import plots

    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN - 0.6, 2.9))  # the colour bar and labels take the rest of the column
    plots.cka_heatmap(part.full, ax=ax, title=title, xlabel=xlabel, ylabel=ylabel)
    ax.title.set_fontsize(8)
    return fig


def matched_depth_figure(results: dict, settings: Settings):
    """Top: the layer of A that best matches each layer of B. Bottom: that CKA, with its interval."""
    import matplotlib.pyplot as plt

    m = matched_depth(results["parts"]["cross"])
    x = np.arange(len(m["b_layer"]))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(FIGURE_WIDTH_IN, 3.6), sharex=True)
    top.plot(x, m["a_index"], "o-", color="#0072B2", ms=3, label="all tokens")
    if "cross_head" in results["parts"]:
        top.plot(x, results["parts"]["cross_head"].full.values.argmax(axis=0), "s-", color="#009E73", ms=3,
                 label="classifier reading")
        top.legend(fontsize=6, frameon=False)
    rows = results["parts"]["cross"].full.rows
    top.set_yticks(range(len(rows)))
    top.set_yticklabels(rows, fontsize=6)
    top.set(ylabel=f"best layer of A\n({settings.model_a})", title="Matched depth", ylim=(-0.5, len(rows) - 0.5))
    errors = np.abs(np.stack([m["cka"] - m["ci_low"], m["ci_high"] - m["cka"]]))
    bottom.errorbar(x, m["cka"], yerr=None if np.isnan(errors).all() else errors, fmt="o-", color="#D55E00", ms=3, capsize=2,
                    label="all tokens")
    parts = results["parts"]
    if "cross_head" in parts:
        bottom.plot(x, parts["cross_head"].full.values.max(axis=0), "s-", color="#009E73", ms=3, label="classifier reading")
        bottom.plot(x, parts["twin_cross"].full.values.max(axis=0), "o--", color="#D55E00", alpha=0.5, ms=2,
                    label="untrained twins, all tokens")
        bottom.plot(x, parts["twin_cross_head"].full.values.max(axis=0), "s--", color="#009E73", alpha=0.5, ms=2,
                    label="untrained twins, classifier reading")
        bottom.legend(fontsize=5, frameon=False, loc="lower left")
    bottom.set(ylabel="CKA at the match", xlabel=f"layer of B ({settings.model_b})", ylim=(0, 1.02))
    bottom.set_xticks(x)
    bottom.set_xticklabels(m["b_layer"], rotation=90, fontsize=6)
    for ax in (top, bottom):
        ax.title.set_fontsize(9)
    return fig


def _label_curve(part: Part):
    """(relative depth, cka, error bars or None) of a label-CKA part."""
    v, lo, hi = part.interval()
    n = len(part.full.rows)
    err = np.abs(np.stack([v[:, 0] - lo[:, 0], hi[:, 0] - v[:, 0]]))
    return np.arange(n) / max(1, n - 1), v[:, 0], None if np.isnan(err).all() else err


def label_cka_figure(results: dict, settings: Settings):
    """CKA of each layer with the class labels on a relative-depth axis, with intervals: the classifier reading
    (top) and all tokens (bottom), each model beside its untrained twin (dashed, the floor)."""
    import matplotlib.pyplot as plt

    parts = results["parts"]
    fig, axes = plt.subplots(2, 1, figsize=(FIGURE_WIDTH_IN, 4.4), sharex=True)
    for ax, (reading, x) in zip(axes, (("head", "_head"), ("tokens", ""))):
        for w, colour, marker in (("a", "#0072B2", "o"), ("b", "#D55E00", "s")):
            depth, cka, err = _label_curve(parts[f"labels_{w}{x}"])
            name = f"{getattr(settings, f'model_{w}')} ({results['readings'][w][reading]})"
            ax.errorbar(depth, cka, yerr=err, fmt=marker + "-", ms=3, capsize=2, color=colour, label=name)
            depth, cka, _ = _label_curve(parts[f"twin_labels_{w}{x}"])
            ax.plot(depth, cka, marker + "--", ms=2, color=colour, alpha=0.5, label=f"untrained twin of {w.upper()}")
        ax.set(ylabel="CKA with class labels", ylim=(0, 1.02), title=f"Class information by depth: {READING_LABEL[reading]}")
        ax.title.set_fontsize(9)
        ax.legend(fontsize=6, frameon=False)
    axes[-1].set(xlabel="relative depth (first layer 0, last 1)")
    return fig


def receptive_field_figure(results: dict, settings: Settings):
    """The radius holding half of each layer's receptive field, both models on a relative-depth axis."""
    import matplotlib.pyplot as plt

    c = curves(results)
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN, 2.4))
    for w, colour, marker in (("a", "#0072B2", "o"), ("b", "#D55E00", "s")):
        if f"receptive_field_{w}" in c:
            curve = c[f"receptive_field_{w}"]
            ax.plot(curve["relative_depth"], curve["radius_50_px"], marker + "-", ms=3, color=colour,
                    label=getattr(settings, f"model_{w}"))
            uniform = curve["uniform_image_px"][0]
    ax.axhline(uniform, ls="--", color="0.4", lw=1, label=f"a field spread over the whole image ({uniform:.1f} px)")
    ax.set(xlabel="relative depth (first layer 0, last 1)", ylabel="50%-mass radius (px)",
           title="Effective receptive field by depth")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7, frameon=False)
    return fig


def attention_figure(att: dict, name: str):
    """Mean attention distance of every head by block, with the uniform-attention reference."""
    import matplotlib.pyplot as plt

    d = att["distances"]
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN, 2.4))
    for h in range(d.shape[1]):
        ax.plot(np.arange(d.shape[0]), d[:, h], "o", ms=3, color="#0072B2", alpha=0.8)
    ax.axhline(att["uniform"], ls="--", color="0.4", lw=1, label=f"uniform attention ({att['uniform']:.1f} px)")
    ax.set(xlabel="block", ylabel="mean attention distance (px)", title=f"{name}: attention distance per head")
    ax.set_xticks(np.arange(d.shape[0]))
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7, frameon=False)
    return fig


def figures(results: dict, settings: Settings) -> dict:
    """{file name: matplotlib figure} of every figure of the report."""
    parts, A, B = results["parts"], settings.model_a, settings.model_b
    figs = {"within_a": heatmap_figure(parts["within_a"], f"{A}: CKA between its layers", "layer", "layer"),
            "within_b": heatmap_figure(parts["within_b"], f"{B}: CKA between its layers", "layer", "layer"),
            "cross": heatmap_figure(parts["cross"], f"{A} vs {B}: {_reading_names(results, 'tokens')}", f"layer of B ({B})",
                                    f"layer of A ({A})"),
            "cross_head": heatmap_figure(parts["cross_head"], f"{A} vs {B}: {_reading_names(results, 'head')}",
                                         f"layer of B ({B})", f"layer of A ({A})"),
            "matched_depth": matched_depth_figure(results, settings)}
    if results["has_labels"]:
        figs["label_cka"] = label_cka_figure(results, settings)
    if any(f"receptive_field_{w}" in curves(results) for w in ("a", "b")):
        figs["receptive_fields"] = receptive_field_figure(results, settings)
    for w in ("a", "b"):
        if results["attention"][w] is not None:
            figs[f"attention_distance_{w}"] = attention_figure(results["attention"][w], getattr(settings, f"model_{w}"))
        if (results.get("attention_maps") or {}).get(w) is not None:
            from helpers.report.attention_maps import attention_maps_figure

            figs[f"attention_maps_{w}"] = attention_maps_figure(results["attention_maps"][w], getattr(settings, f"model_{w}"))
    return figs
