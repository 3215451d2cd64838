"""The roofline: attainable FLOP/s from arithmetic intensity, peak FLOP/s and bandwidth.

Williams, Waterman & Patterson, "Roofline: an insightful visual performance model for
multicore architectures", CACM 52(4), 2009:
    attainable(I) = min(peak, I * bandwidth),   ridge point I* = peak / bandwidth,
with I = FLOPs / bytes moved to and from memory. Below I* an op is memory-bound.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from ceiling.errors import InvalidInput
from ceiling.model.first_touch import NONE as NO_FIRST_TOUCH
from ceiling.model.first_touch import FirstTouch

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


# ---- the overhead roof ------------------------------------------------------------------
#
# Every op call also costs a fixed amount however little it does: dispatch on a CPU, a
# kernel launch on a GPU (`ceiling bench overhead` measures it). An op's predicted time is
# the largest of three: FLOPs / peak, bytes / bandwidth, and that per-op floor (on a CPU,
# where the thread that dispatches an op then runs it, the floor adds to the larger of
# the other two instead). When the step's working set fits the last-level cache, its
# bytes come from the cache, so the memory roof is the cache's bandwidth, not DRAM's.
# Bytes written into a buffer the op has just allocated cost more where the allocator
# gets large blocks fresh from the operating system (model.first_touch): that is part of
# the op's memory time. And an
# elementwise function (a tanh, an exp, a softmax) costs the vector units several
# instructions per element, whatever its nominal FLOPs: its compute time is its elements
# × the cost per element measured for that function on this device, when that is longer.
#
# An eager training step pays more host time per op than a plain call: the forward records
# the autograd graph (and runs the modules' Python around each op), the backward runs one
# engine node per op, a per-parameter optimizer loops in Python. Each phase's host cost
# per op is measured (measure.roofs.host_costs) and charged by the op's phase. On a CPU
# the host cost adds to the op's work (one thread does both); on a GPU the host queues
# kernels ahead of the device, so a stretch of ops takes the longer of the two, not their
# sum (step_with_queue).

Bound3 = Literal["compute", "memory", "overhead"]


@dataclass(frozen=True)
class Roofs:
    """The three roofs of one device. `cache_*`: the last-level cache (None: unknown)."""

    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    per_op_s: float = 0.0
    cache_bytes: float | None = None
    cache_bandwidth_bytes_per_s: float | None = None
    first_touch: FirstTouch = NO_FIRST_TOUCH
    # measured seconds per element of elementwise functions, by aten name ("gelu[tanh]")
    function_s_per_element: Mapping[str, float] = field(default_factory=dict)
    # the thread that dispatches an op also runs it (a CPU): the floor adds to the work;
    # a GPU runs one kernel while the host launches the next: the floor is a roof
    serial_dispatch: bool = False
    # host seconds per op by phase ("forward", "backward", "optimizer", ...): an op of a
    # phase listed pays this instead of per_op_s
    host_s_by_phase: Mapping[str, float] = field(default_factory=dict)
    # bandwidth an elementwise op of so many bytes (read + written) moves them at, measured
    # at a few sizes ((bytes, bytes/s), by size): an op larger than the caches nearest the
    # core streams slower than the hot read the memory roof is, whatever the working set
    bandwidth_by_bytes: tuple[tuple[float, float], ...] = ()

    def bandwidth_at(self, op_bytes: float, roof_bytes_per_s: float) -> float:
        """The bandwidth one call moving `op_bytes` gets: the memory roof, or less where the
        measured curve at that size (log-linear between its points, flat beyond) is lower."""
        curve = self.bandwidth_by_bytes
        if not curve or op_bytes <= 0:
            return roof_bytes_per_s
        sizes = [math.log(b) for b, _ in curve]
        x = min(max(math.log(op_bytes), sizes[0]), sizes[-1])
        i = max(j for j in range(len(sizes)) if sizes[j] <= x)
        if i == len(sizes) - 1:
            at = curve[i][1]
        else:
            share = (x - sizes[i]) / (sizes[i + 1] - sizes[i])
            at = curve[i][1] + share * (curve[i + 1][1] - curve[i][1])
        return min(roof_bytes_per_s, at)

    def host_s(self, phase: str | None) -> float:
        """The host cost of one op of `phase` (a recomputation replays the forward; a view
        of a phase, "forward_view", costs as that phase's ops where views were not timed
        apart)."""
        if not phase:
            return self.per_op_s
        phase = phase.replace("recompute", "forward")
        if phase not in self.host_s_by_phase:
            phase = phase.removesuffix("_view")
        return self.host_s_by_phase.get(phase, self.per_op_s)

    def __post_init__(self) -> None:
        _check_positive(self.peak_flops_per_s, "peak FLOP/s")
        _check_positive(self.bandwidth_bytes_per_s, "memory bandwidth (bytes/s)")
        if not (math.isfinite(self.per_op_s) and self.per_op_s >= 0):
            raise InvalidInput(f"per-op time must be >= 0 s, got {self.per_op_s}")
        for phase, cost in self.host_s_by_phase.items():
            if not (math.isfinite(cost) and cost >= 0):
                raise InvalidInput(f"host time per {phase} op must be >= 0 s, got {cost}")
        for size, rate in self.bandwidth_by_bytes:
            _check_positive(size, "bytes of a measured bandwidth point")
            _check_positive(rate, "bandwidth at a size (bytes/s)")
        sizes = [b for b, _ in self.bandwidth_by_bytes]
        if sizes != sorted(set(sizes)):
            raise InvalidInput("bandwidth points must be listed by increasing size, each once")

    def memory_roof(self, working_set_bytes: float) -> tuple[float, str]:
        """Bandwidth the step's bytes move at, and where they come from."""
        fits = self.cache_bytes is not None and working_set_bytes <= self.cache_bytes
        if fits and self.cache_bandwidth_bytes_per_s:
            return self.cache_bandwidth_bytes_per_s, "last-level cache"
        if fits:
            return (
                self.bandwidth_bytes_per_s,
                "DRAM (fits the cache, whose bandwidth was not measured)",
            )
        return self.bandwidth_bytes_per_s, "DRAM"


