"""Hugging Face `config.json` contents -> `TransformerConfig`, one mapping per model family.

Pure: takes the parsed JSON dict (reading the file is `ceiling.hf_files`). Each family's
defaults are its `transformers` configuration class's defaults, used when a key is absent.
What a family has that the shape model does not moves parameter counts by well under 0.1 %
or only the KV cache of long contexts; the config's `source` says which. Layouts the
formulas would get wrong (an irregular pattern of local layers, dense layers scattered among
expert layers) are refused with the reason instead of counted.
"""

from __future__ import annotations

from collections.abc import Callable

from ceiling.errors import InvalidInput, MalformedFile
from ceiling.model.transformer_config import TransformerConfig, from_dict

Raw = dict


def _get(raw: Raw, key: str, default=None, *, required: bool = False):
    value = raw.get(key)
    if value is None:
        if required:
            raise MalformedFile(f"no {key!r}")
        return default
    return value


def _int(raw: Raw, key: str, default: int | None = None) -> int:
    value = _get(raw, key, default, required=default is None)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MalformedFile(f"{key} must be a positive integer, got {value!r}")
    return value


def _dropout(raw: Raw, *keys: str) -> bool:
    """Whether any of the dropout probabilities `keys` is above 0."""
    try:
        return any(float(raw.get(k) or 0.0) > 0.0 for k in keys)
    except (TypeError, ValueError):
        raise MalformedFile(f"dropout probabilities {', '.join(keys)} must be numbers") from None


def _size(raw: Raw, key: str, default):
    """An optional size: the default when the key is absent, None when it is null."""
    if key not in raw:
        return default
    value = raw[key]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MalformedFile(f"{key} must be a positive integer or null, got {value!r}")
    return value


LOCAL_KINDS = ("sliding_attention", "chunked_attention")


def _pattern(types, layers: int) -> str | None:
    """`local_global` of a `layer_types` list: "" every layer local, "L:G" a repeated run of
    L local then G global layers, None every layer global."""
    if not isinstance(types, list) or len(types) != layers:
        raise MalformedFile(f"layer_types must list one kind for each of the {layers} layers")
    local = [t in LOCAL_KINDS for t in types]
    if all(local):
        return ""
    if not any(local):
        return None
    head = local.index(False)
    period = head + next((i for i, x in enumerate(local[head:]) if x), len(local) - head)
    if head and all(x == local[i % period] for i, x in enumerate(local)):
        return f"{head}:{period - head}"
    raise InvalidInput(
        f"layer_types {types[:8]}... is not a repeated run of local then global layers: "
        "not modelled"
    )


def _window(raw: Raw, out: dict, layout: str | None, window_key: str = "sliding_window"):
    """Local attention: the window and how local layers are laid out (`layer_types` when
    the config lists them, else `layout`)."""
    window = _size(raw, window_key, None)
    if window is None:
        return
    pattern = layout
    if raw.get("layer_types") is not None:
        pattern = _pattern(raw["layer_types"], out["layers"])
    if pattern is None:
        return
    out["sliding_window"] = window
    if pattern:
        out["local_global"] = pattern


def _gated(raw: Raw, *, tied_default: bool, notes: list[str], defaults: Raw | None = None) -> dict:
    """The Llama layout most families share: RMSNorm, gated FFN (gate, up, down), RoPE.
    `defaults`: the family's values of keys a config may leave out."""
    raw = {**(defaults or {}), **{k: v for k, v in raw.items() if v is not None}}
    heads = _int(raw, "num_attention_heads")
    out = {
        "layers": _int(raw, "num_hidden_layers"),
        "hidden": _int(raw, "hidden_size"),
        "heads": heads,
        "kv_heads": _int(raw, "num_key_value_heads", heads),
        "ffn_hidden": _int(raw, "intermediate_size"),
        "ffn_kind": "swiglu",
        "vocab": _int(raw, "vocab_size"),
        "tied_embeddings": bool(_get(raw, "tie_word_embeddings", tied_default)),
        "max_seq": _int(raw, "max_position_embeddings", 4096),
        "norm": "rmsnorm",
        "trained_dropout": _dropout(raw, "attention_dropout", "hidden_dropout"),
    }
    if raw.get("head_dim") is not None:  # Gemma, Qwen3: a·d differs from h
        out["head_dim"] = _int(raw, "head_dim")
    return out


