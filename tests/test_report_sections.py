"""Report sections fed a known machine profile: their numbers come from the library, exactly."""

from __future__ import annotations

import json

import pytest

from ceiling.hardware.profile import MachineProfile, MeasuredDevice, save_profile

OVERHEAD = {
    "device": "cpu",
    "tiny_op_s": 2e-6,
    "tiny_op_best_s": 1.5e-6,
    "loop_elements": 1_000_000,
    "loop_s": 0.2,
    "loop_sampled_elements": 100_000,
    "vectorized_s": 1e-4,
    "device_vectorized_s": 2e-4,
    "loop_vs_vectorized": 2000.0,
    "crossovers": [],
    "notes": [],
}


# a CPU measured before: the sections read it instead of benchmarking
TEST_CPU = {
    "name": "Test CPU",
    "kind": "cpu",
    "peak_flops_per_s": {"fp32": 100e9, "fp64": 50e9},
    "bandwidth_bytes_per_s": 10e9,
    "datasheet_peak_flops_per_s": {"fp32": 200e9, "fp64": 100e9},
    "memory_bytes": 16 * 2**30,
    "extra": {"overhead": OVERHEAD},
}


@pytest.fixture
def profile_file(tmp_path):
    dev = MeasuredDevice(**TEST_CPU)
    prof = MachineProfile(1, "2026-01-01T00:00:00+00:00", "testhost", {}, [dev])
    return save_profile(prof, tmp_path / "profile.json")


def _report(cli, tmp_path, profile_file, only):
    code, out, err = cli(
        "report", "--only", only, "--profile", profile_file, "-o", tmp_path / "r.html", "--json"
    )
    assert code == 0, err
    return {s["key"]: s for s in json.loads(out)["sections"]}


def test_machine_card_shows_measured_against_datasheet(cli, tmp_path, profile_file):
    sec = _report(cli, tmp_path, profile_file, "machine")["machine"]
    assert sec["status"] == "ok", sec["reason"]
    measured = sec["key_figures"]["measured"]["Test CPU"]
    assert measured["peak_flops_per_s"] == {"fp32": 100e9, "fp64": 50e9}
    assert measured["bandwidth_bytes_per_s"] == 10e9
    rows = next(t for t in sec["tables"] if t["title"].startswith("Measured ceilings"))["rows"]
    fp32 = next(r for r in rows if r[1] == "fp32")
    assert fp32[-1] == "50.0 %"  # 100 of 200 GFLOP/s
    # without a GPU, a catalog GPU's datasheet stands beside the CPU: H100 bf16 / fp32 here
    assert sec["key_figures"]["reference_gpu"] == "h100-sxm"
    assert sec["key_figures"]["reference_gpu_compute_ratio"] == pytest.approx(989.5e12 / 100e9)
    assert sec["key_figures"]["reference_gpu_bandwidth_ratio"] == pytest.approx(3.35e12 / 10e9)
    assert len(sec["figures"]) == 1


def test_overhead_section_reads_the_profile(cli, tmp_path, profile_file):
    sec = _report(cli, tmp_path, profile_file, "overhead")["overhead"]
    assert sec["status"] == "ok", sec["reason"]
    assert sec["key_figures"]["tiny_op_s_cpu"] == 2e-6
    assert sec["key_figures"]["loop_vs_vectorized"] == 2000.0
    assert any("crossover" in n and "CUDA GPU" in n for n in sec["notes"])


def test_overhead_section_skips_with_a_reason_when_not_measured(cli, tmp_path):
    dev = MeasuredDevice("Bare CPU", "cpu", {"fp32": 1e9}, 1e9)
    path = save_profile(MachineProfile(1, "x", "h", {}, [dev]), tmp_path / "bare.json")
    sec = _report(cli, tmp_path, path, "overhead")["overhead"]
    assert sec["status"] == "skipped"
    assert "no overhead measurement" in sec["reason"]


