"""LLM decoding: ceilings of catalog models here and on reference GPUs; measured small decode."""

from __future__ import annotations

from ceiling import units
from ceiling.errors import CeilingError
from ceiling.report.compose import ReportContext, SectionOutput, Skip
from ceiling.report.sections._axes import plain_log_ticks

KEY = "decode"
TITLE = "LLM decoding: the memory-bandwidth ceiling"

MODELS = ("llama-3-8b", "llama-2-13b", "mixtral-8x7b")
REFERENCE_GPUS = ("a100-80gb", "h100-sxm", "h200-sxm")
BATCHES = [1, 4, 16, 64, 256]
LONG_CONTEXT = 4096
FIGURE_MODEL = "llama-3-8b"
MEASURED_MODEL = "gpt:small"
MEASURED_BATCHES_QUICK = [1, 4, 16]
MEASURED_BATCHES_FULL = [1, 2, 4, 8, 16, 32]


def run(ctx: ReportContext, out: SectionOutput) -> None:
    from ceiling.hardware import catalog
    from ceiling.model import decode, transformer

    out.text(
        "Generating one token reads every weight of the model once (shared by the whole "
        "batch) plus each sequence's KV cache, but does only 2 FLOPs per weight per "
        "sequence. At small batches the step time is set by memory bandwidth, not by "
        "compute; batching reuses each weight read for more tokens until the step turns "
        "compute-bound at the crossover batch (the ridge point counted in tokens)."
    )
    devices = [(key, catalog.get_spec(key)) for key in REFERENCE_GPUS]
    local = _local(ctx, out)
    if local is not None:
        devices.insert(0, ("this machine", local.spec))
    setup = decode.DecodeSetup(weights_dtype="bf16", context=0)
    long_setup = decode.DecodeSetup(weights_dtype="bf16", context=LONG_CONTEXT - 1)
    rows, figures_data, keyed, unfit = [], {}, {}, []
    for model_name in MODELS:
        cfg = transformer.get_model(model_name)
        for label, spec in devices:
            ctx.step(f"decode ceiling of {model_name} on {label}")
            res, row, entry, why = _one_ceiling(decode, cfg, label, spec, setup, long_setup)
            rows.append(row)
            if res is None:
                unfit.append(why)
                continue
            keyed[f"{model_name}@{label}"] = entry
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
        "Decode ceilings, bf16 weights, a short prompt (weights dominate the bytes)",
        [
            "model",
            "device",
            "tokens/s at batch 1",
            "tokens/s at batch 64",
            "compute-bound from batch",
            "KV cache per token",
            f"largest batch at {LONG_CONTEXT:,} tokens of context",
        ],
        rows,
        note="Ceilings, not predictions of a real server: every weight read once per step, "
        "KV heads only, dense peaks, no allowance for activations or fragmentation. With a "
        "long context the KV cache is read too and grows with the batch, which keeps decode "
        "memory-bound longer.",
    )
    if local is not None:
        out.note(f"this machine: {local.spec.name}, ceilings from {local.source}")
    for line in unfit:
        out.note(line)
    _figure(ctx, out, decode, figures_data, setup)
    _measured(ctx, out, local)


def _one_ceiling(decode, cfg, label: str, spec, setup, long_setup):
    """(ceiling or None, table row, key figures, why it does not fit) of one model on one
    device: batch 1 and 64, the crossover batch, KV per token, the largest batch at
    LONG_CONTEXT."""
    try:
        res = decode.decode_ceiling(
            cfg, spec, BATCHES, _setup_for(decode, spec, setup), drop_unfit=True
        )
    except CeilingError as exc:
        row = [cfg.name, _name(label, spec), "does not fit", "", "", "", ""]
        return None, row, None, f"{cfg.name} on {_name(label, spec)}: {exc}"
    try:
        long = decode.decode_ceiling(cfg, spec, [1], _setup_for(decode, spec, long_setup))
        long_max = long.max_batch
    except CeilingError:
        long_max = 0
    by_batch = {r.batch: r for r in res.rows}
    b1, b64 = by_batch.get(1), by_batch.get(64)
    row = [
        cfg.name,
        _name(label, spec),
        f"{b1.tokens_per_s:,.1f}" if b1 else "—",
        f"{b64.tokens_per_s:,.0f} ({b64.bound})" if b64 else "does not fit",
        str(res.crossover_batch) if res.crossover_batch else "never",
        units.format_bytes(res.kv_bytes_per_token, binary=True),
        "unknown" if long_max is None else str(long_max),
    ]
    entry = {
        "batch1_tokens_per_s": b1.tokens_per_s if b1 else None,
        "batch64_tokens_per_s": b64.tokens_per_s if b64 else None,
        "crossover_batch": res.crossover_batch,
        "kv_bytes_per_token": res.kv_bytes_per_token,
        f"max_batch_at_{LONG_CONTEXT}_context": long_max,
    }
    return res, row, entry, None


def _local(ctx: ReportContext, out: SectionOutput):
    """This machine's ceilings as the decode measurement sees them (profile, else theory)."""
    from ceiling.measure import decode as measure

    try:
        ctx.profile()
    except Skip as exc:
        out.note(f"no machine profile for the local ceilings: {exc}")
    profile = str(ctx.profile_file) if ctx.profile_file else None
    ctx.step("this machine's decode ceiling")
    return measure.local_ceiling(measure.default_device(), profile)


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
    if label == "this machine":
        return "this machine"
    return spec.name.removeprefix("NVIDIA ")