def _untouched_window(raw: Raw, notes: list[str]) -> None:
    window = raw.get("sliding_window")
    if window and raw.get("use_sliding_window", True):
        notes.append(
            f"sliding-window attention ({window}) on only some layers (max_window_layers) not "
            "modelled: KV cache counted over the full context"
        )


def _biases_note(raw: Raw, notes: list[str]) -> None:
    if raw.get("attention_bias") or raw.get("mlp_bias"):
        notes.append("linear biases not counted")


# Each gated family: its tie_word_embeddings default (the `transformers` config class's),
# what the shape model leaves out, the fields it sets, and how its local layers are laid
# out ("" all local when a window is given, "1:1" alternating; None: the window is not
# read here, see `_untouched_window`).
GATED_FAMILIES: dict[str, tuple[bool, str, dict, str | None]] = {
    "llama": (False, "", {}, None),
    "mistral": (False, "", {}, ""),
    "phi3": (False, "", {}, ""),
    "qwen2": (False, "", {"qkv_bias": True}, None),
    "qwen3": (False, "", {"qk_norm": True}, None),
    "gemma": (True, "gated GELU FFN (GeGLU) counted as three matrices like SwiGLU", {}, None),
    # Gemma 2: even layers slide over the window, odd ones attend globally (its
    # configuration's layer_types); four norms per block.
    "gemma2": (True, "gated GELU FFN (GeGLU)", {"norms_per_layer": 4}, "1:1"),
}


def _gated_family(raw: Raw, notes: list[str]) -> dict:
    tied, note, fields, layout = GATED_FAMILIES[raw["model_type"]]
    if note:
        notes.append(note)
    _biases_note(raw, notes)
    out = {**_gated(raw, tied_default=tied, notes=notes), **fields}
    if layout is None:
        _untouched_window(raw, notes)
    else:
        _window(raw, out, layout)
    return out


def _mixtral(raw: Raw, notes: list[str]) -> dict:
    _biases_note(raw, notes)
    out = _gated(raw, tied_default=False, notes=notes)
    _window(raw, out, "")
    out["experts"] = _int(raw, "num_local_experts", 8)
    out["active_experts"] = _int(raw, "num_experts_per_tok", 2)
    return out


def _sparse_layout(raw: Raw, family: str, out: dict, expert_width: int) -> None:
    """Qwen MoE layers: layer i is sparse when (i + 1) % decoder_sparse_step == 0 and i is not
    in mlp_only_layers; dense layers keep intermediate_size. mlp_only_layers must be the
    first k layers (DeepSeek's layout) to be modelled."""
    dense = raw.get("mlp_only_layers") or []
    step = raw.get("decoder_sparse_step") or 1
    if not isinstance(step, int) or isinstance(step, bool) or step < 1:
        raise MalformedFile(f"decoder_sparse_step must be a positive integer, got {step!r}")
    if sorted(dense) != list(range(len(dense))):
        raise InvalidInput(
            f"{family} with dense layers scattered among the expert layers (mlp_only_layers="
            f"{dense}) is not modelled: only the first k layers may be dense"
        )
    if dense or step != 1:
        out["moe_ffn_hidden"] = expert_width
        out["dense_layers"] = len(dense)
        out["moe_every"] = step
    else:  # every layer alike: ffn_hidden is the expert's, as for Mixtral
        out["ffn_hidden"] = expert_width


def _qwen3_moe(raw: Raw, notes: list[str]) -> dict:
    out = _gated(raw, tied_default=False, notes=notes)
    _untouched_window(raw, notes)
    out["qk_norm"] = True
    out["experts"] = _int(raw, "num_experts")
    out["active_experts"] = _int(raw, "num_experts_per_tok")
    _sparse_layout(raw, "Qwen3-MoE", out, _int(raw, "moe_intermediate_size"))
    return out


def _qwen2_moe(raw: Raw, notes: list[str]) -> dict:
    """Qwen1.5/Qwen2-MoE: routed experts plus one shared expert every token passes through,
    behind a sigmoid gate (one column of h weights); Q, K and V carry biases."""
    out = _gated(raw, tied_default=False, notes=notes)
    _untouched_window(raw, notes)
    out["qkv_bias"] = True
    out["experts"] = _int(raw, "num_experts", 60)
    out["active_experts"] = _int(raw, "num_experts_per_tok", 4)
    shared = _size(raw, "shared_expert_intermediate_size", 5632)
    if shared:
        out.update(shared_experts=1, shared_ffn_hidden=shared, shared_expert_gate=True)
    _sparse_layout(raw, "Qwen2-MoE", out, _int(raw, "moe_intermediate_size", 1408))
    return out


