"""`ceiling trace PATH`: explain a torch.profiler trace recorded anywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ceiling.cli.app import app
from ceiling.cli.inputs import option
from ceiling.cli.output import JsonOption, PlotOption, emit_json
from ceiling.inputs import MACHINE_PROFILE, SPEC

DtypeOption = Annotated[
    str | None,
    typer.Option(
        help="Dtype of the peak for MFU (default: most matmul FLOPs'; tf32 if TF32 was on)."
    ),
]
WorkersOption = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="Rank files read at most at once, by this process and local worker processes "
        "(default: a core each). Memory is bounded by an estimate: a rank goes to a worker "
        "only while all the processes together are estimated to hold at most 2x what "
        "reading the ranks one after another holds, however many ranks (a rank's read "
        "about 1.5x its uncompressed JSON, a worker 26 MiB more, learnt from the workers' "
        "reports as they come), else this process reads it, so fewer than asked may run at "
        "once. Each worker starts for one rank with only the trace reader loaded. Not "
        "with --dask, whose workers are the cluster's.",
    ),
]
DaskOption = Annotated[
    str | None,
    typer.Option(
        help="Read the ranks on a Dask cluster: its scheduler's address (refused unless a "
        "scheduler with a worker answers within 10 s), or 'local' (threads in this "
        "process, listening on 127.0.0.1 only, no dashboard); needs pip install "
        "'ceiling-perf[cluster]'."
    ),
]
CriticalPathOption = Annotated[
    bool,
    typer.Option(
        "--critical-path",
        help="Each step's critical path through host ops, launches, kernels, streams, "
        "synchronisations and (with rank files) collectives: its length and its share "
        "by compute, communication, host and idle waits.",
    ),
]
WhatIfOption = Annotated[
    str | None,
    typer.Option(
        "--what-if",
        help="Re-time each step on its critical path (implies --critical-path): e.g. "
        "gemm=2x,comm=overlap,launch=3us,link=400GB/s (a kernel class k× faster: gemm, "
        "conv, attention, elementwise, norm, reduction, optimizer, memory, compute, comm).",
    ),
]
VerboseOption = Annotated[
    bool,
    typer.Option("--verbose", "-v", help="Let Dask's own log lines and warnings through."),
]


@app.command("trace")
def trace_command(
    path: Annotated[
        Path, typer.Argument(help="A trace (.json, .json.gz) or a folder of per-rank traces.")
    ],
    spec: option(
        SPEC, str | None, "The device the run is placed on (default: the trace's own)."
    ) = None,
    profile: option(MACHINE_PROFILE, Path | None) = None,
    dtype: DtypeOption = None,
    top: Annotated[int, typer.Option(min=1, help="Ops and kernels shown per rank.")] = 10,
    workers: WorkersOption = None,
    dask: DaskOption = None,
    critical_path: CriticalPathOption = False,
    what_if: WhatIfOption = None,
    verbose: VerboseOption = False,
    json_out: JsonOption = False,
    plot: PlotOption = None,
) -> None:
    """Per step and rank: compute, memory-bound, communication (exposed/overlapped), memcpy,
    idle with its host reason; MFU; each op on the device's roofline; stragglers; with
    --critical-path, what the step waits on and what a change would buy."""
    from ceiling.api.trace import trace
    from ceiling.cli.output import rank_progress
    from ceiling.cli.quiet import quiet_libraries

    quiet = quiet_libraries("distributed", "dask", "tornado", "bokeh", verbose=verbose)
    with quiet, rank_progress("reading rank traces") as progress:
        result = trace(
            path,
            spec=spec,
            machine_profile=profile,
            dtype=dtype,
            workers=workers,
            dask=dask,
            progress=progress,
            critical_path=critical_path,
            what_if=what_if,
        )
    if plot is not None:
        from ceiling.render.trace_plot import trace_figure

        trace_figure(result, plot)
    if json_out:
        emit_json(result.to_json())
        return
    from ceiling.render.trace_tables import render

    render(result, top)
    if plot is not None:
        print(f"figure: {plot}")
