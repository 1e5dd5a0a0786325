"""Benchmark (not a test): the one-product MinibatchCKA accumulator against per-pair loops.

Work: 48 layers of model A x 20 layers of model B, random features, batches of 256 images.
Methods, all on the same features:
  accumulator   helpers.minibatch_cka.MinibatchCKA: each Gram once, all pairs from one product
  loop-grams    per-pair Python loop, Grams formed once per batch, one HSIC_1 and .item() per pair
  naive         per-pair loop that re-forms both Grams for every pair (what a direct port does)
Also the floor: the time to form the 68 Grams alone (plain X @ X.T per layer, nothing else), which
a method that forms each Gram with one matrix product must pay.
Prints times (best of --repeats runs, each in a fresh process, methods taken in turn), ratios, achieved
Gram GFLOP/s, each method's peak memory, and the accumulator's largest |difference| from the same
estimator with every step in float64 (features, Grams, sums). --markdown adds a table row for the README.

    python benchmarks/bench_accumulator.py --skip-naive --markdown    # best of 3: about a minute on 2 idle cores
"""

import argparse
import resource
import sys
import time

import torch
from fresh_process import run_in_fresh_process
from machine import describe

from helpers.minibatch_cka import MinibatchCKA, centered_gram, u_center_stack

LA, LB, M = 48, 20, 256
WIDTHS_A = [768] * LA
WIDTHS_B = [256, 512, 1024, 2048] * (LB // 4)


def features(batch: int):
    g = torch.Generator().manual_seed(batch)
    a = {f"a{i}": torch.randn(M, w, generator=g) for i, w in enumerate(WIDTHS_A)}
    b = {f"b{j}": torch.randn(M, w, generator=g) for j, w in enumerate(WIDTHS_B)}
    return a, b


def hsic1(Gu_a, Gu_b):
    return float((Gu_a * Gu_b).sum()) / (M * (M - 3))


def run_accumulator(n_batches, dtype=torch.float32):
    acc = MinibatchCKA(list(features(0)[0]), list(features(0)[1]))
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


def timed(name, n_batches, threads, queue):
    torch.set_num_threads(threads)
    features(0)
    start_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # peak so far: imports + one batch of features
    if name != "naive":  # warm up (thread pool, allocator) on one batch outside the clock
        METHODS[name](1)
    start = time.perf_counter()
    METHODS[name](n_batches)
    elapsed = time.perf_counter() - start
    peak_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start_rss) / 1024
    queue.put((elapsed, peak_mb))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each method; the fastest counts")
    parser.add_argument("--skip-naive", action="store_true", help="the naive loop is slow (minutes on 2 cores)")
    parser.add_argument("--markdown", action="store_true", help="also print a table row for README's Speed section")
    args = parser.parse_args()

    gram_flops = 2 * M * M * (sum(WIDTHS_A) + sum(WIDTHS_B)) * args.batches
    print(f"{LA} x {LB} layers, batches of {M}, {args.batches} batches, {args.threads} threads, best of {args.repeats}\n")
    names = [n for n in METHODS if not (n == "naive" and args.skip_naive)]
    runs = {name: [] for name in names}
    for _ in range(args.repeats):  # methods in turn, so that a busy moment does not hit one method only
        for name in names:
            if name == "naive" and runs[name]:
                continue  # minutes per run, and far behind: once is enough
            runs[name].append(run_in_fresh_process(timed, name, args.batches, args.threads))
    times = {}
    for name in names:
        seconds, peak = min(runs[name])
        times[name] = seconds
        print(f"{name:12s} {seconds:8.2f} s   peak memory above the features {peak:7.1f} MB")
    floor = times["gram floor"]
    print(f"\nGram throughput at the floor: {gram_flops / floor / 1e9:.1f} GFLOP/s")
    print(f"accumulator / Gram floor: {times['accumulator'] / floor:.2f}x "
          f"(achieved {gram_flops / times['accumulator'] / 1e9:.1f} GFLOP/s of Gram work)")
    for other in ("loop-grams", "naive"):
        if other in times:
            print(f"{other} / accumulator: {times[other] / times['accumulator']:.1f}x slower")

    torch.set_num_threads(args.threads)
    difference = abs(run_accumulator(1) - run_loop_grams(1)).max()
    print(f"\nlargest |accumulator - loop| CKA difference (one batch): {difference:.2e}")
    error = abs(run_accumulator(args.batches) - run_accumulator(args.batches, torch.float64)).max()
    print(f"largest |accumulator - float64 reference| ({args.batches} batches): {error:.1e}")
    if args.markdown:
        print(f"\n{describe(args.threads)}, `python benchmarks/bench_accumulator.py {' '.join(sys.argv[1:])}`:\n")
        print("| work | Gram floor (X X^T) | accumulator | accumulator / floor | loop-grams | error vs float64 |")
        print("|---|---|---|---|---|---|")
        print(f"| {LA} x {LB} layers, {args.batches} batches of {M} | {floor:.2f} s ({gram_flops / floor / 1e9:.0f} GFLOP/s) "
              f"| **{times['accumulator']:.2f} s** | **{times['accumulator'] / floor:.2f}x** "
              f"| {times['loop-grams']:.2f} s ({times['loop-grams'] / times['accumulator']:.1f}x) | {error:.1e} |")


if __name__ == "__main__":
    main()