def _gpt2(raw: Raw, notes: list[str]) -> dict:
    hidden = _int(raw, "n_embd", 768)
    return {
        "layers": _int(raw, "n_layer", 12),
        "hidden": hidden,
        "heads": _int(raw, "n_head", 12),
        "ffn_hidden": _int(raw, "n_inner", 4 * hidden),
        "ffn_kind": "gelu",
        "vocab": _int(raw, "vocab_size", 50257),
        "tied_embeddings": bool(_get(raw, "tie_word_embeddings", True)),
        "max_seq": _int(raw, "n_positions", 1024),
        "norm": "layernorm",
        "bias": True,
        "learned_positions": True,
        "trained_dropout": _dropout(raw, "resid_pdrop", "attn_pdrop", "embd_pdrop"),
    }


def _gpt_neox(raw: Raw, notes: list[str]) -> dict:
    hidden = _int(raw, "hidden_size")
    return {
        "layers": _int(raw, "num_hidden_layers"),
        "hidden": hidden,
        "heads": _int(raw, "num_attention_heads"),
        "ffn_hidden": _int(raw, "intermediate_size", 4 * hidden),
        "ffn_kind": "gelu",
        "vocab": _int(raw, "vocab_size"),
        "tied_embeddings": bool(_get(raw, "tie_word_embeddings", False)),
        "max_seq": _int(raw, "max_position_embeddings", 2048),
        "norm": "layernorm",
        "bias": bool(_get(raw, "attention_bias", True)),
        "trained_dropout": _dropout(raw, "attention_dropout", "hidden_dropout"),
    }


# DeepseekV2Config's and DeepseekV3Config's defaults (transformers) for the keys a
# published config may leave out; Kimi-K2 publishes a DeepSeek-V3 config of its own sizes.
DEEPSEEK_DEFAULTS = {
    "deepseek_v2": {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                    "qk_rope_head_dim": 64, "v_head_dim": 128, "moe_intermediate_size": 1407,
                    "first_k_dense_replace": 0, "n_shared_experts": None,
                    "n_routed_experts": None, "topk_method": "greedy"},
    "deepseek_v3": {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                    "qk_rope_head_dim": 64, "v_head_dim": 128, "moe_intermediate_size": 2048,
                    "first_k_dense_replace": 3, "n_shared_experts": 1,
                    "n_routed_experts": 256, "topk_method": "noaux_tc"},
}  # fmt: skip
DEEPSEEK_DEFAULTS["kimi_k2"] = DEEPSEEK_DEFAULTS["deepseek_v3"]


def _deepseek(raw: Raw, notes: list[str]) -> dict:
    """DeepSeek-V2/V3/R1 and Kimi-K2: multi-head latent attention; the first
    `first_k_dense_replace` layers dense, the rest `n_routed_experts` routed experts (top
    `num_experts_per_tok`, group-limited routing changes no count) and `n_shared_experts`
    shared ones. V3's `noaux_tc` routing adds a bias per expert (e_score_correction_bias).
    The multi-token-prediction module (`num_nextn_predict_layers`, V3's 14B) is a training
    aid outside the published 671B: not counted."""
    d = DEEPSEEK_DEFAULTS[raw["model_type"]]
    out = _gated(raw, tied_default=False, notes=notes)
    out["kv_heads"] = out["heads"]
    out.pop("head_dim", None)
    out["attention"] = "mla"
    out["q_lora_rank"] = _size(raw, "q_lora_rank", d["q_lora_rank"])
    for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        out[key] = _int(raw, key, d[key])
    if raw.get("attention_bias"):
        notes.append("attention biases not counted")
    routed = _size(raw, "n_routed_experts", d["n_routed_experts"])
    if routed:
        if (raw.get("moe_layer_freq") or 1) != 1:
            raise InvalidInput(
                f"DeepSeek with moe_layer_freq={raw['moe_layer_freq']} is not modelled: "
                "only every layer after the first dense ones"
            )
        out["experts"] = routed
        out["active_experts"] = _int(raw, "num_experts_per_tok")
        out["moe_ffn_hidden"] = _int(raw, "moe_intermediate_size", d["moe_intermediate_size"])
        out["shared_experts"] = _size(raw, "n_shared_experts", d["n_shared_experts"]) or 0
        dense = raw.get("first_k_dense_replace", d["first_k_dense_replace"]) or 0
        if isinstance(dense, bool) or not isinstance(dense, int) or dense < 0:
            raise MalformedFile(f"first_k_dense_replace must be a whole number, got {dense!r}")
        out["dense_layers"] = dense
        method = raw.get("topk_method") or d["topk_method"]
        out["router_bias"] = method == "noaux_tc"
        groups = _size(raw, "n_group", 1) or 1
        if method in ("group_limited_greedy", "noaux_tc") and groups > 1:
            out["expert_groups"] = groups
            out["expert_groups_per_token"] = _int(raw, "topk_group", groups)
    mtp = raw.get("num_nextn_predict_layers")
    if mtp:
        notes.append(f"the multi-token-prediction module ({mtp} layer) not counted")
    return out


