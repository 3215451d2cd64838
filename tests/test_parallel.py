"""Plan model: memory against Korthikanti et al. 2022, throughput against Narayanan et al.
2021, exact formula checks, and explained errors."""

import dataclasses

import pytest

from ceiling.errors import InvalidInput
from ceiling.hardware.catalog import get_spec
from ceiling.model.cluster import make_cluster
from ceiling.model.pipeline_sim import simulate_pipeline
from ceiling.model.plan import costs
from ceiling.model.plan import step as par
from ceiling.model.plan.axes import plans_to_arrays
from ceiling.model.plan.search import search
from ceiling.model.plan.step import Job, Plan, evaluate_plan
from ceiling.model.transformer import get_model, parse_model

GiB = 2**30
A100 = get_spec("a100-80gb")


def gpt(layers, hidden, heads, vocab=51200, seq=2048):
    return parse_model(
        f"custom:layers={layers},hidden={hidden},heads={heads},vocab={vocab},max_seq={seq},"
        "norm=layernorm,bias=true,learned_positions=true"
    )


# Korthikanti et al. 2022, Fig. 1: A100-80GB, s = 2048, V = 51200, t = 8.
KORTHIKANTI = [
    # l, h, a, p, v, b, state GiB (18 B/param), TP-only activations, TP+SP+selective
    (48, 6144, 64, 1, 1, 4, 45.5625, 59.25, 9.5625),
    (96, 12288, 96, 8, 3, 1, 45.5625, 66.84375, 12.3515625),
]


@pytest.mark.parametrize("row", KORTHIKANTI)
def test_memory_per_device_reproduces_korthikanti_fig1(row):
    layers, hidden, heads, p, v, b, state_gib, tp_gib, sp_sel_gib = row
    model = gpt(layers, hidden, heads)
    # Enough micro-batches for the steady state the figure assumes (with m·v chunk passes
    # fewer than an interleaved warm-up, every forward runs before the first backward).
    job = Job(model, global_batch=b * p * 4, seq_len=2048, attention="unfused")
    cluster = make_cluster(A100, 8 * p)
    tp_only = evaluate_plan(
        job, cluster, Plan(1, 8, p, b, v, recompute="none", sequence_parallel=False)
    )
    sp_sel = evaluate_plan(
        job, cluster, Plan(1, 8, p, b, v, recompute="selective", sequence_parallel=True)
    )
    assert tp_only.memory["layer_state_bytes"] / GiB == pytest.approx(state_gib, rel=0.01)
    assert tp_only.memory["layer_activation_bytes"] / GiB == pytest.approx(tp_gib, rel=0.01)
    assert sp_sel.memory["layer_activation_bytes"] / GiB == pytest.approx(sp_sel_gib, rel=0.01)
    # TP only does not fit an 80 GB device; sequence parallelism + selective recompute does.
    assert not tp_only.fits and sp_sel.fits


def test_activation_formulas_reduce_to_korthikanti_table2():
    h, a, s, t = 6144, 64, 2048, 8
    sh = costs.shape_of(gpt(48, h, a))
    # Biases are not activations; a GPT block with q = k = h and f = 4h gives the table.
    ratio = 5 * a * s / h

    def per(tp, sp, rc):
        return float(costs.activation_bytes_per_token_layer(sh, s, tp, sp, rc, "unfused", True) / h)

    assert per(1, False, 0) == pytest.approx(34 + ratio)
    assert per(t, False, 0) == pytest.approx(10 + 24 / t + ratio / t)
    assert per(t, True, 0) == pytest.approx(34 / t + ratio / t)
    assert per(t, False, 1) == pytest.approx(10 + 24 / t)
    assert per(t, True, 1) == pytest.approx(34 / t)
    assert per(t, False, 2) == pytest.approx(2)
    assert per(t, True, 2) == pytest.approx(2 / t)


def test_interleaving_in_flight_factor_matches_the_simulator():
    layers, p, v, m = 96, 8, 3, 32
    held = float(costs.in_flight_layers(layers, p, v, m))
    assert held == pytest.approx(layers * (1 + (p - 1) / (p * v)))
    sim = simulate_pipeline("interleaved", p, m, 1.0, 2.0, chunks=v)
    assert held == pytest.approx(sim.peak_in_flight[0] * layers / (p * v))
    assert float(costs.in_flight_layers(layers, 8, 1, 4)) == pytest.approx(layers * 4 / 8)


def test_zero_stage_state_bytes():
    d = 64
    f = costs.state_bytes_per_param
    assert float(f(16, 0, d)) == 16
    assert float(f(16, 1, d)) == pytest.approx(4 + 12 / d)
    assert float(f(16, 2, d)) == pytest.approx(2 + 14 / d)
    assert float(f(16, 3, d)) == pytest.approx(16 / d)
    assert float(f(18, 0, d)) == 18
    assert float(f(18, 3, d)) == pytest.approx(18 / d)


