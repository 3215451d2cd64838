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


def test_on_a_cpu_the_per_op_floor_adds_to_the_work():
    from dataclasses import replace

    cpu = replace(ROOFS, serial_dispatch=True)  # one thread dispatches the op, then runs it
    stream = roofline.op_time(1e6, 1e8, 1, cpu, cpu.bandwidth_bytes_per_s)
    assert (stream.time_s, stream.bound) == (pytest.approx(1e-3 + 10e-6), "memory")
    tiny = roofline.op_time(1e3, 1e3, 1, cpu, cpu.bandwidth_bytes_per_s)
    assert (tiny.time_s, tiny.bound) == (pytest.approx(10e-6 + 10e-9), "overhead")


def test_on_a_gpu_the_host_queues_ops_while_the_device_runs_one():
    # the matmul first: the host issues the 300 tiny ops (3 ms) while the device runs it
    # (2 ms), so the step is the host's 3.01 ms, not 5 ms; the device waits 1 ms for it
    ops = [(2e9, 1e6, 1)] + [(1e3, 1e3, 1)] * 300
    p = roofline.predict_step(ops, ROOFS, working_set_bytes=1e9)
    assert p.time_s == pytest.approx(301 * 10e-6 + 1e-8)
    assert p.by_bound_s["compute"] == pytest.approx(2e-3)
    assert p.by_bound_s["memory"] == pytest.approx(300 * 1e-8)  # the tiny ops' own run
    assert p.by_bound_s["overhead"] == pytest.approx(p.time_s - 2e-3 - 300 * 1e-8)
    # on a CPU, one thread dispatches then runs each op: the sum
    from dataclasses import replace

    cpu = roofline.predict_step(ops, replace(ROOFS, serial_dispatch=True), 1e9)
    assert cpu.time_s == pytest.approx(301 * 10e-6 + 2e-3 + 300 * 1e-8)


def test_each_phase_of_a_training_step_pays_its_own_host_time_per_op():
    from dataclasses import replace

    host = {"forward": 30e-6, "backward": 12e-6, "optimizer": 5e-6}
    cpu = replace(ROOFS, serial_dispatch=True, host_s_by_phase=host)
    tiny = dict(flops=0.0, bytes=0.0)
    ops = [roofline.OpWork(**tiny, phase=p) for p in
           ("forward", "forward", "backward", "optimizer", "recompute", None, "data")]  # fmt: skip
    p = roofline.predict_step(ops, cpu, 1e9)
    # recompute replays the forward; no phase, or one not measured: the plain floor
    assert p.time_s == pytest.approx((30 + 30 + 12 + 5 + 30 + 10 + 10) * 1e-6)
    assert p.by_bound_s["overhead"] == pytest.approx(p.time_s)
    with pytest.raises(InvalidInput, match="backward"):
        Roofs(1e12, 1e11, host_s_by_phase={"backward": -1.0})
    # a view pays its own host cost where views were timed apart, else its phase's
    views = replace(cpu, host_s_by_phase={**host, "forward_view": 2e-6})
    assert views.host_s("forward_view") == 2e-6 and views.host_s("backward_view") == 12e-6
    assert views.host_s("recompute_view") == 2e-6


def test_memory_roof_is_the_cache_when_the_working_set_fits():
    assert ROOFS.memory_roof(30 * 2**20) == (4e11, "last-level cache")
    assert ROOFS.memory_roof(40 * 2**20) == (1e11, "DRAM")
    unmeasured = Roofs(1e12, 1e11, cache_bytes=32 * 2**20)
    bandwidth, source = unmeasured.memory_roof(1e6)
    assert bandwidth == 1e11 and "not measured" in source
    with pytest.raises(InvalidInput):
        Roofs(1e12, 1e11, per_op_s=-1.0)


