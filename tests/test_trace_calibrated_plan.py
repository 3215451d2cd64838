"""A trace → calibrated plan, end to end on one machine: a GPT training step recorded here on
the CPU, then planned for the same model, batch, sequence and layout (one device, d=1) with
`calibrate=` that trace. Both figures come from the same machine in the same minute, so the
test holds whatever the machine's speed: the device's peak and bandwidth cancel (an
efficiency measured against them is multiplied back by them)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import ceiling
from ceiling.trace.analyze import analyze
from test_trace_recorded import record

MODEL, BATCH, SEQ = "gpt:tiny", 2, 64
BANDWIDTH = 20e9  # bytes/s: any figure does, memory efficiency is measured against it

# What the calibrated plan leaves out of the traced step's busy time, each making the trace
# longer (the host's gaps between ops, idle time, are taken out): eager pointwise kernels where
# the plan prices fused ones, and the for-loop Adam (the CPU default), which moves about
# twice the bytes per parameter of the fused update the plan prices (step.ADAM_UPDATE_BYTES).
# The plan's attention counts every query-key block, the trace the causal half (a few %
# the other way). Measured here: plan / trace 0.71-0.73 over four recordings.
TOLERANCE = 0.35


@pytest.fixture
def cpu_spec(tmp_path, monkeypatch):
    """This CPU as a spec file: the detected cores' theoretical peak."""
    from ceiling.hardware.resolve import this_machine
    from ceiling.hardware.spec_template import spec_to_toml

    monkeypatch.setenv("CEILING_PROFILE", str(tmp_path / "no-profile.json"))
    path = tmp_path / "this-cpu.toml"
    path.write_text(spec_to_toml(this_machine("cpu", read_bandwidth=lambda: BANDWIDTH).spec))
    return str(path)


@pytest.fixture
def traced_step(tmp_path):
    """A trace of two training steps of the model, one thread (steadier on a shared core)."""
    from ceiling.workloads.gpt import build_gpt, preset_config

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = build_gpt(MODEL)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        tokens = torch.randint(0, preset_config(MODEL).vocab, (BATCH, SEQ))

        def step():
            _, loss = model(tokens, tokens)  # next-token loss on the batch itself
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        path = tmp_path / "gpt.json"
        record(step, path, active=2)
    finally:
        torch.set_num_threads(threads)
    return path


@pytest.mark.slow
def test_the_calibrated_plan_reproduces_the_traced_step(cpu_spec, traced_step):
    rank = analyze(traced_step, spec=cpu_spec).ranks[0]
    layout = f"d=1,t=1,p=1,b={BATCH}"  # the traced run's: one device, one micro-batch
    same = dict(spec=cpu_spec, global_batch=BATCH, seq=SEQ, dtype="fp32", fixed=layout)
    calibrated = ceiling.plan(MODEL, 1, calibrate=traced_step, **same)
    plain = ceiling.plan(MODEL, 1, **same)
    assert set(calibrated.assumptions["calibrated_from"]["taken"]) >= {
        "matmul_efficiency",
        "attention_efficiency",
        "memory_efficiency",
    }
    best = calibrated.best
    assert (best.plan.d, best.plan.micro_batch, best.micro_batches) == (1, BATCH, 1)
    # the GEMMs: the plan's FLOPs are the trace's, at the rate the trace measured on them
    gemm_s = sum(o.time_s for o in rank.ops if o.category == "matmul") / len(rank.steps)
    assert best.time["matmul_s"] == pytest.approx(gemm_s, rel=0.01)
    # The plan prices the device's work, not the host's gaps between ops: the traced step
    # less its idle time (on a loaded machine those gaps grow, the work does not).
    busy_s = sum(s.wall_s - s.seconds.get("idle", 0.0) for s in rank.steps) / len(rank.steps)
    ratio = best.step_time_s / busy_s
    assert abs(ratio - 1) <= TOLERANCE, f"calibrated plan / traced busy step = {ratio:.2f}"
    # the catalog's defaults miss the traced step by far more (0.09-0.13 here)
    plain_ratio = plain.best.step_time_s / busy_s
    assert abs(math.log(plain_ratio)) > 2 * abs(math.log(ratio)), plain_ratio
    # what the trace measured is recorded, and this plan stays within it
    told = calibrated.assumptions["calibrated_from"]
    gemm = told["applied"]["matmul_efficiency"]
    assert told["measured"]["gemm_dtypes"] == ["fp32"]
    assert gemm["applied"] == gemm["measured"] and gemm["scope"] == ""


@pytest.mark.slow
def test_a_plan_outside_the_trace_says_what_it_extrapolates(cpu_spec, traced_step, cli):
    code, out, err = cli("plan", MODEL, "--gpus", "1", "--spec", cpu_spec,
                         "--global-batch", str(BATCH), "--seq", str(SEQ), "--dtype", "fp16",
                         "--fixed", f"d=1,b={BATCH}", "--calibrate", traced_step)  # fmt: skip
    assert code == 0, err
    text = " ".join(out.split())
    assert "the trace measured GEMMs in fp32 of" in text
    assert ("applied to this plan: matmul_efficiency the default kept (the trace's GEMMs ran "
            "in fp32, not fp16)") in text  # fmt: skip


