"""Every report section gives the answer (or the refusal) of its `ceiling.*` call for the same
arguments: the Amdahl table, the planner's plan or its refusal of a CPU profile, the MFU
section's counted step, the scaling section's runs, the machine card's CPU, the overhead
section's records; the decode, roofline and trace sections in test_one_answer.py, the planner
with a measured GPU in test_plan_one_answer.py. A section with no such check yet is listed in
`NOT_YET`, and a section added without either fails `test_each_section_has_its_check`."""

from __future__ import annotations

import json

import pytest

import test_one_answer
from ceiling.hardware.profile import MachineProfile, MeasuredDevice, save_profile

CPU = MeasuredDevice("Test CPU", "cpu", {"fp32": 100e9}, 10e9, memory_bytes=16 * 2**30)
MODEL, GPUS = "gpt:small", 16


@pytest.fixture
def cpu_profile(tmp_path):
    prof = MachineProfile(1, "2026-01-01T00:00:00+00:00", "cpuhost", {}, [CPU])
    return save_profile(prof, tmp_path / "cpu.json")


def _sections(cli, tmp_path, only: str, *args) -> dict:
    code, out, err = cli("report", "--only", only, *args, "-o", tmp_path / "r.html", "--json")
    assert code == 0, err
    return {s["key"]: s for s in json.loads(out)["sections"]}


def test_planner_refuses_a_cpu_profile_as_plan_does(cli, tmp_path, cpu_profile):
    import ceiling
    from ceiling.errors import InvalidInput

    args = ("--profile", cpu_profile, "--model", MODEL, "--gpus", GPUS)
    section = _sections(cli, tmp_path, "planner", *args)["planner"]
    code, out, err = cli("plan", MODEL, "-n", GPUS, "--profile", cpu_profile)
    assert (code, out) == (2, "")
    refusal = err.removeprefix("error: ").strip()
    assert "not in the catalog" in refusal
    assert section["status"] == "skipped"
    assert section["reason"] == f"ceiling plan refuses: {refusal}"
    with pytest.raises(InvalidInput) as raised:
        ceiling.plan(MODEL, GPUS, machine_profile=cpu_profile)
    assert refusal == str(raised.value).replace("machine_profile", "--profile")


def test_planner_plans_on_a_spec_as_plan_does(cli, tmp_path):
    import ceiling

    args = ("--spec", "a100-sxm-80gb", "--model", MODEL, "--gpus", GPUS, "--seq", 1024)
    section = _sections(cli, tmp_path, "planner", *args)["planner"]
    assert section["status"] == "ok", section["reason"]
    figures = section["key_figures"]
    api = ceiling.plan(MODEL, GPUS, spec="a100-sxm-80gb", seq=1024, top=3, scaling=1).to_dict()
    assert (figures["model"], figures["gpus"], figures["seq"]) == ("gpt:small", GPUS, 1024)
    assert [p["step_time_s"] for p in figures["plans"]] == [p["step_time_s"] for p in api["plans"]]
    assert figures["best_mfu"] == api["plans"][0]["mfu"]
    assert figures["fitting_plans"] == api["fitting"]
    assert "Yours:" in section["subject"] and "demo" not in section["subject"]


def test_a_profile_alone_leaves_the_planner_a_labelled_demo(cli, tmp_path, cpu_profile):
    """A profile with no model and no GPU count describes this machine, not a cluster."""
    section = _sections(cli, tmp_path, "planner", "--profile", cpu_profile)["planner"]
    assert section["status"] == "ok", section["reason"]
    assert section["subject"].startswith("Demo:")


def test_amdahl_section_is_the_amdahl_call(cli, tmp_path, cpu_profile):
    import ceiling
    from ceiling.report.sections import amdahl as section

    figures = _sections(cli, tmp_path, "amdahl", "--profile", cpu_profile)["amdahl"]
    figures = figures["key_figures"]
    for p in section.FRACTIONS:
        assert figures[f"ceiling_p{p:g}"] == ceiling.amdahl(p).ceiling
    cores = figures["cores"]
    (row,) = ceiling.amdahl(0.95, ns=[cores]).rows
    assert figures["speedup_p0.95_on_cores"] == row.speedup == 1 / (0.05 + 0.95 / cores)


