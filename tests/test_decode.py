"""Decode and prefill ceilings: published anchors and the exact arithmetic behind them."""

import math

import pytest

from ceiling.errors import DoesNotFit, InvalidInput, UnsupportedOnDevice
from ceiling.hardware.catalog import DeviceSpec, get_spec
from ceiling.model.decode import (
    DecodeSetup,
    decode_ceiling,
    experts_touched,
    kv_heads_per_device,
    roof_curves,
    ttft_s,
)
from ceiling.model.transformer import get_model, parse_model


def _device(peak=100e12, bw=1e12, memory=80e9, link=None, dtypes=("bf16", "fp16", "fp32")):
    return DeviceSpec(
        key="test",
        name="Test device",
        vendor="",
        kind="gpu",
        driver_names=(),
        peak_flops_per_s={d: peak for d in dtypes},
        memory_bytes=memory,
        memory_bandwidth_bytes_per_s=bw,
        link_bandwidth_bytes_per_s=link,
    )


def test_llama2_7b_a100_batch1_is_151_tokens_per_s():
    c = decode_ceiling(get_model("llama-2-7b"), get_spec("a100-80gb"), [1])
    row = c.rows[0]
    assert row.tokens_per_s == pytest.approx(151, rel=0.02)
    assert row.bound == "memory"
    # weights alone: 2.039 TB/s over 2 bytes × 6.74e9 parameters
    assert row.tokens_per_s == pytest.approx(2.039e12 / (2 * 6.738e9), rel=0.001)


@pytest.mark.parametrize("model", ["llama-2-7b", "llama-3-8b", "mistral-7b", "llama-3-70b"])
def test_h100_bf16_crossover_near_the_ridge(model):
    tp = 8 if model == "llama-3-70b" else 1
    c = decode_ceiling(get_model(model), get_spec("h100-sxm"), [1], DecodeSetup(tp=tp))
    assert c.ridge_flop_per_byte == pytest.approx(295, rel=0.01)
    assert 250 <= c.crossover_batch <= 350


def test_crossover_is_the_ridge_in_tokens_exactly():
    m = get_model("llama-2-7b")
    dev = _device(peak=100e12, bw=1e12)
    c = decode_ceiling(m, dev, [1])
    # compute-bound once batch × flops/token / peak ≥ weight bytes / bandwidth
    expect = math.ceil(2 * m.params_total / 1e12 / (m.flops_per_token(0) / 100e12))
    assert c.crossover_batch == expect
    # the rows also count the new token's KV write, which moves the switch a little
    x = c.crossover_batch_with_kv
    assert expect <= x <= expect + 1
    rows = decode_ceiling(m, dev, [x - 1, x]).rows
    assert [r.bound for r in rows] == ["memory", "compute"]


def test_bytes_and_flops_per_step_exact_with_gqa():
    m = get_model("llama-3-70b")
    ctx, batch = 1000, 4
    c = decode_ceiling(m, _device(memory=1e12), [batch], DecodeSetup(context=ctx))
    r = c.rows[0]
    kv_tok = 2 * 80 * 8 * 128 * 2  # 8 KV heads, not 64
    assert c.kv_bytes_per_token == kv_tok
    assert r.kv_read_bytes == batch * ctx * kv_tok
    assert r.kv_write_bytes == batch * kv_tok
    assert r.bytes_per_step == 2 * m.params_total + batch * (ctx + 1) * kv_tok
    attention = 4 * m.layers * m.heads * m.head_dim * (ctx + 1)
    assert r.flops_per_step == batch * (2 * m.params_matmul + attention)
    assert r.step_time_s == max(r.bytes_per_step / 1e12, r.flops_per_step / 100e12)
    assert r.tokens_per_s == pytest.approx(batch / r.step_time_s)
    assert r.tokens_per_s_per_sequence == pytest.approx(r.tokens_per_s / batch)


def test_long_context_mha_never_turns_compute_bound():
    # MHA bf16 attention over the cache does 1 FLOP per byte: below any GPU ridge.
    c = decode_ceiling(
        get_model("llama-2-7b"), get_spec("h100-sxm"), [1], DecodeSetup(context=4000)
    )
    assert c.crossover_batch_with_kv is None
    assert c.crossover_batch is not None


def test_quantised_weights_read_fewer_bytes_but_compute_at_bf16():
    m = get_model("llama-2-7b")
    spec = get_spec("h100-sxm")
    bf16 = decode_ceiling(m, spec, [1]).rows[0]
    int4 = decode_ceiling(m, spec, [1], DecodeSetup(weights_dtype="int4"))
    assert int4.dtypes.compute == "bf16" and int4.notes
    assert int4.rows[0].weight_bytes == pytest.approx(bf16.weight_bytes / 4)
    assert int4.peak_flops_per_s == spec.peak("bf16")
    fp8 = decode_ceiling(m, spec, [1], DecodeSetup(weights_dtype="fp8"))
    assert fp8.dtypes.compute == "fp8" and fp8.peak_flops_per_s == spec.peak("fp8")
    a100_fp8 = decode_ceiling(m, get_spec("a100-80gb"), [1], DecodeSetup(weights_dtype="fp8"))
    assert a100_fp8.dtypes.compute == "bf16"
    kv8 = decode_ceiling(m, spec, [1], DecodeSetup(kv_dtype="fp8"))
    assert kv8.kv_bytes_per_token == m.kv_bytes_per_token(1)