# MXFP4 (OCP Microscaling, v1.0): a 4-bit value per weight and one 8-bit scale per block
# of 32, 4 + 8/32 bits per weight.
MXFP4_BITS = 4.25


def _gpt_oss(raw: Raw, notes: list[str]) -> dict:
    """gpt-oss: grouped-query attention with biases and a learned sink per head, layers
    alternating a sliding window and full attention (`layer_types`), experts with biases
    and a router with a bias; expert matrices published in MXFP4."""
    out = _gated(raw, tied_default=False, notes=notes, defaults={"head_dim": 64})
    out["experts"] = _int(raw, "num_local_experts", 128)
    out["active_experts"] = _int(raw, "num_experts_per_tok", _int(raw, "experts_per_token", 4))
    out.update(bias=bool(_get(raw, "attention_bias", True)), router_bias=True)
    out["attention_sinks"] = True
    _window(raw, out, "1:1")
    quant = raw.get("quantization_config")
    if isinstance(quant, dict) and quant.get("quant_method") == "mxfp4":
        out["expert_weight_bits"] = MXFP4_BITS
    return out


def _nested_text(raw: Raw, notes: list[str], what: str) -> Raw:
    """A multimodal config's language model (`text_config`); its vision tower not counted."""
    text = raw.get("text_config")
    if not isinstance(text, dict):
        raise MalformedFile("no 'text_config' object")
    notes.append(f"the language model only (text_config): the {what} not counted")
    return text


# Llama4TextConfig's defaults (transformers) for what a published text_config leaves out.
LLAMA4_DEFAULTS = {
    "vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192,
    "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40,
    "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 4096 * 32,
    "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1,
    "attention_chunk_size": 8192, "no_rope_layer_interval": 4,
}  # fmt: skip


def _llama4(raw: Raw, notes: list[str]) -> dict:
    """Llama 4 (Scout, Maverick): every `interleave_moe_layer_step`-th layer a MoE of routed
    experts of intermediate_size plus one shared expert of the same width, the others a dense
    FFN of intermediate_size_mlp; 3 of every 4 layers chunked local attention
    (attention_chunk_size), the 4th global without rotary embedding."""
    if raw.get("model_type") == "llama4":
        raw = _nested_text(raw, notes, "vision encoder")
    text = {**LLAMA4_DEFAULTS, **{k: v for k, v in raw.items() if v is not None}}
    out = _gated(text, tied_default=False, notes=notes)
    step = _int(text, "interleave_moe_layer_step")
    layers = out["layers"]
    moe = text.get("moe_layers")
    if moe is not None and list(moe) != list(range(step - 1, layers, step)):
        raise InvalidInput(
            f"Llama 4 with MoE layers {list(moe)[:6]}... off every {step}-th layer is not modelled"
        )
    out.update(
        ffn_hidden=_int(text, "intermediate_size_mlp"),
        moe_ffn_hidden=_int(text, "intermediate_size"),
        experts=_int(text, "num_local_experts"),
        active_experts=_int(text, "num_experts_per_tok"),
        shared_experts=1,
        moe_every=step,
    )
    nope = _int(text, "no_rope_layer_interval")
    layout = f"{nope - 1}:1" if nope > 1 else None
    if isinstance(text.get("no_rope_layers"), list):  # 1: rotary, chunked; 0: global
        types = ["chunked_attention" if x else "full_attention" for x in text["no_rope_layers"]]
        text = {**text, "layer_types": types}
    if text.get("attention_chunk_size") is not None:
        _window(text, out, layout, window_key="attention_chunk_size")
        out["chunked_attention"] = "sliding_window" in out
    return out


