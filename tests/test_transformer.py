"""Transformer shapes against published parameter counts and exact formulas."""

import pytest

from ceiling.errors import InvalidInput, UnknownName
from ceiling.model.model_catalog import model_names
from ceiling.model.transformer import get_model, parse_model
from ceiling.model.transformer_config import TransformerConfig
from ceiling.units import KiB


@pytest.mark.parametrize(
    ("name", "published"),
    [
        ("llama-2-7b", 6.74e9),
        ("llama-3-8b", 8.03e9),
        ("llama-3-70b", 70.6e9),
        ("mixtral-8x7b", 46.7e9),
        ("gpt3-175b", 175e9),
        ("gpt2", 124.4e6),
        ("mistral-7b", 7.24e9),
        ("llama-3-405b", 405.9e9),
        # Narayanan et al. 2021, Table 1
        ("mt-nlg-530b", 529.6e9),
        ("gpt-1t", 1008.0e9),
    ],
)
def test_total_params_within_1pct_of_published(name, published):
    assert get_model(name).params_total == pytest.approx(published, rel=0.01)


@pytest.mark.parametrize(
    ("name", "published"),
    [
        # Hugging Face model cards / `sum(p.numel())` of the published checkpoints.
        ("gpt2", 124_439_808),
        ("gpt2-medium", 354_823_168),
        ("gpt2-large", 774_030_080),
        ("gpt2-xl", 1_557_611_200),
        ("llama-2-13b", 13_015_864_320),
        ("llama-2-70b", 68_976_648_192),
        ("mistral-7b", 7_241_732_096),
        ("mpt-7b", 6_649_286_656),
        ("llama-3-405b", 405_853_388_800),
        # OPT's position table has 2 extra rows (offset 2), not modelled: 10,240 fewer.
        ("opt-13b", 12_853_473_280),
    ],
)
def test_total_params_match_checkpoints(name, published):
    assert get_model(name).params_total == pytest.approx(published, rel=1e-6)


def test_mixtral_active_params():
    m = get_model("mixtral-8x7b")
    assert m.params_active == pytest.approx(12.9e9, rel=0.01)
    assert m.params_active < m.params_total


def test_llama2_7b_exact_count():
    # 32 blocks of (4·4096² attention + 3·4096·11008 SwiGLU + 2·4096 norms),
    # final norm, untied 32000×4096 input and output tables.
    per_layer = 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096
    assert get_model("llama-2-7b").params_total == 32 * per_layer + 4096 + 2 * 32000 * 4096


def test_gpt_formula_12lh2():
    # N = 12lh²(1 + 13/(12h) + (V+s)/(12lh)): MHA, 4h GELU, biases, LayerNorm.
    m = get_model("gpt3-175b")
    n_layers, h, v, s = m.layers, m.hidden, m.vocab, m.max_seq
    formula = 12 * n_layers * h**2 * (1 + 13 / (12 * h) + (v + s) / (12 * n_layers * h))
    assert m.params_total == pytest.approx(formula, rel=1e-6)


def test_kv_cache_per_token():
    # OPT-13B fp16: 2·40·5120·2 = 819,200 bytes, the "800 KB" of the vLLM paper (binary KB).
    assert get_model("opt-13b").kv_bytes_per_token(2) == pytest.approx(800 * KiB, rel=0.005)
    # Llama-3-70B, 8 KV heads of 128: 2·80·8·128·2 = 320 KiB, not the 2.5 MiB of full MHA.
    assert get_model("llama-3-70b").kv_bytes_per_token(2) == 320 * KiB


def test_flops_per_token_palm_convention():
    m = get_model("llama-2-7b")
    s = 2048
    n = m.params_matmul
    assert m.flops_per_token(s) == 2 * n + 4 * m.layers * m.hidden * s
    assert m.flops_per_token(s, training=True) == 6 * n + 12 * m.layers * m.hidden * s
    # matmul weights: the blocks' matrices and the output head; the input table is a lookup
    # and the 2·l + 1 RMSNorm gains are scaled, not multiplied
    h, f = m.hidden, m.ffn_hidden
    assert n == m.layers * (4 * h * h + 3 * h * f) + m.vocab * h
    assert n == m.params_total - m.vocab * h - (2 * m.layers + 1) * h


def test_matmul_weights_leave_out_biases_and_layernorm():
    # GPT-2: 12 blocks of 4h² attention and 8h² MLP; tied head V·h. Biases (4h attention,
    # 5h MLP per block), LayerNorm weights and biases (4h per block, 2h final) and the
    # 1024 learned positions are not matmul weights.
    m = get_model("gpt2")
    h = m.hidden
    assert m.params_matmul == 12 * 12 * h * h + m.vocab * h
    assert m.params_total - m.params_matmul == 12 * (9 * h + 4 * h) + 2 * h + 1024 * h


