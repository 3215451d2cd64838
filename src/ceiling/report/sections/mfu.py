"""MFU of a built-in training step, where its time goes, and the serial part of the step."""

from __future__ import annotations

from ceiling import units
from ceiling.report.compose import ReportContext, SectionOutput, Skip

KEY = "mfu"
TITLE = "MFU of a training step"

TARGET = "gpt:tiny"
STEPS_QUICK, STEPS_FULL = 2, 10


def run(ctx: ReportContext, out: SectionOutput) -> None:
    from ceiling.profile import run as run_mod

    device, dtype = _device_and_dtype()
    profile_path = _profile_path(ctx, out)
    ctx.step(f"training {TARGET} on {device} ({dtype}) and recording every op")
    rep = run_mod.profile_target(
        TARGET,
        train=True,
        device=device,
        dtype=dtype,
        profile=profile_path,
        steps=STEPS_QUICK if ctx.quick else STEPS_FULL,
    )
    out.text(
        "MFU (model FLOPs utilisation) is the share of the device's dense peak that the "
        "model's own arithmetic uses: model FLOPs per step / step time / peak. 40–50 % is "
        "good for training; below 20 % something other than arithmetic is the bottleneck. "
        f"Here a built-in GPT-style model ({TARGET}) trains for a few steps with random "
        "data, and every op is counted (FLOPs, bytes) and timed."
    )
    c = rep.ceiling
    peak_word = "theoretical" if c.kind == "cpu" else "datasheet"
    over = bool(c.measured_peak_flops_per_s and c.measured_peak_flops_per_s > c.peak_flops_per_s)
    _key_figures(out, rep, peak_word, over)
    out.table("Training step", ["", ""], _step_rows(rep, peak_word), note=rep.flop_convention)
    cats = [p for p in rep.categories if (p.time_s or 0) > 0 or p.flops > 0]
    _category_table(out, cats)
    if over:
        out.note(
            f"the measured matmul ceiling ({units.format_flops_per_s(c.measured_peak_flops_per_s)})"
            f" is above the {peak_word} peak ({units.format_flops_per_s(c.peak_flops_per_s)}): "
            "that peak assumes a lower clock than the cores really run at, so MFU against it "
            "reads too high; the share of the measured ceiling is the honest figure."
        )
    for hint in rep.hints:
        out.text(f"Hint: {hint}")
    if over:
        out.text(_verdict(rep.mfu_vs_measured_peak, "of the measured ceiling"))
    else:
        out.text(_verdict(rep.mfu))
    from ceiling.report import mfu_plot

    out.figure(
        mfu_plot.time_vs_flops_figure(
            [(p.name, p.time_s or 0.0, p.flops) for p in cats],
            f"{TARGET} training step on {c.name}",
        ),
        "Share of op time against share of FLOPs per op category: categories with much "
        "time and few FLOPs are memory- or dispatch-bound and are what fusing or batching fixes.",
    )
    _breakdown(ctx, out)


def _key_figures(out: SectionOutput, rep, peak_word: str, over: bool) -> None:
    c = rep.ceiling
    out.key(
        "mfu",
        rep.mfu,
        f"MFU, of the {peak_word} peak" + (" (reads high, see note)" if over else ""),
        units.format_percent(rep.mfu),
    )
    out.key("hfu", rep.hfu, "HFU (counts recompute)", units.format_percent(rep.hfu))
    if rep.mfu_vs_measured_peak is not None:
        out.key(
            "mfu_vs_measured_peak",
            rep.mfu_vs_measured_peak,
            "of the measured matmul ceiling",
            units.format_percent(rep.mfu_vs_measured_peak),
        )
    out.key("step_s", rep.step_s, "step time", units.format_time(rep.step_s))
    if rep.tokens_per_s:
        out.key("tokens_per_s", rep.tokens_per_s, "tokens/s", f"{rep.tokens_per_s:,.0f}")
    out.key_figures["model_flops_per_step"] = rep.model_flops_per_step
    out.key_figures["analytic_flops_per_step"] = rep.analytic_flops_per_step
    out.key_figures["peak_flops_per_s"] = c.peak_flops_per_s
    out.key_figures["device"] = rep.device
    out.key_figures["dtype"] = rep.dtype


def _step_rows(rep, peak_word: str) -> list[list[str]]:
    c = rep.ceiling
    how = " (cores × clock × FLOPs per cycle)" if c.kind == "cpu" else ""
    rows = [
        ["device and dtype", f"{c.name}, {rep.dtype}" + (" (TF32 on)" if rep.tf32 else "")],
        [
            "peak for MFU",
            f"{units.format_flops_per_s(c.peak_flops_per_s)}: {peak_word} dense "
            f"{c.peak_key} peak{how}",
        ],
    ]
    if c.measured_peak_flops_per_s:
        rows.append(
            [
                "measured matmul ceiling",
                f"{units.format_flops_per_s(c.measured_peak_flops_per_s)} ({c.peak_key}, best "
                "of the matmul benchmark)",
            ]
        )
    rows.append(["ceilings from", c.source])
    rows.append(["model FLOPs per step (counted)", units.format_flops(rep.model_flops_per_step)])
    if rep.analytic_flops_per_step:
        diff = rep.analytic_vs_counted
        rows.append(
            [
                "model FLOPs per step (6N + 12·l·h·s, causal half)",
                units.format_flops(rep.analytic_flops_per_step)
                + (f" ({diff * 100:+.1f} % vs counted)" if diff is not None else ""),
            ]
        )
    rows.append(["step time (median)", units.format_time(rep.step_s)])
    return rows


def _category_table(out: SectionOutput, cats) -> None:
    total_t = sum(p.time_s or 0.0 for p in cats) or 1.0
    total_f = sum(p.flops for p in cats) or 1.0
    out.table(
        "Where the step's op time goes, by op category",
        ["category", "time", "share of time", "share of FLOPs", "achieved", "bound"],
        [
            [
                p.name,
                units.format_time(p.time_s or 0.0),
                units.format_percent((p.time_s or 0.0) / total_t),
                units.format_percent(p.flops / total_f),
                units.format_flops_per_s(p.achieved_flops_per_s) if p.achieved_flops_per_s else "—",
                p.bound,
            ]
            for p in sorted(cats, key=lambda p: -(p.time_s or 0.0))
        ],
        note="Op times are taken in a separate step with a synchronisation after every op, "
        "which slows the step; shares are what matters here.",
    )


def _verdict(mfu: float, what: str = "MFU") -> str:
    if mfu >= 0.4:
        return f"At {mfu * 100:.0f} % {what} the step is dominated by arithmetic at a good rate."
    if mfu >= 0.2:
        return f"At {mfu * 100:.0f} % {what} there is room: the table shows where the rest goes."
    return (
        f"At {mfu * 100:.0f} % {what} something other than arithmetic dominates: look at the "
        "memory-bound categories and the per-op overhead."
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


def _breakdown(ctx: ReportContext, out: SectionOutput) -> None:
    """Where the step's wall time goes (data, host, device) and the Amdahl ceiling it implies."""
    if ctx.quick:
        out.note(
            "step breakdown (data wait, host, device compute) and its Amdahl ceiling: in "
            f"--full mode, or `ceiling step {TARGET}`"
        )
        return
    from ceiling.profile import step_run

    device, dtype = _device_and_dtype()
    ctx.step(f"step breakdown of {TARGET} with 0 and 2 loader workers")
    rep = step_run.measure_step(TARGET, workers=(0, 2), device=device, dtype=dtype)
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
