"""Local roofs are measured once per process, device and thread count, or read from the
machine profile: counted with fake measurements, so nothing here depends on the machine."""

from __future__ import annotations

import pytest

from ceiling.measure import first_touch, functions, once, roofs
from ceiling.measure.first_touch import FirstTouchSamples
from ceiling.measure.functions import FunctionTimes

MiB = 2**20
NO_PROFILE = "/nonexistent/ceiling-profile.json"


@pytest.fixture(autouse=True)
def fresh_process():
    once.forget()
    yield
    once.forget()


@pytest.fixture
def counted(monkeypatch):
    """Fake first-touch and function timings that count their calls."""
    calls = {"functions": 0, "first_touch": 0}

    def fake_functions(device="cpu", budget_ms=20.0, *samples):
        calls["functions"] += 1
        return FunctionTimes(1000, {"exp": 2e-6, "tanh": 8e-6})

    def fake_first_touch(device="cpu", sizes=(), budget_ms=40.0, warmup_ms=5.0):
        calls["first_touch"] += 1
        sizes = [16 * MiB, 32 * MiB, 64 * MiB]
        return FirstTouchSamples(sizes, [1e-3, 4e-3, 8e-3], [1e-3, 2e-3, 4e-3], [0, 512, 1024])

    monkeypatch.setattr(functions, "time_functions", fake_functions)
    monkeypatch.setattr(first_touch, "time_first_touch", fake_first_touch)
    return calls


def test_a_second_call_takes_the_figure_already_measured(counted):
    first = roofs.function_costs("cpu", NO_PROFILE)
    again = roofs.function_costs("cpu", NO_PROFILE)
    assert counted["functions"] == 1
    assert first == again == pytest.approx({"exp": 2e-9, "tanh": 8e-9})
    touch = roofs.first_touch_cost("cpu", NO_PROFILE)
    assert roofs.first_touch_cost("cpu", NO_PROFILE) == touch
    assert counted["first_touch"] == 1
    assert touch.from_bytes == 32 * MiB and touch.s_per_byte == pytest.approx(2e-3 / (32 * MiB))


def test_another_device_or_thread_count_is_measured_again(counted, monkeypatch):
    roofs.function_costs("cpu", NO_PROFILE)
    roofs.function_costs("cuda:0", NO_PROFILE)
    assert counted["functions"] == 2
    monkeypatch.setattr(once, "thread_count", lambda: 64)
    roofs.function_costs("cpu", NO_PROFILE)
    roofs.function_costs("cpu", NO_PROFILE)
    assert counted["functions"] == 3
    once.forget()
    roofs.function_costs("cpu", NO_PROFILE)
    assert counted["functions"] == 4


def test_a_machine_profile_with_the_figures_is_read_not_measured(counted, monkeypatch):
    every = {name: 1e-7 for name in functions.NAMES}
    saved = {
        "functions": {"elements": 100, "best_s": {**every, "gelu": 3e-7}},
        "first_touch": {
            "sizes_bytes": [16 * MiB, 64 * MiB],
            "fresh_s": [1e-3, 9e-3],
            "reused_s": [1e-3, 1e-3],
        },
    }
    monkeypatch.setattr(roofs, "_profiled_overhead", lambda device, profile: saved)
    assert roofs.function_costs("cpu") == pytest.approx({**{n: 1e-9 for n in every}, "gelu": 3e-9})
    assert roofs.first_touch_cost("cpu").from_bytes == 64 * MiB
    assert counted == {"functions": 0, "first_touch": 0}


def test_functions_a_saved_profile_lacks_are_measured_beside_its_own(counted, monkeypatch):
    saved = {"functions": {"elements": 100, "best_s": {"exp": 5e-7}}}  # saved before the rest
    monkeypatch.setattr(roofs, "_profiled_overhead", lambda device, profile: saved)
    # the profile's exp kept; tanh from the quick measurement (1000 elements, 8 µs)
    assert roofs.function_costs("cpu") == pytest.approx({"exp": 5e-9, "tanh": 8e-9})
    assert counted["functions"] == 1


def test_measured_once_keys_on_what_else_the_figure_depends_on():
    calls = []

    def measure():
        calls.append(1)
        return len(calls)

    assert once.measured_once("x", "cpu", measure, 1024) == 1
    assert once.measured_once("x", "cpu", measure, 1024) == 1
    assert once.measured_once("x", "cpu", measure, 2048) == 2
    once.remember("x", "cpu", 7, 4096)
    assert once.measured_once("x", "cpu", measure, 4096) == 7
    assert len(calls) == 2


@pytest.mark.parametrize("quick", [True, False])
def test_the_bench_suite_leaves_its_figures_for_a_later_profile(counted, monkeypatch, quick):
    from ceiling.measure import overhead

    monkeypatch.setattr(overhead, "time_tiny_op", lambda *a: (1e-6, 1e-6))
    monkeypatch.setattr(overhead, "time_loop_vs_vectorized", lambda *a: (1.0, 1e-3, 1e-3))
    monkeypatch.setattr(overhead, "time_functions", functions.time_functions)
    monkeypatch.setattr(overhead, "time_first_touch", first_touch.time_first_touch)
    from ceiling.measure import host_costs

    host = host_costs.HostCosts(30e-6, 12e-6, 6e-6, 20e-6)
    timed = []
    monkeypatch.setattr(overhead, "time_host_costs", lambda *a, **k: timed.append(1) or host)
    monkeypatch.setattr(host_costs, "time_host_costs", lambda *a, **k: timed.append(1) or host)
    result = overhead.run_overhead("cpu", budget_ms=10.0, quick=quick)
    assert result.functions.best_s == {"exp": 2e-6, "tanh": 8e-6}
    assert result.row()["host_costs"] == host.row()  # saved in the machine profile
    assert result.row()["gemm_rows"]["rows"] == [1, 2, 4, 8, 16, 32, 64, 128]  # on a CPU
    roofs.function_costs("cpu", NO_PROFILE)
    roofs.first_touch_cost("cpu", NO_PROFILE)
    assert roofs.host_costs("cpu", NO_PROFILE) == host
    assert counted == {"functions": 1, "first_touch": 1} and timed == [1]


