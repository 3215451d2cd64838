"""Peak memory of `ceiling trace FOLDER` over a job's rank files: one rank after another vs a
pool of worker processes.

    .venv/bin/python benchmarks/trace_pool_memory.py [--ranks 32] [--workers 1,2,4]
        [--source FILE] [--out results/trace_pool_memory.json]

Builds --ranks rank files from one real trace (default: tests/data/traces-real's ResNet-50
trace, recorded with shapes; 30 MB of JSON): each copy the source with its own
`distributedInfo.rank`. Then it runs the command line on the folder once for each --workers
(1: one rank after another, in one process) and samples the whole process tree (the command,
its workers, the resource tracker) every 50 ms: the peak of the sum of the processes'
resident memory (RSS: pages two processes share counted in each) and of their proportional
set size (PSS: shared pages split between them), with the run's wall time and the CPU time
of all its processes (as last sampled). Every run must give the same ranks' step times. The
figures and each run's ratio to the serial one go to --out.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "data" / "traces-real" / "v100_resnet50_kineto_pt18.json.gz"
OUT = ROOT / "results" / "trace_pool_memory.json"
SAMPLE_S = 0.05


def build(folder: Path, ranks: int, source: Path) -> int:
    """`ranks` copies of `source`, each naming its rank in a header field added last (the
    last of a repeated key counts); the bytes of JSON each holds."""
    text = gzip.decompress(source.read_bytes()).decode().rstrip()
    assert text.endswith("}"), "the source is a JSON object"
    for r in range(ranks):
        rank = json.dumps({"rank": r, "world_size": ranks})
        with gzip.open(folder / f"rank-{r:03d}.json.gz", "wt", compresslevel=1) as f:
            f.write(f'{text[:-1]},\n"distributedInfo": {rank}}}')
    return len(text)


class TreeSampler(threading.Thread):
    """The peak sums of RSS and PSS over a process and its descendants, and the CPU seconds
    each process was last seen to have used."""

    def __init__(self, proc: psutil.Process) -> None:
        super().__init__(daemon=True)
        self.proc, self.rss, self.pss, self.processes = proc, 0, 0, 0
        self.cpu: dict[int, float] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            rss = pss = 0
            try:
                tree = [self.proc, *self.proc.children(recursive=True)]
            except psutil.Error:
                break
            for p in tree:
                try:
                    m = p.memory_full_info()
                    times = p.cpu_times()
                except psutil.Error:  # ended between listing and reading
                    continue
                self.cpu[p.pid] = times.user + times.system
                rss, pss = rss + m.rss, pss + m.pss
            self.rss, self.pss = max(self.rss, rss), max(self.pss, pss)
            self.processes = max(self.processes, len(tree))
            self.done.wait(SAMPLE_S)


def run(folder: Path, workers: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, "-m", "ceiling", "trace", str(folder), "--workers", str(workers)]
    with tempfile.TemporaryFile("w+") as out:
        t0 = time.perf_counter()
        proc = psutil.Popen([*cmd, "--json"], stdout=out, stderr=subprocess.PIPE, env=env)
        sampler = TreeSampler(proc)
        sampler.start()
        _, err = proc.communicate()
        wall = time.perf_counter() - t0
        sampler.done.set()
        sampler.join()
        if proc.returncode != 0:
            raise SystemExit(f"workers={workers}: exit {proc.returncode}: {err.decode()[-2000:]}")
        out.seek(0)
        ranks = json.load(out)["ranks"]
    return {
        "workers": workers,
        "peak_rss_sum_bytes": sampler.rss,
        "peak_pss_sum_bytes": sampler.pss,
        "most_processes": sampler.processes,
        "wall_s": round(wall, 2),
        "cpu_s": round(sum(sampler.cpu.values()), 2),
        "steps_s": [r["step_s"] for r in ranks],
    }


def machine() -> str:
    """The CPU model, the cores and the memory the figures were taken on."""
    model = next(
        (line.split(":", 1)[1].strip() for line in _lines("/proc/cpuinfo") if "model name" in line),
        platform.processor() or platform.machine(),
    )
    memory = psutil.virtual_memory().total / 2**30
    system = f"{platform.system()} {platform.release()}"
    return f"{model}, {os.cpu_count()} cores, {memory:.0f} GiB, {system}"


def _lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=32)
    ap.add_argument("--workers", default="1,2,4", help="comma-separated; 1 is the serial run")
    ap.add_argument("--source", type=Path, default=SOURCE)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    if counts[0] != 1:
        counts.insert(0, 1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        json_bytes = build(folder, args.ranks, args.source)
        runs = [run(folder, w) for w in counts]
    serial, steps = runs[0], runs[0]["steps_s"]
    for r in runs:
        assert r.pop("steps_s") == steps, f"workers={r['workers']} gave another answer"
        r["rss_over_serial"] = round(r["peak_rss_sum_bytes"] / serial["peak_rss_sum_bytes"], 2)
        r["pss_over_serial"] = round(r["peak_pss_sum_bytes"] / serial["peak_pss_sum_bytes"], 2)
        print(
            f"workers={r['workers']}: peak RSS sum {r['peak_rss_sum_bytes'] / 2**20:.0f} MiB "
            f"({r['rss_over_serial']}x serial), PSS sum {r['peak_pss_sum_bytes'] / 2**20:.0f} "
            f"MiB ({r['pss_over_serial']}x), {r['most_processes']} processes, {r['wall_s']} s, "
            f"{r['cpu_s']} s of CPU"
        )
    record = {
        "source": args.source.name,
        "ranks": args.ranks,
        "rank_json_bytes": json_bytes,
        "cpu_count": os.cpu_count(),
        "machine": machine(),
        "python": platform.python_version(),
        "bound": "the process tree within 2x the serial read: ranks go to workers only while "
        "a memory budget allows, the rest read by the command's own process",
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
