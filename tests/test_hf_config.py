"""`hf:` model configs: each family's published config.json read into the shape model.

The configs below copy the published `config.json` values (Hugging Face model pages) that
the shape model reads; parameter counts are checked against the totals the model cards
publish, KV cache per token against 2 (K and V) · layers · KV heads · head dim · 2 bytes.
"""

import json

import pytest

from ceiling.errors import CeilingError, InvalidInput, MalformedFile
from ceiling.model.transformer import parse_model


def _llama_like(model_type, layers, hidden, heads, kv, ffn, vocab, ctx, **extra):
    return {
        "model_type": model_type,
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "intermediate_size": ffn,
        "vocab_size": vocab,
        "max_position_embeddings": ctx,
        "torch_dtype": "bfloat16",
        **extra,
    }


# name: (config.json, published total params, published active params or None,
#        relative tolerance of the published figure's rounding, KV bytes/token at 16 bits)
FAMILIES = {
    "Llama-2-7b": (
        _llama_like("llama", 32, 4096, 32, 32, 11008, 32000, 4096, tie_word_embeddings=False),
        6.74e9, None, 0.001, 2 * 32 * 32 * 128 * 2,
    ),
    "Llama-3.1-8B": (
        _llama_like("llama", 32, 4096, 32, 8, 14336, 128256, 131072, tie_word_embeddings=False,
                    rope_theta=500000.0, attention_bias=False, mlp_bias=False),
        8.03e9, None, 0.001, 131072,
    ),
    "Mistral-7B-v0.1": (
        _llama_like("mistral", 32, 4096, 32, 8, 14336, 32000, 32768, sliding_window=4096),
        7.24e9, None, 0.001, 131072,
    ),
    "Mixtral-8x7B-v0.1": (
        _llama_like("mixtral", 32, 4096, 32, 8, 14336, 32000, 32768, num_local_experts=8,
                    num_experts_per_tok=2, sliding_window=None),
        46.7e9, 12.9e9, 0.002, 131072,
    ),
    "Qwen2.5-7B": (
        _llama_like("qwen2", 28, 3584, 28, 4, 18944, 152064, 131072, tie_word_embeddings=False,
                    sliding_window=131072, use_sliding_window=False),
        7.61e9, None, 0.002, 2 * 28 * 4 * 128 * 2,
    ),
    "Qwen3-8B": (
        _llama_like("qwen3", 36, 4096, 32, 8, 12288, 151936, 40960, head_dim=128,
                    tie_word_embeddings=False, use_sliding_window=False, sliding_window=None),
        8.19e9, None, 0.001, 2 * 36 * 8 * 128 * 2,
    ),
    "Qwen3-30B-A3B": (
        _llama_like("qwen3_moe", 48, 2048, 32, 4, 6144, 151936, 40960, head_dim=128,
                    moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8,
                    decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=False),
        30.5e9, 3.3e9, 0.02, 2 * 48 * 4 * 128 * 2,
    ),
    "Qwen1.5-MoE-A2.7B": (
        _llama_like("qwen2_moe", 24, 2048, 16, 16, 5632, 151936, 8192,
                    moe_intermediate_size=1408, shared_expert_intermediate_size=5632,
                    num_experts=60, num_experts_per_tok=4, decoder_sparse_step=1,
                    mlp_only_layers=[], tie_word_embeddings=False, sliding_window=32768,
                    use_sliding_window=False, qkv_bias=True),
        14.3e9, 2.7e9, 0.005, 2 * 24 * 16 * 128 * 2,
    ),
    "gemma-7b": (
        _llama_like("gemma", 28, 3072, 16, 16, 24576, 256000, 8192, head_dim=256),
        8.54e9, None, 0.001, 2 * 28 * 16 * 256 * 2,
    ),
    "gemma-2-9b": (
        _llama_like("gemma2", 42, 3584, 16, 8, 14336, 256000, 8192, head_dim=256,
                    sliding_window=4096),
        9.24e9, None, 0.001, 2 * 42 * 8 * 256 * 2,
    ),
    "Phi-3-mini-4k": (
        _llama_like("phi3", 32, 3072, 32, 32, 8192, 32064, 4096, tie_word_embeddings=False,
                    sliding_window=2047),
        3.82e9, None, 0.002, 2 * 32 * 32 * 96 * 2,
    ),
    "gpt2": (
        {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_inner": None,
         "n_positions": 1024, "vocab_size": 50257, "resid_pdrop": 0.1},
        124.44e6, None, 0.001, 2 * 12 * 768 * 2,
    ),
    "gpt-neox-20b": (
        {"model_type": "gpt_neox", "num_hidden_layers": 44, "hidden_size": 6144,
         "num_attention_heads": 64, "intermediate_size": 24576, "vocab_size": 50432,
         "max_position_embeddings": 2048, "tie_word_embeddings": False},
        20.55e9, None, 0.001, 2 * 44 * 6144 * 2,
    ),
}  # fmt: skip

