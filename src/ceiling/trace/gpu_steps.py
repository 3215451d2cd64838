"""Steps on the GPU's own timeline.

A healthy training loop keeps the launch queue full: the host runs ahead, and the kernels of
step k run while the host already launches step k+1, so host `ProfilerStep` spans are the
wrong windows for the device. A step's GPU work is the device events *launched* inside its
`ProfilerStep` span, wherever they run; the step ends on the GPU when the last of them ends,
and it begins when the previous step's GPU work ended. The windows tile the GPU timeline, so
their mean is the GPU step period and the idle inside them is the GPU's idle.

The first step is partial when no earlier GPU work is in the trace (when its window began is
unknown); a trailing step is partial when the profiler stopped inside it (it launched much
less work than the others). Partial steps are dropped, and said so, whenever a whole step
remains. A lone step (or a lone partial one) is its ProfilerStep span, extended to the end of
the GPU work it launched, the window Holistic Trace Analysis gives a step's critical path. A
trace without steps has one window: the GPU-active span. Pure.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from statistics import median

# a trailing step that launched less device time than this share of the others' median
_TRAILING_SHARE = 0.5


@dataclass
class GpuSteps:
    windows: list[tuple[float, float]]
    steps: list[int]  # index of each window's host step (-1: the whole GPU-active span)
    notes: list[str] = field(default_factory=list)


def gpu_steps(spans: list[tuple[float, float]], names: list[str], events, launched_at) -> GpuSteps:
    """`events`: the device events; `launched_at(e)`: when the host launched e."""
    if not events:
        return GpuSteps([], [], ["no device events: nothing ran on the GPU"])
    if not spans:
        return _active_span(events, "no ProfilerStep in the trace")
    if len(spans) == 1:
        return _one_step(spans[0], names[0], events, launched_at)
    starts = [a for a, _ in spans]
    end: list[float | None] = [None] * len(spans)
    first: list[float | None] = [None] * len(spans)
    busy = [0.0] * len(spans)
    before = None  # end of GPU work launched before the first step
    for e in events:
        t = launched_at(e)
        k = bisect_right(starts, t) - 1
        if k < 0:
            before = e.end_s if before is None else max(before, e.end_s)
            continue
        if t >= spans[k][1]:
            continue  # launched between steps
        end[k] = e.end_s if end[k] is None else max(end[k], e.end_s)
        first[k] = e.start_s if first[k] is None else min(first[k], e.start_s)
        busy[k] += e.dur_s
    windows, kept, partial, notes = [], [], [], []
    previous = before
    for k in range(len(spans)):
        if end[k] is None:
            notes.append(f"{names[k]} launched no GPU work: left out")
            continue
        if previous is None:
            partial.append(
                (
                    k,
                    (first[k], end[k]),
                    "its GPU window's start is unknown (no earlier GPU work in the trace)",
                )
            )
        else:
            windows.append((previous, max(end[k], previous)))
            kept.append(k)
        previous = max(end[k], previous or end[k])
    if len(kept) >= 2:
        others = [busy[k] for k in kept[:-1]]
        last = kept[-1]
        if busy[last] < _TRAILING_SHARE * median(others):
            partial.append(
                (
                    last,
                    windows[-1],
                    "the profiler stopped inside it (it launched "
                    f"{busy[last] / median(others):.0%} of a step's GPU work)",
                )
            )
            windows.pop()
            kept.pop()
    if kept:
        notes += [f"{names[k]} dropped as partial: {why}" for k, _, why in partial]
        return GpuSteps(windows, kept, notes)
    if not partial:  # steps of no length (or negative): none launched the GPU's work
        return _active_span(events, "no ProfilerStep launched GPU work", notes)
    k, _, why = partial[0]
    # its GPU window is partial, its ProfilerStep span whole: one note says both
    one = _one_step(spans[k], names[k], events, launched_at, because=why)
    if one.steps != [0]:  # it launched no GPU work: the GPU-active span, the step said apart
        notes.append(f"{names[k]} is partial ({why})")
    return GpuSteps(one.windows, [k], notes + one.notes)


def _one_step(span, name: str, events, launched_at, because: str = "") -> GpuSteps:
    """A lone step is measured as Holistic Trace Analysis bounds a step's critical path: from
    its ProfilerStep's start to the later of that span's end and the end of the GPU work
    launched in it (a step that waits on the host keeps that wait)."""
    ends = [e.end_s for e in events if span[0] <= launched_at(e) < span[1]]
    if not ends:
        return _active_span(events, "no ProfilerStep launched GPU work")
    end = max(span[1], *ends)
    window = "its ProfilerStep span, to the end of the GPU work it launched"
    # `because`: why its GPU window could not be used (a partial step), said in the one note
    told = (f"one step, {name}: {because}, so its window is {window}" if because
            else f"one step: {name}'s window is {window}")  # fmt: skip
    return GpuSteps([(span[0], end)], [0], [told])


def _active_span(events, why: str, notes: list[str] | None = None) -> GpuSteps:
    lo, hi = min(e.start_s for e in events), max(e.end_s for e in events)
    told = f"{why}: one window, the GPU-active span (first device event to last)"
    return GpuSteps([(lo, hi)], [-1], [*(notes or []), told])


def gpu_lag_s(events, launched_at) -> float | None:
    """Median time from a launch to its kernel's start: how far the GPU runs behind the host."""
    lags = [e.start_s - launched_at(e) for e in events if launched_at(e) != e.start_s]
    return median(lags) if lags else None
