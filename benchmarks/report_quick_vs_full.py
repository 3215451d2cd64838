"""The report's quick benchmarks against the full ones: matmul FLOP/s per dtype and memory
bandwidth side by side, measured alternately in one run, and the quick report's time.

Usage: .venv/bin/python benchmarks/report_quick_vs_full.py [--rounds 2] [--report]

Each round runs the quick matmul benchmark then the full one, then the same for memory, on
this machine's CPU; each keeps its best over the rounds (a loaded machine only slows a run
down, so on a busy machine run more rounds). The check: every quick figure within 5 % of
the full one. With --report it also times `ceiling report --quick` (a saved profile is not
used: the page measures the machine) and prints each section's own time, so the sum can be
read apart from process start-up.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ceiling.measure import suite

TOLERANCE = 0.05


def figures(quick: bool, part: str) -> dict[str, float]:
    """Best matmul FLOP/s per dtype or the bandwidth ceiling, as the report's profile has."""
    report = suite.run_all("cpu", quick=quick, parts=(part,))
    profile = suite.build_profile(report)
    dev = profile.device("cpu")
    out = {f"matmul {dt} (FLOP/s)": v for dt, v in dev.peak_flops_per_s.items()}
    if dev.bandwidth_bytes_per_s:
        out["bandwidth (bytes/s)"] = dev.bandwidth_bytes_per_s
    return out


def compare(rounds: int) -> bool:
    best: dict[str, dict[str, float]] = {"quick": {}, "full": {}}
    took = {"quick": 0.0, "full": 0.0}
    for _ in range(rounds):
        for part in ("matmul", "memory"):  # quick and full back to back: the same load
            for mode in ("quick", "full"):
                t0 = time.perf_counter()
                for k, v in figures(mode == "quick", part).items():
                    best[mode][k] = max(best[mode].get(k, 0.0), v)
                took[mode] += time.perf_counter() - t0
    ok = True
    print(f"{'figure':28} {'quick':>12} {'full':>12} {'quick/full':>10}")
    for k in sorted(best["full"]):
        q, f = best["quick"].get(k), best["full"][k]
        ratio = q / f if q else float("nan")
        good = q is not None and abs(ratio - 1) <= TOLERANCE
        ok &= good
        print(f"{k:28} {q or 0:12.4g} {f:12.4g} {ratio:10.3f} {'ok' if good else 'OFF'}")
    per = {mode: f"{t / rounds:.1f} s" for mode, t in took.items()}
    print(f"time per round: quick {per['quick']}, full {per['full']}")
    return ok


def time_report() -> None:
    with tempfile.TemporaryDirectory() as folder:
        page = Path(folder) / "r.html"
        env = {**os.environ, "CEILING_PROFILE": str(Path(folder) / "default.json")}
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "ceiling", "report", "--quick", "-o", str(page), "--json"]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
        wall = time.perf_counter() - t0
        record = json.loads(proc.stdout)
    sections = sum(s["elapsed_s"] for s in record["sections"])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"ceiling report --quick: {wall:.1f} s wall, sections alone {sections:.1f} s, "
          f"load average {load:.1f} on {os.cpu_count()} CPUs")  # fmt: skip
    for s in record["sections"]:
        print(f"  {s['key']:10} {s['elapsed_s']:6.1f} s  {s['status']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--report", action="store_true", help="also time the quick report")
    args = parser.parse_args()
    ok = compare(args.rounds)
    if args.report:
        time_report()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