def test_an_op_moves_its_bytes_at_the_bandwidth_measured_for_its_size():
    # fake measured points: 1 MB at 50 GB/s, 100 MB at 5 GB/s; the memory roof 40 GB/s
    r = Roofs(1e12, 10e9, bandwidth_by_bytes=((1e6, 50e9), (100e6, 5e9)))
    assert r.bandwidth_at(1e3, 40e9) == 40e9  # flat below the first point, held at the roof
    assert r.bandwidth_at(10e6, 40e9) == pytest.approx(27.5e9)  # halfway in log size
    assert r.bandwidth_at(1e9, 40e9) == 5e9  # flat beyond the last
    assert Roofs(1e12, 10e9).bandwidth_at(1e9, 40e9) == 40e9  # no curve: the roof
    # an op of 2 calls of 100 MB each: 200 MB at 5 GB/s
    t = roofline.op_time(0.0, 200e6, 2, r, 40e9)
    assert t.memory_s == pytest.approx(200e6 / 5e9)
    with pytest.raises(InvalidInput, match="increasing size"):
        Roofs(1e12, 10e9, bandwidth_by_bytes=((100e6, 5e9), (1e6, 50e9)))


def test_step_prediction_sums_ops_and_names_the_roof_that_holds_it():
    # 300 tiny ops (3 ms of host time) before one 2 ms matmul: the device waits for the
    # host, then runs the matmul
    ops = [(1e3, 1e3, 1)] * 300 + [(2e9, 1e6, 1)]
    p = roofline.predict_step(ops, ROOFS, working_set_bytes=1e9)
    # (each tiny op runs in the 10 µs before the host issues the next)
    assert p.time_s == pytest.approx(301 * 10e-6 + 2e-3)
    assert p.by_bound_s["overhead"] == pytest.approx(301 * 10e-6 - 300 * 1e-8)
    assert p.bound == "overhead" and p.memory_source == "DRAM"
    # a matmul whose shape runs at a measured 250 GFLOP/s: 8 ms, not 2 ms at the peak
    own = roofline.predict_step([(2e9, 1e6, 1, 2.5e11), (2e9, 1e6, 1, None)], ROOFS, 1e9)
    assert own.time_s == pytest.approx(10e-6 + 8e-3 + 2e-3) and own.bound == "compute"
    # the same bytes from the cache: a streaming op four times faster
    fits = roofline.predict_step([(0.0, 4e8, 1)], ROOFS, working_set_bytes=1e6)
    assert fits.time_s == pytest.approx(10e-6 + 1e-3) and fits.bound == "memory"


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
    assert got["other ops at their roof (bytes / bandwidth, function cost)"] == pytest.approx(0.010)
    assert got["per-op overhead (calls × the per-op floor)"] == pytest.approx(0.010)
    assert got["ops with no FLOP formula"] == pytest.approx(0.8 * 0.005)
    assert got["host time between ops (Python, autograd)"] == pytest.approx(0.8 * 0.020)
    assert got["unexplained: other ops beyond their roof and floor"] == pytest.approx(
        0.8 * 0.050 - 0.020
    )
    assert sum(got.values()) == pytest.approx(0.100, abs=1e-15)
    assert "waiting for data" not in got
    assert all(b.recover for b in bars)
    assert any("torch.compile" in b.recover for b in bars)
    # a compiled model: the same bars, and no bar recovers time by compiling it
    from dataclasses import replace

    done = waterfall.bars(replace(TIMES, compiled=True))
    assert [b.seconds for b in done] == [b.seconds for b in bars]
    assert not any("torch.compile" in b.recover for b in done)


def test_waterfall_with_data_wait_scales_only_the_compute_part():
    from dataclasses import replace

    t = replace(TIMES, step_s=0.130, data_wait_s=0.030)
    got = {b.name: b.seconds for b in waterfall.bars(t)}
    assert got["waiting for data"] == 0.030
    assert sum(got.values()) == pytest.approx(0.130, abs=1e-15)
    assert got["host time between ops (Python, autograd)"] == pytest.approx(0.8 * 0.020)


