"""A trace -> calibrated plan on this machine: a gpt:tiny training step recorded on the CPU,
then planned for the same model, batch, sequence and layout (one device) with and without
`calibrate=` that trace, each beside the traced step and its busy time (the step less its
idle gaps). The peak and bandwidth of this CPU's spec cancel, so the ratios hold at any speed;
`tests/test_trace_calibrated_plan.py` asserts them within its tolerance.

    PYTHONPATH=src .venv/bin/python benchmarks/calibrated_plan_vs_trace.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # no profiler start/stop lines on stderr

import ceiling
from ceiling.hardware.resolve import this_machine
from ceiling.hardware.spec_template import spec_to_toml
from ceiling.trace.analyze import analyze
from ceiling.workloads.gpt import build_gpt, preset_config

MODEL, BATCH, SEQ = "gpt:tiny", 2, 64


def _record(path: Path) -> None:
    model = build_gpt(MODEL)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, preset_config(MODEL).vocab, (BATCH, SEQ))
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        schedule=schedule(wait=0, warmup=1, active=2),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(3):
            _, loss = model(tokens, tokens)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            prof.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="ceiling-calibrate-"))
    os.environ["CEILING_PROFILE"] = str(folder / "no-profile.json")
    spec = folder / "this-cpu.toml"
    spec.write_text(spec_to_toml(this_machine("cpu", read_bandwidth=lambda: 20e9).spec))
    torch.set_num_threads(1)
    same = dict(spec=str(spec), global_batch=BATCH, seq=SEQ, dtype="fp32", fixed="d=1,t=1,p=1,b=2")
    plain = ceiling.plan(MODEL, 1, **same).best.step_time_s
    for k in range(args.runs):
        path = folder / f"gpt-{k}.json"
        _record(path)
        rank = analyze(path, spec=str(spec)).ranks[0]
        busy = sum(s.wall_s - s.seconds.get("idle", 0.0) for s in rank.steps) / len(rank.steps)
        cal = ceiling.plan(MODEL, 1, calibrate=path, **same).best.step_time_s
        print(
            f"run {k + 1}: traced step {rank.step_s * 1e3:.1f} ms, busy {busy * 1e3:.1f} ms; "
            f"calibrated plan {cal * 1e3:.1f} ms ({cal / busy:.2f} of busy, "
            f"{cal / rank.step_s:.2f} of the step); catalog defaults {plain * 1e3:.1f} ms "
            f"({plain / busy:.2f} of busy)"
        )
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
