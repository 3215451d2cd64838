"""Recompute policies beyond none/selective/full: N layers per stage and chosen ops kept —
their names, the memory they keep (hand-computed) and the work they re-spend."""

import pytest

from ceiling.errors import InvalidInput
from ceiling.hardware.catalog import get_spec
from ceiling.model.cluster import make_cluster
from ceiling.model.plan import costs, recompute
from ceiling.model.plan.axes import parse_fixed
from ceiling.model.plan.search import search
from ceiling.model.plan.step import Job, Plan, evaluate_plan
from ceiling.model.transformer import get_model, parse_model

GPT_22B = parse_model(
    "custom:layers=48,hidden=6144,heads=64,vocab=51200,max_seq=2048,norm=layernorm,bias=true,"
    "learned_positions=true"
)


@pytest.mark.parametrize(
    ("typed", "canonical"),
    [
        ("full", "full"),
        ("layers:4", "layers:4"),
        ("LAYERS:04", "layers:4"),
        ("ops:qkv", "ops:q+k+v"),
        ("ops:down+attn+q", "ops:q+attn+down"),
        ("ops:alternate", "ops:alternate"),
    ],
)
def test_policies_parse_encode_and_decode(typed, canonical):
    value = recompute.parse(typed)
    assert value == canonical
    assert recompute.decode(recompute.encode(value)) == value
    assert parse_fixed(f"recompute={typed}") == {"recompute": canonical}
    assert Plan(8, 1, 1, recompute=value).recompute == canonical


@pytest.mark.parametrize(
    "bad", ["layers:0", "layers:x", "layers:99999999999999999999", "ops:", "ops:qkv+mlp", "some"]
)
def test_bad_policies_are_named(bad):
    with pytest.raises(InvalidInput, match="recompute"):
        parse_fixed(f"recompute={bad}")


def test_memory_of_recompute_layers_n_by_hand():
    # Korthikanti's 22B GPT on t = 8 with sequence parallelism, p = 1, one sequence of 2048:
    # 12 of the 48 layers keep only their input (2h/t bytes per token), the other 36 keep
    # everything: h(34/t + 5as/(ht)) bytes per token (unfused attention, dropout).
    h, a, s, t = 6144, 64, 2048, 8
    job = Job(GPT_22B, 8, s, attention="unfused")
    cluster = make_cluster(get_spec("a100-80gb"), 64)
    r = evaluate_plan(job, cluster, Plan(8, 8, 1, 1, recompute="layers:12"))
    kept_all = h * (34 / t + 5 * a * s / (h * t))  # 108,032 bytes per token
    kept_input = 2 * h / t  # 1,536
    assert r.memory["layer_activation_bytes"] == pytest.approx(
        s * (12 * kept_input + 36 * kept_all)
    )
    assert r.memory["layer_activation_bytes"] == pytest.approx(8_002_732_032)
    # The recompute re-spends a quarter of full recompute's extra hardware FLOPs.
    flops = {}
    for policy in ("none", "layers:12", "full"):
        one = evaluate_plan(job, cluster, Plan(8, 8, 1, 1, recompute=policy))
        flops[policy] = one.hw_tflops_per_device * one.step_time_s
    assert flops["layers:12"] - flops["none"] == pytest.approx(
        0.25 * (flops["full"] - flops["none"]), rel=1e-9
    )


def test_ops_policies_keep_the_named_outputs_by_hand():
    # Llama 3 8B (h 4096, q 4096, k = v = 1024, f 14336, SwiGLU), t = 1, FlashAttention,
    # no dropout. Bytes per token a layer keeps:
    sh = costs.shape_of(get_model("llama-3-8b"))

    def kept(policy):
        code = recompute.encode(recompute.parse(policy))
        return float(
            costs.activation_bytes_per_token_layer(sh, 8192, 1, False, code, "flash", False)
        )

    block_input = 2 * 4096
    # MaxText's save_qkv_proj: the block input and Q, K, V.
    assert kept("ops:qkv") == block_input + 2 * 4096 + 2 * 1024 + 2 * 1024
    # torchtitan's per-op policy: every other matmul (q, v, gate, down) and the attention
    # output with its fp32 log-sum-exp per head.
    attention = 2 * 4096 + 4 * 32
    expected = block_input + 2 * 4096 + 2 * 1024 + attention + 2 * 14336 + 2 * 4096
    assert kept("ops:alternate") == expected == 63_616
    # Keeping everything is the no-recompute count less the norm outputs it rebuilds.
    assert kept("ops:q+k+v+attn+o+gate+up+down") < kept("none")


def test_ops_policy_rebuilds_the_unkept_projections():
    sh = costs.shape_of(get_model("llama-3-8b"))
    code = recompute.encode("ops:q+k+v")
    linear, attention, pointwise, collectives = recompute.rebuilt_shares(sh, code, 32)
    h, q, k, f = 4096, 4096, 1024, 14336
    # o, gate and up run again (down never: its output only feeds the residual).
    share = (q * h + 2 * h * f) / (h * q + 2 * h * k + q * h + 3 * h * f)
    assert float(linear) == pytest.approx(share)
    assert (float(attention), float(pointwise), float(collectives)) == (1.0, 1.0, 2.0)
    full = recompute.rebuilt_shares(sh, 2, 32)
    assert [float(x) for x in full] == [1.0, 1.0, 1.0, 2.0]
    n = recompute.rebuilt_shares(sh, recompute.encode("layers:8"), 32)
    assert [float(x) for x in n] == [0.25, 0.25, 0.25, 0.5]


def test_search_tries_partial_recompute_and_pins_it():
    job = Job(get_model("llama-3-8b"), 64, 8192, attention="flash", dropout=False)
    cluster = make_cluster(get_spec("h100-sxm"), 8)
    res = search(job, cluster, {"zero": 3, "d": 8}, top=1)
    assert res.plans[0].fits
    pinned = search(job, cluster, parse_fixed("d=8,zero=3,recompute=layers:8"), top=2)
    assert {r.plan.recompute for r in pinned.plans} == {"layers:8"}
    assert pinned.plans[0].recompute_s > 0


def test_a_policy_says_what_it_keeps_and_rebuilds():
    swiglu = recompute.explain("ops:alternate", 3)
    assert swiglu["kept"].endswith("outputs of q, v, attn, gate, down")
    assert swiglu["rebuilt"].startswith("k, o, up,")
    # GELU has no gate: every other of q, k, v, o, up, down is q, v, up.
    assert recompute.explain("ops:alternate", 2)["kept"].endswith("q, v, attn, up")
    assert "4 layers of each stage" in recompute.explain("layers:4", 3)["rebuilt"]
