"""Stage 6 of the report: write the bundle (tables, figures, settings.json, METHODS.md, SUMMARY.md, CAPTIONS.md,
overview.html), and the command line that runs every stage: run() and main()."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from helpers.report import measures
from helpers.report.compute import Part, compute, curves, thread_count, torch_threads
from helpers.report.distributed import barrier, init_from_environment, world
from helpers.report.figures import _save, figures
from helpers.report.loading import load_inputs
from helpers.report.settings import ReportError, Settings, settings_from_args
from helpers.report.text import methods_text, settings_record, summary_sentences


def _fmt(x) -> str:
    return "" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{float(x):.12g}"


def _write_csv(path: Path, header: list, rows: list) -> Path:
    import csv

    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def write_matrix_tables(part: Part, folder: Path) -> list:
    """<name>.csv (one row per layer pair: cka, ci_low, ci_high) and <name>.npz (the same as arrays)."""
    values, low, high = part.interval()
    rows, cols = part.full.rows, part.full.cols
    csv_rows = [[r, c, _fmt(values[i, j]), _fmt(low[i, j]), _fmt(high[i, j])]
                for i, r in enumerate(rows) for j, c in enumerate(cols)]
    paths = [_write_csv(folder / f"{part.name}.csv", ["row_layer", "col_layer", "cka", "ci_low", "ci_high"], csv_rows)]
    np.savez(folder / f"{part.name}.npz", values=values, ci_low=low, ci_high=high, subsample_values=part.sub_values,
             rows=np.array(rows, dtype=str), cols=np.array(cols, dtype=str))
    return paths + [folder / f"{part.name}.npz"]


def write_curve_tables(name: str, columns: dict, folder: Path) -> list:
    """A curve (dict of equal-length columns) as <name>.csv and <name>.npz."""
    header = list(columns)
    n = len(next(iter(columns.values())))
    rows = [[_fmt(columns[h][i]) if not isinstance(columns[h][i], str) else columns[h][i] for h in header] for i in range(n)]
    _write_csv(folder / f"{name}.csv", header, rows)
    np.savez(folder / f"{name}.npz", **{h: np.asarray(columns[h]) for h in header})
    return [folder / f"{name}.csv", folder / f"{name}.npz"]


OUTPUT_NAMES = tuple(f"{prefix}{name}{x}" for prefix in ("", "twin_", "ref_") for x in ("", "_head")
                     for name in ("cross", "labels_a", "labels_b", "stats_a", "stats_b")) + (
    "within_a", "within_b", "matched_depth", "label_cka", "label_cka_a", "label_cka_b", "cross_head",
    "attention_distance_a", "attention_distance_b", "attention_maps_a", "attention_maps_b", "high_norm_audit",
    "receptive_fields", "receptive_field_a", "receptive_field_b",
    "measure_claims") + tuple(f"measure_{key}" for key in measures.KEYS)


def remove_old_outputs(out: Path) -> None:
    """Delete figures and tables an earlier run wrote (only the report's own file names), so none is left stale."""
    for folder in (out / "figures", out / "tables"):
        for path in folder.glob("*"):
            if path.stem in OUTPUT_NAMES and path.suffix in (".png", ".pdf", ".svg", ".csv", ".npz"):
                path.unlink()


def write_measure_tables(measured: dict, cka_judgements: dict, folder: Path) -> list:
    """measure_claims.csv (each conclusion and reading under each measure: effect, noise, twins, verdict) and
    measure_<key>.npz for each other measure (every matrix it was judged on, with its subsample values)."""
    if not measures.keys_of(measured):
        return []
    paths = [_write_csv(folder / "measure_claims.csv", ["claim", "reading", "measure", "effect", "noise", "untrained_twins",
                                                        "verdict"],
                        [[_fmt(x) if isinstance(x, float) else ("" if x is None else x) for x in row]
                         for row in measures.claims_rows(measured, cka_judgements)])]
    for key in measures.keys_of(measured):
        arrays = {}
        for name, part in measured[key]["parts"].items():
            arrays.update({name: part.full.values, f"{name}_subsample_values": part.sub_values,
                           f"{name}_rows": np.array(part.full.rows, dtype=str), f"{name}_cols": np.array(part.full.cols, dtype=str)})
        np.savez(folder / f"measure_{key}.npz", **arrays)
        paths.append(folder / f"measure_{key}.npz")
    return paths


def write_bundle(results: dict, settings: Settings) -> list:
    """Write figures/, tables/, settings.json, METHODS.md and SUMMARY.md into settings.out; returns the paths."""
    import matplotlib.pyplot as plt

    out = Path(settings.out)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    remove_old_outputs(out)
    from helpers.report.controls import judged, readings_table

    measured = results.get("measures", {})  # the conclusions under the other measures (helpers.report.measures)
    cka_judgements = judged(results["parts"], results["has_labels"], settings.level)
    written = []
    for part in results["parts"].values():
        written += write_matrix_tables(part, out / "tables")
    for name, columns in curves(results).items():
        written += write_curve_tables(name, columns, out / "tables")
    names = []
    for name, fig in figures(results, settings).items():
        written += _save(fig, name, out / "figures")
        names.append(name)
        plt.close(fig)
    (out / "settings.json").write_text(json.dumps(settings_record(results, settings), indent=2, default=str))
    (out / "METHODS.md").write_text(methods_text(results, settings) + measures.methods_paragraph(measured))
    written += write_measure_tables(measured, cka_judgements, out / "tables")
    from helpers.report.pages import captions_markdown, overview_html

    lines = summary_sentences(results, settings) + measures.sentences(measured, cka_judgements, settings.model_a,
                                                                      settings.model_b)
    summary = "\n".join(f"- {line}" for line in lines)
    table = readings_table(results["parts"], results["has_labels"], settings.model_a, settings.model_b, settings.level)
    across = "" if not measures.keys_of(measured) else (
        f"\n## Each conclusion under each measure\n\nEffect against its noise (max of the {settings.level:.0%} interval "
        "half-width and the reference spread), the untrained twins, and the verdict; CKA on all images, the other "
        f"measures on the first {measured['n_images']} (METHODS.md).\n\n{measures.table(measured, cka_judgements)}\n")
    (out / "SUMMARY.md").write_text(f"# Summary: {settings.model_a} vs {settings.model_b}\n\n{summary}\n\n"
                                    f"## Both readings beside their untrained twins\n\nValues ± half-widths of "
                                    f"{settings.level:.0%} intervals from the disjoint subsamples.\n\n{table}\n{across}")
    (out / "CAPTIONS.md").write_text(captions_markdown(results, settings, names) + measures.caption(measured))
    (out / "overview.html").write_text(overview_html(results, settings, lines, table, names))
    return written + [out / name for name in ("settings.json", "METHODS.md", "SUMMARY.md", "CAPTIONS.md", "overview.html")]


def run(settings: Settings, progress: bool = True) -> dict:
    """Load, compute (resuming from <out>/cache) and write the bundle; returns the results, with 'files'.

    In every process of an initialised torch.distributed group (torchrun): the CKA parts are sharded and summed
    (helpers.report.distributed), process 0 writes the bundle and the others write nothing ('files' is empty);
    every process returns when the bundle is written."""
    start = time.time()
    here = world()
    measures.measure_keys(settings.measures)  # an unknown name stops before anything is loaded
    model_a, model_b, images, plan = load_inputs(settings)
    measures.check(settings)
    results = compute(settings, model_a, model_b, images, plan, progress=progress)
    if here.main:  # the other measures: one forward pass of --measure-count images, on process 0 only
        try:
            with torch_threads(thread_count(settings, model_a, model_b)):
                results["measures"] = measures.compute_measures(settings, model_a, model_b, images, results["controls"])
        except (ValueError, TypeError) as error:
            raise ReportError(f"The other measures (--measures {settings.measures}): {error}") from None
    results["files"] = write_bundle(results, settings) if here.main else []
    barrier(here)
    results["seconds"] = round(time.time() - start, 1)
    return results


def main(argv=None) -> int:
    """The command line (python -m helpers.report --help). Returns the exit status: 0, or 2 on bad input."""
    settings = settings_from_args(argv)
    started = init_from_environment()  # under torchrun: one process per GPU (or CPU process), see distributed.py
    main_process = world().main
    try:
        results = run(settings)
    except ReportError as error:  # printed by every process (torchrun shows each one's), so none exits silently
        where = f" (process {world().rank})" if world().distributed else ""
        print(f"helpers.report{where}: error: {error}", file=sys.stderr)
        return 2
    finally:
        if started:
            import torch.distributed as dist

            dist.destroy_process_group()
    if not main_process:  # the others write and print nothing
        return 0
    loaded = [line for line in results["log"] if "loaded" in line]
    if loaded:
        print(f"Resumed: {len(loaded)} finished part(s) loaded from {Path(settings.out) / 'cache'}, not recomputed.")
    for line in results["log"]:
        if "recomputed" in line:
            print(f"Note: {line}")
    print(f"Wrote {len(results['files'])} files to {settings.out} in {results['seconds']} s "
          "(overview.html, figures/, tables/, settings.json, METHODS.md, SUMMARY.md, CAPTIONS.md).")
    print((Path(settings.out) / "SUMMARY.md").read_text())
    return 0
