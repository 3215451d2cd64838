"""Expected decode speed against published runs (gpt-fast, batch 1): within ±20 %, while the
ceiling stays above every published figure."""

import dataclasses

import pytest

from ceiling.hardware.resolve import resolve_device
from ceiling.model.decode import DecodeSetup, decode_ceiling
from ceiling.model.decode_expected import (
    GRAPH_KERNEL_GAP_S,
    SCALE_ZERO_BYTES,
    EngineCosts,
    activation_bytes_per_token,
    costs_for,
    expected_rows,
    gemm_seconds,
    quant_format,
)
from ceiling.model.model_catalog import model_names
from ceiling.model.transformer import get_model

# validation-public.md, "Expected decode"
PUBLISHED = [
    ("llama-2-70b", "a100-80gb", DecodeSetup(tp=2), 21.32),
    ("llama-2-7b", "a100-80gb", DecodeSetup(weights_dtype="int4"), 196.80),
    ("llama-2-7b", "mi250x", DecodeSetup(), 76.33),
]


def _one(model, device, setup):
    cfg, spec = get_model(model), resolve_device(device, None)
    ceiling = decode_ceiling(cfg, spec, [1], setup)
    (row,) = expected_rows(ceiling, cfg.layers, costs_for(spec))
    return ceiling.rows[0], row


@pytest.mark.parametrize(("model", "device", "setup", "published"), PUBLISHED)
def test_expected_decode_matches_published_runs(model, device, setup, published):
    ceiling, expected = _one(model, device, setup)
    assert expected.tokens_per_s == pytest.approx(published, rel=0.20)
    assert ceiling.tokens_per_s > published > 0
    assert expected.tokens_per_s < ceiling.tokens_per_s


def test_expected_terms_add_up_with_fake_numbers():
    class Row:  # one decode row: 0.8 GB of weights, 0.2 GB of KV, 1e12 FLOPs (1e11 attention)
        batch, weight_bytes, bytes_per_step, fits = 2, 8e8, 1e9, True
        flops_per_step, attention_flops = 1e12, 1e11
        compute_time_s, comm_time_s, tokens_per_s = 1e-3, 5e-4, 400.0

    class Dtypes:
        weights = "int4"

    class Ceiling:
        rows, dtypes, bandwidth_bytes_per_s, peak_flops_per_s = [Row()], Dtypes(), 1e12, 1e15

    costs = EngineCosts(
        bandwidth_share=0.5,
        per_kernel_s=1e-6,
        kernels_per_layer=10,
        kernels_outside_layers=4,
        group_size=32,
        vector_peak_flops_per_s=1e13,
        matmul_efficiency=0.5,
        attention_efficiency=0.25,
    )
    (r,) = expected_rows(Ceiling(), layers=2, costs=costs)
    quantised = 8e8 / 0.5  # int4: half a byte per weight
    assert r.quant_bytes == quantised * SCALE_ZERO_BYTES / 32
    assert r.memory_s == pytest.approx((1e9 + r.quant_bytes) / 5e11)
    # the multiplies: 9e11 FLOPs at half of 1e15 (1.8 ms) against their bytes (3.4 ms)
    assert r.gemm_s == pytest.approx(max((8e8 + r.quant_bytes) / 5e11, 9e11 / 5e14))
    # attention: 1e11 FLOPs at a quarter of 1e15 (0.4 ms) against 0.2 GB (0.4 ms)
    assert r.attention_s == pytest.approx(max(2e8 / 5e11, 1e11 / 2.5e14))
    # dequantisation: 4 instructions a weight at half the fp32 FLOP rate (an FMA is 2 FLOPs)
    assert r.dequant_s == pytest.approx(quantised * 4 / 5e12)
    assert (r.kernels, r.launch_s) == (24, pytest.approx(24e-6))
    assert r.step_s == pytest.approx(r.gemm_s + r.attention_s + r.dequant_s + 24e-6 + 5e-4)
    assert r.tokens_per_s == pytest.approx(2 / r.step_s) and r.limited_by == "memory"


def test_cuda_graphs_leave_the_gpu_gap_not_the_launch_floor():
    spec = resolve_device("h100-sxm", None)
    graphs = costs_for(spec)
    assert graphs.cuda_graphs and graphs.kernel_s == GRAPH_KERNEL_GAP_S
    # a measured per-kernel floor means kernels launched one by one, as measured here
    assert not costs_for(spec, per_kernel_s=4e-6).cuda_graphs
    # AMD: each kernel still pays the floor
    assert not costs_for(resolve_device("mi250x", None)).cuda_graphs
    cfg = get_model("llama-2-7b")
    ceiling = decode_ceiling(cfg, spec, [1])
    (with_graphs,) = expected_rows(ceiling, cfg.layers, graphs)
    (eager,) = expected_rows(ceiling, cfg.layers, dataclasses.replace(graphs, cuda_graphs=False))
    kernels = cfg.layers * 10 + 4
    assert eager.step_s - with_graphs.step_s == pytest.approx(kernels * (5e-6 - 1e-6))


@pytest.mark.parametrize(
    ("weights", "group", "scale_bytes"),
    [("int4", 32, 4.0), ("awq", 128, 4.0), ("gptq", 128, 2.5), ("mxfp4", 32, 1.0)],
)
def test_four_bit_formats_read_their_own_scales(weights, group, scale_bytes):
    spec = resolve_device("a100-80gb", None)
    cfg = get_model("llama-2-7b")
    ceiling = decode_ceiling(cfg, spec, [1], DecodeSetup(weights_dtype="int4"))
    (r,) = expected_rows(ceiling, cfg.layers, costs_for(spec, weights=weights))
    assert r.quant_bytes == pytest.approx(ceiling.rows[0].weight_bytes / 0.5 * scale_bytes / group)
    assert quant_format(weights).group_size == group


