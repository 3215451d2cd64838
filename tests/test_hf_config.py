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
    "qk_rope_head_dim": 64,
    "vocab_size": 129280,
}


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
    assert "shared expert (5632) counted as 4 always-active experts of 1408" in cfg.source


def test_qwen2_moe_shared_expert_of_another_width_is_refused(tmp_path):
    raw = {**FAMILIES["Qwen1.5-MoE-A2.7B"][0], "shared_expert_intermediate_size": 5000}
    with pytest.raises(InvalidInput, match="shared expert"):
        parse_model(f"hf:{write_config(tmp_path / 'odd', raw)}")


def test_file_path_and_notes(tmp_path):
    folder = write_config(tmp_path / "m", FAMILIES["Mistral-7B-v0.1"][0])
    cfg = parse_model(f"hf:{folder / 'config.json'}")
    assert "sliding-window attention (4096) not modelled" in cfg.source
    assert cfg.experts == 1 and cfg.ffn_kind == "swiglu" and not cfg.tied_embeddings
    gpt2 = parse_model(f"hf:{write_config(tmp_path / 'g', FAMILIES['gpt2'][0])}")
    assert gpt2.tied_embeddings and gpt2.learned_positions and gpt2.trained_dropout


def test_deepseek_refused_naming_what_is_missing(tmp_path):
    folder = write_config(tmp_path / "ds", DEEPSEEK_V3)
    with pytest.raises(InvalidInput) as err:
        parse_model(f"hf:{folder}")
    msg = str(err.value)
    assert "multi-head latent attention (kv_lora_rank=512)" in msg
    assert "shared experts" in msg and "first_k_dense_replace=3" in msg


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


def test_deepseek_cli_refuses_in_one_line(cli, tmp_path):
    folder = write_config(tmp_path / "ds", DEEPSEEK_V3)
    for command in (["decode", f"hf:{folder}", "--spec", "h100-sxm"],
                    ["plan", f"hf:{folder}", "--spec", "h100-sxm", "-n", "8"],
                    ["models", f"hf:{folder}"]):  # fmt: skip
        code, out, err = cli(*command)
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and "multi-head latent attention" in err


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
