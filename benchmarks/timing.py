"""Times of several methods measured in one process, in turn, and summarised by their median and spread.

    runs = alternate(["gram floor", "accumulator"], repeats=5, run=lambda name: seconds)   # {name: [seconds, ...]}
    print(summary(runs["accumulator"]))                                                    # "1.23 s (1.20-1.31, 5 runs)"

Why in turn: a busy moment on a shared machine then slows one round of every method, not every run of one
method; why the median with min-max: one number says what is typical, the range says how much it moved.
"""

import statistics


def alternate(names: list, repeats: int, run) -> dict:
    """{name: [run(name) for each of `repeats` rounds]}, the methods taken in turn within each round."""
    if repeats < 1:
        raise ValueError(f"repeats={repeats}: give at least 1 (5 or more for a median with a spread).")
    times = {name: [] for name in names}
    for _ in range(repeats):
        for name in names:
            times[name].append(run(name))
    return times


def median(values: list) -> float:
    return statistics.median(values)


def summary(values: list, unit: str = "s") -> str:
    """'median unit (min-max, n runs)'."""
    return f"{median(values):.2f} {unit} ({min(values):.2f}-{max(values):.2f}, {len(values)} runs)"


def ratio_summary(top: list, bottom: list) -> str:
    """The ratio of the medians, and the range of the per-round ratios (rounds paired: they ran back to back)."""
    rounds = [a / b for a, b in zip(top, bottom)]
    return f"{median(top) / median(bottom):.2f}x (per round {min(rounds):.2f}-{max(rounds):.2f}x)"
