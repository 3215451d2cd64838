"""What this machine's CPU is, and its theoretical peak FLOP/s per dtype.

Linux is read from /proc/cpuinfo and /sys/devices/system/cpu (what lscpu shows), macOS from
sysctl, anything else through psutil and platform with fewer details. Only the CPUs this
process may run on (its affinity mask, and a cgroup CPU quota) count as usable.

The peak is cores x clock x FLOPs/cycle/core (see simd.py for the per-ISA arithmetic). It is
an upper bound: all-core vector clocks are usually below the clock used here, and the
`assumptions` say which clock and which vector model were taken.
"""

from __future__ import annotations

import math
import os
import platform
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ceiling.hardware.simd import (
    ARM_PART_NAMES,
    PEAK_FEATURES,
    CpuIdentity,
    peak_flops_per_s,
    vector_model,
)

SYS_CPU = Path("/sys/devices/system/cpu")
SYS_CGROUP = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class CpuInfo:
    """The local CPU as ceiling sees it. Sizes in bytes, clocks in Hz, rates in FLOP/s."""

    model: str
    vendor: str
    arch: str
    cores: int  # usable physical cores: SMT siblings share the vector units
    threads: int  # usable logical CPUs
    caches: dict[str, int]  # "l1d", "l1i", "l2", "l3": bytes of one instance
    llc_bytes: int | None  # last-level cache, one instance (what one core can fill)
    freq_hz: float | None  # the clock the peak uses
    freq_source: str  # which clock that is and where it was read
    clocks_hz: dict[str, float]  # every clock that could be read: max, base, current
    features: tuple[str, ...]  # the flags that matter for the peak
    isa: str
    flops_per_cycle_per_core: dict[str, float]
    peak_flops_per_s: dict[str, float]
    native: dict[str, bool]
    assumptions: tuple[str, ...]
    memory_bytes: float
    notes: tuple[str, ...] = field(default=())


# ------------------------------------------------------------------ parsing helpers


def parse_cpuinfo(text: str) -> list[dict[str, str]]:
    """/proc/cpuinfo as one dict per processor block (the keys as the kernel writes them)."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            current[key.strip()] = value.strip()
    if current:
        blocks.append(current)
    return blocks


def parse_cache_size(text: str) -> int | None:
    """'32K' -> 32768, '1024 KB' -> 1048576, '32M' -> 33554432 (sysfs sizes are binary)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, re.IGNORECASE)
    if not m:
        return None
    scale = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2).upper()]
    return int(m.group(1)) * scale


def _int(text: str | None, base: int = 10) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip(), base if not text.strip().lower().startswith("0x") else 16)
    except ValueError:
        return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def identity_from_cpuinfo(blocks: list[dict[str, str]], arch: str) -> tuple[CpuIdentity, str]:
    """The vector-relevant identity and a model name from parsed /proc/cpuinfo."""
    first = blocks[0] if blocks else {}
    flags = frozenset((first.get("flags") or first.get("Features") or "").split())
    vendor = first.get("vendor_id", "")
    part = _int(first.get("CPU part"), 16)
    if first.get("CPU implementer") and not vendor:
        vendor = {"0x41": "ARM", "0x61": "Apple", "0xc0": "Ampere"}.get(
            first["CPU implementer"].lower(), "ARM"
        )
    model_name = first.get("model name") or first.get("Model Name") or first.get("cpu model")
    if not model_name and part is not None:
        model_name = ARM_PART_NAMES.get(part, f"{vendor} CPU part {part:#x}")
    identity = CpuIdentity(
        arch=arch,
        vendor=vendor,
        family=_int(first.get("cpu family")),
        model=_int(first.get("model")),
        arm_part=part,
        flags=flags,
    )
    return identity, model_name or platform.processor() or "unknown CPU"


# ------------------------------------------------------------------ Linux sysfs


def _core_key(cpu: int, cpu_dir: Path, blocks: list[dict[str, str]]) -> tuple:
    topo = cpu_dir / f"cpu{cpu}" / "topology"
    pkg, core = _read(topo / "physical_package_id"), _read(topo / "core_id")
    if pkg is not None and core is not None:
        return (pkg, core)
    for b in blocks:
        if _int(b.get("processor")) == cpu and "core id" in b:
            return (b.get("physical id", "0"), b["core id"])
    return ("cpu", cpu)  # no topology: count each logical CPU as a core


def linux_caches(cpu_dir: Path, cpu: int) -> dict[str, int]:
    caches: dict[str, int] = {}
    for index in sorted((cpu_dir / f"cpu{cpu}" / "cache").glob("index*")):
        level, kind = _read(index / "level"), _read(index / "type")
        size = parse_cache_size(_read(index / "size") or "")
        if level is None or size is None:
            continue
        name = f"l{level}" + {"Data": "d", "Instruction": "i"}.get(kind or "", "")
        caches[name] = size
    return caches


