"""One rank's trace analysed: per step, the time split, FLOPs, MFU; per op, the roofline.

No I/O: it works from the events, the counted ops (`optree`) and the roofline (peak FLOP/s
per dtype and memory bandwidth, or None when no device is known).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict

from ceiling.model import roofline
from ceiling.profile.op_flops import MODEL_CATEGORIES
from ceiling.trace import breakdown as bd
from ceiling.trace.collectives import collectives
from ceiling.trace.events import (
    DATA_LOADER,
    KERNEL,
    SYNC_CALLS,
    Event,
    RankTrace,
    is_comm_kernel,
    is_host_collective,
)
from ceiling.trace.intervals import clip, measure, subtract, union
from ceiling.trace.op_rows import Roof, op_rows
from ceiling.trace.optree import OpRecord
from ceiling.trace.results import RankResult, StepResult


def _bound(rec: OpRecord, roof: Roof | None) -> str:
    c = rec.cost
    if rec.comm or c is None:
        return bd.UNKNOWN_BOUND
    if c.category in ("memory", "view"):
        return bd.MEMORY_BOUND
    if c.flops is None or c.bytes is None:
        return bd.UNKNOWN_BOUND
    if c.bytes <= 0:
        return bd.COMPUTE
    if roof is None:
        return bd.UNKNOWN_BOUND
    peak = roof.peak(c.dtype) or roof.main_peak_flops_per_s
    b = roofline.bound(c.flops / c.bytes, peak, roof.bandwidth_bytes_per_s)
    return bd.COMPUTE if b == "compute" else bd.MEMORY_BOUND


class _Index:
    """Links between events: External id -> counted op; correlation -> launch time."""

    def __init__(self, trace: RankTrace, records: list[OpRecord]) -> None:
        self.record_of_ext: dict = {}
        for i, r in enumerate(records):
            for ext in r.ext_ids:
                self.record_of_ext[ext] = i
        self.launch: dict = {}
        self.launch_ext: dict = {}  # correlation -> the launch's External id
        for e in trace.runtime:
            corr = e.args.get("correlation")
            if corr is not None:
                self.launch[corr] = e.start_s
                self.launch_ext[corr] = e.args.get("External id")

    def record(self, e: Event) -> int | None:
        """The counted op behind a device event: its own External id, else its launch's."""
        ext = e.args.get("External id")
        if ext is None or ext not in self.record_of_ext:
            ext = self.launch_ext.get(e.args.get("correlation"))
        return self.record_of_ext.get(ext)

    def launched_at(self, e: Event) -> float:
        return self.launch.get(e.args.get("correlation"), e.start_s)


class _Steps:
    """Which step an instant falls in (step spans are disjoint and sorted)."""

    def __init__(self, spans: list[tuple[float, float]]) -> None:
        self.spans = spans
        self.starts = [a for a, _ in spans]

    def of(self, t: float) -> int:
        k = bisect_right(self.starts, t) - 1
        return k if k >= 0 and t < self.spans[k][1] else -1

    def bucket(self, items, time_of) -> list[list]:
        out: list[list] = [[] for _ in self.spans]
        for item in items:
            k = self.of(time_of(item))
            if k >= 0:
                out[k].append(item)
        return out


def _start(e: Event) -> float:
    return e.start_s


def analyze_rank(
    trace: RankTrace, records: list[OpRecord], roof: Roof | None, rank: int
) -> RankResult:
    idx = _Index(trace, records)
    spans = [(s.start_s, s.end_s) for s in trace.steps]
    names = [s.name for s in trace.steps]
    if not spans:  # no ProfilerStep: the whole trace is one step
        spans = [(min(e.start_s for e in trace.events), max(e.end_s for e in trace.events))]
        names = ["whole trace"]
    steps_ix = _Steps(spans)
    bounds = [_bound(r, roof) for r in records]
    rec_step = [steps_ix.of(r.event.start_s) for r in records]
    recs_in = steps_ix.bucket(range(len(records)), lambda i: records[i].event.start_s)
    dev_in = steps_ix.bucket(trace.device_events, idx.launched_at)
    host = _HostEvents(trace, steps_ix)
    steps = []
    for k, name in enumerate(names):
        end = max([spans[k][1]] + [e.end_s for e in dev_in[k]])
        window = (spans[k][0], end)
        if trace.on_gpu:
            step = _device_step(dev_in[k], idx, bounds, window, host, k)
        else:
            step = _host_step(
                [records[i] for i in recs_in[k]],
                [bounds[i] for i in recs_in[k]],
                host.collectives[k],
                window,
            )
        step.name, step.start_s = name, window[0]
        step.host_seconds = _host_timeline(host, k, spans[k])
        _flops(step, [records[i] for i in recs_in[k]], roof)
        steps.append(step)
    shapes = any("Input Dims" in e.args for e in trace.cpu_ops)
    return RankResult(
        rank=rank,
        path=trace.path,
        device_name=trace.device_names[0] if trace.device_names else None,
        on_gpu=trace.on_gpu,
        steps=steps,
        ops=op_rows(records, rec_step, _op_times(trace, records, idx), roof),
        collectives=collectives(trace, idx, records, steps_ix),
        shapes_recorded=shapes,
    )


