"""Interval arithmetic on timelines: (start, end) pairs in seconds, half-open.

A normalised set is sorted, with no overlaps and no empty intervals; every function here
returns one.
"""

from __future__ import annotations

from collections.abc import Iterable

Interval = tuple[float, float]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Merge overlapping and touching intervals."""
    out: list[list[float]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1][1] = end
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]


def measure(intervals: Iterable[Interval]) -> float:
    """Total length of a normalised set."""
    return sum(b - a for a, b in intervals)


def intersect(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """The parts of normalised set `a` that lie in normalised set `b`."""
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if end > start:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """The parts of normalised set `a` outside normalised set `b`."""
    out: list[Interval] = []
    j = 0
    for start, end in a:
        cursor = start
        while j < len(b) and b[j][1] <= cursor:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            if b[k][0] > cursor:
                out.append((cursor, b[k][0]))
            cursor = max(cursor, b[k][1])
            k += 1
        if cursor < end:
            out.append((cursor, end))
    return out


def clip(a: list[Interval], window: Interval) -> list[Interval]:
    """The parts of normalised set `a` inside `window`."""
    return intersect(a, [window] if window[1] > window[0] else [])
