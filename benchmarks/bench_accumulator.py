"""Benchmark (not a test): the one-product MinibatchCKA accumulator against per-pair loops.

Work: 48 layers of model A x 20 layers of model B, random features, batches of 256 images.
Methods, all on the same features:
  accumulator   helpers.minibatch_cka.MinibatchCKA: each Gram once, all pairs from one product
  loop-grams    per-pair Python loop, Grams formed once per batch, one HSIC_1 and .item() per pair
  naive         per-pair loop that re-forms both Grams for every pair (what a direct port does)
Also the floor: the time to form the 68 Grams alone (plain X @ X.T per layer, nothing else), which
a method that forms each Gram with one matrix product must pay. The random features are made once, before
any clock starts (before 2026-12-06 each method also timed their generation, which diluted every ratio
towards 1, and the accumulator paid for one extra batch of it).
Prints each method's median time with its spread (min-max) over --repeats runs in one process, methods taken
in turn (benchmarks/timing.py), the ratio of medians, achieved Gram GFLOP/s, and the accumulator's largest
|difference| from the same estimator with every step in float64 (features, Grams, sums). --markdown adds a table
row for the README.

    python benchmarks/bench_accumulator.py --skip-naive --markdown    # 5 runs each: about a minute on 2 idle cores
"""

import argparse
import functools
import sys
import time

import torch
from machine import describe
from timing import alternate, median, ratio_summary, summary

from helpers.minibatch_cka import MinibatchCKA, centered_gram, u_center_stack

LA, LB, M = 48, 20, 256
WIDTHS_A = [768] * LA
WIDTHS_B = [256, 512, 1024, 2048] * (LB // 4)


@functools.lru_cache(maxsize=None)
def features(batch: int):
    """Batch `batch`'s random features: ({a0..a47: (M, 768)}, {b0..b19: (M, 256..2048)}). Made once and kept (about
    57 MB a batch), all of them before any clock starts, so that every method is timed on its own work only."""
    g = torch.Generator().manual_seed(batch)
    a = {f"a{i}": torch.randn(M, w, generator=g) for i, w in enumerate(WIDTHS_A)}
    b = {f"b{j}": torch.randn(M, w, generator=g) for j, w in enumerate(WIDTHS_B)}
    return a, b


def hsic1(Gu_a, Gu_b):
    return float((Gu_a * Gu_b).sum()) / (M * (M - 3))


def run_accumulator(n_batches, dtype=torch.float32):
    acc = MinibatchCKA([f"a{i}" for i in range(LA)], [f"b{j}" for j in range(LB)])
    for k in range(n_batches):
        a, b = features(k)
        if dtype != torch.float32:
            a, b = ({name: x.to(dtype) for name, x in layers.items()} for layers in (a, b))
        acc.update(a, b)
    return acc.result().values


def to_cka(cross, self_a, self_b):
    return (cross / torch.sqrt(self_a[:, None] * self_b[None, :])).numpy()


def run_loop_grams(n_batches):
    cross, self_a, self_b = torch.zeros(LA, LB, dtype=torch.float64), torch.zeros(LA, dtype=torch.float64), torch.zeros(LB, dtype=torch.float64)
    for k in range(n_batches):
        a, b = features(k)
        Ga = [u_center_stack(centered_gram(x)[None])[0] for x in a.values()]
        Gb = [u_center_stack(centered_gram(y)[None])[0] for y in b.values()]
        for i in range(LA):
            self_a[i] += hsic1(Ga[i], Ga[i])
            for j in range(LB):
                cross[i, j] += hsic1(Ga[i], Gb[j])
        for j in range(LB):
            self_b[j] += hsic1(Gb[j], Gb[j])
    return to_cka(cross, self_a, self_b)


def run_naive(n_batches):
    sums = torch.zeros(LA, LB, dtype=torch.float64)
    for k in range(n_batches):
        a, b = features(k)
        for i, x in enumerate(a.values()):
            for j, y in enumerate(b.values()):
                Gx = u_center_stack(centered_gram(x)[None])[0]
                Gy = u_center_stack(centered_gram(y)[None])[0]
                sums[i, j] += hsic1(Gx, Gy)
    return sums


def run_gram_floor(n_batches):
    for k in range(n_batches):
        a, b = features(k)
        for x in list(a.values()) + list(b.values()):
            x @ x.T


METHODS = {"gram floor": run_gram_floor, "accumulator": run_accumulator, "loop-grams": run_loop_grams, "naive": run_naive}


def timed(name, n_batches):
    """Seconds of one run of a method (after a warm-up batch outside the clock: thread pool, allocator)."""
    if name != "naive":
        METHODS[name](1)
    start = time.perf_counter()
    METHODS[name](n_batches)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5, help="runs of each method (median and min-max are shown)")
    parser.add_argument("--skip-naive", action="store_true", help="the naive loop is slow (minutes on 2 cores)")
    parser.add_argument("--markdown", action="store_true", help="also print a table row for README's Speed section")
    args = parser.parse_args()

    gram_flops = 2 * M * M * (sum(WIDTHS_A) + sum(WIDTHS_B)) * args.batches
    print(f"{LA} x {LB} layers, batches of {M}, {args.batches} batches, {args.threads} threads, "
          f"{args.repeats} runs each in one process, methods in turn\n")
    torch.set_num_threads(args.threads)
    for k in range(args.batches):  # every batch's features made before the clocks start (kept: lru_cache)
        features(k)
    names = [n for n in METHODS if not (n == "naive" and args.skip_naive)]
    runs = alternate([n for n in names if n != "naive"], args.repeats, lambda name: timed(name, args.batches))
    if "naive" in names:
        runs["naive"] = [timed("naive", args.batches)]  # minutes per run, and far behind: once is enough
    times = {name: median(runs[name]) for name in names}
    for name in names:
        print(f"{name:12s} {summary(runs[name])}")
    floor = times["gram floor"]
    print(f"\nGram throughput at the floor: {gram_flops / floor / 1e9:.1f} GFLOP/s (median)")
    print(f"accumulator / Gram floor: {ratio_summary(runs['accumulator'], runs['gram floor'])} "
          f"(achieved {gram_flops / times['accumulator'] / 1e9:.1f} GFLOP/s of Gram work)")
    for other in ("loop-grams", "naive"):
        if other in times:
            print(f"{other} / accumulator: {times[other] / times['accumulator']:.1f}x slower (medians)")

    torch.set_num_threads(args.threads)
    difference = abs(run_accumulator(1) - run_loop_grams(1)).max()
    print(f"\nlargest |accumulator - loop| CKA difference (one batch): {difference:.2e}")
    error = abs(run_accumulator(args.batches) - run_accumulator(args.batches, torch.float64)).max()
    print(f"largest |accumulator - float64 reference| ({args.batches} batches): {error:.1e}")
    if args.markdown:
        print(f"\n{describe(args.threads)}, `python benchmarks/bench_accumulator.py {' '.join(sys.argv[1:])}`:\n")
        print("| work | Gram floor (X X^T) | accumulator | accumulator / floor | loop-grams | error vs float64 |")
        print("|---|---|---|---|---|---|")
        print(f"| {LA} x {LB} layers, {args.batches} batches of {M} | {summary(runs['gram floor'])} "
              f"| **{summary(runs['accumulator'])}** | **{ratio_summary(runs['accumulator'], runs['gram floor'])}** "
              f"| {summary(runs['loop-grams'])} | {error:.1e} |")


if __name__ == "__main__":
    main()
