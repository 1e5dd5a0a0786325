"""Stage 6 of the report: write the bundle (tables, figures, settings.json, verdicts.json, METHODS.md, SUMMARY.md,
CAPTIONS.md, overview.html), and the command line that runs every stage: run() and main()."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from helpers.report import measures
from helpers.report.compute import Part, compute, curves, thread_count, torch_threads
from helpers.report.distributed import barrier, init_from_environment, world
from helpers.report.figures import _save, figures, vector_formats
from helpers.report.loading import load_inputs
from helpers.report.settings import ReportError, Settings, settings_from_args
from helpers.report.text import methods_text, settings_record


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
    "measure_claims", "verdicts", "floor_draws") + tuple(f"measure_{key}" for key in measures.KEYS)


def remove_old_outputs(out: Path) -> None:
    """Delete figures and tables an earlier run wrote (only the report's own file names), so none is left stale."""
    for folder in (out / "figures", out / "tables"):
        for path in folder.glob("*"):
            if path.stem in OUTPUT_NAMES and path.suffix in (".png", ".pdf", ".svg", ".csv", ".npz"):
                path.unlink()


def _cells(row: list) -> list:
    return [_fmt(x) if isinstance(x, float) else ("" if x is None else x) for x in row]


def write_measure_tables(measured: dict, cka_judgements: dict, folder: Path) -> list:
    """tables/verdicts.csv (each conclusion and reading under each measure: effect, noise, spread rule, the untrained
    draws' count, seeds and range, the shuffled-image null, verdict), measure_claims.csv (the same, written when other
    measures were computed) and measure_<key>.npz for each other measure (every matrix it was judged on, with its
    subsample values)."""
    rows = [_cells(row) for row in measures.claims_rows(measured, cka_judgements)]
    paths = [_write_csv(folder / "verdicts.csv", measures.CLAIMS_HEADER, rows)]
    if not measures.keys_of(measured):
        return paths
    paths.append(_write_csv(folder / "measure_claims.csv", measures.CLAIMS_HEADER, rows))
    for key in measures.keys_of(measured):
        arrays = {}
        for name, part in measured[key]["parts"].items():
            arrays.update({name: part.full.values, f"{name}_subsample_values": part.sub_values,
                           f"{name}_rows": np.array(part.full.rows, dtype=str), f"{name}_cols": np.array(part.full.cols, dtype=str)})
        np.savez(folder / f"measure_{key}.npz", **arrays)
        paths.append(folder / f"measure_{key}.npz")
    return paths


def write_floor_table(floor: dict | None, folder: Path) -> list:
    """tables/floor_draws.npz: each part's values on every untrained draw (draws, rows, cols), the draws' seeds, and
    the shuffled-image null of R2/R3 (null_R2_head, ...); nothing without a floor."""
    if not floor:
        return []
    arrays = {name: np.stack(values) for name, values in floor["values"].items()}
    arrays.update({f"null_{k}": np.asarray(v) for k, v in floor["null"].items()})
    np.savez(folder / "floor_draws.npz", seeds=np.asarray(floor["seeds"]), **arrays)
    return [folder / "floor_draws.npz"]


def read_floor_table(path) -> dict:
    """The floor dict (helpers.report.floor.floor_and_null's) back from tables/floor_draws.npz."""
    with np.load(path) as f:
        seeds = [int(s) for s in f["seeds"]]
        return {"seeds": seeds, "values": {k: list(f[k]) for k in f.files if k != "seeds" and not k.startswith("null_")},
                "null": {k[5:]: [float(x) for x in f[k]] for k in f.files if k.startswith("null_")},
                "shuffles": max((len(f[k]) for k in f.files if k.startswith("null_")), default=0)}


def verdicts_record(measured: dict, cka_judgements: dict, floor: dict | None) -> dict:
    """verdicts.json: every verdict (helpers.verdicts' fields, 6 decimals) per claim, reading and measure, with the
    seeds of the untrained draws and the number of shuffles of the null."""
    from dataclasses import asdict

    from helpers.verdicts import rounded

    judged = [("CKA", cka_judgements)] + [(measures.KEYS[k], measured[k]["judgements"]) for k in measures.keys_of(measured)]
    return {"floor_seeds": (floor or {}).get("seeds", []), "floor_draws": len((floor or {}).get("seeds", [])),
            "null_shuffles": (floor or {}).get("shuffles", 0),
            "verdicts": [{"claim": claim, "reading": r, "measure": name, **rounded(asdict(v))}
                         for name, judgements in judged for claim, by_reading in judgements.items()
                         for r, v in by_reading.items()]}


def write_bundle(results: dict, settings: Settings) -> list:
    """Write figures/, tables/, settings.json, verdicts.json, METHODS.md, SUMMARY.md, CAPTIONS.md and overview.html
    into settings.out; returns the paths."""
    import matplotlib.pyplot as plt

    out = Path(settings.out)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    remove_old_outputs(out)
    from helpers.report.controls import judged, readings_table
    from helpers.report.text import short_section, summary_sections

    measured = results.get("measures", {})  # the conclusions under the other measures (helpers.report.measures)
    floor = results.get("floor")
    cka_judgements = judged(results["parts"], results["has_labels"], settings.level, floor)
    written = []
    for part in results["parts"].values():
        written += write_matrix_tables(part, out / "tables")
    for name, columns in curves(results).items():
        written += write_curve_tables(name, columns, out / "tables")
    names, vector = [], vector_formats(settings.vector_figures)
    for name, fig in figures(results, settings).items():
        written += _save(fig, name, out / "figures", vector)
        names.append(name)
        plt.close(fig)
    (out / "settings.json").write_text(json.dumps(settings_record(results, settings), indent=2, default=str))
    (out / "verdicts.json").write_text(json.dumps(verdicts_record(measured, cka_judgements, floor), indent=1,
                                                  ensure_ascii=False) + "\n")
    (out / "METHODS.md").write_text(methods_text(results, settings) + measures.methods_paragraph(measured))
    written += write_measure_tables(measured, cka_judgements, out / "tables") + write_floor_table(floor, out / "tables")
    from helpers.report.pages import captions_markdown, overview_html

    sections = summary_sections(results, settings)
    first = list(sections)[0]
    sections[first] = sections[first] + measures.sentences(measured, cka_judgements, settings.model_a, settings.model_b)
    lines = [line for part in sections.values() for line in part]
    short = short_section(results, settings, cka_judgements, measured)
    table = readings_table(results["parts"], results["has_labels"], settings.model_a, settings.model_b, settings.level, floor)
    across = "" if not measures.keys_of(measured) else (
        f"\n## Each conclusion under each measure\n\nEffect against its noise (max of the {settings.level:.0%} interval "
        "half-width and the reference spread), the untrained draws, and the verdict; CKA on all images, the other "
        f"measures on the first {measured['n_images']} images (METHODS.md).\n\n{measures.table(measured, cka_judgements)}\n")
    detail = "".join(f"## {heading}\n\n" + "\n".join(f"- {line}" for line in part) + "\n\n" for heading, part in sections.items())
    (out / "SUMMARY.md").write_text(f"# Summary: {settings.model_a} vs {settings.model_b}\n\n{short}\n\n{detail}"
                                    f"## Both readings beside their untrained twins\n\nValues ± half-widths of "
                                    f"{settings.level:.0%} intervals from the disjoint subsamples; the untrained twins are "
                                    f"the first untrained draw, the next column the range over all draws.\n\n{table}\n{across}")
    (out / "CAPTIONS.md").write_text(captions_markdown(results, settings, names) + measures.caption(measured))
    (out / "overview.html").write_text(overview_html(results, settings, [short] + lines, table, names))
    return written + [out / name for name in ("settings.json", "verdicts.json", "METHODS.md", "SUMMARY.md", "CAPTIONS.md",
                                              "overview.html")]


def check_out(out) -> Path:
    """The --out folder, created; a ReportError that says what to do when it is a file or cannot be written to."""
    if not str(out).strip():  # Path("") is the current folder: the report would land among whatever is there
        raise ReportError("--out is empty. Give a folder for the report (it is created if it does not exist), "
                          "e.g. --out outputs/my_report.")
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ReportError(f"--out {out} is a file, not a folder. Give a folder for the report (it is created "
                          "if it does not exist), e.g. --out outputs/my_report.")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".helpers-report-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise ReportError(f"--out {out}: the report cannot write there ({error.strerror or error}). Give a folder you "
                          "can write to, e.g. --out outputs/my_report.") from None
    return path


