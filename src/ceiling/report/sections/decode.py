"""LLM decoding: the ceiling and the expected speed of the user's model (else a demo) on the
target device and here, and a small model decoding for real here under its three roofs."""

from __future__ import annotations

from statistics import median

from ceiling import units
from ceiling.errors import CeilingError
from ceiling.report.compose import ReportContext, SectionOutput, Skip
from ceiling.report.sections._axes import plain_log_ticks
from ceiling.report.validated import DECODE_CEILING_NOTE, DECODE_EXPECTED

KEY = "decode"
TITLE = "LLM decoding: ceiling and expected speed"

BATCHES = [1, 4, 16, 64, 256]
LONG_CONTEXT = 4096
DEMO_MEASURED = "gpt:small"
TENSOR_PARALLEL = (1, 2, 4, 8)  # GPUs tried, fewest first, until the weights fit
MEASURE_MAX_PARAMS = 200e6  # a larger model of the user's is not decoded for real here
MEASURED_BATCHES_QUICK = [1, 16]
MEASURED_BATCHES_FULL = [1, 2, 4, 8, 16, 32]


def run(ctx: ReportContext, out: SectionOutput) -> None:
    from ceiling.model import decode
    from ceiling.report.work import DEMO_DECODE_MODEL, subject

    cfg, model = ctx.work.shape_model(DEMO_DECODE_MODEL)
    resolved, device = ctx.work.cluster_device()
    out.about(
        *subject(
            [
                (model, "--model", cfg.name),
                (device, "--spec", f"on {_short(resolved.spec.name)} and here"),
            ]
        )
    )
    out.text(
        "A decode step reads every weight once for the whole batch: memory-bound until the "
        "crossover batch."
    )
    local = _local(ctx, out)
    devices = [(resolved.spec.name, resolved.spec, False)]
    if local is not None:
        devices.append(("this machine", local.spec, True))
    # the context `ceiling decode` prices at by default, so the two give one answer
    setup = decode.DecodeSetup(weights_dtype="bf16", context=decode.default_context(cfg))
    context = serving_context(cfg, ctx.work.seq)
    rows, keyed = [], {}
    for label, spec, here in devices:
        ctx.step(f"decode ceiling of {cfg.name} on {label}")
        entry, row = _one_device(out, decode, cfg, spec, setup, here, context)
        tp = f" × {entry['tp']} (tensor-parallel)" if entry and entry["tp"] > 1 else ""
        rows.append([(label if here else _short(spec.name)) + tp, *row])
        if entry is not None:
            keyed[label] = entry
    out.key_figures["model"] = cfg.name
    out.key_figures["ceilings"] = keyed
    head = keyed.get(resolved.spec.name)
    if head is not None and head["expected_tokens_per_s"]:
        _headline(out, cfg, resolved.spec, head, model.demo and device.demo)
    out.table(
        f"{cfg.name}, bf16 weights, {setup.context:,} tokens of context: tokens/s at batch 1",
        ["device", "ceiling", "expected", "compute-bound from batch",
         f"largest batch at {context:,} context"],
        rows,
        modelled=(1, 2, 3, 4),
    )  # fmt: skip
    kv = next((e["kv_bytes_per_token"] for e in keyed.values()), None)
    out.note(
        "ceiling: every weight read once per step at full bandwidth, dense peaks "
        f"({DECODE_CEILING_NOTE}); expected adds kernel launches, reachable bandwidth and "
        f"all-reduces ({DECODE_EXPECTED.line()})"
        + (f"; KV cache {units.format_bytes(kv, binary=True)} per token" if kv else "")
    )
    if local is not None:
        out.key_figures["local_source"] = local.source
    _figure(ctx, out, decode, cfg, resolved.spec, setup)
    _measured(ctx, out, local)


