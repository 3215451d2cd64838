"""`ceiling trace` on CUDA-format traces built here from the Kineto event schema, so that
every answer is known: category times, idle reasons, MFU by hand, the straggler."""

from __future__ import annotations

import copy
import json

import pytest

from ceiling.hardware.catalog import get_spec
from ceiling.trace import breakdown as bd
from ceiling.trace.analyze import analyze

N = 4096
BF16 = "c10::BFloat16"
DATA = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _x(cat, name, ts, dur, pid=1, tid=1, **args):
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def _op(name, ts, dur, ext, dims, types, concrete):
    return _x(
        "cpu_op",
        name,
        ts,
        dur,
        **{
            "External id": ext,
            "Input Dims": dims,
            "Input type": types,
            "Concrete Inputs": concrete,
        },
    )


def _launch(ts, corr, ext, name="cudaLaunchKernel"):
    return _x("cuda_runtime", name, ts, 4, correlation=corr, **{"External id": ext})


def _kernel(name, ts, dur, corr, ext, stream=7, cat="kernel", **more):
    return _x(
        cat,
        name,
        ts,
        dur,
        pid=0,
        tid=stream,
        device=0,
        stream=stream,
        correlation=corr,
        grid=[128, 1, 1],
        block=[256, 1, 1],
        **{"External id": ext},
        **more,
    )


# flows (launch -> kernel) are read past: `correlation` carries the same link
_flow = {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 101, "ts": 95, "pid": 1, "tid": 1}


def cuda_trace(rank=0, nccl_start=450, device="NVIDIA H100 80GB HBM3") -> dict:
    """One 1000 µs host step, its GPU work ending at 950: a lone step is measured over its
    ProfilerStep span (HTA's window for a step), 0-1000; the previous step's last kernel
    (launched before this step) ends at 0. Device: gemm 100-400
    (compute-bound), add 400-500 and mul 900-950 (memory-bound), all-reduce 450-700 on its
    own stream, memcpy 750-800. Host: a DataLoader span 0-80, a device synchronise ending at
    800, the mul launched at 900."""
    events = [
        _x("user_annotation", "ProfilerStep#5", 0, 1000),
        _x("user_annotation", DATA, 0, 80),
        _op(
            "aten::addmm",
            90,
            10,
            1,
            [[N], [N, N], [N, N], [], []],
            [BF16] * 3 + ["Scalar"] * 2,
            ["", "", "", "1", "1"],
        ),
        _launch(95, 101, 1),
        _op("aten::add", 100, 10, 2, [[N, N], [N, N], []], [BF16, BF16, "Scalar"], ["", "", "1"]),
        _launch(102, 102, 2),
        _x("cpu_op", "c10d::allreduce_", 110, 10, **{"External id": 3}),
        _launch(112, 103, 3),
        _launch(120, 104, 0, "cudaMemcpyAsync"),
        _x("cuda_runtime", "cudaDeviceSynchronize", 130, 670),
        _op("aten::mul", 895, 10, 4, [[N, N], []], [BF16, "Scalar"], ["", "2."]),
        _launch(900, 105, 4),
        _kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 100, 300, 101, 1),
        _kernel("vectorized_elementwise_kernel<add>", 400, 100, 102, 2),
        _kernel(
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
            nccl_start,
            700 - nccl_start,
            103,
            3,
            stream=20,
            **{
                "Collective name": "allreduce",
                "In msg nelems": N * 256,
                "Out msg nelems": N * 256,
                "dtype": "BFloat16",
                "Group size": 2,
            },
        ),
        _kernel(
            "Memcpy HtoD (Pageable -> Device)", 750, 50, 104, 0, cat="gpu_memcpy", bytes=1 << 20
        ),
        _kernel("vectorized_elementwise_kernel<mul>", 900, 50, 105, 4),
        # the previous step's last kernel
        _launch(-30, 100, 0),
        _kernel("vectorized_elementwise_kernel<fill>", -10, 10, 100, 0),
    ]
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": device, "numSms": 132}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
        "record_shapes": 1,
        "traceEvents": [
            *events,
            {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 101, "ts": 95, "pid": 1, "tid": 1},
        ],
    }


def _write(path, doc):
    path.write_text(json.dumps(doc))
    return path


US = 1e-6