def test_roofline_section_places_the_three_ops(cli, tmp_path, profile_file):
    sec = _report(cli, tmp_path, profile_file, "roofline")["roofline"]
    assert sec["status"] == "ok", sec["reason"]
    k = sec["key_figures"]
    assert k["ridge_flops_per_byte"] == pytest.approx(10.0)  # 100 GFLOP/s / 10 GB/s
    # fp32: add 1 FLOP / 12 bytes; matvec 2n² / 4(n² + 2n); matmul 2n³ / (3 · 4n²) = n/6
    assert k["intensity_add"] == pytest.approx(1 / 12)
    assert k["intensity_matvec"] == pytest.approx(2 * 4096**2 / (4 * (4096**2 + 2 * 4096)))
    assert k["intensity_matmul"] == pytest.approx(1024 / 6)
    bounds = {name: op["bound"] for name, op in k["ops"].items()}
    assert list(bounds.values()) == ["memory", "memory", "compute"]
    # naive attention is memory-bound on an H100, the fused form compute-bound
    assert k["attention-naive_bound_on_h100-sxm"] == "memory"
    assert k["attention-fused_bound_on_h100-sxm"] == "compute"
    assert len(sec["figures"]) == 2  # this machine's roofline, and attention on an H100's


def test_amdahl_and_planner_need_no_measurement(cli, tmp_path, profile_file):
    secs = _report(cli, tmp_path, profile_file, "amdahl,planner")
    assert secs["amdahl"]["key_figures"]["ceiling_p0.99"] == 100.0
    plan = secs["planner"]
    assert plan["status"] == "ok", plan["reason"]
    best = plan["key_figures"]["best_plan"]
    assert best["d"] * best["t"] * best["p"] * best.get("cp", 1) == 256
    assert best["t"] <= 8  # tensor parallelism stays inside an 8-GPU node
    # the best plan's time parts sum to its step; its text says where time and memory go
    assert sum(best["time_breakdown_s"].values()) == pytest.approx(best["step_time_s"])
    assert set(best["hidden_comm_s"]) == {"tp", "cp", "dp"}
    (said,) = [t for t in plan["text"] if t.startswith("Best plan:")]
    assert "communication exposed" in said and "GiB usable" in said
    pipe = plan["key_figures"]["pipeline"]
    # the demo's plan (or, with no pipeline in it, the labelled example): uniform stages, so
    # the simulated bubble is exactly the closed form
    if pipe["of_best_plan"]:
        assert (pipe["stages"], pipe["micro_batches"]) == (best["p"], best["micro_batches"])
    assert pipe["bubble_1f1b"] == pytest.approx(pipe["formula_1f1b"])
    if pipe["bubble_interleaved"] is not None:
        assert pipe["bubble_interleaved"] == pytest.approx(pipe["formula_interleaved"])


def test_a_gpu_profile_shows_the_gpu_paths_without_a_gpu_here(cli, tmp_path):
    crossover = {
        "op": "matmul",
        "sizes": [64, 128, 256],
        "cpu_s": [1e-5, 8e-5, 6e-4],
        "gpu_s": [2e-5, 3e-5, 5e-5],
        "gpu_with_transfer_s": [9e-5, 2e-4, 7e-4],
        "crossover": 128,
        "crossover_with_transfer": None,
    }
    cpu = MeasuredDevice("Test CPU", "cpu", {"fp32": 1e11}, 1e10, extra={"overhead": OVERHEAD})
    gpu = MeasuredDevice(
        "NVIDIA H100 80GB HBM3",
        "cuda",
        {"bf16": 700e12, "fp32": 50e12},
        3.0e12,
        datasheet_peak_flops_per_s={"bf16": 989.5e12, "fp32": 67e12},
        datasheet_bandwidth_bytes_per_s=3.35e12,
        extra={"overhead": {**OVERHEAD, "device": "cuda", "crossovers": [crossover]}},
    )
    path = save_profile(MachineProfile(1, "x", "h", {}, [cpu, gpu]), tmp_path / "gpu.json")
    secs = _report(cli, tmp_path, path, "machine,roofline,overhead")
    machine = secs["machine"]
    assert set(machine["key_figures"]["measured"]) == {"Test CPU", "NVIDIA H100 80GB HBM3"}
    assert "reference_gpu" not in machine["key_figures"]  # a GPU of its own: no stand-in
    roof = secs["roofline"]
    assert roof["status"] == "ok", roof["reason"]
    assert roof["key_figures"]["dtype"] == "bf16"
    assert roof["key_figures"]["ridge_flops_per_byte"] == pytest.approx(700e12 / 3.0e12)
    over = secs["overhead"]
    assert over["key_figures"]["gpu_crossover_matmul"] == 128
    assert over["key_figures"]["gpu_crossover_matmul_with_copies"] is None
    assert len(over["figures"]) == 2
    assert any("at no size up to n = 256" in t for t in over["text"])


