"""Wall time of a gpt:tiny training step with and without the op recorder, side by side.

    .venv/bin/python benchmarks/recorder_overhead.py [--steps 5] [--batch 2] [--seq 128]

Runs plain, recorded (FLOPs and bytes only) and recorded with per-op time steps in
alternation, so load on a shared machine hits all three alike, and prints the ratios of the
medians and of the minima (the least disturbed runs). The recorder costs a fixed amount per
op call (a Python dispatch and the counting), so the ratio is largest for small models with
many short ops.
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier)")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)

    from ceiling.profile.recorder import OpRecorder
    from ceiling.profile.runner import StepRunner
    from ceiling.profile.targets import load_target

    workload = load_target("gpt:tiny", batch=args.batch, seq=args.seq)
    runner = StepRunner(workload, torch.device("cpu"), torch.float32, train=True)
    runner.step()  # warm-up: optimizer state, allocator

    def plain() -> None:
        runner.step()

    def counted() -> None:
        with OpRecorder() as rec:
            runner.step(rec)

    def timed() -> None:
        with OpRecorder(time_ops=True) as rec:
            runner.step(rec)

    samples: dict[str, list[float]] = {"plain": [], "recorded": [], "recorded + op time": []}
    fns = {"plain": plain, "recorded": counted, "recorded + op time": timed}
    for _ in range(args.steps):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t0)
    with OpRecorder() as rec:
        runner.step(rec)
    base = statistics.median(samples["plain"])
    print(f"gpt:tiny training step, batch {args.batch} × {args.seq} tokens, {len(rec.calls)} ops")
    best = min(samples["plain"])
    for name, values in samples.items():
        med, low = statistics.median(values), min(values)
        print(
            f"{name:>20}: median {med * 1e3:8.1f} ms ({med / base:5.2f}× plain)   "
            f"min {low * 1e3:8.1f} ms ({low / best:5.2f}× plain)"
        )


if __name__ == "__main__":
    main()
