"""The critical path of each profiler step: ceiling beside Holistic Trace Analysis.

    .venv/bin/python benchmarks/critical_path_vs_hta.py [--hta-python PATH] [FILES...]

For every `ProfilerStep#N` of each trace (default: the stepped real traces in
tests/data/traces-real), three lengths: HTA 0.5.0's `critical_path_analysis(rank,
"ProfilerStep", i)` (the sum of its critical path's edges), ceiling's on the same window
(from the host step's start to the end of the device work launched in it, HTA's window), and
ceiling's on its own step window (the GPU step: from the previous step's GPU end to this
one's). HTA is not a dependency of ceiling: give the Python of an environment that has it.

Measured 2026-12-05, HTA 0.5.0 (ms; the last column: ceiling on HTA's window over HTA):

trace, step                          HTA       ceiling, HTA window   ceiling, GPU step
a100_ddp_nccl_rank0 ProfilerStep#4   101.646   101.892               —        +0.24 %
a100_ddp_nccl_rank0 ProfilerStep#5   101.398   101.657               101.682  +0.26 %
v100_bmm_rank1 ProfilerStep#2        238.893   238.896               —        +0.00 %
v100_bmm_rank1 ProfilerStep#3        252.853   252.863               252.863  +0.00 %
v100_bmm_rank1 ProfilerStep#4        238.688   238.678               238.678  -0.00 %
v100_bmm_rank1 ProfilerStep#5        239.396   239.384               239.384  -0.00 %
sampled_2rank/rank-0 ProfilerStep#551 267.581  267.580               —        -0.00 %
mi250_minitoy_rocm6 ProfilerStep#1   7.448     7.452                 7.452    +0.06 %

Time on the same machine (2 cores, shared), v100_bmm_rank1 (216k events): HTA loads the trace
in 9.7 s and finds 4 steps' critical paths in 17.6 s; ceiling reads and analyses it in 6.3 s,
13.5 s with the critical paths of its 5 steps, 15.5 s with two what-if questions on each.

HTA gives no path for each trace's last step and none for the PyTorch 1.8 ResNet-50 (it fails
on that trace); on the MI250 its instance 1 is not ProfilerStep#2 (an empty 49 µs span for
ceiling: HTA counts the GPU-side copy of the annotation among the instances). Both tools give
a thread's time outside every recorded op, and a blocking call's own span, no weight, and
link a kernel to what released it (its launch on an idle stream, else the kernel before it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "data" / "traces-real"
STEPPED = [
    "a100_ddp_nccl_rank0.json.gz",
    "v100_bmm_rank1.json.gz",
    "sampled_2rank/rank-0.json.gz",
    "v100_resnet50_kineto_pt18.json.gz",
    "mi250_minitoy_rocm6.json.gz",
]

HTA = """
import json, logging, os, sys, warnings
logging.disable(logging.CRITICAL); warnings.filterwarnings("ignore")
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
rank = next(iter(a.t.traces))
out = []
for i in range(int(sys.argv[2])):
    try:
        g, ok = a.critical_path_analysis(rank=rank, annotation="ProfilerStep", instance_id=i)
    except Exception as exc:
        out.append(None); continue
    out.append(sum(e.weight for e in g.critical_path_edges_set) * 1e-6 if ok else None)
print(json.dumps(out))
"""


def hta_lengths(python: str, path: Path, steps: int) -> list:
    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(path, Path(folder) / ("rank-0.json" + (".gz" if path.suffix == ".gz" else "")))
        out = subprocess.run(
            [python, "-c", HTA, folder, str(steps)], capture_output=True, text=True, timeout=3600
        )
    if out.returncode:
        print(out.stderr[-2000:], file=sys.stderr)
        return [None] * steps
    return json.loads(out.stdout.strip().splitlines()[-1])


def ceiling_lengths(path: Path) -> list[tuple[str, float, float | None]]:
    """(step, ceiling on HTA's window, ceiling on its own GPU step or None if not analysed)."""
    from ceiling.trace.analyze import analyze
    from ceiling.trace.rank_summary import Prepared
    from ceiling.trace.reader import read_trace
    from ceiling.trace.step_paths import step_paths

    own = {s.name: s.critical_path.length_s for s in _steps(analyze(path, critical_path=True))}
    p = Prepared.of(read_trace(path))
    t, links = p.trace, p.links
    windows = []
    for s in t.steps:
        ends = [e.end_s for e in t.device_events if s.start_s <= links.launched_at(e) < s.end_s]
        windows.append((s.start_s, max([s.end_s, *ends])))
    paths = step_paths(t, windows, [], {}, [])
    return [(s.name, cp.length_s, own.get(s.name)) for s, cp in zip(t.steps, paths, strict=True)]


def _steps(result):
    return [s for s in result.ranks[0].steps if s.critical_path is not None]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--hta-python", help="a Python with HolisticTraceAnalysis installed")
    args = ap.parse_args()
    files = args.files or [REAL / f for f in STEPPED]
    print(f"{'trace, step':48} {'HTA':>10} {'ceiling, HTA window':>20} {'ceiling, GPU step':>18}")
    for f in files:
        rows = ceiling_lengths(f)
        hta = hta_lengths(args.hta_python, f, len(rows)) if args.hta_python else [None] * len(rows)
        for (name, same, own), h in zip(rows, hta, strict=True):
            cells = [_ms(h), _ms(same), _ms(own)]
            diff = f"  {same / h - 1:+.2%}" if h else ""
            label = f"{f.name[:30]} {name}"
            print(f"{label:48} {cells[0]:>10} {cells[1]:>20} {cells[2]:>18}{diff}")


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{x * 1e3:.3f} ms"


if __name__ == "__main__":
    main()