def test_measured_above_the_theoretical_peak_is_flagged(cli, tmp_path):
    # a VM that reports a nominal clock below the real one: the matmul beats the "peak"
    dev = MeasuredDevice(
        "Fast CPU",
        "cpu",
        {"fp32": 250e9, "fp64": 50e9},
        10e9,
        datasheet_peak_flops_per_s={"fp32": 200e9, "fp64": 100e9},
    )
    path = save_profile(MachineProfile(1, "x", "h", {}, [dev]), tmp_path / "fast.json")
    secs = _report(cli, tmp_path, path, "machine,roofline")
    machine = secs["machine"]
    assert machine["key_figures"]["measured_above_reference"] == ["Fast CPU fp32"]
    rows = next(t for t in machine["tables"] if t["title"].startswith("Measured ceilings"))
    fp32 = next(r for r in rows["rows"] if r[1] == "fp32")
    fp64 = next(r for r in rows["rows"] if r[1] == "fp64")
    assert fp32[-1] == "125.0 % (above: see note)"
    assert fp64[-1] == "50.0 %"
    assert any("above the theoretical peak (Fast CPU fp32)" in n for n in machine["notes"])
    assert any("lies above the theoretical one" in n for n in secs["roofline"]["notes"])


def test_planner_shows_a_straggler_beside_the_pipeline(cli, tmp_path, profile_file):
    plan = _report(cli, tmp_path, profile_file, "planner")["planner"]
    s = plan["key_figures"]["straggler"]
    best = plan["key_figures"]["best_plan"]
    # the best plan's d ranks, one 1.25x slower; its exposed all-reduce after the slowest
    n, work, ar = best["d"], s["work_s"], s["allreduce_s"]
    assert s["workers"] == n
    assert work + ar == pytest.approx(best["step_time_s"])
    assert ar == pytest.approx(best["time_breakdown_s"]["dp_exposed_s"])
    assert s["step_s"] == pytest.approx(1.25 * work + ar)
    assert s["mean_wait_s"] == pytest.approx((n - 1) * 0.25 * work / n)
    assert s["efficiency"] == pytest.approx(((n - 1) + 1.25) * work / n / (1.25 * work + ar))
    assert s["efficiency_without_straggler"] == pytest.approx(work / (work + ar))
    assert len(plan["figures"]) == 3  # scaling, pipeline, straggler


def test_noisy_benchmark_points_are_said_so(cli, tmp_path):
    matmul = [
        {"dtype": "fp32", "m": 512, "n": 512, "k": 512, "noisy": True},
        {"dtype": "fp32", "m": 1024, "n": 1024, "k": 1024, "noisy": False},
    ]
    memory = [{"kernel": "triad", "dtype": "fp64", "noisy": True}]
    dev = MeasuredDevice(
        "Busy CPU", "cpu", {"fp32": 1e11}, 1e10, extra={"matmul": matmul, "memory": memory}
    )
    path = save_profile(MachineProfile(1, "x", "h", {}, [dev]), tmp_path / "busy.json")
    sec = _report(cli, tmp_path, path, "machine")["machine"]
    assert sec["key_figures"]["noisy_measurements"] == 2
    # a loaded profile was measured some other time: no load average of this moment is quoted
    assert "load_average_1min" not in sec["key_figures"]
    assert any("2 of 3 benchmark points spread by more than 10 %" in n for n in sec["notes"])


def test_scaling_fit_line_says_no_crosstalk_plainly():
    from ceiling.report.sections.scaling import _fit_line

    flat = {"usl": {"sigma": 0.1, "kappa": 2.3e-22, "n_star": 6.25e10}}
    assert _fit_line(flat) == "USL σ = 0.1, κ ≈ 0 (no peak within reach)"
    peaked = {"usl": {"sigma": 0.1, "kappa": 0.002, "n_star": 20.0}}
    assert _fit_line(peaked) == "USL σ = 0.1, κ = 0.002, N* ≈ 20"


