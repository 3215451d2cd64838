"""`ceiling trace PATH`: explain a torch.profiler trace recorded anywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ceiling.cli.app import app
from ceiling.cli.output import JsonOption, PlotOption, emit_json


@app.command("trace")
def trace_command(
    path: Annotated[
        Path, typer.Argument(help="A trace (.json, .json.gz) or a folder of per-rank traces.")
    ],
    spec: Annotated[
        str | None, typer.Option(help="Catalog device to place the run on (`ceiling specs`).")
    ] = None,
    profile: Annotated[
        Path | None, typer.Option(help="A saved machine profile as the device.")
    ] = None,
    dtype: Annotated[
        str | None,
        typer.Option(
            help="Dtype of the peak for MFU (default: most matmul FLOPs'; tf32 if TF32 was on)."
        ),
    ] = None,
    top: Annotated[int, typer.Option(min=1, help="Ops shown per rank.")] = 10,
    json_out: JsonOption = False,
    plot: PlotOption = None,
) -> None:
    """Per step and rank: compute, memory-bound, communication (exposed/overlapped), memcpy,
    idle with its host reason; MFU; each op on the device's roofline; stragglers."""
    from ceiling.trace.analyze import analyze

    result = analyze(path, spec=spec, profile=profile, dtype=dtype)
    if plot is not None:
        from ceiling.report.trace_plot import trace_figure

        trace_figure(result, plot)
    if json_out:
        emit_json(result.to_json())
        return
    from ceiling.report.trace_tables import render

    render(result, top)
    if plot is not None:
        print(f"figure: {plot}")
