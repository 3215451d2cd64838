"""`ceiling repeat TARGET --runs N --threads 1,2`: are repeated results bitwise identical?"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from ceiling.cli.app import app
from ceiling.cli.output import LIST_HELP, JsonOption, console, emit_json, joined, table
from ceiling.cli.params import RUNS_YOUR_CODE
from ceiling.measure.deadline import DEFAULT_TIMEOUT_S


@app.command()
def repeat(
    target: Annotated[
        str,
        typer.Argument(
            help="gpt[:tiny|small] (forward + backward of the built-in model), reduction "
            "(float32 sum added in thread-finish order), matmul, or MODULE:CALLABLE."
            + RUNS_YOUR_CODE
        ),
    ],
    runs: Annotated[int, typer.Option(help="Runs per thread count.")] = 10,
    threads: Annotated[
        list[str] | None, typer.Option(help=f"Thread counts, {LIST_HELP} (default 1,2).")
    ] = None,
    deterministic_check: Annotated[
        bool,
        typer.Option(help="Also rerun with torch.use_deterministic_algorithms(True)."),
    ] = True,
    timeout: Annotated[
        float,
        typer.Option(help="Stop the runs after this many seconds (a target that never returns)."),
    ] = DEFAULT_TIMEOUT_S,
    json_out: JsonOption = False,
) -> None:
    """Rerun a computation and report whether its results are bitwise identical.

    Compares every output with the first one: bitwise identity, distinct results, the
    largest absolute and relative deviation, per thread count, with and without
    torch.use_deterministic_algorithms.
    """
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn

    from ceiling.api.repeat import repeat as rerun
    from ceiling.cli.scale import parse_counts

    counts = parse_counts(joined(threads) or "1,2", "thread counts")
    total = runs * len(counts) * (2 if deterministic_check else 1)
    with Progress(
        TextColumn(f"repeat {target}"),
        BarColumn(),
        console=Console(file=sys.stderr),
        transient=True,
        disable=not sys.stderr.isatty(),
    ) as progress:
        task = progress.add_task("runs", total=total)
        result = rerun(
            target,
            runs=runs,
            threads=counts,
            deterministic_check=deterministic_check,
            timeout_s=timeout,
            on_run=lambda: progress.advance(task),
        )
    if json_out:
        emit_json(result.to_dict())
        return
    raw, findings = result.raw, result.verdict
    c = console()
    c.print(
        table(
            f"{target}: {runs} runs per setting, output {raw['dtype']} {raw['shape']}",
            ["deterministic", "threads", "distinct", "same as first", "max |Δ|", "max rel Δ"],
            [
                [
                    "on" if g["deterministic_algorithms"] else "off",
                    g["threads"],
                    g["distinct_results"],
                    "yes" if g["matches_first_result"] else "no",
                    f"{g['max_abs_deviation']:.3g}",
                    f"{g['max_rel_deviation']:.3g}",
                ]
                for g in raw["groups"]
            ],
        )
    )
    for line in findings:
        c.print(line)
