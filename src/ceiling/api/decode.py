"""LLM decode ceilings as a result: `ceiling.decode("llama-3-8b", spec="h100-sxm")`."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ceiling.api.arguments import BadArgument, checked
from ceiling.api.result import Result
from ceiling.errors import InvalidInput
from ceiling.model.decode import default_context
from ceiling.model.transformer import ModelArgument

DEFAULT_BATCHES = (1, 8, 64, 256)
# The context decode is priced at when none is given, and where "largest batch that fits" is
# given at context 0: a long chat or a document prompt, where serving capacity is usually
# quoted (the model's own maximum when that is shorter).
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
    from ceiling.model.transformer import TransformerConfig

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


def _fit_at_realistic(cfg, dev, setup) -> tuple[int, int | None]:
    """(context, largest batch that fits there): at context 0 every sequence holds one token,
    so the count of sequences that fit is meaningless; a served sequence holds thousands."""
    from ceiling.errors import DoesNotFit
    from ceiling.model.decode import decode_ceiling

    context = default_context(cfg)
    at = dataclasses.replace(setup, context=context, prompt_tokens=None)
    try:
        return context, decode_ceiling(cfg, dev, [1], at, drop_unfit=True).max_batch
    except DoesNotFit:
        return context, 0


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


@dataclass(frozen=True)
class DecodeResult(Result):
    """Decode (and prefill) ceilings of a model on a device: `ceiling` (the model's
    `DecodeCeiling`: rows per batch, KV cache sizes, crossover batch), the engine-cost
    `expected` rows, and the largest batch that fits at `max_batch_context`."""

    model: Any  # TransformerConfig
    ceiling: Any  # model.decode.DecodeCeiling
    device: Any  # the device spec
    setup: Any  # model.decode.DecodeSetup
    device_source: str
    expected: list[Any]
    costs: Any
    max_batch_context: int
    max_batch: int | None
    title = "Decode ceiling"

    @property
    def rows(self) -> list[Any]:
        return self.ceiling.rows

    def record(self) -> dict[str, Any]:
        from ceiling.render import decode_expected as expected_report

        out = ceiling_json(self.model, self.ceiling)
        out["max_batch_context"], out["max_batch"] = self.max_batch_context, self.max_batch
        out["device_source"] = self.device_source
        bands = {k: b.to_json() for k, b in self.accuracy().items()}
        out["rows"] = [{**r.to_json(), "accuracy": bands["ceiling"]} for r in self.ceiling.rows]
        out["expected"] = expected_report.expected_json(self.expected, self.costs)
        for row in out["expected"]["rows"]:
            row["accuracy"] = bands["expected"]
        out["accuracy"] = bands
        return out

    def accuracy(self) -> dict:
        """The error bands of the expected figures and of the ceiling (`expected`,
        `ceiling`): the regime they fall in and its |error| on published runs, scored
        leave-one-source-out."""
        from ceiling.validation.features import decode_bands

        return decode_bands(self)

    def heading(self) -> str:
        return f"{self.model.name} decode on {self.ceiling.device} ({self.device_source})"

    def figure(self):
        return decode_figure(self.model, self.device, self.setup, self.ceiling)


def _batches(batch: Iterable[int] | int | None) -> tuple[list[int], bool]:
    if batch is None:
        return list(DEFAULT_BATCHES), False
    values = [batch] if isinstance(batch, int) else list(batch)
    if not values:
        raise BadArgument("batch", "needs at least one batch size (e.g. 1, 8 and 64)")
    for b in values:
        if not isinstance(b, int) or b < 1:
            raise InvalidInput(f"batch sizes must be whole numbers ≥ 1, got {b!r}")
    return values, True


@checked
def decode(
    model: ModelArgument,
    *,
    spec: str | None = None,
    machine_profile: Path | str | None = None,
    batch: Iterable[int] | int | None = None,
    context: int | None = None,
    prompt: int | None = None,
    weights: str | None = None,
    kv_dtype: str | None = None,
    activations: str | None = None,
    tp: int = 1,
    measure: bool = False,
    device: str | None = None,
):
    """Decode ceilings of `model` (a catalog name, "custom:...", "hf:PATH", or a Hugging Face
    config as a dict or a transformers config object such as `AutoConfig.from_pretrained()`
    gives) on a catalog device (`spec`) or the saved machine profile: tokens/s against
    `batch` (default 1, 8, 64, 256), `context` tokens in each KV cache (default 4,096, or
    the model's maximum when shorter), time to first token for `prompt` tokens (default:
    the context), `weights`/`kv_dtype`/`activations` dtypes (`weights` may name a 4-bit
    format: int4, awq, gptq, mxfp4), `tp` devices per replica. A batch that does not fit is
    kept with `fits` False (and a note); a single batch given that does not fit, or no batch
    fitting, raises `DoesNotFit`.

    measure=True builds the model here with random weights and times real decode steps on
    `device` (cpu or cuda[:N]; default cuda if present) beside this machine's ceiling: a
    `MeasuredDecodeResult` (see `api/decode_measured.py`)."""
    from ceiling.hardware.resolve import resolve
    from ceiling.model import decode_expected as expected
    from ceiling.model.decode import DecodeSetup, decode_ceiling
    from ceiling.model.transformer import parse_model

    cfg = parse_model(model)
    batches, explicit = _batches(batch)
    if measure:
        from ceiling.api.decode_measured import decode_measured, refuse_with_measure

        refuse_with_measure(spec, tp, kv_dtype, activations, prompt)
        return decode_measured(
            cfg, batches, context or 0, weights=weights, device=device, profile=machine_profile
        )
    if device is not None:
        raise InvalidInput("device is where measure=True runs: drop it, or measure")
    resolved = resolve(spec, machine_profile)
    dev = resolved.spec
    fmt = expected.quant_format(weights)
    setup = DecodeSetup(
        weights_dtype=fmt.dtype if fmt else (weights or "bf16"),
        kv_dtype=kv_dtype,
        activation_dtype=activations,
        context=default_context(cfg) if context is None else context,
        tp=tp,
        prompt_tokens=prompt,
    )
    one_request = explicit and len(set(batches)) == 1
    c = decode_ceiling(cfg, dev, batches, setup, flag_unfit=not one_request)
    costs = expected.costs_for(dev, weights=weights, compute=c.dtypes.compute)
    rows = expected.expected_rows(c, cfg.layers, costs, cfg=cfg, sms=getattr(dev, "sms", None))
    fit = (c.context, c.max_batch) if c.context else _fit_at_realistic(cfg, dev, setup)
    return DecodeResult(cfg, c, dev, setup, resolved.source, rows, costs, *fit)
