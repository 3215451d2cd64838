"""One step's dependency graph: host threads, launches, device streams, synchronisations.

Nodes are instants (the start or end of an event, clipped to the step's window); edges are
either *work* (a kernel or copy running, a host thread inside an op, a runtime call or a data
loader's span) whose weight is its duration, or *dependencies* (a launch releases its kernel,
a kernel waits for the one before it on its stream, a host synchronisation waits for the
device work launched before it, a thread's next op follows its last). Of a node's dependencies
only the one that finished last released it: that one carries the observed latency (the gap
to the node; the GPU waiting for a launch or for the kernel before it), the others none. A
thread's time outside every recorded op (Python between ops, a thread with nothing to do) is
no recorded work and weighs nothing, as in Holistic Trace Analysis's critical path; so the
longest path is at most the step (a stream's queued work is one chain in it). When a what-if
shortens work, the longest path is the step re-timed. Pure: events in, a networkx graph out.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field

import networkx as nx

from ceiling.trace import kernels
from ceiling.trace.events import (
    ANNOTATION,
    DATA_LOADER,
    KERNEL,
    SYNC_CALLS,
    Event,
    is_comm_kernel,
)
from ceiling.trace.results import PATH_COMM as COMM
from ceiling.trace.results import PATH_COMPUTE as COMPUTE
from ceiling.trace.results import PATH_HOST as HOST
from ceiling.trace.results import PATH_WAIT as WAIT

LAUNCH = "launch"  # the kind of a host stretch inside a kernel-launch call
DEPENDENCY, COLLECTIVE = "dependency", "collective"
# what held an instant back, when a dependency did
LAUNCH_LATENCY, STREAM_ORDER = "launch to kernel start", "the stream's previous work"
WAITED, THREAD_IDLE = "host waiting for the device", "host thread idle"
EARLIER, DEVICE_DONE = "work from before the window", "the device's last work"
_TOL_S = 2e-9  # Kineto rounds to the nanosecond
# host calls that may block on the device (the CUDA runtime's synchronisation rules: an
# asynchronous copy blocks where host memory is pageable): their stretch is no host work;
# those that surely wait (a synchronise, a synchronous copy) wait for the work launched before
_BLOCKING = re.compile(r"(cuda|hip)(\w*Synchronize|EventQuery|Memcpy\w*)$")
_HOST_WAITS = ("Synchronize", "Memcpy")


@dataclass
class StepGraph:
    window: tuple[float, float]
    g: nx.DiGraph = field(default_factory=nx.DiGraph)
    times: list[float] = field(default_factory=list)
    deps: dict[int, list[tuple]] = field(default_factory=lambda: defaultdict(list))

    def __post_init__(self) -> None:
        self.released_once: set[int] = set()  # nodes that keep only what released them
        self.source = self.node(self.window[0])
        self.sink = self.node(self.window[1])

    def node(self, t: float) -> int:
        t = min(max(t, self.window[0]), self.window[1])
        self.times.append(t)
        self.g.add_node(len(self.times) - 1)
        return len(self.times) - 1

    def work(self, u: int, v: int, cat: str, kind: str, **facts) -> None:
        """An activity from u to v: its weight is its duration."""
        self.g.add_edge(u, v, w=self.times[v] - self.times[u], cat=cat, kind=kind, **facts)

    def depend(self, v: int, u: int, why: str, latency: bool = True, **facts) -> None:
        """v cannot happen before u (`why` names the kind of dependency; `latency`: whether
        the gap between them, when u released v, is a wait that counts)."""
        self.deps[v].append((u, why, latency, facts))

    def resolve(self) -> None:
        """Each node's dependencies: the one that finished last carries the gap to the node
        (the latency that held it), the others none; one that finished after it is no cause.
        A launch is done when its call returns (`ready_s`), though its gap is counted from
        the call's start. A device event keeps only the dependency that released it, as HTA
        (Holistic Trace Analysis) links a kernel to its launch or to the one before it: on an idle
        stream its launch, queued the work before it."""
        t = self.times
        for v, us in self.deps.items():
            us = [x for x in us if t[x[0]] <= t[v] + _TOL_S and x[0] != v]
            if not us:
                continue
            last = max(us, key=lambda x: min(x[3].get("ready_s", t[x[0]]), t[v]))[0]
            if v in self.released_once:
                us = [x for x in us if x[0] == last]
            for u, why, latency, facts in us:
                if self.g.has_edge(u, v):
                    continue
                gap = max(t[v] - t[u], 0.0) if u == last and latency else 0.0
                facts.pop("ready_s", None)
                self.g.add_edge(u, v, w=gap, cat=WAIT, kind=DEPENDENCY, name=why, **facts)
        self.deps.clear()


def is_host_wait(e: Event) -> bool:
    """A call that waits for the device's earlier work."""
    return bool(SYNC_CALLS.match(e.name)) and any(w in e.name for w in _HOST_WAITS)


