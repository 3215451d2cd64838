"""`ceiling decode` (LLM decode and prefill ceilings, optionally measured) and `ceiling models`."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from ceiling.api.decode import DEFAULT_BATCHES
from ceiling.api.decode_measured import decode_measured, refuse_with_measure
from ceiling.api.decode_views import FLOP_NOTE
from ceiling.cli.app import app
from ceiling.cli.device_options import ProfileOption, SpecOption
from ceiling.cli.inputs import TpOption, argument, option
from ceiling.cli.output import (
    LIST_HELP,
    JsonOption,
    PlotOption,
    console,
    emit_json,
    figure_and_json,
    joined,
    table,
)
from ceiling.errors import InvalidInput
from ceiling.inputs import ACTIVATIONS, KV_DTYPE, MODEL, WEIGHTS
from ceiling.model.decode_setup import FIT_CONTEXT
from ceiling.model.transformer import CUSTOM_HELP, parse_model
from ceiling.model.transformer_config import TransformerConfig
from ceiling.render import decode_expected as expected_report
from ceiling.render.waterfall import waterfall_rows
from ceiling.units import (
    format_bandwidth,
    format_bytes,
    format_flops,
    format_flops_per_s,
    format_percent,
    format_time,
    parse_count,
)

DECODE_HELP = f"""Decode (and prefill) ceilings of an LLM on a device: tokens/s against batch size.

A decode step reads every weight and each sequence's KV cache once and does ~2 FLOPs per
parameter per token: memory bandwidth binds at small batches, compute at large ones.
Shows bytes and FLOPs per step, the bound, step time, tokens/s per sequence and in total,
the batch where decoding turns compute-bound, KV cache per token and per sequence, the
largest batch that fits, and time to first token for the prompt.

MODEL is a catalog name (`ceiling models` lists them; gpt:tiny and gpt:small are the small
GPTs --measure can build), hf:PATH (a Hugging Face config.json or the folder holding one:
Llama, Llama 4, Mistral, Mixtral, Qwen2/3, Qwen2-MoE, Qwen3-MoE, Gemma 1/2/3, Phi-3, GPT-2,
GPT-NeoX, gpt-oss, DeepSeek-V2/V3, Kimi-K2) or explicit dimensions: {CUSTOM_HELP}.
Example: custom:layers=32,hidden=4096,heads=32,kv_heads=8,ffn_hidden=14336,ffn_kind=swiglu,
vocab=128256,max_seq=8192.

--measure builds the model here with random weights, times real KV-cache decode steps at
each batch and shows them beside this machine's ceiling (the profile from `ceiling bench`,
else the detected CPU's theoretical peak with a quick bandwidth measurement)."""


def _batches(text: str | None) -> list[int] | None:
    if text is None:
        return None
    parts = [p for p in text.replace(" ", "").split(",") if p]
    if not parts:
        raise InvalidInput("--batch needs at least one batch size, e.g. --batch 1,8,64")
    out = []
    for p in parts:
        b = parse_count(p)
        if b < 1:
            raise InvalidInput(f"batch sizes must be ≥ 1, got {p!r}")
        out.append(b)
    return out


def _header(c, cfg: TransformerConfig, source: str, fit: tuple[int, int | None]) -> list[str]:
    d = c.dtypes
    tp = f", tensor parallel over {c.tp} devices (figures per device)" if c.tp > 1 else ""
    lines = [
        f"{cfg.name}: {c.params_total / 1e9:.3g} B parameters"
        + (f" ({c.params_active / 1e9:.3g} B active)" if c.params_active != c.params_total else "")
        + f"; {c.device} ({source}){tp}",
        f"weights {d.weights}, KV cache {d.kv}, multiplies at the dense {d.compute} peak "
        f"{format_flops_per_s(c.peak_flops_per_s)}; "
        f"bandwidth {format_bandwidth(c.bandwidth_bytes_per_s)}",
        f"KV cache: {format_bytes(c.kv_bytes_per_token)} "
        f"({format_bytes(c.kv_bytes_per_token, True)}) per token, "
        f"{format_bytes(c.kv_bytes_per_sequence)} per sequence at context {c.context} + 1",
    ]
    cross = c.crossover_batch
    lines.append(
        f"compute-bound from batch {cross} counting weights only (ridge "
        f"{c.ridge_flop_per_byte:.0f} FLOP/byte)"
        + (
            f"; with the KV cache at context {c.context}: from batch {c.crossover_batch_with_kv}"
            if c.crossover_batch_with_kv is not None
            else f"; with the KV cache at context {c.context}: memory-bound at every batch"
        )
    )
    context, biggest = fit
    if biggest is not None:
        lines.append(
            f"largest batch that fits at context {context} (weights + KV cache, nothing else): "
            f"{biggest:,}"
        )
    return lines


