"""Planner v2 against published large runs (reference/validation-public.md, "Planner v2").

Each layout is pinned as its source publishes it; what the source leaves out is searched.
Tolerance: ±8 % on step time or throughput; torchtitan's peak memory within 10 % and fits.
Errors are predicted/published - 1 (`validation_rows` prints them all with their median).
"""

from __future__ import annotations

import dataclasses
import statistics

import pytest

from ceiling.hardware.catalog import get_spec
from ceiling.model.cluster import make_cluster
from ceiling.model.plan.search import search
from ceiling.model.plan.step import Job
from ceiling.model.transformer import get_model, parse_model

A100, H100 = get_spec("a100-80gb"), get_spec("h100-sxm")
# torchtitan's H100s: 96 GB HBM2e at 2.4 TB/s (benchmarks/llama3_h100_202412_torchtitan.md).
H100_96 = dataclasses.replace(
    H100, key="h100-sxm", memory_bytes=96 * 2**30, memory_bandwidth_bytes_per_s=2.4e12
)
TOLERANCE = 0.08


def _bloom():
    # bigscience tr11-176B-ml: 70 layers, h 14336, 112 heads, vocab 250880 (tied), ALiBi.
    model = parse_model(
        "custom:layers=70,hidden=14336,heads=112,vocab=250880,tied_embeddings=true,"
        "max_seq=2048,norm=layernorm,bias=true"
    )
    # 4 × 100 Gb/s Omni-Path per 8 GPUs: 6.25 GB/s per GPU across nodes.
    cluster = make_cluster(A100, 384, inter_node_bandwidth_bytes_per_s=6.25e9)
    fixed = dict(d=8, t=4, p=12, micro_batch=2, zero=1, recompute="full", sp=False)
    return Job(model, 2048, 2048, attention="unfused", dropout=True), cluster, fixed


def _llama65():
    # Touvron et al. 2023: xFormers causal attention, no dropout; 4M tokens per batch.
    model = parse_model(
        "custom:layers=80,hidden=8192,heads=64,ffn_hidden=22016,ffn_kind=swiglu,vocab=32000,"
        "max_seq=2048,norm=rmsnorm"
    )
    job = Job(model, 2048, 2048, attention="flash", dropout=False)
    return job, make_cluster(A100, 2048), dict(recompute="selective", sp=True)


def _gpt3_nemo(fp8: bool):
    # NeMo gpt3_175b: vocabulary padded to 51200, flash attention, dropout 0.1, TP comm
    # overlap on (the recipe's tp_comm_overlap), 12 virtual stages as the README states.
    # gpt3_175b_hydra.yaml: distributed_fused_adam with grad_sync_dtype bf16 and a contiguous
    # grad buffer (16-bit gradients: state_bytes 16); fp8_params true (FP8 weights only).
    model = get_model("gpt3-175b").replace(vocab=51200)
    fixed = dict(d=4, t=4, p=8, v=12, micro_batch=1, zero=1, recompute="none", sp=True)
    fixed.update(tp_overlap=True, fp8="linear" if fp8 else "off", state_bytes=16)
    fixed.update(fp8_params=fp8)
    return Job(model, 256, 2048, attention="flash", dropout=True), make_cluster(H100, 128), fixed


def _llama31_70b():
    fixed = dict(d=2, t=4, p=4, v=5, cp=2, micro_batch=1, zero=1, recompute="none", sp=True)
    fixed.update(tp_overlap=True)
    job = Job(get_model("llama-3-70b"), 128, 8192, attention="flash", dropout=False)
    return job, make_cluster(H100, 64), fixed


def _mpt70b():
    model = parse_model(
        "custom:layers=80,hidden=8192,heads=64,vocab=50368,tied_embeddings=true,max_seq=2048,"
        "norm=layernorm,bias=false"
    )
    job = Job(model, 2048, 2048, attention="flash", dropout=False)
    return job, make_cluster(H100, 64), dict(d=64, zero=3, micro_batch=8, recompute="full")


def _torchtitan_8b():
    # FSDP over 8, local batch 2, per-op selective activation checkpointing (every other
    # matmul output kept), flash attention; 16 sequences of 8192 per step; eager PyTorch
    # (compile = false in train_configs/llama3_8b.toml): every pointwise op its own kernel.
    # The loss is PyTorch's eager F.cross_entropy on logits upcast to fp32.
    job = Job(get_model("llama-3-8b"), 16, 8192, attention="flash", dropout=False, loss="eager")
    fixed = dict(d=8, zero=3, micro_batch=2, recompute="ops:alternate", kernels="eager")
    return job, make_cluster(H100_96, 8), fixed


def _step(r, cluster):
    return r.step_time_s


def _tokens_per_gpu(r, cluster):
    return r.tokens_per_s / cluster.devices


