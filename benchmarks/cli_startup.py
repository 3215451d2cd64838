"""Wall time of the fast CLI paths, which must answer in well under half a second.

Runs each command as a fresh process several times (the first run warms the disk cache and
is dropped) and prints the median and the fastest. Usage:

    .venv/bin/python benchmarks/cli_startup.py [--repeats 9]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = [
    ["--help"],
    ["amdahl", "0.95"],
    ["specs", "h100-sxm"],
]
BUDGET_S = 0.5


def ceiling_executable() -> list[str]:
    """The installed console script next to this interpreter, else `python -m ceiling`."""
    script = Path(sys.executable).with_name("ceiling")
    if script.exists():
        return [str(script)]
    found = shutil.which("ceiling")
    return [found] if found else [sys.executable, "-m", "ceiling"]


def time_command(argv: list[str], repeats: int) -> list[float]:
    samples = []
    for i in range(repeats + 1):
        start = time.perf_counter()
        done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-1:] or ["(no message)"]
            raise SystemExit(f"{' '.join(argv)} failed with exit {done.returncode}: {tail[0]}")
        if i:  # the first run only warms caches
            samples.append(elapsed)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    exe = ceiling_executable()
    baseline = time_command([sys.executable, "-c", "pass"], args.repeats)
    print(
        f"{'command':<28} {'median':>9} {'fastest':>9}   (bare python: "
        f"{statistics.median(baseline) * 1e3:.0f} ms median)"
    )
    worst = 0.0
    for cmd in COMMANDS:
        samples = time_command([*exe, *cmd], args.repeats)
        med = statistics.median(samples)
        worst = max(worst, med)
        label = "ceiling " + " ".join(cmd)
        print(f"{label:<28} {med * 1e3:7.0f} ms {min(samples) * 1e3:7.0f} ms")
    verdict = "within" if worst < BUDGET_S else "OVER"
    print(f"slowest median {worst * 1e3:.0f} ms: {verdict} the {BUDGET_S * 1e3:.0f} ms budget")
    return 0 if worst < BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
