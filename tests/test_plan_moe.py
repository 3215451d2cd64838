"""Mixture-of-experts terms of the planner (model.plan.moe), the attention kernels' curves
(model.plan.attention_kernels), MoE parallel folding and FSDP inside pipeline stages."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from ceiling.errors import DoesNotFit, InvalidInput
from ceiling.hardware.catalog import get_spec
from ceiling.model.cluster import make_cluster
from ceiling.model.plan import moe as M
from ceiling.model.plan.attention_kernels import attention_share
from ceiling.model.plan.search import enumerate_plans, search
from ceiling.model.plan.step import Job, Plan, evaluate_plan
from ceiling.model.transformer import get_model, parse_model

H100 = get_spec("h100-sxm")
QWEN3_30B = parse_model(
    "custom:layers=48,hidden=2048,heads=32,kv_heads=4,head_dim=128,ffn_hidden=768,"
    "ffn_kind=swiglu,vocab=151936,experts=128,active_experts=8,trained_dropout=false"
)


def test_tile_and_wave_quantisation_of_a_grouped_gemm():
    # One expert with 100 rows: its 128-row tile is 100/128 used, and one tile fills 1 of
    # 132 SMs; the weight gradient (4096 × 128 output) runs 32 tiles in one wave.
    eff = M.grouped_gemm_efficiency(100, 1, 128, 4096, 132)
    fwd, wgrad = (100 / 128) / 132, 32 / 132
    assert float(eff) == pytest.approx(3 / (2 / fwd + 1 / wgrad))
    # Full tiles in whole waves: no loss.
    assert float(M.grouped_gemm_efficiency(1280, 132, 128, 1280, 132)) == pytest.approx(1.0)


def test_the_tiles_fixed_part_comes_from_two_published_rows():
    # DeepGEMM README (2025-02), FP8 on H800, M = 4096, N = 7168: 1358 TFLOP/s at K = 16384,
    # 1025 at K = 2048. rate(K) = R·K/(K + K0) through both rows.
    k0 = M.fixed_tile_k(((16384, 1358.0), (2048, 1025.0)))
    assert k0 == pytest.approx(16384 * 2048 * 333 / (1025 * 16384 - 1358 * 2048))
    rate = 1358.0 * (16384 + k0) / 16384
    assert rate * 2048 / (2048 + k0) == pytest.approx(1025.0)
    # The table's other rows at M = 4096 within 6 %: K = 512 (590), 1536 (990), 7168 (1304).
    for k, published in ((512, 590.0), (1536, 990.0), (7168, 1304.0)):
        assert rate * k / (k + k0) == pytest.approx(published, rel=0.06)
    fp8, bf16 = M.K0_FP8, M.K0_BF16
    assert fp8 == pytest.approx(k0) and bf16 == pytest.approx(k0 / 2)


def test_a_short_k_loop_loses_its_tiles_fixed_part():
    k0 = M.K0_FP8
    ref = 4096 / (4096 + k0)
    assert float(M.k_loop_share(768, k0)) == pytest.approx(768 / (768 + k0) / ref)
    # At and above the reference K nothing is lost; no fixed part (k0 = 0): nothing either.
    assert M.k_loop_share([4096, 16384], k0).tolist() == [1.0, 1.0]
    assert float(M.k_loop_share(128, 0.0)) == 1.0
    # 16-bit GEMMs run the K loop at half the FP8 rate: half the loss at the same K.
    assert M.k_loop_share(768, M.K0_BF16) > M.k_loop_share(768, M.K0_FP8)


def test_each_pass_of_a_grouped_gemm_pays_for_its_own_k():
    # Full tiles in whole waves (132 experts of 1280 rows × 128 columns × 1280 inner): the
    # forward's K is 1280, the data gradient's 128 (the columns), the weight gradient's 1280.
    k0 = M.K0_FP8
    eff = M.grouped_gemm_efficiency(1280, 132, 128, 1280, 132, k0=k0)
    s_fwd, s_dgrad = M.k_loop_share(1280, k0), M.k_loop_share(128, k0)
    expected = 3 / (2 / s_fwd + 1 / s_dgrad)
    assert float(eff) == pytest.approx(float(expected))


def test_a_grouped_linear_launches_one_gemm_per_local_expert():
    moe = M.moe_of(QWEN3_30B)
    # 128 experts over EP 8: 16 GEMMs per grouped linear pass, 2 linears, 3 passes.
    assert float(M.grouped_launch_floor_s(moe, 8, 3.0, 5e-6)) == pytest.approx(2 * 3 * 16 * 5e-6)
    # Few tokens on one rank with every expert: the launches set the experts' time.
    job = Job(QWEN3_30B, 8, 256, attention="flash", dropout=False)
    plan = Plan(8, 1, 1, ep=1, etp=1, zero=1)
    one = evaluate_plan(job, make_cluster(H100, 8), plan)
    launches = 48 * one.micro_batches * float(M.grouped_launch_floor_s(moe, 1, 3.0, 5e-6))
    assert one.time["matmul_s"] > launches


def test_rows_per_expert_follow_tokens_top_k_and_the_expert_group():
    rows = M.tokens_per_expert(2048, 32, 1, 8, 128, 1.25)
    assert float(rows) == 2048 * 32 * 8 / 128 * 1.25
    assert float(M.tokens_per_expert(2048, 4, 2, 8, 128, 1.0)) == 2048 * 8 * 8 / 128


def test_all_to_all_takes_each_byte_on_the_link_it_crosses():
    moe = M.moe_of(QWEN3_30B)
    intra, inter = (400e9, 5e-6), (50e9, 10e-6)
    tokens, row = 4096, 2 * 2048
    # EP8 inside a node: 7 of 8 destinations over NVLink.
    t8 = M.all_to_all_time(moe, tokens, 8, 1, 8, intra, inter, dedup=False)
    assert float(t8) == pytest.approx(tokens * 8 * row * 7 / 8 / 400e9 + 5e-6)
    # EP32 over 4 nodes (NCCL): 24 of 32 destinations across the NIC, the slower link.
    t32 = M.all_to_all_time(moe, tokens, 32, 1, 8, intra, inter, dedup=False)
    assert float(t32) == pytest.approx(tokens * 8 * row * 24 / 32 / 50e9 + 10e-6)
    # DeepEP: once per other node a token's 8 experts land on, at most the node limit.
    other = 3 * (1 - 0.75**8)
    assert float(M.expected_nodes(8, 4)) == pytest.approx(other)
    dedup = M.all_to_all_time(moe, tokens, 32, 1, 8, intra, inter, dedup=True)
    assert float(dedup) == pytest.approx(tokens * row * other / 50e9 + 10e-6)
    limited = M.all_to_all_time(moe, tokens, 32, 1, 8, intra, inter, dedup=True, node_limit=2)
    assert float(limited) == pytest.approx(tokens * row * 2 / 50e9 + 10e-6)
    # etp = 4 spaces the EP ranks 4 apart: EP8 then spans 4 nodes of 8.
    spread = M.all_to_all_time(moe, tokens, 8, 4, 8, intra, inter, dedup=False)
    assert float(spread) == pytest.approx(tokens * 8 * row * 6 / 8 / 50e9 + 10e-6)


def test_routing_kernels_move_the_router_and_the_permuted_copies():
    moe = M.moe_of(QWEN3_30B)
    h, k, e = 2048, 8, 128
    fwd, bwd = M.routing_bytes_per_token(moe, np.array([1.0, 8.0]))
    router = (4 + 3) * e * 4 + k * 12  # routing, then the balance loss's 3 passes
    alone = router + 2 * (2 * h + 2 * h * k)
    assert fwd.tolist() == pytest.approx([alone, alone + 2 * 4 * h * k])
    assert bwd.tolist() == fwd.tolist()


def test_moe_of_reads_the_fields_a_config_may_add():
    # Shared experts, a routed width apart from the dense FFN, dense first layers.
    cfg = SimpleNamespace(
        experts=256, active_experts=8, ffn_kind="swiglu", ffn_hidden=18432, layers=61,
        hidden=7168, moe_ffn_hidden=2048, shared_experts=1, shared_ffn_hidden=2048,
        moe_layers=58, bias=False,
    )  # fmt: skip
    moe = M.moe_of(cfg)
    assert (moe.moe_ffn, moe.shared, moe.moe_layers, moe.dense_ffn) == (2048, 1, 58, 18432)
    width = ((8 * 2048 + 2048) * 58 + 18432 * 3) / 61
    assert moe.ffn_active_width == pytest.approx(width)
    assert moe.params_routed_layer == pytest.approx(256 * 3 * 7168 * 2048 * 58 / 61)
    # Today's configs: every layer routed, the experts' width is ffn_hidden.
    mix = M.moe_of(get_model("mixtral-8x7b"))
    assert (mix.moe_layers, mix.moe_ffn, mix.shared) == (32, 14336, 0)
    assert M.moe_of(get_model("llama-3-8b")).routed is False


def test_parallel_folding_lays_experts_over_tensor_and_data_ranks():
    job = Job(QWEN3_30B, 256, 4096, attention="flash", dropout=False)
    c = make_cluster(H100, 64)
    # EP16 with d = 8 and t = 2 (etp 1): 16 divides t·cp·d = 16.
    folded = evaluate_plan(job, c, Plan(8, 2, 4, ep=16, etp=1, zero=1))
    assert folded.memory["params_per_device"] > 0
    with pytest.raises(InvalidInput, match=r"t·cp·d\(16\) % \(ep·etp = 32\)"):
        evaluate_plan(job, c, Plan(8, 2, 4, ep=32, etp=1, zero=1))
    with pytest.raises(InvalidInput, match=r"experts\(128\) % ep\(3\)"):
        evaluate_plan(dataclasses.replace(job, global_batch=240), make_cluster(H100, 24),
                      Plan(3, 2, 4, ep=3, etp=1))  # fmt: skip
    cand = enumerate_plans(job, c, {"t": 2, "p": 4, "cp": 1, "etp": 1})
    assert 16 in set(cand["ep"]) and set(cand["d"]) == {8}


def test_fsdp_inside_pipeline_stages_is_searched_and_gathers_once_a_step():
    job = Job(get_model("llama-3-8b"), 64, 4096, attention="flash", dropout=False)
    c = make_cluster(H100, 16)
    cand = enumerate_plans(job, c, {"p": 2})
    assert 3 in set(cand["zero"]) and 2 not in set(cand["zero"])
    one, two = (
        evaluate_plan(job, c, Plan(8, 1, 2, micro_batch=b, zero=3, recompute="full"))
        for b in (1, 2)
    )
    # The stage's weights gathered once a step and held, its gradients reduce-scattered once
    # (`memory.held_stage_bytes`): the traffic does not grow with the micro-batches.
    assert one.micro_batches == 2 * two.micro_batches
    assert one.dp_comm_s == pytest.approx(two.dp_comm_s)


def test_attention_runs_at_its_kernels_published_curve_on_hopper():
    # cuDNN, head dim 128, causal, 16k: forward 539 TFLOP/s; backward 516 (not causal) at
    # the forward's causal/non-causal ratio 539/595 (FlashAttention-3 paper, Figs. 5-6).
    bwd = 516 * 539 / 595
    expected = 3 / (1 / 539 + 2.5 / bwd) * 1e12 / 989e12
    assert float(attention_share("cudnn", 128, 16384)) == pytest.approx(expected)
    # Longer than published: held at 16k; shorter sequences and smaller heads run slower.
    assert float(attention_share("cudnn", 128, 131072)) == pytest.approx(expected)
    assert attention_share("fa3", 128, 1024) < attention_share("fa3", 128, 8192)
    assert attention_share("fa3", 64, 8192) < attention_share("fa3", 128, 8192)
    assert attention_share("fa2", 128, 8192) < attention_share("cudnn", 128, 8192)


def test_attention_on_devices_without_curves_keeps_the_device_share():
    model = get_model("llama-3-8b")
    a100 = make_cluster(get_spec("a100-80gb"), 8)
    short, long = (
        evaluate_plan(Job(model, 8, s, dropout=False), a100, Plan(8, 1, 1, zero=1))
        for s in (2048, 8192)
    )

    # Same share at both lengths: attention time goes with tokens × s × the causal blocks.
    def work(s):
        return 8 * s * s * (s + 128) / (2 * s)

    ratio = long.time["attention_s"] / short.time["attention_s"]
    assert ratio == pytest.approx(work(8192) / work(2048), rel=1e-9)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("moe_imbalance", 0.9, "imbalance must be ≥ 1"),
        ("moe_dispatcher", "nvshmem", "dispatcher must be one of"),
        ("moe_node_limit", -1, "moe_node_limit must be a whole number"),
        ("attention_kernel", "fa4", "attention_kernel must be one of"),
        ("framework", "jax", "framework must be one of"),
    ],
)
def test_job_refuses_bad_moe_and_kernel_options(field, value, match):
    job = Job(get_model("llama-3-8b"), 8, 2048)
    with pytest.raises(InvalidInput, match=match):
        dataclasses.replace(job, **{field: value})


def test_framework_recipes_set_what_their_runs_use_and_say_so():
    import ceiling

    big = ceiling.plan("llama-3-70b", 64, spec="h100-sxm", framework="nemo", top=1)
    assert big.job.loss == "fused" and big.fixed["tp_overlap"] is True
    assert "TP overlap on" in big.assumptions["framework"]
    small = ceiling.plan("llama-3-8b", 8, spec="h100-sxm", framework="megatron", top=1)
    assert "tp_overlap" not in small.fixed and small.job.loss == "fp32"
    titan = ceiling.plan("llama-3-8b", 8, spec="h100-sxm", framework="torchtitan", top=1)
    assert titan.best.plan.zero == 3 and titan.best.plan.kernels == "eager"
    assert titan.job.loss == "eager" and titan.assumptions["attention_kernel"].startswith("fa2")
    # What the user gives wins over the recipe.
    mine = ceiling.plan(
        "llama-3-8b", 8, spec="h100-sxm", framework="torchtitan", fixed="zero=1", loss="fp32"
    )
    assert mine.best.plan.zero == 1 and mine.job.loss == "fp32"
    with pytest.raises(InvalidInput, match="framework must be one of"):
        ceiling.plan("llama-3-8b", 8, spec="h100-sxm", framework="jax")


def test_hsdp_shards_inside_groups_and_all_reduces_across_them():
    job = Job(get_model("llama-3-8b"), 64, 4096, attention="flash", dropout=False)
    c = make_cluster(H100, 32)
    fsdp = evaluate_plan(job, c, Plan(32, 1, 1, 2, zero=3))
    hsdp = evaluate_plan(job, c, Plan(32, 1, 1, 2, zero=3, shard=8))
    n = fsdp.memory["params_per_device"]
    # State sharded over 8, not 32: 16 bytes a parameter over 8 (gradients fp32: 18).
    assert hsdp.memory["state_bytes"] == pytest.approx(18 * n / 8)
    assert fsdp.memory["state_bytes"] == pytest.approx(18 * n / 32)
    # Inside a node the gathers take NVLink; the gradient shards cross nodes once a step.
    assert hsdp.time["dp_exposed_s"] < fsdp.time["dp_exposed_s"]
    with pytest.raises(InvalidInput, match="shard divide d·cp"):
        evaluate_plan(job, c, Plan(32, 1, 1, 2, zero=3, shard=6))
    with pytest.raises(InvalidInput, match="zero must be 1-3"):
        evaluate_plan(job, c, Plan(32, 1, 1, 2, zero=0, shard=8))
    best = search(job, c, {"shard": 8, "t": 1}, top=1).plans[0]
    assert best.plan.shard == 8 and best.plan.zero >= 1


def test_nemo_recipes_keep_16_bit_gradients_so_a_340b_layout_fits():
    # A 340B GQA model (Nemotron-4 shape: 96 layers, h 18432, 96 heads, 8 KV heads, squared-
    # ReLU FFN 73728, vocabulary 256,000) at TP8 PP8 VP12 on 128 H100, the layout the planner
    # refused at 90.2 GiB with fp32 gradients. NeMo's performance recipes reduce gradients in
    # 16 bits (grad_reduce_in_fp32 = False): 2 bytes a parameter less, 10.75 GiB here.
    import ceiling

    model = (
        "custom:layers=96,hidden=18432,heads=96,kv_heads=8,ffn_hidden=73728,ffn_kind=gelu,"
        "vocab=256000,max_seq=4096,norm=layernorm,trained_dropout=false"
    )
    fixed = "d=2,t=8,p=8,v=12,b=1,zero=1,recompute=none"
    args = dict(spec="h100-sxm", global_batch=32, seq=4096, fixed=fixed, headroom=0.0, top=1)
    with pytest.raises(DoesNotFit, match=r"needs 90\.2 GiB per device"):
        ceiling.plan(model, 128, **args, framework="megatron")
    nemo = ceiling.plan(model, 128, **args, framework="nemo").best
    params = nemo.memory["params_per_device"]
    assert nemo.memory["gradient_bytes"] == pytest.approx(2 * params)
    assert nemo.fits and nemo.memory_bytes_per_device / 2**30 == pytest.approx(79.4, abs=0.05)


def test_plan_says_how_a_mixture_of_experts_routes(cli):
    code, out, _ = cli("plan", "mixtral-8x7b", "--spec", "h100-sxm", "-n", "64", "-k", "1")
    assert code == 0
    text = " ".join(out.split())
    assert "MoE: busiest expert rank 1.25× the even share (the default" in text
    code, out, _ = cli(
        "plan", "mixtral-8x7b", "--spec", "h100-sxm", "-n", "64", "-k", "1", "--json",
        "--moe-dispatcher", "deepep", "--moe-imbalance", "1.1", "--moe-node-limit", "2",
    )  # fmt: skip
    told = __import__("json").loads(out)["assumptions"]["moe"]
    given = "busiest expert rank 1.1× the even share (given)"
    assert told == f"{given}; deepep dispatch, at most 2 nodes a token"
    code, _, err = cli(
        "plan", "mixtral-8x7b", "--spec", "h100-sxm", "-n", "64", "--moe-imbalance", "0.5"
    )
    assert code == 2 and "--moe-imbalance must be ≥ 1" in err
