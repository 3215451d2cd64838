"""`ceiling trace` on traces torch.profiler records here: a CPU training step (FLOPs as
`ceiling profile` counts them) and a two-rank gloo run with a deliberate straggler."""

from __future__ import annotations

import json
import time

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule

from ceiling.trace.analyze import analyze

STRAGGLER_SLEEP_S = 0.5  # long beside the scheduling noise of a busy 2-core machine
DELAY = "deliberate delay"


def record(step, path, active: int = 2) -> None:
    """One warm-up step, then `active` recorded ones, written to `path`."""
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        schedule=schedule(wait=0, warmup=1, active=active),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(active + 1):
            step()
            prof.step()


def profiler_steps(path) -> list[float]:
    events = json.loads(path.read_text())["traceEvents"]
    return [e["dur"] * 1e-6 for e in events if e.get("name", "").startswith("ProfilerStep#")]


@pytest.mark.slow
def test_cpu_training_step_counts_the_flops_profile_counts(tmp_path):
    from ceiling.profile.recorder import OpRecorder
    from ceiling.profile.runner import StepRunner
    from ceiling.profile.targets import load_target

    workload = load_target("gpt:tiny", batch=1, seq=32)  # small: the count, not the speed
    runner = StepRunner(workload, torch.device("cpu"), torch.float32, train=True)
    with OpRecorder() as rec:
        runner.step(rec)
    path = tmp_path / "gpt.json"
    record(runner.step, path)
    rank = analyze(path).ranks[0]
    assert rank.model_flops_per_step == pytest.approx(rec.model_flops(), rel=0.01)
    assert rank.steps[0].hardware_flops == pytest.approx(rec.hardware_flops(), rel=0.01)
    spans = profiler_steps(path)
    assert [s.wall_s for s in rank.steps] == pytest.approx(spans, rel=1e-6)
    for s in rank.steps:
        assert sum(s.seconds.values()) == pytest.approx(s.wall_s)
        assert sum(s.host_seconds.values()) == pytest.approx(s.wall_s)
    matmuls = [o for o in rank.ops if o.category == "matmul"]
    assert matmuls and all(o.flops and o.flops > 0 and o.time_s > 0 for o in matmuls)


def test_cpu_trace_on_a_spec_has_mfu(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    x = torch.randn(32, 64)

    def step():
        model(x).sum().backward()

    path = tmp_path / "mlp.json"
    record(step, path)
    r = analyze(path, spec="h100-sxm")
    rank = r.ranks[0]
    fwd = 2 * 32 * (64 * 256 + 256 * 8)
    # backward: the weight gradients of both layers and the input gradient of the second
    expected = fwd + 2 * 32 * (64 * 256 + 256 * 8) + 2 * 32 * 256 * 8
    assert rank.model_flops_per_step == pytest.approx(expected)
    assert rank.mfu == pytest.approx(expected / rank.step_s / r.device.peak_flops_per_s)


def _straggler_worker(rank: int, world: int, store: str, out: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    grads = torch.ones(4096)
    layer = torch.nn.Linear(32, 32)

    def step():
        layer(torch.randn(8, 32)).sum()
        if rank == 1:
            with torch.profiler.record_function(DELAY):  # the sleep as it really lasted
                time.sleep(STRAGGLER_SLEEP_S)
        dist.all_reduce(grads)

    try:
        record(step, f"{out}/rank{rank}.json", active=3)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_rank_gloo_straggler_is_named_with_its_delay(tmp_path, cli):
    import torch.multiprocessing as mp

    folder = tmp_path / "run"
    folder.mkdir()
    # forked: the workers start with torch already imported (seconds saved on 2 cores)
    args = (2, str(tmp_path / "store"), str(folder))
    mp.start_processes(_straggler_worker, args=args, nprocs=2, start_method="fork")
    r = analyze(folder)
    c = r.cross
    assert c.straggler == 1
    slept = json.loads((folder / "rank1.json").read_text())["traceEvents"]
    slept = [e["dur"] * 1e-6 for e in slept if e.get("name") == DELAY]
    assert len(slept) == 3
    assert c.straggler_delay_s == pytest.approx(sum(slept) / len(slept), rel=0.05)
    # rank 0 spends the sleep waiting in the all-reduce: exposed communication
    rank0 = r.ranks[0]
    assert rank0.mean("communication (exposed)") > 0.8 * STRAGGLER_SLEEP_S
    (row,) = c.collectives
    assert row.op == "all_reduce" and row.bytes == 4096 * 4 and row.calls == 3
    code, out, err = cli("trace", folder)
    assert code == 0, err
    assert "straggler: rank 1" in " ".join(out.split())


def test_a_cpu_trace_recorded_here_uses_this_machines_profile(tmp_path, monkeypatch):
    from ceiling.hardware.profile import MachineProfile, MeasuredDevice, save_profile

    dev = MeasuredDevice(
        name="Test CPU",
        kind="cpu",
        peak_flops_per_s={"fp32": 100e9},
        bandwidth_bytes_per_s=10e9,
        memory_bytes=2**34,
    )
    path = save_profile(
        MachineProfile(1, "2026-01-01T00:00:00+00:00", "here", {}, [dev]), tmp_path / "profile.json"
    )
    monkeypatch.setenv("CEILING_PROFILE", str(path))
    layer = torch.nn.Linear(64, 64)
    x = torch.randn(16, 64)
    trace = tmp_path / "t.json"
    record(lambda: layer(x), trace)
    r = analyze(trace)
    # the roof is the profile's measured rate; MFU is against this CPU's theoretical peak
    from ceiling.hardware.cpu import detect_cpu

    theory = detect_cpu().peak_flops_per_s["fp32"]
    assert r.device.name.startswith("Test CPU") and r.device.peak_flops_per_s == theory
    assert r.device.measured_peaks_flops_per_s == {"fp32": 100e9}
    assert r.ranks[0].mfu == pytest.approx(2 * 16 * 64 * 64 / r.ranks[0].step_s / theory)
    doc = json.loads(trace.read_text())
    doc["host_name"] = "elsewhere"
    trace.write_text(json.dumps(doc))
    assert analyze(trace).device.name is None
