"""Scaling fits of your own measurements as a result: `ceiling.fit(ns, times)`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ceiling.api.arguments import BadArgument, checked
from ceiling.api.result import Result
from ceiling.errors import DoesNotFit, InvalidInput

if TYPE_CHECKING:
    from ceiling.model.scaling import ScalingFit

TIME_UNITS = ("ns", "us", "µs", "ms", "s", "min", "h")


def unit_seconds(unit: str) -> float:
    from ceiling.units import parse_time

    if unit not in TIME_UNITS:
        raise BadArgument("time_unit", f"must be one of {', '.join(TIME_UNITS)}, got {unit!r}")
    return parse_time(f"1{unit}")


def _limits(result: ScalingFit, unit: str, unit_s: float) -> dict[str, str]:
    """What no number of workers beats, in the caller's unit: the least time per run (fixed
    problem) or the highest throughput, by Amdahl and by the USL."""
    out: dict[str, str] = {}
    if result.mode != "strong":
        return out

    def said(throughput: float) -> str:  # throughput in runs per second
        if result.measure == "time":
            return f"{1.0 / throughput / unit_s:.3g} {unit} per run"
        return f"{throughput * unit_s:.3g} per {unit}"

    a, u = result.amdahl, result.usl
    if a is not None and a.p < 1.0:
        out["amdahl"] = f"Amdahl: {said(a.lam / (1.0 - a.p))} however many workers"
    if u is not None and u.n_star is not None and u.peak_throughput:
        out["usl"] = f"USL: {said(u.peak_throughput)} at its peak N* ≈ {u.n_star:.3g}"
    elif u is not None and u.limit_throughput:
        out["usl"] = f"USL: {said(u.limit_throughput)} however many workers"
    return out


@dataclass(frozen=True)
class FitResult(Result):
    """Speedup, efficiency and Karp–Flatt per worker count, and the Amdahl, Gustafson and USL
    fits (`fit`: the model's `ScalingFit`), with the limits they imply."""

    fit: ScalingFit
    mode: str
    measure: str  # "time" or "throughput"
    time_unit: str
    limits: dict[str, str]
    source: str | None = None
    plot: str | None = field(default=None, compare=False)
    title = "Scaling fit"

    @property
    def verdict(self) -> str:
        return self.fit.verdict

    @property
    def warnings(self) -> list[str]:
        return self.fit.warnings

    def points(self) -> list[dict[str, Any]]:
        return [
            {
                "n": p.n,
                "time_s": p.time_s,
                "throughput": p.throughput,
                "speedup": p.speedup,
                "efficiency": p.efficiency,
                "karp_flatt": p.karp_flatt,
                "samples": p.samples,
            }
            for p in self.fit.points
        ]

    def record(self) -> dict[str, Any]:
        from ceiling.render import scaling_summary

        out = {
            "source": self.source,
            "mode": self.mode,
            "measure": self.measure,
            "points": self.points(),
            "fit": scaling_summary.fit_dict(self.fit),
            "time_unit": self.time_unit,
            "limits": self.limits,
            "warnings": self.fit.warnings,
        }
        if self.plot is not None:
            out["plot"] = self.plot
        return out

    def heading(self) -> str:
        return f"Scaling fit ({self.mode} scaling): {self.fit.verdict}"

    def figure(self):
        from ceiling.render import scaling_plot

        name = f"{self.source} " if self.source else ""
        return scaling_plot.scaling_figure(self.record(), title=f"{name}({self.mode} scaling)")


@checked
def fit(
    ns: Sequence[float] | str | Path,
    times: Sequence[float] | None = None,
    *,
    throughputs: Sequence[float] | None = None,
    mode: str | None = None,
    time_unit: str = "s",
    predict: Sequence[float] | None = None,
    source: str | None = None,
) -> FitResult:
    """Fit Amdahl, Gustafson (weak scaling only) and the USL to run times (or throughputs,
    per `time_unit`) measured at worker counts `ns`; rows may repeat an N. `mode`: "strong"
    (a fixed problem; the default) or "weak" (the problem grows with N). `ns` may instead be
    the path of a CSV or JSON file of both (see `fit_file`: a scale result keeps its mode
    unless `mode` is given)."""
    from ceiling.model.scaling import fit_scaling

    if isinstance(ns, (str, Path)):
        if times is not None or throughputs is not None:
            raise InvalidInput("give the measurements once: a file, or ns with times")
        return fit_file(ns, mode=mode, time_unit=time_unit, predict=predict)

    mode = mode or "strong"
    if (times is None) == (throughputs is None):
        raise InvalidInput("give either times or throughputs (exactly one)")
    unit_s = unit_seconds(time_unit)
    measure = "time" if times is not None else "throughput"
    values = times if times is not None else throughputs
    try:
        ns = [float(n) for n in ns]
        values = [float(v) * unit_s if times is not None else float(v) / unit_s for v in values]
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"worker counts and measurements must be numbers ({exc})") from None
    kw = {"times_s": values} if measure == "time" else {"throughputs": values}
    predict_ns = [float(n) for n in predict] if predict else None
    try:
        result = fit_scaling(ns, mode=mode, predict_ns=predict_ns, **kw)
    except (InvalidInput, DoesNotFit) as exc:  # the data's numbers: name where they came from
        if source is None:
            raise
        raise type(exc)(f"{source}: {exc}") from None
    limits = _limits(result, time_unit, unit_s)
    return FitResult(result, mode, measure, time_unit, limits, source)


def fit_file(
    path: str | Path,
    *,
    mode: str | None = None,
    time_unit: str = "s",
    predict: Sequence[float] | None = None,
) -> FitResult:
    """`fit` of a CSV or JSON file with a column N (or workers, gpus, ...) and a column time
    (or throughput), in `time_unit`; a `ceiling scale --json` result is read as it is, its
    mode kept unless `mode` is given. Rows may repeat an N."""
    from ceiling.api.measurements import read_measurements

    unit_seconds(time_unit)  # a bad unit is refused before the file is read
    ns, values, measure, file_mode = read_measurements(Path(path))
    kw = {"times": values} if measure == "time" else {"throughputs": values}
    return fit(
        ns,
        mode=mode or file_mode or "strong",
        time_unit=time_unit,
        predict=predict,
        source=str(path),
        **kw,
    )
