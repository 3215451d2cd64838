"""One MFU: `ceiling profile`, `ceiling.MfuMeter` and `ceiling trace` say the same figure for
the same recorded step (model FLOPs over the dense datasheet peak of the dtype the matmuls
ran in, `model.mfu.model_flops_utilisation`), each counting the FLOPs its own way: the op
recorder for the first two, the trace's recorded shapes for the third.

The step is a gpt:tiny training step on this CPU, recorded once by torch.profiler; its
recorded duration is the step time all three are given, so the test compares definitions
and counts, never this machine's speed."""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule

SPEC = "h100-sxm"  # an explicit device: the same peak on any machine


def _record(step, path) -> None:
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        schedule=schedule(wait=0, warmup=1, active=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(2):
            step()
            prof.step()


@pytest.mark.slow
def test_profile_meter_and_trace_agree_on_one_step(tmp_path, monkeypatch):
    import ceiling
    import ceiling.api.meter as meter_module
    from ceiling.hardware.resolve import resolve
    from ceiling.profile.run import profile_target
    from ceiling.profile.runner import StepRunner
    from ceiling.profile.targets import load_target
    from ceiling.trace.analyze import analyze

    # small, and plain SGD: the count, not the speed (AdamW's many small ops only cost time)
    workload = dataclasses.replace(
        load_target("gpt:tiny", batch=1, seq=16),
        make_optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.0, foreach=True),
    )
    runner = StepRunner(workload, torch.device("cpu"), torch.float32, train=True)
    path = tmp_path / "step.json"
    _record(runner.step, path)

    traced = analyze(path, spec=SPEC)
    step = traced.ranks[0].steps[0]
    seconds = step.wall_s
    peak = resolve(SPEC).datasheet_peak("fp32")
    assert traced.device.peak_flops_per_s == peak  # the datasheet's dense fp32 peak
    assert step.mfu == pytest.approx(step.model_flops / seconds / peak, rel=1e-9)

    # ceiling profile, its timed steps lasting the recorded step
    monkeypatch.setattr(StepRunner, "timed_steps", lambda self, n: [seconds] * max(n, 1))
    prof = profile_target(workload, train=True, spec=SPEC, steps=1, warmup_steps=0)
    assert prof.step_s == seconds and prof.ceiling.peak_flops_per_s == peak

    # MfuMeter on the same model, its clock reading the recorded step's duration
    meter = ceiling.MfuMeter(runner.model, spec=SPEC)
    tokens = workload.tokens_per_step
    with meter.step(tokens=tokens):  # the counted step
        runner.step()
    clock = iter([0.0, seconds])
    fake_time = types.SimpleNamespace(perf_counter=lambda: next(clock))
    monkeypatch.setattr(meter_module, "time", fake_time)
    with meter.step(tokens=tokens):
        runner.step()
    assert meter.result().peak_flops_per_s == peak

    assert prof.mfu == pytest.approx(step.mfu, rel=0.02)
    assert meter.mfu == pytest.approx(step.mfu, rel=0.02)
    assert meter.mfu == pytest.approx(prof.mfu, rel=1e-6)  # the same count, the same peak


def test_a_measured_rate_is_of_achievable_never_the_peak():
    from ceiling.model.mfu import model_flops_utilisation, of_achievable

    # 1e12 FLOPs in 1 s on a 4e12 datasheet peak whose machine reaches 2e12
    assert model_flops_utilisation(1e12, 1.0, 4e12) == 0.25
    assert of_achievable(1e12, 1.0, 2e12) == 0.5
    # FLOPs in two dtypes, each at its own peak: 1 s of bf16 time + 1 s of fp32 time over 4 s
    peaks = {"bf16": 2e12, "fp32": 1e12}
    assert model_flops_utilisation({"bf16": 2e12, "fp32": 1e12}, 4.0, peaks.get) == 0.5
    assert model_flops_utilisation({"fp8": 1.0}, 1.0, peaks.get) is None  # no such peak
