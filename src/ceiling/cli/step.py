"""`ceiling step TARGET`: where a training step's time goes, and what more workers buy."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ceiling.cli.app import app
from ceiling.cli.output import (
    LIST_HELP,
    JsonOption,
    PlotOption,
    console,
    emit_json,
    joined,
    table,
)
from ceiling.cli.params import RUNS_YOUR_CODE
from ceiling.report import waterfall

DEFAULT_WORKERS = "0,2,4"
SLOW_DATA_HELP = (
    "Demo: the built-in dataset sleeps 4 ms per sample (a stand-in for slow decoding or "
    "augmentation), so the loader starves the model with 0 workers and catches up as "
    "workers are added. The step runs on 1 torch thread unless --threads is given."
)
DELAY_HELP = "Per-sample sleep of the built-in dataset in ms (implies --slow-data)."
TARGET_HELP = (
    "mlp, cnn, gpt:tiny, gpt:small, or module:callable / file.py:callable: a function "
    "with no arguments returning {'model', 'dataloader' (a torch DataLoader; its dataset "
    "and batch size are reused with each worker count), optional 'forward' (model, batch), "
    "'loss_fn', 'optimizer', "
    "'tokens_per_step'}." + RUNS_YOUR_CODE
)


def _workers(text: str) -> tuple[int, ...]:
    from ceiling.errors import InvalidInput

    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InvalidInput(f"--workers takes counts like 0,2,4, got {text!r}") from None
    if not values or any(v < 0 for v in values):
        raise InvalidInput(f"--workers takes counts ≥ 0 like 0,2,4, got {text!r}")
    return values


def _row_json(r) -> dict:
    return {
        "workers": r.workers,
        "step_s": r.step_s,
        "data_s": r.data_s,
        "host_s": r.host_s,
        "compute_s": r.compute_s,
        "sync_s": r.sync_s,
        "data_share": r.data_share,
        "loader_batches_per_s": r.loader_batches_per_s,
        "model_batches_per_s": r.model_batches_per_s,
        "loader_limits": r.loader_limits,
        "serial_fraction": r.serial_fraction,
        "amdahl_ceiling": r.amdahl_ceiling,
        "speedup_2x_device": r.speedup_on_faster_device(2.0),
        "bottleneck": r.bottleneck,
    }


def _figure(report, path: Path) -> None:
    from ceiling.report import plots

    plt = plots.pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    labels = [str(r.workers) for r in report.rows]
    bottom = [0.0] * len(report.rows)
    for name, attr in (("data wait", "data_s"), ("host", "host_s"), ("compute", "compute_s")):
        values = [getattr(r, attr) * 1e3 for r in report.rows]
        ax.bar(labels, values, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_xlabel("DataLoader workers")
    ax.set_ylabel("time per step (ms)")
    ax.set_title(f"{report.target}: step time by loader workers")
    ax.legend()
    plots.save(fig, path)


@app.command(name="step")
def step_command(
    target: Annotated[str, typer.Argument(help=TARGET_HELP)] = "mlp",
    workers: Annotated[
        list[str] | None,
        typer.Option(
            "--workers",
            help=f"DataLoader worker counts to try, {LIST_HELP} (default {DEFAULT_WORKERS}).",
        ),
    ] = None,
    slow_data: Annotated[bool, typer.Option("--slow-data", help=SLOW_DATA_HELP)] = False,
    data_delay_ms: Annotated[
        float | None, typer.Option("--data-delay-ms", metavar="MS", help=DELAY_HELP)
    ] = None,
    device: Annotated[str, typer.Option("--device", help="cpu or cuda.")] = "cpu",
    dtype: Annotated[str, typer.Option("--dtype", help="fp32, bf16, fp16.")] = "fp32",
    batch: Annotated[int | None, typer.Option("--batch", help="Samples per step.")] = None,
    steps: Annotated[int, typer.Option("--steps", help="Timed steps per worker count.")] = 8,
    threads: Annotated[
        int | None,
        typer.Option(
            "--threads",
            help="torch intra-op threads for the step (default: torch's; 1 with --slow-data).",
        ),
    ] = None,
    json_out: JsonOption = False,
    plot: PlotOption = None,
) -> None:
    """Split a training step into data wait, host work and device compute, for 0..k loader
    workers; name the bottleneck and the Amdahl ceiling of the serial part."""
    counts = _workers(joined(workers) or DEFAULT_WORKERS)
    from rich.console import Console

    from ceiling.profile.step_run import measure_step

    with Console(stderr=True).status(f"timing {target} steps …") as status:
        report = measure_step(
            target,
            workers=counts,
            slow_data=slow_data,
            data_delay_s=data_delay_ms / 1e3 if data_delay_ms is not None else None,
            device=device,
            dtype=dtype,
            batch=batch,
            steps=steps,
            threads=threads,
            progress=lambda w: status.update(f"timing {target} steps with {w} loader workers …"),
        )
    if plot is not None:
        _figure(report, plot)
    if json_out:
        emit_json(
            {
                "target": report.target,
                "device": report.device,
                "dtype": report.dtype,
                "samples_per_step": report.samples_per_step,
                "slow_data": report.data_delay_s_per_sample > 0,
                "data_delay_s_per_sample": report.data_delay_s_per_sample,
                "compute_s": report.compute_s,
                "threads": report.threads,
                "typical_op_s": report.typical_op_s,
                "rows": [_row_json(r) for r in report.rows],
                "bottleneck": report.rows[0].bottleneck,
                "verdict": report.verdict,
                "waterfall_workers": report.waterfall_workers,
                "roofs": waterfall.explanation_json(report.explanation),
                "method": report.method,
                "method_version": report.method_version,
                "environment": report.environment,
                "plot": str(plot) if plot else None,
            }
        )
        return
    render(report)
    if plot:
        console().print(f"figure: {plot}")


def _cell(seconds: float, step_s: float) -> str:
    from ceiling import units as u

    return f"{u.format_time(seconds)} ({seconds / step_s * 100:.0f} %)"


def render(report) -> None:
    """One column per worker count, one row per part of the step (fits 80 columns)."""
    from ceiling import units as u

    c = console()
    rs = report.rows
    ceiling = [("unbounded" if r.amdahl_ceiling == float("inf") else f"{r.amdahl_ceiling:.2f}×")
               for r in rs]  # fmt: skip
    rows = [
        ["step time (mean)", *(u.format_time(r.step_s) for r in rs)],
        ["  waiting for data", *(_cell(r.data_s, r.step_s) for r in rs)],
        ["  host (Python, dispatch)", *(_cell(r.host_s, r.step_s) for r in rs)],
        ["  device compute", *(_cell(r.compute_s, r.step_s) for r in rs)],
        ["    of it, end-of-step sync", *(_cell(r.sync_s, r.step_s) for r in rs)],
        ["loader alone, batches/s",
         *(f"{r.loader_batches_per_s:.1f}" if r.loader_batches_per_s is not None else "—"
           for r in rs)],
        ["model uses, batches/s", *(f"{r.model_batches_per_s:.1f}" for r in rs)],
        ["serial part (data + host)", *(f"{r.serial_fraction * 100:.0f} %" for r in rs)],
        ["speedup, 2× faster device", *(f"{r.speedup_on_faster_device(2.0):.2f}×" for r in rs)],
        ["  ∞ fast device (Amdahl)", *ceiling],
        ["bottleneck", *(r.bottleneck for r in rs)],
    ]  # fmt: skip
    title = f"{report.target} training step on {report.device} ({report.dtype}), "
    n = report.threads
    title += f"{report.samples_per_step} samples per step, {n} torch thread{'s' if n != 1 else ''}"
    if report.data_delay_s_per_sample > 0:
        title += f", slow data ({report.data_delay_s_per_sample * 1e3:g} ms per sample)"
    cols = ["DataLoader workers", *(str(r.workers) for r in rs)]
    c.print(table(title, cols, rows))
    c.print(
        "loader alone: batches/s the DataLoader gives with no model; model uses: batches/s "
        "the step consumes when data is ready; end-of-step sync: the host waiting for the "
        "device to finish (large when the host runs ahead); only device compute shrinks on a "
        "faster device, so data + host is the serial part that caps it (Amdahl)"
    )
    for line in report.verdict:
        c.print(line)
    e = report.explanation
    if e is not None and e.waterfall:
        step_s = sum(b.seconds for b in e.waterfall)
        cols = [f"{report.waterfall_workers} workers: peak → measured step", "time", "share",
                "what recovers it"]  # fmt: skip
        c.print(table("Waterfall (bars sum to the step)", cols,
                      waterfall.waterfall_rows(e.waterfall, step_s)))  # fmt: skip
    c.print(f"method: {report.method}", style="dim")