def test_training_memory_pieces():
    m = get_model("gpt2")
    mem = m.training_memory(micro_batch=4, seq_len=1024)
    assert mem.model_state_bytes == 16 * m.params_total
    sbh = 1024 * 4 * 768
    assert mem.activations_bytes == pytest.approx(12 * sbh * (34 + 5 * 12 * 1024 / 768))
    full = m.training_memory(4, 1024, recompute="full")
    assert full.activations_bytes == 12 * 2 * sbh


def test_custom_model_parsing():
    m = parse_model("custom:layers=32,hidden=4096,heads=32,ffn_hidden=11008,ffn_kind=swiglu")
    assert m.params_non_embedding == get_model("llama-2-7b").params_non_embedding
    assert m.head_dim == 128 and m.kv_heads == 32


@pytest.mark.parametrize(
    "text",
    [
        "custom:layers=2,hidden=100,heads=3",  # heads do not divide hidden
        "custom:layers=2,hidden=128",  # heads missing
        "custom:layers=2,hidden=128,heads=8,kv_heads=3",  # kv heads do not divide heads
        "custom:layers=2,hidden=128,heads=8,colour=red",
        "custom:layers=2.5,hidden=128,heads=8",
        "custom:layers=x,hidden=128,heads=8",
        "custom:layers=2,hidden=128,heads=8,ffn_kind=relu",
        "custom:layers",
    ],
)
def test_custom_model_errors(text):
    with pytest.raises(InvalidInput):
        parse_model(text)


def test_unknown_model_suggests():
    with pytest.raises(UnknownName, match="llama-2-7b"):
        get_model("llama2-7b")


def test_every_catalog_entry_has_a_source():
    for name in model_names():
        assert get_model(name).source, name


def test_config_validation_shows_arithmetic():
    with pytest.raises(InvalidInput, match=r"heads\(8\) % kv_heads\(3\)"):
        TransformerConfig(2, 64, 8, 3, 8, 256, "gelu", 100, True, 64)


# ---- layer kinds: mixture-of-experts layouts, latent and local attention ---------------

MLA_SMALL = (
    "custom:layers=6,hidden=256,heads=4,attention=mla,q_lora_rank=96,kv_lora_rank=64,"
    "qk_nope_head_dim=32,qk_rope_head_dim=16,v_head_dim=32,ffn_hidden=512,ffn_kind=swiglu,"
    "vocab=1000,experts=8,active_experts=2,moe_ffn_hidden=128,shared_experts=1,"
    "dense_layers=2,moe_every=2,router_bias=true"
)


def test_custom_mla_moe_counted_by_hand():
    m = parse_model(MLA_SMALL)
    # layers 0, 1 dense; of 2..5 those with (i + 1) even: 3, 5
    assert (m.moe_layers, m.dense_ffn_layers, m.head_dim, m.kv_heads) == (2, 4, 48, 4)
    attention = (256 * 96 + 96 + 96 * 4 * 48  # query through its rank-96 compression + norm
                 + 256 * (64 + 16) + 64 + 64 * 4 * (32 + 32)  # latent, rotary key, norm, up
                 + 4 * 32 * 256)  # output  # fmt: skip
    dense = attention + 3 * 256 * 512 + 2 * 256
    moe = attention + 9 * 3 * 256 * 128 + 8 * 256 + 8 + 2 * 256
    assert m.params_total == 4 * dense + 2 * moe + 256 + 2 * 1000 * 256
    assert m.params_active == m.params_total - 2 * 6 * 3 * 256 * 128
    # the latent and the rotary key per layer
    assert m.kv_bytes_per_token(2) == 6 * (64 + 16) * 2
    # training attention: scores over 4·48, values of 4·32, per key
    assert m.attention_flops_per_token(100) == 6 * 2 * (4 * 48 + 4 * 32) * 100
    # matmul weights: attention without norms, dense FFNs, 2 routed + 1 shared + router
    matmul = 6 * (attention - 96 - 64) + 4 * 3 * 256 * 512 + 2 * (3 * 3 * 256 * 128 + 256 * 8)
    assert m.params_matmul == matmul + 1000 * 256


def test_mla_decode_absorbed_and_not():
    m = parse_model(MLA_SMALL)
    c = 1000
    absorbed = 6 * (2 * 4 * (64 + 16) + 2 * 4 * 64) * (c + 1)
    # non-absorbed: every cached latent projected up again, then attention over all keys
    naive = 6 * (2 * 64 * 4 * (32 + 32) * c + (2 * 4 * 48 + 2 * 4 * 32) * (c + 1))
    assert m.decode_attention_flops(c, absorbed=True) == absorbed
    assert m.decode_attention_flops(c, absorbed=False) == naive
    # a prompt: each token's own up-projection is among its weights
    pairs = 6 * 10 * 11 / 2
    assert m.prefill_attention_flops(10) == pairs * (2 * 4 * 48 + 2 * 4 * 32)


