"""Host-bound layers (`model.plan.host`): kernel counts per layer and pass, and the time the
GPU waits for the host to launch them."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from ceiling.errors import InvalidInput
from ceiling.hardware.catalog import get_spec
from ceiling.model.cluster import make_cluster
from ceiling.model.plan import host
from ceiling.model.plan.axes import Plan
from ceiling.model.plan.moe import moe_of
from ceiling.model.plan.step import Job, evaluate_plan
from ceiling.model.plan.training import recipe_defaults
from ceiling.model.transformer import get_model, parse_model

# Qwen3-30B-A3B's shapes (Hugging Face Qwen/Qwen3-30B-A3B config.json): 128 experts of width
# 768, 8 a token, every layer routed.
QWEN3_30B = parse_model(
    "custom:layers=48,hidden=2048,heads=32,kv_heads=4,head_dim=128,ffn_hidden=768,"
    "ffn_kind=swiglu,vocab=151936,max_seq=40960,experts=128,active_experts=8,norm=rmsnorm,"
    "trained_dropout=false"
)


def test_router_kernel_counts_are_megatron_cores():
    # Megatron-LM deepseek-v3-gb200-optimization, sections 2.1.4 and 2.2.1.
    assert host.ROUTER_KERNELS[("alltoall", False)] == 72
    assert host.ROUTER_KERNELS[("alltoall", True)] == 31
    assert host.ROUTER_KERNELS[("deepep", True)] == 17
    assert host.ROUTER_KERNELS[("deepep", False)] == 72 - (31 - 17)


def test_routed_kernels_count_one_gemm_per_local_expert_and_pass():
    moe = moe_of(QWEN3_30B)
    opts = host.HostOptions(router_fusion=True, permute_fusion=True)
    fwd, bwd, after = host.routed_kernels(moe, 8, 1, False, opts)
    # router 31, permute 2 + dispatch 1 (after the sync), sort and back 2, 2·16 GEMMs,
    # combine 1, unpermute 1
    assert after == 3
    assert fwd == 31 + 3 + 2 + 32 + 1 + 1
    # router 31, unpermute and permute reversed 1 + 2, two all-to-alls, sorts 2, 4·16 GEMMs
    assert bwd == 31 + 1 + 2 + 2 + 2 + 64
    unfused = host.HostOptions(router_fusion=False, permute_fusion=False)
    fwd_u, bwd_u, after_u = host.routed_kernels(moe, 8, 1, True, unfused)
    # FP8 adds one quantisation per grouped linear each way
    assert fwd_u == 72 + (6 + 1) + 2 * 2 + 32 + 2 + 1 + 4
    assert bwd_u == 72 + 4 + 6 + 2 + 2 * 2 + 64 + 2
    assert after_u == 7
    # One expert rank: no all-to-all, no sort; every expert local
    fwd1, _, after1 = host.routed_kernels(moe, 1, 1, False, opts)
    assert (fwd1, after1) == (31 + 2 + 2 * 128 + 1, 2)


def test_cuda_graphs_leave_the_routed_experts_eager():
    moe = moe_of(QWEN3_30B)
    graphs = host.HostOptions(cuda_graphs=True)
    fwd, _, _ = host.routed_kernels(moe, 8, 1, False, graphs)
    assert fwd == 1 + 3 + 2 + 32 + 1 + 1  # the router a graph launch, the rest as before
    attn = host.attention_kernels(np.array([4.0]), np.array([True]), True, False, True)
    assert attn[0][0] == attn[1][0] == host.GRAPH_LAUNCHES


def test_attention_kernels_with_tensor_parallel_fp8_and_eager():
    f, b = host.attention_kernels(np.array([1.0, 4.0, 4.0]), np.array([False, True, False]),
                                  np.array([False, True, False]), False, False)  # fmt: skip
    assert list(f) == [7, 7 + 2 + 1, 7 + 1]
    assert list(b) == [13, 13 + 2 + 2, 13 + 1]
    fe, be = host.attention_kernels(np.array([1.0]), np.array([False]), False, True, False)
    assert (fe[0], be[0]) == (7 + 21, 13 + 42)
    fq, bq = host.attention_kernels(np.array([1.0]), np.array([False]), False, False, False, True)
    assert (fq[0], bq[0]) == (7 + 2, 13 + 4)


def test_host_extra_is_the_longer_of_host_and_gpu_per_pass():
    # forward: GPU 1 ms of 3 ms; host 1.5 ms -> waits 0.5 ms; backward GPU 2 ms, host 1 ms
    extra = host.host_extra_s(1.5e-3, 1.0e-3, 0.0, 3e-3, 0.0)
    assert extra == pytest.approx(0.5e-3)
    # the GPU idles after the MoE sync while the permutation is launched, host-bound or not
    assert host.host_extra_s(0.1e-3, 0.1e-3, 30e-6, 3e-3, 0.0) == pytest.approx(30e-6)
    # full recompute: the forward again inside the backward, host and GPU (4 passes)
    extra = host.host_extra_s(1.5e-3, 2.0e-3, 0.0, 4e-3, 1.0)
    assert extra == pytest.approx((1.5e-3 - 1e-3) + (2.0e-3 + 1.5e-3 - 3e-3))


def _qwen3_30b(**job):
    base = Job(QWEN3_30B, 512, 4096, dropout=False, **job)
    cluster = make_cluster(get_spec("h100-sxm"), 16)
    plan = Plan(d=16, t=1, p=1, ep=8, etp=1, zero=1, recompute="none", fp8="linear")
    return evaluate_plan(base, cluster, plan)


def test_a_plan_is_host_bound_when_its_kernels_take_longer_to_launch():
    fast = _qwen3_30b(host_kernel_s=0.0)
    slow = _qwen3_30b(host_kernel_s=60e-6, moe_router_fusion=False, moe_permute_fusion=False)
    assert fast.time["host_s"] == 0.0
    assert slow.time["host_s"] > 0.1 * slow.step_time_s
    # The host-bound time is in the step's parts, which still add up to it
    assert sum(slow.time.values()) == pytest.approx(slow.step_time_s, rel=1e-9)
    graphs = _qwen3_30b(host_kernel_s=60e-6, cuda_graphs=True)
    assert graphs.time["host_s"] < slow.time["host_s"]


def test_a_large_dense_model_is_never_host_bound():
    job = Job(get_model("llama-3-70b"), 256, 8192, dropout=False)
    plan = Plan(d=8, t=8, p=1, zero=1, recompute="selective")
    est = evaluate_plan(job, make_cluster(get_spec("h100-sxm"), 64), plan)
    # only the after-sync term of MoE layers could add time; a dense layer has none
    assert est.time["host_s"] == 0.0


def test_job_refuses_bad_host_options():
    with pytest.raises(InvalidInput, match="host seconds per kernel"):
        Job(QWEN3_30B, 8, 128, host_kernel_s=-1e-6)
    with pytest.raises(InvalidInput, match="cuda_graphs"):
        Job(QWEN3_30B, 8, 128, cuda_graphs="yes")


def test_recipes_set_the_host_options():
    tt = recipe_defaults("torchtitan", QWEN3_30B)
    assert tt.job["moe_router_fusion"] is False and "unfused router" in tt.said
    assert recipe_defaults("maxtext", QWEN3_30B).job["cuda_graphs"] is True
    said = recipe_defaults("megatron", QWEN3_30B).said
    assert "router and permutation fused, no CUDA graphs" in said
    job = dataclasses.replace(Job(QWEN3_30B, 8, 128), **tt.job)
    assert job.moe_router_fusion is False and job.moe_permute_fusion is True


SMALL_MOE = [
    "plan",
    "custom:layers=4,hidden=1024,heads=8,kv_heads=8,ffn_hidden=512,ffn_kind=swiglu,vocab=32000,"
    "max_seq=2048,experts=64,active_experts=8,norm=rmsnorm,trained_dropout=false",
    "--spec", "h100-sxm", "-n", "8", "-s", "2048", "-b", "64",
    "--fixed", "d=8,t=1,p=1,b=1,ep=8,zero=1,recompute=none",
]  # fmt: skip


def test_the_command_says_when_a_plan_is_host_bound_and_what_helps(cli):
    code, out, err = cli(*SMALL_MOE, "--no-moe-fusion", "--host-kernel-us", "20")
    assert code == 0, err
    text = " ".join(out.split())  # the terminal wraps lines
    assert "host-bound:" in text and "--cuda-graphs" in text and "--moe-fusion" in text
    assert "MoE router unfused, permutation unfused; 20 µs a kernel launched (given)" in text
    code, out, err = cli(*SMALL_MOE, "--no-moe-fusion", "--host-kernel-us", "20", "--json")
    eager = json.loads(out)["plans"][0]
    code, out, err = cli(*SMALL_MOE, "--cuda-graphs", "--host-kernel-us", "20", "--json")
    data = json.loads(out)
    graphs = data["plans"][0]
    assert data["assumptions"]["host"].startswith("CUDA graphs")
    assert 0 < graphs["time_breakdown_s"]["host_s"] < eager["time_breakdown_s"]["host_s"]
    code, _, err = cli(*SMALL_MOE, "--host-kernel-us", "-1")
    assert code == 2 and "host" in err and len(err.strip().splitlines()) == 1


def test_a_gpu_profile_s_measured_host_cost_replaces_the_default():
    from types import SimpleNamespace

    from ceiling.hardware.profile import MeasuredDevice
    from ceiling.model.plan.training import with_measured_host

    costs = {"forward_s": 14e-6, "backward_s": 6e-6, "optimizer_s": 1e-6}
    gpu = MeasuredDevice("H100", "cuda", {"bf16": 7e14}, 3e12,
                         extra={"overhead": {"host_costs": costs}})  # fmt: skip
    job = Job(QWEN3_30B, 8, 128)
    measured = with_measured_host(job, SimpleNamespace(from_profile=True, measured=gpu))
    assert measured.host_kernel_s == pytest.approx(10e-6) and measured.host_measured
    costs["forward_s"] = 30e-6
    assert with_measured_host(
        job, SimpleNamespace(from_profile=True, measured=gpu)
    ).host_kernel_s == pytest.approx(18e-6)
    # a datasheet device, a CPU's profile, or a cost the user gave: unchanged
    assert with_measured_host(job, SimpleNamespace(from_profile=False)) is job
    cpu = dataclasses.replace(gpu, kind="cpu")
    assert with_measured_host(job, SimpleNamespace(from_profile=True, measured=cpu)) is job
    given = Job(QWEN3_30B, 8, 128, host_kernel_s=5e-6)
    assert with_measured_host(given, SimpleNamespace(from_profile=True, measured=gpu)) is given
