"""Reading a job's folder of rank traces: one rank after another vs a pool of worker processes.

    .venv/bin/python benchmarks/trace_many_ranks.py [--ranks 64] [--workers N] [--source FILE]

Builds --ranks rank files from one real trace (tests/data/traces-real: a rank of a 128-rank
recommendation model recorded by others): each copy gets its own rank number, a clock offset
and durations perturbed by up to ±5 % (a fixed seed), so that no two ranks are the same. Then
it times `ceiling.trace` on the folder with workers=1 and with --workers (default: one per
core) in fresh processes, checks that both give the same answer, and prints the speedup and
each run's peak memory. On a 2-core machine the speedup is at most 2.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "data" / "traces-real" / "sampled_2rank" / "rank-0.json.gz"


def build(folder: Path, ranks: int, source: Path) -> None:
    with gzip.open(source, "rt") as f:
        doc = json.load(f)
    rng = random.Random(0)
    for r in range(ranks):
        offset = rng.uniform(0, 5000.0)  # µs
        events = []
        for e in doc["traceEvents"]:
            e = dict(e)
            if "ts" in e:
                e["ts"] = float(e["ts"]) + offset
            if "dur" in e:
                e["dur"] = float(e["dur"]) * rng.uniform(0.95, 1.05)
            events.append(e)
        out = {**doc, "traceEvents": events}
        out["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": r, "world_size": ranks}
        with gzip.open(folder / f"rank-{r}.json.gz", "wt") as f:
            json.dump(out, f)


CHILD = """
import json, resource, sys, time
from ceiling.trace.analyze import analyze
t0 = time.perf_counter()
r = analyze(sys.argv[1], workers=int(sys.argv[2]))
wall = time.perf_counter() - t0
peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
           resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) * 1024
print(json.dumps({"wall_s": wall, "peak_bytes": peak,
                  "steps": [round(x.step_s, 9) for x in r.ranks]}))
"""


def run(folder: Path, workers: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(folder), str(workers)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--source", type=Path, default=SOURCE)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        build(folder, args.ranks, args.source)
        size = sum(f.stat().st_size for f in folder.iterdir())
        serial = run(folder, 1)
        pooled = run(folder, args.workers)
    assert serial["steps"] == pooled["steps"], "the pool gave another answer"
    print(f"{args.ranks} ranks from {args.source.name} ({size / 1e6:.1f} MB compressed)")
    print(f"  serial:     {serial['wall_s']:.2f} s, peak {serial['peak_bytes'] / 2**20:.0f} MiB")
    print(
        f"  {args.workers} workers:  {pooled['wall_s']:.2f} s, "
        f"peak {pooled['peak_bytes'] / 2**20:.0f} MiB per process"
    )
    print(f"  speedup: {serial['wall_s'] / pooled['wall_s']:.2f}x on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
