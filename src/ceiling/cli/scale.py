"""`ceiling scale WORKLOAD --workers 1,2,4`: measure scaling on 1..N workers and fit it."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from ceiling.cli.app import app
from ceiling.cli.output import LIST_HELP, JsonOption, PlotOption, console, emit_json, joined
from ceiling.cli.params import RUNS_YOUR_CODE
from ceiling.errors import InvalidInput

WORKLOAD_HELP = (
    "synthetic (known serial fraction; sleeps), matmul (fixed matmul split across workers), "
    "python (pure-Python loop: holds the GIL), ddp (data-parallel training step of the "
    "built-in GPT), or your MODULE:CALLABLE, called once per step as callable(ctx)."
    + RUNS_YOUR_CODE
)


def parse_counts(text: str, what: str = "worker counts") -> list[int]:
    try:
        values = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError as exc:
        raise InvalidInput(
            f"{what} must be whole numbers separated by commas, got {text!r}"
        ) from exc
    if not values:
        raise InvalidInput(f"give at least one of the {what}, e.g. 1,2,4")
    if any(v < 1 for v in values):
        raise InvalidInput(f"{what} must be at least 1, got {text!r}")
    return sorted(set(values))


PredictOption = Annotated[
    list[str] | None, typer.Option(help=f"Worker counts to predict, {LIST_HELP}.")
]


def predicted_ns(predict: list[str] | None) -> list[float] | None:
    """The worker counts of --predict (comma lists or repeated), None when not given."""
    text = joined(predict)
    return [float(n) for n in parse_counts(text, "predicted worker counts")] if text else None


WorkersOption = Annotated[
    list[str] | None,
    typer.Option("--workers", "-w", help=f"Worker counts, {LIST_HELP} (default 1,2,4)."),
]
ModeOption = Annotated[
    str,
    typer.Option(help="strong: a fixed problem split N ways; weak: the problem grows with N."),
]
BackendOption = Annotated[
    str, typer.Option(help="processes (torch.distributed ranks) or threads (one process).")
]
StepsOption = Annotated[int, typer.Option(help="Measured steps per worker count.")]
WarmupOption = Annotated[int, typer.Option(help="Unmeasured steps first.")]
ImbalanceOption = Annotated[
    float,
    typer.Option(help="Give the last worker (1 + FRACTION)× the share (a straggler)."),
]
ThreadsOption = Annotated[
    int | None,
    typer.Option(help="torch threads per worker (default: cores ÷ largest N, at least 1)."),
]
SerialOption = Annotated[float, typer.Option(help="synthetic: serial fraction of the N = 1 step.")]
WorkMsOption = Annotated[
    float,
    typer.Option(
        help="synthetic: length of the N = 1 step in ms (the fit is checked on this work; "
        "barrier and all-reduce are timed apart)."
    ),
]
CommBytesOption = Annotated[
    str, typer.Option(help="synthetic: bytes all-reduced per step (e.g. 4MiB).")
]
SizeOption = Annotated[int, typer.Option(help="matmul: square size of the N = 1 matmul.")]
IterationsOption = Annotated[int, typer.Option(help="python: loop iterations of the N = 1 step.")]
ModelOption = Annotated[str, typer.Option(help="ddp: built-in GPT preset.")]
BatchOption = Annotated[
    int, typer.Option(help="ddp: global batch (strong) or per-worker batch (weak).")
]
SeqOption = Annotated[int, typer.Option(help="ddp: sequence length.")]
DeviceOption = Annotated[str, typer.Option(help="auto, cpu or cuda.")]
TimeoutOption = Annotated[
    float, typer.Option(help="Stop the run (and every worker) after this many seconds.")
]
StallTimeoutOption = Annotated[
    float,
    typer.Option(
        help="Stop every worker when none has made progress for this many seconds (a "
        "hung worker is named); local runs."
    ),
]


@app.command()
def scale(
    workload: Annotated[str, typer.Argument(help=WORKLOAD_HELP)],
    workers: WorkersOption = None,
    mode: ModeOption = "strong",
    backend: BackendOption = "processes",
    steps: StepsOption = 3,
    warmup: WarmupOption = 1,
    imbalance: ImbalanceOption = 0.0,
    threads_per_worker: ThreadsOption = None,
    serial: SerialOption = 0.1,
    work_ms: WorkMsOption = 500.0,
    comm_bytes: CommBytesOption = "0",
    size: SizeOption = 1024,
    iterations: IterationsOption = 2_000_000,
    model: ModelOption = "tiny",
    batch: BatchOption = 8,
    seq: SeqOption = 64,
    device: DeviceOption = "auto",
    timeout: TimeoutOption = 300.0,
    stall_timeout: StallTimeoutOption = 30.0,
    predict: PredictOption = None,
    json_out: JsonOption = False,
    plot: PlotOption = None,
) -> None:
    """Measure a workload on 1..N workers; fit Amdahl, Gustafson, Karp–Flatt and the USL.

    Processes are torch.distributed workers (gloo on CPU, NCCL on GPU) spawned here, at most
    8 per core; run the same command under `torchrun` to span machines (rank 0 prints).
    """
    from ceiling.api.scale import scale as measure_scaling

    counts = parse_counts(joined(workers) or "1,2,4")
    if plot is not None and len(counts) < 2:
        raise InvalidInput("a figure needs at least two worker counts, e.g. --workers 1,2")
    predict_text = joined(predict)
    predict_ns = parse_counts(predict_text, "predicted worker counts") if predict_text else None
    with _progress(workload, counts, backend) as on_progress:
        result = measure_scaling(
            workload,
            workers=counts,
            mode=mode,
            backend=backend,
            steps=steps,
            warmup=warmup,
            imbalance=imbalance,
            threads_per_worker=threads_per_worker,
            serial=serial,
            work_ms=work_ms,
            comm_bytes=comm_bytes,
            size=size,
            iterations=iterations,
            model=model,
            batch=batch,
            seq=seq,
            device=device,
            timeout_s=timeout,
            stall_timeout_s=stall_timeout,
            predict=predict_ns,
            on_progress=on_progress,
        )
    if result is None:  # a rank other than 0 under torchrun: rank 0 reports
        return
    summary = result.to_dict()
    if plot is not None and result.fit is not None:
        from ceiling.render import plots

        plots.save(result.figure(), plot)
        summary["plot"] = str(plot)
    if json_out:
        emit_json(summary)
        return
    _render(summary, plot)


@contextmanager
def _progress(workload: str, counts: list[int], backend: str):
    """A spinner on stderr (a terminal only) fed as `on_progress(message)`."""
    import sys

    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    err = Console(file=sys.stderr)
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not sys.stderr.isatty(),
    ) as progress:
        task = progress.add_task(f"{workload}: starting {max(counts)} {backend}", total=len(counts))

        def on_progress(msg: str) -> None:
            progress.update(task, description=f"{workload}: {msg}", advance=1)

        yield on_progress


def _render(summary: dict, plot: Path | None) -> None:
    from ceiling.render import scaling_summary

    c = console()
    title = (
        f"{summary['workload']}: {summary['mode']} scaling, {summary['backend']} "
        f"({summary.get('backend_engine', '')}, {summary.get('device', 'cpu')}, "
        f"{summary['threads_per_worker']} thread(s) per worker; step = median of "
        f"{summary['steps']})"
    )
    c.print(scaling_summary.points_table(summary["points"], title))
    c.print(f"timed: {summary['timed_note']}")
    if summary["fit"] is not None:
        for t in scaling_summary.fit_tables(summary["fit"]):
            c.print(t)
        c.print(f"verdict: {summary['fit']['verdict']}")
    for note in summary["notes"]:
        c.print(f"note: {note}")
    for w in summary["warnings"]:
        c.print(f"warning: {w}")
    if plot:
        c.print(f"figure: {plot}")
