"""`ceiling profile TARGET`: per-op FLOPs, bytes and time on the roofline, and MFU."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ceiling.cli.app import app
from ceiling.cli.output import (
    JsonOption,
    PlotOption,
    console,
    emit_json,
    table,
)

TOP_ROWS = 12


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
        "hfu": r.hfu,
        "mfu_vs_measured_peak": r.mfu_vs_measured_peak,
        "model_flops_per_step": r.model_flops_per_step,
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
        ax.annotate(p.name.removeprefix("aten."), (p.intensity, p.achieved_flops_per_s),
                    fontsize=6, xytext=(3, 2), textcoords="offset points")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved FLOP/s (multiply-add = 2)")
    ax.set_title(f"{r.target} on {r.ceiling.name} ({r.ceiling.peak_key})")
    ax.grid(True, which="both", alpha=0.3)
    plots.save(fig, path)


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
    if r.mfu is not None:
        rows.append(["MFU (model FLOPs / dense peak)", u.format_percent(r.mfu)])
        rows.append(["HFU (incl. recomputation)", u.format_percent(r.hfu)])
    if r.mfu_vs_measured_peak is not None:
        rows.append(["MFU vs measured matmul peak", u.format_percent(r.mfu_vs_measured_peak)])
    c.print(table("Step", ["", "value"], rows))
    total = r.op_time_s or 1.0
    op_rows = [
        [
            p.name.removeprefix("aten."),
            str(p.calls),
            u.format_flops(p.flops),
            u.format_bytes(p.bytes),
            u.format_time(p.time_s) if p.time_s else "—",
            u.format_percent(p.time_s / total) if p.time_s else "—",
            f"{p.intensity:.3g}" if p.intensity is not None else "—",
            p.bound,
            u.format_percent(p.fraction_of_attainable) if p.fraction_of_attainable else "—",
            "" if p.exact else "est.",
        ]
        for p in r.ops[:top]
    ]
    cols = ["op", "calls", "FLOPs", "bytes", "time", "of op time", "FLOP/B", "bound",
            "of roofline", ""]  # fmt: skip
    order = "time" if r.op_time_s else "FLOPs"
    c.print(table(f"Top ops by {order} (of {len(r.ops)})", cols, op_rows))
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
    c.print(table(f"Modules by {order}", ["module", "FLOPs", "bytes", "time", "share", "bound"],
                  mod_rows))  # fmt: skip
    c.print(
        "FLOPs: a multiply-add counts 2; model FLOPs = matmul + attention, causal attention "
        "at half; bytes: each input and output once (GB = 1e9 B); op times carry a sync per op"
    )
    for h in r.hints:
        c.print(f"hint: {h}")


@app.command(name="profile")
def profile_command(
    target: Annotated[
        str,
        typer.Argument(help="gpt:tiny, gpt:small, mlp, cnn, or module:callable (your model)."),
    ],
    train: Annotated[
        bool, typer.Option("--train", help="Profile a training step (forward, backward, AdamW).")
    ] = False,
    device: Annotated[
        str,
        typer.Option("--device", help="cpu, cuda, or meta (FLOPs and bytes only, nothing runs)."),
    ] = "cpu",
    dtype: Annotated[str, typer.Option("--dtype", help="fp32, tf32 (GPU), bf16, fp16.")] = "fp32",
    spec: Annotated[
        str | None, typer.Option("--spec", metavar="NAME", help="Use a catalog device's peaks.")
    ] = None,
    profile: Annotated[
        Path | None, typer.Option("--profile", metavar="PATH", help="Machine profile to use.")
    ] = None,
    batch: Annotated[int | None, typer.Option("--batch", help="Samples per step.")] = None,
    seq: Annotated[int | None, typer.Option("--seq", help="Sequence length (GPT).")] = None,
    steps: Annotated[int, typer.Option("--steps", help="Timed steps after warm-up.")] = 5,
    top: Annotated[int, typer.Option("--top", help="Rows in the op and module tables.")] = TOP_ROWS,
    json_out: JsonOption = False,
    plot: PlotOption = None,
) -> None:
    """Per-op FLOPs, bytes and time of a model on the roofline; MFU and HFU of its step."""
    from ceiling.errors import InvalidInput

    if plot is not None:
        from ceiling.report import plots

        plots.check_figure_path(plot)
    if profile is not None and spec is not None:
        raise InvalidInput("give --spec or --profile, not both")
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
        )
    if plot is not None:
        _roofline_figure(r, plot)
    if json_out:
        out = report_json(r)
        out["plot"] = str(plot) if plot else None
        emit_json(out)
        return
    render(r, top)
    if plot:
        console().print(f"figure: {plot}")
