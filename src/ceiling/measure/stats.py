"""Statistics over raw timing samples (seconds). Pure: no clocks, no devices."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ceiling.errors import InvalidInput

# IQR/median above this and a figure is flagged: the spread is too wide to trust one number.
NOISE_THRESHOLD = 0.1


def percentile(sorted_samples: Sequence[float], q: float) -> float:
    """The q-th percentile (q in [0, 100]) by linear interpolation between closest ranks.

    Same definition as numpy's default ('linear'), so figures agree with numpy.percentile.
    """
    if not sorted_samples:
        raise InvalidInput("no samples")
    if not 0.0 <= q <= 100.0:
        raise InvalidInput(f"percentile must be in [0, 100], got {q}")
    pos = (len(sorted_samples) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_samples) - 1)
    frac = pos - lo
    return sorted_samples[lo] + (sorted_samples[hi] - sorted_samples[lo]) * frac


@dataclass(frozen=True)
class Stats:
    """Summary of samples in seconds; `noisy` when IQR/median exceeds NOISE_THRESHOLD."""

    n: int
    min: float
    median: float
    mean: float
    p10: float
    p90: float
    iqr: float
    noisy: bool

    @property
    def relative_iqr(self) -> float:
        return self.iqr / self.median if self.median > 0 else math.inf


def summarize(samples: Sequence[float]) -> Stats:
    """min, median, mean, p10, p90 and IQR (p75 - p25) of the samples."""
    if len(samples) == 0:
        raise InvalidInput("cannot summarize zero samples")
    for s in samples:
        if not math.isfinite(s) or s < 0:
            raise InvalidInput(f"a timing sample must be a finite duration >= 0, got {s}")
    xs = sorted(float(s) for s in samples)
    median = percentile(xs, 50)
    iqr = percentile(xs, 75) - percentile(xs, 25)
    noisy = median > 0 and iqr / median > NOISE_THRESHOLD
    return Stats(
        n=len(xs),
        min=xs[0],
        median=median,
        mean=math.fsum(xs) / len(xs),
        p10=percentile(xs, 10),
        p90=percentile(xs, 90),
        iqr=iqr,
        noisy=noisy,
    )
