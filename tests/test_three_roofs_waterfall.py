"""The overhead roof and the waterfall, with fake machine numbers."""

import pytest

from ceiling.errors import InvalidInput
from ceiling.model import roofline, waterfall
from ceiling.model.roofline import Roofs

# 1 TFLOP/s, 100 GB/s DRAM, 10 µs per op, a 32 MiB cache read at 400 GB/s
ROOFS = Roofs(1e12, 1e11, per_op_s=10e-6, cache_bytes=32 * 2**20, cache_bandwidth_bytes_per_s=4e11)


def test_each_op_takes_the_largest_of_three_roofs():
    dram = ROOFS.bandwidth_bytes_per_s
    big = roofline.op_time(2e9, 1e6, 1, ROOFS, dram)  # 2 ms of FLOPs, 10 µs of bytes
    assert (big.time_s, big.bound) == (pytest.approx(2e-3), "compute")
    stream = roofline.op_time(1e6, 1e8, 1, ROOFS, dram)  # 1 ms of bytes
    assert (stream.time_s, stream.bound) == (pytest.approx(1e-3), "memory")
    tiny = roofline.op_time(1e3, 1e3, 1, ROOFS, dram)  # 1 ns and 10 ns under a 10 µs floor
    assert (tiny.time_s, tiny.bound) == (pytest.approx(10e-6), "overhead")


def test_memory_roof_is_the_cache_when_the_working_set_fits():
    assert ROOFS.memory_roof(30 * 2**20) == (4e11, "last-level cache")
    assert ROOFS.memory_roof(40 * 2**20) == (1e11, "DRAM")
    unmeasured = Roofs(1e12, 1e11, cache_bytes=32 * 2**20)
    bandwidth, source = unmeasured.memory_roof(1e6)
    assert bandwidth == 1e11 and "not measured" in source
    with pytest.raises(InvalidInput):
        Roofs(1e12, 1e11, per_op_s=-1.0)


def test_step_prediction_sums_ops_and_names_the_roof_that_holds_it():
    # 300 tiny ops (3 ms of floor) beside one 2 ms matmul: an overhead-bound step
    ops = [(2e9, 1e6, 1)] + [(1e3, 1e3, 1)] * 300
    p = roofline.predict_step(ops, ROOFS, working_set_bytes=1e9)
    assert p.time_s == pytest.approx(2e-3 + 300 * 10e-6)
    assert p.by_bound_s["overhead"] == pytest.approx(3e-3) and p.bound == "overhead"
    assert p.memory_source == "DRAM"
    # a matmul whose shape runs at a measured 250 GFLOP/s: 8 ms, not 2 ms at the peak
    own = roofline.predict_step([(2e9, 1e6, 1, 2.5e11), (2e9, 1e6, 1, None)], ROOFS, 1e9)
    assert own.time_s == pytest.approx(8e-3 + 2e-3) and own.bound == "compute"
    # the same bytes from the cache: a streaming op four times faster
    fits = roofline.predict_step([(0.0, 4e8, 1)], ROOFS, working_set_bytes=1e6)
    assert fits.time_s == pytest.approx(1e-3) and fits.bound == "memory"


TIMES = waterfall.StepTimes(
    step_s=0.100,
    recorded_step_s=0.125,  # a sync per op: the recorded step ran 25 % longer
    model_flops=2e10,  # 20 ms at the 1 TFLOP/s dense peak, 25 ms at an 800 GFLOP/s ceiling
    dense_peak_flops_per_s=1e12,
    measured_peak_flops_per_s=8e11,
    model_op_s=0.050,
    other_op_s=0.050,
    other_roof_s=0.010,
    other_calls=1000,
    per_op_s=10e-6,
    unknown_op_s=0.005,
)


def test_waterfall_bars_sum_to_the_measured_step_exactly():
    bars = waterfall.bars(TIMES)
    got = {b.name: b.seconds for b in bars}
    assert got["model FLOPs at the dense peak"] == pytest.approx(0.020)
    assert got["dense peak → measured matmul ceiling"] == pytest.approx(0.005)
    assert got["matmuls and attention below the ceiling"] == pytest.approx(0.8 * 0.050 - 0.025)
    assert got["other ops at their roof (bytes / bandwidth)"] == pytest.approx(0.010)
    assert got["per-op overhead (calls × the per-op floor)"] == pytest.approx(0.010)
    assert got["ops with no FLOP formula"] == pytest.approx(0.8 * 0.005)
    assert got["host time between ops (Python, autograd)"] == pytest.approx(0.8 * 0.020)
    assert got["unexplained: other ops beyond their roof and floor"] == pytest.approx(
        0.8 * 0.050 - 0.020
    )
    assert sum(got.values()) == pytest.approx(0.100, abs=1e-15)
    assert "waiting for data" not in got
    assert all(b.recover for b in bars)


def test_waterfall_with_data_wait_scales_only_the_compute_part():
    from dataclasses import replace

    t = replace(TIMES, step_s=0.130, data_wait_s=0.030)
    got = {b.name: b.seconds for b in waterfall.bars(t)}
    assert got["waiting for data"] == 0.030
    assert sum(got.values()) == pytest.approx(0.130, abs=1e-15)
    assert got["host time between ops (Python, autograd)"] == pytest.approx(0.8 * 0.020)
