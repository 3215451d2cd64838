"""Which op launched each device event, as the profiler links them.

A kernel (or memcpy, memset) carries the `correlation` id of the runtime call that launched
it (`cudaLaunchKernel`, `hipLaunchKernel`, ...). The runtime call runs on the launching
thread inside the op that issued it, so the op is found by time nesting on that thread: the
innermost op around the call, and above it the counted op that owns it (`optree`). Traces
that also copy the op's `External id` onto the kernel are read the same way; the External id
is the fallback for a device event whose launch is not in the trace. (In many real traces a
kernel's External id is its correlation, not an op's, so it cannot come first.)

An op with no cost rule is looked into by `optree`; when it launches kernels itself (outside
its children, e.g. `aten::cudnn_batch_norm` beside its `aten::empty` calls) it becomes a
counted op of its own, with no cost, so its kernels keep their op. Pure.
"""

from __future__ import annotations

from collections import defaultdict

from ceiling.trace.events import Event, RankTrace
from ceiling.trace.optree import BOOKKEEPING, NEST_TOLERANCE_S, OpRecord


class Links:
    """Device event -> counted op (an index into `records`) and -> the time it was launched."""

    def __init__(self, trace: RankTrace, records: list[OpRecord]) -> None:
        self.records = records
        self.record_of_ext: dict = {}
        for i, r in enumerate(records):
            for ext in r.ext_ids:
                self.record_of_ext[ext] = i
        self.launch: dict = {}  # correlation -> launch start
        self.launch_record: dict = {}  # correlation -> counted op, or None
        owner_of = {id(r.event): i for i, r in enumerate(records)}
        adopted: dict[int, int] = {}  # id(op) -> a record made for an op with no rule
        by_thread: dict[tuple, list[tuple]] = defaultdict(list)
        for e in trace.cpu_ops:
            by_thread[(e.pid, e.tid)].append((e.start_s, 0, -e.dur_s, e))
        for e in trace.runtime:
            corr = e.args.get("correlation")
            if corr is None:
                continue
            self.launch[corr] = e.start_s
            by_thread[(e.pid, e.tid)].append((e.start_s, 1, -e.dur_s, e))
        for items in by_thread.values():
            items.sort(key=lambda x: (x[0], x[1], x[2]))
            stack: list[Event] = []
            for _, is_launch, _, e in items:
                while stack and stack[-1].end_s + NEST_TOLERANCE_S < e.end_s:
                    stack.pop()
                if not is_launch:
                    stack.append(e)
                    continue
                self.launch_record[e.args["correlation"]] = self._owner(stack, owner_of, adopted)

    def _owner(self, stack: list[Event], owner_of: dict, adopted: dict) -> int | None:
        for op in reversed(stack):
            i = owner_of.get(id(op))
            if i is not None:
                return i
        if not stack:
            return None
        # launched by an op without a rule, outside any counted child: it counts itself
        op = next((o for o in reversed(stack) if not o.name.startswith(BOOKKEEPING)), stack[-1])
        i = adopted.get(id(op))
        if i is None:
            ext = op.args.get("External id")
            self.records.append(OpRecord(op, None, [] if ext is None else [ext]))
            i = adopted[id(op)] = owner_of[id(op)] = len(self.records) - 1
        return i

    def record(self, e: Event) -> int | None:
        """The counted op behind a device event: through its launch, else its External id."""
        corr = e.args.get("correlation")
        if corr in self.launch_record:
            return self.launch_record[corr]
        return self.record_of_ext.get(e.args.get("External id"))

    def launched_at(self, e: Event) -> float:
        return self.launch.get(e.args.get("correlation"), e.start_s)