def test_a_traced_efficiency_holds_in_its_dtypes_and_keeps_its_fixed_time_beyond_its_sizes():
    from dataclasses import replace as _replace

    from ceiling.hardware.catalog import get_spec
    from ceiling.model.cluster import make_cluster
    from ceiling.trace.calibration import Calibration, calibrated, scoped

    cal = Calibration(0.05, None, 0.01, None, 1, "a trace of tiny fp32 GEMMs",
                      matmul_dtypes=("fp32",), matmul_flops_per_call=6e7,
                      memory_bytes_per_call=1e5)  # fmt: skip
    # another dtype: the trace says nothing of it, the default is kept and said
    value, why = scoped(cal, "matmul_efficiency", "fp16", 6e7, 0.7)
    assert value is None and "not fp16" in why
    # at or below the traced size: as measured
    assert scoped(cal, "matmul_efficiency", "fp32", 6e7, 0.7) == (0.05, "")
    assert scoped(cal, "matmul_efficiency", "fp32", 6e6, 0.7) == (0.05, "")
    # 10× larger: the traced time a call less its work at the default rate is fixed,
    # 1/e = 1/0.7 + (1/0.05 − 1/0.7)/10 (exactly: t = t0 + F/(peak·0.7))
    value, why = scoped(cal, "matmul_efficiency", "fp32", 6e8, 0.7)
    assert value == pytest.approx(1 / (1 / 0.7 + (1 / 0.05 - 1 / 0.7) / 10))
    assert "10× the traced ones" in why
    # far larger: toward the default, never above it
    assert 0.69 < scoped(cal, "matmul_efficiency", "fp32", 6e12, 0.7)[0] < 0.7
    # memory-bound ops: the same rule in bytes a call, any dtype
    assert scoped(cal, "memory_efficiency", "fp16", 1e6, 0.8)[0] == pytest.approx(
        1 / (1 / 0.8 + (1 / 0.01 - 1 / 0.8) / 10)
    )
    # a trace that beat the default: as measured at any size
    assert scoped(_replace(cal, matmul_efficiency=0.9), "matmul_efficiency", "fp32", 6e12,
                  0.7) == (0.9, "")  # fmt: skip
    # a figure the trace did not measure (or measured as nothing) is never applied
    assert (
        scoped(_replace(cal, matmul_efficiency=0.0), "matmul_efficiency", "fp32", 6e8, 0.7)[0]
        is None
    )
    assert scoped(cal, "attention_efficiency", "fp32", 1e9, 0.5)[0] is None
    cluster = make_cluster(get_spec("v100"), 8, dtype="fp16")
    default = cluster.matmul_efficiency
    assert calibrated(cluster, cal, "fp16", 6e7).matmul_efficiency == default
    at_10x = calibrated(cluster, cal, "fp32", 6e8).matmul_efficiency
    assert at_10x == pytest.approx(1 / (1 / default + (1 / 0.05 - 1 / default) / 10))
    # without a plan's dtype and size (an older caller): the traced figures as they are
    assert calibrated(cluster, cal).matmul_efficiency == 0.05
    assert calibrated(cluster, cal).memory_efficiency == 0.01
    assert calibrated(cluster, _replace(cal, matmul_dtypes=())).matmul_efficiency == 0.05


def test_a_plan_says_why_it_kept_a_default_and_on_which_device_the_trace_ran(cli):
    trace = str(Path(__file__).parent / "data" / "traces-real" / "mi250_minitoy_rocm6.json.gz")
    code, out, err = cli("plan", "gpt2", "--gpus", "8", "--spec", "v100", "--dtype", "fp16",
                         "--calibrate", trace, "--json")  # fmt: skip
    assert code == 0, err
    import json

    told = json.loads(out)["assumptions"]["calibrated_from"]
    # measured against the traced device's own peaks, not the plan's device
    assert told["measured"]["device"].startswith("AMD Instinct MI250")
    memory = told["applied"]["memory_efficiency"]
    # tiny memory-bound calls: their fixed time kept, the plan's larger calls nearer the default
    assert memory["measured"] < memory["applied"] < memory["default"]
    assert "× the traced ones" in memory["scope"]
    assert told["applied"]["matmul_efficiency"]["applied"] is None
    # measured but kept at its default: not among what the plan took
    assert "matmul_efficiency" in told["measured_figures"]
    assert "matmul_efficiency" not in told["taken"]
    assert "matmul_efficiency" in told["kept_defaults"]
    assert told["taken"]["memory_efficiency"] == memory["applied"]
    assert "no collective" in told["why_not"]["collective_efficiency"]
    # the plan's calls are sized at the batch each device gets (gpt2's 4096 over 8 devices),
    # or at the micro-batch pinned
    assert told["plan_gemm"]["sequences_a_call"] == 512
    code, out, err = cli("plan", "gpt2", "--gpus", "8", "--spec", "v100", "--dtype", "fp16",
                         "--fixed", "b=8", "--calibrate", trace, "--json")  # fmt: skip
    pinned = json.loads(out)["assumptions"]["calibrated_from"]
    assert pinned["plan_gemm"]["sequences_a_call"] == 8
    assert (
        memory["measured"] < pinned["applied"]["memory_efficiency"]["applied"] < memory["applied"]
    )
