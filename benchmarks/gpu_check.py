"""The course's check on a machine with a CUDA GPU: every lite notebook 05-17 on the GPU, then the full-track rehearsal on it.

    python benchmarks/gpu_check.py                 # about 5-10 minutes on one GPU; prints a table
    python benchmarks/gpu_check.py --only 11 12    # some notebooks
    python benchmarks/gpu_check.py --no-rehearsal
    python benchmarks/gpu_check.py --autocast-only  # only the autocast comparison (about a minute)
    python benchmarks/gpu_check.py --fixes-only     # only the checks of issue 41's fixes (about two minutes)

Each notebook runs top to bottom in its own kernel with COURSE_TRACK=lite and COURSE_DEVICE=cuda
(the tests pin the CPU, so this is the only run of the lite track on a GPU). A last cell added to
each copy reports the kernel's peak GPU memory (torch.cuda.max_memory_allocated) and peak host RSS
(getrusage ru_maxrss). The executed copies go to --out (default outputs/gpu_check/), the table to
its table.md. Then the full-track rehearsal (tests/test_full_track_rehearsal.py: random weights,
real code path, a few photographs) runs with COURSE_REHEARSAL_DEVICE=cuda. With 2 GPUs or more, the
report runs once on one GPU and once with torchrun on two (helpers.report.distributed), and the largest
difference between their tables is printed with both times (skipped with fewer GPUs).

First, the autocast comparison: the same cka_matrix with the forward passes in float32
(amp=False), under float16 autocast (the default on CUDA) and under bfloat16 autocast, printing
the largest difference of any CKA value from float32 and the seconds each took: the lite ViT and
ResNet (trained, bundled) on 2,048 'shapes' images, and timm's ViT-B/16 and ResNet-50 (random
weights: no download) on 256 JPEG files read through helpers.loading (threads, pinned memory,
non-blocking copies, the disk cache).

Then the checks of issue 41's fixes (fixes_check): a float16 overflow on CUDA runs the batch again in float32
(helpers.autocast.guarded), the report's fingerprint differs between float16 and float32 runs, and the CPU tests
that reproduce the audit's findings (forced autocast, image-cache races, the two-process report on image files, the
process group's timeout, the highest-norm audit's reuse of Grams) pass on this machine too. Notebook 15 (its check:
cka_matrix(amp=False) against the float32 joint pass) and notebook 12 (its maps' time) run among the notebooks.

Needs a CUDA GPU; exits with a message on a machine without one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORT = ("import json, resource, torch\n"
          "print('GPU_CHECK', json.dumps({'gpu_mib': torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None,\n"
          "                               'rss_mib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))")


def run_notebook(path: Path, out: Path, env: dict, timeout: int) -> dict:
    """Execute a copy of `path` with a reporting cell appended; returns seconds, peaks and the error if any."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(REPORT))
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    os.environ.update(env)  # the kernel inherits this process's environment
    start, error = time.time(), ""
    try:
        client.execute()
    except CellExecutionError as failure:
        error = f"{failure.ename}: {str(failure.evalue)[:200]}"
    seconds = time.time() - start
    nbformat.write(nb, out / path.name)
    report = [line[10:] for c in nb.cells for o in c.get("outputs", []) for line in o.get("text", "").splitlines()
              if line.startswith("GPU_CHECK ")]
    return {"seconds": seconds, "error": error, **(json.loads(report[-1]) if report else {"gpu_mib": None, "rss_mib": None})}


