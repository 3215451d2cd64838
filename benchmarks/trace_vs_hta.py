"""`ceiling trace` beside Holistic Trace Analysis on the same files: wall time and peak memory,
each tool in a fresh process, side by side in one run.

    .venv/bin/python benchmarks/trace_vs_hta.py [--hta-python PATH] [--mb 200] [FILES...]

Default files: the real traces in tests/data/traces-real; --mb N adds a synthetic trace of
about N MB (benchmarks/trace_read_speed.py's generator). HTA is not a dependency of ceiling:
give the Python of an environment that has it (`pip install HolisticTraceAnalysis`), else
only ceiling is timed. HTA runs `get_temporal_breakdown` and `get_comm_comp_overlap`;
ceiling runs its whole analysis (steps, ops, kernels, HTA's figures, ranks), twice: with an
empty memo of op costs ("cold": a call no plain-Python rule covers then loads torch to be
replayed) and again with the memo the first read left ("warm").

Measured 2026-12-02 on the 2-core development VM (1-minute load average 1.2-1.4 during
the real traces; the synthetic row from an earlier run at load 4.0), HTA 0.5.0, torch 2.13.
Every op call of these traces is costed in plain Python (`trace.op_rules`), so no read
loads torch and cold equals warm:

trace (s, MiB)                     ceiling cold   ceiling warm   HTA            HTA/ceiling
a100_ddp_nccl_rank0 (no shapes)     1.17    73     1.12    73     2.65   143     2.3x, 2.4x
alexnet_a100_nosteps (no shapes)    0.22    26     0.27    26     1.21    99     5.6x, 4.4x
gp100_gpu_annotations (no shapes)   0.23    27     0.26    27     1.07    99     4.6x, 4.1x
mi250_minitoy_rocm6 (shapes)        0.16    26     0.21    26     1.15    98     7.0x, 5.4x
sampled_2rank (2 files, shapes)     0.53    40     0.65    40     1.87   105     3.5x, 2.9x
v100_bmm_rank1 (216k events)        4.62   188     4.03   188     7.97   333     1.7x, 2.0x
v100_resnet50_kineto_pt18 (shapes)  1.71   152     1.79   152     4.90   206     2.9x, 2.7x
synthetic 200 MB (--mb 200)        71.57  1163    70.50  1164   115.60  1597     1.6x, 1.6x

Before the plain-Python costs, a cold read of a trace with shapes loaded torch to replay
each distinct call (mi250 14.5 s and 303 MiB, sampled_2rank 18.2 s and 331 MiB, ResNet-50
18.7 s and 392 MiB on that machine: 0.27-0.68x HTA's speed). A call no rule covers is still
replayed, once, and kept in the memo.

Since the reader streams a rank's events (1 MiB at a time, repeated names kept once), the
same traces on the same VM (2026-12-05, load 1.4-1.8, ceiling only: HTA was not installed
that day, so its 2026-12-02 figures above stand) read in about the same time and in less
memory: cold 0.71 s / 47 MiB (a100_ddp), 0.50 s / 34 MiB (sampled_2rank), 4.01 s / 124 MiB
(v100_bmm), 1.94 s / 64 MiB (ResNet-50): HTA over ceiling 2.0-3.7x in time and 2.7-3.2x
in memory on those.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "data" / "traces-real"

CEILING = """
import json, resource, sys, time
t0 = time.perf_counter()
from ceiling.trace.analyze import analyze
analyze(sys.argv[1])
print(json.dumps({"wall_s": time.perf_counter() - t0,
                  "peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""

HTA = """
import json, logging, os, resource, shutil, sys, tempfile, time, warnings
logging.disable(logging.CRITICAL); warnings.filterwarnings("ignore")
path = sys.argv[1]
folder = tempfile.mkdtemp()
if os.path.isdir(path):
    for f in os.listdir(path):
        shutil.copy(os.path.join(path, f), folder)
else:
    name = "rank-0.json" + (".gz" if path.endswith(".gz") else "")
    shutil.copy(path, os.path.join(folder, name))
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=folder)
a.get_temporal_breakdown(visualize=False)
a.get_comm_comp_overlap(visualize=False)
print(json.dumps({"wall_s": time.perf_counter() - t0,
                  "peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def _run(python: str, script: str, path: Path, cache: str | None = None) -> dict | None:
    env = dict(os.environ, XDG_CACHE_HOME=cache) if cache else None
    out = subprocess.run(
        [python, "-c", script, str(path)], capture_output=True, text=True, timeout=3600, env=env
    )
    if out.returncode:
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def _cell(r: dict | None) -> str:
    if r is None:
        return f"{'failed':>22}"
    return f"{r['wall_s']:8.2f} s {r['peak_bytes'] / 2**20:7.0f} MiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--hta-python", help="a Python with HolisticTraceAnalysis installed")
    ap.add_argument("--mb", type=float, default=0, help="also a synthetic trace of this size")
    args = ap.parse_args()
    kept = ("README.md", "op_calls.json.gz")  # notes and the list of their calls: no traces
    files = args.files or sorted(p for p in REAL.iterdir() if p.name not in kept)
    with tempfile.TemporaryDirectory() as tmp:
        if args.mb:
            sys.path.insert(0, str(Path(__file__).parent))
            from trace_read_speed import write_trace

            big = Path(tmp) / f"synthetic_{args.mb:g}MB.json"
            write_trace(str(big), args.mb)
            files.append(big)
        print(f"{'trace':34} {'ceiling, cold':>22} {'ceiling, warm':>22} {'HTA':>22}  ratio")
        for f in files:
            cache = tempfile.mkdtemp(dir=tmp)  # an empty memo of op costs for each file
            cold = _run(sys.executable, CEILING, f, cache)
            warm = _run(sys.executable, CEILING, f, cache)
            hta = _run(args.hta_python, HTA, f) if args.hta_python else None
            ratio = "—"
            if cold and warm and hta:
                ratio = (
                    f"{hta['wall_s'] / cold['wall_s']:.2f}x, {hta['wall_s'] / warm['wall_s']:.2f}x"
                )
            load = f"load {os.getloadavg()[0]:.1f}"
            print(f"{f.name[:34]:34} {_cell(cold)} {_cell(warm)} {_cell(hta)}  {ratio}  {load}")
    print("ratio: HTA's time over ceiling's, cold and warm (above 1: ceiling is faster);")
    print(f"load: the 1-minute load average after the row (cores: {os.cpu_count()})")


if __name__ == "__main__":
    main()
