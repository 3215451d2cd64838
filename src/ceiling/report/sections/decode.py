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
    from ceiling.report.sections._device import device_arguments
    from ceiling.report.work import DEMO_DECODE_MODEL, subject

    cfg, model = ctx.work.shape_model(DEMO_DECODE_MODEL)
    device_args, resolved, device = device_arguments(ctx.work)
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
    context = serving_context(cfg, ctx.work.seq)
    ctx.step(f"decode ceiling of {cfg.name} on {resolved.spec.name}")
    devices = [(resolved.spec.name, fitting(model.value, device_args, TENSOR_PARALLEL), False)]
    local = _local(ctx, out, model.value)
    if local is not None:
        devices.append(("this machine", local, True))
    rows, keyed = [], {}
    for label, res, here in devices:
        if isinstance(res, CeilingError):
            out.note(f"ceiling decode refuses: {res}")
        entry, row = _one_device(res, context)
        tp = f" × {entry['tp']} (tensor-parallel)" if entry and entry["tp"] > 1 else ""
        rows.append([(label if here else _short(label)) + tp + _dtype(res, devices), *row])
        if entry is not None:
            keyed[label] = entry
    out.key_figures["model"] = cfg.name
    out.key_figures["ceilings"] = keyed
    head = keyed.get(resolved.spec.name)
    if head is not None and head["expected_tokens_per_s"]:
        _headline(out, cfg, resolved.spec, head, model.demo and device.demo)
    answers = [r for _, r, _ in devices if not isinstance(r, CeilingError)]
    _table(out, cfg, answers[0] if answers else None, rows, context)
    kv = next((e["kv_bytes_per_token"] for e in keyed.values()), None)
    out.note(
        "ceiling: every weight read once per step at full bandwidth, dense peaks "
        f"({DECODE_CEILING_NOTE}); expected adds kernel launches, reachable bandwidth and "
        f"all-reduces ({DECODE_EXPECTED.line()})"
        + (f"; KV cache {units.format_bytes(kv, binary=True)} per token" if kv else "")
    )
    if local is not None and not isinstance(local, CeilingError):
        out.key_figures["local_source"] = local.device_source
    _figure(ctx, out, devices[0][1])
    _measured(ctx, out)


def decode_arguments(model: str, device: dict, tp: int) -> dict:
    """What the section asks `ceiling.decode` on `tp` devices: the ceilings at BATCHES at the
    call's default context and weights, the batches that do not fit flagged."""
    return {"model": model, **device, "batch": BATCHES, "tp": tp}


def fitting(model: str, device: dict, tps):
    """`ceiling.decode`'s result at the fewest tensor-parallel devices (of `tps`) that hold
    the weights, else the call's refusal (a CeilingError) on the most."""
    from ceiling.api.decode import decode
    from ceiling.report.sections._device import on_fewest

    return on_fewest(lambda tp: decode(**decode_arguments(model, device, tp)), tps)


def _dtype(res, devices) -> str:
    """` (fp32 weights)` beside a device whose answer has other weights than the first."""
    answers = [r for _, r, _ in devices if not isinstance(r, CeilingError)]
    if isinstance(res, CeilingError) or res is answers[0]:
        return ""
    w = res.ceiling.dtypes.weights
    return f" ({w} weights)" if w != answers[0].ceiling.dtypes.weights else ""


def _table(out: SectionOutput, cfg, res, rows: list, context: int) -> None:
    dtype = f"{res.ceiling.dtypes.weights} weights, " if res is not None else ""
    at = f"{res.setup.context:,} tokens of context: " if res is not None else ""
    out.table(
        f"{cfg.name}, {dtype}{at}tokens/s at batch 1",
        ["device", "ceiling", "expected", "compute-bound from batch",
         f"largest batch at {context:,} context"],
        rows,
        modelled=(1, 2, 3, 4),
    )  # fmt: skip


def _one_device(res, context: int):
    """(key figures or None, table cells) of `ceiling.decode`'s result on one device, or of
    its refusal (the note says why)."""
    from ceiling.errors import DoesNotFit

    if isinstance(res, CeilingError):
        return None, ["does not fit" if isinstance(res, DoesNotFit) else "refused", "—", "—", "—"]
    b1, exp = res.rows[0], res.expected[0]
    serving = res.serving_batch(context).to_json()
    long_max = serving["max_batch"]
    entry = {
        "tp": res.setup.tp,
        "ceiling_tokens_per_s": b1.tokens_per_s,
        "expected_tokens_per_s": exp.tokens_per_s,
        "expected_limited_by": exp.limited_by,
        "crossover_batch": res.ceiling.crossover_batch,
        "kv_bytes_per_token": res.ceiling.kv_bytes_per_token,
        "serving": serving,
        "rows": [r.to_json() for r in res.rows if r.fits],
        "accuracy": {k: b.to_json() for k, b in res.accuracy().items()},
    }
    row = [
        f"{b1.tokens_per_s:,.1f}",
        f"{exp.tokens_per_s:,.1f}",
        str(res.ceiling.crossover_batch) if res.ceiling.crossover_batch else "never",
        "unknown" if long_max is None else str(long_max),
    ]
    return entry, row


def serving_context(cfg, seq: int | None) -> int:
    """The context a serving batch is sized at: the user's --seq, else LONG_CONTEXT, at most
    the model's longest."""
    return min(seq or LONG_CONTEXT, cfg.max_seq)


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


