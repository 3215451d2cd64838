"""Planner against published mixture-of-experts and long-context runs.

Each layout is pinned as its source publishes it; what the source leaves out is searched.
Errors are predicted/published - 1 on step time (`ceiling validate --kinds training --rows` prints
every case, these and the dense ones of `test_plan_validation_v2`, with the medians).

Sources:
- Qwen3-235B-A22B on 256 H100 (32 DGX nodes, 8 × 50 GB/s InfiniBand each): Megatron-Core
  MoE model zoo, best_practice/Qwen3/readme.md (github.com/yanring/Megatron-MoE-ModelZoo),
  "Performance Results" (step times) and "Long Context" (TFLOP/s per GPU, dropless) tables.
  Layouts as published: TP, CP, EP, PP, VPP, DP, MBS, GBS, recompute; BF16, DeepEP
  dispatcher (flex); ETP 1, the embedding and the loss counted in the pipeline split, fused
  cross-entropy (model_configs/benchmarking/Qwen3-235B-A22B.yaml). Long-context runs
  recompute the layer norms and the MoE (`--recompute-modules layernorm moe`): entered as
  the ops policy that keeps the attention (q, k, v, its core and output projection) and the
  FFN's output, rebuilding the experts' first GEMM.
- DeepSeek-V3 on 2,048 H800 (DeepSeek-AI 2024, technical report, sections 3.2 and 5.1):
  180K H800 GPU-hours per trillion tokens; PP16, EP64 over 8 nodes, ZeRO-1, no TP, 4,096
  tokens a sequence, 15,360 sequences a batch, FP8 GEMMs, DualPipe (all-to-all overlapped),
  node-limited routing to 4 nodes. What it keeps (sections 3.2.3 and 3.3.2), entered as the
  planner's options: RMSNorm and the MLA up-projections rebuilt in the backward, the
  attention output, the mid-block residual and the FFN's SwiGLU inputs kept
  (recompute=ops:attn+o+gate+up); the SwiGLU inputs and the experts' dispatched inputs
  cached in FP8 with a scale per 128, the attention output in E5M6, the SwiGLU output
  rebuilt (fp8_acts); the linear weights cast to FP8 from the fp32 master weights, no
  16-bit copy described (fp8_params); fp32 gradients and master weights, BF16 Adam moments
  (state_bytes=14); DualPipe's two copies of the parameters and p + 1 micro-batches in
  flight (dualpipe). The EMA of the weights lives in CPU memory, off the device.

The Qwen3 model: 94 layers, hidden 4096, 64 query and 4 KV heads of 128, 128 experts of width
1536, 8 per token, vocabulary 151,936 (Qwen3-235B-A22B config.json), untied; no dropout.
"""

from __future__ import annotations

import dataclasses
import statistics

import pytest

from ceiling.errors import InvalidInput
from ceiling.hardware.catalog import get_spec
from ceiling.model.cluster import make_cluster
from ceiling.model.plan import recompute
from ceiling.model.plan.costs import activation_bytes_per_token_layer, shape_of
from ceiling.model.plan.search import search
from ceiling.model.plan.step import Job
from ceiling.model.transformer import get_model, parse_model

H100, H800 = get_spec("h100-sxm"), get_spec("h800")
QWEN3_235B = (
    "custom:layers=94,hidden=4096,heads=64,kv_heads=4,head_dim=128,ffn_hidden=1536,"
    "ffn_kind=swiglu,vocab=151936,max_seq=131072,experts=128,active_experts=8,norm=rmsnorm,"
    "trained_dropout=false"
)
TOLERANCE = 0.15  # per MoE case; the acceptance is on the median (`test_moe_median_error`)


def megatron_flops_per_token(model, seq: int) -> float:
    """Model FLOPs per token as Megatron-LM counts them (training.py,
    num_floating_point_operations, 2025): 6 per weight a token multiplies (its top-k experts
    only) and the attention scores over half the s×s matrix (causal: "only half of the mask
    is non-zero"), 6·q·s per layer; the output layer 6·h·V."""
    linear = 6.0 * model.params_layer_matmul_active
    scores = 6.0 * model.q_dim * seq
    return model.layers * (linear + scores) + 6.0 * model.hidden * model.vocab


def _qwen3(seq, gbs, fixed):
    # model_configs/benchmarking/Qwen3-235B-A22B.yaml: expert tensor parallelism 1, the
    # distributed optimizer, Transformer Engine's fused cross-entropy, no dropout.
    job = Job(
        parse_model(QWEN3_235B),
        gbs,
        seq,
        attention="flash",
        dropout=False,
        loss="fused",
        moe_dispatcher="deepep",
    )
    return job, make_cluster(H100, 256), fixed