def _fitting(out: SectionOutput, decode, cfg, spec, setup, tps):
    """The ceiling at the fewest tensor-parallel devices (of `tps`) that hold the weights."""
    import dataclasses

    why = None
    for tp in tps:
        s = dataclasses.replace(_setup_for(decode, spec, setup), tp=tp)
        try:
            return decode.decode_ceiling(cfg, spec, BATCHES, s, drop_unfit=True), s
        except CeilingError as exc:
            why = str(exc)
    out.note(why or "")
    return None, None


def _one_device(out: SectionOutput, decode, cfg, spec, setup, here: bool, context: int):
    """(key figures or None, table cells) of the model on one device; on a GPU too small
    for the weights, on the fewest tensor-parallel GPUs (up to 8) that hold them."""
    from ceiling.model.decode_expected import costs_for, expected_rows

    res, s = _fitting(out, decode, cfg, spec, setup, (1,) if here else TENSOR_PARALLEL)
    if res is None:
        return None, ["does not fit", "—", "—", "—"]
    b1 = res.rows[0]
    # as `ceiling decode` prices it: each GEMM at its tile utilisation on the device's SMs
    exp = expected_rows(res, cfg.layers, costs_for(spec), cfg=cfg, sms=getattr(spec, "sms", None))[
        0
    ]
    from ceiling.validation.features import decode_bands_of, decode_features_of

    features = decode_features_of(cfg, spec, res.dtypes.weights, s.tp)
    accuracy = {k: b.to_json() for k, b in decode_bands_of(features).items()}
    serving = serving_batch(decode, cfg, spec, s, context)
    long_max = serving["max_batch"]
    entry = {
        "tp": s.tp,
        "ceiling_tokens_per_s": b1.tokens_per_s,
        "expected_tokens_per_s": exp.tokens_per_s,
        "expected_limited_by": exp.limited_by,
        "crossover_batch": res.crossover_batch,
        "kv_bytes_per_token": res.kv_bytes_per_token,
        "serving": serving,
        "rows": [r.to_json() for r in res.rows],
        "accuracy": accuracy,
    }
    row = [
        f"{b1.tokens_per_s:,.1f}",
        f"{exp.tokens_per_s:,.1f}",
        str(res.crossover_batch) if res.crossover_batch else "never",
        "unknown" if long_max is None else str(long_max),
    ]
    return entry, row


def serving_context(cfg, seq: int | None) -> int:
    """The context a serving batch is sized at: the user's --seq, else LONG_CONTEXT, at most
    the model's longest."""
    return min(seq or LONG_CONTEXT, cfg.max_seq)


def serving_batch(decode, cfg, spec, setup, context: int) -> dict:
    """The largest batch worth serving with `context` tokens per sequence: the most KV
    caches that fit beside the weights, or the batch where decoding turns compute-bound,
    whichever comes first; with the expected speed there, in all and per sequence."""
    import dataclasses

    from ceiling.model.decode_expected import costs_for, expected_rows

    long = dataclasses.replace(setup, context=context - 1)
    out = {"context": context, "max_batch": 0, "crossover_batch": None, "batch": 0}
    try:
        at = decode.decode_ceiling(cfg, spec, [1], long)
    except CeilingError:  # not one sequence's cache fits, or the context is too long
        return out
    cap, cross = at.max_batch, at.crossover_batch_with_kv
    bounds = [b for b in (cap, cross) if b is not None]
    batch = min(bounds) if bounds else None  # None: no memory size, never compute-bound
    out.update(max_batch=cap, crossover_batch=cross, batch=batch)
    if batch is None or batch < 1:
        return out
    rows = expected_rows(decode.decode_ceiling(cfg, spec, [batch], long), cfg.layers,
                         costs_for(spec))  # fmt: skip
    out["bound_by"] = "compute" if cross is not None and cross == batch else "memory capacity"
    out["tokens_per_s"] = rows[0].tokens_per_s
    out["tokens_per_s_per_sequence"] = rows[0].tokens_per_s / batch
    return out


