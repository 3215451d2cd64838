"""The laws of parallel speedup (Amdahl, Gustafson) and the quantities derived from them.

Every later model (scaling fits, step-time breakdowns, the planner) calls these.
Fractions are in [0, 1]; worker counts are >= 1.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from ceiling.errors import InvalidInput


def check_fraction(value: float, name: str) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and 0.0 <= value <= 1.0):
        raise InvalidInput(f"{name} must be a fraction in [0, 1], got {value}")
    return float(value)


def check_workers(n: float, name: str = "N") -> float:
    if not (math.isfinite(n) and n >= 1):
        raise InvalidInput(f"{name} must be at least 1, got {n:g}")
    return n


def amdahl_speedup(p: float, n: float) -> float:
    """S(N) = 1 / ((1-p) + p/N): fixed problem, parallel fraction p over N units."""
    check_fraction(p, "parallel fraction p")
    check_workers(n)
    return 1.0 / ((1.0 - p) + p / n)


def amdahl_ceiling(p: float) -> float:
    """The limit of S(N) as N grows: 1/(1-p); infinite when p = 1."""
    check_fraction(p, "parallel fraction p")
    if p == 1.0:
        return math.inf
    # 12 significant digits: 1/(1-0.95) is 20, not 19.999999999999982
    return float(f"{1.0 / (1.0 - p):.12g}")


def amdahl_workers_for(p: float, fraction_of_ceiling: float) -> int | None:
    """Smallest whole N with S(N) >= fraction_of_ceiling * 1/(1-p); None when p = 1.

    From (1-p) + p/N = (1-p)/f:  N = p / ((1-p)(1/f - 1)).
    """
    check_fraction(p, "parallel fraction p")
    f = check_fraction(fraction_of_ceiling, "fraction of the ceiling")
    if p == 1.0 or f == 1.0:
        return None
    if p == 0.0 or f == 0.0:
        return 1
    n = p / ((1.0 - p) * (1.0 / f - 1.0))
    # guard against n landing a hair above an integer through rounding
    whole = max(1, math.ceil(n - 1e-9))
    return whole


def gustafson_speedup(alpha: float, n: float) -> float:
    """Scaled speedup S(N) = N - alpha (N - 1): alpha is the serial share of the scaled run."""
    check_fraction(alpha, "serial fraction alpha")
    check_workers(n)
    return n - alpha * (n - 1.0)


def efficiency(speedup: float, n: float) -> float:
    """E(N) = S(N) / N."""
    check_workers(n)
    return speedup / n


@dataclass(frozen=True)
class SpeedupRow:
    n: float
    speedup: float
    efficiency: float


def amdahl_table(p: float, ns: Iterable[float]) -> list[SpeedupRow]:
    rows = []
    for n in ns:
        s = amdahl_speedup(p, n)
        rows.append(SpeedupRow(n=n, speedup=s, efficiency=s / n))
    return rows


def gustafson_table(alpha: float, ns: Iterable[float]) -> list[SpeedupRow]:
    rows = []
    for n in ns:
        s = gustafson_speedup(alpha, n)
        rows.append(SpeedupRow(n=n, speedup=s, efficiency=s / n))
    return rows
