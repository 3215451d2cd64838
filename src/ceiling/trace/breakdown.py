"""One step's wall time split into what the device (or, without one, the host) was doing.

Every instant of the step window is given to one category, the first that is busy in this
order: compute-bound work, memory-bound work, work of unknown bound, communication not
hidden under work ("exposed"), memory copies; what is left is idle. Communication that runs
while work runs is "overlapped" and reported beside the split, not in it. Idle time on a
device is then given a host reason: the host was waiting on data (a DataLoader span), had
just synchronised with the device, or was busy launching (launch-bound).
Pure: intervals in, seconds out.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

from ceiling.trace.intervals import Interval, clip, intersect, measure, subtract, union

COMPUTE, MEMORY_BOUND, UNKNOWN_BOUND = "compute", "memory-bound", "bound unknown"
COMM, MEMCPY, IDLE = "communication (exposed)", "memcpy/memset", "idle"
WORK = (COMPUTE, MEMORY_BOUND, UNKNOWN_BOUND)
ORDER = (*WORK, COMM, MEMCPY, IDLE)
DATA, SYNC, LAUNCH, OTHER = "waiting on data", "synchronisation", "launch-bound", "other"

# an idle gap that starts within this long after a synchronising call ends is its doing
_SYNC_REACH_S = 50e-6


@dataclass
class Breakdown:
    wall_s: float
    seconds: dict[str, float]  # category -> seconds; they sum to wall_s
    comm_s: float  # all communication, hidden or not
    comm_overlapped_s: float
    idle_reasons: dict[str, float] = field(default_factory=dict)
    intervals: dict[str, list[Interval]] = field(default_factory=dict)  # busy categories

    @property
    def comm_exposed_s(self) -> float:
        return self.seconds.get(COMM, 0.0)


def split(
    window: Interval,
    busy: dict[str, list[Interval]],
    comm: list[Interval],
    memcpy: list[Interval],
) -> Breakdown:
    """`busy` maps each of WORK to its (unnormalised) intervals."""
    taken: list[Interval] = []
    seconds: dict[str, float] = {}
    intervals: dict[str, list[Interval]] = {}
    work_all: list[Interval] = []
    for cat, raw in ((c, busy.get(c, [])) for c in WORK):
        mine = subtract(clip(union(raw), window), taken)
        seconds[cat], intervals[cat] = measure(mine), mine
        taken = union(taken + mine)
        work_all = taken
    comm_n = clip(union(comm), window)
    for cat, raw in ((COMM, comm_n), (MEMCPY, clip(union(memcpy), window))):
        mine = subtract(raw, taken)
        seconds[cat], intervals[cat] = measure(mine), mine
        taken = union(taken + mine)
    wall = window[1] - window[0]
    seconds[IDLE] = max(wall - measure(taken), 0.0)
    overlapped = measure(intersect(comm_n, work_all))
    return Breakdown(wall, seconds, measure(comm_n), overlapped, intervals=intervals)


def idle_gaps(window: Interval, busy: list[Interval]) -> list[Interval]:
    return subtract([window], union(busy))


def idle_reasons(
    gaps: list[Interval],
    data_spans: list[Interval],
    sync_ends: list[float],
    next_launch: dict[Interval, float | None],
) -> dict[str, float]:
    """Seconds of device idle per host reason. `next_launch[gap]` is when the host launched
    the work that ended the gap (None if unknown)."""
    out = {DATA: 0.0, SYNC: 0.0, LAUNCH: 0.0, OTHER: 0.0}
    data = union(data_spans)
    sync_ends = sorted(sync_ends)
    for gap in gaps:
        on_data = measure(intersect([gap], data))
        out[DATA] += on_data
        rest = gap[1] - gap[0] - on_data
        if rest <= 0:
            continue
        k = bisect_left(sync_ends, gap[0] - _SYNC_REACH_S)
        if k < len(sync_ends) and sync_ends[k] <= gap[1]:
            out[SYNC] += rest
        elif (launch := next_launch.get(gap)) is not None and launch > gap[0]:
            out[LAUNCH] += rest
        else:
            out[OTHER] += rest
    return out
