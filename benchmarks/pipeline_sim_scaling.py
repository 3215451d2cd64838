"""How the pipeline simulation's time grows with stages × micro-batches.

Each case is timed at p stages and at 10·p (and at m and 10·m micro-batches): a linear
simulation takes about 10× as long for 10× the passes, so the time per pass printed beside
each size stays about the same; a quadratic one would grow 10× per step. The deep-and-narrow
case (m = 1, thousands of stages) is the one a sweep over every device was quadratic in.
Run: .venv/bin/python benchmarks/pipeline_sim_scaling.py
"""

from __future__ import annotations

import time

from ceiling.model.pipeline_sim import simulate_pipeline

CASES = [
    # (schedule, [(p, m, v), ...]) sizes growing 10× in passes
    ("1f1b", [(1_000, 1, 1), (10_000, 1, 1), (100_000, 1, 1)]),
    ("1f1b", [(100, 10, 1), (100, 100, 1), (100, 1_000, 1)]),
    ("gpipe", [(10, 100, 1), (100, 100, 1), (1_000, 100, 1)]),
    ("interleaved", [(8, 80, 2), (80, 80, 2), (80, 800, 2)]),
]


def best_time(schedule: str, p: int, m: int, v: int, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        simulate_pipeline(schedule, p, m, 1.0, 2.0, chunks=v)
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    for schedule, sizes in CASES:
        print(schedule)
        first_per_pass = None
        for p, m, v in sizes:
            passes = 2 * p * m * v
            t = best_time(schedule, p, m, v)
            per_pass = t / passes
            first_per_pass = first_per_pass or per_pass
            print(
                f"  p={p:>7,} m={m:>5,} v={v}: {passes:>9,} passes in {t * 1e3:8.1f} ms, "
                f"{per_pass * 1e6:5.2f} µs per pass ({per_pass / first_per_pass:.2f}× the "
                "smallest size's)"
            )


if __name__ == "__main__":
    main()