def test_mfu_section_counts_the_step_as_profile_does(cli, tmp_path, cpu_profile):
    from ceiling.api.profile import profile_target

    args = ("--profile", cpu_profile, "--model", "gpt:tiny")
    section = _sections(cli, tmp_path, "mfu", *args)["mfu"]
    assert section["status"] == "ok", section["reason"]
    figures = section["key_figures"]
    command = profile_target(
        "gpt:tiny", train=True, device="cpu", dtype="fp32", profile=str(cpu_profile), steps=1
    ).to_dict()
    assert figures["ran_here"] is True
    for key in ("model_flops_per_step", "analytic_flops_per_step"):
        assert figures[key] == command[key] > 0, key
    assert figures["ceilings_from"] == command["ceiling"]["source"]
    assert figures["peak_flops_per_s"] == command["ceiling"]["peak_flops_per_s"]


def test_machine_section_describes_this_machine_as_info_does(cli, tmp_path, cpu_profile):
    import ceiling

    section = _sections(cli, tmp_path, "machine", "--profile", cpu_profile)["machine"]
    assert section["status"] == "ok", section["reason"]
    figures = section["key_figures"]
    command = ceiling.info().to_dict()["cpu"]
    assert (figures["cpu_model"], figures["cpu_cores"]) == (command["model"], command["cores"])
    assert figures["cpu"]["isa"] == command["isa"]
    assert figures["cpu"]["features"] == command["features"]
    assert figures["cpu_theoretical_peak_flops_per_s"] == command["peak_flops_per_s"]


def _fake_scaling_run(cfg, on_progress=None):
    """A measured run without workers: a step of 0.1 s serial and 0.9 s split N ways (the
    Python loop on threads: no gain), so the summary and its fits are exact."""
    runs = []
    for n in cfg.workers:
        gil = cfg.workload == "python" and cfg.backend == "threads"
        times = [1.0] * 3 if gil else [0.1 + 0.9 / n] * 3
        phases = {"serial_s": [0.0] * n, "compute_s": [0.0] * n}
        runs.append({"n": n, "step_times_s": times, "phases_per_rank_s": phases})
    return {"workload": cfg.workload, "mode": "strong", "backend": cfg.backend,
            "imbalance": 0.0, "truth": {}, "runs": runs}  # fmt: skip


def test_scaling_section_is_the_scale_call(monkeypatch):
    import ceiling
    from ceiling.measure import scale as measured
    from ceiling.report.compose import ReportContext, SectionOutput
    from ceiling.report.sections import scaling as section

    monkeypatch.setattr(measured, "run_scaling", _fake_scaling_run)
    monkeypatch.setattr(measured, "cpu_cores", lambda: 4)
    out = SectionOutput()
    section.run(ReportContext(quick=True), out)
    figures = out.key_figures
    synthetic = ceiling.scale("synthetic", workers=section.SYNTHETIC_WORKERS, backend="threads")
    assert figures["synthetic_amdahl_p"] == synthetic.fit["amdahl"]["p"] == pytest.approx(0.9)
    assert figures["synthetic_usl_sigma"] == synthetic.fit["usl"]["sigma"]
    for backend in ("threads", "processes"):
        python = ceiling.scale("python", workers=[1, 2, 4], backend=backend)
        assert figures["speedup_at_max_n"][f"python_{backend}"] == python.points[-1]["speedup"]
    assert figures["speedup_at_max_n"]["python_threads"] == 1.0


OVERHEAD = {"tiny_op_s": 3e-6, "tiny_op_best_s": 2e-6, "loop_elements": 1_000_000,
            "loop_s": 0.3, "loop_sampled_elements": 100_000, "vectorized_s": 2e-4,
            "device_vectorized_s": 5e-4, "loop_vs_vectorized": 1500.0}  # fmt: skip
CROSSOVER = {"op": "matmul", "sizes": [64, 128, 256], "cpu_s": [1e-5, 8e-5, 6e-4],
             "gpu_s": [2e-5, 3e-5, 5e-5], "gpu_with_transfer_s": [9e-5, 2e-4, 7e-4],
             "crossover": 128, "crossover_with_transfer": None}  # fmt: skip


