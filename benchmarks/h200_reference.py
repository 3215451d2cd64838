"""The reference figures for a GPU validation run, and the checks against them.

Usage (on a CUDA machine, after `ceiling bench --json > bench.json`):
    python3 benchmarks/h200_reference.py --bench bench.json --out summary.json

It times a plain loop of `torch.mm` in bf16 at 8192³ with CUDA events (warm-up first, then
one event pair around each product and one around the whole loop) and sets ceiling's own
figures from bench.json beside it, with the acceptance thresholds for an H200:
bf16 best >= 97 % of the plain loop and >= 740 TFLOP/s, device-to-device copy >= 3.9 TB/s
counting bytes read and written, fp8 reported or its absence explained.
Importable without a GPU: torch is loaded inside the functions.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REFERENCE_SIZE = 8192
MIN_RATIO_TO_PLAIN = 0.97
MIN_BF16_FLOPS_PER_S = 740e12
MIN_D2D_TRAFFIC_BYTES_PER_S = 3.9e12


def plain_mm_loop(
    n: int = REFERENCE_SIZE, dtype: str = "bf16", warmup: int = 10, iters: int = 50
) -> dict[str, Any]:
    """FLOP/s of back-to-back `torch.mm(a, b, out=c)` on random normal operands.

    `best_flops_per_s` comes from the fastest single product (as ceiling's best sample),
    `loop_flops_per_s` from the whole loop between two events (as a training step sees it).
    """
    import torch

    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, n, device="cuda", generator=gen).to(torch_dtype)
    b = torch.randn(n, n, device="cuda", generator=gen).to(torch_dtype)
    c = torch.empty(n, n, device="cuda", dtype=torch_dtype)
    for _ in range(warmup):
        torch.mm(a, b, out=c)
    torch.cuda.synchronize()
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(iters)
    ]
    loop_start = torch.cuda.Event(enable_timing=True)
    loop_end = torch.cuda.Event(enable_timing=True)
    loop_start.record()
    for start, end in events:
        start.record()
        torch.mm(a, b, out=c)
        end.record()
    loop_end.record()
    torch.cuda.synchronize()
    per_call_s = [s.elapsed_time(e) * 1e-3 for s, e in events]
    flops = 2.0 * n**3
    loop_s = loop_start.elapsed_time(loop_end) * 1e-3
    return {
        "what": f"plain torch.mm loop, {dtype}, {n}x{n}x{n}, CUDA events",
        "n": n,
        "dtype": dtype,
        "iters": iters,
        "best_s": min(per_call_s),
        "mean_s": sum(per_call_s) / len(per_call_s),
        "best_flops_per_s": flops / min(per_call_s),
        "loop_flops_per_s": flops * iters / loop_s,
        "device_name": torch.cuda.get_device_name(),
        "torch": torch.__version__,
    }


def _check(value: float | None, threshold: float, what: str) -> dict[str, Any]:
    return {
        "what": what,
        "value": value,
        "threshold": threshold,
        "pass": value is not None and value >= threshold,
    }


def summarize(bench: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """ceiling's figures from a `ceiling bench --json` record beside the reference loop."""
    n = reference["n"]
    rows = [r for r in bench.get("matmul", []) if r["dtype"] == reference["dtype"]]
    same_size = [r for r in rows if (r["m"], r["n"], r["k"]) == (n, n, n)]
    ours = max((r["tflops"] * 1e12 for r in same_size), default=None)
    best_any = max((r["tflops"] * 1e12 for r in rows), default=None)
    fp8 = [r for r in bench.get("matmul", []) if r["dtype"] == "fp8"]
    d2d = [r for r in bench.get("transfer", []) if r["direction"] == "d2d"]
    d2d_traffic = max((r["best_traffic_gbps"] * 1e9 for r in d2d), default=None)
    copy = [r for r in bench.get("memory", []) if r["kernel"] == "copy"]
    ratio = ours / reference["best_flops_per_s"] if ours else None
    return {
        "units": "FLOP/s (multiply-add = 2), bytes/s (GB = 1e9 bytes)",
        "reference": reference,
        "ceiling_bf16_at_reference_size_flops_per_s": ours,
        "ceiling_bf16_best_any_size_flops_per_s": best_any,
        "ceiling_over_plain": ratio,
        "fp8_best_flops_per_s": max((r["tflops"] * 1e12 for r in fp8), default=None),
        "fp8_skipped": bench.get("matmul_skipped", {}).get("fp8"),
        "d2d_copy_bytes_per_s": max((r["best_gbps"] * 1e9 for r in d2d), default=None),
        "d2d_traffic_bytes_per_s": d2d_traffic,
        "stream_copy_bytes_per_s": max((r["best_gbps"] * 1e9 for r in copy), default=None),
        "checks": {
            "bf16_vs_plain_loop": _check(
                ratio, MIN_RATIO_TO_PLAIN, "ceiling bf16 best / plain torch.mm best, same size"
            ),
            "bf16_flops_per_s": _check(ours, MIN_BF16_FLOPS_PER_S, "ceiling bf16 best FLOP/s"),
            "d2d_traffic_bytes_per_s": _check(
                d2d_traffic, MIN_D2D_TRAFFIC_BYTES_PER_S, "device copy, read + write counted"
            ),
            "fp8_reported_or_explained": {
                "what": "fp8 measured, or the reason it was skipped",
                "pass": bool(fp8) or bool(bench.get("matmul_skipped", {}).get("fp8")),
            },
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", type=Path, required=True, help="`ceiling bench --json` output")
    parser.add_argument("--out", type=Path, required=True, help="where to write the summary")
    parser.add_argument("--size", type=int, default=REFERENCE_SIZE)
    args = parser.parse_args(argv)
    try:
        bench = json.loads(args.bench.read_text())
    except (OSError, ValueError) as exc:
        print(f"cannot read {args.bench}: {exc}; the reference loop runs alone", file=sys.stderr)
        bench = {}
    summary = summarize(bench, plain_mm_loop(args.size))
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    for name, check in summary["checks"].items():
        value = check.get("value")
        shown = "" if value is None else f" {value:.4g} (threshold {check['threshold']:.4g})"
        print(f"{'PASS' if check['pass'] else 'FAIL'} {name}:{shown}")
    return 0 if all(c["pass"] for c in summary["checks"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
