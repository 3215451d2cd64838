"""Which recorded ops carry the work: the outermost op on each thread that has a cost rule.

The profiler nests ops (`aten::linear` > `aten::addmm`; an autograd node > `aten::mm`). An
op with a rule is counted whole and its children are not (they are its implementation);
an op without one is looked into. This matches what a dispatch-level recorder sees
(`ceiling profile`), so both count the same calls. Pure: the cost rule is passed in.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from ceiling.trace.events import Event

BOOKKEEPING = ("autograd::", "profiler::", "torch::autograd::")
NEST_TOLERANCE_S = 2e-9  # Kineto rounds to the nanosecond: a child may end 1 ns late


@dataclass
class OpRecord:
    """One counted op call (its children included)."""

    event: Event
    cost: object | None  # an op_cost.TracedOpCost, or None when nothing is known
    ext_ids: list[int]  # External ids of the op and everything nested in it
    comm: bool = False  # a collective call (c10d::*), not arithmetic

    @property
    def name(self) -> str:
        return self.event.name


def _children(ops: list[Event]) -> tuple[list[int], dict[int, list[int]]]:
    order = sorted(range(len(ops)), key=lambda i: (ops[i].start_s, -ops[i].dur_s))
    roots: list[int] = []
    children: dict[int, list[int]] = defaultdict(list)
    stack: list[int] = []
    for i in order:
        e = ops[i]
        while stack and ops[stack[-1]].end_s + NEST_TOLERANCE_S < e.end_s:
            stack.pop()
        (children[stack[-1]] if stack else roots).append(i)
        stack.append(i)
    return roots, children


def _subtree_ids(ops: list[Event], children: dict[int, list[int]], i: int) -> list[int]:
    ids, todo = [], [i]
    while todo:
        j = todo.pop()
        ext = ops[j].args.get("External id")
        if ext is not None:
            ids.append(ext)
        todo.extend(children.get(j, ()))
    return ids


def counted_ops(cpu_ops: list[Event], cost: Callable[[str, dict], object | None]) -> list[OpRecord]:
    """The counted ops of all threads, in time order."""
    by_thread: dict[tuple, list[Event]] = defaultdict(list)
    for e in cpu_ops:
        by_thread[(e.pid, e.tid)].append(e)
    out: list[OpRecord] = []
    for ops in by_thread.values():
        roots, children = _children(ops)

        todo = list(reversed(roots))
        while todo:
            i = todo.pop()
            e = ops[i]
            if e.name.startswith("c10d::"):
                out.append(OpRecord(e, None, _subtree_ids(ops, children, i), comm=True))
                continue
            c = cost(e.name, e.args)
            if c is not None:
                out.append(OpRecord(e, c, _subtree_ids(ops, children, i)))
            elif children.get(i):
                todo.extend(reversed(children[i]))
            elif "::" in e.name and not e.name.startswith(BOOKKEEPING):
                out.append(OpRecord(e, None, _subtree_ids(ops, children, i)))
    out.sort(key=lambda r: r.event.start_s)
    return out
