"""Fit measured scaling: speedup, efficiency, Karp–Flatt, Amdahl, Gustafson and the USL.

Input is a set of (N, time) or (N, throughput) measurements; several rows may share an N.
Every law is fitted to *throughput* X(N) by least squares with the single-worker throughput
λ free, the way R's `usl` package fits (nls on throughput); the other laws are special cases:

    USL        X(N) = λN / (1 + σ(N-1) + κN(N-1))      (Gunther)
    Amdahl     X(N) = λN / (1 + σ(N-1)),  p = 1 - σ     (the USL with κ = 0)
    Gustafson  X(N) = λ(N - α(N-1))                     (scaled problem; weak scaling)

Throughput from times: X = 1/T for a fixed problem (strong scaling), X = N/T when each
worker keeps the same share (weak scaling), so X(N)/X(1) is the (scaled) speedup either way.
Standard errors are the square roots of the covariance diagonal, scaled by the residual
variance (as R's nls reports them). Predictions carry a 95 % prediction interval: the
fitted curve's own uncertainty (delta method) plus the scatter of one new measurement
(the residual variance), times Student's t with the fit's residual degrees of freedom — so
few points give a wide band, and an exact fit (no residual degrees of freedom) gives none.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ceiling.errors import DoesNotFit, InvalidInput
from ceiling.model import laws

MODES = ("strong", "weak")
# Efficiency above this counts as superlinear (measurement noise allowance).
SUPERLINEAR_EFFICIENCY = 1.02
# N* beyond this multiple of the largest measured N is an extrapolation, said so.
FAR_BEYOND_FACTOR = 10.0
# A parameter is "supported" when it exceeds this many standard errors.
SIGNIFICANCE_SE = 2.0
# Without a standard error, a serial share below this is not called a serial part.
EXACT_SERIAL_VISIBLE = 0.01
BAND_LEVEL = 0.95


@dataclass(frozen=True)
class ScalingPoint:
    """One worker count, its rows aggregated by the median."""

    n: float
    time_s: float | None
    throughput: float
    speedup: float
    efficiency: float
    karp_flatt: float | None  # undefined at N = 1
    samples: int


@dataclass(frozen=True)
class AmdahlFit:
    p: float
    p_se: float | None
    lam: float
    lam_se: float | None
    ceiling: float  # 1 / (1 - p)
    r2: float


@dataclass(frozen=True)
class GustafsonFit:
    alpha: float
    alpha_se: float | None
    lam: float
    lam_se: float | None
    r2: float


@dataclass(frozen=True)
class UslFit:
    sigma: float
    sigma_se: float | None
    kappa: float
    kappa_se: float | None
    lam: float
    lam_se: float | None
    r2: float
    n_star: float | None  # throughput peaks here; None when κ = 0
    peak_throughput: float | None
    peak_speedup: float | None
    limit_throughput: float | None  # λ/σ, the Amdahl asymptote; None when σ = 0


@dataclass(frozen=True)
class Prediction:
    n: float
    law: str
    throughput: float
    speedup: float
    # the 95 % prediction interval; None when the fit has no residual degrees of freedom
    speedup_low: float | None
    speedup_high: float | None
    band: str = ""  # how the interval was made, or why there is none


@dataclass(frozen=True)
class ScalingFit:
    mode: str
    measure: str  # "time" or "throughput"
    baseline_throughput: float  # X(1) the speedups are relative to
    points: list[ScalingPoint]
    amdahl: AmdahlFit | None
    gustafson: GustafsonFit | None
    usl: UslFit | None
    karp_flatt_trend: str | None  # "constant" | "rising" | "falling"
    best: str | None  # "amdahl" | "usl" | "gustafson" | "linear"
    verdict: str
    predictions: list[Prediction] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------- laws


def usl_throughput(n, lam: float, sigma: float, kappa: float):
    n = np.asarray(n, dtype=float)
    return lam * n / (1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0))


def amdahl_throughput(n, lam: float, sigma: float):
    return usl_throughput(n, lam, sigma, 0.0)


def gustafson_throughput(n, lam: float, alpha: float):
    n = np.asarray(n, dtype=float)
    return lam * (n - alpha * (n - 1.0))


def karp_flatt(speedup: float, n: float) -> float | None:
    """Measured serial fraction e = (1/S - 1/N) / (1 - 1/N); undefined at N = 1."""
    laws.check_workers(n)
    if n == 1 or speedup <= 0:
        return None
    return (1.0 / speedup - 1.0 / n) / (1.0 - 1.0 / n)


def usl_peak(sigma: float, kappa: float) -> float | None:
    """N* = sqrt((1 - σ)/κ), where USL throughput peaks; None when κ = 0 (no peak)."""
    if kappa <= 0:
        return None
    return math.sqrt(max(1.0 - sigma, 0.0) / kappa)


# ---------------------------------------------------------------------------- fitting


def _check_inputs(ns: Sequence[float], values: Sequence[float], what: str) -> tuple:
    if len(ns) != len(values):
        raise InvalidInput(f"{len(ns)} worker counts but {len(values)} {what} values")
    if not ns:
        raise InvalidInput("no measurements to fit")
    n = np.asarray(ns, dtype=float)
    v = np.asarray(values, dtype=float)
    for ni in n:
        if not (math.isfinite(ni) and ni >= 1):
            raise InvalidInput(f"worker count N must be at least 1, got {ni:g}")
    for vi in v:
        if not (math.isfinite(vi) and vi > 0):
            raise InvalidInput(f"every {what} must be a positive number, got {vi:g}")
    if len(set(n.tolist())) < 2:
        raise DoesNotFit(
            f"need measurements at two or more different worker counts to fit, got only "
            f"N = {n[0]:g}"
        )
    return n, v


def _curve_fit(
    fn: Callable, n: np.ndarray, x: np.ndarray, p0: list[float], lower: list[float], upper
) -> tuple[np.ndarray, np.ndarray | None, float]:
    """Least squares with bounds; returns (params, covariance or None, R²).

    Every law is λ times a shape in N, with λ first: the fit runs on x / median(x), so
    that times of 1e-300 s or throughputs of 1e300/s fit exactly like 1 s, and λ (with its
    row and column of the covariance) is scaled back afterwards."""
    import warnings

    from scipy.optimize import OptimizeWarning, curve_fit

    scale = float(np.median(x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptimizeWarning)
        try:
            params, cov = curve_fit(
                fn,
                n,
                x / scale,
                p0=[p0[0] / scale, *p0[1:]],
                bounds=(lower, upper),
                method="trf",
                x_scale="jac",
                maxfev=20000,
            )
        except RuntimeError as exc:  # no convergence
            raise DoesNotFit(f"the fit did not converge: {exc}") from exc
    resid = x / scale - fn(n, *params)  # λ not yet scaled back
    ss_res = float(np.sum(resid**2))
    ss_tot = float(np.sum((x / scale - (x / scale).mean()) ** 2))
    params[0] *= scale
    if cov is not None:
        with np.errstate(over="ignore", invalid="ignore"):  # inf here means "unknown"
            cov[0, :] *= scale
            cov[:, 0] *= scale
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    # With no residual degrees of freedom the covariance is meaningless (inf or nan).
    if len(n) <= len(params) or cov is None or not np.all(np.isfinite(cov)):
        cov = None
    return params, cov, r2


def _se(cov: np.ndarray | None, i: int) -> float | None:
    return float(math.sqrt(max(cov[i, i], 0.0))) if cov is not None else None


def fit_usl(n: np.ndarray, x: np.ndarray) -> tuple[UslFit, np.ndarray, np.ndarray | None]:
    lam0 = float(np.median(x[n == n.min()]) / n.min())
    params, cov, r2 = _curve_fit(
        usl_throughput, n, x, [lam0, 0.01, 1e-4], [0.0, 0.0, 0.0], [np.inf, 1.0, 1.0]
    )
    lam, sigma, kappa = (float(v) for v in params)
    n_star = usl_peak(sigma, kappa)
    peak = float(usl_throughput(n_star, lam, sigma, kappa)) if n_star else None
    fit = UslFit(
        sigma=sigma,
        sigma_se=_se(cov, 1),
        kappa=kappa,
        kappa_se=_se(cov, 2),
        lam=lam,
        lam_se=_se(cov, 0),
        r2=r2,
        n_star=n_star,
        peak_throughput=peak,
        peak_speedup=peak / lam if peak is not None and lam > 0 else None,
        limit_throughput=lam / sigma if sigma > 0 else None,
    )
    return fit, params, cov


def fit_amdahl(n: np.ndarray, x: np.ndarray) -> tuple[AmdahlFit, np.ndarray, np.ndarray | None]:
    lam0 = float(np.median(x[n == n.min()]) / n.min())
    params, cov, r2 = _curve_fit(amdahl_throughput, n, x, [lam0, 0.05], [0.0, 0.0], [np.inf, 1.0])
    lam, sigma = (float(v) for v in params)
    p = 1.0 - sigma
    fit = AmdahlFit(
        p=p,
        p_se=_se(cov, 1),
        lam=lam,
        lam_se=_se(cov, 0),
        ceiling=laws.amdahl_ceiling(min(max(p, 0.0), 1.0)),
        r2=r2,
    )
    return fit, params, cov


def fit_gustafson(
    n: np.ndarray, x: np.ndarray
) -> tuple[GustafsonFit, np.ndarray, np.ndarray | None]:
    lam0 = float(np.median(x[n == n.min()]) / n.min())
    params, cov, r2 = _curve_fit(
        gustafson_throughput, n, x, [lam0, 0.05], [0.0, 0.0], [np.inf, 1.0]
    )
    lam, alpha = (float(v) for v in params)
    fit = GustafsonFit(alpha=alpha, alpha_se=_se(cov, 1), lam=lam, lam_se=_se(cov, 0), r2=r2)
    return fit, params, cov


def _band(fn: Callable, params: np.ndarray, cov: np.ndarray | None, n: float) -> float:
    """Standard error of the fitted fn(n) by the delta method (numerical gradient in the
    parameters); nan without a covariance."""
    if cov is None:
        return float("nan")
    grad = np.zeros(len(params))
    for i, v in enumerate(params):
        h = max(abs(v) * 1e-6, 1e-12)
        up, dn = params.copy(), params.copy()
        up[i] += h
        dn[i] -= h
        grad[i] = (float(fn(n, *up)) - float(fn(n, *dn))) / (2 * h)
    return float(math.sqrt(max(grad @ cov @ grad, 0.0)))


def _significant(value: float, se: float | None) -> bool:
    """More than SIGNIFICANCE_SE standard errors above 0. Without a standard error (a fit
    through the points exactly) nothing counts as supported: any value would fit."""
    if se is None or not math.isfinite(se):
        return False
    return value > SIGNIFICANCE_SE * se


def _residual_variance(fn: Callable, params: np.ndarray, n: np.ndarray, x: np.ndarray):
    """(s², residual degrees of freedom) of a fit; s² is nan without degrees of freedom."""
    dof = len(n) - len(params)
    if dof <= 0:
        return float("nan"), 0
    resid = x - fn(n, *params)
    with np.errstate(over="ignore", invalid="ignore"):  # values near 1e300: no interval
        return float(np.sum(resid**2)) / dof, dof


def _interval(fn, params, cov, n: np.ndarray, x: np.ndarray, at: float):
    """(half-width of the 95 % prediction interval at `at`, description); nan when none."""
    from scipy.stats import t as student_t

    s2, dof = _residual_variance(fn, params, n, x)
    se_fit = _band(fn, params, cov, at)
    if dof == 0 or not (math.isfinite(s2) and math.isfinite(se_fit)):
        return float("nan"), (
            "none: the law passes through every point exactly (no residual degrees of "
            "freedom), so nothing measures its uncertainty"
        )
    q = float(student_t.ppf(0.5 + BAND_LEVEL / 2, dof))
    return q * math.sqrt(se_fit**2 + s2), (
        f"{BAND_LEVEL * 100:g} % prediction interval of one new measurement (fit uncertainty "
        f"and scatter, Student t, {dof} dof)"
    )


def _aggregate(n: np.ndarray, v: np.ndarray) -> list[tuple[float, float, int]]:
    out = []
    for ni in sorted(set(n.tolist())):
        sel = v[n == ni]
        out.append((ni, float(np.median(sel)), len(sel)))
    return out


def _karp_flatt_trend(points: list[ScalingPoint]) -> str | None:
    kf = [(p.n, p.karp_flatt) for p in points if p.karp_flatt is not None]
    if len(kf) < 2:
        return None
    first, last = kf[0][1], kf[-1][1]
    spread = max(abs(first), abs(last), 0.01)
    if last - first > 0.25 * spread:
        return "rising"
    if first - last > 0.25 * spread:
        return "falling"
    return "constant"


def default_prediction_ns(max_n: float) -> list[float]:
    return [max_n * 2, max_n * 4, max_n * 8]


def fit_scaling(
    ns: Sequence[float],
    *,
    times_s: Sequence[float] | None = None,
    throughputs: Sequence[float] | None = None,
    mode: str = "strong",
    predict_ns: Sequence[float] | None = None,
) -> ScalingFit:
    """Fit every law to measurements of either times (seconds per run) or throughputs."""
    if mode not in MODES:
        raise InvalidInput(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if (times_s is None) == (throughputs is None):
        raise InvalidInput("give either times or throughputs (exactly one)")
    measure = "time" if times_s is not None else "throughput"
    values = times_s if times_s is not None else throughputs
    n, v = _check_inputs(list(ns), list(values), measure)
    # Throughput: work per second, where one unit of work is the N = 1 problem.
    work = n if mode == "weak" else np.ones_like(n)
    x = work / v if measure == "time" else v
    warnings: list[str] = []
    fits = _fit_laws(n, x, mode, warnings)
    usl, amdahl, gustafson = fits["usl"][0], fits["amdahl"][0], fits["gustafson"][0]
    baseline, points = _points(n, v, x, measure, usl or amdahl, warnings)
    max_n = float(n.max())
    _warn_far_peak(usl, max_n, warnings)
    trend = _karp_flatt_trend(points)
    best, verdict = _verdict(mode, amdahl, gustafson, usl, trend, max_n)
    predictions = []
    if best is not None:
        targets = list(predict_ns) if predict_ns else default_prediction_ns(max_n)
        predictions = _predictions(best, fits, n, x, targets, baseline)
        if any(p.n > FAR_BEYOND_FACTOR * max_n for p in predictions):
            warnings.append(
                f"predictions beyond {FAR_BEYOND_FACTOR:g}× the largest measured N are "
                "extrapolations far outside the data"
            )
    return ScalingFit(
        mode=mode,
        measure=measure,
        baseline_throughput=baseline,
        points=points,
        amdahl=amdahl,
        gustafson=gustafson,
        usl=usl,
        karp_flatt_trend=trend,
        best=best,
        verdict=verdict,
        predictions=predictions,
        warnings=warnings,
    )


def _fit_laws(n, x, mode: str, warnings: list[str]) -> dict:
    """law -> (fit, parameters, covariance); (None, None, None) where it cannot be fitted."""
    distinct = len(set(n.tolist()))
    none = (None, None, None)
    usl = fit_usl(n, x) if distinct >= 3 else none
    if distinct < 3:
        warnings.append(
            f"only {distinct} different worker counts: the USL (3 parameters) needs at least "
            "3, and 4 or more for standard errors; measure more N"
        )
    amdahl = fit_amdahl(n, x)
    # Gustafson's law describes a problem that grows with N: fitted to weak scaling only
    # (on a fixed problem its α is a number without a meaning).
    gustafson = fit_gustafson(n, x) if mode == "weak" else none
    if usl[0] is not None and usl[0].sigma_se is None:
        warnings.append(
            f"only {distinct} different worker counts: the USL fit passes through the points "
            "exactly, so it has no standard errors; measure more N"
        )
    if distinct == 2 and len(n) == 2:
        warnings.append("only 2 worker counts: Amdahl p is determined exactly, no error estimate")
    elif distinct == 3:
        warnings.append(
            "only 3 different worker counts: too few to tell a serial part from an "
            "overhead that grows with N; 4 or more (e.g. 1, 2, 4, 8) make the laws separable"
        )
    return {"usl": usl, "amdahl": amdahl, "linear": amdahl, "gustafson": gustafson}


def _points(n, v, x, measure: str, fitted, warnings: list[str]):
    """The baseline throughput (measured at N = 1, else the fit's λ) and one point per N."""
    agg = _aggregate(n, x)
    if agg[0][0] == 1:
        baseline = agg[0][1]
    else:
        baseline = fitted.lam
        warnings.append(
            f"no measurement at N = 1: speedups are relative to the fitted single-worker "
            f"throughput λ = {baseline:.4g}"
        )
    times_by_n = dict((ni, t) for ni, t, _ in _aggregate(n, v)) if measure == "time" else {}
    points = []
    for ni, xi, count in agg:
        s = xi / baseline
        points.append(
            ScalingPoint(
                n=ni,
                time_s=times_by_n.get(ni),
                throughput=xi,
                speedup=s,
                efficiency=s / ni,
                karp_flatt=karp_flatt(s, ni),
                samples=count,
            )
        )
    superlinear = [p.n for p in points if p.efficiency > SUPERLINEAR_EFFICIENCY]
    if superlinear:
        where = ", ".join(f"{k:g}" for k in superlinear)
        warnings.append(
            f"superlinear speedup (efficiency above 100 %) at N = {where}: usually caches (each "
            "worker's share fits in a faster memory) or a slow N = 1 baseline; the laws assume "
            "S(N) ≤ N, so σ and κ are clipped at 0 and the fit understates what was measured"
        )
    return baseline, points


def _warn_far_peak(usl, max_n: float, warnings: list[str]) -> None:
    if usl is None or usl.n_star is None or usl.n_star <= FAR_BEYOND_FACTOR * max_n:
        return
    if _significant(usl.kappa, usl.kappa_se):
        warnings.append(
            f"the USL peak N* = {usl.n_star:.3g} lies far beyond the largest measured N = "
            f"{max_n:g}: the peak is an extrapolation, trust it only as an order of magnitude"
        )
    else:
        se = f" ± {usl.kappa_se:.2g}" if usl.kappa_se is not None else " (no error estimate)"
        warnings.append(
            f"USL κ = {usl.kappa:.2g}{se} is not distinguishable from 0, so the data show "
            f"no peak: its N* = {usl.n_star:.3g} (far beyond the largest measured N = "
            f"{max_n:g}) means nothing"
        )


_LAW_THROUGHPUT = {
    "usl": usl_throughput,
    "amdahl": amdahl_throughput,
    "linear": amdahl_throughput,
    "gustafson": gustafson_throughput,
}


def _predictions(best: str, fits: dict, n, x, targets, baseline: float) -> list[Prediction]:
    """Speedups the best law predicts at `targets`, with their uncertainty band."""
    fn = _LAW_THROUGHPUT[best]
    _, params, cov = fits[best]
    out = []
    for t in targets:
        laws.check_workers(t, "predicted N")
        xp = float(fn(t, *params))
        half, how = _interval(fn, params, cov, n, x, t)
        known = math.isfinite(half)
        out.append(
            Prediction(
                n=float(t),
                law=best,
                throughput=xp,
                speedup=xp / baseline,
                speedup_low=max(xp - half, 0.0) / baseline if known else None,
                speedup_high=(xp + half) / baseline if known else None,
                band=how,
            )
        )
    return out


def _verdict(
    mode: str,
    amdahl: AmdahlFit,
    gustafson: GustafsonFit | None,
    usl: UslFit | None,
    trend: str | None,
    max_n: float,
) -> tuple[str, str]:
    """The law the data support best, and why, in one or two sentences."""
    kf = {
        "rising": "Karp–Flatt's serial fraction rises with N, so part of the loss is overhead "
        "that grows with N (communication, contention).",
        "constant": "Karp–Flatt's serial fraction stays about constant, as a true serial part "
        "would.",
        "falling": "Karp–Flatt's serial fraction falls with N, typical of cache effects or a "
        "slow single-worker run.",
        None: "",
    }[trend]
    if mode == "weak" and gustafson is not None:
        a = gustafson.alpha
        text = (
            f"Gustafson (problem grows with N): serial share α = {a:.3g}, so scaled "
            f"efficiency tends to 1 − α = {1 - a:.1%}."
        )
        if usl is not None and usl.kappa > 0 and _significant(usl.kappa, usl.kappa_se):
            text += (
                f" But overhead grows with N (USL κ = {usl.kappa:.3g}): even the scaled run "
                f"peaks near N* = {usl.n_star:.3g}."
            )
        return "gustafson", (text + " " + kf).strip()
    if usl is not None and usl.kappa > 0 and _significant(usl.kappa, usl.kappa_se):
        n_star = usl.n_star
        where = (
            "within the measured range"
            if n_star is not None and n_star <= max_n
            else f"beyond the largest measured N = {max_n:g}"
        )
        text = (
            f"Universal Scalability Law: besides a serial part σ = {usl.sigma:.3g}, overhead "
            f"grows with N (κ = {usl.kappa:.3g}, crosstalk); throughput peaks at N* ≈ "
            f"{n_star:.3g} ({where}) and falls after it."
        )
        return "usl", (text + " " + kf).strip()
    # Two worker counts determine p exactly (no standard error): a visible serial part is
    # still the only reading the data allow, so it is named (the warnings say how weak it is).
    exact_serial = amdahl.p_se is None and 1.0 - amdahl.p > EXACT_SERIAL_VISIBLE
    if amdahl.p < 1.0 and (_significant(1.0 - amdahl.p, amdahl.p_se) or exact_serial):
        text = (
            f"Amdahl: a serial part of {1 - amdahl.p:.1%} (p = {amdahl.p:.3f}) caps the speedup "
            f"at {amdahl.ceiling:.3g}× however many workers; no overhead growing with N is "
            "detectable."
        )
        return "amdahl", (text + " " + kf).strip()
    return "linear", (
        f"Near-linear: neither a serial part nor an overhead growing with N is detectable up to "
        f"N = {max_n:g} (p = {amdahl.p:.3f})."
    )
