"""`ceiling profile TARGET`: per-op FLOPs, bytes and time on the roofline, and MFU."""

from __future__ import annotations

from typing import Annotated

import typer

from ceiling.api.profile import short_op_name
from ceiling.cli.app import app
from ceiling.cli.device_options import ProfileOption, SpecOption
from ceiling.cli.output import (
    JsonOption,
    PlotOption,
    console,
    emit_json,
    table,
)
from ceiling.cli.params import RUNS_YOUR_CODE
from ceiling.render import waterfall
from ceiling.render.terminal import unbreakable_width

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
    + RUNS_YOUR_CODE
)


def _si(text: str, unit: str) -> str:
    """'12.9 GFLOP' -> '12.9 G' (the column header names the unit)."""
    return text.removesuffix(unit).rstrip() if text.endswith(unit) else text


FOLDED_NAME_CHARS = 26  # the name column of a folded table: the rest of the 80 is numbers


def _compact_table(title: str, columns: list[str], rows: list[list[str]], fold: bool = False):
    """A table without vertical rules (one space between columns), so that eight columns
    fit 80 characters. `fold`: a long name folds onto more lines (a generated kernel's
    name lists every op it fused) rather than widening its column."""
    from rich import box
    from rich.table import Table

    t = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 0),
        show_edge=False,
    )
    # an op's name breaks between words (`sdpa_flash_cpu_bwd` / `×4`), never inside one
    name = max([unbreakable_width(w) for r in rows for w in r[0].split()], default=1)
    if fold:
        name = min(name, FOLDED_NAME_CHARS)
    for i, col in enumerate(columns):
        # only the name column may fold when the terminal is narrow; numbers stay whole
        t.add_column(
            col,
            justify="left" if i == 0 else "right",
            no_wrap=i > 0,
            overflow="fold",
            min_width=name if i == 0 else None,
        )
    for row in rows:
        t.add_row(*row)
    return t


def render(r, top: int) -> None:
    c = console()
    _render_header(c, r)
    c.print(table("Step", ["", "value"], _step_rows(r)))
    _render_ops(c, r, top)
    _render_modules(c, r, top)
    c.print(
        "FLOPs: a multiply-add counts 2; model FLOPs = matmul + attention, causal attention "
        "at the pairs its mask keeps (half of a square), decided from the mask for every "
        "kernel; bytes: each input and output once (GB = 1e9 B); op times carry a sync per op; "
        "roof: the op's time at its largest roof (compute, memory, per-op floor) / its "
        "measured time"
    )
    _render_explanation(c, r)
    if r.compiled:
        _render_kernels(c, r, top)
    for h in r.hints:
        c.print(f"hint: {h}")


def _render_header(c, r) -> None:
    """What ran where, and the ceiling its ops are placed under."""
    from ceiling import units as u

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


def _step_rows(r) -> list[list[str]]:
    """The step table: time, FLOPs counted and modelled, throughput, MFU and its variants."""
    from ceiling import units as u

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
    if r.mfu_of_achievable is not None:
        rows.append(
            ["of achievable (the measured matmul rate)", u.format_percent(r.mfu_of_achievable)]
        )
    if r.roofline_step_s:
        rows.append(
            [
                "step at the roofline (each op at its bound)",
                f"{u.format_time(r.roofline_step_s)}, MFU {u.format_percent(r.mfu_at_roofline)}",
            ]
        )
    return rows


def _render_ops(c, r, top: int) -> None:
    from ceiling import units as u

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


def _render_modules(c, r, top: int) -> None:
    from ceiling import units as u

    total = r.op_time_s or 1.0
    order = "time" if r.op_time_s else "FLOPs"
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


