"""`ceiling profile TARGET`: per-op FLOPs, bytes and time on the roofline, and MFU."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ceiling.cli.app import app
from ceiling.cli.device_options import ProfileOption, SpecOption
from ceiling.cli.output import (
    JsonOption,
    PlotOption,
    console,
    emit_json,
    table,
)
from ceiling.report import waterfall

TOP_ROWS = 12
TARGET_HELP = (
    "Built-ins: gpt:tiny, gpt:small, mlp, cnn. A catalog model (llama-2-7b, ...; "
    "`ceiling models`) or custom:layers=..,hidden=..,heads=.. is built as a decoder with "
    "random weights (too large to run here? add --device meta); hf:PATH (a Hugging Face "
    "config.json) is built by transformers with random weights. Your own: module:callable "
    "or path/file.py:callable, a function with no arguments returning {'model': nn.Module, "
    "'batch': tensor or tuple, optional 'forward': f(model, batch) (default model(*batch)), "
    "'loss_fn': f(output, batch) "
    "(default: the output's loss, or a scalar last element, else its mean), 'optimizer' "
    "(default AdamW), 'dataloader', 'tokens_per_step' (MFU per token; else per sample)}."
)


def _ops_json(rows) -> list[dict]:
    return [
        {
            "name": p.name,
            "category": p.category,
            "calls": p.calls,
            "flops": p.flops,
            "bytes": p.bytes,
            "time_s": p.time_s,
            "intensity_flop_per_byte": p.intensity,
            "attainable_flops_per_s": p.attainable_flops_per_s,
            "achieved_flops_per_s": p.achieved_flops_per_s,
            "roofline_time_s": p.roofline_time_s,
            "fraction_of_attainable": p.fraction_of_attainable,
            "bound": p.bound,
            "exact": p.exact,
        }
        for p in rows
    ]


def report_json(r) -> dict:
    c = r.ceiling
    return {
        "target": r.target,
        "device": r.device,
        "dtype": r.dtype,
        "tf32": r.tf32,
        "train": r.train,
        "samples_per_step": r.samples_per_step,
        "tokens_per_step": r.tokens_per_step,
        "step_s": r.step_s,
        "step_samples_s": r.step_samples_s,
        "tokens_per_s": r.tokens_per_s,
        "samples_per_s": r.samples_per_s,
        "mfu": r.mfu,
        "mfu_is_lower_bound": r.mfu_is_lower_bound,
        "unknown_ops": r.unknown_ops,
        "hfu": r.hfu,
        "mfu_vs_measured_peak": r.mfu_vs_measured_peak,
        "mfu_full_attention": r.mfu_full_attention,
        "roofline_step_s": r.roofline_step_s,
        "mfu_at_roofline": r.mfu_at_roofline,
        "recorded_step_s": r.recorded_step_s,
        "model_flops_per_step": r.model_flops_per_step,
        "model_flops_per_step_full_attention": r.model_flops_per_step_full_attention,
        "hardware_flops_per_step": r.hardware_flops_per_step,
        "recomputed_flops_per_step": r.recomputed_flops,
        "other_flops_per_step": r.other_flops_per_step,
        "analytic_flops_per_step": r.analytic_flops_per_step,
        "analytic_flops_per_step_full_attention": r.analytic_flops_per_step_full_attention,
        "analytic_vs_counted": r.analytic_vs_counted,
        "attention_convention": r.attention_convention,
        "flop_convention": r.flop_convention,
        "ceiling": {
            "name": c.name,
            "source": c.source,
            "kind": c.kind,
            "peak_dtype": c.peak_key,
            "peak_flops_per_s": c.peak_flops_per_s,
            "measured_peak_flops_per_s": c.measured_peak_flops_per_s,
            "roofline_peak_flops_per_s": c.roof_flops_per_s,
            "bandwidth_bytes_per_s": c.bandwidth_bytes_per_s,
        },
        "op_time_s": r.op_time_s,
        "ops": _ops_json(r.ops),
        "modules": _ops_json(r.modules),
        "categories": _ops_json(r.categories),
        "hints": r.hints,
        "roofs": waterfall.explanation_json(r.explanation),
        "method_version": r.method_version,
        "environment": r.environment,
    }


def _roofline_figure(r, path: Path) -> None:
    from ceiling.report import plots

    plt = plots.pyplot()
    peak, bw = r.ceiling.roof_flops_per_s, r.ceiling.bandwidth_bytes_per_s
    pts = [p for p in r.ops if p.intensity and p.achieved_flops_per_s]
    lo = min([p.intensity for p in pts] + [peak / bw / 100])
    hi = max([p.intensity for p in pts] + [peak / bw * 100])
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(peak, x * bw) for x in xs], color="k", lw=1.5, label="roofline")
    for p in pts[:40]:
        ax.plot(p.intensity, p.achieved_flops_per_s, "o", ms=4)
        ax.annotate(short_op_name(p.name), (p.intensity, p.achieved_flops_per_s),
                    fontsize=6, xytext=(3, 2), textcoords="offset points")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved FLOP/s (multiply-add = 2)")
    ax.set_title(f"{r.target} on {r.ceiling.name} ({r.ceiling.peak_key})")
    ax.grid(True, which="both", alpha=0.3)
    plots.save(fig, path)


_SHORT_NAMES = (
    ("aten.", ""),
    ("_scaled_dot_product_", "sdpa_"),
    ("_attention_for_cpu", "_cpu"),
    ("_attention", ""),
    ("native_", ""),
    ("_backward", "_bwd"),
    ("_bwd_data", "_bwd"),
)


def short_op_name(name: str) -> str:
    """aten._scaled_dot_product_flash_attention_for_cpu_backward -> sdpa_flash_cpu_bwd."""
    for long, short in _SHORT_NAMES:
        name = name.replace(long, short)
    return name.lstrip("_") or name


def _si(text: str, unit: str) -> str:
    """'12.9 GFLOP' -> '12.9 G' (the column header names the unit)."""
    return text.removesuffix(unit).rstrip() if text.endswith(unit) else text


def _compact_table(title: str, columns: list[str], rows: list[list[str]]):
    """A table without vertical rules, so that eight columns fit 80 characters."""
    from rich import box
    from rich.table import Table

    t = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        pad_edge=False,
        show_edge=False,
    )
    for i, col in enumerate(columns):
        # only the name column may fold when the terminal is narrow; numbers stay whole
        t.add_column(col, justify="left" if i == 0 else "right", no_wrap=i > 0, overflow="fold")
    for row in rows:
        t.add_row(*row)
    return t


def render(r, top: int) -> None:
    from ceiling import units as u

    c = console()
    what = "training step" if r.train else "forward pass"
    shape = f"{r.samples_per_step} samples"
    if r.tokens_per_step:
        shape += f", {r.tokens_per_step:,} tokens"
    ce = r.ceiling
    c.print(f"{r.target}: {what} on {r.device} ({r.dtype}{', TF32' if r.tf32 else ''}), {shape}")
    c.print(
        f"ceiling: {ce.name}, {ce.peak_key} dense peak {u.format_flops_per_s(ce.peak_flops_per_s)}"
        f", bandwidth {u.format_bandwidth(ce.bandwidth_bytes_per_s)} — {ce.source}"
    )
    if ce.measured_peak_flops_per_s:
        c.print(
            f"ops are placed under the measured {ce.peak_key} matmul peak "
            f"{u.format_flops_per_s(ce.measured_peak_flops_per_s)}"
        )
    rows = [
        ["step time (median)", u.format_time(r.step_s) if r.step_s else "— (meta: not run)"],
        ["model FLOPs per step (counted)", u.format_flops(r.model_flops_per_step)],
    ]
    if r.analytic_flops_per_step:
        rows.append(
            [
                "model FLOPs per step (6N + 12·l·a·d·s, causal half)",
                f"{u.format_flops(r.analytic_flops_per_step)} "
                f"({r.analytic_vs_counted * 100:+.1f} % vs counted)",
            ]
        )
    if r.recomputed_flops:
        rows.append(["recomputed FLOPs per step", u.format_flops(r.recomputed_flops)])
    if r.tokens_per_s:
        rows.append(["tokens/s", f"{r.tokens_per_s:,.0f}"])
    if r.samples_per_s:
        rows.append(["samples/s", f"{r.samples_per_s:,.1f}"])
    at_least = "at least " if r.mfu_is_lower_bound else ""
    if r.mfu is not None:
        rows.append(["MFU (model FLOPs / dense peak)", at_least + u.format_percent(r.mfu)])
        rows.append(["HFU (incl. recomputation)", at_least + u.format_percent(r.hfu)])
    if r.unknown_ops:
        rows.append(["ops with no FLOP formula (unknown)", ", ".join(r.unknown_ops)])
    if r.mfu_full_attention is not None:
        rows.append(
            [
                "MFU, attention in full (PaLM, as published)",
                at_least + u.format_percent(r.mfu_full_attention),
            ]
        )
    if r.mfu_vs_measured_peak is not None:
        rows.append(["MFU vs measured matmul peak", u.format_percent(r.mfu_vs_measured_peak)])
    if r.roofline_step_s:
        rows.append(
            [
                "step at the roofline (each op at its bound)",
                f"{u.format_time(r.roofline_step_s)}, MFU {u.format_percent(r.mfu_at_roofline)}",
            ]
        )
    c.print(table("Step", ["", "value"], rows))
    total = r.op_time_s or 1.0
    op_rows = [
        [
            f"{short_op_name(p.name)} ×{p.calls}",
            "?"
            if p.bound == "unknown"
            else ("" if p.exact else "~") + _si(u.format_flops(p.flops), "FLOP"),
            u.format_bytes(p.bytes),
            u.format_time(p.time_s) if p.time_s else "—",
            f"{p.time_s / total * 100:.0f} %" if p.time_s else "—",
            f"{p.intensity:.2g}" if p.intensity is not None else "—",
            p.bound,
            u.format_percent(p.fraction_of_attainable) if p.fraction_of_attainable else "—",
        ]
        for p in r.ops[:top]
    ]
    cols = ["op × calls", "FLOPs", "bytes", "time", "share", "FLOP/B", "bound", "roof"]
    order = "time" if r.op_time_s else "FLOPs"
    title = f"Top ops by {order} (of {len(r.ops)}; ~ estimated, ? no formula)"
    c.print(_compact_table(title, cols, op_rows))
    mod_rows = [
        [
            p.name,
            u.format_flops(p.flops),
            u.format_bytes(p.bytes),
            u.format_time(p.time_s) if p.time_s else "—",
            u.format_percent(p.time_s / total) if p.time_s else "—",
            p.bound,
        ]
        for p in r.modules[:top]
    ]
    mod_cols = ["module", "FLOPs", "bytes", "time", "share", "bound"]
    mod_title = f"Modules by {order} (a module includes its children)"
    c.print(_compact_table(mod_title, mod_cols, mod_rows))
    c.print(
        "FLOPs: a multiply-add counts 2; model FLOPs = matmul + attention, causal attention "
        "at the pairs its mask keeps (half of a square), decided from the mask for every "
        "kernel; bytes: each input and output once (GB = 1e9 B); op times carry a sync per op; "
        "roof: the op's time at its largest roof (compute, memory, per-op floor) / its "
        "measured time"
    )
    _render_explanation(c, r)
    for h in r.hints:
        c.print(f"hint: {h}")


def _render_explanation(c, r) -> None:
    e = r.explanation
    if e is None:
        return
    c.print(table("Three roofs: compute, memory, per-op overhead", ["", "value"],
                  waterfall.roofs_rows(e, r.step_s)))  # fmt: skip
    if e.waterfall and r.step_s:
        rows = waterfall.waterfall_rows(e.waterfall, r.step_s)
        cols = ["from the dense peak to the measured step", "time", "share", "what recovers it"]
        c.print(table("Waterfall (bars sum to the measured step)", cols, rows))


@app.command(name="profile")
def profile_command(
    target: Annotated[
        str,
        typer.Argument(help=TARGET_HELP),
    ],
    train: Annotated[
        bool, typer.Option("--train", help="Profile a training step (forward, backward, AdamW).")
    ] = False,
    device: Annotated[
        str,
        typer.Option("--device", help="cpu, cuda, or meta (FLOPs and bytes only, nothing runs)."),
    ] = "cpu",
    dtype: Annotated[str, typer.Option("--dtype", help="fp32, tf32 (GPU), bf16, fp16.")] = "fp32",
    spec: SpecOption = None,
    profile: ProfileOption = None,
    batch: Annotated[int | None, typer.Option("--batch", help="Samples per step.")] = None,
    seq: Annotated[int | None, typer.Option("--seq", help="Sequence length (GPT).")] = None,
    steps: Annotated[int, typer.Option("--steps", help="Timed steps after warm-up.")] = 5,
    top: Annotated[int, typer.Option("--top", help="Rows in the op and module tables.")] = TOP_ROWS,
    timeout: Annotated[
        float,
        typer.Option(help="Stop after this many seconds (a target that never returns)."),
    ] = 600.0,
    json_out: JsonOption = False,
    plot: PlotOption = None,
) -> None:
    """Per-op FLOPs, bytes and time of a model on the roofline; MFU and HFU of its step.

    A multiply-add counts 2 FLOPs. MFU counts matmul and attention FLOPs of forward and
    backward (causal attention at half; recomputation only in HFU) against the dense peak
    of the dtype in use; the ops' times carry a sync around each op."""
    from ceiling.errors import InvalidInput

    if plot is not None:
        from ceiling.report import plots

        plots.check_figure_path(plot)
    from ceiling.hardware.resolve import check_one_device

    check_one_device(spec, profile)
    if top < 1:
        raise InvalidInput(f"--top must be ≥ 1, got {top}")
    from rich.console import Console

    from ceiling.profile.run import profile_target

    with Console(stderr=True).status(f"profiling {target} …"):
        r = profile_target(
            target,
            train=train,
            device=device,
            dtype=dtype,
            spec=spec,
            profile=str(profile) if profile is not None else None,
            batch=batch,
            seq=seq,
            steps=steps,
            timeout_s=timeout,
        )
    figures = []
    if plot is not None:
        _roofline_figure(r, plot)
        figures.append(str(plot))
        e = r.explanation
        if e is not None and e.waterfall and r.step_s:
            path = waterfall.waterfall_path(plot)
            waterfall.waterfall_figure(e.waterfall, path, f"{r.target}: from peak to measured")
            figures.append(str(path))
    if json_out:
        out = report_json(r)
        out["plot"] = str(plot) if plot else None
        out["figures"] = figures
        emit_json(out)
        return
    render(r, top)
    for f in figures:
        console().print(f"figure: {f}")