def test_host_time_per_op_comes_from_the_profile_else_is_measured_once(monkeypatch):
    from ceiling.measure import host_costs
    from ceiling.measure.host_costs import HostCosts

    measured = []

    def fake(device="cpu", budget_ms=60.0):
        measured.append(device)
        return HostCosts(30e-6, 12e-6, 6e-6, 20e-6)

    monkeypatch.setattr(host_costs, "time_host_costs", fake)
    first = roofs.host_costs("cpu", NO_PROFILE)
    assert roofs.host_costs("cpu", NO_PROFILE) is first and measured == ["cpu"]
    assert first.by_phase() == {"forward": 30e-6, "backward": 12e-6, "optimizer": 6e-6,
                                "optimizer_foreach": 20e-6}  # fmt: skip
    saved = {"host_costs": HostCosts(9e-6, 4e-6, 2e-6, 5e-6, 1e-6, 2e-6).row()}
    assert roofs.host_costs("cpu", overhead=saved).forward_s == 9e-6 and len(measured) == 1
    # views timed apart are their own phases; a row saved without them is measured again
    both = HostCosts(9e-6, 4e-6, 2e-6, 5e-6, 1e-6, 3e-6)
    assert both.by_phase()["forward_view"] == 1e-6 and both.by_phase()["backward_view"] == 3e-6
    assert host_costs.from_row(both.row()) == both
    assert host_costs.from_row(HostCosts(9e-6, 4e-6, 2e-6, 5e-6).row()) is None
    # a malformed or non-positive saved row is measured instead
    assert roofs.host_costs("cuda:0", overhead={"host_costs": {"forward_s": 0.0}}) == fake()


def test_a_foreach_optimizer_op_or_a_view_pays_its_own_host_cost():
    from types import SimpleNamespace

    from ceiling.profile.explain import host_phase

    def call(op, phase, category="elementwise"):
        return SimpleNamespace(op=op, phase=phase, category=category)

    assert host_phase(call("aten._foreach_mul_", "optimizer")) == "optimizer_foreach"
    assert host_phase(call("aten._fused_adamw_", "optimizer")) == "optimizer_foreach"
    assert host_phase(call("aten.mul_", "optimizer")) == "optimizer"
    assert host_phase(call("aten._foreach_mul_", "forward")) == "forward"
    assert host_phase(call("aten.view", "forward", "view")) == "forward_view"
    assert host_phase(call("aten.t", "backward", "view")) == "backward_view"
    assert host_phase(call("aten.mm", "backward", "matmul")) == "backward"


def test_elementwise_bandwidth_by_size_less_the_call_s_own_cost(monkeypatch):
    # fake medians: the one-element call 2 µs; then each size in turn
    medians = iter([2e-6, 2e-6, 12e-6, 1002e-6])
    monkeypatch.setattr(roofs, "benchmark", lambda fn, **kw: [fn() is None or next(medians)] * 3)
    points = roofs.time_elementwise_bandwidth("cpu", elements=(2**10, 2**13, 2**20))
    # 2**10 took no longer than one element: left out; the others at 12 bytes per element
    small, large = 12 * 2**13, 12 * 2**20
    assert [p[0] for p in points] == [small, large]
    assert [p[1] for p in points] == pytest.approx([small / 10e-6, large / 1e-3])


def test_a_matmul_s_operands_are_cold_in_the_core_s_own_cache(monkeypatch):
    from types import SimpleNamespace

    from ceiling.hardware import cpu
    from ceiling.measure import decode

    caches = {"l1d": 32 * 2**10, "l1i": 32 * 2**10, "l2": 2**20, "l3": 32 * MiB}
    monkeypatch.setattr(cpu, "detect_cpu", lambda: SimpleNamespace(caches=caches))
    assert decode._private_cache_bytes("cpu") == 2**20  # the level below the last
    assert decode._private_cache_bytes("cuda:0") is None  # a GPU's L2 is its last level
    monkeypatch.setattr(cpu, "detect_cpu", lambda: SimpleNamespace(caches={"l1d": 2**15}))
    assert decode._private_cache_bytes("cpu") is None  # one level: nothing below the last


def test_a_matmul_s_operands_are_cold_at_the_last_level_when_the_step_moves_more():
    from types import SimpleNamespace

    from ceiling.profile.explain import matmul_cold_bytes

    llc, l2 = 32 * MiB, 2**20
    calls = [SimpleNamespace(bytes=10 * MiB)] * 3  # a step moving 30 MiB through the caches
    # weights (4 MiB with their optimizer state) fit, and so do the step's bytes: cold in L2
    assert matmul_cold_bytes(calls, 4 * MiB, llc, l2) == l2
    # one more op: 40 MiB pass between two uses of a weight, more than the last level holds
    assert matmul_cold_bytes([*calls, calls[0]], 4 * MiB, llc, l2) == llc
    assert matmul_cold_bytes(calls, 40 * MiB, llc, l2) == llc  # the working set alone
    assert matmul_cold_bytes(calls, 4 * MiB, None, None) is None  # caches unknown