def _headline(out: SectionOutput, cfg, spec, head: dict, demo: bool) -> None:
    tp = f" × {head['tp']}" if head["tp"] > 1 else ""
    out.key_figures["headline"] = {
        "model": cfg.name,
        "device": _short(spec.name) + tp,
        "expected_tokens_per_s": head["expected_tokens_per_s"],
        "ceiling_tokens_per_s": head["ceiling_tokens_per_s"],
        "crossover_batch": head["crossover_batch"],
        "serving": head["serving"],
        "demo": demo,
    }
    name = _short(spec.name) + tp
    out.highlight(
        f"expected, batch 1, {name}",
        f"{head['expected_tokens_per_s']:,.0f} tokens/s",
        "modelled",
        DECODE_EXPECTED.short(),
    )
    out.highlight(
        f"ceiling, batch 1, {name}", f"{head['ceiling_tokens_per_s']:,.0f} tokens/s", "modelled"
    )


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


def _short(name: str) -> str:
    from ceiling.render.legibility import short_device_name

    return short_device_name(name, 24)


def _figure(ctx, out, decode, cfg, spec, setup) -> None:
    """The model on the target device: both roofs, the ceiling and the crossover."""
    from ceiling.render import decode_plot as plot

    res, s = _fitting(SectionOutput(), decode, cfg, spec, setup, TENSOR_PARALLEL)
    if res is None:  # the table's note says why
        return
    ctx.step("drawing the decode ceilings")
    grid = _grid(res.max_batch)
    fig = plot.decode_figure(
        decode.roof_curves(cfg, spec, s, grid),
        f"{cfg.name} on {_short(spec.name)}{f' × {s.tp}' if s.tp > 1 else ''} (modelled)",
        res.crossover_batch,
    )
    plain_log_ticks(fig.axes[0], "x")
    out.figure(fig, "Modelled: below the crossover a bigger batch is almost free.")


def _grid(max_batch: int | None) -> list[int]:
    top = max(2, min(max_batch or 4096, 4096))
    grid, b = [], 1
    while b <= top:
        grid.append(b)
        b *= 2
    return grid


def _measured_model(ctx: ReportContext):
    """The user's model when it is small enough to decode here, else the demo."""
    from ceiling.report.work import Choice, transformer

    cfg, model = ctx.work.shape_model(DEMO_MEASURED)
    if not model.demo and cfg.params_total <= MEASURE_MAX_PARAMS:
        return cfg, Choice(cfg.name, False)
    return transformer(DEMO_MEASURED), Choice(DEMO_MEASURED, True)


def _measured(ctx: ReportContext, out: SectionOutput, local) -> None:
    """A small decoder with a KV cache decodes for real here, under its three roofs."""
    from ceiling.measure import decode as measure
    from ceiling.measure.roofs import local_roofs

    if local is None:
        return
    cfg, model = _measured_model(ctx)
    if model.demo and ctx.work.model and not ctx.work.is_callable_model:
        out.text(
            f"{ctx.work.model_name()} is too large to decode on this machine (more than "
            f"{MEASURE_MAX_PARAMS / 1e6:,.0f} M parameters): the demo {cfg.name} decodes here "
            "instead, to show the three roofs."
        )
    batches = MEASURED_BATCHES_QUICK if ctx.quick else MEASURED_BATCHES_FULL
    device = measure.default_device()
    ctx.step(f"decoding {cfg.name} at batch {', '.join(map(str, batches))}")
    run = measure.run_decode(
        cfg,
        batches,
        0,
        device,
        None,
        warmup_ms=100.0,
        budget_ms=300.0 if ctx.quick else 1000.0,
        on_batch=lambda b: ctx.step(f"decoding {cfg.name} at batch {b}"),
    )
    profile = str(ctx.profile_file) if ctx.profile_file else None
    ctx.step("the per-op floor and the cache's bandwidth")
    # the cache's bandwidth is the memory roof only when the weights fit the cache
    fits = bool(local.cache_bytes) and run.weight_bytes <= local.cache_bytes
    roofs = local_roofs(device, local.cache_bytes if fits else None, profile)
    # each matmul shape timed alone sets its compute roof (full mode; quick: the peak)
    rates = None if ctx.quick else measure.decode_matmul_rates(run, local.cache_bytes)
    comp = measure.compare_decode(run, local, roofs, rates)
    expected = measure._expected(comp.ceiling, cfg, roofs, comp.in_cache, rates)
    _measured_table(out, comp, expected, model)
    _measured_figure(out, comp, expected, model, cfg)
    for n in comp.notes:
        out.note(n)


