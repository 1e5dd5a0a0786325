"""Benchmark (not a test): helpers.compare.cka_matrix against the PyPI packages torch-cka and pytorch-cka.

Same work for all: lite ViT x lite ResNet, the same 2,048 shapes images, batches of 256, CPU, on
one of two layer sets: block outputs (6 x 8 layers) or sublayers (30 x 9: per ViT block norm1,
attn, norm2, mlp.act and the block output, every one a module output that all three packages can
hook; the ResNet's stem and 8 blocks). Each method runs in its own process so its peak memory is its own.
Prints wall time (the median over --repeats rounds, methods in turn, with min-max), peak memory (resident memory above the start of the run, sampled every 5 ms), ratios, the largest |difference| of each peer's matrix from ours,
the CKA stage's share of our total time, and our peak memory for 512 vs 4,096 images.

    pip install -e ".[benchmark]"        # installs torch-cka and pytorch-cka
    python benchmarks/bench_vs_packages.py [--images 2048] [--threads 2] [--layers blocks|sublayers]
    python benchmarks/bench_vs_packages.py --layers sublayers --markdown   # README's row (5 rounds, ~5 min)

The CKA stage of each method is its total time minus the forward passes alone (same models,
same batches); the ratio of CKA stages is the number that compares the CKA code itself.

Uses the bundled checkpoints when present, else untrained models (timings are the same).
"""

import argparse
import resource
import sys
import time

import numpy as np
import torch
from fresh_process import run_in_fresh_process
from timing import median, summary
from machine import describe

BATCH = 256
LAYER_SETS = {
    "blocks": ([f"blocks.{i}" for i in range(6)], [f"layer{s}.{j}" for s in range(1, 5) for j in range(2)]),
    "sublayers": ([f"blocks.{i}{part}" for i in range(6) for part in (".norm1", ".attn", ".norm2", ".mlp.act", "")],
                  ["act1"] + [f"layer{s}.{j}" for s in range(1, 5) for j in range(2)]),
}
VIT_LAYERS, RESNET_LAYERS = LAYER_SETS["blocks"]


def load_models():
    from helpers import models, zoo
    try:
        return models.load("lite-vit", device="cpu"), models.load("lite-resnet", device="cpu")
    except FileNotFoundError:
        torch.manual_seed(0)  # every method must get the same untrained weights
        return zoo.build("lite-vit").eval(), zoo.build("lite-resnet").eval()


def image_tensor(count):
    """The same preprocessed images for every method (both lite models share one normalisation)."""
    from helpers import data
    vit, _ = load_models()
    images = data.image_set("shapes", count=count)
    return torch.cat(list(data.batches(images, vit, BATCH)))


def prepare(name, count):
    """Inputs made outside the clock and before the memory baseline: images, or a DataLoader for the peers."""
    from helpers import data
    if name == "ours":
        return data.image_set("shapes", count=count)
    if name == "forward only":
        return image_tensor(count)
    return loader(count)


def run_ours(images):
    from helpers.compare import cka_matrix
    vit, resnet = load_models()
    return cka_matrix(vit, images, VIT_LAYERS, model_b=resnet, layers_b=RESNET_LAYERS,
                      batch_size=BATCH, progress=False).values


def run_forward_only(x):
    vit, resnet = load_models()
    count = len(x)
    with torch.no_grad():
        for s in range(0, count, BATCH):
            vit(x[s:s + BATCH])
            resnet(x[s:s + BATCH])
    return None


def loader(count):
    x = image_tensor(count)
    dataset = torch.utils.data.TensorDataset(x, torch.zeros(len(x)))
    return torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=False)


def run_torch_cka(batches):
    from torch_cka import CKA
    vit, resnet = load_models()
    cka = CKA(vit, resnet, "vit", "resnet", VIT_LAYERS, RESNET_LAYERS, device="cpu")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cka.compare(batches)
    return cka.export()["CKA"].numpy()