def _cgroup_cpu_quota(cgroup_dir: Path) -> float | None:
    """CPUs' worth of time a cgroup v2 'cpu.max' allows, or None when unlimited."""
    text = _read(cgroup_dir / "cpu.max")
    if not text:
        return None
    quota, _, period = text.partition(" ")
    if quota == "max":
        return None
    try:
        return float(quota) / float(period or 100000)
    except ValueError:
        return None


def linux_clocks(cpu_dir: Path, cpu: int, model_name: str, blocks) -> dict[str, tuple[float, str]]:
    """Every clock we can read, as {kind: (Hz, where)}; kinds: max, base, current."""
    clocks: dict[str, tuple[float, str]] = {}
    freq = cpu_dir / f"cpu{cpu}" / "cpufreq"
    khz = _int(_read(freq / "cpuinfo_max_freq"))
    if khz:
        clocks["max"] = (khz * 1e3, "cpufreq cpuinfo_max_freq")
    khz = _int(_read(freq / "base_frequency"))
    if khz:
        clocks["base"] = (khz * 1e3, "cpufreq base_frequency")
    m = re.search(r"@\s*([\d.]+)\s*GHz", model_name)
    if m and "base" not in clocks:
        clocks["base"] = (float(m.group(1)) * 1e9, "the model name")
    mhz = blocks[0].get("cpu MHz") if blocks else None
    if mhz and re.fullmatch(r"[\d.]+", mhz):
        clocks["current"] = (float(mhz) * 1e6, "/proc/cpuinfo 'cpu MHz'")
    return clocks


def _psutil_clocks(clocks: dict[str, tuple[float, str]]) -> None:
    try:
        import psutil

        f = psutil.cpu_freq()
    except Exception:  # psutil raises various errors on odd platforms
        return
    if f is None:
        return
    if f.max and "max" not in clocks:
        clocks["max"] = (f.max * 1e6, "psutil.cpu_freq().max")
    if f.current and "current" not in clocks:
        clocks["current"] = (f.current * 1e6, "psutil.cpu_freq().current")


def _choose_clock(clocks: dict[str, tuple[float, str]]) -> tuple[float | None, str]:
    """The highest documented clock: max (turbo) if readable, else base, else current."""
    if "max" in clocks:
        hz, where = clocks["max"]
        return hz, f"max clock ({where}); all-core vector clocks are usually lower"
    if "base" in clocks:
        hz, where = clocks["base"]
        return hz, f"base clock ({where}); turbo may run higher"
    if "current" in clocks:
        hz, where = clocks["current"]
        return hz, (
            f"clock reported by {where} (no max or base clock readable; under a hypervisor "
            "this is usually the host's nominal clock)"
        )
    return None, "no clock readable: no peak can be computed"


def _memory_bytes() -> float:
    try:
        import psutil

        return float(psutil.virtual_memory().total)
    except Exception:
        pass
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0.0


def _usable_cpus() -> set[int]:
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


# ------------------------------------------------------------------ assembling


def _assemble(
    *,
    identity: CpuIdentity,
    model_name: str,
    cores: int,
    threads: int,
    caches: dict[str, int],
    clocks: dict[str, tuple[float, str]],
    memory_bytes: float,
    notes: list[str],
) -> CpuInfo:
    vm = vector_model(identity)
    freq_hz, freq_source = _choose_clock(clocks)
    peaks = peak_flops_per_s(cores, freq_hz, vm.flops_per_cycle) if freq_hz else {}
    if "hypervisor" in identity.flags:
        notes.append("running in a virtual machine: cores, caches and clocks are as the VM shows")
    levels = sorted((k for k in caches if k[1:].isdigit()), key=lambda k: int(k[1:]))
    llc = caches[levels[-1]] if levels else None
    return CpuInfo(
        model=model_name,
        vendor=identity.vendor,
        arch=identity.arch,
        cores=cores,
        threads=threads,
        caches=caches,
        llc_bytes=llc,
        freq_hz=freq_hz,
        freq_source=freq_source,
        clocks_hz={k: v[0] for k, v in clocks.items()},
        features=tuple(f for f in PEAK_FEATURES if f in identity.flags),
        isa=vm.isa,
        flops_per_cycle_per_core=dict(vm.flops_per_cycle),
        peak_flops_per_s=peaks,
        native=dict(vm.native),
        assumptions=(
            f"peak = {cores} cores x {freq_hz / 1e9:.3g} GHz x FLOPs/cycle/core "
            "(a multiply-add counts 2 FLOPs)"
            if freq_hz
            else "peak unknown: no clock readable",
            *vm.assumptions,
        ),
        memory_bytes=memory_bytes,
        notes=tuple(notes),
    )


