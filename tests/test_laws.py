import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ceiling.errors import InvalidInput
from ceiling.model import laws

# The seed's table: p in {0.5, 0.9, 0.99} x N in {2, 8, 1000}, rounded to 0.1.
SEED_TABLE = {
    0.5: [1.3, 1.8, 2.0],
    0.9: [1.8, 4.7, 9.9],
    0.99: [2.0, 7.5, 91.0],
}


@pytest.mark.parametrize("p", sorted(SEED_TABLE))
def test_seed_table(p):
    assert [round(laws.amdahl_speedup(p, n), 1) for n in (2, 8, 1000)] == SEED_TABLE[p]


def test_p095_ceiling_and_large_n():
    assert laws.amdahl_ceiling(0.95) == 20.0
    assert laws.amdahl_speedup(0.95, 256) == pytest.approx(18.618, abs=0.01)
    assert laws.amdahl_speedup(0.95, 512) == pytest.approx(19.284, abs=0.01)


def test_workers_for_fraction_of_ceiling():
    # N = p / ((1-p)(1/f - 1)) = 0.95 / (0.05 * 1/9) = 171
    assert laws.amdahl_workers_for(0.95, 0.9) == 171
    n99 = laws.amdahl_workers_for(0.95, 0.99)
    assert laws.amdahl_speedup(0.95, n99) >= 0.99 * 20.0 * (1 - 1e-12)
    assert laws.amdahl_speedup(0.95, n99 - 1) < 0.99 * 20.0
    assert laws.amdahl_workers_for(1.0, 0.9) is None
    assert laws.amdahl_workers_for(0.0, 0.9) == 1


def test_edges():
    assert laws.amdahl_ceiling(1.0) == math.inf
    assert laws.amdahl_speedup(0.0, 64) == 1.0
    assert laws.amdahl_speedup(1.0, 64) == 64.0
    assert laws.gustafson_speedup(0.0, 64) == 64.0
    assert laws.gustafson_speedup(1.0, 64) == 1.0
    assert laws.gustafson_speedup(0.1, 8) == pytest.approx(7.3)


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), float("inf")])
def test_bad_fraction(bad):
    with pytest.raises(InvalidInput, match="fraction"):
        laws.amdahl_speedup(bad, 4)
    with pytest.raises(InvalidInput, match="fraction"):
        laws.gustafson_speedup(bad, 4)


@pytest.mark.parametrize("bad", [0, -1, 0.5])
def test_bad_workers(bad):
    with pytest.raises(InvalidInput, match="at least 1"):
        laws.amdahl_speedup(0.5, bad)


fractions = st.floats(min_value=0.0, max_value=1.0)
workers = st.integers(min_value=1, max_value=10**6)


@given(fractions, workers)
def test_amdahl_bounded_by_n_and_ceiling(p, n):
    s = laws.amdahl_speedup(p, n)
    assert 1.0 - 1e-12 <= s <= n * (1 + 1e-12)
    assert s <= laws.amdahl_ceiling(p) * (1 + 1e-9)


@given(fractions, workers)
def test_amdahl_monotone_in_n(p, n):
    assert laws.amdahl_speedup(p, n + 1) >= laws.amdahl_speedup(p, n) * (1 - 1e-12)


@given(fractions, workers)
def test_gustafson_bounded_and_monotone(alpha, n):
    s = laws.gustafson_speedup(alpha, n)
    assert 1.0 - 1e-9 <= s <= n
    assert laws.gustafson_speedup(alpha, n + 1) >= s
