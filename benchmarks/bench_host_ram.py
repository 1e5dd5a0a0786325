"""Peak host RAM of the heaviest full-track cells of notebooks 12 and 13, measured on the CPU.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/bench_host_ram.py              # today's code
    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/bench_host_ram.py --old REV    # and REV's, side by side
    PYTHONPATH=$PWD python benchmarks/bench_host_ram.py --only 12-vit                  # one measurement

Each measurement runs in a fresh Python process and reports its peak resident set size
(resource.getrusage ru_maxrss), so nothing of one run is left in the next. The models are the
full track's architectures with random weights (helpers.models.load(..., pretrained=False)),
on the CPU; the images are random uint8 images of the model's input size, made one at a time as
the notebooks' image folders are read, at the notebooks' full-track counts:

  12-vit     notebook 12, cell 5, one CLS ViT: ViT-B/16's final block on 1,000 images, its map
             against the 16x16 input patches, and the 8 subsample maps of its interval.
  12-resnet  notebook 12, cell 5, the first ResNet-50 (the heaviest model of the cell): layer4.2,
             layer2.3 and layer3.5 captured in one pass over 1,000 images, then mapped in the
             notebook's order (layer2.3: 784 tokens against 784 8x8 patches), with the subsample maps.
  13-vit     notebook 13, cell 7, one pass of ViT-B/16: two blocks over the pool (500) and test
             (2,000) images, probed token by token and by the aggregates, 5 draws of 10 shots.

What is left out, to keep the run short on a CPU: the other models of each cell (they are smaller
or the same shapes, and each model's tokens are dropped before the next one's are captured), and
the ViT's other blocks: the ViTs are built with depth=1 (12) or depth=2 (13), which leaves the
shapes of every token the cells keep unchanged but skips the forward passes of the blocks no
one hooks. Model weights count here (on the CPU); on a GPU runtime they live on the GPU.

--old REV runs the same cells with helpers/localization.py and helpers/probes.py of git
revision REV (and the notebooks' code of that time: notebook 13 kept every model's last-layer
tokens, which one model's run does not show). Each old run gets an address-space cap of
--cap-gib GiB above its start, so a run that would need far more stops with 'over the cap'
instead of taking the machine's memory from others; 12-resnet is not run with old code (about
23 GB by the audit's arithmetic, more than this machine can spare).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = ("12-vit", "12-resnet", "13-vit")
OLD_SKIPPED = {"12-resnet": "not run: about 23 GB by the audit's arithmetic"}


def rss_gib() -> float:
    """The current resident set size of this process, GiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 2 ** 20
    return float("nan")