def _long(seq, cp):
    # PP8 VPP4 TP4 EP8 on 32 nodes: d = 256/(4·8·cp); ETP 1 as the model's config sets it.
    fixed = dict(t=4, cp=cp, p=8, v=4, ep=8, etp=1, micro_batch=1, zero=1)
    return _qwen3(seq, 256, {**fixed, "recompute": "ops:q+k+v+attn+o+down"})


def _from_tflops(seq, gbs, gpus, tflops):
    """The step time a published TFLOP/s per GPU means, with Megatron's FLOP count."""
    model = parse_model(QWEN3_235B)
    return megatron_flops_per_token(model, seq) * seq * gbs / (tflops * 1e12 * gpus)


def _deepseek_v3():
    model = get_model("deepseek-v3")
    job = Job(model, 15360, 4096, attention="flash", dropout=False, moe_dispatcher="deepep",
              moe_node_limit=4)  # fmt: skip
    fixed = dict(d=128, t=1, p=16, ep=64, zero=1, fp8="linear", ep_overlap=True)
    fixed.update(recompute="ops:attn+o+gate+up", fp8_acts=True, fp8_params=True)
    fixed.update(state_bytes=14, dualpipe=True)
    return job, make_cluster(H800, 2048), fixed


CROSS_NODE = dict(d=16, t=2, p=8, v=4, ep=32, etp=1, micro_batch=1, zero=1, recompute="selective")
# The readme's intra-node row with NCCL all-to-all: PP32 VPP3 TP2 EP8 (ETP1), DP4, MBS1, GBS
# 2048, recompute "norm, act" (each layer's norms and SwiGLU rebuilt: every linear output and
# the attention core kept). 32 × 3 = 96 chunks hold 94 layers with the embedding and the loss
# a chunk each (the config's --account-for-embedding/loss-in-pipeline-split): stages of
# 2, 3 × 30, 2 layers, the first stage's first chunk the embedding alone, the last stage's last
# chunk the output layer and the loss alone.
PP32_VPP3 = dict(d=4, t=2, p=32, v=3, ep=8, etp=1, micro_batch=1, zero=1, ends=True)
PP32_VPP3.update(first=2, last=2, recompute="ops:q+k+v+attn+o+gate+up+down")


def _qwen3_pp32():
    job, cluster, fixed = _qwen3(4096, 2048, PP32_VPP3)
    return dataclasses.replace(job, moe_dispatcher="alltoall"), cluster, fixed


# What does not hold, by case (the others are within TOLERANCE).
OFF = {
    "Qwen3-235B EP32, 1F1B A2A overlap, 256 H100": (
        "the overlap is priced as hiding the all-to-alls behind the other micro-batch's "
        "compute up to its length (7.1 of 7.1 s); the published run gains 2.1 s (19.7 -> "
        "17.6 s): the 1F1B overlap pairs one forward with one backward chunk and hides less"
    ),
    "Qwen3-235B TP4 EP8 PP8, 256 H100": (
        "published 29.0 s, 1.47 times the EP32 layout on the same GPUs; the planner prices "
        "TP4's collectives, the in-node EP8 all-to-alls and 16 local experts' short GEMMs at "
        "17 s. Per layer and micro-batch the run takes 9.4 ms for 1,024 tokens a device, the "
        "EP32 layout 12.7 ms for 2,048: a line through both leaves about 6 ms that do not "
        "scale with the tokens, the order of the host-bound MoE layers Megatron-Core "
        "describes (Megatron-LM docs/discussions/deepseek-v3-gb200-optimization). The "
        "planner prices them (`host`): the 68 forward and 108 backward kernels it counts a "
        "layer take 1.8 ms to launch at 10 µs each, under the layer's 6.0 ms of GPU time, so "
        "the layout is not host-bound; 9.4 ms would take about 53 µs a kernel"
    ),
    "Qwen3-235B PP32 VPP3 EP8, 256 H100": (
        "-25 %: planned at 18.1 s (GEMMs 9.8 s, in-node all-to-all 1.7 s, P2P over 96 chunk "
        "boundaries 1.2 s, bubble 0.3 s with 512 micro-batches); like the TP4 EP8 PP8 row "
        "(-45 %), the published in-node EP8 layouts run much slower than the EP32 ones and "
        "the planner's MoE terms find no mechanism for the difference"
    ),
    "Qwen3-235B FSDP EP8, 256 H100": (
        "ZeRO-3 is priced per micro-batch: each device gathers its 28 B expert weights over "
        "32 nodes before the forward and the backward and reduce-scatters fp32 gradients, "
        "12 s exposed; Megatron-FSDP's 17.6 s implies fewer or hidden gathers"
    ),
    "Qwen3-235B 16k, 256 H100": (
        "dropless routing is more skewed at 16k than the default imbalance 1.25: the same run "
        "with forced balance is within 4 %, and forced/dropless is 1.24 on the whole step"
    ),
}

