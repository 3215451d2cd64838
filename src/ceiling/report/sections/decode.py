"""LLM decoding: ceilings of catalog models here and on reference GPUs; measured small decode."""

from __future__ import annotations

from ceiling import units
from ceiling.errors import CeilingError
from ceiling.report.compose import ReportContext, SectionOutput, Skip, require

KEY = "decode"
TITLE = "LLM decoding: the memory-bandwidth ceiling"

MODELS = ("llama-3-8b", "llama-2-13b", "mixtral-8x7b")
REFERENCE_GPUS = ("a100-80gb", "h100-sxm", "h200-sxm")
BATCHES = [1, 4, 16, 64, 256]
CONTEXT = 512
FIGURE_MODEL = "llama-3-8b"
MEASURED_BATCHES_QUICK = [1, 4, 16]
MEASURED_BATCHES_FULL = [1, 2, 4, 8, 16, 32]


def run(ctx: ReportContext, out: SectionOutput) -> None:
    decode = require("ceiling.model.decode", "the decode ceiling model")
    transformer = require("ceiling.model.transformer", "the transformer model catalog")
    catalog = require("ceiling.hardware.catalog", "the hardware catalog")
    out.text(
        "Generating one token reads every weight of the model once (shared by the whole "
        "batch) plus each sequence's KV cache, but does only 2 FLOPs per weight per "
        "sequence. At small batches the step time is set by memory bandwidth, not by "
        "compute; batching reuses each weight read for more tokens until the step turns "
        "compute-bound at the crossover batch (the ridge point counted in tokens)."
    )
    devices = [(key, catalog.get_spec(key)) for key in REFERENCE_GPUS]
    local = _local_spec(ctx, out)
    if local is not None:
        devices.insert(0, ("this machine", local))
    setup = decode.DecodeSetup(weights_dtype="bf16", context=CONTEXT)
    rows, figures_data, keyed = [], {}, {}
    for model_name in MODELS:
        cfg = transformer.get_model(model_name)
        for label, spec in devices:
            ctx.step(f"decode ceiling of {model_name} on {label}")
            try:
                res = decode.decode_ceiling(
                    cfg, spec, BATCHES, _setup_for(decode, spec, setup), drop_unfit=True
                )
            except CeilingError as exc:
                rows.append([model_name, _name(label, spec), "—", "—", "—", "—", str(exc)])
                continue
            by_batch = {r.batch: r for r in res.rows}
            b1 = by_batch.get(1)
            top = res.rows[-1]
            rows.append(
                [
                    model_name,
                    _name(label, spec),
                    f"{b1.tokens_per_s:,.1f}" if b1 else "—",
                    f"{top.tokens_per_s:,.0f} (batch {top.batch}, {top.bound})",
                    str(res.crossover_batch) if res.crossover_batch else "never",
                    str(res.max_batch) if res.max_batch is not None else "unknown",
                    units.format_bytes(res.kv_bytes_per_token, binary=True),
                ]
            )
            keyed[f"{model_name}@{label}"] = {
                "batch1_tokens_per_s": b1.tokens_per_s if b1 else None,
                "crossover_batch": res.crossover_batch,
                "max_batch": res.max_batch,
                "kv_bytes_per_token": res.kv_bytes_per_token,
            }
            if model_name == FIGURE_MODEL:
                figures_data[_name(label, spec)] = (cfg, spec, res)
    out.key_figures["ceilings"] = keyed
    main = keyed.get(f"{FIGURE_MODEL}@h100-sxm")
    if main and main["batch1_tokens_per_s"]:
        out.highlight(
            f"{FIGURE_MODEL}, batch 1, H100 SXM", f"{main['batch1_tokens_per_s']:,.0f} tokens/s"
        )
        out.highlight("turns compute-bound at batch", str(main["crossover_batch"]))
    here = keyed.get(f"{FIGURE_MODEL}@this machine")
    if here and here["batch1_tokens_per_s"]:
        out.highlight(
            f"{FIGURE_MODEL}, batch 1, here", f"{here['batch1_tokens_per_s']:,.1f} tokens/s"
        )
    out.table(
        f"Decode ceilings, bf16 weights, {CONTEXT} tokens of context per sequence",
        [
            "model",
            "device",
            "tokens/s at batch 1",
            "best tokens/s in the sweep",
            "compute-bound from batch",
            "largest batch that fits",
            "KV cache per token",
        ],
        rows,
        note="Ceilings, not predictions of a real server: every weight read once per step, "
        "KV heads only, dense peaks, no allowance for activations or fragmentation.",
    )
    _figure(ctx, out, decode, figures_data, setup)
    _measured(ctx, out)


def _local_spec(ctx: ReportContext, out: SectionOutput):
    try:
        profile = ctx.profile()
    except Skip as exc:
        out.note(f"this machine's ceilings: {exc}")
        return None
    try:
        return profile.device().as_spec()
    except CeilingError as exc:
        out.note(f"this machine's ceilings: {exc}")
        return None


def _setup_for(decode, spec, setup):
    """On a device without a measured bf16 peak (most CPUs), the multiplies run in fp32."""
    if "bf16" in spec.peak_flops_per_s:
        return setup
    act = next((d for d in ("fp16", "fp32") if d in spec.peak_flops_per_s), None)
    if act is None:
        return setup
    return decode.DecodeSetup(
        weights_dtype=setup.weights_dtype,
        context=setup.context,
        activation_dtype=act,
        kv_dtype="bf16",
    )


def _name(label: str, spec) -> str:
    return f"{spec.name}" if label != "this machine" else f"this machine ({spec.name})"


def _figure(ctx, out, decode, figures_data, setup) -> None:
    if not figures_data:
        return
    plot = require("ceiling.report.decode_plot", "the decode figure")
    ctx.step("drawing the decode ceilings")
    batches = [2**i for i in range(0, 11)]
    curves = {}
    for name, (cfg, spec, res) in figures_data.items():
        curves[name] = (
            res,
            decode.roof_curves(cfg, spec, _setup_for(decode, spec, setup), batches),
        )
    fig = plot.report_figure(curves) if hasattr(plot, "report_figure") else None
    if fig is None:
        name, (cfg, spec, res) = next(iter(curves.items()))
        fig = plot.decode_figure(res, decode.roof_curves(cfg, spec, setup, batches))
    out.figure(
        fig,
        f"{FIGURE_MODEL}: tokens/s against batch size. Below the crossover the memory roof "
        "binds (tokens/s grows with batch at no extra cost per step); above it, compute.",
    )


def _measured(ctx: ReportContext, out: SectionOutput) -> None:
    try:
        measure = require("ceiling.measure.decode", "measured decoding")
    except Skip as exc:
        out.note(f"measured decoding of a small model: {exc}")
        return
    del measure  # wired in when the measurement API is final
