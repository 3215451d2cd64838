"""Interval arithmetic and the step split: exact small cases and properties that hold for
any set of busy intervals."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ceiling.trace import breakdown as bd
from ceiling.trace.intervals import intersect, measure, subtract, union


def test_interval_operations():
    a = union([(0, 2), (1, 3), (5, 6), (6, 7), (9, 9)])
    assert a == [(0, 3), (5, 7)]
    assert intersect(a, [(2, 5.5)]) == [(2, 3), (5, 5.5)]
    assert subtract(a, [(1, 2), (6, 10)]) == [(0, 1), (2, 3), (5, 6)]
    assert measure(a) == 5


spans = st.lists(
    st.tuples(st.integers(0, 100), st.integers(1, 40)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=8,
)


@given(spans, spans, spans, spans, spans)
def test_split_accounts_for_every_instant_once(compute, memory, unknown, comm, memcpy):
    window = (10, 120)
    busy = {bd.COMPUTE: compute, bd.MEMORY_BOUND: memory, bd.UNKNOWN_BOUND: unknown}
    b = bd.split(window, busy, comm, memcpy)
    assert set(b.seconds) == set(bd.ORDER)
    assert all(v >= 0 for v in b.seconds.values())
    assert sum(b.seconds.values()) == pytest.approx(110)
    # communication is either hidden under work or exposed, never both, never lost
    assert b.comm_s == pytest.approx(b.comm_exposed_s + b.comm_overlapped_s)
    work = union(compute + memory + unknown)
    clipped = intersect(work, [window])
    assert sum(b.seconds[c] for c in bd.WORK) == pytest.approx(measure(clipped))


@given(spans, spans)
def test_idle_reasons_cover_the_idle_time(busy, data):
    window = (0, 150)
    gaps = bd.idle_gaps(window, busy)
    reasons = bd.idle_reasons(gaps, data, sync_ends=[], next_launch={})
    assert sum(reasons.values()) == pytest.approx(measure(gaps))
    assert reasons[bd.DATA] == pytest.approx(measure(intersect(gaps, union(data))))
