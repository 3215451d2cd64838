"""How a decode ceiling is shown: the model's shape and the ceiling as JSON, and tokens/s
against batch under the roofs as a figure; shared by the computed result (`api/decode.py`)
and the measured one (`api/decode_measured.py`)."""

from __future__ import annotations

from typing import Any

FLOP_NOTE = "FLOPs count a multiply-add as 2; peaks are dense"


def config_json(cfg) -> dict[str, Any]:
    return {
        "layers": cfg.layers,
        "hidden": cfg.hidden,
        "heads": cfg.heads,
        "kv_heads": cfg.kv_heads,
        "head_dim": cfg.head_dim,
        "ffn_hidden": cfg.ffn_hidden,
        "ffn_kind": cfg.ffn_kind,
        "vocab": cfg.vocab,
        "max_seq": cfg.max_seq,
        "experts": cfg.experts,
        "active_experts": cfg.active_experts,
        **_layout_json(cfg),
    }


# The layout fields a model may set beyond the dense shape, shown only when it sets them.
LAYOUT_FIELDS = (
    "moe_ffn_hidden", "shared_experts", "shared_ffn_hidden", "shared_expert_gate",
    "router_bias", "expert_groups", "expert_groups_per_token", "dense_layers", "moe_every",
    "expert_weight_bits", "attention",
    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
    "sliding_window", "local_global", "chunked_attention", "attention_sinks", "qkv_bias",
    "qk_norm", "norms_per_layer",
)  # fmt: skip


def _layout_json(cfg) -> dict[str, Any]:
    """Non-default layout fields, and the layer counts they give."""
    from ceiling.model.transformer_config import TransformerConfig

    out = {}
    for key in LAYOUT_FIELDS:
        value = getattr(cfg, key)
        if value != TransformerConfig.__dataclass_fields__[key].default:
            out[key] = value
    if cfg.experts > 1 and cfg.dense_ffn_layers:
        out["moe_layers"] = cfg.moe_layers
    if cfg.local_layers:
        out["local_layers"] = cfg.local_layers
    return out


def ceiling_json(cfg, c) -> dict[str, Any]:
    """The model and its decode ceiling `c` (a `model.decode.DecodeCeiling`)."""
    return {
        "model": cfg.name,
        "config": config_json(cfg),
        **c.to_json(),
        "flops_convention": FLOP_NOTE,
    }


def _plot_grid(batches: list[int], crossover: int | None, max_batch: int | None) -> list[int]:
    hi = max([*batches, 2 * (crossover or 1), 1024])
    if max_batch:
        hi = min(hi, max(max_batch, max(batches)))
    grid, b = [], 1.0
    while b <= hi:
        grid.append(round(b))
        b *= 2**0.125
    return sorted(set(grid))


def decode_figure(cfg, dev, setup, c, measured=None, in_cache: bool = False):
    """Tokens/s against batch under the memory and compute roofs (and measured points)."""
    from ceiling.model.decode import roof_curves
    from ceiling.render.decode_plot import decode_figure as draw

    grid = _plot_grid([r.batch for r in c.rows], c.crossover_batch_with_kv, c.max_batch)
    curves = roof_curves(cfg, dev, setup, grid)
    if in_cache:
        curves["memory"] = []
        curves["ceiling"] = curves["compute"]
    title = f"{cfg.name} decode on {c.device}: {c.dtypes.weights} weights, context {c.context}" + (
        f", TP {c.tp}" if c.tp > 1 else ""
    )
    return draw(
        curves,
        title,
        None if in_cache else c.crossover_batch_with_kv,
        rows=([r.batch for r in c.rows], [r.tokens_per_s for r in c.rows]),
        measured=measured,
    )