# Published config.json values (Hugging Face model pages) of the frontier families; keys a
# config leaves out take the `transformers` config class's defaults, as the library does.
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3",
    "num_hidden_layers": 61,
    "hidden_size": 7168,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "n_group": 8,
    "topk_group": 4,
    "topk_method": "noaux_tc",
    "moe_layer_freq": 1,
    "num_nextn_predict_layers": 1,
    "tie_word_embeddings": False,
}
DEEPSEEK_V2 = {
    **DEEPSEEK_V3,
    "model_type": "deepseek_v2",
    "num_hidden_layers": 60,
    "hidden_size": 5120,
    "intermediate_size": 12288,
    "moe_intermediate_size": 1536,
    "n_routed_experts": 160,
    "n_shared_experts": 2,
    "num_experts_per_tok": 6,
    "first_k_dense_replace": 1,
    "vocab_size": 102400,
    "topk_method": "group_limited_greedy",
    "n_group": 8,
    "topk_group": 3,
    "num_nextn_predict_layers": None,
}
DEEPSEEK_V2_LITE = {
    **DEEPSEEK_V2,
    "num_hidden_layers": 27,
    "hidden_size": 2048,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "intermediate_size": 10944,
    "moe_intermediate_size": 1408,
    "n_routed_experts": 64,
    "q_lora_rank": None,
    "topk_method": "greedy",
    "n_group": 1,
    "topk_group": 1,
}
KIMI_K2 = {
    **DEEPSEEK_V3,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "n_routed_experts": 384,
    "first_k_dense_replace": 1,
    "vocab_size": 163840,
    "max_position_embeddings": 131072,
    "n_group": 1,
    "topk_group": 1,
    "num_nextn_predict_layers": 0,
}
GPT_OSS_120B = {
    "model_type": "gpt_oss",
    "num_hidden_layers": 36,
    "num_local_experts": 128,
    "num_experts_per_tok": 4,
    "experts_per_token": 4,
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "head_dim": 64,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "sliding_window": 128,
    "vocab_size": 201088,
    "tie_word_embeddings": False,
    "max_position_embeddings": 131072,
    "attention_bias": True,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
    "quantization_config": {"quant_method": "mxfp4"},
}
GPT_OSS_20B = {
    **GPT_OSS_120B,
    "num_hidden_layers": 24,
    "num_local_experts": 32,
    "layer_types": ["sliding_attention", "full_attention"] * 12,
}


def _llama4(experts, step, context):
    return {
        "model_type": "llama4",
        "vision_config": {"hidden_size": 1408},
        "text_config": {
            "model_type": "llama4_text",
            "hidden_size": 5120,
            "intermediate_size": 8192,
            "intermediate_size_mlp": 16384,
            "num_hidden_layers": 48,
            "num_attention_heads": 40,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "vocab_size": 202048,
            "num_local_experts": experts,
            "num_experts_per_tok": 1,
            "interleave_moe_layer_step": step,
            "attention_chunk_size": 8192,
            "max_position_embeddings": context,
            "no_rope_layers": None,
        },
    }


