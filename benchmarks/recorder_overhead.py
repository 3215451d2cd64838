"""Wall time of one training step plain, under the op recorder, under torch's
FlopCounterMode and under torch.profiler, side by side on the same step.

    .venv/bin/python benchmarks/recorder_overhead.py [--model gpt:tiny|gpt:small|clip]
        [--steps 7]

`gpt:tiny` and `gpt:small` (GPT-2's 124M) are the catalog models (batch × seq tokens);
`clip` a CLIP-like model built from a small transformers config (two towers of 4 layers,
width 128; needs transformers). The modes run in alternation, so load on a shared machine
hits them alike; the ratios are of the medians and of the minima (the least disturbed
runs). The recorder counts FLOPs, bytes and module paths; FlopCounterMode FLOPs and module
paths only; the profiler records each op's time. "+ op time" also times each op (a device
sync around each).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable


def _gpt_step(model: str, batch: int, seq: int) -> Callable[[Callable[[], object]], None]:
    import torch

    from ceiling.profile.runner import StepRunner
    from ceiling.profile.targets import load_target

    workload = load_target(model, batch=batch, seq=seq)
    runner = StepRunner(workload, torch.device("cpu"), torch.float32, train=True)
    runner.step()  # warm-up: optimizer state, allocator
    return runner.step


def _clip_step(batch: int, seq: int):
    import torch
    import transformers

    tower = dict(hidden_size=128, intermediate_size=512, num_hidden_layers=4)
    tower["num_attention_heads"] = 4
    config = transformers.CLIPConfig(
        text_config=dict(vocab_size=1000, max_position_embeddings=seq, **tower),
        vision_config=dict(image_size=64, patch_size=16, **tower),
        projection_dim=64,
    )
    torch.manual_seed(0)
    model = transformers.CLIPModel(config)
    ids, pixels = torch.randint(0, 1000, (batch, seq)), torch.randn(batch, 3, 64, 64)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(recorder=None) -> None:
        opt.zero_grad(set_to_none=True)
        model(input_ids=ids, pixel_values=pixels, return_loss=True).loss.backward()
        opt.step()

    step()
    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["gpt:tiny", "gpt:small", "clip"], default="gpt:tiny")
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--batch", type=int, default=None, help="default 2 (gpt), 4 (clip)")
    parser.add_argument("--seq", type=int, default=None, help="default 128 (gpt), 32 (clip)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier)")
    args = parser.parse_args()

    import os

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # no profiler start/stop lines on stderr

    from ceiling.profile.recorder import OpRecorder

    torch.set_num_threads(args.threads)
    gpt = args.model.startswith("gpt:")
    batch = args.batch or (2 if gpt else 4)
    seq = args.seq or (128 if gpt else 32)
    step = _gpt_step(args.model, batch, seq) if gpt else _clip_step(batch, seq)

    def counted() -> None:
        with OpRecorder() as rec:
            step(rec)

    def timed() -> None:
        with OpRecorder(time_ops=True) as rec:
            step(rec)

    def flop_counter() -> None:
        with FlopCounterMode(display=False):
            step()

    def profiler() -> None:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            step()

    fns = {
        "plain": step,
        "FlopCounterMode": flop_counter,
        "ceiling recorder": counted,
        "ceiling + op time": timed,
        "torch.profiler": profiler,
    }
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(args.steps):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t0)
    with OpRecorder() as rec:
        step(rec)
    base, best = statistics.median(samples["plain"]), min(samples["plain"])
    print(f"{args.model} training step, batch {batch} × {seq}, {len(rec.calls)} ops recorded")
    for name, values in samples.items():
        med, low = statistics.median(values), min(values)
        print(
            f"{name:>18}: median {med * 1e3:8.1f} ms ({med / base:5.2f}× plain)   "
            f"min {low * 1e3:8.1f} ms ({low / best:5.2f}× plain)"
        )
    ours, theirs = samples["ceiling recorder"], samples["FlopCounterMode"]
    print(
        f"ceiling recorder / FlopCounterMode: median "
        f"{statistics.median(ours) / statistics.median(theirs):.2f}×, "
        f"min {min(ours) / min(theirs):.2f}×"
    )
    per_op = (statistics.median(ours) - base) / max(len(rec.calls), 1)
    print(f"recorder cost per op: {per_op * 1e6:.0f} µs (median step less plain, over ops)")


if __name__ == "__main__":
    main()