def run(settings: Settings, progress: bool = True) -> dict:
    """Load, compute (resuming from <out>/cache) and write the bundle; returns the results, with 'files' and
    'settings' (the settings used: --repeats fitted to the number of images, helpers.report.loading.fitted_repeats).

    In every process of an initialised torch.distributed group (torchrun): the CKA parts are sharded and summed
    (helpers.report.distributed), process 0 writes the bundle and the others write nothing ('files' is empty);
    every process returns when the bundle is written. The untrained draws, the null and the other measures run
    on process 0 only."""
    from dataclasses import replace

    from helpers.report.floor import floor_and_null
    from helpers.report.loading import fitted_repeats

    start = time.time()
    here = world()
    if here.main:
        check_out(settings.out)  # a bad --out stops before anything is loaded
    measures.measure_keys(settings.measures)  # an unknown name stops before anything is loaded
    vector_formats(settings.vector_figures)  # an unknown figure format stops before anything is loaded
    model_a, model_b, images, plan = load_inputs(settings)
    asked = settings.repeats
    settings = replace(settings, repeats=fitted_repeats(asked, len(images)))  # a small set: fewer subsamples, or none
    measures.check(settings)
    results = compute(settings, model_a, model_b, images, plan, progress=progress)
    results["repeats_asked"] = asked
    if here.main:  # the floor over untrained draws, the null, the other measures: process 0 only
        try:
            with torch_threads(thread_count(settings, model_a, model_b)):
                results["floor"] = floor_and_null(settings, model_a, model_b, images, results)
                results["measures"] = measures.compute_measures(settings, model_a, model_b, images, results["controls"],
                                                                cache=Path(settings.out) / "cache", log=results["log"])
        except (ValueError, TypeError) as error:
            raise ReportError(f"The untrained draws or the other measures (--measures {settings.measures}): {error}") from None
    results["settings"] = settings
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
          "(overview.html, figures/, tables/, settings.json, verdicts.json, METHODS.md, SUMMARY.md, CAPTIONS.md).")
    print((Path(settings.out) / "SUMMARY.md").read_text())
    return 0
