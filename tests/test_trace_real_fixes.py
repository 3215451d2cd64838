"""Older, multi-rank and single-step real traces (tests/data/traces-real/README.md) read right,
kernels classed by what they do, consumer GPUs on the catalog, and the critical path of every
real trace checked for sense and against Holistic Trace Analysis's."""

from __future__ import annotations

import gzip
import json
import re

import pytest

from ceiling.hardware.catalog import get_spec
from ceiling.hardware.identify import identify
from ceiling.trace import breakdown as bd
from ceiling.trace.analyze import analyze
from ceiling.trace.rank_summary import Prepared
from ceiling.trace.reader import read_trace
from ceiling.trace.step_paths import step_paths
from test_trace_cuda import _write, cuda_trace
from test_trace_real import DATA, DEVICE_CATS, _analyzed, _events

PT18 = "v100_resnet50_kineto_pt18.json.gz"


def _union(intervals) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        elif b > a:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _overlap(xs, ys) -> float:
    return sum(max(0.0, min(b, d) - max(a, c)) for a, b in xs for c, d in ys)


def _respelled(tmp_path, name: str, old: str, new: str):
    with gzip.open(DATA / name, "rt") as f:
        doc = json.load(f)
    for e in doc["traceEvents"]:
        args = e.get("args") or {}
        if old in args:
            args[new] = args.pop(old)
    return _write(tmp_path / "respelled.json", doc)


def test_pytorch_18_input_dims_are_read_as_shapes(tmp_path):
    """PyTorch 1.8-1.9 wrote the shapes under `Input dims`: the same ops, shapes and FLOPs."""
    rank = analyze(_respelled(tmp_path, PT18, "Input Dims", "Input dims")).ranks[0]
    same = _analyzed(PT18).ranks[0]
    assert rank.shapes_recorded
    assert [(o.name, o.shapes, o.flops) for o in rank.ops] == [
        (o.name, o.shapes, o.flops) for o in same.ops
    ]
    assert any(o.flops for o in rank.ops if o.name == "aten::addmm")


def test_gpu_idle_while_the_loader_runs_is_waiting_on_data():
    """PyTorch 1.8 records the DataLoader's span as an op (`Operator`), not an annotation: the
    GPU's idle time inside those spans is waiting on data, not launch-bound."""
    events = _events(DATA / PT18)
    loader = [
        (e["ts"] * 1e-6, (e["ts"] + e["dur"]) * 1e-6)
        for e in events
        if re.search("DataLoader", e.get("name", ""))
    ]
    busy = _union(
        (e["ts"] * 1e-6, (e["ts"] + e["dur"]) * 1e-6) for e in events if e.get("cat") in DEVICE_CATS
    )
    rank = _analyzed(PT18).ranks[0]
    for step in rank.steps:
        w = (step.start_s, step.start_s + step.wall_s)
        inside = [(max(a, w[0]), min(b, w[1])) for a, b in busy if b > w[0] and a < w[1]]
        gaps = [
            (a, b)
            for a, b in zip(
                [w[0]] + [b for _, b in inside], [a for a, _ in inside] + [w[1]], strict=True
            )
            if b > a
        ]
        expected = _overlap(gaps, _union(loader))
        assert step.idle_reasons[bd.DATA] == pytest.approx(expected, abs=1e-6)
    assert sum(s.idle_reasons[bd.DATA] for s in rank.steps) > 1e-3  # 2.8 ms over the steps


def test_one_answer_to_which_rank_is_slowest(cli):
    r = _analyzed("sampled_2rank")
    assert r.cross.straggler is not None and r.cross.slowest_rank == r.cross.straggler
    code, out, err = cli("trace", DATA / "sampled_2rank")
    assert code == 0, err
    assert f"straggler: rank {r.cross.straggler}" in out and "slowest rank" not in out


def _lone_step(tmp_path):
    """The MI250 trace with its second, empty ProfilerStep taken out: one step."""
    with gzip.open(DATA / "mi250_minitoy_rocm6.json.gz", "rt") as f:
        doc = json.load(f)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("name") != "ProfilerStep#2"]
    return doc


def test_a_lone_step_is_its_profiler_step_span(tmp_path):
    """HTA bounds a step by its ProfilerStep span and the GPU work launched in it; with one
    step it keeps every kernel for its figures (the summary line is there)."""
    doc = _lone_step(tmp_path)
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    (span,) = [
        e for e in events if e.get("name") == "ProfilerStep#1" and e["cat"] == "user_annotation"
    ]
    a, b = span["ts"], span["ts"] + span["dur"]
    launch = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    ends = [
        e["ts"] + e["dur"]
        for e in events
        if e.get("cat") in DEVICE_CATS
        and a <= launch.get(e["args"].get("correlation"), e["ts"]) < b
    ]
    rank = analyze(_write(tmp_path / "one.json", doc)).ranks[0]
    (step,) = rank.steps
    assert step.start_s == pytest.approx(a * 1e-6, abs=1e-7)
    assert step.wall_s == pytest.approx((max(b, *ends) - a) * 1e-6, rel=1e-6)
    assert rank.hta is not None
    assert rank.hta["idle_time"] * 100 == pytest.approx(98.53, abs=1.0)  # HTA 0.5.0's