def test_device_without_the_dtype():
    with pytest.raises(UnsupportedOnDevice, match="bf16"):
        decode_ceiling(get_model("llama-2-7b"), get_spec("v100"), [1])
    c = decode_ceiling(get_model("llama-2-7b"), get_spec("v100"), [1], DecodeSetup("fp16"))
    assert c.dtypes.compute == "fp16"
    c = decode_ceiling(get_model("llama-2-7b"), get_spec("v100"), [1], DecodeSetup("int8"))
    assert c.dtypes.compute == "fp16"  # int8 weights on a device without bf16


def test_tensor_parallel_splits_weights_and_kv():
    m = get_model("llama-3-70b")
    spec = get_spec("h100-sxm")
    one = decode_ceiling(m, _device(memory=1e12, link=None), [8], DecodeSetup(context=100))
    eight = decode_ceiling(m, _device(memory=1e12), [8], DecodeSetup(context=100, tp=8))
    assert eight.rows[0].weight_bytes == pytest.approx(one.rows[0].weight_bytes / 8)
    assert eight.kv_bytes_per_token_per_device == one.kv_bytes_per_token / 8
    assert kv_heads_per_device(m, 16) == 1  # 8 KV heads over 16 devices: replicated
    with_link = decode_ceiling(m, spec, [8], DecodeSetup(tp=8))
    r = with_link.rows[0]
    # two all-reduces of batch × hidden bf16 values per layer, priced as the planner does
    from ceiling.model.cluster import group_link, make_cluster
    from ceiling.model.collectives import allreduce_s

    link = group_link(spec, 8, "bf16")
    assert link == make_cluster(spec, 8).link(False)
    comm = 80 * 2 * float(allreduce_s(8 * 8192 * 2, 8, *link))
    assert r.comm_time_s == pytest.approx(comm)
    assert r.step_time_s == pytest.approx(max(r.memory_time_s, r.compute_time_s) + comm)
    with pytest.raises(InvalidInput, match=r"32 % 3 = 2"):
        decode_ceiling(get_model("llama-2-7b"), spec, [1], DecodeSetup(tp=3))
    with pytest.raises(InvalidInput, match="KV heads"):
        kv_heads_per_device(parse_model("custom:layers=2,hidden=768,heads=12,kv_heads=4"), 6)


def test_memory_fit_and_largest_batch():
    m = get_model("llama-2-7b")
    spec = get_spec("a100-80gb")
    setup = DecodeSetup(context=4000)
    c = decode_ceiling(m, spec, [1], setup)
    kv_seq = 4001 * m.kv_bytes_per_token(2)
    assert c.max_batch == int((spec.memory_bytes - 2 * m.params_total) // kv_seq)
    decode_ceiling(m, spec, [c.max_batch], setup)
    with pytest.raises(DoesNotFit, match=f"largest batch that fits is {c.max_batch}"):
        decode_ceiling(m, spec, [c.max_batch + 1], setup)
    swept = decode_ceiling(m, spec, [1, 8, 64, 256], setup, drop_unfit=True)
    assert c.max_batch == 34
    assert [r.batch for r in swept.rows] == [1, 8]
    assert any("256" in n for n in swept.notes)
    with pytest.raises(DoesNotFit, match="raise tp or use weights"):
        decode_ceiling(get_model("llama-3-70b"), spec, [1])


def test_context_longer_than_the_model():
    with pytest.raises(InvalidInput, match="4095"):
        decode_ceiling(
            get_model("llama-2-7b"), get_spec("a100-80gb"), [1], DecodeSetup(context=4096)
        )
    decode_ceiling(get_model("llama-2-7b"), get_spec("a100-80gb"), [1], DecodeSetup(context=4095))


def test_mixture_of_experts_reads_only_routed_experts():
    m = get_model("mixtral-8x7b")
    assert experts_touched(m, 1) == pytest.approx(2)
    assert experts_touched(m, 1000) == pytest.approx(8)
    dev = _device(memory=1e12)
    c = decode_ceiling(m, dev, [1, 1024])
    assert c.rows[0].weight_bytes == pytest.approx(2 * m.params_active)
    assert c.rows[1].weight_bytes == pytest.approx(2 * m.params_total, rel=1e-6)
    # FLOPs follow the active parameters only
    assert c.rows[0].flops_per_step == m.flops_per_token(1)


def test_prefill_time_to_first_token():
    m = get_model("llama-2-7b")
    dev = _device()
    p = 2000
    t = ttft_s(m, dev, DecodeSetup(prompt_tokens=p))
    head = m.vocab * m.hidden
    flops = 2 * (m.params_matmul - head) * p + 2 * head + 2 * m.layers * m.hidden * p * (p + 1)
    assert t == pytest.approx(flops / 100e12)  # compute-bound
    assert t > 2 * m.params_total / 1e12
    c = decode_ceiling(m, dev, [1, 4], DecodeSetup(context=p))
    assert c.rows[0].ttft_s == pytest.approx(t)
    assert c.rows[1].ttft_s == pytest.approx(4 * t)


def test_roof_curves_bound_the_ceiling():
    m = get_model("llama-3-8b")
    spec = get_spec("h100-sxm")
    batches = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    curves = roof_curves(m, spec, DecodeSetup(), batches)
    for mem, comp, ceil in zip(curves["memory"], curves["compute"], curves["ceiling"], strict=True):
        assert ceil == pytest.approx(min(mem, comp))
    assert curves["ceiling"] == sorted(curves["ceiling"])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"weights_dtype": "int3"}, "weights dtype"),
        ({"kv_dtype": "fp4"}, "KV dtype"),
        ({"context": -1}, "context"),
        ({"tp": 0}, "tensor-parallel"),
        ({"prompt_tokens": 0}, "prompt"),
    ],
)
def test_setup_validation(kwargs, match):
    with pytest.raises(InvalidInput, match=match):
        DecodeSetup(**kwargs)


