"""The critical path of every analysed step of one rank, with the what-if answers. Pure."""

from __future__ import annotations

from ceiling.trace.critical_path import critical_path
from ceiling.trace.events import Event, RankTrace, Timeline
from ceiling.trace.path_graph import build
from ceiling.trace.results import Collective, CriticalPath
from ceiling.trace.what_if import WhatIf


def step_paths(
    trace: RankTrace,
    windows: list[tuple[float, float]],
    colls: list[Collective],
    coll_index: dict[int, int],
    questions: list[WhatIf],
    waits: bool = True,
) -> list[CriticalPath | None]:
    """One critical path per window (None where the recorded clocks make a cycle). `waits`:
    see `path_graph.build`."""
    host = Timeline(trace.cpu_ops + trace.annotations + trace.runtime).overlapping
    device = Timeline(trace.device_events).overlapping
    launch_of = {e.args["correlation"]: e for e in trace.runtime if "correlation" in e.args}

    def comm_facts(e: Event) -> dict:
        k = coll_index.get(id(e))
        ranks = e.args.get("Group size") or trace.world_size
        c = colls[k] if k is not None else None
        return {
            "op": None if c is None else c.op,
            "bytes": None if c is None else c.bytes,
            "ranks": ranks if isinstance(ranks, int) else None,
            "index": k,
        }

    out = []
    for w in windows:
        sg = build(w, host(w), device(w), launch_of, comm_facts, waits)
        out.append(critical_path(sg, questions))
    return out
