"""Clocks, power, temperature and throttle reasons beside each measurement, where readable.

Two runs of one GPU disagree most often because they ran at different clocks: a power or
thermal limit, a hot neighbour, an application clock someone set. A benchmark takes one
reading after each measured case and keeps it in the case's record; `summarize` sets the
first reading of a run (burst) against the later ones (sustained) and flags a clock that
fell during the run.

Sources, all optional and imported only when asked: NVIDIA GPUs through NVML (the
`pynvml` module of `nvidia-ml-py`, `pip install 'ceiling-perf[gpu]'`), AMD GPUs through
`amdsmi` (ships with ROCm), CPU clocks from Linux sysfs (cpufreq's scaling_cur_freq) or, where a VM
hides cpufreq, the "cpu MHz" lines of /proc/cpuinfo. Without any, readings are empty and
records say telemetry was not readable. Units: Hz, W, °C.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

# NVML's clock-event (throttle) reason bits, nvml.h `nvmlClocksEventReason*`.
THROTTLE_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# Reasons that do not mean a limit held the clock back under load.
BENIGN_REASONS = frozenset(
    {"gpu_idle", "applications_clocks_setting", "sync_boost", "display_clock_setting"}
)
# A clock this far below the run's first reading counts as a drop.
CLOCK_DROP_FRACTION = 0.05
SUMMARY_KEYS = ("sm_clock_hz", "memory_clock_hz", "cpu_clock_hz", "power_w", "temperature_c")
_MHZ = 1e6

Reading = dict[str, Any]


def throttle_reasons(mask: int) -> list[str]:
    """Names of the bits set in an NVML clock-event mask (unknown bits by number)."""
    names = [name for bit, name in THROTTLE_BITS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_BITS)
    if unknown:
        names.append(f"other_0x{unknown:x}")
    return names


def _field(out: Reading, key: str, read: Callable[[], Any]) -> None:
    """One optional field: a driver that does not support it leaves it out."""
    try:
        value = read()
    except Exception:  # NVMLError_NotSupported and kin: the field is simply not readable
        return
    if value is not None:
        out[key] = value


class NvmlReader:
    """One NVIDIA GPU through NVML; `nvml` is the pynvml module (a fake one in tests)."""

    source = "nvml"

    def __init__(self, nvml, index: int):
        self.nvml = nvml
        nvml.nvmlInit()
        self.handle = nvml.nvmlDeviceGetHandleByIndex(index)
        self.index = index

    def read(self) -> Reading:
        n, h = self.nvml, self.handle
        out: Reading = {"t_s": time.monotonic()}
        _field(out, "sm_clock_hz", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM) * _MHZ)
        _field(out, "memory_clock_hz", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM) * _MHZ)
        _field(
            out,
            "max_sm_clock_hz",
            lambda: n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM) * _MHZ,
        )
        _field(out, "power_w", lambda: n.nvmlDeviceGetPowerUsage(h) / 1e3)
        _field(out, "power_limit_w", lambda: n.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3)
        _field(
            out,
            "temperature_c",
            lambda: float(n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
        )
        mask_fn = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            n, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        if mask_fn is not None:
            _field(out, "throttle_reasons", lambda: throttle_reasons(int(mask_fn(h))))
        return out


class AmdSmiReader:
    """One AMD GPU through amdsmi (ROCm); fields it cannot read are left out."""

    source = "amdsmi"

    def __init__(self, amdsmi, index: int):
        self.amdsmi = amdsmi
        amdsmi.amdsmi_init()
        self.handle = amdsmi.amdsmi_get_processor_handles()[index]

    def read(self) -> Reading:
        a, h = self.amdsmi, self.handle
        out: Reading = {"t_s": time.monotonic()}
        _field(
            out,
            "sm_clock_hz",
            lambda: a.amdsmi_get_clock_info(h, a.AmdSmiClkType.GFX)["clk"] * _MHZ,
        )
        _field(
            out,
            "memory_clock_hz",
            lambda: a.amdsmi_get_clock_info(h, a.AmdSmiClkType.MEM)["clk"] * _MHZ,
        )

        def power() -> float | None:
            info = a.amdsmi_get_power_info(h)
            value = info.get("current_socket_power", info.get("average_socket_power"))
            return float(value) if isinstance(value, int | float) else None

        _field(out, "power_w", power)
        _field(
            out,
            "temperature_c",
            lambda: float(
                a.amdsmi_get_temp_metric(
                    h, a.AmdSmiTemperatureType.HOTSPOT, a.AmdSmiTemperatureMetric.CURRENT
                )
            ),
        )
        return out


class CpuFreqReader:
    """Current clock of the CPUs this process may run on: sysfs cpufreq, else /proc/cpuinfo."""

    def __init__(
        self,
        sysfs: Path = Path("/sys/devices/system/cpu"),
        cpuinfo: Path = Path("/proc/cpuinfo"),
        cpus: Iterable[int] | None = None,
    ):
        if cpus is None:
            cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(1)
        self.files = [sysfs / f"cpu{c}" / "cpufreq" / "scaling_cur_freq" for c in sorted(cpus)]
        self.files = [f for f in self.files if f.is_file()]
        self.cpuinfo = cpuinfo
        self.source = "sysfs cpufreq" if self.files else "/proc/cpuinfo"

    def _clocks_hz(self) -> list[float]:
        if self.files:
            out = []
            for f in self.files:
                try:
                    out.append(float(f.read_text().strip()) * 1e3)  # kHz
                except (OSError, ValueError):
                    continue
            return out
        try:
            text = self.cpuinfo.read_text()
        except OSError:
            return []
        return [float(m) * _MHZ for m in re.findall(r"^cpu MHz\s*:\s*([\d.]+)", text, re.M)]

    def read(self) -> Reading:
        out: Reading = {"t_s": time.monotonic()}
        clocks = [c for c in self._clocks_hz() if c > 0]
        if clocks:
            out["cpu_clock_hz"] = statistics.fmean(clocks)
            out["cpu_clock_min_hz"] = min(clocks)
            out["cpu_clock_max_hz"] = max(clocks)
        return out

    @property
    def readable(self) -> bool:
        return "cpu_clock_hz" in self.read()


def _import(name: str):
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _gpu_index(device: str) -> int:
    index = int(device.split(":")[1]) if ":" in device else 0
    # NVML numbers every GPU of the machine; CUDA only the visible ones, in the listed order.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    if visible and all(v.strip().isdigit() for v in visible) and index < len(visible):
        return int(visible[index])
    return index


def reader_for(device: str, *, rocm: bool = False):
    """A reader for a 'cpu' / 'cuda' / 'cuda:N' device, or None when nothing is readable."""
    if not device.startswith("cuda"):
        reader = CpuFreqReader()
        return reader if reader.readable else None
    index = _gpu_index(device)
    module = _import("amdsmi" if rocm else "pynvml")
    if module is None:
        return None
    try:
        return AmdSmiReader(module, index) if rocm else NvmlReader(module, index)
    except Exception:  # no driver, no permission: telemetry is informative, never fatal
        return None


def unavailable_reason(device: str, *, rocm: bool = False) -> str:
    """Why there are no readings, in words a user can act on."""
    if not device.startswith("cuda"):
        return "no CPU clock readable (no cpufreq in sysfs, no 'cpu MHz' in /proc/cpuinfo)"
    if rocm:
        return "amdsmi is not importable or found no GPU (it ships with ROCm)"
    return (
        "NVML is not available: pip install 'ceiling-perf[gpu]' (nvidia-ml-py) for clocks and power"
    )


def summarize(readings: list[Reading], drop_fraction: float = CLOCK_DROP_FRACTION) -> Reading:
    """Burst (the run's first reading) against sustained (the median of its second half)
    per quantity, the throttle reasons seen under load, and notes when a clock fell."""
    out: Reading = {"readings": len(readings)}
    for key in SUMMARY_KEYS:
        values = [r[key] for r in readings if r.get(key) is not None]
        if not values:
            continue
        out[key] = {
            "burst": values[0],
            "sustained": statistics.median(values[len(values) // 2 :]),
            "min": min(values),
            "max": max(values),
        }
    seen = {x for r in readings for x in r.get("throttle_reasons", ())}
    limits = sorted(seen - BENIGN_REASONS)
    notes = []
    for key, label in (("sm_clock_hz", "GPU SM"), ("cpu_clock_hz", "CPU")):
        c = out.get(key)
        if c and c["burst"] > 0 and c["min"] < (1 - drop_fraction) * c["burst"]:
            notes.append(
                f"{label} clock fell during the run: {c['burst'] / 1e9:.2f} GHz at first, "
                f"{c['min'] / 1e9:.2f} GHz at lowest ({c['min'] / c['burst'] - 1:+.0%}); "
                "later figures ran slower than earlier ones"
            )
    if limits:
        notes.append(f"clocks held back by: {', '.join(limits)}")
    out["throttle_reasons"] = limits
    out["clock_dropped"] = bool(notes)
    out["notes"] = notes
    return out
