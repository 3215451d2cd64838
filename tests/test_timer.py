"""Timing logic with a fake clock: every count and duration is exact."""

import pytest

from ceiling.errors import InvalidInput
from ceiling.measure import timer
from ceiling.measure.timer import HostTimer, benchmark, l2_flush_bytes


class FakeClock:
    def __init__(self):
        self.ns = 0

    def __call__(self) -> int:
        return self.ns

    def advance_ms(self, ms: float) -> None:
        self.ns += int(ms * 1e6)


def test_budgets_set_sample_count():
    clock = FakeClock()
    calls = []

    def fn():
        calls.append(1)
        clock.advance_ms(2)

    samples = benchmark(fn, warmup_ms=25, budget_ms=100, clock=clock, flush=None)
    assert samples == [0.002] * 50  # 100 ms / 2 ms per call
    assert len(calls) == 13 + 50  # warm-up stops at the first call reaching 25 ms


def test_min_and_max_samples():
    clock = FakeClock()

    def slow():
        clock.advance_ms(500)

    assert len(benchmark(slow, warmup_ms=0, budget_ms=100, min_samples=3, clock=clock)) == 3

    def fast():
        clock.advance_ms(0.001)

    assert len(benchmark(fast, warmup_ms=1, budget_ms=100, max_samples=7, clock=clock)) == 7


def test_warmup_median_ignores_slow_first_call():
    clock = FakeClock()
    durations = iter([50.0] + [1.0] * 1000)

    def fn():
        clock.advance_ms(next(durations))

    # warm-up: 50 ms (first call, lazy init) passes the 10 ms budget, but a second call is
    # made and only it sets the per-call time: 1 ms -> 20 samples, not min_samples
    assert benchmark(fn, warmup_ms=10, budget_ms=20, clock=clock) == [0.001] * 20
    clock2 = FakeClock()
    durations2 = iter([50.0] + [1.0] * 1000)

    def fn2():
        clock2.advance_ms(next(durations2))

    # warm-up 60 ms: one 50 ms call and ten 1 ms calls; the steady median is 1 ms -> 20 samples
    # of 1 ms
    assert benchmark(fn2, warmup_ms=60, budget_ms=20, clock=clock2) == [0.001] * 20


def test_rotation_and_flush_outside_the_sample():
    clock = FakeClock()
    seen = []
    flushes = []

    def fn(x):
        seen.append(x)
        clock.advance_ms(1)

    def flush():
        flushes.append(1)
        clock.advance_ms(100)  # never counted in a sample

    samples = benchmark(
        fn, warmup_ms=0, budget_ms=4, inputs=["a", "b", "c"], flush=flush, clock=clock
    )
    assert samples == [0.001] * 4
    # two warm-up calls (the minimum), then 4 samples, in rotation
    assert seen == ["a", "b", "c", "a", "b", "c"]
    assert len(flushes) == 4


def test_sync_called_around_each_sample():
    clock = FakeClock()
    syncs = []

    def fn():
        clock.advance_ms(1)

    benchmark(fn, warmup_ms=0, budget_ms=3, clock=clock, sync=lambda: syncs.append(1))
    assert len(syncs) == 2 + 2 * 3  # once after each of the two warm-up calls, twice per sample


def test_host_timer_collects_seconds():
    clock = FakeClock()
    t = HostTimer(clock)
    token = t.start()
    clock.advance_ms(3)
    assert t.collect([t.stop(token)]) == [pytest.approx(0.003)]


def test_real_clock_small_run():
    samples = benchmark(lambda: sum(range(1000)), warmup_ms=1, budget_ms=5, flush=None)
    assert len(samples) >= 3 and all(s > 0 for s in samples)


def test_l2_flush_sizing():
    assert l2_flush_bytes(50 * 2**20) == 100 * 2**20  # H100: 50 MiB L2 -> 100 MiB buffer
    assert l2_flush_bytes(60 * 2**20, factor=3) == 180 * 2**20
    assert l2_flush_bytes(None) == timer.L2_FLUSH_FALLBACK_BYTES
    with pytest.raises(InvalidInput):
        l2_flush_bytes(1e6, factor=0.5)


def test_no_flush_or_sync_on_cpu():
    assert timer.make_l2_flush("cpu") is None
    assert timer.device_sync("cpu") is None


@pytest.mark.parametrize(
    "kwargs", [{"budget_ms": 0}, {"warmup_ms": -1}, {"min_samples": 0}, {"inputs": []}]
)
def test_bad_arguments(kwargs):
    with pytest.raises(InvalidInput):
        benchmark(lambda *a: None, **kwargs)