def test_decode_serving_batch_is_what_fits_or_the_crossover_whichever_binds():
    import dataclasses

    import ceiling
    from ceiling.api.decode_serving import serving_batch
    from ceiling.hardware.catalog import get_spec
    from ceiling.model import decode
    from ceiling.model.decode_expected import costs_for
    from ceiling.model.transformer import parse_model
    from ceiling.report.sections.decode import serving_context

    cfg = parse_model("llama-3-8b")
    h100 = get_spec("h100-sxm")
    setup = decode.DecodeSetup(weights_dtype="bf16")
    kv = cfg.kv_bytes_per_token(2)  # bf16 cache, bytes per token of context
    s = ceiling.decode("llama-3-8b", spec="h100-sxm", weights="bf16").serving_batch(4096)
    # memory binds: the weights plus `batch` caches of 4,096 tokens fit, one more does not
    weights = cfg.params_total * 2
    assert weights + s.batch * 4096 * kv <= h100.memory_bytes
    assert weights + (s.batch + 1) * 4096 * kv > h100.memory_bytes
    assert s.bound_by == "memory capacity" and s.crossover_batch is None
    assert s.tokens_per_s == pytest.approx(s.batch * s.tokens_per_s_per_sequence)
    # a device 100× slower at multiplies turns compute-bound long before memory runs out
    slow = dataclasses.replace(
        h100, peak_flops_per_s={k: v / 100 for k, v in h100.peak_flops_per_s.items()}
    )
    t = serving_batch(cfg, slow, setup, costs_for(slow), 4096)
    assert t.bound_by == "compute" and t.batch == t.crossover_batch < t.max_batch
    # a context longer than the model holds: no batch, so the section sizes at most at max_seq
    assert serving_batch(cfg, h100, setup, costs_for(h100), 10**6).max_batch == 0
    assert serving_context(cfg, None) == 4096  # no --seq: a 4,096-token context
    assert serving_context(cfg, 2048) == 2048  # the user's --seq
    assert serving_context(cfg, 10**6) == cfg.max_seq