def _gemma3(hidden, ffn, layers, heads, kv, head_dim, vocab=262208, window=1024):
    text = {
        "model_type": "gemma3_text",
        "hidden_size": hidden,
        "intermediate_size": ffn,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": head_dim,
        "vocab_size": vocab,
        "sliding_window": window,
    }
    if layers == 26:  # the 1B is a text model of its own, with 32k positions
        return {**text, "max_position_embeddings": 32768}
    return {"model_type": "gemma3", "text_config": text}


# name: (config.json, catalog name, published total, its tolerance, published active or
#        None, how the publisher counts "active", its tolerance, KV bytes/token at 16 bits)
# "active" conventions: "all" every parameter a token passes through, the input table
# whole (TransformerConfig.params_active); "no table" the same without the input embedding
# table, a lookup (DeepSeek, Moonshot and OpenAI count so). Tolerances: half the last
# digit the publisher gives (671B: ±0.5B), or the stated reason.
FRONTIER = {
    # 671B without the 14B multi-token-prediction module (the HF checkpoint's 685B has it)
    "DeepSeek-V3": (DEEPSEEK_V3, "deepseek-v3", 671e9, 0.5e9, 37e9, "no table", 0.5e9,
                    61 * (512 + 64) * 2),
    "DeepSeek-V2": (DEEPSEEK_V2, "deepseek-v2", 236e9, 0.5e9, 21e9, "no table", 0.5e9,
                    60 * (512 + 64) * 2),
    # 2.4B activated: ours 2.451B without the table, just above the rounding's 2.45B
    "DeepSeek-V2-Lite": (DEEPSEEK_V2_LITE, "deepseek-v2-lite", 15.7e9, 0.05e9, 2.4e9,
                         "no table", 0.06e9, 27 * (512 + 64) * 2),
    # published "1T" total and "32B" activated, rounded to the unit
    "Kimi-K2": (KIMI_K2, "kimi-k2", 1e12, 0.05e12, 32e9, "no table", 0.5e9,
                61 * (512 + 64) * 2),
    # model card Table 1 to 10M: exact to its rounding
    "gpt-oss-120b": (GPT_OSS_120B, "gpt-oss-120b", 116.83e9, 0.005e9, 5.13e9, "no table",
                     0.005e9, 2 * 36 * 8 * 64 * 2),
    "gpt-oss-20b": (GPT_OSS_20B, "gpt-oss-20b", 20.91e9, 0.005e9, 3.61e9, "no table",
                    0.005e9, 2 * 24 * 8 * 64 * 2),
    # the published 109B counts the vision encoder (about 0.9B), not counted here
    "Llama-4-Scout": (_llama4(16, 1, 10485760), "llama-4-scout", 109e9, 1.5e9, 17e9, "all",
                      0.5e9, 2 * 48 * 8 * 128 * 2),
    "Llama-4-Maverick": (_llama4(128, 2, 1048576), "llama-4-maverick", 400e9, 1.5e9, 17e9,
                         "all", 0.5e9, 2 * 48 * 8 * 128 * 2),
}  # fmt: skip

# Gemma 3 Technical Report, Table 1: non-embedding parameters of the language model, in
# millions (the vision encoder apart).
GEMMA3 = {
    "gemma-3-1b": (_gemma3(1152, 6912, 26, 4, 1, 256, 262144, 512), 698e6,
                   2 * 26 * 1 * 256 * 2),
    "gemma-3-4b": (_gemma3(2560, 10240, 34, 8, 4, 256), 3209e6, 2 * 34 * 4 * 256 * 2),
    "gemma-3-12b": (_gemma3(3840, 15360, 48, 16, 8, 256), 10759e6, 2 * 48 * 8 * 256 * 2),
    "gemma-3-27b": (_gemma3(5376, 21504, 62, 32, 16, 128), 25600e6, 2 * 62 * 16 * 128 * 2),
}  # fmt: skip


