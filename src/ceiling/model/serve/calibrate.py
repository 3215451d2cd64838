"""Serving calibrated from measured runs: the engine's costs that make the simulation of
those runs give what was measured.

Of each measured run, TTFT p50, TPOT p50 and p90 and output tokens/s are matched; where the
run keeps its requests' times, TPOT against the sequences decoding beside each request
stands in for TPOT p90 (`decode_batches`: the line's TPOT at the low and high end of the
batches the run held, the simulated run's requests read the same way). The costs:
  iteration_s   the host's fixed time between two iterations (`engine.ITERATION_S`);
  request_s     a request's way in and out of the server (`engine.REQUEST_S`);
  device_scale  the device's time of an iteration over its priced terms (weights and KV at
                the bandwidth, GEMMs and attention at their rates): 1 as priced;
  sequence_s    the host's time an iteration for each sequence in it (sampling,
                detokenising, streaming its chunk), what makes TPOT grow with the batch
                beyond the device's terms: fitted from one run whose requests held a range
                of batches wide enough to tell it from the fixed time (`separable`), or from
                runs at two loads or more; 0 otherwise.
One load does not separate a fixed iteration cost from a device that runs slower than
priced (both lengthen every iteration), so the device's scale is pulled weakly toward 1
(`PRIOR`): the fit moves it only as far as the figures need. Least squares on the
logarithms of simulated over measured (scipy), from the shipped costs; request_s adds to
each TTFT and nothing else, so at each trial of the others it is the measured TTFT p50 less
the simulated one (`with_request_s`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ceiling.model.serve.decode_batches import DecodeBatches

FIGURES = ("ttft_p50_s", "tpot_p50_s", "tpot_p90_s", "output_tokens_per_s", "tpot_at_low_s",
           "tpot_at_high_s")  # fmt: skip
PRIOR = 0.05  # weight of log(device_scale) among the residuals
# iteration_s, log(device_scale), sequence_s (request_s is solved for: `with_request_s`)
BOUNDS = ((0.0, 1.0), (math.log(0.02), math.log(50.0)), (0.0, 0.1))


def figures_of(m) -> dict[str, float]:
    """The figures a calibration matches, of simulated or measured serving."""
    return {"ttft_p50_s": m.ttft_s.p50, "tpot_p50_s": m.tpot_s.p50, "tpot_p90_s": m.tpot_s.p90,
            "output_tokens_per_s": m.output_tokens_per_s}  # fmt: skip


def line_figures(batches: DecodeBatches | None, at: tuple[float, float] | None) -> dict:
    """TPOT on `batches`' line at the concurrencies `at` (the measured run's low and high
    end), as figures to match; none when either is missing."""
    if batches is None or at is None:
        return {}
    return {"tpot_at_low_s": batches.tpot_s(at[0]), "tpot_at_high_s": batches.tpot_s(at[1])}


def separable_range(batches: DecodeBatches | None) -> tuple[float, float] | None:
    """The measured run's range of concurrency its line is matched at, or None when it
    cannot tell a time per sequence from the fixed time."""
    return batches.concurrency if batches is not None and batches.separable else None


@dataclass(frozen=True)
class Calibration:
    iteration_s: float
    request_s: float
    device_scale: float
    sequence_s: float
    device: str  # the device the runs were measured on: device_scale holds only there
    sources: tuple[str, ...]  # the measured runs' files or servers
    measured: tuple[dict, ...]
    before: tuple[dict, ...]  # each measured run simulated with the shipped costs
    after: tuple[dict, ...]  # and with the fitted ones
    batches: tuple = ()  # per measured run, its `DecodeBatches` (None: no requests kept)

    @property
    def source(self) -> str:
        return ", ".join(self.sources)

    def to_json(self) -> dict:
        runs = zip(self.sources, self.measured, self.before, self.after, strict=True)
        return {
            "iteration_s": self.iteration_s,
            "request_s": self.request_s,
            "device_scale": self.device_scale,
            "sequence_s": self.sequence_s,
            "device": self.device,
            "runs": [
                {
                    "source": src,
                    "measured": m,
                    "simulated_before": b,
                    "simulated_after": a,
                    "decode_batches": d.to_json() if d is not None else None,
                }
                for (src, m, b, a), d in zip(
                    runs, self.batches or [None] * len(self.sources), strict=True
                )
            ],
        }

    def errors(self, simulated: tuple[dict, ...]) -> list[dict[str, float]]:
        """Per measured run, each figure's simulated / measured − 1."""
        return [{k: s[k] / m[k] - 1 for k in FIGURES if k in m}
                for s, m in zip(simulated, self.measured, strict=True)]  # fmt: skip


