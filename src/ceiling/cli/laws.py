"""`ceiling amdahl` and `ceiling gustafson`: the parallel-speedup calculators."""

from __future__ import annotations

from typing import Annotated

import typer

from ceiling.cli.app import app
from ceiling.cli.output import (
    LIST_HELP,
    JsonOption,
    PlotOption,
    comma_list,
    console,
    figure_and_json,
    table,
)
from ceiling.units import parse_count

# Negative numbers must reach our own validation, not be read as unknown options.
NUMERIC_ARGS = {"ignore_unknown_options": True}

NOption = Annotated[
    list[str] | None,
    typer.Option(
        "-n", "--workers", metavar="N", help=f"Worker counts, {LIST_HELP} (default 1..1024)."
    ),
]
FRACTION_HELP = (
    "The parallel fraction p of the work, in [0, 1] (the same as --parallel; in both amdahl "
    "and gustafson)."
)
FractionArgument = Annotated[
    float | None, typer.Argument(metavar="P", help=FRACTION_HELP, show_default=False)
]
ParallelOption = Annotated[
    float | None,
    typer.Option("--parallel", "-p", help="Parallel fraction p, in [0, 1].", show_default=False),
]
SerialOption = Annotated[
    float | None,
    typer.Option("--serial", "-s", help="Serial fraction 1 - p, in [0, 1].", show_default=False),
]


def _worker_count(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float(parse_count(text))  # 1k, 64K: a count with an SI prefix


def _ns(ns: list[str] | None) -> list[float] | None:
    return [_worker_count(t) for t in comma_list(ns)] if ns else None


@app.command(context_settings=NUMERIC_ARGS)
def amdahl(
    fraction: FractionArgument = None,
    parallel: ParallelOption = None,
    serial: SerialOption = None,
    n: NOption = None,
    json_out: JsonOption = False,
    plot: PlotOption = None,
) -> None:
    """Amdahl's law: speedup of a fixed problem whose fraction P runs in parallel.

    P is the parallel fraction (as --parallel/-p); --serial/-s gives 1 - P instead.
    """
    from ceiling.api.laws import CLI_WAYS, fractions
    from ceiling.api.laws import amdahl as amdahl_law

    r = amdahl_law(fractions(parallel, serial, fraction, CLI_WAYS)[0], ns=_ns(n))
    p, ceiling = r.p, r.ceiling
    if figure_and_json(r, plot, json_out):
        return
    c = console()
    c.print(
        table(
            f"Amdahl's law, parallel p = {p:g}, serial {1 - p:g} (fixed problem)",
            ["N", "speedup", "efficiency"],
            [[f"{x.n:g}", f"{x.speedup:.2f}×", f"{x.efficiency * 100:.1f} %"] for x in r.rows],
        )
    )
    if ceiling == float("inf"):
        c.print("ceiling: none (p = 1: speedup grows with N without bound)")
    else:
        c.print(f"ceiling 1/(1-p) = {ceiling:.4g}× however many workers")
        c.print(
            f"90 % of the ceiling needs N ≥ {r.n_for_90pct_of_ceiling}; "
            f"99 % needs N ≥ {r.n_for_99pct_of_ceiling}"
        )
    if plot:
        c.print(f"figure: {plot}")


@app.command(context_settings=NUMERIC_ARGS)
def gustafson(
    fraction: FractionArgument = None,
    parallel: ParallelOption = None,
    serial: SerialOption = None,
    n: NOption = None,
    json_out: JsonOption = False,
    plot: PlotOption = None,
) -> None:
    """Gustafson's law: scaled speedup when the problem grows with N.

    P is the parallel fraction of the scaled run (as --parallel/-p); --serial/-s gives its
    serial share α = 1 - P instead.
    """
    from ceiling.api.laws import CLI_WAYS, fractions
    from ceiling.api.laws import gustafson as gustafson_law

    r = gustafson_law(serial=fractions(parallel, serial, fraction, CLI_WAYS)[1], ns=_ns(n))
    parallel_share, alpha = r.p, r.alpha
    if figure_and_json(r, plot, json_out):
        return
    c = console()
    c.print(
        table(
            f"Gustafson's law, parallel p = {parallel_share:g}, serial α = {alpha:g} "
            "(problem grows with N)",
            ["N", "scaled speedup", "efficiency"],
            [[f"{x.n:g}", f"{x.speedup:.2f}×", f"{x.efficiency * 100:.1f} %"] for x in r.rows],
        )
    )
    c.print(
        f"efficiency tends to 1-α = {1 - alpha:.3g}: no ceiling while the problem keeps growing"
    )
    if plot:
        c.print(f"figure: {plot}")
