"""Amdahl's ceiling: what the serial part of a job costs, on this machine's core count."""

from __future__ import annotations

import os

from ceiling.report.compose import ReportContext, SectionOutput
from ceiling.report.sections._axes import plain_log_ticks

KEY = "amdahl"
TITLE = "Amdahl's ceiling: the serial part decides"

# The classic table (p 0.5 / 0.9 / 0.99 over N 2 / 8 / 1000), with 0.95 added for its 20x ceiling.
FRACTIONS = (0.5, 0.9, 0.95, 0.99)
WORKERS = (2, 8, 1000)


# the curves' worker counts: 1 .. 4096, four points an octave
GRID = [2 ** (i / 4) for i in range(0, 4 * 12 + 1)]


def run(ctx: ReportContext, out: SectionOutput) -> None:
    from ceiling.api.laws import amdahl

    cores = _usable_cores()
    ns = sorted({*WORKERS, cores})
    # the call `ceiling amdahl P --n ...` makes, for each parallel share
    table = {p: amdahl(p, ns=ns) for p in FRACTIONS}
    out.text(
        "With a share p of the work parallel over N units, the speedup never passes "
        "1/(1 − p): the serial part (data loading, Python in the loop) still takes as long."
    )
    rows = []
    for p, r in table.items():
        cells = [f"{p:g}", *(f"{row.speedup:.1f}×" for row in r.rows)]
        cells.append(f"{r.ceiling:g}×")
        cells.append(str(r.n_for_90pct_of_ceiling))
        rows.append(cells)
        out.key(f"ceiling_p{p:g}", r.ceiling)
    columns = ["parallel share p"]
    columns += [f"N = {n}" + (" (cores here)" if n == cores else "") for n in ns]
    columns += ["ceiling 1/(1−p)", "N for 90 % of ceiling"]
    out.table("Speedup S(N) = 1/((1−p) + p/N)", columns, rows)
    here = next(row.speedup for row in table[0.95].rows if row.n == cores)
    out.key("cores", cores)
    out.key(
        "speedup_p0.95_on_cores",
        here,
        f"p = 0.95 on {cores} core{'s' if cores != 1 else ''}",
        f"{here:.2f}×",
    )
    out.highlight("p = 0.95, any N", f"≤ {table[0.95].ceiling:g}×")
    ctx.step("drawing the speedup curves")
    curves = {p: amdahl(p, ns=GRID) for p in FRACTIONS}
    out.figure(_figure(curves, cores), "Dashed: the ceilings 1/(1−p); dotted: ideal scaling.")


def _usable_cores() -> int:
    """The cores this process may run on (a CPU affinity mask or a container limits them)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _figure(results: dict, cores: int):
    """Each result's speedup over `GRID` with its ceiling, the cores here marked."""
    from ceiling.render import plots

    grid = GRID
    curves = {f"p = {p:g}": (grid, [row.speedup for row in r.rows]) for p, r in results.items()}
    ceilings = {f"p = {p:g}": r.ceiling for p, r in results.items()}
    fig = plots.speedup_figure(curves, ceilings, title="Amdahl's law: fixed problem size")
    ax = fig.axes[0]
    # the ideal diagonal would stretch the axis to 4096×; the ceilings are what matter
    ax.set_ylim(0.8, 4 * max(ceilings.values()))
    plain_log_ticks(ax)
    # ceiling labels at the right end, where the curves have flattened onto them, and the
    # legend in the empty top-left corner
    for text in ax.texts:
        if text.get_text().startswith("ceiling"):
            text.xy = (grid[-1], text.xy[1])
            text.set_position((-2, 3))
            text.set_horizontalalignment("right")
    ax.legend(fontsize=8, loc="upper left")
    if cores > 1:
        ax.axvline(cores, color="0.4", lw=1, ls="-.")
        ax.annotate(
            f"{cores} cores here",
            (cores, 1.1),
            textcoords="offset points",
            xytext=(3, 0),
            fontsize=8,
            color="0.3",
        )
    return fig
