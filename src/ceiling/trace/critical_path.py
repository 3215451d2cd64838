"""The critical path of a step: the longest path through its dependency graph
(`path_graph`), what lies on it by category, and the step re-timed by what-if questions."""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise

import networkx as nx

from ceiling.trace.path_graph import COLLECTIVE, StepGraph
from ceiling.trace.results import PATH_CATEGORIES, CriticalPath, WhatIfAnswer
from ceiling.trace.what_if import WhatIf

TOP = 12  # the longest items on the path kept per step


def critical_path(sg: StepGraph, questions: list[WhatIf] = ()) -> CriticalPath | None:
    """None when the graph holds a cycle (clocks of host and device disagreeing)."""
    g = sg.g
    try:
        order = list(nx.topological_sort(g))  # once for the path and every what-if
    except nx.NetworkXUnfeasible:
        return None
    nodes = nx.dag_longest_path(g, weight="w", default_weight=0.0, topo_order=order)
    seconds = dict.fromkeys(PATH_CATEGORIES, 0.0)
    items: dict[tuple[str, str], float] = defaultdict(float)
    comm: list[tuple[int, float]] = []
    for u, v in pairwise(nodes):
        edge = g.edges[u, v]
        w = edge["w"]
        seconds[edge["cat"]] += w
        items[(edge["cat"], edge.get("name") or edge["kind"])] += w
        if edge["kind"] == COLLECTIVE and edge.get("index") is not None:
            comm.append((edge["index"], w))
    length = sum(seconds.values())
    top = sorted(((c, n, s) for (c, n), s in items.items() if s > 0), key=lambda x: -x[2])
    answers = [_answer(g, order, q.text, [q], length) for q in questions]
    if len(questions) > 1:
        answers.append(_answer(g, order, "all", questions, length))
    return CriticalPath(length, seconds, top[:TOP], answers, comm)


def _answer(g: nx.DiGraph, order, text: str, questions: list[WhatIf], length) -> WhatIfAnswer:
    """The longest path once every question has changed the work's durations."""
    for _, _, edge in g.edges(data=True):
        w = edge["w"]
        for q in questions:
            w = q.duration(edge, w)
        edge["w_if"] = w
    nodes = nx.dag_longest_path(g, weight="w_if", default_weight=0.0, topo_order=order)
    new = sum(g.edges[u, v]["w_if"] for u, v in pairwise(nodes))
    return WhatIfAnswer(text, new, length - new)