def write_config(folder, raw):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(raw), encoding="utf-8")
    return folder


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_published_parameter_counts_and_kv(tmp_path, name):
    raw, total, active, tol, kv = FAMILIES[name]
    cfg = parse_model(f"hf:{write_config(tmp_path / name, raw)}")
    assert cfg.params_total == pytest.approx(total, rel=tol)
    assert cfg.params_active == pytest.approx(active or total, rel=tol)
    assert cfg.kv_bytes_per_token(2) == kv
    assert cfg.name == f"hf:{name}"


def test_exact_counts_where_the_architecture_is_fully_modelled(tmp_path):
    # Checkpoint tensor sizes summed: nothing the shape model leaves out.
    exact = {"Llama-3.1-8B": 8_030_261_248, "gpt-neox-20b": 20_554_567_680,
             "Phi-3-mini-4k": 3_821_079_552, "gpt2": 124_439_808,
             "Mixtral-8x7B-v0.1": 46_702_792_704}  # fmt: skip
    for name, params in exact.items():
        cfg = parse_model(f"hf:{write_config(tmp_path / name, FAMILIES[name][0])}")
        assert cfg.params_total == params, name


def test_qwen2_moe_counts_exactly_with_its_shared_expert(tmp_path):
    # transformers' Qwen2MoeForCausalLM built on the meta device from the published config:
    # every parameter summed, and those a token passes through (4 of 60 routed experts)
    name = "Qwen1.5-MoE-A2.7B"
    cfg = parse_model(f"hf:{write_config(tmp_path / name, FAMILIES[name][0])}")
    assert (cfg.params_total, cfg.params_active) == (14_315_784_192, 2_689_173_504)
    assert (cfg.shared_experts, cfg.shared_ffn_hidden, cfg.shared_expert_gate) == (1, 5632, True)
    assert cfg.qkv_bias and cfg.moe_layers == 24


def test_qwen2_moe_shared_expert_of_any_width(tmp_path):
    raw = {**FAMILIES["Qwen1.5-MoE-A2.7B"][0], "shared_expert_intermediate_size": 5000}
    cfg = parse_model(f"hf:{write_config(tmp_path / 'odd', raw)}")
    # 24 layers × 3 matrices × h × (5632 − 5000) fewer
    assert cfg.params_total == 14_315_784_192 - 24 * 3 * 2048 * 632


def test_qwen_moe_dense_first_layers_and_sparse_step(tmp_path):
    base = FAMILIES["Qwen1.5-MoE-A2.7B"][0]
    raw = {**base, "mlp_only_layers": [0, 1], "decoder_sparse_step": 2}
    cfg = parse_model(f"hf:{write_config(tmp_path / 'q', raw)}")
    # layers 0, 1 dense; of the rest the odd ones (i + 1 even) are MoE: 3, 5, ..., 23
    assert (cfg.dense_layers, cfg.moe_every, cfg.moe_layers) == (2, 2, 11)
    assert (cfg.ffn_hidden, cfg.expert_ffn_hidden) == (5632, 1408)
    scattered = {**base, "mlp_only_layers": [3]}
    with pytest.raises(InvalidInput, match="scattered"):
        parse_model(f"hf:{write_config(tmp_path / 's', scattered)}")


def test_file_path_and_notes(tmp_path):
    folder = write_config(tmp_path / "m", FAMILIES["Mistral-7B-v0.1"][0])
    cfg = parse_model(f"hf:{folder / 'config.json'}")
    assert cfg.sliding_window == 4096 and cfg.local_layers == 32  # every layer slides
    assert cfg.experts == 1 and cfg.ffn_kind == "swiglu" and not cfg.tied_embeddings
    gpt2 = parse_model(f"hf:{write_config(tmp_path / 'g', FAMILIES['gpt2'][0])}")
    assert gpt2.tied_embeddings and gpt2.learned_positions and gpt2.trained_dropout


