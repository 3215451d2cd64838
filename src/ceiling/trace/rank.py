"""One rank's trace analysed: per step, the time split, FLOPs, MFU; per op, the roofline.

No I/O: it works from the events, the counted ops (`optree`) and the roofline (peak FLOP/s
per dtype and memory bandwidth, or None when no device is known).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict

from ceiling.model import roofline
from ceiling.model.mfu import MODEL_CATEGORIES, model_flops_utilisation
from ceiling.trace import breakdown as bd
from ceiling.trace import kernels
from ceiling.trace.collectives import collectives
from ceiling.trace.events import (
    DATA_LOADER,
    KERNEL,
    SYNC_CALLS,
    Event,
    RankTrace,
    Timeline,
    is_comm_kernel,
    is_host_collective,
)
from ceiling.trace.gpu_steps import gpu_lag_s, gpu_steps
from ceiling.trace.intervals import clip, measure, subtract, union
from ceiling.trace.kernel_rows import hta_figures, kernel_rows
from ceiling.trace.links import Links
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


def kernel_bound(op_bound: str | None, kernel_category: str) -> str:
    """The op's roofline bound when known, else what the kernel's category implies."""
    if op_bound is not None and op_bound != bd.UNKNOWN_BOUND:
        return op_bound
    if kernels.is_compute(kernel_category):
        return bd.COMPUTE
    if kernels.is_memory(kernel_category):
        return bd.MEMORY_BOUND
    return bd.UNKNOWN_BOUND


def record_precisions(trace: RankTrace, links: Links) -> dict[int, str]:
    """Counted op -> the precision its GEMM/convolution/attention kernels' names show (TF32
    for an fp32 matmul on tensor cores), where they show one."""
    out: dict[int, str] = {}
    for e in trace.device_events:
        if e.cat != KERNEL:
            continue
        cat = kernels.category(e.name, e.cat)
        if not kernels.is_compute(cat):
            continue
        i = links.record(e)
        if i is not None and i not in out and (p := kernels.precision(e.name)) is not None:
            out[i] = p
    return out


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
    trace: RankTrace,
    records: list[OpRecord],
    roof: Roof | None,
    rank: int,
    links: Links,
    precisions: dict[int, str],
    questions: list | None = None,
) -> RankResult:
    """`questions`: compute each step's critical path and answer these what-ifs (`WhatIf`)
    on it (None: no critical path)."""
    spans = [(s.start_s, s.end_s) for s in trace.steps]
    names = [s.name for s in trace.steps]
    notes: list[str] = []
    if trace.on_gpu:
        g = gpu_steps(spans, names, trace.device_events, links.launched_at)
        windows, which, notes = g.windows, g.steps, g.notes
    elif spans:
        windows, which = spans, list(range(len(spans)))
    else:  # no ProfilerStep on a host trace: the whole trace is one step
        windows = [(min(e.start_s for e in trace.events), max(e.end_s for e in trace.events))]
        which = [-1]
        notes.append("no ProfilerStep in the trace: one window, from the first event to the last")
    if not spans:  # the ops and the host's time line of the whole trace
        spans = [(min(e.start_s for e in trace.events), max(e.end_s for e in trace.events))]
        names = ["GPU-active span" if trace.on_gpu else "whole trace"]
    steps_ix = _Steps(spans)
    bounds = [_bound(r, roof) for r in records]
    rec_step = [steps_ix.of(r.event.start_s) for r in records]
    recs_in = steps_ix.bucket(range(len(records)), lambda i: records[i].event.start_s)
    host = _HostEvents(trace, steps_ix)
    timeline = Timeline(trace.device_events)
    kept_steps = sorted({max(k, 0) for k in which})
    shapes = any("Input Dims" in e.args for e in trace.cpu_ops)
    steps = []
    for window, k in zip(windows, which, strict=True):
        k = max(k, 0)
        if trace.on_gpu:
            step = _device_step(timeline.overlapping(window), links, bounds, window, host)
        else:
            step = _host_step(
                [records[i] for i in recs_in[k]],
                [bounds[i] for i in recs_in[k]],
                host.collectives[k],
                window,
            )
        step.name, step.start_s = names[k], window[0]
        step.host_seconds = _host_timeline(host, k, spans[k])
        if shapes:  # without them no op can be counted: FLOPs unknown, not zero
            _flops(step, [(records[i], precisions.get(i)) for i in recs_in[k]], roof)
        steps.append(step)
    rec_step = [s if s in kept_steps else -1 for s in rec_step]
    colls, coll_index = collectives(trace, links, records, steps_ix)
    if questions is not None:
        _attach_paths(trace, windows, steps, (colls, coll_index), questions, notes)
    in_windows = [e for w in windows for e in timeline.overlapping(w) if e.start_s >= w[0]]
    return RankResult(
        rank=rank,
        path=trace.path,
        device_name=trace.device_names[0] if trace.device_names else None,
        on_gpu=trace.on_gpu,
        steps=steps,
        ops=op_rows(records, rec_step, _op_times(trace, records, links), roof, precisions),
        collectives=colls,
        shapes_recorded=shapes,
        kernels=kernel_rows(in_windows, links, records) if trace.on_gpu else [],
        world_size=trace.world_size,
        gpu_lag_s=gpu_lag_s(trace.device_events, links.launched_at) if trace.on_gpu else None,
        notes=notes,
        hta=hta_figures(trace, links) if trace.on_gpu else None,
    )


def _attach_paths(trace, windows, steps, colls, questions, notes: list[str]) -> None:
    """Each step's critical path and what-if answers (networkx is loaded only for them)."""
    from ceiling.trace.step_paths import step_paths

    paths = step_paths(trace, windows, *colls, questions)
    for step, path in zip(steps, paths, strict=True):
        step.critical_path = path
        if path is None:
            notes.append(
                f"{step.name}: no critical path (the recorded host and device clocks disagree: "
                "a kernel would start before the work it waits for ended)"
            )