def test_bad_batches():
    for bad in ([], [0], [1.5]):
        with pytest.raises(InvalidInput):
            decode_ceiling(get_model("gpt2"), get_spec("a100-80gb"), bad)


def test_weights_counted_read_leaves_out_unused_table_rows():
    m = get_model("llama-2-7b")  # untied: the input table is a lookup of `batch` rows
    dev = _device()
    read = decode_ceiling(m, dev, [4], DecodeSetup(weights_counted="read")).rows[0]
    everything = decode_ceiling(m, dev, [4]).rows[0]
    unread = (m.vocab - 4) * m.hidden * 2
    assert everything.weight_bytes - read.weight_bytes == unread
    tied = get_model("gpt2")  # tied table read whole as the head; 1024 positions, 4 used
    r = decode_ceiling(tied, dev, [4], DecodeSetup(weights_counted="read")).rows[0]
    assert r.weight_bytes == (tied.params_total - 1020 * tied.hidden) * 2


# ---- latent attention, local layers, narrow experts ------------------------------------


def test_deepseek_v3_decode_prices_both_mla_forms_and_keeps_the_latent_whole():
    m = get_model("deepseek-v3")
    dev = _device(peak=1000e12, bw=4.8e12, memory=141e9, dtypes=("bf16", "fp8"))
    setup = DecodeSetup(weights_dtype="fp8", context=4096, tp=8)
    c = decode_ceiling(m, dev, [1, 32], setup)
    assert c.mla_attention == "absorbed"
    # the latent and rotary key (512 + 64 per layer, bf16 activations), whole on every device
    assert c.kv_bytes_per_token == c.kv_bytes_per_token_per_device == 61 * 576 * 2
    row = c.rows[0]
    assert row.kv_read_bytes == 4096 * 61 * 576 * 2
    # absorbed: per cached key and layer 2·a·(r + d_rope) + 2·a·r FLOPs
    absorbed = 61 * (2 * 128 * (512 + 64) + 2 * 128 * 512) * 4097
    assert row.flops_per_step == pytest.approx((2 * m.params_matmul + absorbed) / 8)
    naive = m.decode_attention_flops(4096, absorbed=False)
    assert naive > 100 * absorbed  # every cached latent projected up again
    assert any("absorbed" in n and "non-absorbed" in n for n in c.notes)
    # a prompt: the non-absorbed form is the cheaper
    assert m.prefill_attention_flops(4096, False) < m.prefill_attention_flops(4096, True)
    assert c.to_json()["mla_attention"] == "absorbed"
    assert "mla_attention" not in decode_ceiling(get_model("llama-3-8b"), dev, [1]).to_json()


def test_local_layers_bound_the_cache_in_decode_memory():
    m = get_model("gemma-3-27b")
    dev = _device(memory=1e15)
    c = decode_ceiling(m, dev, [4], DecodeSetup(context=32767))
    per_sequence = (10 * 32768 + 52 * 1024) * 2 * 16 * 128 * 2  # 10 global layers, 52 local
    assert c.kv_bytes_per_sequence == per_sequence
    assert c.rows[0].memory_needed_bytes == pytest.approx(m.params_total * 2 + 4 * per_sequence)
    assert c.rows[0].kv_read_bytes == 4 * (10 * 32767 + 52 * 1024) * 2 * 16 * 128 * 2
    assert any("52 of 62 layers" in n for n in c.notes)


def test_gpt_oss_experts_read_in_mxfp4():
    m = get_model("gpt-oss-120b")
    dev = _device(memory=80e9)
    c = decode_ceiling(m, dev, [1])
    assert c.rows[0].memory_needed_bytes == pytest.approx(m.weight_bytes(2) + m.kv_bytes(1, 2))
    # batch 1: 4 of 128 experts per layer, their matrices at 4.25 bits
    matrices = 36 * 4 * 3 * 2880 * 2880
    expected = (m.params_active - matrices) * 2 + matrices * 4.25 / 8
    assert c.rows[0].weight_bytes == pytest.approx(expected)
    assert any("4.25 bits" in n for n in c.notes)
