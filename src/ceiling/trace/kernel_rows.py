"""The kernel view of a GPU trace: each kernel name summed over the analysed windows, with
its category, the op that launched it and, where the shapes allow, its achieved FLOP/s or
bytes/s; and the figures Holistic Trace Analysis defines, computed on the same windows. Pure.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from ceiling.trace import kernels
from ceiling.trace.events import KERNEL, is_comm_kernel
from ceiling.trace.intervals import intersect, measure, union
from ceiling.trace.results import KernelRow


def kernel_rows(events, links, records) -> list[KernelRow]:
    """`events`: the device events that start inside the analysed windows."""
    per_record: Counter = Counter()  # kernels each op call launched, to share its cost
    for e in events:
        if (i := links.record(e)) is not None:
            per_record[i] += 1
    rows: dict[str, KernelRow] = {}
    ops: dict[str, Counter] = defaultdict(Counter)
    for e in events:
        row = rows.get(e.name)
        if row is None:
            cat = kernels.category(e.name, e.cat)
            row = rows[e.name] = KernelRow(
                name=e.name,
                category=cat,
                dtype=kernels.precision(e.name) if kernels.is_compute(cat) else None,
                calls=0,
                time_s=0.0,
                share=0.0,
                op=None,
                flops=0.0,
                bytes=0.0,
            )
        row.calls += 1
        row.time_s += e.dur_s
        i = links.record(e)
        if i is not None:
            ops[e.name][records[i].name] += 1
        _add_cost(row, e, records[i] if i is not None else None, per_record.get(i, 0))
    total = sum(r.time_s for r in rows.values()) or 1.0
    for name, row in rows.items():
        row.share = row.time_s / total
        if ops[name]:
            row.op = ops[name].most_common(1)[0][0]
        if row.time_s > 0 and row.flops:
            row.achieved_flops_per_s = row.flops / row.time_s
        if row.time_s > 0 and row.bytes:
            row.achieved_bytes_per_s = row.bytes / row.time_s
        row.flops = row.flops or None
        row.bytes = row.bytes or None
    return sorted(rows.values(), key=lambda r: -r.time_s)


def _add_cost(row: KernelRow, e, rec, kernels_of_call: int) -> None:
    """A memcpy/memset moves the bytes it records; a kernel that is its op call's only one
    does the op's FLOPs and moves its bytes. Otherwise the kernel's cost is not known."""
    if e.cat != KERNEL:
        n = e.args.get("bytes")
        if isinstance(n, (int, float)) and row.bytes is not None:
            row.bytes += float(n)
        return
    c = rec.cost if rec is not None else None
    if c is None or kernels_of_call != 1:
        row.flops = row.bytes = None
        return
    if row.flops is not None:
        row.flops = None if c.flops is None else row.flops + c.flops
    if row.bytes is not None:
        row.bytes = None if c.bytes is None else row.bytes + c.bytes


def hta_figures(trace, links) -> dict[str, float] | None:
    """Holistic Trace Analysis's temporal breakdown and communication-computation overlap, as
    ratios, on HTA's own window: the device events launched before the last ProfilerStep
    began (every event when the trace has fewer than two steps, as HTA keeps them all then),
    from the first one's start to the last one's end.
    idle_time: no device event runs; compute_time: a kernel other than communication or
    memcpy/memset runs; non_compute_time: the rest; comp_comm_overlap: the share of
    communication time during which a computation kernel also runs. (ceiling's own step split
    uses whole GPU steps instead, see gpu_steps.)"""
    events = trace.device_events
    if len(trace.steps) > 1:
        cut = trace.steps[-1].start_s
        launch = links.launch
        events = [e for e in events if launch.get(e.args.get("correlation"), cut) < cut]
    if not events:
        return None
    lo, hi = min(e.start_s for e in events), max(e.end_s for e in events)
    if hi <= lo:
        return None
    comm = union((e.start_s, e.end_s) for e in events if e.cat == KERNEL and is_comm_kernel(e.name))
    compute = union(
        (e.start_s, e.end_s) for e in events if e.cat == KERNEL and not is_comm_kernel(e.name)
    )
    busy = measure(union((e.start_s, e.end_s) for e in events))
    wall = hi - lo
    comm_s = measure(comm)
    return {
        "window_start_s": lo,
        "window_end_s": hi,
        "kernel_time_s": wall,
        "idle_time": (wall - busy) / wall,
        "compute_time": measure(compute) / wall,
        "non_compute_time": (busy - measure(compute)) / wall,
        "comp_comm_overlap": measure(intersect(comm, compute)) / comm_s if comm_s else 0.0,
    }
