"""MFU of a training step (the user's model, else a demo), the waterfall from the dense peak
to the measured step, and the serial part of the step."""

from __future__ import annotations

from ceiling import units
from ceiling.errors import CeilingError
from ceiling.report.compose import ReportContext, SectionOutput, Skip

KEY = "mfu"
TITLE = "MFU of a training step, from peak to achieved"

STEPS_QUICK, STEPS_FULL = 2, 10
SMALL_BAR = 0.05  # a bar under this share of the step shows no remedy on the page
DEMO_QUICK_SEQ = 128  # the demo's sequences in quick mode: the same story in half the time


def run(ctx: ReportContext, out: SectionOutput) -> None:
    from ceiling.errors import InvalidInput, UnknownName
    from ceiling.report.work import subject

    choice = ctx.work.train_model()
    target = str(choice.value)
    name = ctx.work.model_name() if not choice.demo else target
    out.key_figures["seq"] = ctx.work.seq
    out.key_figures["model"] = name
    device, dtype = _device_and_dtype()
    profile_path = _profile_path(ctx, out)
    ctx.step(f"training {target} on {device} ({dtype}) and recording every op")
    try:
        seq = ctx.work.seq or (DEMO_QUICK_SEQ if choice.demo and ctx.quick else None)
        rep = _profile(ctx, target, device, dtype, profile_path, seq)
    except (InvalidInput, UnknownName):
        raise
    except CeilingError as exc:  # does not fit or run here: count it on the meta device
        ctx.step(f"counting {name} on the meta device")
        out.about(*subject([(choice, "--model", f"{name}, counted on the meta device")]))
        _counted_only(ctx, out, target, str(exc))
        return
    out.about(*subject([(choice, "--model", f"{name}, trained here")]))
    c = rep.ceiling
    peak_word = "theoretical" if c.kind == "cpu" else "datasheet"
    over = bool(c.measured_peak_flops_per_s and c.measured_peak_flops_per_s > c.peak_flops_per_s)
    _key_figures(out, rep, peak_word)
    _waterfall(out, rep, target)
    out.note(_method(rep, peak_word))
    if over:
        out.note(
            f"the measured matmul rate is above the {peak_word} peak, so MFU against that "
            "peak reads high; the share of what was achieved (of achievable) is beside it"
        )
    _breakdown(ctx, out, target)


def _profile(ctx: ReportContext, target: str, device: str, dtype: str, profile_path, seq):
    from ceiling.api.profile import profile_target

    # the call `ceiling profile TARGET --train` makes
    return profile_target(
        target,
        train=True,
        device=device,
        dtype=dtype,
        profile=profile_path,
        seq=seq,
        steps=STEPS_QUICK if ctx.quick else STEPS_FULL,
    ).report


def _counted_only(ctx: ReportContext, out: SectionOutput, target: str, why: str) -> None:
    from ceiling.api.profile import profile_target

    spec = ctx.work.spec or "h100-sxm"
    rep = profile_target(
        target, train=True, device="meta", dtype="bf16", spec=spec, seq=ctx.work.seq, steps=1
    ).report
    out.key_figures["model_flops_per_step"] = rep.model_flops_per_step
    out.key_figures["ran_here"] = False
    out.highlight(
        "model FLOPs per step (counted)", units.format_flops(rep.model_flops_per_step), "modelled"
    )
    out.text(f"Not trained here: {why}.")


def _key_figures(out: SectionOutput, rep, peak_word: str) -> None:
    c = rep.ceiling
    out.key_figures["ran_here"] = True
    # one MFU (model.mfu): against the dense datasheet (theoretical, CPU) peak, always; the
    # share of the measured matmul rate stands beside it as "of achievable"
    out.key("mfu", rep.mfu, f"MFU, of the {peak_word} peak", units.format_percent(rep.mfu))
    if rep.mfu_of_achievable is not None:
        out.key("mfu_of_achievable", rep.mfu_of_achievable, "of achievable (measured matmuls)",
                units.format_percent(rep.mfu_of_achievable))  # fmt: skip
    else:
        out.key_figures["mfu_of_achievable"] = None
    out.key_figures["hfu"] = rep.hfu
    out.key("step_s", rep.step_s, "step time", units.format_time(rep.step_s))
    if rep.tokens_per_s:
        out.key("tokens_per_s", rep.tokens_per_s, "tokens/s", f"{rep.tokens_per_s:,.0f}")
    out.key_figures["model_flops_per_step"] = rep.model_flops_per_step
    out.key_figures["analytic_flops_per_step"] = rep.analytic_flops_per_step
    out.key_figures["peak_flops_per_s"] = c.peak_flops_per_s
    out.key_figures["measured_peak_flops_per_s"] = c.measured_peak_flops_per_s
    out.key_figures["ceilings_from"] = c.source
    out.key_figures["device"] = rep.device
    out.key_figures["dtype"] = rep.dtype
    out.key_figures["hints"] = list(rep.hints)
    out.key_figures["categories"] = [
        {"name": p.name, "time_s": p.time_s, "flops": p.flops, "bound": p.bound}
        for p in rep.categories
    ]


