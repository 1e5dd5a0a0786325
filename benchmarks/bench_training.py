"""Benchmark (not a test): training the lite ViT with timm's fused attention kernel against the
explicit softmax(q k^T) v (`python -m helpers.train NAME --attention explicit`).

Work: `helpers.train.train` itself (the lite-vit recipe: batch 128, flips and shifts, CutMix, AdamW,
gradient clipping) for --steps steps from the same initial weights on the real training images. Each
case runs in a fresh process, alternating kernels, best of --repeats runs. Prints seconds per step, the
ratio, what the recipe's 6,000 steps would take, and how far the two kernels' weights end up apart
(the same maths with other rounding: small, not zero).

    python benchmarks/bench_training.py [--steps 100] [--threads 2] [--repeats 2]
"""

import argparse
from contextlib import nullcontext
from dataclasses import replace

import torch
from fresh_process import run_in_fresh_process

from helpers import attention, train, zoo


def trained(kernel: str, steps: int, threads: int, queue):
    """Train lite-vit for `steps` steps with one attention kernel; put (seconds per step, final weights)."""
    torch.set_num_threads(threads)
    recipe = replace(zoo.ZOO["lite-vit"], steps=steps)
    torch.manual_seed(recipe.seed)
    model = zoo.build(recipe)
    with attention.explicit_attention(model) if kernel == "explicit" else nullcontext():
        log = train.train(model, recipe, progress=False)
    queue.put((log["train_seconds"] / steps, {k: v.numpy().copy() for k, v in model.state_dict().items()}))  # numpy: sent by value


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2, help="fresh runs per kernel, alternating; the best counts")
    args = parser.parse_args()

    print(f"lite-vit training, {args.steps} steps of batch 128, {args.threads} threads, best of {args.repeats}\n")
    seconds, weights = {"fused": [], "explicit": []}, {}
    for _ in range(args.repeats):
        for kernel in seconds:  # alternate, so a slow spell of the machine hits both
            per_step, weights[kernel] = run_in_fresh_process(trained, kernel, args.steps, args.threads)
            seconds[kernel].append(per_step)
            print(f"{kernel:8s} {per_step:.3f} s per step")
    best = {kernel: min(times) for kernel, times in seconds.items()}
    print()
    for kernel, per_step in best.items():
        print(f"{kernel:8s} best {per_step:.3f} s per step: the recipe's 6,000 steps in {per_step * 6000 / 60:.0f} minutes")
    print(f"explicit / fused: {best['explicit'] / best['fused']:.2f} of the time ({best['fused'] / best['explicit']:.2f}x faster)")
    drift = max(float(abs(weights["fused"][k] - weights["explicit"][k]).max()) for k in weights["fused"])
    print(f"largest |weight difference| between the kernels after {args.steps} steps: {drift:.1e}")


if __name__ == "__main__":
    main()
