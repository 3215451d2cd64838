import pytest

from ceiling.profile.placement import hints, place
from ceiling.profile.recorder import OpCall, OpTotals


def _call(op, category, flops, bytes_, time_s, dims=None):
    return OpCall(
        op=op, module="M", phase="forward", category=category, flops=flops, flops_exact=True,
        recomputed_flops=0.0, bytes_read=bytes_, bytes_written=0.0, bytes_exact=True,
        time_s=time_s, dtype="float16", matmul_dims=dims,
    )  # fmt: skip


def test_place_on_the_roofline_exact():
    t = OpTotals("aten.add")
    t.add(_call("aten.add", "elementwise", 2e9, 1e9, 0.1))
    p = place(t, peak_flops_per_s=1e12, bandwidth_bytes_per_s=1e11)
    assert p.intensity == 2.0
    assert p.attainable_flops_per_s == 2e11  # 2 FLOP/B × 100 GB/s, under the 1 TFLOP/s roof
    assert p.bound == "memory"  # ridge at 10 FLOP/B
    assert p.roofline_time_s == pytest.approx(0.01)  # 1 GB at 100 GB/s
    assert p.achieved_flops_per_s == pytest.approx(2e10)
    assert p.fraction_of_attainable == pytest.approx(0.1)


def test_compute_bound_and_zero_traffic():
    t = OpTotals("aten.mm")
    t.add(_call("aten.mm", "matmul", 1e12, 1e9, 2.0))
    p = place(t, 1e12, 1e11)
    assert p.bound == "compute" and p.attainable_flops_per_s == 1e12
    assert p.fraction_of_attainable == pytest.approx(0.5)
    empty = OpTotals("aten.view")
    empty.add(_call("aten.view", "view", 0.0, 0.0, None))
    q = place(empty, 1e12, 1e11)
    assert q.intensity is None and q.time_s is None and q.fraction_of_attainable is None


def test_hints_fuse_align_and_memory_bound():
    calls = [_call("aten.mm", "matmul", 2 * 1001 * 64 * 64, 1e6, 0.010, (1001, 64, 64))]
    calls += [_call("aten.gelu", "elementwise", 1e5, 1e7, 0.009) for _ in range(3)]
    text = hints(calls, peak_flops_per_s=1e12, bandwidth_bytes_per_s=1e11, itemsize=2)
    assert any(h.startswith("elementwise, normalisation and copy ops are 73 %") for h in text)
    assert any("matmul dims not multiples of 8 (M×N×K 1001×64×64)" in h for h in text)
    assert any(h.startswith("memory-bound ops take") for h in text)


def test_hint_launch_bound_and_host_share():
    # 200 tiny adds of 5 µs each, each with a roofline time of 0.01 µs
    calls = [_call("aten.add", "elementwise", 1e3, 1e3, 5e-6) for _ in range(200)]
    text = hints(calls, 1e12, 1e11, itemsize=4, step_s=0.004)
    assert any("200 of 200 op calls are shorter than 20 µs" in h for h in text)
    assert any(
        h.startswith("75 % of the recorded step (4 ms) is spent between aten ops") for h in text
    )
    assert hints(calls[:0], 1e12, 1e11, itemsize=4) == []


def test_roofline_time_sums_each_call_at_its_own_bound():
    from ceiling.profile.placement import roofline_time

    calls = [
        _call("aten.mm", "matmul", 2e12, 1e9, 3.0),  # compute: 2 s at 1 TFLOP/s (0.01 s of bytes)
        _call("aten.add", "elementwise", 1e9, 1e10, 0.5),  # memory: 10 GB at 100 GB/s = 0.1 s
    ]
    assert roofline_time(calls, 1e12, 1e11) == pytest.approx(2.1)


def test_memory_hint_says_whether_bandwidth_or_overhead_limits():
    # 1 GB at 100 GB/s is 10 ms at the roof: run in 20 ms (50 % of roof) or 1 s (1 %)
    near = [_call("aten.add", "elementwise", 1e8, 1e9, 0.020)]
    (text,) = [h for h in hints(near, 1e12, 1e11, itemsize=4) if h.startswith("memory")]
    assert text.startswith("memory-bound ops take 100 % of op time at 50 % of the bandwidth roof")
    far = [_call("aten.add", "elementwise", 1e8, 1e9, 1.0)]
    (text,) = [h for h in hints(far, 1e12, 1e11, itemsize=4) if h.startswith("memory")]
    assert "run at only 1 % of the bandwidth roof" in text and "not bandwidth" in text


def test_optimizer_hint_for_per_parameter_ops():
    from dataclasses import replace

    step = [_call("aten.mm", "matmul", 1e9, 1e6, 0.010)]
    per_param = [replace(_call("aten.mul_", "elementwise", 1e3, 1e4, 0.001), phase="optimizer")]
    text = hints(step + per_param * 30, 1e12, 1e11, itemsize=4)
    assert any(
        h.startswith("the optimizer step takes 75 % of op time in 30 per-parameter ops")
        for h in text
    )
    fused = [replace(c, op="aten._foreach_mul_") for c in per_param]
    text = hints(step + fused * 30, 1e12, 1e11, itemsize=4)
    assert not any(h.startswith("the optimizer") for h in text)