def test_category_times_are_exact(tmp_path):
    r = analyze(_write(tmp_path / "t.json", cuda_trace()))
    step = r.ranks[0].steps[0]
    # a lone step: its ProfilerStep span, 0-1000 (the host's 50 µs after the GPU's last
    # kernel are the step's too), not its GPU work's 0-950
    assert step.wall_s == pytest.approx(1000 * US)
    got = {k: v / US for k, v in step.seconds.items()}
    assert got == pytest.approx(
        {
            bd.COMPUTE: 300,
            bd.MEMORY_BOUND: 150,
            bd.UNKNOWN_BOUND: 0,
            bd.COMM: 200,
            bd.MEMCPY: 50,
            bd.IDLE: 300,
        },
        abs=1e-6,
    )
    assert sum(step.seconds.values()) == pytest.approx(step.wall_s)
    assert step.comm_s / US == pytest.approx(250)
    assert step.comm_overlapped_s / US == pytest.approx(50)


def test_idle_time_gets_its_host_reason(tmp_path):
    step = analyze(_write(tmp_path / "t.json", cuda_trace())).ranks[0].steps[0]
    got = {k: v / US for k, v in step.idle_reasons.items()}
    # 0-100: data 80 then launch 20; 700-750: waits on a copy queued long before (other);
    # 800-900: right after the synchronise; 950-1000: no device work follows (other)
    assert got == pytest.approx({bd.DATA: 80, bd.LAUNCH: 20, bd.SYNC: 100, bd.OTHER: 100})


def test_mfu_by_hand_from_the_recorded_shapes(tmp_path):
    r = analyze(_write(tmp_path / "t.json", cuda_trace()))
    h100 = get_spec("h100-sxm")
    assert r.device.name == h100.name and r.device.peak_key == "bf16"
    gemm = 2.0 * N**3  # addmm: one multiply-add per (i, j, k)
    rank = r.ranks[0]
    assert rank.model_flops_per_step == pytest.approx(gemm)
    assert rank.mfu == pytest.approx(gemm / 1.0e-3 / h100.peak("bf16"))
    top = rank.ops[0]
    assert top.name == "aten::addmm" and top.bound == "compute"
    assert top.time_s == pytest.approx(300 * US)
    assert top.lost_s == pytest.approx(300 * US - gemm / h100.peak("bf16"), rel=1e-3)
    add = next(o for o in rank.ops if o.name == "aten::add")
    assert add.bound == "memory"
    assert add.bytes == pytest.approx(3 * N * N * 2)  # two bf16 inputs, one output


def test_spec_overrides_the_device_the_trace_names(tmp_path):
    r = analyze(_write(tmp_path / "t.json", cuda_trace()), spec="a100-sxm-80gb")
    assert r.device.name == get_spec("a100-sxm-80gb").name


def test_unknown_device_keeps_the_time_split_and_says_why_no_mfu(tmp_path):
    r = analyze(_write(tmp_path / "t.json", cuda_trace(device="Imaginary GPU 9000")))
    assert r.device.peak_flops_per_s is None
    assert any("Imaginary GPU 9000" in n and "--spec" in n for n in r.notes)
    rank = r.ranks[0]
    assert rank.mfu is None
    assert rank.model_flops_per_step == pytest.approx(2.0 * N**3)  # FLOPs need no device
    assert rank.steps[0].seconds[bd.COMM] / US == pytest.approx(200)


def test_without_shapes_flops_are_unknown_not_zero(tmp_path):
    doc = cuda_trace()
    doc["record_shapes"] = 0
    for e in doc["traceEvents"]:
        for key in ("Input Dims", "Input type", "Concrete Inputs"):
            e.get("args", {}).pop(key, None)
    r = analyze(_write(tmp_path / "t.json", doc))
    rank = r.ranks[0]
    assert rank.model_flops_per_step is None and rank.mfu is None
    assert any("not recorded" in n for n in r.notes)
    out = r.to_json()["ranks"][0]
    assert out["model_flops_per_step"] is None and out["steps"][0]["model_flops"] is None