def autocast_check() -> str:
    """CKA with forward passes in float32 vs float16 vs bfloat16 autocast on CUDA; a markdown table."""
    import tempfile

    import timm
    import torch

    sys.path.insert(0, str(ROOT / "tests"))
    from jpeg_folder import write_jpeg_folder

    from helpers import compare, data, gram_cache, models

    folder = write_jpeg_folder(Path(tempfile.mkdtemp()) / "jpegs", 256)
    cases = {"lite ViT x lite ResNet, 2,048 shapes": (models.load("lite-vit"), models.load("lite-resnet"),
                                                     data.image_set("shapes", count=2048)),
             "ViT-B/16 x ResNet-50 (random weights), 256 JPEGs": (
                 timm.create_model("vit_base_patch16_224", pretrained=False).cuda(),
                 timm.create_model("resnet50", pretrained=False).cuda(), data.image_set(str(folder)))}
    lines = ["| models, images | autocast | max abs CKA difference from float32 | seconds |", "|---|---|---|---|"]
    for name, (vit, resnet, images) in cases.items():
        reference = None
        for amp in (False, "fp16", "bf16"):
            gram_cache.clear()
            torch.cuda.synchronize()
            start = time.time()
            result = compare.cka_matrix(vit.cuda(), images, "blocks", model_b=resnet.cuda(), batch_size=128, amp=amp,
                                        progress=False)
            torch.cuda.synchronize()
            seconds = time.time() - start
            reference = result.values if reference is None else reference
            diff = float(abs(result.values - reference).max())
            lines.append(f"| {name} | {result.meta['amp_dtype'] or 'off (float32)'} | {diff:.2e} | {seconds:.1f} |")
            print(lines[-1], flush=True)
    return "\n".join(lines)


def table(rows: dict) -> str:
    lines = ["| notebook | result | seconds | peak GPU memory (MiB) | peak host RSS (MiB) |", "|---|---|---|---|---|"]
    for name, r in rows.items():
        mib = lambda v: "-" if v is None else f"{v:,.0f}"  # noqa: E731
        lines.append(f"| {name} | {'ran' if not r['error'] else 'FAILED: ' + r['error']} | {r['seconds']:.0f} | "
                     f"{mib(r['gpu_mib'])} | {mib(r['rss_mib'])} |")
    return "\n".join(lines)


def torchrun_check(out: Path) -> str:
    """The default report on one GPU, then with torchrun on two; a line with both times and the largest difference
    between their tables (it should be float32-Gram rounding at most: the minibatches are the same)."""
    import numpy as np

    args = ["-m", "helpers.report", "--repeats", "4", "--measures", "cka"]
    env = {**os.environ, "COURSE_DEVICE": "cuda", "COURSE_TRACK": "lite"}
    seconds = {}
    for name, launcher in (("one", [sys.executable]), ("two", [sys.executable, "-m", "torch.distributed.run",
                                                                 "--nproc_per_node", "2"])):
        start = time.time()
        done = subprocess.run(launcher + args + ["--out", str(out / f"report_{name}_gpu")], cwd=ROOT, env=env,
                              capture_output=True, text=True)
        seconds[name] = time.time() - start
        if done.returncode:
            return f"torchrun check FAILED ({name}): {done.stderr[-1500:]}"
    worst = 0.0
    for path in sorted((out / "report_one_gpu" / "tables").glob("*.npz")):
        with np.load(path) as a, np.load(out / "report_two_gpu" / "tables" / path.name) as b:
            for key in a.files:
                if a[key].dtype.kind == "f" and a[key].size:
                    worst = max(worst, float(np.nanmax(np.abs(a[key] - b[key]))))
    return (f"Report on 1 GPU {seconds['one']:.0f} s, with torchrun on 2 GPUs {seconds['two']:.0f} s (start-up included); "
            f"largest difference between their tables {worst:.2e}")


FIX_TESTS = ["tests/test_forced_autocast.py", "tests/test_image_cache_races.py", "tests/test_report_gram_reuse.py",
             "tests/test_report_distributed.py", "tests/test_import_graph.py"]


