"""`ceiling trace` on real GPU traces recorded by others (tests/data/traces-real/README.md).

The expected answers are computed here from the raw events, with code of the test's own: the
GPU work a step launched (a device event whose launching runtime call, found by
`correlation`, lies inside the step's `ProfilerStep` span), when that work ends on the GPU, and
how much of the time between two such ends no device event covers.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from pathlib import Path

import pytest

from ceiling.hardware.catalog import get_spec
from ceiling.hardware.identify import identify
from ceiling.trace import breakdown as bd
from ceiling.trace.analyze import analyze

DATA = Path(__file__).parent / "data" / "traces-real"
# today's category names and PyTorch 1.8's
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "hip_runtime", "Runtime")


@functools.cache
def _analyzed(name: str):
    """Each real trace analysed once for the whole module (results are only read)."""
    return analyze(DATA / name)


def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def _union_length(intervals) -> float:
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def raw_gpu_steps(path: Path) -> tuple[float, float, int]:
    """(GPU step period s, GPU idle share, whole steps) from the raw events: the steps after
    the first (whose GPU start the trace does not hold), each from the previous step's GPU end
    to its own."""
    ev = _events(path)
    launch = {
        e["args"]["correlation"]: e["ts"]
        for e in ev
        if e.get("cat") in RUNTIME_CATS and "correlation" in e.get("args", {})
    }
    device = [e for e in ev if e.get("cat") in DEVICE_CATS]
    spans = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in ev
        if e.get("cat") in ("user_annotation", "cpu_op", "Operator")
        and re.match(r"ProfilerStep#\d+$", e["name"])
    )
    ends = []
    for a, b in spans:
        mine = [
            e["ts"] + e["dur"]
            for e in device
            if a <= launch.get(e["args"].get("correlation"), e["ts"]) < b
        ]
        ends.append(max(mine))
    lo, hi = ends[0], ends[-1]
    busy = [
        (max(e["ts"], lo), min(e["ts"] + e["dur"], hi))
        for e in device
        if e["ts"] < hi and e["ts"] + e["dur"] > lo
    ]
    n = len(ends) - 1
    return (hi - lo) * 1e-6 / n, 1 - _union_length(busy) / (hi - lo), n


def raw_active_span(path: Path) -> tuple[float, float]:
    """(GPU-active span s, idle share) of a trace without steps."""
    device = [e for e in _events(path) if e.get("cat") in DEVICE_CATS]
    lo = min(e["ts"] for e in device)
    hi = max(e["ts"] + e["dur"] for e in device)
    busy = [(e["ts"], e["ts"] + e["dur"]) for e in device]
    return (hi - lo) * 1e-6, 1 - _union_length(busy) / (hi - lo)


STEPPED = [
    "a100_ddp_nccl_rank0.json.gz",
    "v100_bmm_rank1.json.gz",
    "sampled_2rank/rank-0.json.gz",
    "v100_resnet50_kineto_pt18.json.gz",
]


def _idle_share(rank) -> float:
    wall = sum(s.wall_s for s in rank.steps)
    return sum(s.seconds[bd.IDLE] for s in rank.steps) / wall


@pytest.mark.parametrize("name", STEPPED)
def test_gpu_step_period_and_idle_match_the_raw_events(name):
    period, idle, n = raw_gpu_steps(DATA / name)
    rank = _analyzed(name).ranks[0]
    assert len(rank.steps) == n
    assert rank.step_s == pytest.approx(period, rel=0.05)
    assert _idle_share(rank) == pytest.approx(idle, abs=0.03)
    assert any("partial" in note for note in rank.notes)


# Holistic Trace Analysis 0.5.0 (PyPI) on these files, `get_temporal_breakdown` and
# `get_comm_comp_overlap`: idle, compute and non-compute time and the overlap, in percent.
HTA_0_5_0 = {
    "a100_ddp_nccl_rank0.json.gz": (0, 77.78, 17.26, 4.97, 14.31),
    "v100_bmm_rank1.json.gz": (0, 46.08, 35.55, 18.37, 0.0),
    "sampled_2rank": (0, 53.56, 17.71, 28.74, 11.81),
    "sampled_2rank ": (1, 54.72, 22.57, 22.72, 20.05),
    "alexnet_a100_nosteps.json.gz": (0, 99.49, 0.08, 0.43, 0.0),
    "gp100_gpu_annotations.json.gz": (0, 96.24, 3.75, 0.01, 0.0),
    "mi250_minitoy_rocm6.json.gz": (0, 98.53, 1.08, 0.39, 0.0),
    "v100_resnet50_kineto_pt18.json.gz": (0, 24.32, 73.23, 2.45, 0.0),
}


@pytest.mark.parametrize("name", list(HTA_0_5_0))
def test_the_figures_hta_defines_agree_with_hta_within_a_point(name):
    i, idle, compute, non_compute, overlap = HTA_0_5_0[name]
    h = _analyzed(name.strip()).ranks[i].hta
    got = [h[k] * 100 for k in ("idle_time", "compute_time", "non_compute_time")]
    assert got == pytest.approx([idle, compute, non_compute], abs=1.0)
    assert h["comp_comm_overlap"] * 100 == pytest.approx(overlap, abs=1.0)


@pytest.mark.parametrize("name", ["alexnet_a100_nosteps.json.gz", "gp100_gpu_annotations.json.gz"])
def test_a_trace_without_steps_is_its_gpu_active_span(name):
    span, idle = raw_active_span(DATA / name)
    rank = _analyzed(name).ranks[0]
    assert len(rank.steps) == 1
    assert rank.step_s == pytest.approx(span, rel=1e-4)  # seconds since 1970: ~0.2 µs steps
    assert _idle_share(rank) == pytest.approx(idle, abs=0.01)
    assert any("GPU-active span" in note for note in rank.notes)


@pytest.mark.parametrize("length", [0, -1])
def test_steps_of_no_length_leave_the_gpu_active_span(tmp_path, length):
    # ProfilerStep spans of no length (or negative, a damaged file) launch nothing: the
    # GPU's work is read as one window, its active span, and said so
    name = "mi250_minitoy_rocm6.json.gz"
    with gzip.open(DATA / name, "rt") as f:
        doc = json.load(f)
    for e in doc["traceEvents"]:
        if str(e.get("name", "")).startswith("ProfilerStep"):
            e["dur"] = length * e["dur"]
    path = tmp_path / "steps.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    rank = analyze(path).ranks[0]
    span, _ = raw_active_span(DATA / name)
    assert len(rank.steps) == 1 and rank.step_s == pytest.approx(span, rel=1e-4)
    assert any("no ProfilerStep launched GPU work" in note for note in rank.notes)


@pytest.mark.parametrize("name", [*STEPPED, "mi250_minitoy_rocm6.json.gz"])
def test_kernel_time_is_attributed_and_bounded(name):
    rank = _analyzed(name).ranks[0]
    work = sum(rank.mean(k) for k in bd.WORK)
    known = rank.mean(bd.COMPUTE) + rank.mean(bd.MEMORY_BOUND)
    assert known >= 0.75 * work
    kernels = [k for k in rank.kernels if k.category != "other"]
    with_op = sum(k.time_s for k in kernels if k.op is not None)
    assert with_op >= 0.75 * sum(k.time_s for k in kernels)


def test_batch_norm_kernels_keep_their_op():
    """cudnn_batch_norm has no cost rule but child ops: its own kernels stay in the table."""
    rank = _analyzed("a100_ddp_nccl_rank0.json.gz").ranks[0]
    names = {o.name for o in rank.ops}
    assert {"aten::cudnn_batch_norm", "aten::cudnn_batch_norm_backward"} <= names
    bn = sum(o.time_s for o in rank.ops if "batch_norm" in o.name)
    assert bn > 0.1 * sum(o.time_s for o in rank.ops)


@pytest.mark.parametrize(
    "name, key",
    [
        ("a100_ddp_nccl_rank0.json.gz", "a100-40gb"),
        ("v100_bmm_rank1.json.gz", "v100"),
        ("gp100_gpu_annotations.json.gz", "quadro-gp100"),
        ("mi250_minitoy_rocm6.json.gz", "mi250"),
    ],
)
def test_devices_are_identified_from_their_properties(name, key):
    r = _analyzed(name)
    assert r.device.name == get_spec(key).name
    assert r.device.peak_flops_per_s is not None


def test_a_gpu_trace_that_names_no_device_is_not_called_a_cpu_run():
    r = analyze(DATA / "sampled_2rank")
    assert not any("CPU run" in n for n in r.notes)
    assert any("does not name its GPU" in n and "--spec" in n for n in r.notes)
    assert [x.rank for x in r.ranks] == [0, 1]


@pytest.mark.parametrize(
    "props, key",
    [
        (
            {
                "name": "Tesla V100-SXM2-16GB",
                "computeMajor": 7,
                "computeMinor": 0,
                "numSms": 80,
                "totalGlobalMem": 16935682048,
            },
            "v100",
        ),
        (
            {
                "name": "Tesla V100-DGXS-32GB",
                "computeMajor": 7,
                "computeMinor": 0,
                "numSms": 80,
                "totalGlobalMem": 34089730048,
            },
            "v100",
        ),
        (
            {
                "name": "NVIDIA A100-PG509-200",
                "computeMajor": 8,
                "computeMinor": 0,
                "numSms": 108,
                "totalGlobalMem": 42297524224,
            },
            "a100-40gb",
        ),
        ({"name": "NVIDIA A100-SXM4-80GB"}, "a100-80gb"),
        (
            {
                "name": "AMD Radeon Graphics",
                "computeMajor": 9,
                "computeMinor": 0,
                "numSms": 110,
                "warpSize": 64,
                "totalGlobalMem": 68702699520,
            },
            "mi250x",
        ),
        (
            {
                "name": "AMD Radeon Graphics",
                "gcnArchName": "gfx942:sramecc+:xnack-",
                "numSms": 304,
                "totalGlobalMem": 206158430208,
            },
            "mi300x",
        ),
    ],
)
def test_identify_by_architecture_and_sm_count(props, key):
    assert identify(props).spec.key == key


def test_an_unknown_device_is_still_analysed():
    assert identify({"name": "Imaginary GPU", "computeMajor": 99, "numSms": 7}) is None


def test_kernel_view_names_categories_precision_and_ops():
    rank = _analyzed("a100_ddp_nccl_rank0.json.gz").ranks[0]
    top = rank.kernels[0]
    assert top.category == "NCCL all_reduce" and top.op == "c10d::allreduce_"
    gemms = [k for k in rank.kernels if k.category == "GEMM"]
    assert gemms and all(k.dtype == "tf32" for k in gemms if "tensorop_s1688" in k.name)
    assert sum(k.share for k in rank.kernels) == pytest.approx(1.0)
    copies = [k for k in rank.kernels if k.category.startswith("memcpy")]
    assert copies and all(k.achieved_bytes_per_s for k in copies)


def test_cli_prints_the_kernel_view_and_the_lag(cli):
    code, out, err = cli("trace", DATA / "sampled_2rank")
    assert code == 0, err
    assert "top kernels by device time" in out and "ncclKernel" in out
    assert "behind the CPU" in out  # its GPU runs ~11 ms behind its host


def _same(a, b) -> None:
    assert [r.rank for r in a.ranks] == [r.rank for r in b.ranks]
    for x, y in zip(a.ranks, b.ranks, strict=True):
        assert x.step_s == y.step_s and x.hta == y.hta
        assert [k.name for k in x.kernels] == [k.name for k in y.kernels]
    assert a.cross.straggler == b.cross.straggler


def test_ranks_read_in_worker_processes_give_the_serial_answer():
    folder = DATA / "sampled_2rank"
    _same(analyze(folder, workers=1), analyze(folder, workers=2))


def test_ranks_read_on_a_local_dask_cluster_give_the_serial_answer():
    pytest.importorskip("dask.distributed")
    seen = []
    folder = DATA / "sampled_2rank"
    on_dask = analyze(folder, dask="local", progress=lambda done, total: seen.append(done))
    _same(analyze(folder, workers=1), on_dask)
    assert seen == [1]  # the first rank is read here, the other on the cluster


def test_workers_must_be_a_whole_number():
    from ceiling.errors import CeilingError

    with pytest.raises(CeilingError, match="workers"):
        analyze(DATA / "sampled_2rank", workers=0)


def test_a_dask_address_nobody_answers_is_one_line():
    pytest.importorskip("dask.distributed")
    from ceiling.errors import CeilingError

    with pytest.raises(CeilingError, match="no Dask scheduler answers"):
        analyze(DATA / "sampled_2rank", dask="nonsense://x")


def test_a_folder_of_traces_from_different_devices_says_so(tmp_path):
    import shutil

    for name in ("gp100_gpu_annotations.json.gz", "alexnet_a100_nosteps.json.gz"):
        shutil.copy(DATA / name, tmp_path / name)
    notes = " ".join(analyze(tmp_path).notes)
    assert "the traces name different devices" in notes and "Quadro GP100" in notes
    assert "different devices" not in " ".join(_analyzed("sampled_2rank").notes)


def test_unknown_model_flops_name_the_ops_that_could_not_be_counted():
    notes = " ".join(_analyzed("v100_resnet50_kineto_pt18.json.gz").notes)
    assert "model FLOPs unknown, not zero" in notes and "cudnn_convolution" in notes
    assert "model FLOPs unknown" not in " ".join(_analyzed("mi250_minitoy_rocm6.json.gz").notes)