def _waterfall(out: SectionOutput, rep, target: str) -> None:
    """Peak → achieved: bars that sum to the measured step, each with what recovers it."""
    from ceiling.render import waterfall

    e = rep.explanation
    if e is None or not e.waterfall or not rep.step_s:
        out.note("waterfall: this step was not explained (no op ran)")
        return
    bars = e.waterfall
    step = rep.step_s
    out.key_figures["waterfall"] = [
        {"name": b.name, "seconds": b.seconds, "share": b.seconds / step, "recover": b.recover}
        for b in bars
    ]
    out.key_figures["roofs"] = waterfall.explanation_json(e)
    losses = [b for b in bars[1:] if b.seconds > 0]
    if losses:
        worst = max(losses, key=lambda b: b.seconds)
        out.key_figures["largest_loss"] = {
            "name": worst.name,
            "seconds": worst.seconds,
            "share": worst.seconds / rep.step_s,
            "recover": worst.recover,
        }
    rows = waterfall.waterfall_rows(bars, rep.step_s)
    for row, b in zip(rows, bars, strict=True):
        if abs(b.seconds) < SMALL_BAR * rep.step_s:  # the remedy of a small bar: in the JSON
            row[-1] = "—"
    out.table(
        "From the dense peak to the measured step (the bars sum to it)",
        ["", "time", "share", "what would win it back"],
        rows,
    )
    out.figure(
        waterfall.waterfall_fig(bars, f"{target}: from peak to measured"),
        "Green: the model's FLOPs at the dense peak; red: time lost; blue: a negative bar, "
        "where the roofs over-predict.",
    )


def _method(rep, peak_word: str) -> str:
    c = rep.ceiling
    analytic = ""
    if rep.analytic_flops_per_step and rep.analytic_vs_counted is not None:
        analytic = f" (6N + 12·l·h·s: {rep.analytic_vs_counted * 100:+.1f} %)"
    measured = (
        f", measured matmul ceiling {units.format_flops_per_s(c.measured_peak_flops_per_s)}"
        if c.measured_peak_flops_per_s
        else ""
    )
    return (
        f"{c.name}, {rep.dtype}; MFU = model FLOPs / step time / {peak_word} dense peak "
        f"{units.format_flops_per_s(c.peak_flops_per_s)}{measured}; "
        f"{units.format_flops(rep.model_flops_per_step)} per step counted{analytic}; op times "
        "from a step synchronised after each op, scaled to the plain step"
    )


def _device_and_dtype() -> tuple[str, str]:
    try:
        import torch

        if torch.cuda.is_available():
            return "cuda", "bf16"
    except ImportError:
        raise Skip("PyTorch is not installed") from None
    return "cpu", "fp32"


def _profile_path(ctx: ReportContext, out: SectionOutput) -> str | None:
    try:
        ctx.profile()
    except Skip:
        return None
    return str(ctx.profile_file) if ctx.profile_file else None


def _breakdown(ctx: ReportContext, out: SectionOutput, target: str) -> None:
    """Where the step's wall time goes (data, host, device) and the Amdahl ceiling it implies."""
    if ctx.quick:
        out.note(f"data wait and host time: --full, or `ceiling step {target}`")
        return
    from ceiling.api.step import step

    device, dtype = _device_and_dtype()
    ctx.step(f"step breakdown of {target} with 0 and 2 loader workers")
    # the call `ceiling step TARGET --workers 0,2` makes
    rep = step(target, workers=(0, 2), device=device, dtype=dtype).report
    rows = []
    for r in rep.rows:
        rows.append(
            [
                r.workers,
                units.format_time(r.step_s),
                units.format_percent(r.data_s / r.step_s),
                units.format_percent(r.host_s / r.step_s),
                units.format_percent(r.compute_s / r.step_s),
                units.format_percent(r.serial_fraction),
                f"{r.amdahl_ceiling:.2f}×",
                r.bottleneck,
            ]
        )
    first = rep.rows[0]
    out.key_figures["step_serial_fraction"] = first.serial_fraction
    out.key_figures["step_amdahl_ceiling"] = first.amdahl_ceiling
    out.highlight("faster device could give at most", f"{first.amdahl_ceiling:.2f}×")
    out.table(
        "Where the step's wall time goes, by data-loader workers",
        [
            "loader workers",
            "step",
            "data wait",
            "host",
            "device compute",
            "serial part",
            "Amdahl ceiling",
            "bottleneck",
        ],
        rows,
        note=rep.method,
    )
    for line in rep.verdict:
        out.text(line[0].upper() + line[1:] + ("" if line.endswith(".") else "."))
