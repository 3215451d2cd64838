"""`ceiling step TARGET`: where a training step's time goes, and what more workers buy."""

from __future__ import annotations

from typing import Annotated

import typer

from ceiling.cli.app import app
from ceiling.cli.output import (
    LIST_HELP,
    JsonOption,
    PlotOption,
    console,
    figure_and_json,
    joined,
    table,
)
from ceiling.cli.params import RUNS_YOUR_CODE
from ceiling.render import waterfall

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
    return values  # ceiling.api.step checks them


@app.command(name="step")
def step_command(
    target: Annotated[str, typer.Argument(help=TARGET_HELP)] = "mlp",
    workers: Annotated[
        list[str] | None,
        typer.Option(
            "--workers",
            help=f"DataLoader worker counts to try, {LIST_HELP} (default 0,2,4).",
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
    counts = _workers(joined(workers) or "0,2,4")
    from rich.console import Console

    from ceiling.api.step import step as measure_step

    with Console(stderr=True).status(f"timing {target} steps …") as status:
        result = measure_step(
            target,
            workers=counts,
            slow_data=slow_data,
            data_delay_ms=data_delay_ms,
            device=device,
            dtype=dtype,
            batch=batch,
            steps=steps,
            threads=threads,
            progress=lambda w: status.update(f"timing {target} steps with {w} loader workers …"),
        )
    if figure_and_json(result, plot, json_out):
        return
    report = result.report
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