def _render_kernels(c, r, top: int) -> None:
    """The compiled step's kernels, and its step predicted from them (the op table above
    is its eager ops: the same FLOPs, not the kernels that run)."""
    from ceiling import units as u

    step = r.compiled_step
    if step is None or not step.kernels:
        c.print("compiled model: no compiled kernels seen in one profiled step")
        return

    def maybe(x, fmt):
        return "—" if x is None else fmt(x)

    def moved(k) -> str:
        if k.bytes_read is None or k.bytes_written is None:
            return "—"
        return u.format_bytes(k.bytes_read + k.bytes_written)

    rows = [
        [
            k.name,
            str(k.calls),
            moved(k),
            u.format_flops(k.flops) if k.flops else "—",
            u.format_time(k.time_s),
            maybe(k.predicted_s, u.format_time),
            k.bound or "—",
        ]
        for k in step.kernels[:top]
    ]
    cols = ["kernel", "calls", "bytes", "FLOPs", "time", "predicted", "bound"]
    title = (
        f"Compiled step's kernels, one profiled step (of {len(step.kernels)}; aten:: a "
        "library call, graph_/triton_ a generated one; bytes read and written apart in --json)"
    )
    c.print(_compact_table(title, cols, rows, fold=True))
    parts = [
        ["kernels' work at their roofs", u.format_time(step.kernel_s),
         u.format_time(step.predicted_kernel_s)],
        ["host: kernel calls, guards, wrappers", u.format_time(step.host_s),
         u.format_time(step.predicted_host_s)],
        ["eager ops outside the compiled graphs", u.format_time(step.outside_s),
         u.format_time(step.predicted_outside_s)],
        ["the profiled step's wall time", u.format_time(step.profiled_step_s),
         u.format_time(step.predicted_step_s)],
        ["step: median of the timed steps (no profiler)",
         maybe(step.step_s, u.format_time), u.format_time(step.predicted_step_s)],
    ]  # fmt: skip
    c.print(table("Compiled step: measured (one profiled step) vs predicted",
                  ["", "measured", "predicted"], parts))  # fmt: skip
    c.print(
        f"compiled frames per step: {step.frames} ({step.graph_breaks} graph break(s)); "
        "generated kernels: bytes each reads and writes as inductor scheduled them, FLOPs "
        "left at 0; extern kernels: FLOPs of the library call (a multiply-add counts 2)"
    )


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
    compile: Annotated[
        bool,
        typer.Option(
            "--compile",
            help="Run the model through torch.compile and list its compiled kernels "
            "(a CPU needs a C++ compiler).",
        ),
    ] = False,
) -> None:
    """Per-op FLOPs, bytes and time of a model on the roofline; MFU and HFU of its step.

    A multiply-add counts 2 FLOPs. MFU counts matmul and attention FLOPs of forward and
    backward (causal attention at half; recomputation only in HFU) against the dense peak
    of the dtype in use; the ops' times carry a sync around each op."""
    if plot is not None:
        from ceiling.render import plots

        plots.check_figure_path(plot)
    _check_options(spec, profile, top)
    result = _profiled(
        target, train=train, device=device, dtype=dtype, spec=spec, profile=profile,
        batch=batch, seq=seq, steps=steps, timeout_s=timeout, compile=compile,
    )  # fmt: skip
    r = result.report
    figures = []
    if plot is not None:
        from ceiling.render import plots

        plots.save(result.figure(), plot)
        figures.append(str(plot))
        e = r.explanation
        if e is not None and e.waterfall and r.step_s:
            path = waterfall.waterfall_path(plot)
            waterfall.waterfall_figure(e.waterfall, path, f"{r.target}: from peak to measured")
            figures.append(str(path))
    if json_out:
        out = result.to_dict()
        out["plot"] = str(plot) if plot else None
        out["figures"] = figures
        emit_json(out)
        return
    render(r, top)
    for f in figures:
        console().print(f"figure: {f}")


def _check_options(spec, profile, top: int) -> None:
    from ceiling.errors import InvalidInput
    from ceiling.hardware.resolve import check_one_device

    check_one_device(spec, profile)
    if top < 1:
        raise InvalidInput(f"--top must be ≥ 1, got {top}")


def _profiled(target: str, *, profile, **options):
    """The API's profile of the target, a spinner on stderr while it runs."""
    from rich.console import Console

    from ceiling.api.profile import profile_target

    with Console(stderr=True).status(f"profiling {target} …"):
        return profile_target(
            target, profile=str(profile) if profile is not None else None, **options
        )
