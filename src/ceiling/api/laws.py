"""Amdahl's and Gustafson's laws as results: `ceiling.amdahl(0.95)`, `ceiling.gustafson(0.1)`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ceiling.api.arguments import checked
from ceiling.api.result import Result
from ceiling.errors import InvalidInput
from ceiling.model import laws

DEFAULT_NS = (1, 2, 4, 8, 16, 64, 256, 1024)


CLI_WAYS = "P, --parallel/-p P, or --serial/-s (1 - P)"


def fractions(
    parallel: float | None,
    serial: float | None,
    positional: float | None = None,
    ways: str = "parallel=P or serial=(1 - P)",
) -> tuple[float, float]:
    """(parallel, serial) fractions from exactly one of the parallel share and the serial one
    (`ways`: how the caller's user gives them, for the message)."""
    given = [v for v in (positional, parallel) if v is not None]
    if len(given) + (serial is not None) != 1:
        raise InvalidInput(f"give the parallel fraction once: {ways}")
    if serial is not None:
        laws.check_fraction(serial, "serial fraction")
        return 1.0 - serial, serial
    laws.check_fraction(given[0], "parallel fraction p")
    return given[0], 1.0 - given[0]


def worker_counts(ns: Iterable[float] | None) -> list[float]:
    values = [float(n) for n in ns] if ns is not None else [float(n) for n in DEFAULT_NS]
    if not values:
        raise InvalidInput("give at least one worker count")
    for n in values:
        laws.check_workers(n, "worker count -n")
    return [int(n) if n.is_integer() else n for n in values]


def _plot_range(ns: list[float]) -> list[float]:
    hi = max(max(ns), 1024)
    out, n = [], 1.0
    while n <= hi:
        out.append(n)
        n *= 2**0.25
    return out


def _rows(rows: list[laws.SpeedupRow]) -> list[dict]:
    return [{"n": r.n, "speedup": r.speedup, "efficiency": r.efficiency} for r in rows]


@dataclass(frozen=True)
class AmdahlResult(Result):
    """Speedup of a fixed problem whose share `p` runs in parallel, at each worker count."""

    p: float
    ceiling: float  # 1 / (1 - p); inf when p = 1
    n_for_90pct_of_ceiling: int | None
    n_for_99pct_of_ceiling: int | None
    rows: list[laws.SpeedupRow]
    title = "Amdahl's law (fixed problem)"

    def record(self) -> dict:
        return {
            "law": "amdahl",
            "p": self.p,
            "ceiling": self.ceiling,
            "n_for_90pct_of_ceiling": self.n_for_90pct_of_ceiling,
            "n_for_99pct_of_ceiling": self.n_for_99pct_of_ceiling,
            "rows": _rows(self.rows),
        }

    def heading(self) -> str:
        return f"Amdahl's law, parallel p = {self.p:g}: ceiling {self.ceiling:.4g}×"

    def figure(self):
        from ceiling.render import plots

        grid = _plot_range([r.n for r in self.rows])
        label = f"Amdahl p = {self.p:g}"
        return plots.speedup_figure(
            {label: (grid, [laws.amdahl_speedup(self.p, x) for x in grid])},
            {label: self.ceiling},
            title="Amdahl's law: fixed problem size",
            points=None,
        )


@dataclass(frozen=True)
class GustafsonResult(Result):
    """Scaled speedup when the problem grows with N; `alpha` is the serial share."""

    alpha: float
    p: float
    rows: list[laws.SpeedupRow]
    title = "Gustafson's law (the problem grows with N)"

    def record(self) -> dict:
        return {"law": "gustafson", "alpha": self.alpha, "p": self.p, "rows": _rows(self.rows)}

    def heading(self) -> str:
        return f"Gustafson's law, serial α = {self.alpha:g}"

    def figure(self):
        from ceiling.render import plots

        grid = _plot_range([r.n for r in self.rows])
        amdahl_p = 1.0 - self.alpha
        fixed = f"Amdahl p = {amdahl_p:g} (same serial share, fixed size)"
        return plots.speedup_figure(
            {
                f"Gustafson α = {self.alpha:g}": (
                    grid,
                    [laws.gustafson_speedup(self.alpha, x) for x in grid],
                ),
                fixed: (grid, [laws.amdahl_speedup(amdahl_p, x) for x in grid]),
            },
            {fixed: laws.amdahl_ceiling(amdahl_p)},
            title="Gustafson's law: the problem grows with N",
        )


@checked
def amdahl(
    parallel: float | None = None,
    *,
    serial: float | None = None,
    ns: Iterable[float] | None = None,
) -> AmdahlResult:
    """Amdahl's law for parallel fraction `parallel` (or `serial` = 1 - p) at worker counts
    `ns` (default 1..1024)."""
    p, _ = fractions(parallel, serial)
    counts = worker_counts(ns)
    return AmdahlResult(
        p=p,
        ceiling=laws.amdahl_ceiling(p),
        n_for_90pct_of_ceiling=laws.amdahl_workers_for(p, 0.90),
        n_for_99pct_of_ceiling=laws.amdahl_workers_for(p, 0.99),
        rows=laws.amdahl_table(p, counts),
    )


@checked
def gustafson(
    parallel: float | None = None,
    *,
    serial: float | None = None,
    ns: Iterable[float] | None = None,
) -> GustafsonResult:
    """Gustafson's law for the parallel fraction of the scaled run (or its serial share
    α = `serial`) at worker counts `ns` (default 1..1024)."""
    p, alpha = fractions(parallel, serial)
    return GustafsonResult(alpha=alpha, p=p, rows=laws.gustafson_table(alpha, worker_counts(ns)))