def test_a_small_all_reduce_is_priced_by_latency_not_ring_bandwidth():
    from ceiling.model.cluster import group_link
    from ceiling.model.collectives import ring_allreduce_s, tree_allreduce_s

    spec = resolve_device("a100-80gb", None)
    cfg = get_model("llama-2-7b")
    row = decode_ceiling(cfg, spec, [1], DecodeSetup(tp=8)).rows[0]
    bw, lat = group_link(spec, 8, "bf16")
    size = cfg.hidden * 2  # one token's activations, 8 KB
    one = row.comm_time_s / (2 * cfg.layers)
    # the tree's 2·log2(8) latency steps, not the ring's 2·7: the latency-bound choice
    assert one == pytest.approx(float(tree_allreduce_s(size, 8, bw, lat)))
    assert one < float(ring_allreduce_s(size, 8, bw, lat))
    assert 2 * 3 * lat <= one < 2 * 3 * lat * 1.01


def test_decoder_matmuls_at_measured_rates_set_the_compute_time():
    from ceiling.model.decode_expected import compute_with_rates, decoder_matmuls

    cfg = get_model("gpt:small")
    ceiling = decode_ceiling(cfg, resolve_device("a100-80gb", None), [4])
    shapes = decoder_matmuls(cfg, 4)
    assert ((4, cfg.vocab, cfg.hidden), 1) in shapes and len(shapes) == 6
    rates = {shape: 1e12 for shape, _ in shapes}  # every matmul at 1 TFLOP/s
    matmul_flops = sum(2.0 * m * n * k * count for (m, n, k), count in shapes)
    rest = ceiling.rows[0].flops_per_step - matmul_flops
    assert 0 <= rest < 0.1 * matmul_flops  # attention over a one-token cache, no more
    (got,) = compute_with_rates(cfg, ceiling, rates).values()
    assert got == pytest.approx(matmul_flops / 1e12 + rest / ceiling.peak_flops_per_s)


def test_expected_decode_median_error_over_the_public_cases():
    import statistics

    errors = []
    for model, device, setup, published in PUBLISHED:
        ceiling, expected = _one(model, device, setup)
        assert ceiling.tokens_per_s > published  # every ceiling above the measurement
        errors.append(abs(expected.tokens_per_s / published - 1))
    assert statistics.median(errors) <= 0.12


@pytest.mark.parametrize("name", model_names())
@pytest.mark.parametrize("tp", [1, 8])
def test_gemm_flops_follow_the_layer_kinds(name, tp):
    """With no tiles (rate 1, no SM count) the multiplies' time is their FLOPs: every
    block's weights a token multiplies (dense layers, routed and shared experts, MLA's
    projections, routers) and the head for the sampled rows, split over tp devices."""
    cfg = get_model(name)
    tokens, sampled = 4096, 7
    want = (
        2 * tokens * cfg.params_blocks_matmul_active + 2 * sampled * cfg.vocab * cfg.hidden
    ) / tp
    assert gemm_seconds(cfg, tp, tokens, sampled, 1.0, None) == pytest.approx(want, rel=1e-12)


def test_activation_bytes_count_each_kernel_between_the_gemms():
    """Per token, by hand: Llama 3 8B (h 4096, q 4096, kv 1024, FFN 14336, 32 layers) on one
    device, 8h + 2(q + kv) + 3f a layer; Mixtral 8x7B on two, its 2 routed experts' 3·2f/2
    and a permutation of 2·(2 + 1)·h a layer; bf16, 2 bytes each."""
    llama = 32 * (8 * 4096 + 2 * 5120 + 3 * 14336) * 2
    assert activation_bytes_per_token(get_model("llama-3-8b"), 1, 2.0) == llama == 5_505_024
    mixtral = 32 * (8 * 4096 + 2 * 5120 / 2 + 3 * 2 * 14336 / 2 + 2 * 3 * 4096) * 2
    assert activation_bytes_per_token(get_model("mixtral-8x7b"), 2, 2.0) == mixtral == 6_750_208


def test_activation_bytes_of_a_gelu_ffn_and_of_mla():
    """A GELU FFN (no gate) reads its up output and writes the activation, 2f/tp: GPT-1T
    (128 layers, h = q = kv width 25600, FFN 102400) on 8 devices. DeepSeek-V3 on 8: only
    the rotary parts are rotated (128 heads × 64 / 8 and one shared 64-wide key), 3 dense
    layers of FFN 18432 and 58 MoE layers of 8 routed and 1 shared 2048-wide experts, each
    token copied to its 8 experts and back (2·9·h)."""
    gpt = 128 * (8 * 25600 + 2 * (25600 + 25600) / 8 + 2 * 102400 / 8) * 2
    assert activation_bytes_per_token(get_model("gpt-1t"), 8, 2.0) == gpt
    h = 7168
    rope = 128 * 64 / 8 + 64
    ds = 61 * (8 * h + 2 * rope) + 3 * 3 * 18432 / 8 + 58 * (3 * 9 * 2048 / 8 + 2 * 9 * h)
    assert activation_bytes_per_token(get_model("deepseek-v3"), 8, 1.0) == pytest.approx(ds)