@dataclass(frozen=True)
class OpTime:
    compute_s: float
    memory_s: float
    overhead_s: float
    serial: bool = False  # the floor is paid before the work, not under it (a CPU)

    @property
    def time_s(self) -> float:
        if self.serial:
            return self.overhead_s + max(self.compute_s, self.memory_s)
        return max(self.compute_s, self.memory_s, self.overhead_s)

    @property
    def bound(self) -> Bound3:
        # ties go to the work (compute, then memory) rather than to the floor
        terms = {"compute": self.compute_s, "memory": self.memory_s, "overhead": self.overhead_s}
        return max(terms, key=lambda k: (terms[k], k != "overhead", k == "compute"))


@dataclass(frozen=True)
class OpWork:
    """One op call, or a group of calls, as the roofs see it."""

    flops: float
    bytes: float
    calls: int = 1
    flops_per_s: float | None = None  # its own compute roof (a matmul's rate at its shape)
    new_buffers: tuple = ()  # bytes of each buffer it allocated (first touch) ...
    page_faults: int | None = None  # ... or the page faults it took, where counted
    function: str | None = None  # the elementwise function it computes ...
    elements: int = 0  # ... over this many elements
    phase: str | None = None  # forward | backward | optimizer ...: its host cost per call


def op_time(
    flops: float,
    bytes_moved: float,
    calls: int,
    roofs: Roofs,
    bandwidth_bytes_per_s: float,
    flops_per_s: float | None = None,
    new_buffers=(),
    function: str | None = None,
    elements: int = 0,
    page_faults: int | None = None,
    phase: str | None = None,
) -> OpTime:
    """`calls` calls of an op doing `flops` and moving `bytes_moved` in all, its bytes at
    `bandwidth_bytes_per_s` (from Roofs.memory_roof), its FLOPs at `flops_per_s` (a matmul's
    measured rate at its own shape) or else the peak; `new_buffers`: bytes of each output
    it allocated, whose first touch adds to its memory time (priced by `page_faults`, the
    faults it took, where counted); `function` over `elements`: at least that many
    elements at the function's measured cost each; `phase`: the host cost per call of
    that phase of a training step (Roofs.host_s). Each call's bytes move at the memory roof,
    or at the bandwidth measured for an op of its size where that is lower
    (Roofs.bandwidth_at)."""
    if flops < 0 or bytes_moved < 0 or calls < 0:
        raise InvalidInput(
            f"FLOPs, bytes and calls must be >= 0, got {flops}, {bytes_moved}, {calls}"
        )
    _check_positive(bandwidth_bytes_per_s, "memory bandwidth (bytes/s)")
    bandwidth_bytes_per_s = roofs.bandwidth_at(bytes_moved / max(calls, 1), bandwidth_bytes_per_s)
    rate = flops_per_s or roofs.peak_flops_per_s
    per_element = roofs.function_s_per_element.get(function, 0.0) if function else 0.0
    compute = max(flops / rate, elements * per_element)
    touch = roofs.first_touch.seconds(new_buffers, page_faults)
    memory = bytes_moved / bandwidth_bytes_per_s + touch
    return OpTime(compute, memory, calls * roofs.host_s(phase), roofs.serial_dispatch)