# Gemma3TextConfig's defaults (transformers) for what a published text_config leaves out.
GEMMA3_DEFAULTS = {
    "vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216,
    "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
    "head_dim": 256, "max_position_embeddings": 131072, "sliding_window": 4096,
    "sliding_window_pattern": 6,
}  # fmt: skip


def _gemma3(raw: Raw, notes: list[str]) -> dict:
    """Gemma 3: 5 sliding-window layers then 1 global (sliding_window_pattern 6, or its
    layer_types), per-head Q and K norms, four norms per block, tied embeddings."""
    if raw.get("model_type") == "gemma3":
        raw = _nested_text(raw, notes, "vision encoder (SigLIP) and its projector")
    text = {**GEMMA3_DEFAULTS, **{k: v for k, v in raw.items() if v is not None}}
    notes.append(GATED_FAMILIES["gemma"][1])
    out = _gated(text, tied_default=True, notes=notes)
    out.update(qk_norm=True, norms_per_layer=4)
    period = _int(text, "sliding_window_pattern")
    _window(text, out, f"{period - 1}:1" if period > 1 else "")
    return out


FAMILIES: dict[str, Callable[[Raw, list[str]], dict]] = {
    **dict.fromkeys(GATED_FAMILIES, _gated_family),
    "mixtral": _mixtral,
    "qwen3_moe": _qwen3_moe,
    "qwen2_moe": _qwen2_moe,
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "kimi_k2": _deepseek,
    "gpt_oss": _gpt_oss,
    "llama4": _llama4,
    "llama4_text": _llama4,
    "gemma3": _gemma3,
    "gemma3_text": _gemma3,
}


# quantization_config's quant_method -> the stored format decode and serve read (4-bit ones
# only with bits = 4).
STORED_FORMATS = {"fp8": "fp8", "mxfp4": "mxfp4", "gptq": "gptq", "awq": "awq"}


def _stored_weights(raw: Raw, values: dict, notes: list[str]) -> dict:
    """The published weights' format from `quantization_config` (DeepSeek-V3's block-scaled
    FP8, GPTQ and AWQ 4-bit checkpoints); one the model cannot price is said, not read."""
    quant = raw.get("quantization_config")
    if not isinstance(quant, dict):
        return {}
    method = str(quant.get("quant_method", "")).lower()
    stored = STORED_FORMATS.get(method)
    if stored in ("gptq", "awq") and quant.get("bits", 4) != 4:
        stored = None
    if stored == "mxfp4" and values.get("expert_weight_bits"):
        return {}  # the experts' MXFP4 is counted as their bits; the rest stays 16-bit
    if stored is None:
        notes.append(f"quantization_config {method or '?'} not modelled: weights as 16-bit")
        return {}
    notes.append(f"weights stored in {stored} (quantization_config)")
    return {"stored_weights": stored}


def config_from_hf(raw: Raw, name: str, where: str = "") -> TransformerConfig:
    """A `TransformerConfig` from a Hugging Face config dict of a family in FAMILIES."""
    if not isinstance(raw, dict):
        raise MalformedFile(f"{where or name}: config.json must hold a JSON object")
    family = raw.get("model_type")
    if not isinstance(family, str) or family not in FAMILIES:
        raise InvalidInput(
            f"{where or name}: model_type {family!r} is not one of the families ceiling reads "
            f"({', '.join(sorted(FAMILIES))}); give custom:layers=..,hidden=..,heads=.. instead"
        )
    notes: list[str] = []
    try:
        values = FAMILIES[family](raw, notes)
    except MalformedFile as exc:
        raise MalformedFile(f"{where or name}: {exc}") from None
    values.update(_stored_weights(raw, values, notes))
    source = f"Hugging Face config.json ({family})"
    if where:
        source += f" at {where}"
    if notes:
        source += "; " + "; ".join(notes)
    try:
        return from_dict(name, {**values, "name": name, "source": source})
    except InvalidInput as exc:
        raise MalformedFile(f"{where or name}: {exc}") from None