class _HostEvents:
    """Host-side spans the steps need, bucketed by step once."""

    def __init__(self, trace: RankTrace, steps_ix: _Steps) -> None:
        ann = trace.annotations
        self.data = steps_ix.bucket([e for e in ann if DATA_LOADER.search(e.name)], _start)
        syncs = [e for e in trace.runtime if SYNC_CALLS.match(e.name)]
        self.syncs = steps_ix.bucket(syncs, _start)
        self.collectives = steps_ix.bucket([e for e in ann if is_host_collective(e)], _start)
        # the thread that ran each step (its ProfilerStep span)
        threads = {(s.pid, s.tid) for s in trace.steps}
        mine = [e for e in trace.events if (e.pid, e.tid) in threads]
        self.thread = steps_ix.bucket(mine, _start)


def _op_times(trace: RankTrace, records: list[OpRecord], idx: _Index) -> list[float]:
    """Device time of each counted op's kernels on a GPU trace; its own span on the host."""
    if not trace.on_gpu:
        return [r.event.dur_s for r in records]
    times = [0.0] * len(records)
    for e in trace.device_events:
        i = idx.record(e)
        if i is not None:
            times[i] += e.dur_s
    return times


def _device_step(events, idx, bounds, window, host: _HostEvents, k: int) -> StepResult:
    busy: dict[str, list] = defaultdict(list)
    comm, memcpy, next_launch = [], [], {}
    starts: dict[float, float] = {}
    for e in events:
        iv = (e.start_s, e.end_s)
        starts.setdefault(e.start_s, idx.launched_at(e))
        if e.cat != KERNEL:
            memcpy.append(iv)
        elif is_comm_kernel(e.name):
            comm.append(iv)
        else:
            i = idx.record(e)
            busy[bounds[i] if i is not None else bd.UNKNOWN_BOUND].append(iv)
    split = bd.split(window, busy, comm, memcpy)
    all_busy = [iv for v in busy.values() for iv in v] + comm + memcpy
    gaps = bd.idle_gaps(window, all_busy)
    for g in gaps:
        next_launch[g] = starts.get(g[1])
    data = [(e.start_s, e.end_s) for e in host.data[k]]
    syncs = [e.end_s for e in host.syncs[k]]
    reasons = bd.idle_reasons(gaps, data, syncs, next_launch)
    return _step_result(split, reasons)


def _host_step(records, bounds, collectives, window) -> StepResult:
    busy: dict[str, list] = defaultdict(list)
    comm = [(e.start_s, e.end_s) for e in collectives]
    for r, b in zip(records, bounds, strict=True):
        (comm if r.comm else busy[b]).append((r.event.start_s, r.event.end_s))
    return _step_result(bd.split(window, busy, comm, []), {})


def _step_result(split: bd.Breakdown, reasons: dict) -> StepResult:
    step = StepResult(
        name="",
        start_s=0.0,
        wall_s=split.wall_s,
        seconds=split.seconds,
        comm_s=split.comm_s,
        comm_overlapped_s=split.comm_overlapped_s,
        idle_reasons=reasons,
        host_seconds={},
        model_flops=None,
        hardware_flops=None,
        other_flops=None,
        mfu=None,
        hfu=None,
        timeline=split.intervals,
    )
    return step


HOST_DATA, HOST_SYNC, HOST_OPS, HOST_OTHER = (
    "data loading",
    "waiting for the device",
    "in ops",
    "python / other",
)


def _host_timeline(host: _HostEvents, k: int, span) -> dict[str, float]:
    """The step's host thread: data loading, device waits, op calls, and the rest."""
    same = host.thread[k]
    if not same:
        return {}
    data = clip(union((e.start_s, e.end_s) for e in same if DATA_LOADER.search(e.name)), span)
    sync = clip(union((e.start_s, e.end_s) for e in same if SYNC_CALLS.match(e.name)), span)
    ops = clip(union((e.start_s, e.end_s) for e in same if e.cat == "cpu_op"), span)
    sync = subtract(sync, data)
    ops = subtract(subtract(ops, data), sync)
    out = {HOST_DATA: measure(data), HOST_SYNC: measure(sync), HOST_OPS: measure(ops)}
    out[HOST_OTHER] = max(span[1] - span[0] - sum(out.values()), 0.0)
    return out


def _flops(step: StepResult, recs: list[OpRecord], roof: Roof | None) -> None:
    model = hardware = other = 0.0
    known = bool(recs)
    for r in recs:
        c = r.cost
        if c is None:
            continue
        if c.category in MODEL_CATEGORIES:
            if c.flops is None:
                known = False
                continue
            model += c.flops - c.recomputed_flops
            hardware += c.flops
        elif c.flops is not None:
            other += c.flops
    if not known:
        return
    step.model_flops, step.hardware_flops, step.other_flops = model, hardware, other
    if roof is not None and step.wall_s > 0:
        step.mfu = model / step.wall_s / roof.main_peak_flops_per_s
        step.hfu = hardware / step.wall_s / roof.main_peak_flops_per_s
