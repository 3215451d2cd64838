"""The kernel view of a GPU trace: each kernel name summed over the analysed windows, with
its category, the op that launched it and, where the shapes allow, its achieved FLOP/s or
bytes/s; and the figures Holistic Trace Analysis defines, computed on the same windows. Pure.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from ceiling.trace import breakdown as bd
from ceiling.trace import kernels
from ceiling.trace.events import KERNEL
from ceiling.trace.results import KernelRow, StepResult


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


def hta_figures(steps: list[StepResult], windows) -> dict[str, float] | None:
    """Holistic Trace Analysis's temporal breakdown and communication-computation overlap,
    as ratios, over the analysed GPU windows (HTA: first to last kernel of every step but the
    last): idle_time, compute_time (any non-communication, non-memcpy kernel),
    non_compute_time (communication not hidden, memcpy/memset), comp_comm_overlap
    (communication time under computation / all communication time)."""
    wall = sum(s.wall_s for s in steps)
    if wall <= 0:
        return None
    compute = sum(s.seconds.get(k, 0.0) for s in steps for k in bd.WORK)
    idle = sum(s.seconds.get(bd.IDLE, 0.0) for s in steps)
    comm = sum(s.comm_s for s in steps)
    return {
        "window_s": wall,
        "window_start_s": windows[0][0],
        "window_end_s": windows[-1][1],
        "idle_time": idle / wall,
        "compute_time": compute / wall,
        "non_compute_time": max(wall - compute - idle, 0.0) / wall,
        "comp_comm_overlap": sum(s.comm_overlapped_s for s in steps) / comm if comm else 0.0,
    }
