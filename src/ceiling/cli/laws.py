"""`ceiling amdahl` and `ceiling gustafson`: the parallel-speedup calculators."""

from __future__ import annotations

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
from ceiling.model import laws

DEFAULT_NS = [1, 2, 4, 8, 16, 64, 256, 1024]
# Negative numbers must reach our own validation, not be read as unknown options.
NUMERIC_ARGS = {"ignore_unknown_options": True}

NOption = Annotated[
    list[float] | None,
    typer.Option("-n", "--workers", help="Worker count N; repeat for several (default 1..1024)."),
]


def _ns(ns: list[float] | None) -> list[float]:
    values = ns or DEFAULT_NS
    for n in values:
        laws.check_workers(n, "worker count -n")
    return [int(n) if float(n).is_integer() else n for n in values]


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
    p: Annotated[float, typer.Argument(help="Parallel fraction of the work, in [0, 1].")],
    n: NOption = None,
    json_out: JsonOption = False,
    plot: PlotOption = None,
) -> None:
    """Amdahl's law: speedup of a fixed problem whose fraction P runs in parallel."""
    laws.check_fraction(p, "parallel fraction P")
    ns = _ns(n)
    rows = laws.amdahl_table(p, ns)
    ceiling = laws.amdahl_ceiling(p)
    n90 = laws.amdahl_workers_for(p, 0.90)
    n99 = laws.amdahl_workers_for(p, 0.99)
    if plot is not None:
        from ceiling.report import plots

        plots.check_figure_path(plot)
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
            f"Amdahl's law, parallel fraction p = {p:g}",
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
    alpha: Annotated[float, typer.Argument(help="Serial share of the scaled run, in [0, 1].")],
    n: NOption = None,
    json_out: JsonOption = False,
    plot: PlotOption = None,
) -> None:
    """Gustafson's law: scaled speedup when the problem grows with N."""
    laws.check_fraction(alpha, "serial fraction ALPHA")
    ns = _ns(n)
    rows = laws.gustafson_table(alpha, ns)
    if plot is not None:
        from ceiling.report import plots

        plots.check_figure_path(plot)
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
            f"Gustafson's law, serial share α = {alpha:g} (problem grows with N)",
            ["N", "scaled speedup", "efficiency"],
            [[f"{r.n:g}", f"{r.speedup:.2f}×", f"{r.efficiency * 100:.1f} %"] for r in rows],
        )
    )
    c.print(
        f"efficiency tends to 1-α = {1 - alpha:.3g}: no ceiling while the problem keeps growing"
    )
    if plot:
        c.print(f"figure: {plot}")