def detect_linux(
    cpuinfo_text: str,
    cpu_dir: Path = SYS_CPU,
    usable_cpus: set[int] | None = None,
    arch: str | None = None,
    memory_bytes: float | None = None,
    cgroup_dir: Path = SYS_CGROUP,
    use_psutil: bool = True,
) -> CpuInfo:
    """Build CpuInfo from cpuinfo text and a sysfs cpu directory (real or a test fixture)."""
    blocks = parse_cpuinfo(cpuinfo_text)
    identity, model_name = identity_from_cpuinfo(blocks, arch or platform.machine())
    cpus = sorted(usable_cpus if usable_cpus is not None else _usable_cpus())
    if not cpus:
        cpus = [0]
    cores = len({_core_key(c, cpu_dir, blocks) for c in cpus})
    notes: list[str] = []
    quota = _cgroup_cpu_quota(cgroup_dir)
    if quota is not None and quota < cores:
        notes.append(f"cgroup CPU quota allows {quota:g} CPUs' worth of time; peak uses that")
        cores = max(1, math.ceil(quota))
    caches = linux_caches(cpu_dir, cpus[0])
    clocks = linux_clocks(cpu_dir, cpus[0], model_name, blocks)
    if use_psutil:
        _psutil_clocks(clocks)
    return _assemble(
        identity=identity,
        model_name=model_name,
        cores=cores,
        threads=len(cpus),
        caches=caches,
        clocks=clocks,
        memory_bytes=_memory_bytes() if memory_bytes is None else memory_bytes,
        notes=notes,
    )


def _sysctl(names: list[str]) -> dict[str, str]:
    try:
        out = subprocess.run(
            ["sysctl", *names], capture_output=True, text=True, timeout=5, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    values = {}
    for line in out.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            values[key.strip()] = value.strip()
    return values


def _detect_macos() -> CpuInfo:
    s = _sysctl(
        [
            "machdep.cpu.brand_string",
            "machdep.cpu.features",
            "machdep.cpu.leaf7_features",
            "hw.physicalcpu",
            "hw.logicalcpu",
            "hw.memsize",
            "hw.l1dcachesize",
            "hw.l2cachesize",
            "hw.l3cachesize",
            "hw.cpufrequency_max",
            "hw.optional.arm.FEAT_BF16",
            "hw.optional.arm.FEAT_FP16",
            "hw.optional.arm.FEAT_DotProd",
            "hw.optional.arm.FEAT_I8MM",
        ]
    )
    arch = platform.machine()
    flags = {
        f.lower().replace(".", "_")
        for f in (s.get("machdep.cpu.features", "") + " " + s.get("machdep.cpu.leaf7_features", ""))
        .replace("AVX1.0", "AVX")
        .split()
    }
    if arch == "arm64":
        arm = {"bf16": "FEAT_BF16", "asimdhp": "FEAT_FP16", "asimddp": "FEAT_DotProd"}
        arm["i8mm"] = "FEAT_I8MM"
        flags |= {f for f, k in arm.items() if s.get(f"hw.optional.arm.{k}") == "1"}
        flags.add("asimd")
    vendor = "Apple" if arch == "arm64" else "GenuineIntel"
    caches = {
        name: int(s[key])
        for name, key in (("l1d", "hw.l1dcachesize"), ("l2", "hw.l2cachesize"))
        if _int(s.get(key))
    }
    if _int(s.get("hw.l3cachesize")):
        caches["l3"] = int(s["hw.l3cachesize"])
    clocks = {}
    if _int(s.get("hw.cpufrequency_max")):
        clocks["max"] = (float(s["hw.cpufrequency_max"]), "sysctl hw.cpufrequency_max")
    _psutil_clocks(clocks)
    threads = _int(s.get("hw.logicalcpu")) or os.cpu_count() or 1
    return _assemble(
        identity=CpuIdentity(arch=arch, vendor=vendor, flags=frozenset(flags)),
        model_name=s.get("machdep.cpu.brand_string") or platform.processor() or "unknown CPU",
        cores=_int(s.get("hw.physicalcpu")) or threads,
        threads=threads,
        caches=caches,
        clocks=clocks,
        memory_bytes=float(_int(s.get("hw.memsize")) or _memory_bytes()),
        notes=["macOS: the whole machine's CPUs are counted (no affinity mask)"],
    )


def _detect_other() -> CpuInfo:
    try:
        import psutil

        cores = psutil.cpu_count(logical=False) or os.cpu_count() or 1
    except Exception:
        cores = os.cpu_count() or 1
    clocks: dict[str, tuple[float, str]] = {}
    _psutil_clocks(clocks)
    return _assemble(
        identity=CpuIdentity(arch=platform.machine() or "unknown"),
        model_name=platform.processor() or "unknown CPU",
        cores=cores,
        threads=os.cpu_count() or cores,
        caches={},
        clocks=clocks,
        memory_bytes=_memory_bytes(),
        notes=[f"{platform.system()}: instruction-set flags not readable; SSE2 assumed"],
    )


def detect_cpu() -> CpuInfo:
    """The local CPU; never raises for a missing file, it reports less instead."""
    system = platform.system()
    if system == "Linux":
        text = _read(Path("/proc/cpuinfo"))
        if text:
            return detect_linux(text)
    if system == "Darwin":
        return _detect_macos()
    return _detect_other()