def build(
    window, host: list[Event], device: list[Event], launch_of: dict, comm_facts, waits=True
) -> StepGraph:
    """`host`: the host events (ops, annotations, runtime calls) overlapping the window;
    `device`: the device events overlapping it; `launch_of`: correlation -> launch call;
    `comm_facts(e)`: a communication kernel's op, bytes, ranks and collective index;
    `waits`: whether host synchronisations wait for the device (False: the graph of a tool
    that links them only through the profiler's own sync events, for comparison)."""
    sg = StepGraph(window)
    launch_node: dict[int, int] = {}  # id(runtime call) -> node at its start
    host_waits: list[tuple[Event, int]] = []  # host waits and the node at their end
    threads: dict[tuple, list[Event]] = defaultdict(list)
    for e in host:
        # an instant has no stretch to give; of the annotations only a data loader's is work
        if e.dur_s > 0 and (e.cat != ANNOTATION or DATA_LOADER.search(e.name)):
            threads[(e.pid, e.tid)].append(e)
    for events in threads.values():
        last = _host_chain(sg, events, launch_node, host_waits)
        sg.depend(sg.sink, last, THREAD_IDLE, latency=False)
    streams: dict[tuple, list[Event]] = defaultdict(list)
    for e in device:
        streams[(e.pid, e.tid)].append(e)
    chains = [_stream_chain(sg, ev, launch_of, launch_node, comm_facts) for ev in streams.values()]
    for e, end in host_waits if waits else ():
        _wait_on_device(sg, e, end, chains)
    sg.resolve()
    return sg


def _host_chain(sg: StepGraph, events: list[Event], launch_node: dict, waits: list) -> int:
    """A host thread as a chain of instants; each stretch between two is the innermost event
    over it: work in an op or call, a dependency inside a host wait or where nothing runs."""
    marks = sorted(
        [(e.start_s, 1, -e.dur_s, i) for i, e in enumerate(events)]
        + [(e.end_s, 0, 0.0, i) for i, e in enumerate(events)]
    )
    stack: list[int] = []
    prev = sg.source
    for t, starts, _, i in marks:
        node = sg.node(t)
        inner = events[stack[-1]] if stack else None
        if inner is None:
            sg.depend(node, prev, THREAD_IDLE, latency=False)
        elif _BLOCKING.match(inner.name) or sg.times[node] <= sg.times[prev]:
            sg.depend(node, prev, WAITED, latency=False)
        else:
            launch = "correlation" in inner.args and "Launch" in inner.name
            sg.work(prev, node, HOST, LAUNCH if launch else inner.cat, name=inner.name)
        if starts:
            stack.append(i)
            if "correlation" in events[i].args:
                launch_node[id(events[i])] = node
        else:
            if i in stack:
                stack.remove(i)
            if is_host_wait(events[i]):
                waits.append((events[i], node))
        prev = node
    return prev


def _stream_chain(sg, events, launch_of, launch_node, comm_facts) -> tuple[list, list]:
    """A device stream in start order: each event waits for the one before and its launch.
    Returns (when each was launched, the node at its end), in stream order."""
    launched, out = [], []
    prev = sg.source
    for e in sorted(events, key=lambda e: e.start_s):
        a, b = sg.node(e.start_s), sg.node(e.end_s)
        sg.released_once.add(a)
        sg.depend(a, prev, STREAM_ORDER)
        sg.depend(a, sg.source, EARLIER)
        call = launch_of.get(e.args.get("correlation"))
        launched.append(e.start_s if call is None else call.start_s)
        if call is not None and id(call) in launch_node:
            # the launch counts as done when its call returns (the kernel may start before)
            sg.depend(
                a, launch_node[id(call)], LAUNCH_LATENCY, call_s=call.dur_s, ready_s=call.end_s
            )
        if e.cat == KERNEL and is_comm_kernel(e.name):
            sg.work(a, b, COMM, COLLECTIVE, name=e.name, **comm_facts(e))
        else:
            sg.work(a, b, COMPUTE, kernels.category(e.name, e.cat), name=e.name)
        out.append(b)
        prev = b
    sg.depend(sg.sink, prev, DEVICE_DONE, latency=False)
    return launched, out


def _wait_on_device(sg, e: Event, end: int, chains) -> None:
    """A host wait ends after the device work launched before it: on each stream, the last
    event launched before the wait began (a stream runs its work in launch order). Which
    stream or event a call waits on is not in the trace, so every stream is a candidate; the
    one that finished last released the wait, the others weigh nothing."""
    for launched, ends in chains:
        k = bisect_right(launched, e.start_s) - 1
        if k >= 0:
            sg.depend(end, ends[k], WAITED)