ModelArg = argument(MODEL, str, "Or gpt:small, the small decoder that --measure runs here.")
BatchOption = Annotated[
    list[str] | None,
    typer.Option("--batch", help=f"Batch sizes, {LIST_HELP} (default 1,8,64,256)."),
]
ContextOption = Annotated[
    str | None,
    typer.Option(
        "--context",
        help=f"Tokens already in each KV cache (default {FIT_CONTEXT:,}, or the model's maximum "
        "when shorter; 0 prices the weights alone, like published batch-1 figures).",
        show_default=False,
    ),
]
PromptOption = Annotated[
    str | None,
    typer.Option("--prompt", help="Prompt tokens for time to first token (default: context)."),
]
WeightsOption = option(WEIGHTS, str | None)
KvDtypeOption = option(KV_DTYPE, str | None)
ActivationsOption = option(ACTIVATIONS, str | None)
MeasureOption = Annotated[
    bool, typer.Option("--measure", help="Time real decode steps here beside the ceiling.")
]
DeviceOption = Annotated[
    str | None,
    typer.Option("--device", help="With --measure: cpu or cuda[:N] (default: cuda if present)."),
]


@app.command(help=DECODE_HELP)
def decode(
    model: ModelArg,
    spec: SpecOption = None,
    profile: ProfileOption = None,
    batch: BatchOption = None,
    context: ContextOption = None,
    prompt: PromptOption = None,
    weights: WeightsOption = None,
    kv_dtype: KvDtypeOption = None,
    activations: ActivationsOption = None,
    tp: TpOption = 1,
    measure: MeasureOption = False,
    device: DeviceOption = None,
    json_out: JsonOption = False,
    plot: PlotOption = None,
) -> None:
    from ceiling.api.decode import decode as decode_ceilings

    batches = _batches(joined(batch))
    ctx = parse_count(context) if context is not None else None
    prompt_tokens = parse_count(prompt) if prompt is not None else None
    if measure:
        cfg = parse_model(model)
        refuse_with_measure(spec, tp, kv_dtype, activations, prompt)
        _measure(cfg, batches or list(DEFAULT_BATCHES), ctx or 0, weights, device, profile,
                 json_out, plot)  # fmt: skip
        return
    result = decode_ceilings(
        model, spec=spec, machine_profile=profile, batch=batches, context=ctx, prompt=prompt_tokens,
        weights=weights, kv_dtype=kv_dtype, activations=activations, tp=tp,
    )  # fmt: skip
    if figure_and_json(result, plot, json_out):
        return
    c, fit = result.ceiling, (result.max_batch_context, result.max_batch)
    con = console()
    for line in _header(c, result.model, result.device_source, fit):
        con.print(line)
    # A 1-token "prompt" (context 0, no --prompt) is one decode step, not a prefill: no column.
    con.print(
        _rows_table(c, ttft=prompt_tokens is not None or c.prompt_tokens > 1, stated=ctx is None)
    )
    con.print(table(*expected_report.expected_table(result.expected, result.costs), compact=True))
    bands = result.accuracy()
    con.print(f"accuracy of the expected figures: {bands['expected'].text()}")
    ceiling_band = bands["ceiling"]
    if ceiling_band.cases:
        median, p90 = ceiling_band.median_abs_error * 100, ceiling_band.p90_abs_error * 100
        con.print(
            f"the ceiling is a bound: it stands a median {median:.0f} % from published runs "
            f"of this kind (p90 {p90:.0f} %; {ceiling_band.cases} runs)"
        )
    for note in c.notes:
        con.print(f"note: {note}")
    if plot:
        con.print(f"figure: {plot}")


def _rows_table(c, ttft: bool, stated: bool = False):
    """The ceiling's rows, with time to first token when a prompt is prefilled; a batch
    past the memory is marked "does not fit" (the largest that fits is in the header)."""
    cols = ["batch", "tok/s", "tok/s/seq", "step", "bound", "bytes", "FLOP"]
    unfit = not all(r.fits for r in c.rows)
    default = " (the default; --context N sets it)" if stated else ""
    return table(
        f"Decode ceiling at context {c.context:,}{default}",
        cols + (["TTFT"] if ttft else []) + (["memory"] if unfit else []),
        [
            [
                r.batch,
                f"{r.tokens_per_s:,.0f}",
                f"{r.tokens_per_s_per_sequence:,.1f}",
                format_time(r.step_time_s),
                r.bound,
                format_bytes(r.bytes_per_step).replace(" ", ""),
                format_flops(r.flops_per_step).removesuffix("FLOP"),
            ]
            + ([format_time(r.ttft_s)] if ttft else [])
            + ([_fit_cell(r)] if unfit else [])
            for r in c.rows
        ],
        caption="per step; "
        + (f"the largest batch that fits is {c.max_batch:,}; " if unfit else "")
        + (
            f"TTFT: time to first token for a {c.prompt_tokens}-token prompt (prefill); "
            if ttft
            else "--prompt N adds the time to first token of an N-token prompt; "
        )
        + FLOP_NOTE,
        compact=True,
    )


def _fit_cell(r) -> str:
    need = format_bytes(r.memory_needed_bytes).replace(" ", "")
    return need if r.fits else "does not fit"