def limited_by(expected_row, measured_row) -> str:
    """The one classification of a measured batch, for the table and the figure alike: the
    largest of its three roofs (compute, memory from DRAM or the cache, per-op floor)."""
    if expected_row is None:
        return measured_row.bound
    return {"launches": "overhead"}.get(expected_row.limited_by, expected_row.limited_by)


def _measured_table(out: SectionOutput, comp, expected, model) -> None:
    rows, keyed = [], []
    for r, e in zip(comp.rows, expected, strict=True):
        bound = limited_by(e, r)
        rows.append(
            [
                r.batch,
                f"{r.measured_tokens_per_s:,.1f}",
                f"{e.tokens_per_s:,.1f}" if e else "—",
                f"{r.ceiling_tokens_per_s:,.1f}",
                bound + (" (noisy)" if r.noisy else ""),
            ]
        )
        keyed.append(
            {
                "batch": r.batch,
                "measured_tokens_per_s": r.measured_tokens_per_s,
                "expected_tokens_per_s": e.tokens_per_s if e else None,
                "ceiling_tokens_per_s": r.ceiling_tokens_per_s,
                "limited_by": bound,
                "mbu": r.mbu,
                "mfu": r.mfu,
            }
        )
    out.key_figures["measured"] = {
        "model": str(model.value),
        "demo": model.demo,
        "device": comp.run.device,
        "in_cache": comp.in_cache,
        "ceiling_source": comp.ceiling_source,
        "rows": keyed,
    }
    best = max(comp.rows, key=lambda r: r.share_of_ceiling)
    demo = " (demo)" if model.demo else ""
    out.highlight(
        f"{model.value}{demo} measured here, batch {best.batch}",
        f"{units.format_percent(best.share_of_ceiling)} of the ceiling",
    )
    out.table(
        f"{model.value}{demo} decoding here ({comp.run.dtype}): tokens/s",
        ["batch", "measured", "expected", "ceiling", "limited by"],
        rows,
        modelled=(2, 3, 4),
    )


def _measured_figure(out: SectionOutput, comp, expected, model, cfg) -> None:
    from ceiling.render import decode_plot as plot

    if any(e is None for e in expected):
        return
    memory_roof = [e.batch / e.memory_s for e in expected]
    measured = [r.measured_tokens_per_s for r in comp.rows]
    below = median(m / x for m, x in zip(memory_roof, measured, strict=True) if x > 0)
    out.key_figures["measured"]["below_memory_roof"] = below
    where = "this CPU" if comp.run.device == "cpu" else comp.run.device
    size = f"{cfg.params_total / 1e6:,.0f} M parameters"
    what = f"{model.value} (demo, {size})" if model.demo else model.value
    fig = plot.three_roofs_figure(
        [r.batch for r in comp.rows],
        {
            "memory roof" + (" (cache)" if comp.in_cache else ""): memory_roof,
            "compute roof": [e.batch / e.compute_s for e in expected],
            "overhead roof": [e.batch / e.launch_s if e.launch_s else None for e in expected],
        },
        expected=[e.tokens_per_s for e in expected],
        measured=measured,
        labels=[limited_by(e, r) for e, r in zip(expected, comp.rows, strict=True)],
        title=f"{what} decoding on {where}",
    )
    plain_log_ticks(fig.axes[0], "x")
    why = ""
    if model.demo:
        why = (
            f"Demo: {model.value} is a tiny model ({size}, {cfg.hidden} wide) on {where}: "
            "its small kernels and per-step Python keep it far from this machine's roofs, "
            f"{below:,.0f}× below the memory roof. "
        )
    out.figure(
        fig, why + "Each measured point is labelled with the roof that holds it (the table's)."
    )
