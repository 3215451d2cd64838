"""The roofline: attainable FLOP/s from arithmetic intensity, peak FLOP/s and bandwidth.

Williams, Waterman & Patterson, "Roofline: an insightful visual performance model for
multicore architectures", CACM 52(4), 2009:
    attainable(I) = min(peak, I * bandwidth),   ridge point I* = peak / bandwidth,
with I = FLOPs / bytes moved to and from memory. Below I* an op is memory-bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from ceiling.errors import InvalidInput

Bound = Literal["compute", "memory"]


def _check_positive(value: float, what: str) -> None:
    if not (math.isfinite(value) and value > 0):
        raise InvalidInput(f"{what} must be a positive finite number, got {value}")


def _check_intensity(intensity: float) -> None:
    if math.isnan(intensity) or intensity < 0:
        raise InvalidInput(f"arithmetic intensity must be >= 0 FLOP/byte, got {intensity}")


def ridge_point(peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """Intensity (FLOP/byte) where the memory roof meets the compute roof: peak / bandwidth."""
    _check_positive(peak_flops_per_s, "peak FLOP/s")
    _check_positive(bandwidth_bytes_per_s, "memory bandwidth (bytes/s)")
    return peak_flops_per_s / bandwidth_bytes_per_s


def attainable_flops_per_s(
    intensity: float, peak_flops_per_s: float, bandwidth_bytes_per_s: float
) -> float:
    """min(peak, intensity x bandwidth); an infinite intensity (no memory traffic) gives peak."""
    _check_intensity(intensity)
    _check_positive(peak_flops_per_s, "peak FLOP/s")
    _check_positive(bandwidth_bytes_per_s, "memory bandwidth (bytes/s)")
    return min(peak_flops_per_s, intensity * bandwidth_bytes_per_s)


def bound(intensity: float, peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> Bound:
    """'memory' below the ridge point, 'compute' at or above it."""
    _check_intensity(intensity)
    ridge = ridge_point(peak_flops_per_s, bandwidth_bytes_per_s)
    return "memory" if intensity < ridge else "compute"


def predicted_time_s(
    flops: float, bytes_moved: float, peak_flops_per_s: float, bandwidth_bytes_per_s: float
) -> float:
    """Roofline time: the slower of doing the FLOPs at peak and moving the bytes at bandwidth.

    Equal to flops / attainable_flops_per_s(flops / bytes) whenever flops > 0.
    """
    if flops < 0 or bytes_moved < 0:
        raise InvalidInput(f"FLOPs and bytes must be >= 0, got {flops} and {bytes_moved}")
    _check_positive(peak_flops_per_s, "peak FLOP/s")
    _check_positive(bandwidth_bytes_per_s, "memory bandwidth (bytes/s)")
    return max(flops / peak_flops_per_s, bytes_moved / bandwidth_bytes_per_s)


@dataclass(frozen=True)
class Placement:
    """Where one op sits under a roofline: its intensity, ceiling, predicted time and bound."""

    name: str
    flops: float
    bytes: float
    intensity: float  # FLOP/byte
    attainable_flops_per_s: float
    predicted_s: float
    bound: Bound


def place(
    name: str,
    flops: float,
    bytes_moved: float,
    peak_flops_per_s: float,
    bandwidth_bytes_per_s: float,
) -> Placement:
    """Put an op of `flops` FLOPs moving `bytes_moved` bytes under the roofs."""
    if bytes_moved <= 0:
        raise InvalidInput(f"{name}: bytes moved must be > 0, got {bytes_moved}")
    intensity = flops / bytes_moved
    return Placement(
        name=name,
        flops=flops,
        bytes=bytes_moved,
        intensity=intensity,
        attainable_flops_per_s=attainable_flops_per_s(
            intensity, peak_flops_per_s, bandwidth_bytes_per_s
        ),
        predicted_s=predicted_time_s(flops, bytes_moved, peak_flops_per_s, bandwidth_bytes_per_s),
        bound=bound(intensity, peak_flops_per_s, bandwidth_bytes_per_s),
    )