# name, build, published step time (s), what does not hold (None: it holds; see OFF)
CASES = [
    ("Qwen3-235B EP32 over DP16, 256 H100", lambda: _qwen3(4096, 2048, CROSS_NODE), 19.7, None),
    (
        "Qwen3-235B EP32, 1F1B A2A overlap, 256 H100",
        lambda: _qwen3(4096, 2048, {**CROSS_NODE, "ep_overlap": True}),
        17.6,
        None,
    ),
    (
        "Qwen3-235B TP4 EP8 PP8, 256 H100",
        lambda: _qwen3(
            4096,
            2048,
            dict(d=8, t=4, p=8, v=4, ep=8, etp=1, micro_batch=1, zero=1, recompute="none"),
        ),
        29.0,
        None,
    ),
    (
        "Qwen3-235B FSDP EP8, 256 H100",
        lambda: _qwen3(
            4096,
            2048,
            dict(d=128, t=2, p=1, ep=8, etp=1, micro_batch=4, zero=3, recompute="full"),
        ),
        17.6,
        None,
    ),
    ("Qwen3-235B 16k, 256 H100", lambda: _long(16384, 1), _from_tflops(16384, 256, 256, 237), None),
    (
        "Qwen3-235B 32k CP2, 256 H100",
        lambda: _long(32768, 2),
        _from_tflops(32768, 256, 256, 277),
        None,
    ),
    (
        "Qwen3-235B 64k CP4, 256 H100",
        lambda: _long(65536, 4),
        _from_tflops(65536, 256, 256, 320),
        None,
    ),
    (
        "Qwen3-235B 128k CP8, 256 H100",
        lambda: _long(131072, 8),
        _from_tflops(131072, 256, 256, 357),
        None,
    ),
    (
        "Qwen3-235B 16k forced balance",
        lambda: _forced(16384, 1),
        _from_tflops(16384, 256, 256, 295),
        None,
    ),
    (
        "Qwen3-235B 32k CP2 forced balance",
        lambda: _forced(32768, 2),
        _from_tflops(32768, 256, 256, 335),
        None,
    ),
    (
        "Qwen3-235B 64k CP4 forced balance",
        lambda: _forced(65536, 4),
        _from_tflops(65536, 256, 256, 368),
        None,
    ),
    (
        "Qwen3-235B 128k CP8 forced balance",
        lambda: _forced(131072, 8),
        _from_tflops(131072, 256, 256, 389),
        None,
    ),
    ("Qwen3-235B PP32 VPP3 EP8, 256 H100", _qwen3_pp32, 24.2, None),
    # 180K GPU-hours per 1e12 tokens: 1e12/(180e3·3600) tokens/s per GPU; a step of
    # 15,360 × 4,096 tokens over 2,048 GPUs. Planned at 22.0 s (+10 %); of it 3.0 s of
    # expert all-to-all left exposed by the overlap as priced, which the report says
    # DualPipe hides nearly entirely (section 3.2.1): without it, 19.0 s.
    ("DeepSeek-V3, 2048 H800", _deepseek_v3, 15360 * 4096 * 180e3 * 3600 / 1e12 / 2048, None),
]


def predict(build):
    """The published run's step time as planned, without the planning headroom (these runs
    fit their devices)."""
    job, cluster, fixed = build()
    # As published: no free feature the run does not name (`features.as_published`).
    job = dataclasses.replace(job, headroom=0.0, offered=())
    best = search(job, cluster, fixed, top=1).plans[0]
    return best.step_time_s, best


def validation_rows() -> list[tuple[str, float, float, float]]:
    """(case, predicted, published, error) of every case that runs today."""
    rows = []
    for name, build, published, _ in CASES:
        try:
            predicted, _ = predict(build)
        except pytest.xfail.Exception:
            continue
        rows.append((name, predicted, published, predicted / published - 1.0))
    return rows


def _forced(seq, cp):
    """The same long-context run with `--moe-router-force-load-balancing`: every expert
    gets its even share (imbalance 1)."""
    job, cluster, fixed = _long(seq, cp)
    return dataclasses.replace(job, moe_imbalance=1.0), cluster, fixed


def _params(cases):
    return [
        pytest.param(
            build,
            published,
            id=name,
            marks=[pytest.mark.xfail(strict=True, reason=OFF[name])] if name in OFF else [],
        )
        for name, build, published, _ in cases
    ]


@pytest.mark.slow
@pytest.mark.parametrize(("build", "published"), _params(CASES))
def test_moe_case_within_15_percent(build, published):
    predicted, best = predict(build)
    assert predicted / published - 1.0 == pytest.approx(0.0, abs=TOLERANCE), best.plan.describe()


