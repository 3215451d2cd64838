"""Clocks, power and temperature beside measurements: a fake NVML module, a fake sysfs."""

import sys
import types

import pytest

from ceiling.hardware import telemetry
from ceiling.hardware.telemetry import CpuFreqReader, reader_for, summarize, throttle_reasons
from ceiling.measure import suite


class NotSupported(Exception):
    pass


def fake_nvml(sm_mhz, mask=0, power_supported=True):
    """A pynvml stand-in: the SM clock follows `sm_mhz` one reading at a time."""
    calls = {"init": 0, "index": None}
    clocks = iter(sm_mhz)
    m = types.ModuleType("pynvml")
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM, m.NVML_TEMPERATURE_GPU = 1, 2, 0

    def init():
        calls["init"] += 1

    def handle(i):
        calls["index"] = i
        return f"gpu{i}"

    def clock(h, kind):
        return next(clocks) if kind == m.NVML_CLOCK_SM else 2619

    def power(h):
        if not power_supported:
            raise NotSupported("power readings not supported")
        return 612_000  # mW

    m.nvmlInit = init
    m.nvmlDeviceGetHandleByIndex = handle
    m.nvmlDeviceGetClockInfo = clock
    m.nvmlDeviceGetMaxClockInfo = lambda h, kind: 1980
    m.nvmlDeviceGetPowerUsage = power
    m.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700_000
    m.nvmlDeviceGetTemperature = lambda h, sensor: 71
    m.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: mask
    m.calls = calls
    return m


def test_fake_nvml_reading_in_si_units(monkeypatch):
    nvml = fake_nvml([1980], mask=0x4 | 0x1)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    reader = reader_for("cuda:1")
    assert reader.source == "nvml" and nvml.calls["index"] == 3  # CUDA's 1 is NVML's 3
    r = reader.read()
    assert r["sm_clock_hz"] == 1980e6 and r["memory_clock_hz"] == 2619e6
    assert r["power_w"] == 612.0 and r["power_limit_w"] == 700.0
    assert r["temperature_c"] == 71.0
    assert r["throttle_reasons"] == ["gpu_idle", "sw_power_cap"]


def test_an_unsupported_field_is_left_out(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([1500], power_supported=False))
    r = reader_for("cuda").read()
    assert "power_w" not in r and r["sm_clock_hz"] == 1500e6


def test_without_nvml_there_is_no_reader_and_a_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert reader_for("cuda") is None
    assert "ceiling-perf[gpu]" in telemetry.unavailable_reason("cuda")


def test_throttle_bits_by_name():
    assert throttle_reasons(0) == []
    assert throttle_reasons(0x40 | 0x8) == ["hw_slowdown", "hw_thermal_slowdown"]
    assert throttle_reasons(0x10000) == ["other_0x10000"]


def test_summary_burst_vs_sustained_flags_a_falling_clock(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([1980, 1950, 1800, 1755, 1740]))
    reader = reader_for("cuda")
    s = summarize([reader.read() for _ in range(5)])
    clock = s["sm_clock_hz"]
    assert clock["burst"] == 1980e6
    assert clock["sustained"] == 1755e6  # median of the second half
    assert clock["min"] == 1740e6
    assert s["clock_dropped"] is True
    assert "1.98 GHz at first, 1.74 GHz at lowest (-12%)" in s["notes"][0]


def test_summary_steady_clock_and_benign_reasons_are_not_flagged():
    readings = [{"sm_clock_hz": 1.98e9, "throttle_reasons": ["gpu_idle"]} for _ in range(4)]
    s = summarize(readings)
    assert s["clock_dropped"] is False and s["notes"] == [] and s["throttle_reasons"] == []
    s = summarize([{"sm_clock_hz": 1.98e9, "throttle_reasons": ["hw_thermal_slowdown"]}])
    assert s["clock_dropped"] is True and s["throttle_reasons"] == ["hw_thermal_slowdown"]


def _sysfs(tmp_path, khz: dict[int, str]):
    root = tmp_path / "cpu"
    for cpu, value in khz.items():
        d = root / f"cpu{cpu}" / "cpufreq"
        d.mkdir(parents=True)
        (d / "scaling_cur_freq").write_text(value + "\n")
    return root


def test_cpu_clock_from_a_fake_sysfs_tree(tmp_path):
    root = _sysfs(tmp_path, {0: "3500000", 1: "2500000", 2: "900000"})
    r = CpuFreqReader(sysfs=root, cpus=[0, 1]).read()  # cpu2 is outside the affinity
    assert r["cpu_clock_hz"] == pytest.approx(3.0e9)
    assert (r["cpu_clock_min_hz"], r["cpu_clock_max_hz"]) == (2.5e9, 3.5e9)
    assert CpuFreqReader(sysfs=root, cpus=[0]).source == "sysfs cpufreq"


def test_cpu_clock_falls_back_to_cpuinfo_and_says_so(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\ncpu MHz\t\t: 2445.428\nprocessor\t: 1\ncpu MHz\t\t: 2445.428\n"
    )
    reader = CpuFreqReader(sysfs=tmp_path / "none", cpuinfo=info, cpus=[0, 1])
    assert reader.source == "/proc/cpuinfo"
    assert reader.read()["cpu_clock_hz"] == pytest.approx(2445.428e6)
    reader = CpuFreqReader(sysfs=tmp_path / "none", cpuinfo=tmp_path / "missing", cpus=[0])
    assert not reader.readable


class ScriptedReader:
    """A reader whose clock falls case by case, like a GPU reaching its power limit."""

    source = "fake"

    def __init__(self, clocks_hz):
        self.clocks = iter(clocks_hz)
        self.t = 0.0

    def read(self):
        self.t += 1.0
        return {"t_s": self.t, "sm_clock_hz": next(self.clocks), "power_w": 600.0}


def test_bench_records_a_reading_per_case_and_flags_the_drop():
    report = suite.new_report("cpu", quick=True)
    report.telemetry_reader = ScriptedReader([2.0e9, 1.9e9, 1.7e9])
    suite.bench_matmul(
        report, dtypes=["fp32"], sizes=[64, 96, 128], budgets=suite.Budgets(1, 5, 1, 5, 5, 5)
    )
    rows = report.to_json()["matmul"]
    assert [r["telemetry"]["sm_clock_hz"] for r in rows] == [2.0e9, 1.9e9, 1.7e9]
    summary = report.to_json()["telemetry"]
    assert summary["source"] == "fake" and summary["clock_dropped"] is True
    assert summary["sm_clock_hz"]["burst"] == 2.0e9


def test_bench_says_when_telemetry_is_not_readable():
    report = suite.new_report("cpu", quick=True)
    report.telemetry_reader, report.telemetry_unavailable = None, "no clock here"
    assert report.to_json()["telemetry"] == {"source": None, "unavailable": "no clock here"}


@pytest.mark.gpu
def test_nvml_reads_this_gpu():
    pytest.importorskip("pynvml")
    r = reader_for("cuda").read()
    assert r["sm_clock_hz"] > 1e8 and 0 < r["temperature_c"] < 120