def peak_gib() -> float:
    """The peak resident set size of this process so far, GiB (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20


def random_images(n: int, size: int, seed: int = 0):
    """An ImageSet of n random uint8 (3, size, size) images, each made when it is read (as a folder is)."""
    import torch

    from helpers.data import ImageSet

    def get(i):
        return torch.randint(0, 256, (3, size, size), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed + i))
    return ImageSet(f"random {size}px", n, get, [i % 10 for i in range(n)])


def input_size(model) -> int:
    from timm.data import resolve_data_config

    return resolve_data_config(model=model, use_test_size=True)["input_size"][-1]


def modules(old_rev: str | None):
    """(localization, probes): the worktree's, or REV's written to a temporary folder and imported from there."""
    if old_rev is None:
        from helpers import localization, probes
        return localization, probes
    import importlib.util

    folder = Path(tempfile.mkdtemp(prefix="bench_host_ram_"))
    loaded = []
    for name in ("localization", "probes"):
        path = folder / f"old_{name}.py"
        path.write_text(subprocess.run(["git", "show", f"{old_rev}:helpers/{name}.py"], cwd=ROOT, check=True,
                                       capture_output=True, text=True).stdout)
        spec = importlib.util.spec_from_file_location(f"old_{name}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up here
        spec.loader.exec_module(module)
        loaded.append(module)
    return tuple(loaded)


def pixels_for(localization, images, model, grid, batch):
    """Notebook 12's pixels_for on the full track: the model's own input, as patches of the token grid."""
    import torch

    from helpers.data import batches

    return torch.cat([localization.patch_grid(x.cpu(), x.shape[-1] // grid[0]) for x in batches(images, model, batch)])


def map_with_intervals(localization, tokens, pixels, repeats=8):
    """Notebook 12: the map on all images, then on `repeats` disjoint subsamples (the interval of a judged run)."""
    from helpers.intervals import disjoint_subsamples

    whole = localization.localization_maps(tokens.spatial, pixels).cpu().numpy()
    for idx in disjoint_subsamples(len(pixels), repeats):
        localization.summarise(localization.localization_scores(
            localization.localization_maps(tokens.spatial[idx], pixels[idx]).cpu().numpy(), tokens.grid))
    return whole


def case_12(localization, name: str, layers: list, depth: int | None):
    """Notebook 12 cell 5 for one model: capture `layers` at once, map each in turn, drop each once mapped."""
    from helpers import models

    net = models.load(name, pretrained=False, device="cpu", **({"depth": depth} if depth else {}))
    images = random_images(1000, input_size(net))
    start_rss = rss_gib()
    captured = localization.capture_tokens(net, images, sorted(set(layers)), batch_size=64)
    for layer in layers:
        tokens = captured.pop(layer)
        pixels = pixels_for(localization, images, net, tokens.grid, 64)
        map_with_intervals(localization, tokens, pixels)
        del tokens, pixels
    return start_rss


def case_13(localization, probes, old: bool):
    """Notebook 13 cell 7 for one pass of ViT-B/16: two blocks of the pool and test images, probed."""
    import numpy as np

    from helpers import models

    net = models.load("vit_base_patch16_224.augreg_in21k_ft_in1k", pretrained=False, device="cpu", depth=2)
    size = input_size(net)
    pool, test = random_images(500, size, seed=0), random_images(2000, size, seed=10_000)
    pool_y, test_y = np.array(pool.labels), np.array(test.labels)
    aggregates = {"CLS token": lambda t: t.cls, "GAP except CLS": lambda t: t.spatial.mean(1),
                  "GAP of all tokens": lambda t: t.values.mean(1)}

    def probe(pool_X, test_X):
        return probes.few_shot_correct(pool_X, pool_y, test_X, test_y, shots=10, repeats=5, val_per_class=10, seed=0)

    start_rss = rss_gib()
    group = ["blocks.0", "blocks.1"]  # PASS_GIB = 3 holds two ViT-B blocks of 2,500 images (2 x 1.5 GB)
    pool_tokens, test_tokens = (localization.capture_tokens(net, images, group, batch_size=64) for images in (pool, test))
    kept = None
    for layer in group:
        probe(pool_tokens[layer].spatial, test_tokens[layer].spatial)
        for read in aggregates.values():
            probe(read(pool_tokens[layer]), read(test_tokens[layer]))
    if old:  # the old notebook kept the last layer's Tokens of every model (here: of this one) after the pass
        kept = (pool_tokens[group[-1]], test_tokens[group[-1]])
    del pool_tokens, test_tokens, kept
    return start_rss


def run_one(case: str, old_rev: str | None, cap_gib: float) -> dict:
    """One measurement in this process: {'peak': GiB, 'start': GiB before the cell, 'seconds': ...} or {'error': ...}."""
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    localization, probes = modules(old_rev)
    if old_rev is not None:
        vm = int(next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmSize:")).split()[1])
        limit = vm * 1024 + int(cap_gib * 2 ** 30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    began = time.time()
    try:
        if case == "12-vit":
            start = case_12(localization, "vit_base_patch16_224.augreg_in21k_ft_in1k", ["blocks.0"], depth=1)
        elif case == "12-resnet":
            start = case_12(localization, "resnet50.tv_in1k", ["layer4.2", "layer2.3", "layer3.5"], depth=None)
        elif case == "13-vit":
            start = case_13(localization, probes, old=old_rev is not None)
        else:
            raise ValueError(f"Unknown case {case!r}; choose from {CASES}.")
    except (MemoryError, RuntimeError) as error:
        if old_rev is None or "memory" not in str(error).lower() and not isinstance(error, MemoryError):
            raise
        return {"error": f"over the {cap_gib:g} GiB cap", "peak": peak_gib(), "seconds": time.time() - began}
    return {"peak": peak_gib(), "start": start, "seconds": time.time() - began}


def measure(case: str, old_rev: str | None, cap_gib: float) -> dict:
    """run_one in a fresh Python process."""
    command = [sys.executable, __file__, "--child", case, "--cap-gib", str(cap_gib)] + (["--old", old_rev] if old_rev else [])
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ''}"}
    return json.loads(lines[-1])


def shown(result: dict | None) -> str:
    if result is None:
        return "-"
    if "peak" not in result or "error" in result:
        return result.get("error", "?") + (f" (peak so far {result['peak']:.1f})" if "peak" in result else "")
    return f"{result['peak']:.2f} GiB ({result['seconds']:.0f} s)"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", metavar="REV", help="also measure helpers/localization.py and probes.py of this git revision")
    parser.add_argument("--only", choices=CASES, action="append", help="measure only this case (repeatable)")
    parser.add_argument("--cap-gib", type=float, default=14.0, help="address-space cap above the start of each old run")
    parser.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_one(args.child, args.old, args.cap_gib)))
        return
    began = time.time()
    rows = []
    for case in args.only or CASES:
        new = measure(case, None, args.cap_gib)
        old = None
        if args.old:
            old = {"error": OLD_SKIPPED[case]} if case in OLD_SKIPPED else measure(case, args.old, args.cap_gib)
        rows.append((case, new, old))
        print(f"{case:10s} now: {shown(new)}" + (f"   {args.old}: {shown(old)}" if args.old else ""), flush=True)
    print(f"\npeak host RSS (ru_maxrss of a fresh process; random weights, CPU, full-track image counts; "
          f"{time.strftime('%Y-%m-%d')}, {os.environ.get('OMP_NUM_THREADS', 'all')} thread(s))")
    print(f"| cell | before the cell | peak, this code |" + (f" peak, {args.old} |" if args.old else ""))
    print("|---|---|---|" + ("---|" if args.old else ""))
    for case, new, old in rows:
        start = f"{new['start']:.2f} GiB" if "start" in new else "-"
        print(f"| {case} | {start} | {shown(new)} |" + (f" {shown(old)} |" if args.old else ""))
    print(f"total {time.time() - began:.0f} s")


if __name__ == "__main__":
    main()
