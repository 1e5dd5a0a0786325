"""CAPTIONS.md (one caption per figure: what is plotted, on how many images, which intervals, which reading) and
overview.html (one page with the key figures and the summary) of the report bundle."""

from __future__ import annotations

import html

from helpers.report.figures import vector_formats


def captions(results: dict, settings, figure_names) -> dict:
    """{figure name: caption} for every figure written."""
    n, R = results["n_images"], settings.repeats
    A, B, pol = settings.model_a, settings.model_b, results["readings"]
    iv = (f"Error bars: {settings.level:.0%} intervals from {R} disjoint subsamples of {n // R} images (image sampling "
          "only, not a second training run)." if R else "No intervals (--repeats 0).")
    images = f"{n} images of '{results['images_name']}'"
    tokens = f"all-token reading (A: {pol['a']['tokens']}, B: {pol['b']['tokens']})"
    head = f"classifier reading (A: {pol['a']['head']}, B: {pol['b']['head']})"
    text = {
        "within_a": f"Linear CKA between every pair of recorded layers of {A} ({settings.policy_a} tokens), {images}.",
        "within_b": f"Linear CKA between every pair of recorded layers of {B} ({settings.policy_b} tokens), {images}.",
        "cross": f"Linear CKA between each layer of {A} (rows) and each layer of {B} (columns), {tokens}, {images}. "
                 "Intervals per cell are in tables/cross.csv; the untrained twins' matrix in tables/twin_cross.csv.",
        "cross_head": f"As the cross-model figure, under the {head}, {images}; the twins' matrix in tables/twin_cross_head.csv.",
        "matched_depth": f"Top: for each layer of {B}, the layer of {A} with the highest CKA, under both readings. Bottom: "
                         f"that CKA, with the untrained twins' (dashed: the first of the untrained draws that make the floor), {images}. {iv} (all-token curve)",
        "label_cka": f"CKA of each layer with the one-hot class labels on a relative-depth axis, {images}: top the "
                     f"{head}, bottom the {tokens}; dashed, each model's untrained twin (the same architecture with random weights; the first of the untrained draws). {iv}",
        "receptive_fields": f"Radius (px) around the centre of mass holding half of each layer's effective receptive field "
                            f"(|d centre output / d input|, channels summed: a variant of Raghu et al.'s per-channel reading), first {min(n, 32)} images; one estimate, "
                            "no interval. Dashed: a field spread evenly over the whole image.",
    }
    for w, name in (("a", A), ("b", B)):
        att = results["attention"][w]
        if att is not None:
            text[f"attention_distance_{w}"] = (f"Mean attention distance (px) of every head of every block of {name}, "
                                               f"patch tokens only, first {att['n_images']} images; one estimate, no "
                                               "interval. Dashed: a head attending uniformly.")
        maps = (results.get("attention_maps") or {}).get(w)
        if maps is not None:
            heads, last = maps["first"].shape[1], maps["blocks"] - 1
            text[f"attention_maps_{w}"] = (
                f"Attention of {name}'s {maps['query']} over its patch grid, on {len(maps['indices'])} example images "
                f"(images {', '.join(str(int(i)) for i in maps['indices'])} of '{results['images_name']}': "
                f"{'the first image of each of the first classes' if results['has_labels'] else 'the first images'}), in block 0 (the first) and block {last} (the last): per row the image as the model saw "
                f"it, the mean over the {heads} heads, then each head, drawn over the grey image; one colour scale per "
                "row (0 to its largest value). Raw softmax probabilities on the patch keys (the rest of the row goes "
                "to the prefix tokens); one estimate, no interval: a few images illustrate, they do not measure. "
                f"Every value: tables/attention_maps_{w}.csv.")
    return {k: v for k, v in text.items() if k in figure_names}


def captions_markdown(results: dict, settings, figure_names) -> str:
    formats = ", ".join(["PNG"] + [f.upper() for f in vector_formats(settings.vector_figures)])  # what was written
    lines = [f"# Figure captions: {settings.model_a} vs {settings.model_b}", ""]
    for name, caption in captions(results, settings, figure_names).items():
        lines += [f"**figures/{name}** ({formats}). {caption}", ""]
    return "\n".join(lines)


KEY_FIGURES = ("label_cka", "matched_depth", "cross_head", "cross", "attention_maps_a", "attention_maps_b")


def overview_html(results: dict, settings, summary_lines: list, table_markdown: str, figure_names) -> str:
    """One page: the key figures with their captions, the summary, and the table of both readings."""
    caps = captions(results, settings, figure_names)
    figs = "".join(f'<figure><img src="figures/{n}.png" width="320"><figcaption>{html.escape(caps.get(n, ""))}'
                   "</figcaption></figure>" for n in KEY_FIGURES if n in figure_names)
    items = "".join(f"<li>{html.escape(line)}</li>" for line in summary_lines)
    rows = [r for r in table_markdown.splitlines() if not r.startswith("|---")]
    cells = lambda row, tag: "".join(f"<{tag}>{html.escape(c.strip())}</{tag}>" for c in row.strip("|").split("|"))  # noqa: E731
    table = "<table>" + "".join(f"<tr>{cells(r, 'th' if i == 0 else 'td')}</tr>" for i, r in enumerate(rows)) + "</table>"
    title = html.escape(f"{settings.model_a} vs {settings.model_b}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title><style>body{{font-family:sans-serif;"
            "max-width:60em;margin:auto}figure{display:inline-block;width:320px;vertical-align:top;margin:0.5em}"
            "figcaption{font-size:0.75em}td,th{font-size:0.8em;padding:0 0.4em}li{font-size:0.85em}</style></head>"
            f"<body><h1>{title}</h1>{figs}<h2>Summary</h2><ul>{items}</ul><h2>Both readings beside their untrained "
            f"twins</h2>{table}<p>Methods and references: METHODS.md; every number: tables/; captions: CAPTIONS.md.</p>"
            "</body></html>")
