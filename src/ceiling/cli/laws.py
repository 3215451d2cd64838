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
    emit_json,
    table,
)
from ceiling.errors import InvalidInput
from ceiling.model import laws
from ceiling.units import parse_count

DEFAULT_NS = [1, 2, 4, 8, 16, 64, 256, 1024]
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


def fractions(
    positional: float | None, parallel: float | None, serial: float | None
) -> tuple[float, float]:
    """(parallel, serial) fractions from exactly one of P, --parallel and --serial."""
    given = [v for v in (positional, parallel) if v is not None]
    if len(given) + (serial is not None) != 1:
        raise InvalidInput(
            "give the parallel fraction once: P, --parallel/-p P, or --serial/-s (1 - P)"
        )
    if serial is not None:
        laws.check_fraction(serial, "serial fraction")
        return 1.0 - serial, serial
    laws.check_fraction(given[0], "parallel fraction p")
    return given[0], 1.0 - given[0]


def _worker_count(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float(parse_count(text))  # 1k, 64K: a count with an SI prefix


def _ns(ns: list[str] | None) -> list[float]:
    values = [_worker_count(t) for t in comma_list(ns)] if ns else list(map(float, DEFAULT_NS))
    for n in values:
        laws.check_workers(n, "worker count -n")
    return [int(n) if n.is_integer() else n for n in values]


def _rows_json(rows: list[laws.SpeedupRow]) -> list[dict]:
    return [{"n": r.n, "speedup": r.speedup, "efficiency": r.efficiency} for r in rows]


def _plot_range(ns: list[float]) -> list[float]:
    hi = max(max(ns), 1024)
    out, n = [], 1.0
    while n <= hi:
        out.append(n)
        n *= 2**0.25
    return out


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
    p, _ = fractions(fraction, parallel, serial)
    ns = _ns(n)
    rows = laws.amdahl_table(p, ns)
    ceiling = laws.amdahl_ceiling(p)
    n90 = laws.amdahl_workers_for(p, 0.90)
    n99 = laws.amdahl_workers_for(p, 0.99)
    if plot is not None:
        from ceiling.report import plots

        grid = _plot_range(ns)
        fig = plots.speedup_figure(
            {f"Amdahl p = {p:g}": (grid, [laws.amdahl_speedup(p, x) for x in grid])},
            {f"Amdahl p = {p:g}": ceiling},
            title="Amdahl's law: fixed problem size",
            points=None,
        )
        plots.save(fig, plot)
    if json_out:
        emit_json(
            {
                "law": "amdahl",
                "p": p,
                "ceiling": ceiling,
                "n_for_90pct_of_ceiling": n90,
                "n_for_99pct_of_ceiling": n99,
                "rows": [
                    {"n": r.n, "speedup": r.speedup, "efficiency": r.efficiency} for r in rows
                ],
                "plot": str(plot) if plot else None,
            }
        )
        return
    c = console()
    c.print(
        table(
            f"Amdahl's law, parallel p = {p:g}, serial {1 - p:g} (fixed problem)",
            ["N", "speedup", "efficiency"],
            [[f"{r.n:g}", f"{r.speedup:.2f}×", f"{r.efficiency * 100:.1f} %"] for r in rows],
        )
    )
    if ceiling == float("inf"):
        c.print("ceiling: none (p = 1: speedup grows with N without bound)")
    else:
        c.print(f"ceiling 1/(1-p) = {ceiling:.4g}× however many workers")
        c.print(f"90 % of the ceiling needs N ≥ {n90}; 99 % needs N ≥ {n99}")
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
    parallel_share, alpha = fractions(fraction, parallel, serial)
    ns = _ns(n)
    rows = laws.gustafson_table(alpha, ns)
    if plot is not None:
        from ceiling.report import plots

        grid = _plot_range(ns)
        amdahl_p = 1.0 - alpha
        fig = plots.speedup_figure(
            {
                f"Gustafson α = {alpha:g}": (
                    grid,
                    [laws.gustafson_speedup(alpha, x) for x in grid],
                ),
                f"Amdahl p = {amdahl_p:g} (same serial share, fixed size)": (
                    grid,
                    [laws.amdahl_speedup(amdahl_p, x) for x in grid],
                ),
            },
            {
                f"Amdahl p = {amdahl_p:g} (same serial share, fixed size)": laws.amdahl_ceiling(
                    amdahl_p
                )
            },
            title="Gustafson's law: the problem grows with N",
        )
        plots.save(fig, plot)
    if json_out:
        emit_json(
            {
                "law": "gustafson",
                "alpha": alpha,
                "p": parallel_share,
                "rows": [
                    {"n": r.n, "speedup": r.speedup, "efficiency": r.efficiency} for r in rows
                ],
                "plot": str(plot) if plot else None,
            }
        )
        return
    c = console()
    c.print(
        table(
            f"Gustafson's law, parallel p = {parallel_share:g}, serial α = {alpha:g} "
            "(problem grows with N)",
            ["N", "scaled speedup", "efficiency"],
            [[f"{r.n:g}", f"{r.speedup:.2f}×", f"{r.efficiency * 100:.1f} %"] for r in rows],
        )
    )
    c.print(
        f"efficiency tends to 1-α = {1 - alpha:.3g}: no ceiling while the problem keeps growing"
    )
    if plot:
        c.print(f"figure: {plot}")