def test_fft_convolutions_and_fbgemm_permutes_are_no_gemms():
    alexnet = _analyzed("alexnet_a100_nosteps.json.gz").ranks[0].kernels
    cgemm = [k for k in alexnet if "cgemm" in k.name]
    assert cgemm and all(k.category == "convolution" for k in cgemm)
    dlrm = _analyzed("sampled_2rank").ranks[0].kernels
    permutes = [k for k in dlrm if "fbgemm_gpu::permute" in k.name]
    assert permutes and all(k.category == "elementwise" for k in permutes)
    # fbgemm's only matmuls are its batched ones (jagged_dense_bmm): they are GEMMs
    gemms = [k for k in dlrm if "fbgemm" in k.name and k.category == "GEMM"]
    assert all("bmm" in k.name for k in gemms)
    from ceiling.trace.kernels import category

    assert category("void fbgemm_gpu::jagged_dense_bmm_kernel<float, float>(...)", "kernel") == (
        "GEMM"
    )


@pytest.mark.parametrize(
    "driver_name, key",
    [
        ("GeForce RTX 2080 Ti", "rtx-2080-ti"),  # drivers before 2021 drop the maker
        ("NVIDIA GeForce RTX 2080 Ti", "rtx-2080-ti"),
        ("GeForce RTX 3090", "rtx-3090"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA A10", "a10"),
    ],
)
def test_consumer_and_inference_gpus_are_in_the_catalog(driver_name, key):
    found = identify({"name": driver_name})
    assert found is not None and found.spec.name == get_spec(key).name
    assert found.spec.peak("fp16") > 0 and found.spec.sources["peak_flops_per_s"]
    assert "https://" in found.spec.sources["datasheet"]


def test_a_2080_ti_trace_gets_its_mfu(tmp_path):
    doc = cuda_trace(device="GeForce RTX 2080 Ti")
    for e in doc["traceEvents"]:
        if e["name"] in ("aten::addmm", "aten::add", "aten::mul"):
            types = e["args"]["Input type"]
            e["args"]["Input type"] = ["c10::Half" if t == "c10::BFloat16" else t for t in types]
        if e["name"].startswith("sm90_xmma_gemm"):
            e["name"] = "turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_nn"
    r = analyze(_write(tmp_path / "t.json", doc))
    assert r.device.name == "NVIDIA GeForce RTX 2080 Ti" and r.device.peak_key == "fp16"
    gemm = 2.0 * 4096**3
    assert r.ranks[0].mfu == pytest.approx(gemm / 1.0e-3 / 53.8e12)


REAL = [
    "a100_ddp_nccl_rank0.json.gz",
    "v100_bmm_rank1.json.gz",
    "sampled_2rank",
    PT18,
    "mi250_minitoy_rocm6.json.gz",
    "alexnet_a100_nosteps.json.gz",
    "gp100_gpu_annotations.json.gz",
]


@pytest.mark.parametrize("name", REAL)
def test_the_critical_path_of_real_traces_is_bounded(name):
    """At most the step, at least its busiest stream's busy time (a chain of its own)."""
    r = analyze(DATA / name, critical_path=True)
    files = sorted((DATA / name).iterdir()) if (DATA / name).is_dir() else [DATA / name]
    for rank, f in zip(r.ranks, files, strict=True):
        streams: dict = {}
        for e in _events(f):
            if e.get("cat") in DEVICE_CATS:
                streams.setdefault((e["pid"], e["tid"]), []).append(
                    (e["ts"] * 1e-6, (e["ts"] + e["dur"]) * 1e-6)
                )
        for step in rank.steps:
            w = (step.start_s, step.start_s + step.wall_s)
            busiest = max(
                sum(min(b, w[1]) - max(a, w[0]) for a, b in _union(v) if b > w[0] and a < w[1])
                for v in streams.values()
            )
            path = step.critical_path
            assert busiest - 1e-9 <= path.length_s <= step.wall_s + 1e-9
            assert sum(path.seconds.values()) == pytest.approx(path.length_s)


# Holistic Trace Analysis 0.5.0 (PyPI), `critical_path_analysis(rank, "ProfilerStep", i)`:
# the sum of its critical path's edge weights, ms (benchmarks/critical_path_vs_hta.py)
HTA_CRITICAL_PATH_MS = {
    ("a100_ddp_nccl_rank0.json.gz", 0): 101.646,
    ("a100_ddp_nccl_rank0.json.gz", 1): 101.398,
    ("v100_bmm_rank1.json.gz", 0): 238.893,
    ("v100_bmm_rank1.json.gz", 1): 252.853,
    ("v100_bmm_rank1.json.gz", 2): 238.688,
    ("v100_bmm_rank1.json.gz", 3): 239.396,
    ("sampled_2rank/rank-0.json.gz", 0): 267.581,
    ("mi250_minitoy_rocm6.json.gz", 0): 7.448,
}


@pytest.mark.parametrize("name, i", list(HTA_CRITICAL_PATH_MS))
def test_the_critical_path_agrees_with_hta_within_2_percent(name, i):
    """On HTA's window for the step: from its ProfilerStep's start to the end of the later of
    that span and the GPU work launched in it."""
    p = Prepared.of(read_trace(DATA / name))
    span = p.trace.steps[i]
    ends = [
        e.end_s
        for e in p.trace.device_events
        if span.start_s <= p.links.launched_at(e) < span.end_s
    ]
    (path,) = step_paths(p.trace, [(span.start_s, max(span.end_s, *ends))], [], {}, [])
    assert path.length_s * 1e3 == pytest.approx(HTA_CRITICAL_PATH_MS[(name, i)], rel=0.02)
