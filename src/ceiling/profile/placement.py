"""Place recorded ops and modules on the roofline of a device, and draw hints from it.

For each row: intensity I = FLOPs / bytes; attainable = min(peak, I × bandwidth);
achieved = FLOPs / measured time; fraction = achieved / attainable (equivalently roofline
time / measured time: 1 means the op runs at its ceiling); bound = which roof applies.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ceiling.model import roofline

# Ops that only move data (copies, norms' extra passes, elementwise) against the work that
# the dense peak describes (matmul, attention). Ops with no FLOP formula ("unknown") are
# neither: they are listed, never blamed.
NON_MODEL_CATEGORIES = ("elementwise", "norm", "reduction", "memory", "other")
UNKNOWN = "unknown"

# Hint thresholds, as fractions of the recorded op time or counts.
FUSE_TIME_SHARE = 0.25  # non-matmul ops above this share of time ...
FUSE_FLOP_SHARE = 0.10  # ... while doing less than this share of the FLOPs
ALIGN_TIME_SHARE = 0.05  # misaligned matmuls worth a hint once they take this share
ALIGN_BYTES = 16  # tensor-core and vector loads want rows in multiples of 16 bytes
SHORT_OP_S = 20e-6  # an op this short is dominated by dispatch / launch, not by work
SHORT_OP_SLACK = 4.0  # ... when it takes this many times its roofline time
SHORT_TIME_SHARE = 0.30
MEMORY_TIME_SHARE = 0.50  # memory-bound ops above this share of op time
HOST_SHARE = 0.30  # time outside ops (Python, autograd) above this share of the step
NEAR_ROOF = 0.25  # memory-bound ops at this share of their roof are bandwidth-limited
OPTIMIZER_TIME_SHARE = 0.20  # per-parameter optimizer ops above this share of op time
FOREACH_PREFIXES = ("aten._foreach_", "aten._fused_")  # an optimizer's ops over lists


@dataclass(frozen=True)
class Placement:
    name: str
    category: str
    calls: int
    flops: float
    bytes: float
    time_s: float | None
    intensity: float | None  # FLOP/byte; None when nothing moves
    attainable_flops_per_s: float
    achieved_flops_per_s: float | None
    roofline_time_s: float
    fraction_of_attainable: float | None
    bound: str  # "compute" | "memory" | "overhead" | "unknown" (an op with no FLOP formula)
    exact: bool


def place(
    totals, peak_flops_per_s: float, bandwidth_bytes_per_s: float, per_op_s: float = 0.0
) -> Placement:
    """One OpTotals (from the recorder) against the roofline of the device; with
    `per_op_s`, the overhead roof too (calls × the per-op floor)."""
    flops, moved = totals.flops, totals.bytes
    intensity = flops / moved if moved > 0 else (math.inf if flops > 0 else None)
    i = 0.0 if intensity is None else intensity
    attainable = roofline.attainable_flops_per_s(i, peak_flops_per_s, bandwidth_bytes_per_s)
    bound = roofline.bound(i, peak_flops_per_s, bandwidth_bytes_per_s)
    if totals.category == UNKNOWN:
        bound = UNKNOWN
    ideal = roofline.predicted_time_s(flops, moved, peak_flops_per_s, bandwidth_bytes_per_s)
    floor = totals.calls * per_op_s
    if floor > ideal:
        ideal = floor
        bound = "overhead" if bound != UNKNOWN else bound
    t = totals.time_s
    achieved = flops / t if t and t > 0 else None
    fraction = ideal / t if t and t > 0 else None
    return Placement(
        name=totals.name,
        category=totals.category,
        calls=totals.calls,
        flops=flops,
        bytes=moved,
        time_s=t,
        intensity=None if intensity is None or math.isinf(intensity) else intensity,
        attainable_flops_per_s=attainable,
        achieved_flops_per_s=achieved,
        roofline_time_s=ideal,
        fraction_of_attainable=fraction,
        bound=bound,
        exact=totals.exact,
    )


def _pct(x: float) -> str:
    return f"{x * 100:.0f} %"


def _roofline_time(c, peak: float, bw: float) -> float:
    return roofline.predicted_time_s(c.flops, c.bytes, peak, bw)


def roofline_time(calls, peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """Sum over op calls of max(FLOPs / peak, bytes / bandwidth): the step with every op at
    its ceiling and none overlapping."""
    return sum(_roofline_time(c, peak_flops_per_s, bandwidth_bytes_per_s) for c in calls)


def _fuse_hint(timed, total_time: float, total_flops: float) -> str | None:
    other = [c for c in timed if c.category in NON_MODEL_CATEGORIES]
    t_share = sum(c.time_s for c in other) / total_time
    f_share = sum(c.flops for c in other) / total_flops if total_flops else 0.0
    if t_share < FUSE_TIME_SHARE or f_share > FUSE_FLOP_SHARE:
        return None
    return (
        f"elementwise, normalisation and copy ops are {_pct(t_share)} of op time at "
        f"{_pct(f_share)} of FLOPs: fuse them (torch.compile) or drop extra passes"
    )


def _launch_hint(timed, total_time: float, peak: float, bw: float, gpu: bool) -> str | None:
    short = [
        c
        for c in timed
        if c.time_s < SHORT_OP_S and c.time_s > SHORT_OP_SLACK * _roofline_time(c, peak, bw)
    ]
    share = sum(c.time_s for c in short) / total_time
    if share < SHORT_TIME_SHARE:
        return None
    median_us = statistics.median(c.time_s for c in timed) * 1e6
    return (
        f"{len(short)} of {len(timed)} op calls are shorter than {SHORT_OP_S * 1e6:.0f} µs and "
        f"far above their roofline time ({_pct(share)} of op time, median op "
        f"{median_us:.1f} µs): time per op is launch/dispatch-bound; use larger batches, "
        + ("CUDA graphs or torch.compile" if gpu else "or torch.compile (fewer, fused ops)")
    )


def _align_hint(timed, total_time: float, itemsize: int) -> str | None:
    def misaligned(dims) -> bool:
        return bool(dims) and any((d * itemsize) % ALIGN_BYTES for d in dims)

    bad = [c for c in timed if misaligned(c.matmul_dims)]
    share = sum(c.time_s for c in bad) / total_time
    if not bad or share < ALIGN_TIME_SHARE:
        return None
    shapes = sorted({c.matmul_dims for c in bad})
    shown = ", ".join("×".join(str(d) for d in dims) for dims in shapes[:3])
    multiple = ALIGN_BYTES // itemsize
    return (
        f"matmul dims not multiples of {multiple} (M×N×K {shown}) take {_pct(share)} of op "
        f"time: pad them to a multiple of {multiple} elements"
    )


def _memory_hint(timed, total_time: float, peak: float, bw: float) -> str | None:
    memory = [
        c
        for c in timed
        if c.bytes > 0
        and c.category != UNKNOWN
        and roofline.bound(c.flops / c.bytes, peak, bw) == "memory"
    ]
    spent = sum(c.time_s for c in memory)
    share = spent / total_time
    if share < MEMORY_TIME_SHARE:
        return None
    # how close they run to the bandwidth roof decides whether bandwidth is the limit
    at_roof = sum(_roofline_time(c, peak, bw) for c in memory) / spent
    if at_roof >= NEAR_ROOF:
        return (
            f"memory-bound ops take {_pct(share)} of op time at {_pct(at_roof)} of the "
            "bandwidth roof: bandwidth, not FLOP/s, is this step's ceiling; fuse them to "
            "move fewer bytes"
        )
    return (
        f"memory-bound ops take {_pct(share)} of op time but run at only {at_roof * 100:.2g} % "
        "of the bandwidth roof: per-op overhead (dispatch, launches, threads), not bandwidth, "
        "limits them; fuse or batch them"
    )


def _optimizer_hint(timed, total_time: float) -> str | None:
    ops = [c for c in timed if c.phase == "optimizer"]
    share = sum(c.time_s for c in ops) / total_time
    if share < OPTIMIZER_TIME_SHARE or not ops:
        return None
    if any(c.op.startswith(FOREACH_PREFIXES) for c in ops):
        return None
    return (
        f"the optimizer step takes {_pct(share)} of op time in {len(ops)} per-parameter ops: "
        "pass foreach=True (or fused=True) to the optimizer to run them as a few large ones"
    )


def _host_hint(total_time: float, step_s: float | None) -> str | None:
    if not step_s or step_s <= 0:
        return None
    # step_s is the same recorded step's wall time (less the recorder's own work), so the
    # difference is time the host spent between ops
    outside = 1.0 - min(total_time, step_s) / step_s
    if outside < HOST_SHARE:
        return None
    return (
        f"{_pct(outside)} of the recorded step ({step_s * 1e3:.3g} ms) is spent between aten "
        "ops (Python, autograd, optimizer bookkeeping): the host is a bottleneck; "
        "`ceiling step` splits the step up"
    )


def _unknown_hint(calls) -> str | None:
    names = sorted({c.op for c in calls if c.category == UNKNOWN})
    if not names:
        return None
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (
        f"{len(names)} op(s) have no FLOP formula ({shown}): their FLOPs are unknown, not "
        "zero, so MFU is a lower bound and they are left out of the bound verdicts"
    )


def hints(
    calls,
    peak_flops_per_s: float,
    bandwidth_bytes_per_s: float,
    itemsize: int,
    step_s: float | None = None,
    compiled: bool = False,
    device: str = "cuda",
) -> list[str]:
    """Short advice drawn from the numbers of one recorded step (OpCall list). `step_s`:
    that step's wall time less the recorder's own work (for the host share); `compiled`:
    the model is compiled already: the hints drawn from the eager ops' times (fuse, launch,
    memory, host) do not describe the kernels that run and are left to the compiled
    step's own (profile.compiled_step.hints). `device`: where the step ran (CUDA graphs
    are advised on a GPU only)."""
    unknown = [h for h in [_unknown_hint(calls)] if h]
    timed = [c for c in calls if c.category != "view" and c.time_s is not None]
    total_time = sum(c.time_s for c in timed)
    if not timed or total_time <= 0:
        return unknown
    total_flops = sum(c.flops for c in calls)
    eager, gpu = not compiled, device.startswith("cuda")
    found = [
        eager and _fuse_hint(timed, total_time, total_flops),
        eager and _launch_hint(timed, total_time, peak_flops_per_s, bandwidth_bytes_per_s, gpu),
        _align_hint(timed, total_time, itemsize),
        eager and _memory_hint(timed, total_time, peak_flops_per_s, bandwidth_bytes_per_s),
        _optimizer_hint(timed, total_time),
        eager and _host_hint(total_time, step_s),
    ]
    return unknown + [h for h in found if h]
