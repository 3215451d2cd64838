"""`ceiling fit FILE`: fit your own scaling measurements (CSV or JSON, N and time or throughput)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer

from ceiling.api.fit import TIME_UNITS
from ceiling.cli.app import app
from ceiling.cli.output import JsonOption, PlotOption, console, emit_json
from ceiling.cli.scale import PredictOption, predicted_ns
from ceiling.errors import InvalidInput


@app.command()
def fit(
    file: Annotated[
        Path, typer.Argument(help="CSV or JSON with columns N and time or throughput.")
    ],
    mode: Annotated[
        str | None,
        typer.Option(
            help="strong (fixed problem; default) or weak (the problem grows with N). Only "
            "matters for times: weak-scaling throughput is N / time. Gustafson's law is "
            "fitted to weak scaling only."
        ),
    ] = None,
    weak: Annotated[
        bool, typer.Option("--weak", help="The same as --mode weak: the problem grows with N.")
    ] = False,
    time_unit: Annotated[
        str,
        typer.Option(
            "--time-unit",
            help=f"Unit of the file's times (throughputs: per this unit): {', '.join(TIME_UNITS)}. "
            "Times and limits are reported in it.",
        ),
    ] = "s",
    predict: PredictOption = None,
    json_out: JsonOption = False,
    plot: PlotOption = None,
) -> None:
    """Fit speedup, efficiency, Karp–Flatt, Amdahl, Gustafson and the USL to measurements.

    Rows may repeat an N (the median is shown; every row is fitted). A `ceiling scale
    --json` result is accepted as it is.
    """
    from ceiling.api.fit import fit_file, unit_seconds
    from ceiling.render import scaling_summary

    if weak and mode not in (None, "weak"):
        raise InvalidInput(f"--weak and --mode {mode} disagree: give one")
    predict_ns = predicted_ns(predict)
    result = fit_file(file, mode="weak" if weak else mode, time_unit=time_unit, predict=predict_ns)
    mode, measure = result.mode, result.measure
    rows = sum(p.samples for p in result.fit.points)
    if plot is not None:
        from ceiling.render import scaling_plot

        result = dataclasses.replace(result, plot=str(plot))
        scaling_plot.save_scaling_figure(
            result.record(), plot, title=f"{file.name} ({mode} scaling)"
        )
    summary = result.record()
    points = summary["points"]
    if json_out:
        emit_json(summary)
        return
    c = console()
    c.print(
        scaling_summary.points_table(points, f"{file.name}: {rows} rows, {measure}, {mode} scaling")
    )
    for t in scaling_summary.fit_tables(summary["fit"], time_unit, unit_seconds(time_unit)):
        c.print(t)
    for line in summary["limits"].values():
        c.print(f"limit: {line}")
    c.print(f"verdict: {result.verdict}")
    for w in result.warnings:
        c.print(f"warning: {w}")
    if plot:
        c.print(f"figure: {plot}")