@pytest.mark.slow
def test_medians_of_the_moe_and_of_all_cases():
    """Median |error| ≤ 15 % over the MoE cases, ≤ 8 % over every case (with the dense runs
    of test_plan_validation_v2); no published layout refused (each is planned)."""
    from test_plan_validation_v2 import validation_rows as dense_rows

    moe = validation_rows()
    assert len(moe) == len(CASES)
    every = moe + dense_rows()
    assert statistics.median(abs(r[3]) for r in moe) <= 0.15
    assert statistics.median(abs(r[3]) for r in every) <= 0.08


def test_the_long_context_runs_fit_their_80_gb():
    # Published layouts that ran are not refused for memory (no planning headroom).
    for seq, cp in ((16384, 1), (131072, 8)):
        _, best = predict(lambda seq=seq, cp=cp: _long(seq, cp))
        assert best.fits and best.plan.ep == 8 and best.plan.etp == 1


def test_pp32_vpp3_plans_with_the_embedding_and_the_loss_a_chunk_each_and_fits():
    # 96 chunks for 94 layers: refused unless the embedding and the loss count in the split.
    job, cluster, fixed = _qwen3_pp32()
    with pytest.raises(InvalidInput, match=r"first\(2\) and last\(2\) must be ≥ v\(3\)"):
        search(job, cluster, {**fixed, "ends": False}, top=1)
    _, best = predict(_qwen3_pp32)
    pl = best.plan
    assert (pl.p, pl.v, pl.first_stage_layers, pl.last_stage_layers) == (32, 3, 2, 2)
    assert pl.ends_in_split and "ends=on" in pl.describe()
    # Without the stage layout pinned, ends=on searches the balanced one: 96/32 = 3 a stage,
    # the two ends a layer lighter.
    unpinned = {k: x for k, x in fixed.items() if k not in ("first", "last")}
    (found,) = search(dataclasses.replace(job, headroom=0.0), cluster, unpinned, top=1).plans
    assert (found.plan.first_stage_layers, found.plan.last_stage_layers) == (2, 2)
    assert best.stages == {"layers": [2, 3, 2], "heaviest_memory": "middle"} and best.fits
    # The first device's two layers, in chunks 1 and 2, hold p = 32 micro-batches each at its
    # peak (its chunk 0, the embedding alone, holds none of them): 64 layer-passes of a
    # 4,096-token micro-batch, where equal chunks would count (v·p + p - 1)/v × 2 = 84.7.
    sh = shape_of(job.model)
    code = recompute.encode(pl.recompute)
    per_token = activation_bytes_per_token_layer(sh, 4096, 2, True, code, "flash", False)
    assert best.memory["layer_activation_bytes"] == pytest.approx(64 * 4096 * per_token)
    # Peak 58.1 GiB on a middle device (3 layers of 16 experts each; 16.1 GiB of weights,
    # gradients and sharded optimizer state, 42.0 GiB of activations, the experts' dispatched
    # inputs among them): it fits 80 GB.
    assert best.memory_bytes_per_device / 2**30 == pytest.approx(58.1, abs=0.1)


def test_deepseek_v3_as_it_ran_fits_its_80_gb_with_what_it_keeps_counted():
    job = _deepseek_v3()[0]
    _, best = predict(_deepseek_v3)
    assert best.plan.dualpipe and best.fits
    # A MoE-layer token keeps (bytes, averaged over the 61 layers as the planner does): the
    # block input and the mid-block residual, 2h each; the attention output in E5M6, 1.5 ×
    # 128 heads × d_v 128, and its fp32 row statistics, 4 × 128; the two MLA latents, their
    # norms rebuilt, 2 × (1536 + 512); the SwiGLU inputs of the 8 routed experts and the
    # shared one (the FFN width a token passes, 18,432) and the 8 dispatched copies of the
    # token in FP8 tiles of 128 with an fp32 scale each, 1 + 4/128 bytes.
    sh = shape_of(job.model)
    tile = 1 + 4 / 128
    kept = (
        2 * 2 * 7168
        + 1.5 * 128 * 128
        + 4 * 128
        + 2 * (1536 + 512)
        + 2 * tile * sh.ffn_active
        + tile * 7168 * 8 * sh.moe.moe_share
    )
    # DualPipe: p + 1 = 17 micro-batches of a stage's 4 layers on every device.
    assert best.memory["layer_activation_bytes"] == pytest.approx(17 * 4 * 4096 * kept)
    # Peak 76.7 GiB on the first device: two stages' parameters at 2 + 4 bytes and the
    # optimizer's 8 over their data-parallel groups (31.1 GiB with the FP8 weights' 1 byte),
    # 39.5 GiB of activations and the loss's logits, 3.0 GiB (it ends the reverse pipeline).
    assert best.memory_bytes_per_device / 2**30 == pytest.approx(76.7, abs=0.1)
    assert best.memory["logits_bytes"] / 2**30 == pytest.approx(3.0, abs=0.05)
