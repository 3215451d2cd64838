"""A model's step eager and compiled (torch.compile), each measured and predicted: the
eager step from its recorded ops, the compiled one from its kernels (the bytes each fused
kernel moves, the FLOPs of each library call, at this machine's roofs, plus host cost and
the eager ops outside the compiled graphs). Prints, per target, the measured and
predicted step of both and the compiled step's parts; the load average before and after
(on a shared machine the measured steps carry other processes' load). Compiling takes
tens of seconds a model on a CPU. Usage:

    .venv/bin/python benchmarks/compiled_vs_eager.py [--targets gpt:tiny,mlp] [--train]
        [--batch N] [--seq N] [--steps 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import os

import torch

from ceiling.profile.run import profile_target


def _ms(s: float | None) -> str:
    return "—" if s is None else f"{s * 1e3:9.3f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", default="gpt:tiny,mlp")
    parser.add_argument("--train", action="store_true")
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--seq", type=int, default=None)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"load average before: {os.getloadavg()[0]:.2f}; torch threads {args.threads}")
    for target in args.targets.split(","):
        options = dict(train=args.train, batch=args.batch, seq=args.seq, steps=args.steps)
        runs = {m: profile_target(target, compile=m == "compiled", **options)
                for m in ("eager", "compiled")}  # fmt: skip
        eager, compiled = runs["eager"], runs["compiled"]
        step = compiled.compiled_step
        what = "training step" if args.train else "forward pass"
        print(f"\n{target} ({what}, {eager.samples_per_step} samples)")
        for name, r, predicted in (
            ("eager", eager, eager.explanation.prediction.time_s),
            ("compiled", compiled, step.predicted_step_s),
        ):
            ratio = predicted / r.step_s if r.step_s else float("nan")
            print(f"  {name:9s} measured {_ms(r.step_s)}  predicted {_ms(predicted)}  "
                  f"predicted/measured {ratio:.2f}")  # fmt: skip
        print(f"  compiled parts (measured in one profiled step / predicted): "
              f"kernels {_ms(step.kernel_s)} / {_ms(step.predicted_kernel_s)}; "
              f"host {_ms(step.host_s)} / {_ms(step.predicted_host_s)}; "
              f"eager outside {_ms(step.outside_s)} / {_ms(step.predicted_outside_s)}; "
              f"{len(step.kernels)} kernels, {step.frames} frame(s), "
              f"{step.generated_bytes / 1e6:.3g} MB through fused kernels")  # fmt: skip
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