def test_hardware_flops_with_full_recompute_is_megatrons_formula():
    layers, h, a, V, s, B = 48, 8192, 64, 51200, 2048, 1536
    model = gpt(layers, h, a)
    job = Job(model, B, s, attention="unfused")
    r = evaluate_plan(job, make_cluster(A100, 512), Plan(32, 8, 2, 1, recompute="full"))
    hw = r.hw_tflops_per_device * 1e12 * r.step_time_s * 512
    # Biases and layer norms add ~0.01 %; the formula ignores them.
    assert hw == pytest.approx(costs.megatron_hw_flops_per_step(layers, h, V, s, B), rel=1e-3)
    mfu = r.tokens_per_s * model.flops_per_token(s, training=True) / (512 * 312e12)
    assert r.mfu == pytest.approx(mfu, rel=1e-3)  # layer-norm weights aside
    assert r.hfu > r.mfu  # full recompute does 4/3 of the model's work


def test_bubble_time_is_the_closed_form_share():
    # Equal stages but the last, which also runs the output layer and the loss: the bubble is
    # the other p-1 stages' time once, over v — (p-1)/(v·m) of a stage without the head.
    job = Job(gpt(48, 8192, 64), 1536, 2048, attention="unfused")
    cluster = make_cluster(A100, 512)
    for v in (1, 2, 3):
        plan = Plan(8, 8, 8, 4, v, recompute="full")
        r = evaluate_plan(job, cluster, plan)
        m = r.micro_batches
        assert m == 48
        stage = ("matmul", "attention", "fp8_matmul", "fp8_cast", "elementwise", "tp_comm")
        work = sum(r.time[f"{k}_s"] for k in (*stage, "cp_comm", "ep_comm"))
        head = float(par.evaluate_arrays(job, cluster, plans_to_arrays([plan]))["head_s"][0])
        assert 0 < head < 0.2 * work
        assert r.time["bubble_s"] / (work - head) == pytest.approx(7 / (v * m))


# Narayanan et al. 2021, Table 1 (public rows): reported TFLOP/s per A100, full recompute.
NARAYANAN = [
    # l, h, a, t, p, d, global batch, reported
    (24, 2304, 24, 1, 1, 32, 512, 137),
    (48, 8192, 64, 8, 2, 32, 1536, 138),
]


@pytest.mark.parametrize("row", NARAYANAN)
@pytest.mark.parametrize("extra", [{}, {"sp": False}, {"micro_batch": 1, "v": 1, "zero": 0}])
def test_throughput_predicts_narayanan_table1_within_15_percent(row, extra):
    layers, h, a, t, p, d, B, reported = row
    job = Job(gpt(layers, h, a), B, 2048, attention="unfused", offered=())  # 2021: no overlaps
    cluster = make_cluster(A100, d * t * p)
    best = search(job, cluster, dict(d=d, t=t, p=p, recompute="full", **extra), top=1).plans[0]
    assert best.hw_tflops_per_device == pytest.approx(reported, rel=0.15)


# The other rows of the same table: heads, hidden, layers, t, p, GPUs, batch, reported.
NARAYANAN_OTHER_ROWS = [
    (32, 3072, 30, 2, 1, 64, 512, 138),
    (32, 4096, 36, 4, 1, 128, 512, 142),
    (48, 6144, 40, 8, 1, 256, 1024, 135),
    (80, 10240, 60, 8, 4, 1024, 1792, 140),
    (96, 12288, 80, 8, 8, 1536, 2304, 148),
    (128, 16384, 96, 8, 16, 1920, 2160, 155),
    (128, 20480, 105, 8, 35, 2520, 2520, 163),
    (160, 25600, 128, 8, 64, 3072, 3072, 163),
]


