"""Every report section gives the answer (or the refusal) of its `ceiling.*` call for the same
arguments: the Amdahl table, the planner's plan or its refusal of a CPU profile, the MFU
section's counted step, the scaling section's runs, the machine card's CPU, the overhead
section's records, the decode section's ceilings and measured decode, the serving section's
simulation, with a refusal of each; the roofline and trace sections in test_one_answer.py, the
planner with a measured GPU in test_plan_one_answer.py. A section with no such check yet is
listed in `NOT_YET`, and a section added without either fails
`test_each_section_has_its_check`."""

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


def _command(cli, *args) -> dict:
    """The command's --json, less the path of the figure it drew."""
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    record = json.loads(out)
    record.pop("plot", None)
    return record


def _refusal(cli, *args) -> str:
    code, out, err = cli(*args)
    assert (code, out) == (2, ""), err
    return err.removeprefix("error: ").strip()


def _decoded(entry: dict, api) -> None:
    """A row of the decode section's table is `ceiling.decode`'s answer `api` (the result)."""
    record = api.to_dict()
    assert entry["tp"] == record["tp"]
    assert entry["ceiling_tokens_per_s"] == record["rows"][0]["tokens_per_s"]
    assert entry["expected_tokens_per_s"] == record["expected"]["rows"][0]["expected_tokens_per_s"]
    assert entry["crossover_batch"] == record["crossover_batch"]
    assert entry["kv_bytes_per_token"] == record["kv_bytes_per_token"]
    assert entry["rows"] == [r.to_json() for r in api.rows if r.fits]
    assert entry["accuracy"] == record["accuracy"]


def test_decode_section_is_the_decode_call_here_and_on_the_target(
    cli, tmp_path, cpu_profile, monkeypatch
):
    """The target device's row and this machine's (its profile, with the weights in the
    dtype it has a peak for) are `ceiling decode`'s answers for the section's arguments."""
    import ceiling
    from ceiling.report.sections import decode as section

    monkeypatch.setattr(section, "_measured", lambda *a: None)  # timing real steps here
    args = ("--profile", cpu_profile, "--model", "gpt:small", "--seq", 512)
    figures = _sections(cli, tmp_path, "decode", *args)["decode"]["key_figures"]
    batches = ",".join(map(str, section.BATCHES))
    target = ceiling.decode("gpt:small", spec="h100-sxm", batch=section.BATCHES)
    assert target.to_dict() == _command(cli, "decode", "gpt:small", "--spec", "h100-sxm",
                                        "--batch", batches)  # fmt: skip
    _decoded(figures["ceilings"][target.to_dict()["device"]], target)
    here = ceiling.decode("gpt:small", machine_profile=cpu_profile, weights="fp32",
                          batch=section.BATCHES)  # fmt: skip
    command = _command(cli, "decode", "gpt:small", "--profile", cpu_profile, "--weights", "fp32",
                       "--batch", batches)  # fmt: skip
    assert here.to_dict() == command and command["device"] == f"{CPU.name} (measured)"
    _decoded(figures["ceilings"]["this machine"], here)
    # the serving batch at the report's --seq: the decode result's own
    serving = figures["ceilings"]["this machine"]["serving"]
    assert serving == here.serving_batch(512).to_json() and serving["context"] == 512
    assert serving["batch"] >= 1 and serving["tokens_per_s"] > 0
    assert figures["headline"]["serving"] == target.serving_batch(512).to_json()


def test_decode_section_shows_the_refusals_of_the_decode_call(
    cli, tmp_path, cpu_profile, monkeypatch
):
    """Llama-3-405B fits neither 8 H100s nor the test CPU: each row is the call's refusal."""
    import ceiling
    from ceiling.errors import DoesNotFit
    from ceiling.report.sections import decode as section

    monkeypatch.setattr(section, "_measured", lambda *a: None)
    args = ("--profile", cpu_profile, "--model", "llama-3-405b")
    found = _sections(cli, tmp_path, "decode", *args)["decode"]
    assert found["status"] == "ok", found["reason"]
    assert found["key_figures"]["ceilings"] == {}
    batches = ",".join(map(str, section.BATCHES))
    on_8 = _refusal(cli, "decode", "llama-3-405b", "--spec", "h100-sxm", "--tp", 8,
                    "--batch", batches)  # fmt: skip
    here = _refusal(cli, "decode", "llama-3-405b", "--profile", cpu_profile, "--weights",
                    "fp32", "--batch", batches)  # fmt: skip
    asked = {"batch": section.BATCHES, "model": "llama-3-405b"}
    with pytest.raises(DoesNotFit) as on_8_api:
        ceiling.decode(**asked, spec="h100-sxm", tp=8)
    with pytest.raises(DoesNotFit) as here_api:
        ceiling.decode(**asked, machine_profile=cpu_profile, weights="fp32")
    # one message, the arguments named as the page's Python call names them
    for command, api in ((on_8, on_8_api), (here, here_api)):
        assert command == str(api.value).replace("raise tp", "raise --tp").replace(
            "use weights", "use --weights"
        )
    assert "tp=8" in on_8 and "Test CPU" in here
    assert [n for n in found["notes"] if n.startswith("ceiling decode refuses")] == [
        f"ceiling decode refuses: {on_8_api.value}",
        f"ceiling decode refuses: {here_api.value}",
    ]
    (table,) = found["tables"]
    assert [r[1] for r in table["rows"]] == ["does not fit", "does not fit"]


