"""Serving predictions against published measurements: every case, predicted vs published,
and the median |error| of throughput and of latency figures.

    PYTHONPATH=src python benchmarks/serve_validation.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from serving_cases import medians, rows


def main() -> None:
    start = time.perf_counter()
    table = rows()
    print(f"{'case':48} {'metric':20} {'predicted':>12} {'published':>12} {'error':>8}")
    for case, key, p, value, err in table:
        scale, unit = (1.0, "") if key.endswith("per_s") else (1e3, " ms")
        print(f"{case.name:48} {key:20} {p * scale:>9,.1f}{unit:3} {value * scale:>9,.1f}{unit:3}"
              f" {err * 100:>+7.1f}%")  # fmt: skip
    m = medians(table)
    print(f"median |error|: throughput {m['throughput'] * 100:.1f} %, "
          f"latency {m['latency'] * 100:.1f} %  ({time.perf_counter() - start:.0f} s)")  # fmt: skip


if __name__ == "__main__":
    main()