def test_local_layers_bound_flops_and_cache():
    m = parse_model(
        "custom:layers=12,hidden=512,heads=8,kv_heads=2,sliding_window=256,local_global=5:1"
    )
    assert (m.local_layers, m.global_layers) == (10, 2)
    assert m.attention_flops_per_token(4096) == 4 * 512 * (2 * 4096 + 10 * 256)
    assert m.attention_flops_per_token(100) == 4 * 512 * 12 * 100
    assert m.kv_bytes(4096, 2) == (2 * 4096 + 10 * 256) * 2 * 2 * 64 * 2
    assert m.kv_bytes_per_token(2) == 12 * 2 * 2 * 64 * 2  # every layer, the first tokens
    # causal prompt of 300: a window keeps min(i, 256) keys for query i
    window = 256 * 257 / 2 + 44 * 256
    assert m.causal_attended(300) == 2 * 300 * 301 / 2 + 10 * window
    chunked = m.replace(chunked_attention=True)  # chunks of 256: 256 + the 44 of the next
    assert chunked.causal_attended(300) == 2 * 300 * 301 / 2 + 10 * (256 * 257 / 2 + 44 * 45 / 2)
    every = m.replace(local_global="")
    assert every.local_layers == 12
    assert m.replace(local_global="1:1").local_layers == 6
    dense = parse_model("custom:layers=12,hidden=512,heads=8,kv_heads=2")
    assert dense.params_total == m.params_total  # windows change no parameter


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("shared_experts=1", "need experts > 1"),
        ("experts=4,active_experts=1,dense_layers=4", "no MoE layer is left"),
        ("attention=mla,kv_lora_rank=64", "needs qk_nope_head_dim"),
        ("kv_lora_rank=64", "need attention=mla"),
        ("local_global=5:1", "needs a sliding_window"),
        ("sliding_window=64,local_global=five", "local_global must be L:G"),
        ("sliding_window=64,local_global=0:0", "local_global must be L:G"),
        ("experts=4,active_experts=1,expert_weight_bits=0", r"expert_weight_bits must be in"),
        ("attention=gqa", "attention must be one of mha, mla"),
        ("shared_experts=-1,experts=2", "shared_experts must be a whole number"),
        ("experts=6,active_experts=2,expert_groups=4", "expert_groups must divide"),
        (
            "experts=8,active_experts=6,expert_groups=4,expert_groups_per_token=2",
            "must hold the 6 active experts",
        ),
        ("expert_groups=2", "need experts > 1"),
    ],
)
def test_layout_refusals_name_the_key(spec, words):
    base = "custom:layers=4,hidden=256,heads=4,"
    with pytest.raises(InvalidInput, match=words):
        parse_model(base + spec)


def test_new_fields_keep_every_catalog_model():
    # every field defaults to the dense layout: nothing changes for models that set none
    m = get_model("mixtral-8x7b")
    assert (m.moe_layers, m.dense_ffn_layers, m.local_layers) == (32, 0, 0)
    assert m.params_layer == m.params_moe_layer and isinstance(m.params_layer, int)
    assert get_model("llama-3-8b").moe_layers == 0
    assert get_model("llama-3-8b").kv_bytes(1000, 2) == 1000 * get_model(
        "llama-3-8b"
    ).kv_bytes_per_token(2)


@pytest.mark.parametrize("name", model_names())
def test_planner_prices_the_same_flops_per_token(name):
    # the planner's per-block terms (means over blocks of two kinds) add up to the model's
    from ceiling.model.plan.costs import layer_forward_flops_per_token, shape_of

    m = get_model(name)
    planned = layer_forward_flops_per_token(shape_of(m), 8192) * m.layers
    assert planned + 2 * m.vocab * m.hidden == pytest.approx(m.flops_per_token(8192), rel=1e-12)


def test_custom_reads_fractional_bits_and_absent_sizes():
    m = parse_model(
        "custom:layers=2,hidden=64,heads=4,experts=4,active_experts=1,expert_weight_bits=4.25,"
        "sliding_window=none,local_global=,q_lora_rank=none"
    )
    assert (m.expert_weight_bits, m.sliding_window, m.q_lora_rank) == (4.25, None, None)
    matrices = 2 * 4 * 2 * 64 * 256  # GELU experts: up and down of 4·64
    assert m.weight_bytes(2) == (m.params_total - matrices) * 2 + matrices * 4.25 / 8
    with pytest.raises(InvalidInput, match="must be a whole number"):
        parse_model("custom:layers=2,hidden=64,heads=4,kv_lora_rank=1.5")