def _measure(cfg, batches, ctx, weights, device, profile, json_out, plot) -> None:
    from rich.progress import Progress

    # drawn on a terminal only: elsewhere a refusal must stay the one line on stderr
    progress = Progress(console=_stderr_console(), transient=True, disable=not sys.stderr.isatty())
    with progress:
        task = progress.add_task(f"decoding {cfg.name}", total=len(batches))
        result = decode_measured(
            cfg, batches, ctx, weights=weights, device=device, profile=profile,
            on_batch=lambda _b: progress.advance(task),
        )  # fmt: skip
    run, cmp, c = result.run, result.comparison, result.ceiling
    if figure_and_json(result, plot, json_out):
        return
    con = console()
    con.print(
        f"{cfg.name}: {c.params_total / 1e6:.3g} M parameters, {run.dtype} on {run.device} "
        f"({run.environment.get('device_name', '')}), context {ctx}, random weights"
    )
    con.print(f"ceiling from: {cmp.ceiling_source}")
    con.print(
        f"peak {format_flops_per_s(c.peak_flops_per_s)} ({c.dtypes.compute}), "
        f"bandwidth {format_bandwidth(c.bandwidth_bytes_per_s)}; weights "
        f"{format_bytes(run.weight_bytes)}, last-level cache "
        + (format_bytes(cmp.cache_bytes, True) if cmp.cache_bytes else "unknown")
    )
    con.print(
        table(
            "Measured decode vs the ceiling",
            [
                "batch",
                "measured tok/s",
                "ceiling tok/s",
                "share",
                "MBU",
                "MFU",
                "bound",
                "step",
                "expected",
                "held by",
            ],
            [
                [
                    r.batch,
                    f"{r.measured_tokens_per_s:,.1f}" + (" (noisy)" if r.noisy else ""),
                    f"{r.ceiling_tokens_per_s:,.1f}",
                    format_percent(r.share_of_ceiling),
                    format_percent(r.mbu),
                    format_percent(r.mfu),
                    r.bound,
                    format_time(r.step_time_s),
                    f"{r.expected_tokens_per_s:,.1f}" if r.expected_tokens_per_s else "—",
                    r.expected_limited_by or "—",
                ]
                for r in cmp.rows
            ],
            caption=f"MBU, MFU: achieved share of bandwidth and peak; {FLOP_NOTE}",
            compact=True,
        )
    )
    for note in cmp.notes:
        con.print(f"note: {note}")
    con.print(f"why: {result.why_low()}")
    first = min(cmp.rows, key=lambda row: row.batch)
    if first.waterfall:
        bars = waterfall_rows(first.waterfall, first.step_time_s)
        cols = [f"batch {first.batch}: ceiling → measured step", "time", "share", "recovers it"]
        con.print(table("Waterfall (bars sum to the measured step)", cols, bars))
    if plot:
        con.print(f"figure: {plot}")


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True)


MODELS_HELP = """The transformer catalog: shapes, parameter counts and sources.

MODEL... shows only those: catalog names, custom:... dimensions or hf:PATH (a Hugging Face
config.json, or the folder holding one)."""


def _billions(n: float) -> str:
    x = n / 1e9
    if x >= 1000:
        return f"{x:,.0f}"
    return f"{x:,.2f}" if x >= 1 else f"{x:.3f}"


def _ffn(m) -> str:
    """The FFN width; a MoE model with dense layers of another width: dense/expert."""
    if m.experts > 1 and m.expert_ffn_hidden != m.ffn_hidden:
        return f"{m.ffn_hidden}/{m.expert_ffn_hidden}"
    return str(m.ffn_hidden)


def _context(n: int) -> str:
    return f"{n / 1e6:.3g}M" if n >= 1_000_000 else str(n)


@app.command(help=MODELS_HELP)
def models(
    names: Annotated[
        list[str] | None,
        typer.Argument(metavar="[MODEL]...", help="Models to show (default: the catalog)."),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    from ceiling.api.models import models as shapes

    r = shapes(names)
    if json_out:
        emit_json(r.to_dict())
        return
    rows = []
    for name, m in r.models.items():
        rows.append(
            [
                name,
                _billions(m.params_total),
                _billions(m.params_active) if m.params_active != m.params_total else "",
                m.layers,
                m.hidden,
                f"{m.heads}/{'mla' if m.attention == 'mla' else m.kv_heads}",
                _ffn(m),
                "gelu" if m.ffn_kind == "gelu" else "gated",
                _context(m.max_seq),
                format_bytes(m.kv_bytes_per_token(2), True).replace(" ", ""),
            ]
        )
    console().print(
        table(
            r.heading(),
            ["model", "params", "active", "l", "h", "heads/kv", "ffn", "kind", "ctx", "KV/tok"],
            rows,
            caption="params, active: all and per-token parameters in billions (1e9; active "
            "only for mixture of experts); l layers, h hidden; heads/kv: query heads and KV "
            "heads, or mla (latent attention); ffn: FFN width (dense/expert when they "
            "differ); kind: gelu (up, down) or gated (SwiGLU/GeGLU: gate, up, down); ctx: "
            "positions (M = 1e6); KV cache per token at 16 bits, every layer (local layers "
            "hold at most their window); vocab, layer layout and sources: --json",
            compact=True,
        )
    )