def _local(ctx: ReportContext, out: SectionOutput, model: str):
    """`ceiling.decode` on this machine's profile (the report's, else the one it loads or
    measures), one device: its result or refusal; None without a profile."""
    try:
        profile = ctx.profile()
    except Skip as exc:
        out.note(f"no machine profile for the local ceilings: {exc}")
        return None
    ctx.step("this machine's decode ceiling")
    path = str(ctx.profile_file) if ctx.profile_file else None
    args = {"machine_profile": path, **local_dtypes(profile.device("cuda").peak_flops_per_s)}
    return fitting(model, args, (1,))


def local_dtypes(peaks: dict) -> dict:
    """On a device without a bf16 peak (most CPU profiles), the weights the call is given:
    fp16, else fp32, as its refusal of bf16 there asks (none else)."""
    if "bf16" in peaks:
        return {}
    dtype = next((d for d in ("fp16", "fp32") if d in peaks), None)
    return {} if dtype is None else {"weights": dtype}


def _short(name: str) -> str:
    from ceiling.render.legibility import short_device_name

    return short_device_name(name, 24)


def _figure(ctx, out, res) -> None:
    """The model on the target device: both roofs, the ceiling and the crossover (the
    result's own figure)."""
    if isinstance(res, CeilingError):  # the table's note says why
        return
    ctx.step("drawing the decode ceilings")
    fig = res.figure()
    plain_log_ticks(fig.axes[0], "x")
    out.figure(fig, "Modelled: below the crossover a bigger batch is almost free.")


def _measured_model(ctx: ReportContext):
    """(shape, name shown, argument of the call) of the user's model when it is small enough
    to decode here, else of the demo."""
    from ceiling.report.work import Choice, transformer

    cfg, model = ctx.work.shape_model(DEMO_MEASURED)
    if not model.demo and cfg.params_total <= MEASURE_MAX_PARAMS:
        return cfg, Choice(cfg.name, False), model.value
    return transformer(DEMO_MEASURED), Choice(DEMO_MEASURED, True), DEMO_MEASURED


def _measured(ctx: ReportContext, out: SectionOutput) -> None:
    """A small decoder with a KV cache decodes for real here, under its three roofs: the
    answer of `ceiling.decode(model, measure=True, ...)` (as `ceiling decode MODEL --measure`
    gives it), or its refusal."""
    from ceiling.api.decode import decode

    cfg, model, argument = _measured_model(ctx)
    if model.demo and ctx.work.model and not ctx.work.is_callable_model:
        out.text(
            f"{ctx.work.model_name()} is too large to decode on this machine (more than "
            f"{MEASURE_MAX_PARAMS / 1e6:,.0f} M parameters): the demo {cfg.name} decodes here "
            "instead, to show the three roofs."
        )
    batches = MEASURED_BATCHES_QUICK if ctx.quick else MEASURED_BATCHES_FULL
    ctx.step(f"decoding {cfg.name} at batch {', '.join(map(str, batches))}")
    profile = str(ctx.profile_file) if ctx.profile_file else None
    try:
        result = decode(argument, measure=True, batch=batches, machine_profile=profile)
    except CeilingError as exc:
        out.note(f"ceiling decode --measure refuses: {exc}")
        return
    _measured_table(out, result, model)
    _measured_figure(out, result, model)
    for n in result.comparison.notes:
        out.note(n)


def limited_by(row) -> str:
    """The one classification of a measured batch, for the table and the figure alike: the
    largest of its three roofs (compute, memory from DRAM or the cache, per-op floor)."""
    if row.expected_limited_by is None:
        return row.bound
    return {"launches": "overhead"}.get(row.expected_limited_by, row.expected_limited_by)


def _measured_table(out: SectionOutput, result, model) -> None:
    comp = result.comparison
    rows, keyed = [], []
    for r in comp.rows:
        bound, e = limited_by(r), r.expected_tokens_per_s
        rows.append(
            [
                r.batch,
                f"{r.measured_tokens_per_s:,.1f}",
                f"{e:,.1f}" if e is not None else "—",
                f"{r.ceiling_tokens_per_s:,.1f}",
                bound + (" (noisy)" if r.noisy else ""),
            ]
        )
        keyed.append(
            {
                "batch": r.batch,
                "measured_tokens_per_s": r.measured_tokens_per_s,
                "expected_tokens_per_s": e,
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


def _measured_figure(out: SectionOutput, result, model) -> None:
    from ceiling.render import decode_plot as plot

    cfg, comp = result.model, result.comparison
    rows = comp.rows
    if any(r.expected_tokens_per_s is None for r in rows):
        return
    memory_roof = [r.batch / r.expected_memory_s for r in rows]
    measured = [r.measured_tokens_per_s for r in rows]
    below = median(m / x for m, x in zip(memory_roof, measured, strict=True) if x > 0)
    out.key_figures["measured"]["below_memory_roof"] = below
    where = "this CPU" if comp.run.device == "cpu" else comp.run.device
    size = f"{cfg.params_total / 1e6:,.0f} M parameters"
    what = f"{model.value} (demo, {size})" if model.demo else model.value
    fig = plot.three_roofs_figure(
        [r.batch for r in rows],
        {
            "memory roof" + (" (cache)" if comp.in_cache else ""): memory_roof,
            "compute roof": [r.batch / r.expected_compute_s for r in rows],
            "overhead roof": [r.batch / r.expected_launch_s if r.expected_launch_s else None
                              for r in rows],
        },
        expected=[r.expected_tokens_per_s for r in rows],
        measured=measured,
        labels=[limited_by(r) for r in rows],
        title=f"{what} decoding on {where}",
    )  # fmt: skip
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