def test_two_ranks_straggler_and_bus_bandwidth(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    _write(folder / "rank0.json", cuda_trace(rank=0, nccl_start=450))
    _write(folder / "rank1.json", cuda_trace(rank=1, nccl_start=650))  # arrives 200 µs late
    r = analyze(folder)
    c = r.cross
    assert [x.rank for x in r.ranks] == [0, 1]
    assert c.straggler == 1
    assert c.straggler_delay_s / US == pytest.approx(200)
    assert c.straggler_cost_s / US == pytest.approx(100)  # the mean wait: (200 + 0) / 2
    (row,) = c.collectives
    nbytes = N * 256 * 2
    assert row.op == "all_reduce" and row.bytes == nbytes
    assert row.transfer_s / US == pytest.approx(50)
    busbw = nbytes / 50e-6 * 2 * (2 - 1) / 2
    assert row.busbw_bytes_per_s == pytest.approx(busbw)
    assert row.of_link == pytest.approx(busbw / get_spec("h100-sxm").link_bandwidth_bytes_per_s)


def test_collective_size_from_the_launching_record(tmp_path):
    doc = cuda_trace()
    ev = doc["traceEvents"]
    kernel = next(e for e in ev if e["name"].startswith("ncclDevKernel"))
    for key in ("Collective name", "In msg nelems", "Out msg nelems", "dtype", "Group size"):
        kernel["args"].pop(key)
    kernel["args"]["External id"] = 30
    sizes = {
        "External id": 30,
        "Collective name": "allreduce",
        "In msg nelems": N,
        "Out msg nelems": N,
        "dtype": "Float",
        "Group size": 2,
    }
    ev.append(_x("cpu_op", "record_param_comms", 111, 5, **sizes))
    r = analyze(_write(tmp_path / "t.json", doc))
    (c,) = r.ranks[0].collectives
    assert c.op == "all_reduce" and c.bytes == N * 4


def test_older_kineto_categories_and_links_through_the_launch(tmp_path):
    doc = cuda_trace()
    old = {
        "cpu_op": "Operator",
        "kernel": "Kernel",
        "gpu_memcpy": "Memcpy",
        "cuda_runtime": "Runtime",
    }
    for e in doc["traceEvents"]:
        e["cat"] = old.get(e["cat"], e["cat"])
        if e["cat"] == "Kernel":
            e["args"].pop("External id")  # linked only through the launch's correlation
    step = analyze(_write(tmp_path / "t.json", doc)).ranks[0].steps[0]
    assert step.seconds[bd.COMPUTE] / US == pytest.approx(300)
    assert step.seconds[bd.MEMORY_BOUND] / US == pytest.approx(150)
    assert step.seconds[bd.MEMCPY] / US == pytest.approx(50)


def test_cli_json_plot_and_tables(tmp_path, cli):
    path = _write(tmp_path / "t.json.gz", {})
    import gzip

    with gzip.open(path, "wt") as f:
        json.dump(cuda_trace(), f)
    code, out, err = cli("trace", path, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["ranks"][0]["mfu"] == pytest.approx(
        2.0 * N**3 / 1.0e-3 / get_spec("h100").peak("bf16")
    )
    fig = tmp_path / "t.png"
    code, out, err = cli("trace", path, "--plot", fig)
    assert code == 0, err
    assert fig.stat().st_size > 10_000
    assert "communication (exposed)" in out and "addmm" in out


@pytest.mark.parametrize(
    "text, what",
    [
        ("", "empty file"),
        ('{"traceEvents": [', "truncated"),
        (
            '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2}, {"ph"',
            "truncated",
        ),
        ('{"traceEvents": []}', "no events"),
        ('{"schemaVersion": 1}', "no traceEvents"),
        ("not json", "expected '{'"),
        ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": NaN}]}', "non-finite"),
        ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "soon"}]}', "valid"),
    ],
)
def test_bad_traces_get_one_line_and_exit_2(tmp_path, cli, text, what):
    path = tmp_path / "bad.json"
    path.write_text(text)
    code, _out, err = cli("trace", path)
    assert code == 2
    assert what in err and str(path) in err
    assert len(err.strip().splitlines()) == 1


def test_truncated_real_trace_names_the_byte(tmp_path, cli):
    text = json.dumps(cuda_trace())
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) // 2])
    code, _, err = cli("trace", path)
    assert code == 2 and "truncated" in err and f"of {len(text) // 2:,}" in err