def test_planner_text_shows_stages_recompute_fp8_and_the_heaviest_stage():
    from ceiling.hardware.catalog import get_spec
    from ceiling.model import cluster as cluster_mod
    from ceiling.model.plan import step as parallel
    from ceiling.model.transformer import parse_model
    from ceiling.report.sections.planner import best_plan_text

    job = parallel.Job(parse_model("llama-3-70b"), 128, 8192, attention="flash", dropout=False)
    cluster = cluster_mod.make_cluster(get_spec("h100-sxm"), 64)
    plan = parallel.Plan(d=1, t=4, p=8, cp=2, v=2, zero=1, recompute="layers:2", fp8="linear",
                         first_stage_layers=9, last_stage_layers=9)  # fmt: skip
    r = parallel.evaluate_plan(job, cluster, plan)
    text = best_plan_text(r, cluster)
    step = r.step_time_s
    # 80 layers: 9 on the first and last stage, (80 - 18) / 6 = 10.33 -> 10 or 11 between
    assert text.startswith(f"Best plan: stages of 9,{r.stages['layers'][1]}…")
    assert (
        f"recompute=layers:2 rebuilds the forward of 2 layers of each stage "
        f"({r.recompute_s / step:.0%} of the step)" in text
    )
    assert f"16-bit matmuls {r.time['matmul_s'] / step:.0%}" in text
    assert f"FP8 GEMMs {r.time['fp8_matmul_s'] / step:.0%}, FP8 casts" in text
    assert (
        f"at {cluster.fp8_efficiency:.2f} of the FP8 peak ({cluster.fp8_efficiency_source})" in text
    )
    comm = sum(r.time[k] for k in ("dp_exposed_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "p2p_s"))
    assert f"communication exposed {comm / step:.0%}" in text
    # Hidden traffic is named when it rounds to at least 1 % of the step (the K/V ring here
    # sits near 0.5 %: the attention kernel's rate moves the step around it).
    cp_share = f"{r.hidden['cp'] / step:.0%}"
    assert (f"hidden CP {cp_share}" in text) == (cp_share != "0%")
    where = r.stages["heaviest_memory"]
    assert (
        f"Memory of the {where} stage ({r.usable_bytes_per_device / 2**30:.1f} GiB usable)" in text
    )
    assert f"FP8 copies {r.memory['fp8_weight_bytes'] / 2**30:.1f} GiB" in text


def test_serving_section_simulates_the_demo_model_under_load(cli, tmp_path, profile_file):
    sec = _report(cli, tmp_path, profile_file, "serving")["serving"]
    assert sec["status"] == "ok", sec["reason"]
    k = sec["key_figures"]
    assert k["gpus"] == 1  # Llama-3-8B fits one H100 (the demo device)
    # the busier the server, the more tokens/s and the longer each token
    assert k["output_tokens_per_s_at_capacity"] > 0
    assert k["highest_rate_within_slo"] <= k["rate_per_s_at_capacity"]
    assert len(sec["figures"]) == 1
    # the note's bands are the simulated run's own (its regime and features), as serve says
    band = k["accuracy"]["throughput"]
    said = f"throughput ±{band['median_abs_error'] * 100:.0f} % typical"
    assert any(said in n and f"{band['cases']} published runs" in n for n in sec["notes"])


def test_scaling_section_flags_a_speedup_above_the_workers_as_noise(monkeypatch):
    """2 cores, a pure-Python loop on 2 processes measured 6× (the steps spread 4–10.7×):
    shown as noise with its spread, never as parallelism; no finding comes of it."""
    from ceiling.measure import scale
    from ceiling.report.compose import ReportContext, SectionOutput
    from ceiling.report.sections import scaling

    def fake_run(cfg, on_progress=None):
        runs = []
        for n in cfg.workers:
            if cfg.workload == "python" and cfg.backend == "processes" and n == 2:
                times = [0.14, 0.2, 0.25]
            elif cfg.workload == "python":
                times = [1.0, 1.2, 1.5] if n == 1 else [1.2, 1.3, 1.4]
            else:
                times = [0.1 + 0.9 / n] * 3
            phases = {"serial_s": [0.0] * n, "compute_s": [0.0] * n}
            runs.append({"n": n, "step_times_s": times, "phases_per_rank_s": phases})
        return {"workload": cfg.workload, "mode": "strong", "backend": cfg.backend,
                "imbalance": 0.0, "truth": {}, "runs": runs}  # fmt: skip

    monkeypatch.setattr(scale, "run_scaling", fake_run)
    monkeypatch.setattr(scale, "cpu_cores", lambda: 2)
    out = SectionOutput()
    scaling.run(ReportContext(quick=True), out)
    table = next(t for t in out.tables if t.title == "Concurrency vs parallelism")
    row = next(r for r in table.rows if r[0] == "pure-Python loop, processes")
    assert row[2] == "6.00× (noise: 4–10.7× over the steps)"
    assert row[4] == "timing noise: more than the workers can give"
    assert out.key_figures["speedup_noise"]["python_processes"] == pytest.approx([4.0, 1.5 / 0.14])
    assert any("kept out of the verdict" in n for n in out.notes)
    assert next(h for h in out.highlights if h.label.startswith("Python on")).display.endswith(
        "/ noise"
    )


def test_the_demo_decode_figure_says_why_its_points_sit_far_below_the_roof():
    from types import SimpleNamespace as NS

    from ceiling.model.transformer import parse_model
    from ceiling.report.compose import SectionOutput
    from ceiling.report.sections.decode import _measured_figure
    from ceiling.report.work import Choice

    cfg = parse_model("gpt:small")
    # the memory roof at batch b: b / 12.4 ms; measured 8 and 60 tokens/s at batch 1 and 8
    rows = [NS(batch=b, measured_tokens_per_s=m, bound="memory", expected_memory_s=0.0124,
               expected_compute_s=0.001 * b, expected_launch_s=1e-4,
               expected_tokens_per_s=b / 0.0124, expected_limited_by="memory")
            for b, m in ((1, 8.0), (8, 60.0))]  # fmt: skip
    result = NS(model=cfg, comparison=NS(rows=rows, in_cache=False, run=NS(device="cpu")))
    out = SectionOutput(key_figures={"measured": {}})
    _measured_figure(out, result, Choice("gpt:small", True))
    # (80.6 / 8 + 645.2 / 60) / 2 = (10.08 + 10.75) / 2
    below = out.key_figures["measured"]["below_memory_roof"]
    assert below == pytest.approx((1 / 0.0124 / 8 + 8 / 0.0124 / 60) / 2)
    (fig,) = out.figures
    assert fig.caption.startswith(
        "Demo: gpt:small is a tiny model (24 M parameters, 512 wide) on this CPU: its small "
        "kernels and per-step Python keep it far from this machine's roofs, 10× below the "
        "memory roof. Each measured point"
    )
    mine = SectionOutput(key_figures={"measured": {}})
    _measured_figure(mine, result, Choice("my-model", False))
    assert mine.figures[0].caption.startswith("Each measured point")
