"""The local roofs a profile measures without a machine profile, at the old and new budgets.

Usage: .venv/bin/python benchmarks/local_roofs_budget.py [--repeats 5]

Side by side, alternating within each repeat so both see the same load:
  functions    seconds per element of each elementwise function (measure.functions):
               old = 20 ms per function, best of at least 25 calls (no cap);
               new = the quick budget over 4 turns of all functions, 3 to 10 calls a turn
  first touch  the fit of measure.first_touch (cost per byte, where it starts, per fault):
               old = 10 ms per size, 5 ms warm-up; new = the quick budget, 1 ms warm-up
For each: the wall seconds (median), the figure (median over repeats) and its spread,
(max - min) / median over the repeats. On a shared machine a repeat in which every call of
a function stalled (a worker thread descheduled) reads up to 100x high at either budget: the
old budget does not protect from it; turns spread each function's calls over the run. The check: the
new medians agree with the old ones at a fraction of the seconds.
"""

from __future__ import annotations

import argparse
import statistics
import time

from ceiling.measure import first_touch as ft
from ceiling.measure import functions as fn
from ceiling.model.first_touch import fit


def old_functions():
    return fn.time_functions("cpu", 20.0, min_samples=25, max_samples=10_000, rounds=1)


def new_functions():
    return fn.time_functions("cpu", budget_ms=fn.QUICK_BUDGET_MS)


def old_first_touch():
    return ft.time_first_touch("cpu", ft.SIZES_BYTES, budget_ms=10.0, warmup_ms=5.0)


def new_first_touch():
    return ft.time_first_touch("cpu", ft.SIZES_BYTES, ft.QUICK_BUDGET_MS, warmup_ms=1.0)


def timed(measure):
    began = time.perf_counter()
    out = measure()
    return time.perf_counter() - began, out


def spread(values: list[float]) -> float:
    mid = statistics.median(values)
    return (max(values) - min(values)) / mid if mid else 0.0


def line(key: str, values: list[float], unit: str, scale: float) -> None:
    shown = statistics.median(values) * scale
    print(f"    {key:28s} {shown:10.3f} {unit:10s} spread {100 * spread(values):7.1f} %")


def report(label: str, seconds: dict, per_element: dict, touch: dict) -> None:
    print(f"{label}:")
    print(f"  functions: {statistics.median(seconds['functions']):.2f} s (median)")
    for name, values in per_element.items():
        line(name, values, "ns/element", 1e9)
    print(f"  first touch: {statistics.median(seconds['first touch']):.2f} s (median)")
    line("per byte", touch["s_per_byte"], "us/MiB", 2**20 * 1e6)
    line("from", touch["from_bytes"], "MiB", 2**-20)
    line("per fault", touch["s_per_fault"], "us", 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    runs = {"old": (old_functions, old_first_touch), "new": (new_functions, new_first_touch)}
    seconds = {k: {"functions": [], "first touch": []} for k in runs}
    per_element = {k: {} for k in runs}
    touch = {k: {"s_per_byte": [], "from_bytes": [], "s_per_fault": []} for k in runs}
    for _ in range(repeats):
        for label, (functions, first_touch) in runs.items():
            s, t = timed(functions)
            seconds[label]["functions"].append(s)
            for name, best in t.best_s.items():
                per_element[label].setdefault(name, []).append(best / t.elements)
            s, samples = timed(first_touch)
            seconds[label]["first touch"].append(s)
            cost = fit(samples.sizes_bytes, samples.fresh_s, samples.reused_s,
                       samples.fresh_faults)  # fmt: skip
            touch[label]["s_per_byte"].append(cost.s_per_byte)
            touch[label]["from_bytes"].append(cost.from_bytes or 0.0)
            touch[label]["s_per_fault"].append(cost.s_per_fault)
    for label in runs:
        report(label, seconds[label], per_element[label], touch[label])


if __name__ == "__main__":
    main()