def test_decode_section_measures_as_decode_measure_does(cli, tmp_path, cpu_profile, monkeypatch):
    """The small model decoded here is the answer of the measured call `ceiling decode
    gpt:small --measure --batch 1,16 --profile P` makes: one question asked (the same
    arguments reach the measurement), its answer laid out row for row."""
    from ceiling.api import decode_measured as measured
    from ceiling.cli import decode as command
    from ceiling.errors import InvalidInput
    from ceiling.report.sections import decode as section

    asked, answers, real = [], [], measured.decode_measured

    def spy(cfg, batches, context, **kw):
        where = str(kw["profile"])  # a path or its text
        asked.append((cfg.name, batches, context, kw["weights"], kw["device"], where))
        if len(asked) > 1:  # the command's: the question is all this test needs of it
            raise InvalidInput("asked")
        answers.append(real(cfg, batches, context, **kw))
        return answers[-1]

    monkeypatch.setattr(measured, "decode_measured", spy)
    monkeypatch.setattr(command, "decode_measured", spy)
    found = _sections(cli, tmp_path, "decode", "--profile", cpu_profile)["decode"]
    batches = ",".join(map(str, section.MEASURED_BATCHES_QUICK))
    _refusal(cli, "decode", "gpt:small", "--measure", "--batch", batches, "--profile", cpu_profile)
    assert asked[0] == asked[1] == ("gpt:small", section.MEASURED_BATCHES_QUICK, 0, None, None,
                                    str(cpu_profile))  # fmt: skip
    (result,) = answers
    figures = found["key_figures"]["measured"]
    assert figures["ceiling_source"] == result.comparison.ceiling_source
    assert [r["measured_tokens_per_s"] for r in figures["rows"]] == [
        r.measured_tokens_per_s for r in result.rows
    ]
    assert [r["expected_tokens_per_s"] for r in figures["rows"]] == [
        r.expected_tokens_per_s for r in result.rows
    ]
    assert [r["mbu"] for r in figures["rows"]] == [r.mbu for r in result.rows]


SERVED = ("--dataset", "sharegpt", "--num-requests", 300, "--slo", "ttft_p99=2s,tpot_p99=200ms")


def test_serving_section_is_the_serve_call(cli, tmp_path):
    import ceiling
    from ceiling.report.sections import serving as section

    args = ("--spec", "h100-sxm", "--model", "llama-3-8b")
    found = _sections(cli, tmp_path, "serving", *args)["serving"]
    assert found["status"] == "ok", found["reason"]
    figures = found["key_figures"]
    asked = section.serve_arguments("llama-3-8b", {"spec": "h100-sxm"}, 1)
    assert asked["num_requests"] == section.REQUESTS and asked["curve"] is True
    api = ceiling.serve(**asked).to_dict()
    command = _command(cli, "serve", "llama-3-8b", "--spec", "h100-sxm", "--tp", 1, *SERVED,
                       "--plot", tmp_path / "serve.png")  # fmt: skip
    assert api == command
    assert figures["gpus"] == command["layout"]["gpus"] == 1
    top = command["curve"][-1]
    assert figures["rate_per_s_at_capacity"] == top["rate_per_s"]
    assert figures["output_tokens_per_s_at_capacity"] == top["output_tokens_per_s"]
    assert figures["tpot_p50_s_at_lightest"] == command["curve"][0]["tpot_s"]["p50"]
    assert figures["highest_rate_within_slo"] == command["max_rate_per_s"] > 0
    assert figures["accuracy"] == command["accuracy"]
    (table,) = found["tables"]
    assert [r[0] for r in table["rows"]] == [
        f"{command['curve'][i]['rate_per_s']:.3g}" for i in (0, 3, 6)
    ]


def test_serving_section_refuses_as_serve_does(cli, tmp_path):
    """Llama-3-405B does not fit 8 A100s of 80 GB: the section is the call's refusal on 8."""
    import ceiling
    from ceiling.errors import CeilingError
    from ceiling.report.sections import serving as section

    args = ("--spec", "a100-sxm-80gb", "--model", "llama-3-405b")
    found = _sections(cli, tmp_path, "serving", *args)["serving"]
    refusal = _refusal(cli, "serve", "llama-3-405b", "--spec", "a100-sxm-80gb", "--tp", 8, *SERVED)
    assert "tp=8" in refusal
    assert found["status"] == "skipped"
    assert found["reason"] == f"ceiling serve refuses: {refusal}"
    with pytest.raises(CeilingError) as raised:
        ceiling.serve(**section.serve_arguments("llama-3-405b", {"spec": "a100-sxm-80gb"}, 8))
    assert str(raised.value) == refusal.replace("--tp", "tp").replace("--weights", "weights")


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
    "decode": test_decode_section_is_the_decode_call_here_and_on_the_target,
    "serving": test_serving_section_is_the_serve_call,
    "overhead": test_overhead_section_is_the_machine_profile_call,
    "roofline": test_one_answer.test_roofline_section_command_and_api_give_one_roof,
    "trace": test_one_answer.test_trace_section_command_and_api_give_one_mfu,
}
# sections still assembled from the layers below the API, not yet one call's result
NOT_YET: set[str] = set()


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
