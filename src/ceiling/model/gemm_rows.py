"""A CPU's GEMM rate as a function of its rows, from the machine profile's samples.

A GPU's GEMM at a few rows is priced by its tiles (`decode_expected.tile_utilisation`). A
CPU has no SMs to count: a multiply of a few rows (a decode step's, one a sequence) runs
at a rate of its own, far below the peak a large square one reaches, and that rate, not
the peak, sets what one more sequence in an iteration costs. `ceiling bench` times an fp32
GEMM with weights not in cache at 1, 2, 4, ... rows (`measure.gemm_rows`); each sample's
rate is 2·rows·k·n / best time, and the profile's measured peak is the rate at PEAK_ROWS
(the square matmul the peak was measured at). Between two of these knots the rate is
interpolated linearly in log rows; below the first it is the first, past the last the last.
"""

from __future__ import annotations

import math

from ceiling.errors import InvalidInput

PEAK_ROWS = 1024  # the rows of the square matmul a profile's peak comes from


def rows_rates(
    rows: list[int], k: int, n: int, best_s: list[float], peak_flops_per_s: float
) -> tuple[tuple[float, float], ...]:
    """Knots (rows, FLOP/s): each sample's rate (at most the peak), then the peak at
    PEAK_ROWS when the samples stop below it."""
    if len(rows) != len(best_s) or not rows:
        raise InvalidInput(f"need one time per row count, got {len(rows)} and {len(best_s)}")
    if any(not r >= 1 for r in rows) or list(rows) != sorted(set(rows)):
        raise InvalidInput(f"row counts must be ≥ 1 and ascending, got {list(rows)}")
    if not (k >= 1 and n >= 1 and 0 < peak_flops_per_s < math.inf):
        raise InvalidInput(f"need k, n ≥ 1 and a peak > 0, got {k}, {n}, {peak_flops_per_s}")
    if any(not 0 < t < math.inf for t in best_s):
        raise InvalidInput(f"times must be > 0 s, got {list(best_s)}")
    knots = [(float(r), min(2.0 * r * k * n / t, peak_flops_per_s))
             for r, t in zip(rows, best_s, strict=True)]  # fmt: skip
    if rows[-1] < PEAK_ROWS:
        knots.append((float(PEAK_ROWS), peak_flops_per_s))
    return tuple(knots)


def rate_at(knots: tuple[tuple[float, float], ...], rows: float) -> float:
    """The GEMM rate at `rows` rows, interpolated in log rows between the knots (the first
    knot's below them, the last's past them)."""
    import numpy as np

    return float(np.interp(math.log(max(rows, knots[0][0])), [math.log(r) for r, _ in knots],
                           [v for _, v in knots]))  # fmt: skip


def profile_rows_rates(measured) -> tuple[tuple[float, float], ...] | None:
    """The knots of a measured CPU's fp32 GEMM rate by rows (its profile's `gemm_rows`
    samples and fp32 peak); None when the profile has no such samples (a GPU, or a profile
    measured before they were taken)."""
    if measured is None or getattr(measured, "kind", None) != "cpu":
        return None
    overhead = (getattr(measured, "extra", None) or {}).get("overhead")
    samples = overhead.get("gemm_rows") if isinstance(overhead, dict) else None
    peak = (getattr(measured, "peak_flops_per_s", None) or {}).get("fp32")
    if not isinstance(samples, dict) or not peak:
        return None
    try:
        return rows_rates(list(samples["rows"]), int(samples["k"]), int(samples["n"]),
                          [float(t) for t in samples["best_s"]], float(peak))  # fmt: skip
    except (KeyError, TypeError, ValueError, InvalidInput):
        return None
