"""Serving calibrated from one measured run: the engine's costs that make the simulation of
that run give what was measured.

Three figures of the measured run are matched, TTFT p50, TPOT p50 and output tokens/s, by
three costs:
  iteration_s   the host's fixed time between two iterations (`engine.ITERATION_S`);
  request_s     a request's way in and out of the server (`engine.REQUEST_S`);
  device_scale  the device's time of an iteration over its priced terms (weights and KV at
                the bandwidth, GEMMs and attention at their rates): 1 as priced.
One load does not separate a fixed iteration cost from a device that runs slower than
priced (both lengthen every iteration), so the device's scale is pulled weakly toward 1
(`PRIOR`): the fit moves it only as far as the figures need. Least squares on the
logarithms of simulated over measured (scipy), from the shipped costs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

FIGURES = ("ttft_p50_s", "tpot_p50_s", "output_tokens_per_s")
PRIOR = 0.05  # weight of log(device_scale) among the residuals
BOUNDS = ((0.0, 1.0), (0.0, 30.0), (math.log(0.02), math.log(50.0)))


def figures_of(m) -> dict[str, float]:
    """The figures a calibration matches, of simulated or measured serving."""
    return {"ttft_p50_s": m.ttft_s.p50, "tpot_p50_s": m.tpot_s.p50,
            "output_tokens_per_s": m.output_tokens_per_s}  # fmt: skip


@dataclass(frozen=True)
class Calibration:
    iteration_s: float
    request_s: float
    device_scale: float
    device: str  # the device it was measured on: device_scale holds only there
    source: str  # the measured run's file or server
    measured: dict
    before: dict  # the measured run simulated with the shipped costs
    after: dict  # and with the fitted ones

    def to_json(self) -> dict:
        return {
            "iteration_s": self.iteration_s,
            "request_s": self.request_s,
            "device_scale": self.device_scale,
            "device": self.device,
            "source": self.source,
            "measured": self.measured,
            "simulated_before": self.before,
            "simulated_after": self.after,
        }

    def errors(self, simulated: dict) -> dict[str, float]:
        return {k: simulated[k] / self.measured[k] - 1 for k in FIGURES if k in self.measured}


def fit(run: Callable[[float, float, float], dict], measured: dict, start: tuple[float, float],
        device: str, source: str) -> Calibration:  # fmt: skip
    """The costs (iteration_s, request_s, device_scale) under which `run` (the measured
    run simulated with them, giving `figures_of`) matches `measured`; from `start`, the
    shipped (iteration_s, request_s)."""
    import numpy as np
    from scipy.optimize import least_squares

    keys = [k for k in FIGURES if _positive(measured.get(k))]
    if not keys:
        from ceiling.errors import InvalidInput

        raise InvalidInput(f"{source}: the measured run has none of {', '.join(FIGURES)}")
    cache: dict = {}

    def simulated(x) -> dict:
        key = tuple(np.round(x, 12))
        if key not in cache:
            cache[key] = run(float(x[0]), float(x[1]), math.exp(float(x[2])))
        return cache[key]

    def residuals(x):
        sim = simulated(x)
        logs = [math.log(max(sim[k], 1e-12) / measured[k]) for k in keys]
        return np.array([*logs, PRIOR * x[2]])

    lo, hi = zip(*BOUNDS, strict=True)
    x0 = np.clip([max(start[0], 1e-4), max(start[1], 1e-3), 0.0], lo, hi)
    sol = least_squares(residuals, x0, bounds=(lo, hi), diff_step=0.05, x_scale=[1e-3, 1e-2, 1.0],
                        max_nfev=60)  # fmt: skip
    iteration, request, log_scale = (float(v) for v in sol.x)
    return Calibration(iteration, request, math.exp(log_scale), device, source,
                       {k: measured[k] for k in keys}, simulated(x0), simulated(sol.x))  # fmt: skip


def _positive(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < float("inf")
