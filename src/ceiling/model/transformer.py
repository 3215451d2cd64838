"""A model argument -> `TransformerConfig`: a catalog name, explicit dimensions
``custom:layers=32,hidden=4096,heads=32,ffn_hidden=11008,vocab=32000`` (see CUSTOM_HELP),
``hf:PATH`` to a Hugging Face config.json, or such a config in memory (`parse_model`).

The shape itself, its validation and layer kinds are `ceiling.model.transformer_config`;
its parameter counts, FLOPs and memory the `transformer_params`, `transformer_flops` and
`transformer_memory` modules beside it; the catalog `ceiling.model.model_catalog`; the
Hugging Face families `ceiling.model.hf_config`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from ceiling.errors import InvalidInput
from ceiling.model.hf_config import config_from_hf
from ceiling.model.model_catalog import get_model
from ceiling.model.transformer_config import TransformerConfig, from_dict

__all__ = ["CUSTOM_HELP", "ModelArgument", "PretrainedConfig", "get_model", "parse_model"]

CUSTOM_HELP = (
    "custom:KEY=VALUE,... with keys layers, hidden, heads (required) and kv_heads, head_dim "
    "(default hidden/heads), ffn_hidden (default 4·hidden), ffn_kind gelu|swiglu, vocab "
    "(default 32000), tied_embeddings, max_seq (default 4096), experts, active_experts, "
    "norm layernorm|rmsnorm, bias, learned_positions, trained_dropout; mixture-of-experts "
    "layout moe_ffn_hidden, shared_experts, shared_ffn_hidden, shared_expert_gate, "
    "router_bias, expert_groups, expert_groups_per_token, dense_layers, moe_every, "
    "expert_weight_bits; attention mha|mla with "
    "q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim; "
    "sliding_window, local_global L:G (L local layers then G global, repeated), "
    "chunked_attention, attention_sinks, qkv_bias, qk_norm, norms_per_layer; booleans as "
    "true/false, none for an absent size"
)


_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def _parse_value(key: str, text: str):
    t = text.strip()
    kind = {f.name: f.type for f in dataclasses.fields(TransformerConfig)}.get(key)
    if kind is None:
        return t  # an unknown key: from_dict names it, with the closest known one
    if kind == "bool":
        if t.lower() not in _TRUE + _FALSE:
            raise InvalidInput(f"custom model: {key}={text!r} must be true or false (a boolean)")
        return t.lower() in _TRUE
    if kind == "str":
        return t.lower()
    if "None" in kind and t.lower() == "none":
        return None
    try:
        value = float(t)
    except ValueError:
        raise InvalidInput(f"custom model: {key}={text!r} is not a number") from None
    if kind.startswith("float"):
        return value
    if not value.is_integer():
        raise InvalidInput(f"custom model: {key}={text!r} must be a whole number")
    return int(value)


@runtime_checkable
class PretrainedConfig(Protocol):
    """A Hugging Face model config held in memory: anything with `to_dict()` giving the
    fields of its config.json, as transformers' `PretrainedConfig` (never imported here)."""

    def to_dict(self) -> dict[str, Any]: ...


# What a model argument may be, for the API's annotations.
ModelArgument = str | dict | PretrainedConfig | TransformerConfig


def _from_config_object(model: Any) -> TransformerConfig:
    """A Hugging Face config given as a dict (config.json's content) or a config object."""
    raw = model.to_dict() if isinstance(model, PretrainedConfig) else dict(model)
    if not isinstance(raw, dict):
        raise InvalidInput(f"the model config's to_dict() gave {type(raw).__name__}, not a dict")
    label = raw.get("_name_or_path") or raw.get("model_type") or "config"
    where = "a config object" if isinstance(model, PretrainedConfig) else "a config dict"
    return config_from_hf(raw, f"hf:{label}", where)


def parse_model(text: ModelArgument) -> TransformerConfig:
    """A catalog name, explicit dims ``custom:layers=32,...``, or ``hf:PATH`` (config.json);
    from Python also a Hugging Face config as a dict or an object with `to_dict()` (a
    transformers `PretrainedConfig`), or a `TransformerConfig` itself."""
    if isinstance(text, TransformerConfig):
        return text
    if isinstance(text, Mapping | PretrainedConfig) and not isinstance(text, str):
        return _from_config_object(text)
    if not isinstance(text, str):
        raise InvalidInput(
            f"a model is a name (catalog, custom:..., hf:PATH), a Hugging Face config dict or "
            f"config object; got {type(text).__name__}"
        )
    t = text.strip()
    if t.lower().startswith("hf:"):
        from ceiling.hf_files import read_config

        raw, name, where = read_config(t[len("hf:") :])
        return config_from_hf(raw, name, where)
    if t.lower().startswith("custom:"):
        body = t[len("custom:") :]
        entry = {}
        for part in filter(None, (p.strip() for p in body.split(","))):
            if "=" not in part:
                raise InvalidInput(
                    f"custom model: expected KEY=VALUE, got {part!r} ({CUSTOM_HELP})"
                )
            key, value = (s.strip() for s in part.split("=", 1))
            if key in entry:
                raise InvalidInput(f"custom model: {key} is given twice")
            entry[key] = _parse_value(key, value)
        entry.setdefault("name", t)
        return from_dict("custom", entry)
    return get_model(t)