# name, build, figure, published, what does not hold (None: it holds)
CASES = [
    ("BLOOM-176B, 384 A100", _bloom, _step, 105.2, None),
    ("LLaMA-65B, 2048 A100", _llama65, _tokens_per_gpu, 380.0, None),
    ("GPT-3 175B BF16, 128 H100", lambda: _gpt3_nemo(False), _step, 8.309, None),
    # FP8 GEMMs at the 16-bit share × the published FP8/BF16 ratio of the H100 (0.883).
    ("GPT-3 175B FP8, 128 H100", lambda: _gpt3_nemo(True), _step, 5.626, None),
    ("Llama 3.1 70B BF16, 64 H100", _llama31_70b, _step, 14.72, None),
    ("MPT-70B, 64 H100", _mpt70b, _tokens_per_gpu, 1039.0, None),
    (
        "Llama 3.1 8B torchtitan, 8 H100",
        _torchtitan_8b,
        _tokens_per_gpu,
        5762.0,
        "eager kernels priced (+0.46 s a step; torch.compile saved torchtitan 0.39 s), the "
        "prediction is still 37 % fast: the GPUs are a 96 GB HBM2e H100 run at 500 W, whose "
        "peak torchtitan says lies between the H100 SXM's and the NVL's and is not published, "
        "so the catalog has no such device and the 700 W H100 SXM datasheet peak is used "
        "(torchtitan's compiled run, 6,667 tokens/s, is 35 % below the fused prediction)",
    ),
]


def predict(build, figure):
    """The published run's figure as planned. These runs are known to fit their devices, so
    the planning margin (10 % headroom) is dropped; memory is checked where a run published
    it (torchtitan, below)."""
    job, cluster, fixed = build()
    # As published: no free feature the run does not name (`features.as_published`).
    job = dataclasses.replace(job, headroom=0.0, offered=())
    best = search(job, cluster, fixed, top=1).plans[0]
    return figure(best, cluster), best


def validation_rows() -> list[tuple[str, float, float, float]]:
    """(case, predicted, published, error) for every case, for the closing note."""
    rows = []
    for name, build, figure, published, _ in CASES:
        predicted, _ = predict(build, figure)
        rows.append((name, predicted, published, predicted / published - 1.0))
    return rows


@pytest.mark.slow
@pytest.mark.parametrize(
    ("build", "figure", "published"),
    [
        pytest.param(
            build,
            figure,
            published,
            id=name,
            marks=[pytest.mark.xfail(strict=True, reason=why)] if why else [],
        )
        for name, build, figure, published, why in CASES
    ],
)
def test_planner_v2_public_case_within_8_percent(build, figure, published):
    predicted, best = predict(build, figure)
    assert predicted / published - 1.0 == pytest.approx(0.0, abs=TOLERANCE), best.plan.describe()


def test_gpt3_fp8_nemo_layout_fits_with_the_planning_headroom():
    # It ran in 80 GB. What NeMo keeps per parameter (gpt3_175b_hydra.yaml, NeMo
    # distributed_adam.py, Apex DistributedFusedAdam, TE 1.x linear.py): linear weights in FP8
    # (1 byte, fp8_params) with their cached FP8 transpose (1), other weights 16-bit (2);
    # 16-bit gradients in the contiguous grad buffer (2, grad_sync_dtype bf16); fp32 master,
    # momentum and variance sharded over d = 4 (12/4 = 3): 7 bytes for every parameter.
    job, cluster, fixed = _gpt3_nemo(True)
    (best,) = search(job, cluster, fixed, top=1).plans
    assert best.fits and best.usable_bytes_per_device == pytest.approx(0.9 * 80 * 2**30)
    state = best.memory_bytes_per_device - best.memory["activation_bytes"]
    assert state == pytest.approx(7 * best.memory["params_per_device"])


def test_gpt3_20b_fp8_nemo_launcher_layout_fits_with_the_planning_headroom():
    # NeMo-Framework-Launcher, conf/training/gpt3/20b_fp8_performance.yaml: 44 layers, h 6144,
    # 48 heads, sequences of 2048, vocabulary padded to 51,200, dropout 0.1; 64 nodes of 8
    # H100, TP4 PP1 (d = 128), micro-batch 4, global batch 2048, selective recompute, sequence
    # parallelism, FP8 (Transformer Engine, hybrid), TP overlap; distributed_fused_adam with a
    # contiguous grad buffer synced in bf16 (16-bit gradients: state_bytes 16).
    model = parse_model(
        "custom:layers=44,hidden=6144,heads=48,vocab=51200,max_seq=2048,norm=layernorm,bias=true"
    )
    job = Job(model, 2048, 2048, attention="flash", dropout=True)
    fixed = dict(d=128, t=4, p=1, micro_batch=4, zero=1, recompute="selective", sp=True)
    fixed.update(fp8="linear", state_bytes=16, tp_overlap=True)
    (best,) = search(job, make_cluster(H100, 512), fixed, top=1).plans
    params = best.memory["params_per_device"]
    # 16-bit weights and gradients, fp32 master and Adam moments over d = 128: 4 + 12/128
    # bytes a parameter (19.6 GiB); the FP8 copy and transpose of the linear weights, 2 bytes
    # each (9.3 GiB); 44 layers of a 4 × 2,048-token micro-batch (13.9 GiB) and the loss's
    # logits (0.6 GiB). Peak 43.4 GiB of the 72 GiB the planning headroom leaves.
    assert best.memory["state_bytes"] == pytest.approx((4 + 12 / 128) * params)
    assert best.fits and best.memory_bytes_per_device / 2**30 == pytest.approx(43.4, abs=0.1)


