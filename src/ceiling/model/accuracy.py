"""How sure a prediction is: errors against published runs, by regime, scored
leave-one-source-out.

A scored run is a `Residual`: the regime family it belongs to (`base`: "training", "decode
expected", "serving latency", ...), the features of the prediction (MoE, FP8, a device
generation, ...), the error of the prediction as shipped (`error`, predicted/published − 1)
and the error with every fitted constant that came from its own source refit on the other
sources (`loso_error`). A regime is the base alone or the base with one feature; a
prediction's band (`band_for`) is the widest regime it falls in, or "no published run like
this was checked" when one of its features has fewer than MIN_CASES scored runs.

The refit (`refit`, `loso_errors`) works on each run's sensitivity to each constant: the
prediction's elasticity e = d ln(prediction) / d ln(constant), measured by the caller, so a
constant's value c moves a prediction p0 to p0·exp(e·(c/c0 − 1)) (first order; a share
that may be 0 stays defined). A constant is refit from the value
each run it enters implies, one vote per source, shrunk toward its data-free prior; the
held-out source's runs left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

MIN_CASES = 3  # fewer scored runs than this in a regime: "no published run like this"


@dataclass(frozen=True)
class Residual:
    base: str  # "training", "decode expected", "decode ceiling", "serving throughput", ...
    features: tuple[str, ...]
    source: str  # the held-out unit: the source's family
    run: str
    error: float  # predicted / published − 1, constants as shipped
    loso_error: float  # the same with the constants from its own source refit without it


@dataclass(frozen=True)
class Band:
    """The error band of a prediction: the regime it falls in and that regime's median and
    p90 |error| over published runs, scored leave-one-source-out."""

    regime: str
    cases: int
    sources: int
    median_abs_error: float | None
    p90_abs_error: float | None
    note: str = ""

    def to_json(self) -> dict:
        return {
            "regime": self.regime,
            "cases": self.cases,
            "sources": self.sources,
            "median_abs_error": self.median_abs_error,
            "p90_abs_error": self.p90_abs_error,
            **({"note": self.note} if self.note else {}),
        }

    def short(self) -> str:
        """ "±9 % (median, 31 runs)", or that no published run like it was checked."""
        if not self.cases:
            return "no published run like this checked"
        return f"±{self.median_abs_error * 100:.0f} % (median, {self.cases} runs)"

    def text(self) -> str:
        """ "±9 % typical, ±21 % p90; 31 published runs of this kind" or the lack of them."""
        if not self.cases:
            return f"no published run like this was checked ({self.note or self.regime})"
        return (
            f"±{self.median_abs_error * 100:.0f} % typical, ±{self.p90_abs_error * 100:.0f} % p90; "
            f"{self.cases} published runs of this kind from {self.sources} sources"
        )


@dataclass(frozen=True)
class RegimeScore:
    name: str
    cases: int
    sources: int
    median_abs_error: float
    p90_abs_error: float
    loso_median_abs_error: float
    loso_p90_abs_error: float
    # the held-out median with one source's runs left out of it, lowest and highest over the
    # sources (how much the figure rests on one source); None with fewer than 2 sources
    loso_median_range: tuple[float, float] | None = None

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "cases": self.cases,
            "sources": self.sources,
            "median_abs_error": self.median_abs_error,
            "p90_abs_error": self.p90_abs_error,
            "loso_median_abs_error": self.loso_median_abs_error,
            "loso_p90_abs_error": self.loso_p90_abs_error,
            "loso_median_without_one_source": (
                list(self.loso_median_range) if self.loso_median_range else None
            ),
        }


def median_without_one_source(rs: list[Residual]) -> tuple[float, float] | None:
    """The lowest and highest held-out median |error| of `rs` with one source's runs left
    out (a jackknife over sources); None with fewer than 2 sources."""
    sources = {r.source for r in rs}
    if len(sources) < 2:
        return None
    medians = [float(np.median([abs(r.loso_error) for r in rs if r.source != s])) for s in sources]
    return min(medians), max(medians)


def p90(values) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), 90))


def regime_name(base: str, feature: str | None = None) -> str:
    return base if feature is None else f"{base} · {feature}"


def regimes(residuals: list[Residual]) -> list[RegimeScore]:
    """Per base and per base × feature: cases, sources, median and p90 |error|, in-sample
    and leave-one-source-out; bases first, each followed by its features."""
    groups: dict[str, list[Residual]] = {}
    for r in residuals:
        groups.setdefault(regime_name(r.base), []).append(r)
    for r in residuals:
        for f in r.features:
            groups.setdefault(regime_name(r.base, f), []).append(r)
    out = []
    for name in sorted(groups, key=lambda n: (n.split(" · ")[0], " · " in n, n)):
        rs = groups[name]
        ins = [abs(r.error) for r in rs]
        loso = [abs(r.loso_error) for r in rs]
        out.append(
            RegimeScore(
                name=name,
                cases=len(rs),
                sources=len({r.source for r in rs}),
                median_abs_error=float(np.median(ins)),
                p90_abs_error=p90(ins),
                loso_median_abs_error=float(np.median(loso)),
                loso_p90_abs_error=p90(loso),
                loso_median_range=median_without_one_source(rs),
            )
        )
    return out


def band_for(base: str, features, residuals: list[Residual]) -> Band:
    """The band of a prediction in regime family `base` with `features`: the widest
    (leave-one-source-out p90) regime among the base and each feature's, over `residuals`;
    a feature with fewer than MIN_CASES scored runs makes the prediction unchecked."""
    mine = [r for r in residuals if r.base == base]
    candidates: list[tuple[str, list[Residual]]] = [(regime_name(base), mine)]
    for f in features:
        rs = [r for r in mine if f in r.features]
        if len(rs) < MIN_CASES:
            checked = f"{len(rs)} published run{'s' * (len(rs) != 1)}"
            return Band(regime_name(base, f), 0, 0, None, None, f"{checked} of {base} · {f}")
        candidates.append((regime_name(base, f), rs))
    if len(mine) < MIN_CASES:
        return Band(regime_name(base), 0, 0, None, None, f"{len(mine)} published runs")
    best = None
    for name, rs in candidates:
        loso = [abs(r.loso_error) for r in rs]
        b = Band(name, len(rs), len({r.source for r in rs}), float(np.median(loso)), p90(loso))
        if best is None or b.p90_abs_error > best.p90_abs_error:
            best = b
    return best


@dataclass(frozen=True)
class Scored:
    """One run's prediction, ready for leave-one-source-out: its published figure, the
    prediction with the constants as shipped and its elasticity to each constant it enters."""

    source: str
    predicted: float
    published: float
    elasticity: dict[str, float] = field(default_factory=dict)
    # constants added as they are to the predicted time: their `elasticity` entry is then
    # 1 / p0 (per unit of the constant), and the prediction p0·(1 + (c − c0) / p0) exactly
    linear: tuple[str, ...] = ()
    # constants added to the time a rate is the reciprocal of (a time added to every serving
    # iteration of a run whose decisions do not depend on the clock): the prediction is then
    # p0 / (1 + e·(c − c0)) exactly
    reciprocal: tuple[str, ...] = ()

    @property
    def exact(self) -> tuple[str, ...]:
        """The constants this prediction follows exactly at any value."""
        return self.linear + self.reciprocal

    def at(self, values: dict[str, float], shipped: dict[str, float]) -> float:
        """The prediction with the constants at `values` (others as shipped)."""
        exponent, factor = 0.0, 1.0
        for name, e in self.elasticity.items():
            if name not in values:
                continue
            if name in self.reciprocal:
                factor /= max(1.0 + e * (values[name] - shipped[name]), 1e-9)
            elif name in self.linear:
                factor *= max(1.0 + e * (values[name] - shipped[name]), 1e-9)
            else:  # first order in the constant's relative change
                exponent += e * (values[name] / shipped[name] - 1.0)
        return self.predicted * factor * math.exp(exponent)


PRIOR_WEIGHT = 1  # the prior counts as one source in a refit
# A run votes on a constant only if its prediction moves by at least this share of itself
# when the constant doubles (its relative sensitivity, whatever the constant's unit): a
# latency of seconds of queueing says nothing of a few milliseconds a request.
MOVES = 0.05


def weighted_median(values: list[float], weights: list[float]) -> float:
    """The value at which the weights below and above balance (the least-absolute-deviations
    fit of a constant to `values` with these weights); midway between two values when the
    balance falls exactly between them, as the plain median of equal weights does."""
    order = np.argsort(values)
    x = np.asarray(values, dtype=float)[order]
    cumulative = np.cumsum(np.asarray(weights, dtype=float)[order])
    half = cumulative[-1] / 2
    i = int(np.searchsorted(cumulative, half))
    if i + 1 < len(x) and math.isclose(cumulative[i], half, rel_tol=1e-12):
        return float((x[i] + x[i + 1]) / 2)
    return float(x[i])


def refit(name: str, runs: list[Scored], shipped: dict[str, float], low: float, high: float,
          prior: float) -> float:  # fmt: skip
    """The value of constant `name` the `runs` it enters imply: each run implies the value
    that makes its prediction exact (c0·(1 + ln(published/predicted)/e)); each source votes
    the weighted median of its runs' values, each weighted by how much its log prediction
    moves with the constant (the value that minimises the source's sum of |log errors| to
    first order, so that a run that hardly moves with the constant hardly counts); the refit
    is the median of the votes and the prior (worth PRIOR_WEIGHT sources), within
    [low, high]. With no run to go by, the prior."""
    votes: dict[str, list[tuple[float, float]]] = {}
    size = shipped[name] or high  # the constant's scale, for the sensitivity of a run
    for r in runs:
        e = r.elasticity.get(name, 0.0)
        exact = name in r.reciprocal or name in r.linear  # e per unit of the constant
        if abs(e) * (size if exact else 1.0) < MOVES:  # hardly moves with it: says nothing
            continue
        if name in r.reciprocal:
            implied, weight = shipped[name] + (r.predicted / r.published - 1.0) / e, abs(e)
        elif name in r.linear:
            implied, weight = shipped[name] + (r.published / r.predicted - 1.0) / e, abs(e)
        else:
            implied = shipped[name] * (1.0 + math.log(r.published / r.predicted) / e)
            weight = abs(e) / shipped[name]
        votes.setdefault(r.source, []).append((min(max(implied, low), high), weight))
    points = [weighted_median([v for v, _ in vs], [w for _, w in vs]) for vs in votes.values()]
    if not points:
        return prior
    # the median of the sources' votes and the prior's (robust to one source far from the
    # others); the prior alone when no run implies anything
    return min(max(float(np.median(points + [prior] * PRIOR_WEIGHT)), low), high)


FIRST_ORDER = 0.2  # a refit this far from the shipped value (relative) is re-predicted


def loso_values(runs: list[Scored], declared: dict, shipped: dict[str, float]) -> list[dict]:
    """For each run, the constants chosen from its own source, refit on the other sources'
    runs (`declared`: name -> model.fitted.Fitted; `shipped`: the values in use)."""
    refits: dict[str, dict[str, float]] = {}
    for r in runs:
        if r.source not in refits:
            others = [x for x in runs if x.source != r.source]
            refits[r.source] = {
                name: refit(name, others, shipped, f.low, f.high, f.prior)
                for name, f in declared.items()
                if r.source in f.sources
            }
    return [refits[r.source] for r in runs]


def near(values: dict[str, float], shipped: dict[str, float], exact=()) -> bool:
    """Whether the first order holds: every value within FIRST_ORDER of the shipped one
    (those in `exact` enter exactly at any value)."""
    return all(k in exact or (abs(v / shipped[k] - 1.0) <= FIRST_ORDER if shipped[k] else v == 0)
               for k, v in values.items())  # fmt: skip


def loso_errors(runs: list[Scored], declared: dict, shipped: dict[str, float]) -> list[float]:
    """Each run's error with every constant chosen from its own source refit on the other
    sources' runs, to first order (`Scored.at`); a caller re-predicts the runs whose refit
    values are not `near` the shipped ones."""
    values = loso_values(runs, declared, shipped)
    return [r.at(v, shipped) / r.published - 1.0 for r, v in zip(runs, values, strict=True)]
