"""`ceiling bench`: measure this machine's ceilings (matmul, memory, overhead, transfer)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from ceiling.cli.app import app
from ceiling.cli.output import LIST_HELP, JsonOption, comma_list, console, emit_json, joined, table
from ceiling.errors import InvalidInput

bench_app = typer.Typer(
    name="bench",
    help=(
        "Measure this machine's real ceilings and save them as the machine profile.\n\n"
        "Without a subcommand: matmul, memory, overhead and transfer in turn; the profile is "
        "saved to $CEILING_PROFILE or ~/.cache/ceiling/profile-<host>.json (and --save PATH), "
        "where roofline, decode, plan and report find it. Each measurement goes to a journal "
        "beside the profile (PROFILE.<time>.journal.jsonl) as it finishes, kept when the run "
        "is killed or the disk fills. Ctrl-C stops the run, prints and keeps what finished. "
        "FLOPs count a multiply-add as 2; GB = 1e9 bytes."
    ),
    no_args_is_help=False,
    invoke_without_command=True,
    rich_markup_mode=None,
)
app.add_typer(bench_app, name="bench")

DeviceOption = Annotated[
    str | None,
    typer.Option(
        "--device", metavar="DEVICE", help="cpu, cuda or cuda:N (default: the GPU if there is one)."
    ),
]
QuickOption = Annotated[
    bool, typer.Option("--quick", help="Fewer sizes and shorter time budgets (< 1 min).")
]


@contextlib.contextmanager
def _progress(total: int | None = None) -> Iterator:
    """A rich progress bar on stderr; yields a callback that names the step now starting.

    With `total` the bar fills one step per callback (the previous step has finished by
    then); a log file or a pipe gets no redraws and no bar.
    """
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    err = Console(stderr=True)
    if not err.is_terminal:
        yield None
        return
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    )
    started = False

    def step(text: str) -> None:
        nonlocal started
        progress.update(task, description=text, advance=1 if started else 0)
        started = True

    with progress:
        task = progress.add_task("starting", total=total or None)
        yield step


def _run_one(device: str | None, quick: bool, json_out: bool, step: str) -> None:
    """Run one suite step (memory, overhead, transfer) with progress; Ctrl-C keeps what
    finished."""
    from ceiling.api import bench as api_bench

    part = step.removeprefix("bench_")
    result = getattr(api_bench, part)(device=device, quick=quick, progress=_progress)
    _finish(result.report, json_out, rerun=f"ceiling bench {part}")


def _print_report(report) -> None:
    from ceiling.render import bench_tables

    c = console()
    if report.matmul:
        c.print(bench_tables.matmul_table(report, table))
    for dtype, reason in report.matmul_skipped.items():
        c.print(f"matmul {dtype}: skipped, {reason}")
    for r in report.matmul:
        if not r.native:
            c.print(f"matmul {r.dtype}: not native here, emulated; measured at a small size")
    for line in bench_tables.matmul_notes(report):
        c.print(line)
    if report.matmul_blas:
        c.print(bench_tables.blas_table(report, table))
    if report.memory:
        c.print(bench_tables.memory_table(report, table))
    if report.naive_triad is not None and report.memory:
        triad = next((r for r in report.memory if r.kernel == "triad"), None)
        if triad:
            c.print(
                f"single-pass triad {triad.best_gbps:.3g} GB/s vs naive numpy a = b + s*c "
                f"{report.naive_triad.best_gbps:.3g} GB/s (its temporary costs an extra pass)"
            )
    if report.overhead is not None:
        from ceiling.render.bench_tables import overhead_lines

        for line in overhead_lines(report.overhead):
            c.print(line)
    if report.transfer:
        c.print(bench_tables.transfer_table(report, table))
    if report.transfer_skipped:
        c.print(f"transfer: skipped, {report.transfer_skipped}")
    if report.datasheet_note:
        c.print(f"note: {report.datasheet_note}")
    if report.matmul or report.memory:
        for line in bench_tables.telemetry_lines(report.telemetry_summary()):
            c.print(line)


def _finish(report, json_out: bool, extra: dict | None = None, rerun: str = "") -> None:
    if json_out:
        emit_json({**report.to_json(), **(extra or {})})
    else:
        _print_report(report)
        extra = dict(extra or {})
        for path, why in extra.pop("profile_kept", {}).items():
            console().print(f"not saved to {path}: {why}", soft_wrap=True)
        for key, value in extra.items():
            if value:
                console().print(f"{key.replace('_', ' ')}: {value}")
        if report.busy:
            console().print(
                f"busy machine: {'; '.join(report.busy_reasons)}. These figures read low and "
                f"vary, so no verdict is drawn from them: run `{rerun}` again on an idle machine.",
                soft_wrap=True,
            )
    if report.interrupted:
        print("interrupted: showing what finished", file=sys.stderr)
        raise typer.Exit(130)


def _parse_sizes(text: str | None) -> list[int] | None:
    if not text:
        return None
    from ceiling.units import parse_count

    out = []
    for part in text.split(","):
        try:
            value = parse_count(part.strip())
        except InvalidInput:
            raise InvalidInput(
                f"--sizes: cannot read {part.strip()!r} as a whole number (e.g. 1024,2048)"
            ) from None
        if value <= 0:
            raise InvalidInput(f"--sizes: sizes must be positive, got {value}")
        out.append(value)
    return out


@bench_app.callback()
def bench_all(
    ctx: typer.Context,
    quick: QuickOption = False,
    device: DeviceOption = None,
    save: Annotated[
        Path | None,
        typer.Option("--save", metavar="PATH", help="Also write the profile JSON to PATH."),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Save the profile even when the machine was busy while measuring (by default "
            "a busy run replaces no profile measured on an idle machine).",
        ),
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Run every benchmark and save the machine profile (used by roofline and the models)."""
    if ctx.invoked_subcommand is not None:
        return
    from ceiling.api import bench as api_bench

    result = api_bench.machine(
        device=device, quick=quick, save=save, force=force, progress=_progress
    )
    _finish(result.report, json_out, result.extra, rerun="ceiling bench")