@pytest.mark.parametrize(
    ("raw", "kind", "words"),
    [
        ({"model_type": "t5"}, InvalidInput, "model_type 't5' is not one of"),
        ({"model_type": "llama", "hidden_size": 4096}, MalformedFile, r"json: no 'num_attention"),
        (
            _llama_like("llama", 2, 64, 3, 3, 128, 100, 64),
            MalformedFile,
            "heads must divide hidden",
        ),
        ([1, 2], MalformedFile, "JSON object"),
        ({**FAMILIES["gpt2"][0], "resid_pdrop": "lots"}, MalformedFile, "must be numbers"),
    ],
)
def test_bad_configs_one_line(tmp_path, raw, kind, words):
    write_config(tmp_path, raw)
    with pytest.raises(kind, match=words):
        parse_model(f"hf:{tmp_path}")


def test_missing_paths_and_hub_ids(tmp_path, monkeypatch):
    with pytest.raises(CeilingError, match="no such file or folder"):
        parse_model(f"hf:{tmp_path / 'nowhere'}")
    with pytest.raises(CeilingError, match=r"holds no config\.json"):
        parse_model(f"hf:{tmp_path}")
    (tmp_path / "config.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(MalformedFile, match="not valid JSON"):
        parse_model(f"hf:{tmp_path}")
    import sys

    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # as if not installed
    with pytest.raises(CeilingError, match=r"pass the path to a config\.json") as err:
        parse_model("hf:meta-llama/Llama-3.1-8B")
    assert "local Hugging Face cache" in str(err.value)


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {name: write_config(root / name, raw) for name, (raw, *_) in FAMILIES.items()}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_decode_and_plan_read_every_family(cli, family_dirs, name):
    folder = family_dirs[name]
    code, out, err = cli("decode", f"hf:{folder}", "--spec", "mi300x", "--batch", "1", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["model"] == f"hf:{name}"
    assert data["kv_bytes_per_token"] == FAMILIES[name][4]
    code, out, err = cli("plan", f"hf:{folder}", "--spec", "h100-sxm", "-n", "64", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["params_total"] == parse_model(f"hf:{folder}").params_total
    assert data["plans"]


def test_models_shows_hf_and_catalog_names(cli, family_dirs):
    code, out, err = cli("models", f"hf:{family_dirs['Qwen3-30B-A3B']}", "mixtral-8x7b")
    assert code == 0, err
    assert "hf:Qwen3-30B-A3B" in out and "30.53" in out and "3.35" in out
    assert "mixtral-8x7b" in out and "gpt2-xl" not in out


def test_profile_hf_without_transformers_is_one_line(cli, family_dirs, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "transformers", None)
    code, _, err = cli("profile", f"hf:{family_dirs['gpt2']}", "--device", "meta")
    assert code == 2
    assert err.strip().count("\n") == 0 and "pip install transformers" in err


def test_profile_hf_builds_with_transformers(cli, tmp_path):
    pytest.importorskip("transformers")
    small = {**FAMILIES["gpt2"][0], "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 512,
             "n_positions": 64, "bos_token_id": 0, "eos_token_id": 0}  # fmt: skip
    folder = write_config(tmp_path / "gpt2-small", small)
    code, out, err = cli(
        "profile", f"hf:{folder}", "--batch", "2", "--seq", "32", "--device", "meta",
        "--spec", "h100-sxm", "--json",
    )  # fmt: skip
    assert code == 0, err
    data = json.loads(out)
    # the ops counted in the transformers model add up to the shape model's FLOPs
    assert data["model_flops_per_step"] == pytest.approx(data["analytic_flops_per_step"])
    assert data["model_flops_per_step"] > 0 and data["tokens_per_step"] == 64


def test_profile_hf_deepseek_counts_as_the_model(cli, tmp_path):
    # a small DeepSeek-V3 (latent attention with query compression, a dense first layer, a
    # shared and routed experts) built by transformers on the meta device: the ops torch
    # counts add up to the shape model's FLOPs exactly
    pytest.importorskip("transformers.models.deepseek_v3")
    small = {**DEEPSEEK_V3, "num_hidden_layers": 3, "hidden_size": 256,
             "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 512,
             "moe_intermediate_size": 128, "n_routed_experts": 8, "num_experts_per_tok": 2,
             "first_k_dense_replace": 1, "kv_lora_rank": 64, "q_lora_rank": 96,
             "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
             "vocab_size": 1000, "max_position_embeddings": 512, "n_group": 1,
             "topk_group": 1, "bos_token_id": 0, "eos_token_id": 0}  # fmt: skip
    folder = write_config(tmp_path / "ds-small", small)
    code, out, err = cli(
        "profile", f"hf:{folder}", "--batch", "2", "--seq", "32", "--device", "meta",
        "--spec", "h100-sxm", "--dtype", "bf16", "--json",
    )  # fmt: skip
    assert code == 0, err
    data = json.loads(out)
    assert data["model_flops_per_step"] == pytest.approx(data["analytic_flops_per_step"])
    assert data["unknown_ops"] == []


def test_hub_id_from_the_local_cache_only(tmp_path, monkeypatch):
    constants = pytest.importorskip("huggingface_hub.constants")
    repo = tmp_path / "models--acme--tiny-llama"
    write_config(repo / "snapshots" / "abc123", FAMILIES["Llama-3.1-8B"][0])
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    cfg = parse_model("hf:acme/tiny-llama")
    assert cfg.name == "hf:acme/tiny-llama" and cfg.params_total == 8_030_261_248
    with pytest.raises(CeilingError, match="not in the local Hugging Face cache"):
        parse_model("hf:acme/not-downloaded")


def _active(cfg, convention):
    table = cfg.vocab * cfg.hidden
    return cfg.params_active - (table if convention == "no table" else 0)


@pytest.mark.parametrize("name", sorted(FRONTIER))
def test_frontier_families_against_published_counts(tmp_path, name):
    raw, catalog, total, tol, active, convention, active_tol, kv = FRONTIER[name]
    cfg = parse_model(f"hf:{write_config(tmp_path / name, raw)}")
    assert abs(cfg.params_total - total) <= tol
    assert abs(_active(cfg, convention) - active) <= active_tol
    assert cfg.kv_bytes_per_token(2) == kv
    # the catalog entry is the same model
    assert cfg.replace(name=catalog) == parse_model(catalog)


@pytest.mark.parametrize("name", sorted(GEMMA3))
def test_gemma3_against_the_technical_report(tmp_path, name):
    raw, non_embedding, kv = GEMMA3[name]
    cfg = parse_model(f"hf:{write_config(tmp_path / name, raw)}")
    assert cfg.params_non_embedding == pytest.approx(non_embedding, abs=0.5e6)
    assert cfg.kv_bytes_per_token(2) == kv
    assert cfg.local_pattern == (5, 1) and cfg.tied_embeddings and cfg.qk_norm
    assert cfg.replace(name=name) == parse_model(name)
    if "text_config" in raw:
        assert "vision encoder (SigLIP) and its projector not counted" in cfg.source
        text_only = parse_model(f"hf:{write_config(tmp_path / 't', raw['text_config'])}")
        assert text_only.params_total == cfg.params_total


def test_deepseek_v3_exact_layout(tmp_path):
    cfg = parse_model(f"hf:{write_config(tmp_path / 'ds', DEEPSEEK_V3)}")
    assert (cfg.attention, cfg.dense_layers, cfg.moe_layers, cfg.shared_experts) == (
        "mla", 3, 58, 1)  # fmt: skip
    # by hand, per layer: q 7168·1536 + 1536 + 1536·128·192; kv 7168·576 + 512 + 512·128·256;
    # o 128·128·7168; two norms of 7168
    attention = (7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512
                 + 512 * 128 * 256 + 128 * 128 * 7168)  # fmt: skip
    ffn = 3 * 7168 * 2048
    moe = attention + 257 * ffn + 256 * 7168 + 256 + 2 * 7168  # routed, shared, router, bias
    dense = attention + 3 * 7168 * 18432 + 2 * 7168
    assert cfg.params_total == 3 * dense + 58 * moe + 7168 + 2 * 129280 * 7168
    assert cfg.params_total == 671_026_419_200
    assert "multi-token-prediction module (1 layer) not counted" in cfg.source
    # node-limited routing: 8 of 256 experts from at most 4 of 8 groups
    assert (cfg.expert_groups, cfg.expert_groups_per_token) == (8, 4)


def test_gpt_oss_mxfp4_checkpoint_size_and_windows(tmp_path):
    cfg = parse_model(f"hf:{write_config(tmp_path / 'oss', GPT_OSS_120B)}")
    assert cfg.params_total == 116_829_156_672
    # model card Table 1: the checkpoint is 60.8 GiB (MXFP4 experts, the rest bf16)
    assert cfg.weight_bytes(2) / 2**30 == pytest.approx(60.8, abs=0.05)
    assert cfg.weight_bytes(0.5) == cfg.params_total * 0.5  # int4 is narrower than MXFP4
    assert (cfg.local_layers, cfg.sliding_window) == (18, 128)
    # 18 layers hold at most 128 tokens, 18 the whole context
    assert cfg.kv_bytes(4096, 2) == (18 * 4096 + 18 * 128) * 2 * 8 * 64 * 2
    small = parse_model(f"hf:{write_config(tmp_path / 'oss20', GPT_OSS_20B)}")
    assert small.weight_bytes(2) / 2**30 == pytest.approx(12.8, abs=0.05)


def test_llama4_interleaved_experts_and_chunks(tmp_path):
    cfg = parse_model(f"hf:{write_config(tmp_path / 'mav', FRONTIER['Llama-4-Maverick'][0])}")
    assert (cfg.moe_layers, cfg.dense_ffn_layers, cfg.local_layers) == (24, 24, 36)
    assert cfg.chunked_attention and cfg.sliding_window == 8192
    attention = 2 * 5120 * 5120 + 2 * 5120 * 1024
    dense = attention + 3 * 5120 * 16384 + 2 * 5120
    moe = attention + 129 * 3 * 5120 * 8192 + 128 * 5120 + 2 * 5120
    assert cfg.params_total == 24 * dense + 24 * moe + 5120 + 2 * 202048 * 5120
    text = parse_model(
        f"hf:{write_config(tmp_path / 't', FRONTIER['Llama-4-Maverick'][0]['text_config'])}"
    )
    assert text.params_total == cfg.params_total
    odd = {**FRONTIER["Llama-4-Maverick"][0]["text_config"], "moe_layers": [0, 5]}
    with pytest.raises(InvalidInput, match="not modelled"):
        parse_model(f"hf:{write_config(tmp_path / 'odd', odd)}")


def test_layer_types_must_repeat(tmp_path):
    raw = {**GPT_OSS_20B, "layer_types": ["full_attention", "sliding_attention"] * 12}
    with pytest.raises(InvalidInput, match="not a repeated run"):
        parse_model(f"hf:{write_config(tmp_path / 'x', raw)}")
    wrong = {**GPT_OSS_20B, "layer_types": ["sliding_attention"] * 3}
    with pytest.raises(MalformedFile, match="one kind for each of the 24 layers"):
        parse_model(f"hf:{write_config(tmp_path / 'y', wrong)}")


def test_frontier_decode_and_plan_from_the_command_line(cli, tmp_path):
    folder = write_config(tmp_path / "ds", DEEPSEEK_V3)
    layout = ["--tp", "8", "--weights", "fp8", "--context", "4096", "--batch", "1"]
    code, out, err = cli("decode", f"hf:{folder}", "--spec", "h200", *layout, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["kv_bytes_per_token"] == 61 * 576 * 2
    assert data["kv_bytes_per_token_per_device"] == 61 * 576 * 2  # the latent, whole
    assert data["mla_attention"] == "absorbed"
    code, out, err = cli("plan", f"hf:{folder}", "--spec", "h100-sxm", "-n", "256", "--json")
    assert code == 0, err
    assert json.loads(out)["params_total"] == 671_026_419_200
    folder = write_config(tmp_path / "g3", GEMMA3["gemma-3-27b"][0])
    code, out, err = cli("decode", f"hf:{folder}", "--spec", "h100-sxm", "--context", "32767",
                         "--batch", "1", "--json")  # fmt: skip
    assert code == 0, err
    # 10 global layers hold the whole context, 52 local ones their window of 1024
    assert json.loads(out)["kv_bytes_per_sequence"] == (10 * 32768 + 52 * 1024) * 2 * 16 * 128 * 2
    code, out, err = cli("models", "deepseek-v3", "gpt-oss-120b", "llama-4-scout")
    assert code == 0, err
    assert "671.03" in out and "128/mla" in out and "18432/2048" in out and "10.5M" in out


QWEN3_MOE = dict(decoder_sparse_step=1, mlp_only_layers=[], num_experts=128, num_experts_per_tok=8)
# catalog name: (config.json, parameters of transformers' Qwen3(Moe)ForCausalLM built on the
# meta device from that config, every tensor summed)
QWEN3 = {
    "qwen3-0.6b": (_llama_like("qwen3", 28, 1024, 16, 8, 3072, 151936, 40960, head_dim=128,
                               tie_word_embeddings=True), 596_049_920),
    "qwen3-1.7b": (_llama_like("qwen3", 28, 2048, 16, 8, 6144, 151936, 40960, head_dim=128,
                               tie_word_embeddings=True), 1_720_574_976),
    "qwen3-4b": (_llama_like("qwen3", 36, 2560, 32, 8, 9728, 151936, 40960, head_dim=128,
                             tie_word_embeddings=True), 4_022_468_096),
    "qwen3-8b": (FAMILIES["Qwen3-8B"][0], 8_190_735_360),
    "qwen3-14b": (_llama_like("qwen3", 40, 5120, 40, 8, 17408, 151936, 40960, head_dim=128,
                              tie_word_embeddings=False), 14_768_307_200),
    "qwen3-32b": (_llama_like("qwen3", 64, 5120, 64, 8, 25600, 151936, 40960, head_dim=128,
                              tie_word_embeddings=False), 32_762_123_264),
    "qwen3-30b-a3b": (FAMILIES["Qwen3-30B-A3B"][0], 30_532_122_624),
    "qwen3-235b-a22b": (_llama_like("qwen3_moe", 94, 4096, 64, 4, 12288, 151936, 40960,
                                    head_dim=128, moe_intermediate_size=1536,
                                    tie_word_embeddings=False, **QWEN3_MOE), 235_093_634_560),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(QWEN3))
def test_qwen3_catalog_entries_are_their_published_configs(tmp_path, name):
    import dataclasses

    from ceiling.model.transformer import get_model

    raw, params = QWEN3[name]
    read = parse_model(f"hf:{write_config(tmp_path / name, raw)}")
    entry = get_model(name)
    assert entry.params_total == read.params_total == params
    assert entry.params_active == read.params_active
    assert (
        entry.kv_bytes_per_token(2)
        == 2 * raw["num_hidden_layers"] * raw["num_key_value_heads"] * 128 * 2
    )
    same = ("name", "source")
    for field in dataclasses.fields(entry):
        if field.name not in same:
            assert getattr(entry, field.name) == getattr(read, field.name), field.name


def test_qwen3_moe_active_parameters_as_published():
    # Qwen3 technical report, Table 2: 3.3B and 22B activated
    from ceiling.model.transformer import get_model

    assert get_model("qwen3-30b-a3b").params_active == pytest.approx(3.3e9, rel=0.02)
    assert get_model("qwen3-235b-a22b").params_active == pytest.approx(22e9, rel=0.01)