def test_first_touch_from_fresh_and_reused_fills():
    from ceiling.model.first_touch import fit

    mib = 2**20
    sizes = [4 * mib, 16 * mib, 32 * mib, 64 * mib]
    reused = [s * 0.1e-9 for s in sizes]  # 10 GB/s into a buffer already mapped
    # an allocator that gives back blocks from 32 MiB: those pay 0.5 ns per byte more
    extra = [0.5e-9 * s if s >= 32 * mib else 0.01e-9 * s for s in sizes]
    fresh = [r + e for r, e in zip(reused, extra, strict=True)]
    cost = fit(sizes, fresh, reused)
    assert cost.from_bytes == 32 * mib and cost.s_per_byte == pytest.approx(0.5e-9)
    assert cost.seconds([16 * mib, 40 * mib]) == pytest.approx(0.5e-9 * 40 * mib)
    # page faults counted: 1 per 8 KiB above 32 MiB, each then costs 4 µs
    faults = [s // 8192 if s >= 32 * mib else 0 for s in sizes]
    counted = fit(sizes, fresh, reused, faults)
    assert counted.s_per_fault == pytest.approx(0.5e-9 * 8192)
    # an op's own faults price it whatever the size rule says (a 16 MiB block refaulted)
    assert counted.seconds([16 * mib], page_faults=100) == pytest.approx(100 * 0.5e-9 * 8192)
    assert counted.seconds([64 * mib], page_faults=0) == 0.0
    assert counted.seconds([64 * mib]) == pytest.approx(0.5e-9 * 64 * mib)  # not counted
    # a caching allocator: fresh is no slower than reused (within noise)
    assert fit(sizes, [r * 1.05 for r in reused], reused).seconds([64 * mib]) == 0.0
    with pytest.raises(InvalidInput):
        fit(sizes[::-1], fresh, reused)


def test_an_op_pays_its_function_per_element_and_its_new_buffers_first_touch():
    from ceiling.model.first_touch import FirstTouch

    roofs = Roofs(1e12, 1e11, per_op_s=1e-6, first_touch=FirstTouch(0.5e-9, 32 * 2**20),
                  function_s_per_element={"gelu[tanh]": 3e-9})  # fmt: skip
    n = 1_000_000
    # 8 FLOPs and 8 bytes per element: 8 µs of FLOPs, 80 µs of bytes, but 3 ms of tanh
    t = roofline.op_time(8 * n, 8 * n, 1, roofs, 1e11, None, (), "gelu[tanh]", n)
    assert (t.time_s, t.bound) == (pytest.approx(3e-3), "compute")
    plain = roofline.op_time(8 * n, 8 * n, 1, roofs, 1e11, None, (), "add", n)  # not measured
    assert (plain.time_s, plain.bound) == (pytest.approx(80e-6), "memory")
    # a 64 MiB output allocated by the op: its first touch adds to the memory time
    big = 64 * 2**20
    fresh = roofline.op_time(0.0, 2 * big, 1, roofs, 1e11, None, (big,))
    assert fresh.memory_s == pytest.approx(2 * big / 1e11 + 0.5e-9 * big)
    small = roofline.op_time(0.0, 2e6, 1, roofs, 1e11, None, (1e6,))  # below 32 MiB: reused
    assert small.memory_s == pytest.approx(2e6 / 1e11)
    # one op alone: the host issues it (1 µs), then the device runs it
    work = roofline.OpWork(0.0, 2 * big, 1, None, (big,))
    assert roofline.predict_step([work], roofs, 1e12).time_s == pytest.approx(1e-6 + fresh.memory_s)


def test_first_touch_bar_takes_what_the_other_ops_spent_beyond_their_roof():
    from dataclasses import replace

    t = replace(TIMES, first_touch_s=0.004)
    got = {b.name: b.seconds for b in waterfall.bars(t)}
    assert got[waterfall.FIRST_TOUCH] == pytest.approx(0.004)
    assert got["per-op overhead (calls × the per-op floor)"] == pytest.approx(0.010)
    assert sum(got.values()) == pytest.approx(0.100, abs=1e-15)
    # more first touch than the time beyond the roofs: capped there, overhead gets none
    capped = {b.name: b.seconds for b in waterfall.bars(replace(TIMES, first_touch_s=1.0))}
    assert capped[waterfall.FIRST_TOUCH] == pytest.approx(0.8 * 0.050 - 0.010)
    assert capped["per-op overhead (calls × the per-op floor)"] == pytest.approx(0.0)
    assert sum(capped.values()) == pytest.approx(0.100, abs=1e-15)


def _call(op, category, flops, nbytes, time_s, **kw):
    from ceiling.profile.recorder import OpCall

    return OpCall(op, "m", "forward", category, flops, True, 0.0, nbytes / 2, nbytes / 2, True,
                  time_s, "float32", **kw)  # fmt: skip


def test_profile_and_step_waterfalls_sum_to_the_measured_step_with_fake_timings():
    """explain_step, as `profile` and `step` call it, on fake recorded calls and roofs."""
    from types import SimpleNamespace

    from ceiling.model.first_touch import FirstTouch
    from ceiling.profile.explain import explain_step

    roofs = Roofs(1e12, 1e11, per_op_s=2e-6, first_touch=FirstTouch(0.5e-9, 1e6),
                  function_s_per_element={"gelu": 1e-9})  # fmt: skip
    gelu = {"function": "gelu", "elements": 1_000_000, "new_buffers": (4_000_000,)}
    calls = [
        _call("aten.mm", "matmul", 4e9, 3e7, 0.010, matmul_dims=(1000, 1000, 2000)),
        _call("aten.gelu", "elementwise", 8e6, 8e6, 0.003, **gelu),
        _call("aten.add", "elementwise", 1e6, 1.2e7, 0.001),
        _call("mylib.fused", "unknown", 0.0, 1e6, 0.0005),
    ]
    ceiling = SimpleNamespace(peak_flops_per_s=2e12, measured_peak_flops_per_s=1e12)
    for data_wait in (0.0, 0.004):  # profile: none; step: its loader's wait
        e = explain_step(calls, roofs, "fake", 1e9, ceiling=ceiling, model_flops=4e9,
                         step_s=0.020 + data_wait, recorded_step_s=0.018, data_wait_s=data_wait,
                         matmul_rates={(1000, 1000, 2000): 5e11})  # fmt: skip
        bars = {b.name: b.seconds for b in e.waterfall}
        assert sum(bars.values()) == pytest.approx(0.020 + data_wait, abs=1e-15)
        assert bars[waterfall.FIRST_TOUCH] == pytest.approx(0.5e-9 * 4e6)
        assert bars.get("waiting for data", 0.0) == data_wait
    from ceiling.render.waterfall import explanation_json

    d = explanation_json(e)
    assert d["first_touch"]["s_per_byte"] == 0.5e-9 and d["function_s_per_element"] == {
        "gelu": 1e-9
    }
    assert sum(b["seconds"] for b in d["waterfall"]) == pytest.approx(0.024, abs=1e-15)
    # the prediction: mm at its own rate (8 ms); gelu's bytes and its new buffer's first
    # touch (2.08 ms) above its 1 ms of function; add's and the unknown op's bytes
    p = e.prediction
    assert p.by_bound_s["compute"] == pytest.approx(8e-3)
    assert p.by_bound_s["memory"] == pytest.approx(8e6 / 1e11 + 2e-3 + 1.2e-4 + 1e-5)


def test_cuda_graphs_are_a_remedy_on_a_gpu_only():
    from dataclasses import replace

    def remedies(times) -> str:
        return " ".join(b.recover for b in waterfall.bars(times))

    assert "CUDA graphs" in remedies(TIMES)  # a GPU step (the default)
    on_cpu = remedies(replace(TIMES, gpu=False))
    assert "CUDA graphs" not in on_cpu and "torch.compile; less Python per step" in on_cpu
    compiled_cpu = remedies(replace(TIMES, gpu=False, compiled=True))
    assert "CUDA graphs" not in compiled_cpu and "torch.compile" not in compiled_cpu