class _HostEvents:
    """Host-side spans the steps need: data loading and device waits (all of them, since a
    GPU window is not a host step), gloo collectives and the step's own thread by step."""

    def __init__(self, trace: RankTrace, steps_ix: _Steps) -> None:
        ann = trace.annotations
        # the loader's span is an annotation today, an op (`Operator`) in PyTorch 1.8
        loader = (e for e in ann + trace.cpu_ops if DATA_LOADER.search(e.name))
        self.data = [(e.start_s, e.end_s) for e in loader]
        self.sync_ends = sorted(e.end_s for e in trace.runtime if SYNC_CALLS.match(e.name))
        self.collectives = steps_ix.bucket([e for e in ann if is_host_collective(e)], _start)
        # the thread that ran each step (its ProfilerStep span)
        threads = {(s.pid, s.tid) for s in trace.steps}
        mine = [e for e in trace.events if (e.pid, e.tid) in threads]
        self.thread = steps_ix.bucket(mine, _start)


def _op_times(trace: RankTrace, records: list[OpRecord], links: Links) -> list[float]:
    """Device time of each counted op's kernels on a GPU trace; its own span on the host."""
    if not trace.on_gpu:
        return [r.event.dur_s for r in records]
    times = [0.0] * len(records)
    for e in trace.device_events:
        i = links.record(e)
        if i is not None:
            times[i] += e.dur_s
    return times


def _device_step(events, links: Links, bounds, window, host: _HostEvents) -> StepResult:
    busy: dict[str, list] = defaultdict(list)
    comm, memcpy, next_launch = [], [], {}
    starts: dict[float, float] = {}
    for e in events:
        iv = (e.start_s, e.end_s)
        starts.setdefault(e.start_s, links.launched_at(e))
        if e.cat != KERNEL:
            memcpy.append(iv)
        elif is_comm_kernel(e.name):
            comm.append(iv)
        else:
            i = links.record(e)
            cat = kernels.category(e.name, e.cat)
            busy[kernel_bound(bounds[i] if i is not None else None, cat)].append(iv)
    split = bd.split(window, busy, comm, memcpy)
    all_busy = [iv for v in busy.values() for iv in v] + comm + memcpy
    gaps = bd.idle_gaps(window, all_busy)
    for g in gaps:
        next_launch[g] = starts.get(g[1])
    reasons = bd.idle_reasons(gaps, host.data, host.sync_ends, next_launch)
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


def _flops(step: StepResult, recs: list[tuple[OpRecord, str | None]], roof: Roof | None) -> None:
    """Model FLOPs per dtype the matmuls ran in (a kernel's precision over the op's input
    dtype: fp32 GEMMs on TF32 tensor cores count against the TF32 peak), and MFU by the one
    definition (`model.mfu.model_flops_utilisation`): the time those FLOPs need at each
    dtype's dense datasheet peak over the step's time."""
    model: dict[str, float] = defaultdict(float)
    hardware: dict[str, float] = defaultdict(float)
    other = 0.0
    known = bool(recs)
    for r, ran_in in recs:
        c = r.cost
        if c is None:
            continue
        if c.category in MODEL_CATEGORIES:
            if c.flops is None:
                known = False
                continue
            dtype = ran_in or c.dtype or "fp32"
            model[dtype] += c.flops - c.recomputed_flops
            hardware[dtype] += c.flops
        elif c.flops is not None:
            other += c.flops
    if not known:
        return
    step.model_flops, step.hardware_flops = sum(model.values()), sum(hardware.values())
    step.other_flops, step.model_flops_by_dtype = other, dict(model)
    if roof is not None and roof.main_datasheet_peak_flops_per_s and step.wall_s > 0:

        def peak(dtype: str) -> float | None:
            return roof.datasheet_peak(dtype) or roof.main_datasheet_peak_flops_per_s

        step.mfu = model_flops_utilisation(model, step.wall_s, peak)
        step.hfu = model_flops_utilisation(hardware, step.wall_s, peak)
