"""Reading a large torch.profiler trace: wall time and peak memory, against the budget of
20 s and 4 GB for a 200 MB file on a 2-core machine.

    .venv/bin/python benchmarks/trace_read_speed.py [--mb 200] [--analyze] [--keep FILE]

Writes a synthetic Kineto trace of about --mb MB (CUDA-format training steps: cpu_ops with
recorded shapes, runtime launches, kernels with grid/block/stream, NCCL kernels, memcpy,
python_function events that the reader skips), then reads it in a fresh process and prints
the wall time and the process's peak resident memory. With --analyze, the whole analysis
(`ceiling.trace`) is timed as well.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

BUDGET_S, BUDGET_BYTES = 20.0, 4e9

_OPS = [
    (
        "aten::addmm",
        [[4096], [8, 4096], [4096, 4096], [], []],
        ["c10::BFloat16"] * 3 + ["Scalar"] * 2,
    ),
    ("aten::add", [[8, 4096], [8, 4096], []], ["c10::BFloat16", "c10::BFloat16", "Scalar"]),
    ("aten::mul", [[8, 4096], []], ["c10::BFloat16", "Scalar"]),
    (
        "aten::native_layer_norm",
        [[8, 4096], [4096], [4096], [], []],
        ["c10::BFloat16"] * 3 + ["", "Scalar"],
    ),
]


def _events(n_steps: int, ops_per_step: int):
    ts, ext, corr = 1_000_000.0, 0, 0
    for step in range(n_steps):
        start = ts
        for i in range(ops_per_step):
            name, dims, types = _OPS[i % len(_OPS)]
            ext, corr = ext + 1, corr + 1
            yield {
                "ph": "X",
                "cat": "python_function",
                "name": "nn.Module: Linear_0",
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": 9.0,
                "args": {"Python id": ext},
            }
            yield {
                "ph": "X",
                "cat": "cpu_op",
                "name": name,
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": 8.0,
                "args": {
                    "External id": ext,
                    "Record function id": 0,
                    "Input Dims": dims,
                    "Input type": types,
                    "Concrete Inputs": [""] * len(dims),
                    "Ev Idx": ext,
                },
            }
            yield {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": ts + 2,
                "dur": 4.0,
                "args": {"External id": ext, "cbid": 211, "correlation": corr},
            }
            kname = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL" if i % 50 == 49 else "sm90_gemm"
            yield {
                "ph": "X",
                "cat": "kernel",
                "name": kname,
                "pid": 0,
                "tid": 7,
                "ts": ts + 6,
                "dur": 5.0,
                "args": {
                    "External id": ext,
                    "device": 0,
                    "stream": 7,
                    "correlation": corr,
                    "registers per thread": 128,
                    "shared memory": 49152,
                    "grid": [132, 1, 1],
                    "block": [384, 1, 1],
                    "est. achieved occupancy %": 12,
                },
            }
            ts += 10.0
        yield {
            "ph": "X",
            "cat": "user_annotation",
            "name": f"ProfilerStep#{step}",
            "pid": 1,
            "tid": 1,
            "ts": start,
            "dur": ts - start,
            "args": {"External id": 0},
        }
    yield {
        "ph": "X",
        "cat": "gpu_memcpy",
        "name": "Memcpy HtoD",
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": 5.0,
        "args": {"device": 0, "stream": 7, "bytes": 1 << 20},
    }


def write_trace(path: str, megabytes: float) -> int:
    """A synthetic trace of about `megabytes` MB; returns its size in bytes."""
    per_op = 850  # bytes of JSON per op (four events)
    ops = int(megabytes * 1e6 / per_op)
    steps = max(ops // 5000, 1)
    with open(path, "w") as f:
        f.write(
            '{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": '
            '"NVIDIA H100 80GB HBM3"}], "record_shapes": 1,\n"traceEvents": [\n'
        )
        first = True
        for e in _events(steps, 5000):
            f.write(("" if first else ",\n") + json.dumps(e))
            first = False
        f.write('\n], "traceName": "synthetic"}\n')
    return os.path.getsize(path)


def _child(path: str, analyze: bool) -> None:
    t0 = time.perf_counter()
    from ceiling.trace.reader import read_trace

    trace = read_trace(path)
    read_s = time.perf_counter() - t0
    out = {"read_s": read_s, "events_kept": len(trace.events)}
    if analyze:
        from ceiling.trace.analyze import analyze as run

        del trace
        t1 = time.perf_counter()
        run(path)
        out["analyze_s"] = time.perf_counter() - t1
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=200.0)
    parser.add_argument("--analyze", action="store_true")
    parser.add_argument("--keep", metavar="FILE", help="write the trace here and keep it")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.analyze)
        return
    path = args.keep or tempfile.mktemp(suffix=".json")
    try:
        size = write_trace(path, args.mb)
        cmd = [sys.executable, __file__, "--child", path] + (["--analyze"] if args.analyze else [])
        res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    finally:
        if not args.keep and os.path.exists(path):
            os.remove(path)
    print(f"trace: {size / 1e6:.0f} MB, {res['events_kept']:,} events kept")
    print(f"read: {res['read_s']:.1f} s (budget {BUDGET_S:.0f} s for 200 MB)")
    if "analyze_s" in res:
        print(f"analysis after reading: {res['analyze_s']:.1f} s")
    print(f"peak memory: {res['peak_rss_bytes'] / 1e9:.2f} GB (budget {BUDGET_BYTES / 1e9:.0f} GB)")


if __name__ == "__main__":
    main()