@pytest.mark.parametrize("row", NARAYANAN_OTHER_ROWS)
def test_throughput_predicts_the_other_narayanan_rows_within_15_percent(row):
    a, h, layers, t, p, gpus, B, reported = row
    job = Job(gpt(layers, h, a), B, 2048, attention="unfused", offered=())
    fixed = dict(d=gpus // (t * p), t=t, p=p, recompute="full")
    best = search(job, make_cluster(A100, gpus), fixed, top=1).plans[0]
    assert best.hw_tflops_per_device == pytest.approx(reported, rel=0.15)


def test_explained_errors_show_the_arithmetic():
    job = Job(get_model("gpt3-175b"), 1536, 2048, attention="unfused")
    c = make_cluster(A100, 1024)
    with pytest.raises(InvalidInput, match=r"heads\(96\) % t\(5\) = 1"):
        par.check_plan(job, make_cluster(A100, 40), Plan(8, 5, 1))
    with pytest.raises(InvalidInput, match=r"= 512 devices but the cluster has 1024"):
        par.check_plan(job, c, Plan(8, 8, 8))
    with pytest.raises(InvalidInput, match=r"p\(64\) × v\(2\) = 128 > layers\(96\)"):
        par.check_plan(job, c, Plan(2, 8, 64, v=2))
    uneven = par.check_plan(job, c, Plan(2, 8, 64))
    assert any("layers(96) % (p(64) × v(1) = 64) = 32" in n for n in uneven)
    with pytest.raises(InvalidInput, match=r"global_batch\(1536\) % \(d\(128\) × micro_batch\(5\)"):
        par.check_plan(job, c, Plan(128, 8, 1, 5))
    with pytest.raises(InvalidInput, match="ZeRO-2"):
        par.check_plan(job, c, Plan(16, 8, 8, zero=2))
    # FSDP inside each pipeline stage (torchtitan's FSDP with PP) is a valid layout.
    assert isinstance(par.check_plan(job, c, Plan(16, 8, 8, zero=3)), list)
    with pytest.raises(InvalidInput, match=r"m\(|% p\(8\)"):
        par.check_plan(job, c, Plan(16, 8, 8, micro_batch=16, v=2))
    notes = par.check_plan(job, c, Plan(8, 16, 8))
    assert any("spans nodes" in n for n in notes)


def test_grouped_query_attention_shrinks_kv_activations_but_not_below_one_head():
    llama = costs.shape_of(get_model("llama-2-70b"))  # 64 heads, 8 KV heads
    mha = costs.shape_of(get_model("llama-2-70b").replace(kv_heads=64))

    def kv_part(sh, t):
        return float(costs.activation_bytes_per_token_layer(sh, 4096, t, True, 1, "flash", False))

    assert kv_part(llama, 8) < kv_part(mha, 8)
    # t = 16 > 8 KV heads: each device still holds one whole KV head.
    diff16 = kv_part(mha, 16) - kv_part(llama, 16)
    assert diff16 == pytest.approx(2 * 2 * (64 * 128 / 16 - 128))


def test_mixture_of_experts_flops_follow_active_experts_memory_all_experts():
    mix = get_model("mixtral-8x7b")
    dense_like = mix.replace(experts=2, active_experts=2)
    job_moe, job_dense = (
        Job(mix, 256, 4096, attention="flash"),
        Job(dense_like, 256, 4096, attention="flash"),
    )
    c = make_cluster(get_spec("h100-sxm"), 64)
    plan = Plan(8, 8, 1, 1, zero=1)
    moe, dense = evaluate_plan(job_moe, c, plan), evaluate_plan(job_dense, c, plan)
    # Same active experts: same FLOPs per token (the router aside), a little more matmul
    # time: 8 experts see a quarter of the rows each, so their weight-gradient GEMMs (K = the
    # rows) run shorter K loops and their tiles differ ...
    model_flops = [r.mfu * r.step_time_s for r in (moe, dense)]  # MFU · step ∝ model FLOPs
    assert model_flops[0] == pytest.approx(model_flops[1], rel=0.01)
    assert 1.0 < moe.time["matmul_s"] / dense.time["matmul_s"] < 1.1
    # ... but 8 experts' weights to hold: state bytes scale with all parameters.
    ratio = moe.memory["params_per_device"] / dense.memory["params_per_device"]
    assert ratio == pytest.approx(mix.params_total / dense_like.params_total, rel=0.01)


def test_flash_attention_removes_the_score_traffic_and_memory():
    model = gpt(48, 6144, 64)
    c = make_cluster(A100, 8)
    plan = Plan(1, 8, 1, 1, recompute="none")
    unfused = evaluate_plan(Job(model, 8, 2048, attention="unfused"), c, plan)
    flash = evaluate_plan(Job(model, 8, 2048, attention="flash"), c, plan)
    assert flash.memory["activation_bytes"] < unfused.memory["activation_bytes"]
    assert flash.time["elementwise_s"] < unfused.time["elementwise_s"]
    assert flash.time["matmul_s"] == pytest.approx(unfused.time["matmul_s"])


def test_vectorised_and_single_evaluation_agree():
    job = Job(get_model("gpt3-175b"), 1536, 2048, attention="unfused")
    c = make_cluster(A100, 1024)
    plans = [
        Plan(16, 8, 8, 1, 6, zero=1, recompute="selective", sequence_parallel=True),
        Plan(128, 8, 1, 2, 1, zero=3, recompute="full", sequence_parallel=False),
    ]
    arr = par.evaluate_arrays(job, c, plans_to_arrays(plans))
    for i, plan in enumerate(plans):
        one = evaluate_plan(job, c, plan)
        assert arr["step_s"][i] == pytest.approx(one.step_time_s)
        assert arr["memory_bytes"][i] == pytest.approx(one.memory_bytes_per_device)


def test_token_budget_gives_time_to_train():
    job = Job(get_model("gpt3-175b"), 1536, 2048, token_budget=300e9, attention="unfused")
    r = evaluate_plan(job, make_cluster(A100, 1024), Plan(16, 8, 8, 1, 6, zero=1))
    assert r.time_to_train_s == pytest.approx(300e9 / r.tokens_per_s)
    assert r.tokens_per_s == pytest.approx(1536 * 2048 / r.step_time_s)


def test_throughput_predicts_mpt7b_on_8_a100_within_15_percent():
    # llm-foundry MPT-7B benchmark: 8x A100-80GB, FSDP, FlashAttention, no dropout,
    # s = 2048: 37,130 tokens/s (MFU 64.2 %).
    job = Job(get_model("mpt-7b"), 256, 2048, attention="flash", dropout=False)
    best = search(job, make_cluster(A100, 8), {"d": 8, "zero": 3}, top=1).plans[0]
    assert best.tokens_per_s == pytest.approx(37130, rel=0.15)


def test_expert_parallelism_spreads_experts_and_pays_all_to_all():
    mix = get_model("mixtral-8x7b")
    job = Job(mix, 256, 4096, attention="flash", dropout=False)
    c = make_cluster(get_spec("h100-sxm"), 64)
    no_ep = evaluate_plan(job, c, Plan(8, 8, 1, 1, zero=1))
    ep = evaluate_plan(job, c, Plan(8, 8, 1, 1, zero=1, ep=8))
    sh = costs.shape_of(mix)
    saved = mix.layers * sh.params_experts_layer / 8 * (1 - 1 / 8)
    assert no_ep.memory["params_per_device"] - ep.memory["params_per_device"] == pytest.approx(
        saved
    )
    assert no_ep.time["ep_comm_s"] == 0 < ep.time["ep_comm_s"]
    with pytest.raises(InvalidInput, match="mixture-of-experts"):
        par.check_plan(
            Job(get_model("llama-2-7b"), 256, 4096, attention="unfused"), c, Plan(8, 8, 1, ep=2)
        )
    with pytest.raises(InvalidInput, match=r"t·cp·d\(4\) % \(ep·etp = 8\) = 4"):
        par.check_plan(job, c, Plan(4, 1, 16, ep=8))
    # MoE parallel folding: ep over the t·cp·d ranks, not d alone (EP8 with d = 4, t = 8).
    assert isinstance(par.check_plan(job, c, Plan(4, 8, 2, ep=8, etp=1)), list)


def test_the_busiest_expert_rank_sets_the_pace_of_the_expert_matmuls():
    mix = get_model("mixtral-8x7b")
    # A device without an SM count: every GEMM at the large-GEMM rate (no tile losses).
    c = make_cluster(dataclasses.replace(get_spec("h100-sxm"), sms=None), 64)
    plan = Plan(8, 8, 1, 1, zero=1, recompute="none")
    even, skewed = (
        evaluate_plan(Job(mix, 256, 4096, attention="flash", moe_imbalance=x), c, plan)
        for x in (1.0, 1.5)
    )
    # Half as many rows again on the busiest rank: half the routed expert FLOPs again, each
    # GEMM still above the ridge (Mixtral's experts see over a thousand rows each); the
    # longer K loop of its weight gradients (K = the rows) runs them a little faster.
    routed = 256 * 4096 * mix.layers * 3 * 2 * mix.active_experts * mix.params_expert
    extra = (skewed.time["matmul_s"] - even.time["matmul_s"]) * c.matmul_flops_per_s * 64
    assert 0.97 * 0.5 * routed < extra < 0.5 * routed


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_memory_split_adds_up_and_shards_with_zero(zero):
    model = get_model("llama-2-7b")
    job = Job(model, 256, 4096, attention="unfused")
    r = evaluate_plan(job, make_cluster(A100, 64), Plan(64, 1, 1, 1, zero=zero))
    m = r.memory
    n = m["params_per_device"]
    assert n == model.params_total
    assert m["weight_bytes"] + m["gradient_bytes"] + m["optimizer_bytes"] == pytest.approx(
        m["state_bytes"]
    )
    assert m["weight_bytes"] == pytest.approx(2 * n / (64 if zero == 3 else 1))
    assert m["gradient_bytes"] == pytest.approx(4 * n / (64 if zero >= 2 else 1))
    assert m["optimizer_bytes"] == pytest.approx(12 * n / (64 if zero >= 1 else 1))
    total = m["state_bytes"] + m["activation_bytes"] + m["gathered_weight_bytes"]
    assert r.memory_bytes_per_device == pytest.approx(total)
    assert (m["gathered_weight_bytes"] > 0) == (zero == 3)