def fit(runs: list[Callable[[tuple[float, float, float, float]], dict]], measured: list[dict],
        start: tuple[float, float, float], device: str, sources: list[str],
        batches: list | None = None) -> Calibration:  # fmt: skip
    """The costs (iteration_s, request_s, device_scale, sequence_s) under which each of
    `runs` (a measured run simulated with them, giving `figures_of` and its `line_figures`)
    matches its `measured` figures; from `start`, the shipped (iteration_s, request_s,
    sequence_s), the last kept where the runs cannot tell it.
    `batches`: each measured run's `DecodeBatches`, or None."""
    import numpy as np
    from scipy.optimize import least_squares

    keys = [[k for k in FIGURES if _positive(m.get(k)) and k not in _told_by_line(m)]
            for m in measured]  # fmt: skip
    if not any(keys):
        from ceiling.errors import InvalidInput

        raise InvalidInput(f"{sources[0]}: the measured run has none of {', '.join(FIGURES)}")
    batches = list(batches or [None] * len(runs))
    # a time a sequence from two loads or more, or from one run's range of batches
    n = 3 if len(runs) > 1 or any(map(separable_range, batches)) else 2
    cache: dict = {}

    def simulated(x) -> tuple[float, tuple[dict, ...]]:
        """request_s, and the runs simulated under x (iteration_s, log device_scale[,
        sequence_s]) and it."""
        key = tuple(np.round(x, 12))
        if key not in cache:
            costs = (float(x[0]), 0.0, math.exp(float(x[1])), float(x[2]) if n > 2 else start[2])
            cache[key] = with_request_s(tuple(run(costs) for run in runs), measured)
        return cache[key]

    def residuals(x):
        pairs = zip(simulated(x)[1], measured, keys, strict=True)
        logs = [math.log(max(sim[k], 1e-12) / m[k]) for sim, m, ks in pairs for k in ks]
        return np.array([*logs, PRIOR * x[1]])

    lo, hi = (np.array(b[:n]) for b in zip(*BOUNDS, strict=True))
    slopes = [b.per_sequence_s for b in batches if separable_range(b)]
    x0 = np.clip([max(start[0], 1e-4), 0.0, max(slopes, default=1e-4)][:n], lo, hi)
    sol = least_squares(residuals, x0, bounds=(lo, hi), diff_step=0.05,
                        x_scale=[1e-3, 1.0, 1e-3][:n], max_nfev=80)  # fmt: skip
    x = [float(v) for v in sol.x] + [start[2]] * (3 - n)
    request_s, after = simulated(sol.x)
    before = tuple(run((start[0], start[1], 1.0, start[2])) for run in runs)
    shown = tuple({k: m[k] for k in ks} for m, ks in zip(measured, keys, strict=True))
    return Calibration(x[0], request_s, math.exp(x[1]), x[2], device, tuple(sources), shown,
                       before, after, tuple(batches))  # fmt: skip


def with_request_s(simulated: tuple[dict, ...], measured: list[dict]):
    """(request_s, `simulated` with it): a request's way in and out adds to every TTFT and to
    nothing else, so the time that matches the measured TTFT p50 is their difference (the
    median over runs; none below 0)."""
    import numpy as np

    gaps = [m["ttft_p50_s"] - s["ttft_p50_s"] for s, m in zip(simulated, measured, strict=True)
            if _positive(m.get("ttft_p50_s"))]  # fmt: skip
    request_s = max(float(np.median(gaps)), 0.0) if gaps else 0.0
    return request_s, tuple({**s, "ttft_p50_s": s["ttft_p50_s"] + request_s} for s in simulated)


def _told_by_line(m: dict) -> tuple[str, ...]:
    """The figures a run's TPOT line stands for: TPOT's p90, whose spread above the p50
    holds the batches' range and also the host's stalls (matched beside the line, it would
    steepen the time a sequence to make the stalls' spread)."""
    return ("tpot_p90_s",) if "tpot_at_high_s" in m else ()


def _positive(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < float("inf")