def test_missing_path_and_empty_folder(tmp_path, cli):
    code, _, err = cli("trace", tmp_path / "nope.json")
    assert code == 2 and "no such file" in err
    code, _, err = cli("trace", tmp_path)
    assert code == 2 and "no .json" in err


def test_steps_and_ranks_do_not_depend_on_file_order(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    a, b = cuda_trace(rank=1, nccl_start=650), cuda_trace(rank=0, nccl_start=450)
    _write(folder / "a.json", a)
    _write(folder / "b.json", copy.deepcopy(b))
    (folder / "config.json").write_text('{"lr": 0.1}')  # not a trace: passed over
    r = analyze(folder)
    assert [x.rank for x in r.ranks] == [0, 1] and r.cross.straggler == 1
    assert any("not traces" in n for n in r.notes)


def test_odd_fields_do_not_break_the_analysis(tmp_path):
    doc = cuda_trace()
    ev = doc["traceEvents"]
    ev[2]["args"]["Input Dims"] = "not a list"  # addmm: shapes unusable
    ev[4]["args"]["Input Dims"] = [["a", "b"], [N, N], []]  # add: shapes unreadable
    ev[3]["args"]["correlation"] = [1, 2]  # an unhashable link id
    ev[5]["args"] = "not a dict"
    ev[6]["pid"] = {"odd": 1}
    r = analyze(_write(tmp_path / "t.json", doc))
    rank = r.ranks[0]
    assert rank.model_flops_per_step is None  # the matmul's FLOPs became unknown
    assert sum(rank.steps[0].seconds.values()) == pytest.approx(1000 * US)


def test_the_api_reads_like_the_command(tmp_path):
    import ceiling

    r = ceiling.trace(_write(tmp_path / "t.json", cuda_trace()), spec="h100-sxm")
    assert r.ranks[0].mfu == pytest.approx(2.0 * N**3 / 1.0e-3 / get_spec("h100-sxm").peak("bf16"))


def test_fp32_gemms_on_tensor_cores_count_against_the_tf32_peak(tmp_path):
    doc = cuda_trace(device="NVIDIA A100-SXM4-80GB")
    for e in doc["traceEvents"]:
        if e["name"] == "aten::addmm":
            e["args"]["Input type"] = ["float"] * 3 + ["Scalar"] * 2
        if e["name"].startswith("sm90_xmma_gemm"):
            e["name"] = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>"
    r = analyze(_write(tmp_path / "t.json", doc))
    a100, gemm = get_spec("a100-80gb"), 2.0 * N**3
    assert r.device.peak_key == "tf32"
    step = r.ranks[0].steps[0]
    assert step.model_flops_by_dtype == {"tf32": pytest.approx(gemm)}
    assert r.ranks[0].mfu == pytest.approx(gemm / 1.0e-3 / a100.peak("tf32"))
    (gemm_row,) = [k for k in r.ranks[0].kernels if k.category == "GEMM"]
    assert gemm_row.dtype == "tf32" and gemm_row.op == "aten::addmm"
    assert gemm_row.achieved_flops_per_s == pytest.approx(gemm / 300e-6)


def _queued_run(steps=4, host_us=100, kernel_us=150, trailing=False) -> dict:
    """A loop whose host runs ahead: each host step launches one kernel at +10 µs, the GPU
    runs each kernel as soon as the previous one ends, so kernel k starts 50·k µs after its
    launch. Optionally a last host step cut short, which launched a 1 µs kernel."""
    ev, end = [], None
    n = steps + (1 if trailing else 0)
    for k in range(n):
        t0, corr = k * host_us, 200 + k
        dur = 1 if trailing and k == steps else kernel_us
        span = 12 if trailing and k == steps else host_us
        ev.append(_x("user_annotation", f"ProfilerStep#{k}", t0, span))
        ev.append(_x("cpu_op", "aten::relu", t0 + 8, 4, **{"External id": 10 + k}))
        ev.append(_launch(t0 + 10, corr, 10 + k))
        start = t0 + 15 if end is None else max(t0 + 15, end)
        ev.append(_kernel("vectorized_elementwise_kernel<relu>", start, dur, corr, 10 + k))
        end = start + dur
    return {"schemaVersion": 1, "traceEvents": ev}


def test_steps_are_windowed_on_the_gpu_when_it_runs_behind(tmp_path):
    rank = analyze(_write(tmp_path / "t.json", _queued_run())).ranks[0]
    # step 0 partial (its GPU start unknown); steps 1-3 end at 315, 465, 615 µs
    assert [s.name for s in rank.steps] == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    assert rank.step_s / US == pytest.approx(150)
    assert all(s.seconds[bd.IDLE] == pytest.approx(0, abs=1e-12) for s in rank.steps)
    assert rank.gpu_lag_s / US == pytest.approx(80)  # median of 5, 55, 105, 155 µs
    assert any("ProfilerStep#0 dropped as partial" in n for n in rank.notes)


def test_a_trailing_step_cut_short_is_dropped_and_said(tmp_path):
    rank = analyze(_write(tmp_path / "t.json", _queued_run(trailing=True))).ranks[0]
    assert rank.steps[-1].name == "ProfilerStep#3"
    assert rank.step_s / US == pytest.approx(150)
    assert any("ProfilerStep#4" in n and "profiler stopped" in n for n in rank.notes)


def test_pytorch_1_8_spelling_of_the_external_id(tmp_path):
    doc = cuda_trace()
    for e in doc["traceEvents"]:
        args = e.get("args")
        if isinstance(args, dict) and "External id" in args:
            args["external id"] = args.pop("External id")
        if e["cat"] == "cuda_runtime":
            e["args"].pop("correlation", None)  # only the External id links them now
    step = analyze(_write(tmp_path / "t.json", doc)).ranks[0].steps[0]
    assert step.seconds[bd.COMPUTE] / US == pytest.approx(300)
    assert step.seconds[bd.MEMORY_BOUND] / US == pytest.approx(150)


def test_calibration_reads_the_efficiencies_the_run_achieved(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    _write(folder / "rank0.json", cuda_trace(rank=0, nccl_start=450))
    _write(folder / "rank1.json", cuda_trace(rank=1, nccl_start=650))
    cal = analyze(folder).calibration()
    h100 = get_spec("h100-sxm")
    # the 4096³ bf16 GEMM ran 300 µs on each rank; add moved 3·N² bf16 in 100 µs, mul 2·N² in 50
    assert cal.matmul_efficiency == pytest.approx(2.0 * N**3 / (300e-6 * h100.peak("bf16")))
    bw = h100.memory_bandwidth_bytes_per_s
    assert cal.memory_efficiency == pytest.approx(5 * N * N * 2 / (150e-6 * bw))
    # the all-reduce's transfer: 50 µs for N·256 bf16 values between 2 ranks
    busbw = N * 256 * 2 / 50e-6 * 2 * (2 - 1) / 2
    assert cal.collective_efficiency == pytest.approx(busbw / h100.link_bandwidth_bytes_per_s)
    assert cal.attention_efficiency is None and cal.world_size == 2


def test_plan_takes_the_calibrated_efficiencies_and_says_so(tmp_path, cli):
    import ceiling

    path = _write(tmp_path / "t.json", cuda_trace())
    cal = analyze(path).calibration()
    r = ceiling.plan("llama-3-8b", 8, spec="h100-sxm", calibrate=path)
    told = r.assumptions["calibrated_from"]
    assert r.cluster.matmul_efficiency == pytest.approx(told["taken"]["matmul_efficiency"])
    assert told["measured_figures"]["matmul_efficiency"] == pytest.approx(cal.matmul_efficiency)
    assert set(told["taken"]) == {"matmul_efficiency", "memory_efficiency"}
    assert "attention_efficiency" in told["kept_defaults"]
    plain = ceiling.plan("llama-3-8b", 8, spec="h100-sxm")
    # the trace's memory-bound calls are far smaller than the plan's: their fixed time a
    # call kept, the plan's figure between the traced one and the default, and said so
    memory = told["applied"]["memory_efficiency"]
    assert r.cluster.memory_efficiency == pytest.approx(memory["applied"])
    assert cal.memory_efficiency < memory["applied"] < plain.cluster.memory_efficiency
    assert "× the traced ones" in memory["scope"]
    assert plain.best.step_time_s != r.best.step_time_s
    code, out, err = cli("plan", "llama-3-8b", "--gpus", "8", "--spec", "h100-sxm",
                         "--calibrate", path)  # fmt: skip
    assert code == 0, err
    assert "calibrated from" in out and "matmul_efficiency" in out
