"""One rank's trace file read and reduced to its `RankResult`, then let go.

This is the unit of work that runs in a worker process (or on a Dask cluster) when a job left
one trace per rank: everything a rank needs arrives as plain data (the file, the device spec,
the dtype of the peak), and only the summary travels back, so memory holds one trace per
worker however many ranks there are.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ceiling.model.mfu import MODEL_CATEGORIES
from ceiling.trace import optree
from ceiling.trace.events import RankTrace
from ceiling.trace.links import Links
from ceiling.trace.op_cost import cost, save_memo
from ceiling.trace.op_rows import Roof
from ceiling.trace.rank import analyze_rank, record_precisions
from ceiling.trace.reader import NotATrace, read_trace, without_gc
from ceiling.trace.results import RankResult


@dataclass
class Prepared:
    """A rank's trace with its counted ops, their links to the kernels and the precision the
    kernels' names show."""

    trace: RankTrace
    records: list
    links: Links
    precisions: dict[int, str]

    @classmethod
    def of(cls, trace: RankTrace) -> Prepared:
        records = optree.counted_ops(trace.cpu_ops, cost_rule(trace))
        save_memo()  # the costs this trace added, for the next read of the same shapes
        links = Links(trace, records)  # may add records
        return cls(trace, records, links, record_precisions(trace, links))

    def main_dtype(self) -> str:
        """The dtype most model FLOPs ran in (the kernel's precision over the op's dtype)."""
        flops: dict[str, float] = defaultdict(float)
        for i, r in enumerate(self.records):
            c = r.cost
            dt = self.precisions.get(i) or (c.dtype if c is not None else None)
            if c is not None and c.category in MODEL_CATEGORIES and dt:
                flops[dt] += c.flops or 1.0
        return max(flops, key=flops.get) if flops else "fp32"

    def summary(self, machine, peak_key: str | None, questions=None) -> RankResult:
        """`questions`: what-ifs for each step's critical path (None: no critical path)."""
        t = self.trace
        rank = -1 if t.rank is None else t.rank
        r = roof(machine, peak_key)
        return analyze_rank(t, self.records, r, rank, self.links, self.precisions, questions)


@dataclass(frozen=True)
class TraceFacts:
    """What a job's first trace decides for every rank (the device, the dtype of the peak),
    without its events."""

    rank: int | None
    on_gpu: bool
    devices: list
    device_names: list
    host_name: str | None
    main_dtype: str

    @classmethod
    def of(cls, first: Prepared) -> TraceFacts:
        t = first.trace
        return cls(t.rank, t.on_gpu, t.devices, t.device_names, t.host_name, first.main_dtype())


def cost_rule(trace: RankTrace):
    """The op cost rule: each call costed from its shapes (in plain Python for the ops real
    traces hold, else replayed on torch's meta device or found in the memo of earlier
    replays); a trace without any recorded shapes has nothing to cost, so no op is costed
    and torch is not loaded for it (the kernels' names still tell what each one is)."""
    if not any("Input Dims" in e.args for e in trace.cpu_ops):
        return lambda name, args: None
    return cost


def roof(machine, peak_key: str | None) -> Roof | None:
    """The device's roofline (a `hardware.resolve.Machine`): each dtype's roof (measured for
    a profile), and the dense datasheet peaks MFU is measured against."""
    if machine is None or peak_key is None:
        return None
    spec = machine.spec
    peaks, dense = dict(spec.peak_flops_per_s), machine.datasheet_peaks
    return Roof(
        peaks.get,
        peaks[peak_key],
        spec.memory_bandwidth_bytes_per_s,
        dense.get,
        dense.get(peak_key),
    )


def rank_summary(
    path: str, machine, peak_key: str | None, questions=None
) -> tuple[int | None, RankResult] | None:
    """(the rank the file's header names, its summary), or None when the file is JSON but no
    profiler trace (a folder may hold other files)."""
    with without_gc():
        try:
            trace = read_trace(path)
        except NotATrace:
            return None
        return trace.rank, Prepared.of(trace).summary(machine, peak_key, questions)