def fixes_check() -> str:
    """Lines saying whether each fix of issue 41 holds on this GPU (see the module docstring)."""
    import numpy as np
    import torch

    from helpers import compare, gram_cache, models
    from helpers.data import image_set
    from helpers.report import Settings

    lines = []
    images = image_set("shapes", count=256)
    loud = models.load("lite-mixer", device="cuda")
    with torch.no_grad():
        loud.blocks[-1].mlp_channels.fc2.weight.mul_(1e5)  # leaves float16's range (65,504)
    plain = compare.cka_matrix(loud, images, "blocks", batch_size=128, progress=False, amp=False)
    gram_cache.clear()
    try:
        half = compare.cka_matrix(loud, images, "blocks", batch_size=128, progress=False, amp="fp16")
        lines.append(f"float16 overflow on CUDA: fell back to float32, largest difference "
                     f"{float(np.abs(half.values - plain.values).max()):.1e} (expected 0)")
    except ValueError as error:
        lines.append(f"float16 overflow on CUDA: FAILED, {error}")
    env_before = os.environ.get("COURSE_AUTOCAST")
    os.environ["COURSE_AUTOCAST"] = "off"
    off = Settings().fingerprint()
    os.environ.pop("COURSE_AUTOCAST")
    on = Settings().fingerprint()
    if env_before is not None:
        os.environ["COURSE_AUTOCAST"] = env_before
    lines.append(f"report fingerprint float32 vs float16: {'differ' if off != on else 'FAILED, equal'}")
    start = time.time()
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "0", "-q", "-p", "no:cacheprovider", *FIX_TESTS],
                          cwd=ROOT, capture_output=True, text=True)
    summary = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    lines.append(f"issue 41's CPU tests on this machine: {summary} ({time.time() - start:.0f} s)"
                 + ("" if done.returncode == 0 else " FAILED"))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="notebook numbers, e.g. 11 12")
    parser.add_argument("--no-rehearsal", action="store_true")
    parser.add_argument("--autocast-only", action="store_true", help="only the autocast comparison")
    parser.add_argument("--fixes-only", action="store_true", help="only the checks of issue 41's fixes")
    parser.add_argument("--out", default=str(ROOT / "outputs" / "gpu_check"))
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    args = parser.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("No CUDA GPU here: this check needs one (on a CPU the test suite covers the lite track).")
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}")
    fixes = fixes_check()
    (out / "fixes.md").write_text(fixes + "\n")
    print(fixes, flush=True)
    if args.fixes_only:
        return 1 if "FAILED" in fixes else 0
    amp_table = autocast_check()
    (out / "autocast.md").write_text(amp_table + "\n")
    if args.autocast_only:
        print("\n" + amp_table)
        return 0
    env = {"COURSE_TRACK": "lite", "COURSE_DEVICE": "cuda", "COURSE_OUTPUT_DIR": str(out / "outputs")}
    wanted = [f"{n:0>2}" for n in args.only] if args.only else [f"{n:02d}" for n in range(5, 18)]
    rows = {}
    for number in wanted:
        (path,) = sorted((ROOT / "notebooks").glob(f"{number}_*.ipynb"))
        rows[path.stem] = run_notebook(path, out, env, args.timeout)
        print(f"{path.stem}: {rows[path.stem]}", flush=True)
    text = ("Autocast on CUDA (" + torch.cuda.get_device_name(0) + ")\n\n" + amp_table + "\n\n"
            "Lite track on CUDA (" + torch.cuda.get_device_name(0) + ")\n\n" + table(rows) + "\n")
    text += "\nIssue 41's fixes\n\n" + fixes + "\n"
    failed = sum(bool(r["error"]) for r in rows.values()) + ("FAILED" in fixes)
    if not args.no_rehearsal:
        start = time.time()
        done = subprocess.run([sys.executable, "-m", "pytest", "-n", "0", "-q", "-p", "no:cacheprovider",
                               "tests/test_full_track_rehearsal.py"], cwd=ROOT,
                              env={**os.environ, "COURSE_REHEARSAL_DEVICE": "cuda"}, capture_output=True, text=True)
        summary = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
        text += f"\nFull-track rehearsal on CUDA: {summary} ({time.time() - start:.0f} s)\n"
        failed += done.returncode != 0
        if done.returncode:
            print(done.stdout[-4000:], done.stderr[-2000:])
    if torch.cuda.device_count() >= 2:
        line = torchrun_check(out)
        text += f"\n{line}\n"
        failed += "FAILED" in line
    else:
        text += "\nTorchrun check skipped: it needs 2 GPUs, this machine has 1.\n"
    (out / "table.md").write_text(text)
    print("\n" + text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