@bench_app.command("matmul")
def bench_matmul(
    dtype: Annotated[
        list[str] | None,
        typer.Option(
            "--dtype",
            metavar="DTYPE",
            help=f"fp64, fp32, tf32, bf16, fp16, fp8; {LIST_HELP} (default: every dtype "
            "native here). One not native here runs only when named, at a size that takes "
            "seconds.",
        ),
    ] = None,
    sizes: Annotated[
        list[str] | None,
        typer.Option(
            "--sizes",
            metavar="N,N,..",
            help=f"Square sizes, {LIST_HELP}: 1024,2048 (default: 512,1024,2048 on a CPU, "
            "1024 to 8192 on a GPU).",
        ),
    ] = None,
    shape: Annotated[
        list[str] | None,
        typer.Option("--shape", metavar="MxNxK", help=f"Rectangular shapes, {LIST_HELP}."),
    ] = None,
    quick: QuickOption = False,
    device: DeviceOption = None,
    json_out: JsonOption = False,
) -> None:
    """Matrix-multiply TFLOP/s per dtype and size, checked against float64, vs the peak."""
    from ceiling.api import bench as api_bench

    size_list = _parse_sizes(joined(sizes))
    if sizes and not size_list:
        raise InvalidInput("--sizes: no size given (e.g. 1024,2048)")
    result = api_bench.matmul(
        comma_list(dtype) if dtype else None,
        size_list,
        comma_list(shape) or [],
        device=device,
        quick=quick,
        progress=_progress,
    )
    _finish(result.report, json_out, rerun="ceiling bench matmul")


@bench_app.command("memory")
def bench_memory(
    quick: QuickOption = False,
    device: DeviceOption = None,
    json_out: JsonOption = False,
) -> None:
    """STREAM copy/scale/add/triad/dot bandwidth (GB = 1e9 bytes), beside naive numpy."""
    _run_one(device, quick, json_out, "bench_memory")


@bench_app.command("overhead")
def bench_overhead(
    quick: QuickOption = False,
    device: DeviceOption = None,
    json_out: JsonOption = False,
) -> None:
    """Cost of one tiny op, a Python loop vs vectorized, and the GPU-vs-CPU crossover size."""
    _run_one(device, quick, json_out, "bench_overhead")


@bench_app.command("transfer")
def bench_transfer(
    quick: QuickOption = False,
    device: DeviceOption = None,
    json_out: JsonOption = False,
) -> None:
    """Host->device, device->host and device->device copy bandwidth (GPU only)."""
    _run_one(device, quick, json_out, "bench_transfer")
