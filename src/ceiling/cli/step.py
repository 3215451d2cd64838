"""`ceiling step TARGET`: where a training step's time goes, and what more workers buy."""

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

SLOW_DATA_HELP = (
    "Demo: the dataset sleeps 4 ms per sample (a stand-in for slow decoding or "
    "augmentation), so the loader starves the model with 0 workers and catches up as "
    "workers are added."
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
    target: Annotated[
        str, typer.Argument(help="mlp, cnn, gpt:tiny, or module:callable with a 'dataloader'.")
    ] = "mlp",
    workers: Annotated[
        str, typer.Option("--workers", help="DataLoader worker counts to try, e.g. 0,2,4.")
    ] = "0,2,4",
    slow_data: Annotated[bool, typer.Option("--slow-data", help=SLOW_DATA_HELP)] = False,
    device: Annotated[str, typer.Option("--device", help="cpu or cuda.")] = "cpu",
    dtype: Annotated[str, typer.Option("--dtype", help="fp32, bf16, fp16.")] = "fp32",
    batch: Annotated[int | None, typer.Option("--batch", help="Samples per step.")] = None,
    steps: Annotated[int, typer.Option("--steps", help="Timed steps per worker count.")] = 8,
    json_out: JsonOption = False,
    plot: PlotOption = None,
) -> None:
    """Split a training step into data wait, host work and device compute, for 0..k loader
    workers; name the bottleneck and the Amdahl ceiling of the serial part."""
    counts = _workers(workers)
    if plot is not None:
        from ceiling.report import plots

        plots.check_figure_path(plot)
    from rich.console import Console

    from ceiling.profile.step_run import measure_step

    with Console(stderr=True).status(f"timing {target} steps …") as status:
        report = measure_step(
            target,
            workers=counts,
            slow_data=slow_data,
            device=device,
            dtype=dtype,
            batch=batch,
            steps=steps,
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
                "slow_data": slow_data,
                "data_delay_s_per_sample": report.data_delay_s_per_sample,
                "compute_s": report.compute_s,
                "rows": [_row_json(r) for r in report.rows],
                "bottleneck": report.rows[0].bottleneck,
                "verdict": report.verdict,
                "method": report.method,
                "method_version": report.method_version,
                "environment": report.environment,
                "plot": str(plot) if plot else None,
            }
        )
        return
    from ceiling import units as u

    c = console()
    rows = [
        [
            str(r.workers),
            u.format_time(r.step_s),
            u.format_time(r.data_s),
            u.format_time(r.host_s),
            u.format_time(r.compute_s),
            f"{r.loader_batches_per_s:.1f}" if r.loader_batches_per_s is not None else "—",
            f"{r.model_batches_per_s:.1f}",
            u.format_percent(r.serial_fraction),
            f"{r.amdahl_ceiling:.2f}×",
            r.bottleneck,
        ]
        for r in report.rows
    ]
    title = f"{report.target} training step on {report.device} ({report.dtype}), "
    title += f"{report.samples_per_step} samples per step"
    if slow_data:
        title += f", slow data ({report.data_delay_s_per_sample * 1e3:g} ms per sample)"
    cols = ["workers", "step", "data", "host", "compute", "loader/s", "model/s", "serial",
            "ceiling", "bottleneck"]  # fmt: skip
    c.print(table(title, cols, rows))
    c.print(
        "loader/s: batches/s the loader gives alone; model/s: batches/s the step consumes with "
        "data ready; ceiling: Amdahl speedup of the step on an infinitely fast device"
    )
    for line in report.verdict:
        c.print(line)
    c.print(f"method: {report.method}")
    if plot:
        c.print(f"figure: {plot}")