@dataclass(frozen=True)
class StepPrediction:
    """A step as the sum of its ops, each at the largest of its three roofs."""

    time_s: float
    by_bound_s: dict[str, float]  # time of the ops each roof holds back
    memory_source: str

    @property
    def bound(self) -> Bound3:
        return max(self.by_bound_s, key=lambda k: self.by_bound_s[k])  # type: ignore[return-value]


def predict_step(ops, roofs: Roofs, working_set_bytes: float) -> StepPrediction:
    """`ops`: an OpWork, or its fields in order as a tuple (flops, bytes, calls, ...), per
    op call or group of calls, run one after another: on a CPU each op's host cost then
    its work; on a GPU as step_with_queue has it."""
    bandwidth, source = roofs.memory_roof(working_set_bytes)
    times = []
    for op in ops:
        w = op if isinstance(op, OpWork) else OpWork(*op)
        times.append(op_time(w.flops, w.bytes, w.calls, roofs, bandwidth, w.flops_per_s,
                             w.new_buffers, w.function, w.elements, w.page_faults,
                             w.phase))  # fmt: skip
    if roofs.serial_dispatch:
        by_bound = {"compute": 0.0, "memory": 0.0, "overhead": 0.0}
        for t in times:
            by_bound[t.bound] += t.time_s
    else:
        by_bound = step_with_queue(times)
    return StepPrediction(sum(by_bound.values()), by_bound, source)


def step_with_queue(times) -> dict[str, float]:
    """A GPU step: the host issues op i after its host cost (OpTime.overhead_s), the device
    starts it once issued and the previous op is done, and runs it for the longer of its
    compute and memory times. The device's idle time waiting on the host is the overhead
    roof's; each op's own run is its bound's. Where the host keeps ahead, the step is the
    device's work; where it falls behind, the host's; the sum of the three is the step."""
    by_bound = {"compute": 0.0, "memory": 0.0, "overhead": 0.0}
    host = device = 0.0
    for t in times:
        host += t.overhead_s
        by_bound["overhead"] += max(host - device, 0.0)
        work = max(t.compute_s, t.memory_s)
        by_bound["compute" if t.compute_s >= t.memory_s else "memory"] += work
        device = max(device, host) + work
    return by_bound