def test_overhead_section_is_the_machine_profile_call(cli, tmp_path):
    from ceiling.api.machine_profile import machine_profile

    cpu = MeasuredDevice(
        "Test CPU",
        "cpu",
        {"fp32": 1e11},
        1e10,
        extra={"overhead": {**OVERHEAD, "device": "cpu", "notes": ["a note"]}},
    )
    gpu = MeasuredDevice("NVIDIA H100 80GB HBM3", "cuda", {"bf16": 700e12}, 3e12,
                         extra={"overhead": {**OVERHEAD, "device": "cuda", "tiny_op_s": 8e-6,
                                             "device_vectorized_s": 1e-5,
                                             "crossovers": [CROSSOVER]}})  # fmt: skip
    path = save_profile(MachineProfile(1, "x", "h", {}, [cpu, gpu]), tmp_path / "gpu.json")
    section = _sections(cli, tmp_path, "overhead", "--profile", path)["overhead"]
    assert section["status"] == "ok", section["reason"]
    figures = section["key_figures"]
    api = machine_profile(path).overheads
    assert [o.device for o in api] == ["cpu", "cuda"]
    assert [figures[f"tiny_op_s_{d}"] for d in ("cpu", "cuda")] == [o.tiny_op_s for o in api]
    assert [figures[f"torch_vectorized_s_{d}"] for d in ("cpu", "cuda")] == [5e-4, 1e-5]
    assert (figures["loop_s"], figures["vectorized_s"]) == (api[0].loop_s, api[0].vectorized_s)
    assert figures["loop_vs_vectorized"] == api[0].loop_vs_vectorized == 1500.0
    assert figures["gpu_crossover_matmul"] == api[1].crossovers[0]["crossover"] == 128
    assert figures["gpu_crossover_matmul_with_copies"] is None
    assert section["notes"] == ["a note"]
    bare = MeasuredDevice("Bare CPU", "cpu", {"fp32": 1e9}, 1e9)
    bare_path = save_profile(MachineProfile(1, "x", "h", {}, [bare]), tmp_path / "bare.json")
    assert machine_profile(bare_path).overheads == []
    refused = _sections(cli, tmp_path, "overhead", "--profile", bare_path)["overhead"]
    assert refused["status"] == "skipped" and "no overhead measurement" in refused["reason"]


def test_machine_profile_is_none_without_one_and_refuses_a_missing_file(tmp_path, cpu_profile):
    from ceiling.api.machine_profile import machine_profile
    from ceiling.errors import InvalidInput

    assert machine_profile() is None  # no saved profile: the report measures one
    found = machine_profile(cpu_profile)
    assert (found.path, found.source, found.measured_now) == (cpu_profile, str(cpu_profile), False)
    assert found.profile.devices == [CPU] and found.to_dict()["overheads"] == []
    with pytest.raises(InvalidInput, match="no machine profile at"):
        machine_profile(tmp_path / "missing.json")
    with pytest.raises(InvalidInput, match="path must be the path of a machine profile"):
        machine_profile(5)  # type: ignore[arg-type]


# the check of each section: a test function in this file or the one-answer files
CHECKS = {
    "amdahl": test_amdahl_section_is_the_amdahl_call,
    "planner": test_planner_refuses_a_cpu_profile_as_plan_does,
    "mfu": test_mfu_section_counts_the_step_as_profile_does,
    "scaling": test_scaling_section_is_the_scale_call,
    "machine": test_machine_section_describes_this_machine_as_info_does,
    "overhead": test_overhead_section_is_the_machine_profile_call,
    "decode": test_one_answer.test_decode_section_command_and_api_give_one_ceiling,
    "roofline": test_one_answer.test_roofline_section_command_and_api_give_one_roof,
    "trace": test_one_answer.test_trace_section_command_and_api_give_one_mfu,
}
# sections still assembled from the layers below the API, not yet one call's result
NOT_YET = {"serving"}


def _section_keys() -> list[str]:
    from ceiling.report.sections import SECTIONS, TRACE_SECTION

    return [s.key for s in [*SECTIONS, TRACE_SECTION]]


@pytest.mark.parametrize(
    "key",
    [
        pytest.param(k, marks=pytest.mark.xfail(strict=True, reason="not yet one API call's"))
        if k in NOT_YET
        else k
        for k in _section_keys()
    ],
)
def test_each_section_has_its_check(key):
    check = CHECKS[key]
    assert check.__name__.startswith(f"test_{key}_"), key