def run_pytorch_cka(batches):
    from cka import compute_cka
    vit, resnet = load_models()
    return compute_cka(vit, resnet, batches, layers=VIT_LAYERS, model2_layers=RESNET_LAYERS,
                       device="cpu", progress=False)[0].cpu().numpy()


def float64_reference(count, layer_set):
    """The same minibatch estimator with every step in float64 (features, Grams, sums): the accuracy yardstick."""
    from helpers.capture import Capture
    from helpers.minibatch_cka import MinibatchCKA
    use_layers(layer_set)
    vit, resnet = (m.double() for m in load_models())
    x = image_tensor(count).double()
    accumulator = MinibatchCKA(VIT_LAYERS, RESNET_LAYERS)
    with torch.no_grad(), Capture(vit, VIT_LAYERS) as rec_a, Capture(resnet, RESNET_LAYERS) as rec_b:
        for s in range(0, count, BATCH):
            vit(x[s:s + BATCH])
            resnet(x[s:s + BATCH])
            accumulator.update(rec_a.take(), rec_b.take())
    return accumulator.result().values


METHODS = {"ours": run_ours, "forward only": run_forward_only, "torch-cka": run_torch_cka, "pytorch-cka": run_pytorch_cka}


class PeakMemory:
    """Samples this process's resident memory every 5 ms (Linux /proc) to find the peak above the start."""

    def __enter__(self):
        import threading
        self.start, self.peak, self.running = self.rss(), 0, True
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.running = False
        self.thread.join()

    @staticmethod
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()

    def sample(self):
        while self.running:
            self.peak = max(self.peak, self.rss() - self.start)
            time.sleep(0.005)


def use_layers(layer_set):
    global VIT_LAYERS, RESNET_LAYERS
    VIT_LAYERS, RESNET_LAYERS = LAYER_SETS[layer_set]


def worker(name, count, threads, layer_set, queue):
    torch.set_num_threads(threads)
    use_layers(layer_set)
    load_models()  # imports and model loading outside the clock
    inputs = prepare(name, count)
    with PeakMemory() as memory:
        start = time.perf_counter()
        try:
            values = METHODS[name](inputs)
            error = None
        except Exception as e:  # a peer that fails is reported, not hidden
            values, error = None, f"{type(e).__name__}: {e}"
        seconds = time.perf_counter() - start
    queue.put((seconds, memory.peak / 2**20, values, error))