def _figure(ctx, out, decode, figures_data, setup) -> None:
    """The catalog model on the first reference GPU: both roofs and the crossover."""
    ref = [(n, d) for n, d in figures_data.items() if not n.startswith("this machine")]
    if not ref:
        return
    from ceiling.report import decode_plot as plot

    _, (cfg, spec, res) = ref[len(ref) // 2]
    ctx.step("drawing the decode ceilings")
    grid = _grid(res.max_batch)
    curves = decode.roof_curves(cfg, spec, _setup_for(decode, spec, setup), grid)
    fig = plot.decode_figure(
        curves,
        f"{cfg.name} decode on {spec.name}: bf16 weights, short prompt",
        res.crossover_batch,
        rows=([r.batch for r in res.rows], [r.tokens_per_s for r in res.rows]),
    )
    plain_log_ticks(fig.axes[0], "x")
    out.figure(
        fig,
        f"{cfg.name} on {spec.name}: tokens/s (all sequences) against batch size. Below the "
        "crossover the memory roof binds, so a bigger batch gives more tokens/s almost for "
        "free; past it, compute does.",
    )


def _grid(max_batch: int | None) -> list[int]:
    top = max(2, min(max_batch or 4096, 4096))
    grid, b = [], 1
    while b <= top:
        grid.append(b)
        b *= 2
    return grid


def _measured(ctx: ReportContext, out: SectionOutput, local) -> None:
    """A small GPT-style decoder with a KV cache decodes for real here, beside its ceiling."""
    from ceiling.measure import decode as measure
    from ceiling.model import transformer

    cfg = transformer.get_model(MEASURED_MODEL)
    batches = MEASURED_BATCHES_QUICK if ctx.quick else MEASURED_BATCHES_FULL
    ctx.step(f"decoding with {MEASURED_MODEL} at batch {', '.join(map(str, batches))}")
    if local is None:
        return
    device = measure.default_device()
    run = measure.run_decode(
        cfg,
        batches,
        0,
        device,
        None,
        warmup_ms=100.0,
        budget_ms=300.0 if ctx.quick else 1000.0,
        on_batch=lambda b: ctx.step(f"decoding {MEASURED_MODEL} at batch {b}"),
    )
    comp = measure.compare_decode(run, local)
    _measured_table(out, comp, cfg)
    _measured_figure(out, comp, cfg, local, batches)


def _measured_table(out: SectionOutput, comp, cfg) -> None:
    c = comp.ceiling
    rows = []
    for r in comp.rows:
        rows.append(
            [
                r.batch,
                f"{r.measured_tokens_per_s:,.1f}",
                f"{r.ceiling_tokens_per_s:,.1f}",
                units.format_percent(r.share_of_ceiling),
                units.format_percent(r.mbu),
                units.format_percent(r.mfu),
                r.bound + (" (noisy)" if r.noisy else ""),
            ]
        )
    out.key_figures["measured"] = {
        "model": MEASURED_MODEL,
        "device": comp.run.device,
        "ceiling_source": comp.ceiling_source,
        "rows": [
            {
                "batch": r.batch,
                "measured_tokens_per_s": r.measured_tokens_per_s,
                "ceiling_tokens_per_s": r.ceiling_tokens_per_s,
                "mbu": r.mbu,
                "mfu": r.mfu,
            }
            for r in comp.rows
        ],
    }
    best = max(comp.rows, key=lambda r: r.share_of_ceiling)
    out.highlight(
        f"{MEASURED_MODEL} measured here, batch {best.batch}",
        f"{units.format_percent(best.share_of_ceiling)} of its ceiling",
    )
    out.table(
        f"Measured decoding of {MEASURED_MODEL} ({cfg.params_total / 1e6:.0f} M parameters, "
        f"random weights, {comp.run.dtype}) on this machine",
        ["batch", "measured tokens/s", "ceiling tokens/s", "of ceiling", "MBU", "MFU", "bound"],
        rows,
        note=f"Ceiling from {comp.ceiling_source}. MBU: bytes a step reads and writes per "
        f"second over the {units.format_bandwidth(c.bandwidth_bytes_per_s)} bandwidth; MFU: "
        f"FLOP/s over the {units.format_flops_per_s(c.peak_flops_per_s)} peak of that ceiling "
        "(a multiply-add counts 2). Noisy: the step times spread by more than 10 %.",
    )
    for n in comp.notes:
        out.note(n)


def _measured_figure(out: SectionOutput, comp, cfg, local, batches) -> None:
    from ceiling.model import decode
    from ceiling.report import decode_plot as plot

    c = comp.ceiling
    grid = _grid(max(batches) * 4)
    # the same byte count as the comparison (only what a step reads), so the drawn roofs,
    # the crossover and the tabulated ceilings agree
    setup = decode.DecodeSetup(
        weights_dtype=comp.run.dtype, context=comp.run.context, weights_counted="read"
    )
    curves = decode.roof_curves(cfg, local.spec, setup, grid)
    if comp.in_cache:
        curves["memory"] = []
        curves["ceiling"] = curves["compute"]
    fig = plot.decode_figure(
        curves,
        f"{MEASURED_MODEL} decode here, {comp.run.dtype}: {c.device}",
        None if comp.in_cache else c.crossover_batch_with_kv,
        rows=([r.batch for r in comp.rows], [r.ceiling_tokens_per_s for r in comp.rows]),
        measured=([r.batch for r in comp.rows], [r.measured_tokens_per_s for r in comp.rows]),
    )
    plain_log_ticks(fig.axes[0], "x")
    out.figure(
        fig,
        f"Real greedy decoding of {MEASURED_MODEL} on this machine (green squares) under its "
        "ceiling. The gap is what the framework, the Python loop and the kernels leave unused.",
    )
