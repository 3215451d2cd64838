"""Hugging Face `config.json` contents -> `TransformerConfig`, one mapping per model family.

Pure: takes the parsed JSON dict (reading the file is `ceiling.hf_files`). Each family's
defaults are its `transformers` configuration class's defaults, used when a key is absent.
What a family has that the shape model does not (sliding-window attention, QKV-only biases,
per-head norms) moves parameter counts by well under 0.1 % or only the KV cache of long
contexts; the config's `source` says which. Architectures the formulas would get wrong
(multi-head latent attention, dense layers mixed into a mixture of experts) are refused with
the reason instead of counted.
"""

from __future__ import annotations

from collections.abc import Callable

from ceiling.errors import InvalidInput, MalformedFile
from ceiling.model.transformer import TransformerConfig, from_dict

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


def _gated(raw: Raw, *, tied_default: bool, notes: list[str]) -> dict:
    """The Llama layout most families share: RMSNorm, gated FFN (gate, up, down), RoPE."""
    heads = _int(raw, "num_attention_heads")
    window = raw.get("sliding_window")
    if window and raw.get("use_sliding_window", True):
        notes.append(
            f"sliding-window attention ({window}) not modelled: KV cache counted over the "
            f"full context"
        )
    if raw.get("attention_bias") or raw.get("mlp_bias"):
        notes.append("linear biases not counted")
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


# What each gated family has that the shape model leaves out, and its tie_word_embeddings
# default (the `transformers` config class's).
GATED_FAMILIES: dict[str, tuple[bool, str]] = {
    "llama": (False, ""),
    "mistral": (False, ""),
    "phi3": (False, ""),
    "qwen2": (False, "Q, K and V biases (about 0.002 % of the parameters) not counted"),
    "qwen3": (False, "per-head Q and K norm gains (2·head_dim per layer) not counted"),
    "gemma": (True, "gated GELU FFN (GeGLU) counted as three matrices like SwiGLU"),
    # Gemma 2 alternates sliding-window and global layers: the window note comes from _gated.
    "gemma2": (True, "gated GELU FFN (GeGLU); the two extra norms per layer not counted"),
}


def _gated_family(raw: Raw, notes: list[str]) -> dict:
    tied, note = GATED_FAMILIES[raw["model_type"]]
    if note:
        notes.append(note)
    return _gated(raw, tied_default=tied, notes=notes)


def _mixtral(raw: Raw, notes: list[str]) -> dict:
    out = _gated(raw, tied_default=False, notes=notes)
    out["experts"] = _int(raw, "num_local_experts", 8)
    out["active_experts"] = _int(raw, "num_experts_per_tok", 2)
    return out


def _every_layer_experts(raw: Raw, family: str) -> None:
    dense = raw.get("mlp_only_layers") or []
    step = raw.get("decoder_sparse_step", 1)
    if dense or step != 1:
        raise InvalidInput(
            f"{family} with dense layers among the expert layers (mlp_only_layers="
            f"{dense}, decoder_sparse_step={step}) is not modelled: every layer is counted "
            "alike"
        )


def _qwen3_moe(raw: Raw, notes: list[str]) -> dict:
    _every_layer_experts(raw, "Qwen3-MoE")
    notes.append(GATED_FAMILIES["qwen3"][1])
    out = _gated(raw, tied_default=False, notes=notes)
    out["ffn_hidden"] = _int(raw, "moe_intermediate_size")
    out["experts"] = _int(raw, "num_experts")
    out["active_experts"] = _int(raw, "num_experts_per_tok")
    return out


def _qwen2_moe(raw: Raw, notes: list[str]) -> dict:
    """Qwen1.5/Qwen2-MoE: routed experts plus one shared expert every token passes through,
    n times as wide as a routed one. It is counted as n more experts, always active: the
    same weights and FLOPs. Its sigmoid gate (h weights) and the Q, K, V biases (3·h) are
    left out while the router is counted over n more experts (n·h): exact for n = 4, as in
    Qwen1.5-MoE-A2.7B."""
    _every_layer_experts(raw, "Qwen2-MoE")
    out = _gated(raw, tied_default=False, notes=notes)
    routed = _int(raw, "moe_intermediate_size", 1408)
    shared = raw.get("shared_expert_intermediate_size", 5632)
    if shared is not None and (not isinstance(shared, int) or shared < 0 or shared % routed):
        raise InvalidInput(
            f"Qwen2-MoE's shared expert ({shared}) is not a whole number of routed experts "
            f"({routed}) wide: not modelled"
        )
    always = (shared or 0) // routed
    out["ffn_hidden"] = routed
    out["experts"] = _int(raw, "num_experts", 60) + always
    out["active_experts"] = _int(raw, "num_experts_per_tok", 4) + always
    if always:
        notes.append(
            f"shared expert ({shared}) counted as {always} always-active experts of {routed}; "
            f"its gate and the Q, K, V biases in place of the router's {always} extra columns"
        )
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


def _deepseek(raw: Raw, notes: list[str]) -> dict:
    missing = []
    if raw.get("kv_lora_rank"):
        missing.append(f"multi-head latent attention (kv_lora_rank={raw['kv_lora_rank']})")
    if raw.get("n_shared_experts"):
        missing.append(f"shared experts (n_shared_experts={raw['n_shared_experts']})")
    if raw.get("first_k_dense_replace"):
        missing.append(f"dense first layers (first_k_dense_replace={raw['first_k_dense_replace']})")
    what = ", ".join(missing) or "its attention and expert layout"
    raise InvalidInput(
        f"DeepSeek-V2/V3 is not modelled yet: {what}; the parameter and KV-cache formulas "
        "assume grouped-query attention and one expert layout in every layer"
    )


FAMILIES: dict[str, Callable[[Raw, list[str]], dict]] = {
    **dict.fromkeys(GATED_FAMILIES, _gated_family),
    "mixtral": _mixtral,
    "qwen3_moe": _qwen3_moe,
    "qwen2_moe": _qwen2_moe,
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
}


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
    source = f"Hugging Face config.json ({family})"
    if where:
        source += f" at {where}"
    if notes:
        source += "; " + "; ".join(notes)
    try:
        return from_dict(name, {**values, "name": name, "source": source})
    except InvalidInput as exc:
        raise MalformedFile(f"{where or name}: {exc}") from None
