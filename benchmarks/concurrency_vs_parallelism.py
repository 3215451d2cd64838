"""Threads vs processes on the same workloads, side by side in one run.

Usage: .venv/bin/python benchmarks/concurrency_vs_parallelism.py [--workers 2]

  python   pure-Python loop: holds the GIL, so threads take turns (expected speedup ≈ 1)
           while processes run in parallel (up to min(workers, cores))
  matmul   torch.mm: torch releases the GIL inside the kernel, so threads speed up too

Prints the measured speedup at N = workers for each (workload, backend) and the ratio
processes ÷ threads for the Python loop. The check: on a machine with at least 2 free cores
that ratio is clearly above 1 (pure Python does not run in parallel on threads).
"""

from __future__ import annotations

import argparse

from ceiling.measure.scale import ScaleConfig, cpu_cores, run_scaling
from ceiling.render.scaling_summary import summarize_run


def speedup(workload: str, backend: str, workers: int, options: dict) -> float:
    cfg = ScaleConfig(
        workload=workload,
        workers=(1, workers),
        backend=backend,
        steps=3,
        warmup_steps=1,
        threads_per_worker=1,
        options=options,
    )
    summary = summarize_run(run_scaling(cfg))
    return summary["points"][-1]["speedup"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    n = args.workers
    print(f"{cpu_cores()} cores; speedup at N = {n} over N = 1 (one torch thread per worker)")
    results = {}
    for workload, options in (("python", {"iterations": 3e6}), ("matmul", {"size": 1024})):
        for backend in ("threads", "processes"):
            s = speedup(workload, backend, n, options)
            results[(workload, backend)] = s
            print(f"  {workload:7s} {backend:10s} {s:5.2f}×")
    ratio = results[("python", "processes")] / results[("python", "threads")]
    print(f"pure Python, processes ÷ threads: {ratio:.2f}")
    verdict = "parallelism vs concurrency, as expected" if ratio > 1.3 else "no clear difference"
    print(f"check (ratio > 1.3 with ≥ 2 free cores): {verdict}")


if __name__ == "__main__":
    main()