@pytest.mark.parametrize(("v", "peak_gib"), [(2, 58.2), (4, 52.7), (8, 50.0)])
def test_nemotron4_340b_as_trained_fits_with_the_planning_headroom(v, peak_gib):
    # Nemotron-4 340B technical report (NVIDIA 2024), section 2.2 and Table 2: 96 layers,
    # h 18432, 96 query and 8 KV heads, squared-ReLU FFN 73728, vocabulary 256,000, untied,
    # no dropout, sequences of 4096; 6,144 H100 (768 DGX nodes), 8-way tensor, 12-way
    # pipeline parallelism with interleaving, 64-way data parallelism with the distributed
    # optimizer, batch 2304. The interleaving degree is not published: every one that cuts 8
    # layers a stage evenly is checked, with nothing recomputed (the most memory); Megatron-LM
    # in BF16 keeps fp32 gradients (18 bytes of state a parameter).
    model = parse_model(
        "custom:layers=96,hidden=18432,heads=96,kv_heads=8,ffn_hidden=73728,ffn_kind=gelu,"
        "vocab=256000,max_seq=4096,norm=layernorm,trained_dropout=false"
    )
    job = Job(model, 2304, 4096, attention="flash", dropout=False)
    fixed = dict(d=64, t=8, p=12, v=v, micro_batch=1, zero=1, recompute="none", sp=True)
    (best,) = search(job, make_cluster(H100, 6144), fixed, top=1).plans
    params = best.memory["params_per_device"]
    assert best.memory["state_bytes"] == pytest.approx((2 + 4 + 12 / 64) * params)  # 23.3 GiB
    # The first stage holds p(1 + (p-1)/(p·v)) micro-batches of its 8 layers: 17.5 for v = 2.
    assert best.stages["heaviest_memory"] == "first" and best.fits
    assert best.memory_bytes_per_device / 2**30 == pytest.approx(peak_gib, abs=0.1)


def test_llama3_405b_on_16384_h100_lands_in_the_published_band():
    # Llama Team 2024, Table 4: 380–430 TFLOP/s per GPU over its 405B layouts (400 for this
    # one: t 8, cp 1, p 16, d 128, 16M tokens a step of 8192-token sequences, BF16 MFU 41 %);
    # section 3.3.2: 126 layers, the first and last stage a layer lighter, interleaved.
    # Model FLOPs (no recomputation), as the MFU beside it counts them. Not tuned on.
    job = Job(get_model("llama-3-405b"), 2048, 8192, attention="flash", dropout=False)
    cluster = make_cluster(H100, 16384)
    best = search(job, cluster, dict(d=128, t=8, p=16, cp=1), top=1).plans[0]
    assert (best.plan.first_stage_layers, best.plan.last_stage_layers) == (7, 7)
    assert best.plan.v > 1 and best.fits
    tflops = best.mfu * cluster.peak_flops_per_s / 1e12
    assert 380 * (1 - TOLERANCE) <= tflops <= 430 * (1 + TOLERANCE), best.plan.describe()


@pytest.mark.xfail(
    strict=True,
    reason="the published 82.4 GiB is the caching allocator's peak reservation of an eager "
    "run (torchtitan logs max_reserved; torch.compile brings it to 77.0); the planner counts "
    "the live tensors at the loss's backward, 72.8 GiB (-12 %), which fit the 96 GB device",
)
def test_torchtitan_peak_memory_fits_and_is_within_10_percent():
    job, cluster, fixed = _torchtitan_8b()
    best = search(job, cluster, fixed, top=1).plans[0]
    assert best.fits
    assert best.memory_bytes_per_device / 2**30 == pytest.approx(82.4, rel=0.10)


if __name__ == "__main__":
    table = validation_rows()
    for name, predicted, published, error in table:
        print(f"{name:34s} predicted {predicted:10.4g} published {published:10.4g} {error:+.1%}")
    print(f"median |error| {statistics.median(abs(r[3]) for r in table):.1%}")