def memory_worker(counts, threads, layer_set, queue):
    """Our peak memory for several image counts, after one warm-up run (allocator and thread pools)."""
    torch.set_num_threads(threads)
    use_layers(layer_set)
    run_ours(prepare("ours", 256))
    peaks = []
    for count in counts:
        images = prepare("ours", count)
        with PeakMemory() as memory:
            run_ours(images)
        peaks.append(memory.peak / 2**20)
    queue.put(peaks)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--layers", choices=list(LAYER_SETS), default="blocks")
    parser.add_argument("--repeats", type=int, default=5, help="rounds: each method runs once per round, in turn; "
                        "times are the median over rounds, with their min-max")
    parser.add_argument("--skip", nargs="*", default=[], choices=["torch-cka", "pytorch-cka"], help="peers to leave out")
    parser.add_argument("--markdown", action="store_true", help="also print a table row for README's Speed section")
    args = parser.parse_args()
    vit_layers, resnet_layers = LAYER_SETS[args.layers]
    print(f"lite ViT x lite ResNet, {len(vit_layers)} x {len(resnet_layers)} layers ({args.layers}), "
          f"{args.images} images, batches of {BATCH}, {args.threads} threads, median of {args.repeats} rounds\n")
    names = [m for m in METHODS if m not in args.skip]
    runs = {name: [] for name in names}
    for _ in range(args.repeats):  # methods in turn, so that a busy moment does not hit one method only
        for name in names:
            runs[name].append(run_in_fresh_process(worker, name, args.images, args.threads, args.layers))
    # each method's median run stands for it; a CKA stage is a run's time minus the same round's forward passes
    results = {name: sorted(runs[name], key=lambda r: r[0])[len(runs[name]) // 2] for name in names}
    stage_rounds = {name: [max(1e-9, run[0] - fwd[0]) for run, fwd in zip(runs[name], runs["forward only"])]
                    for name in names}
    ours_seconds, _, ours_values, _ = results["ours"]
    forward = median([run[0] for run in runs["forward only"]])
    reference = float64_reference(args.images, args.layers)
    stages, errors = {}, {}
    for name, (seconds, peak, values, error) in results.items():
        line = f"{name:13s} {summary([run[0] for run in runs[name]])}  peak memory +{peak:7.1f} MB"
        if error:
            line += f"  FAILED: {error[:120]}"
        elif values is not None:
            stages[name] = stage = median(stage_rounds[name])
            errors[name] = np.abs(values - reference).max()
            line += f"  CKA stage {summary(stage_rounds[name])}"
            if name != "ours":
                rounds = [a / b for a, b in zip(stage_rounds[name], stage_rounds["ours"])]
                line += (f" = {stage / median(stage_rounds['ours']):5.2f}x ours (per round {min(rounds):.2f}-"
                         f"{max(rounds):.2f}x);  max |CKA - ours| = {np.abs(values - ours_values).max():.2e}")
            line += f";  max |CKA - float64 reference| = {errors[name]:.1e}"
        print(line)
    total = median([run[0] for run in runs["ours"]])
    print(f"\nCKA stage share of our total time (medians): {max(0.0, total - forward) / total:.0%} (forward passes "
          f"alone: {forward:.2f} s); end to end, ours takes {total / forward:.2f}x the forward passes alone")
    small, large = run_in_fresh_process(memory_worker, (512, 4096), args.threads, args.layers)
    print(f"our peak memory during the CKA run (after a warm-up run): +{small:.1f} MB for 512 images, "
          f"+{large:.1f} MB for 4,096 images")
    if args.markdown:
        print(f"\n{describe(args.threads)}, `python benchmarks/bench_vs_packages.py {' '.join(sys.argv[1:])}`:\n")
        print(markdown_row(args, forward, stages, errors, (small, large)))


def markdown_row(args, forward, stages, errors, memory) -> str:
    """One row of README's table: layers, forward passes, each method's CKA stage (peers: ratio to ours), errors."""
    vit_layers, resnet_layers = LAYER_SETS[args.layers]
    what = {"blocks": "ViT blocks x ResNet blocks", "sublayers": "ViT sublayers x ResNet layers"}[args.layers]
    cells = [f"{len(vit_layers)} x {len(resnet_layers)}: {what} (`--layers {args.layers}`)", f"{forward:.2f} s",
             f"**{stages['ours']:.2f} s**" if "ours" in stages else "failed"]
    for peer in ("pytorch-cka", "torch-cka"):
        cells.append(f"{stages[peer]:.2f} s ({stages[peer] / stages['ours']:.2f}x)" if peer in stages and "ours" in stages
                     else "not run" if peer in args.skip else "failed")
    peers = ", ".join(f"{errors[p]:.1e}" for p in ("pytorch-cka", "torch-cka") if p in errors)
    cells.append(f"{errors.get('ours', float('nan')):.1e} / {peers or '-'}")
    cells.append(f"+{memory[0]:.0f} / +{memory[1]:.0f} MB")
    header = ("| layers | forward passes | CKA stage: `cka_matrix` | pytorch-cka (x ours) | torch-cka (x ours) "
              "| error vs float64: ours / pytorch-cka, torch-cka | our peak memory, 512 / 4,096 images |\n"
              "|---|---|---|---|---|---|---|")
    return header + "\n| " + " | ".join(cells) + " |"


if __name__ == "__main__":
    main()
