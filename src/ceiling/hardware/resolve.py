"""Which device a command speaks of: the one rule every command follows, and the one
`Machine` it returns whatever the device came from.

1. `--spec NAME` (a catalog name, a driver name or a .toml file): that device's datasheet.
2. `--profile PATH`: the device measured in that profile (`ceiling bench` wrote it).
3. Neither: the saved machine profile (`$CEILING_PROFILE`, else the default path) when it
   exists. A command that runs work here (`--measure`, `profile`, `MfuMeter`) falls back to
   this machine instead (`this_machine`): the local GPU's datasheet, or the CPU's
   theoretical peak with a bandwidth the caller measured.
A trace names its own device (`from_trace`: its `deviceProperties`), and a driver's name
finds its datasheet (`by_driver_name`); nothing outside this module matches driver names.
`--spec` and `--profile` together are refused: one device per command, said the same way
everywhere. Among a profile's devices, the one of the kind the command runs on (`--device`,
default the GPU when the profile has one) is used. Every `Machine` carries `source`, saying
in words which of these it used.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ceiling.errors import CeilingError, InvalidInput, argument
from ceiling.hardware.catalog import DeviceSpec
from ceiling.hardware.profile import MeasuredDevice, default_profile_path, load_profile
from ceiling.text import shortened
from ceiling.vocabulary import normalize_dtype

BOTH_GIVEN = (
    f"give {argument('spec')} or {argument('machine_profile')}, not both: "
    f"{argument('spec')} is a datasheet, {argument('machine_profile')} a measurement"
)


@dataclass(frozen=True)
class Machine:
    """The device a command uses, and where each of its figures comes from.

    `spec` holds the figures work is placed under (a roofline, a plan): the datasheet's, or
    for a machine profile the measured ones. `datasheet` is the dense datasheet entry (for a
    CPU its theoretical peak), None when the device is not in the catalog. MFU is always
    measured against `datasheet_peak`; a measured rate is `measured_peak`, "achievable"."""

    spec: DeviceSpec
    source: str  # "datasheet spec h100-sxm", "measured profile PATH", ...
    profile_path: Path | None = None
    measured: MeasuredDevice | None = None  # the profile's record, when one was used
    datasheet: DeviceSpec | None = None

    @property
    def from_profile(self) -> bool:
        return self.measured is not None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def kind(self) -> str:
        return self.spec.kind

    def datasheet_peak(self, dtype: object) -> float | None:
        """The dense datasheet (theoretical, for a CPU) FLOP/s of `dtype`: MFU's peak."""
        key = normalize_dtype(dtype)
        recorded = self.measured.datasheet_peak_flops_per_s if self.measured else {}
        if recorded.get(key):
            return recorded[key]
        return self.datasheet.peak_flops_per_s.get(key) if self.datasheet else None

    def measured_peak(self, dtype: object) -> float | None:
        """The best FLOP/s a profile measured for `dtype` (achievable, not the peak)."""
        return self.measured.peak_flops_per_s.get(normalize_dtype(dtype)) if self.measured else None

    @property
    def datasheet_peaks(self) -> dict[str, float]:
        keys = {
            *(self.datasheet.peak_flops_per_s if self.datasheet else ()),
            *(self.measured.datasheet_peak_flops_per_s if self.measured else ()),
        }
        return {k: v for k in sorted(keys) if (v := self.datasheet_peak(k))}

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """The memory bandwidth work is placed under (measured for a profile)."""
        return self.spec.memory_bandwidth_bytes_per_s

    @property
    def datasheet_bandwidth_bytes_per_s(self) -> float | None:
        recorded = self.measured.datasheet_bandwidth_bytes_per_s if self.measured else None
        sheet = self.datasheet.memory_bandwidth_bytes_per_s if self.datasheet else None
        return recorded or sheet

    def matmul_efficiency(self, dtype: object) -> float | None:
        """Measured over datasheet FLOP/s of `dtype` (at most 1); None unless both exist."""
        rate, peak = self.measured_peak(dtype), self.datasheet_peak(dtype)
        return min(1.0, rate / peak) if rate and peak else None

    @property
    def memory_efficiency(self) -> float | None:
        """Measured over datasheet bandwidth (at most 1); None unless both exist."""
        rate = self.measured.bandwidth_bytes_per_s if self.measured else None
        sheet = self.datasheet_bandwidth_bytes_per_s
        return min(1.0, rate / sheet) if rate and sheet else None

    def record(self) -> dict:
        """The machine as JSON: each peak labelled datasheet or measured."""
        measured = dict(self.measured.peak_flops_per_s) if self.measured else {}
        sheet = self.datasheet_peaks
        return {
            "name": self.name,
            "kind": self.kind,
            "source": self.source,
            "peak_flops_per_s": {
                d: {"datasheet": sheet.get(d), "measured": measured.get(d)}
                for d in sorted({*sheet, *measured})
            },
            "bandwidth_bytes_per_s": {
                "datasheet": self.datasheet_bandwidth_bytes_per_s,
                "measured": self.measured.bandwidth_bytes_per_s if self.measured else None,
            },
        }


# what older callers called the resolved device
ResolvedDevice = Machine


def check_one_device(spec: str | None, profile: str | Path | None) -> None:
    # every caller's device comes through here, typed or not (a notebook's spec=5)
    if spec is not None and not isinstance(spec, str):
        raise InvalidInput(
            f"{argument('spec')} must be a device name or a .toml file, got {shortened(spec)}"
        )
    if profile is not None and not isinstance(profile, str | os.PathLike):
        raise InvalidInput(
            f"{argument('machine_profile')} must be the path of a machine profile, "
            f"got {shortened(profile)}"
        )
    if spec is not None and profile is not None:
        raise InvalidInput(BOTH_GIVEN)


def by_driver_name(name: str) -> DeviceSpec | None:
    """The catalog entry of a name as a driver reports it ('NVIDIA A100-SXM4-80GB'), or None."""
    from ceiling.hardware.catalog import match_driver_name

    return match_driver_name(name) if name else None


def _of_profile(path: Path, measured: MeasuredDevice) -> Machine:
    sheet = by_driver_name(measured.name) if measured.kind == "cuda" else None
    return Machine(measured.as_spec(), f"measured profile {path}", path, measured, sheet)


def resolve(
    spec: str | None = None, profile: str | Path | None = None, prefer: str = "cuda"
) -> Machine:
    """Apply the rule above; without a spec or a profile the error says how to get one."""
    check_one_device(spec, profile)
    if spec is not None:
        from ceiling.hardware.catalog import get_spec

        s = get_spec(spec)
        return Machine(s, f"datasheet spec {s.key}", datasheet=s)
    path = Path(profile) if profile is not None else default_profile_path()
    if profile is None and not path.exists():
        raise InvalidInput(
            f"no device given and no machine profile at {path}: run `ceiling bench --quick` "
            "to measure this machine, or pass --spec NAME (e.g. --spec h100-sxm)"
        )
    return _of_profile(path, load_profile(path).device(prefer))


def resolve_device(
    spec: str | None = None, profile: str | Path | None = None, prefer: str = "cuda"
) -> DeviceSpec:
    """The DeviceSpec of `resolve` (the rule above)."""
    return resolve(spec, profile, prefer).spec


def profile_gpu(profile: str | Path) -> Machine | None:
    """The profile's GPU as a Machine, when it has one the catalog knows (its links and node
    size are catalog data); None for a profile of CPUs only or of an unknown GPU."""
    path = Path(profile)
    gpus = [d for d in load_profile(path).devices if d.kind == "cuda"]
    machine = _of_profile(path, gpus[0]) if gpus else None
    return machine if machine is not None and machine.datasheet is not None else None


def from_trace(props: dict) -> tuple[Machine | None, str]:
    """The Machine a trace's `deviceProperties` entry names, and how it was found (None
    when the catalog has nothing that fits)."""
    from ceiling.hardware.identify import identify

    found = identify(props)
    if found is None:
        return None, ""
    source = f"trace deviceProperties, {found.how}"
    return Machine(found.spec, source, datasheet=found.spec), found.how


def this_machine(
    kind: str,
    profile: str | Path | None = None,
    *,
    gpu_name: str | None = None,
    read_bandwidth: Callable[[], float] | None = None,
) -> Machine:
    """This machine's `kind` ("cpu" or "cuda") device: the machine profile if any (given,
    else saved); else the GPU's datasheet by its driver name `gpu_name`; else the CPU's
    theoretical peak with the bandwidth `read_bandwidth()` measures (the caller measures:
    nothing here runs work)."""
    try:
        m = resolve(None, profile, prefer=kind)
        if (m.kind == "cpu") == (kind == "cpu"):
            source = f"measured machine profile ({profile or 'the default profile'})"
            return _with_cpu_theory(m, source) if kind == "cpu" else _renamed(m, source)
    except CeilingError:
        if profile is not None:
            raise
    if kind == "cuda":
        spec = by_driver_name(gpu_name or "")
        if spec is None:
            raise InvalidInput(
                f"{gpu_name} is not in the catalog and there is no machine profile: run "
                "`ceiling bench --quick` first"
            )
        return Machine(spec, f"datasheet ({spec.name}); no machine profile", datasheet=spec)
    from ceiling.hardware.cpu import detect_cpu

    if read_bandwidth is None:
        raise InvalidInput("no machine profile and no bandwidth measurement for this CPU")
    cpu = detect_cpu()
    source = (
        "no machine profile: theoretical peak of the detected CPU "
        f"({cpu.cores} cores) and a quick read-bandwidth measurement; "
        "`ceiling bench --quick` measures both properly"
    )
    spec = DeviceSpec(
        key="local",
        name=cpu.model,
        vendor="",
        kind="cpu",
        driver_names=(),
        peak_flops_per_s=dict(cpu.peak_flops_per_s),
        memory_bytes=cpu.memory_bytes,
        memory_bandwidth_bytes_per_s=read_bandwidth(),
        sources={"all": source},
    )
    return Machine(spec, source, datasheet=spec)


def _renamed(m: Machine, source: str) -> Machine:
    return dataclasses.replace(m, source=source)


def _with_cpu_theory(m: Machine, source: str) -> Machine:
    """A CPU profile's Machine with the detected CPU's theoretical peaks as its datasheet;
    dtypes the profile did not measure take that peak as their roof (an upper bound)."""
    from ceiling.hardware.cpu import detect_cpu

    theory = {d: v for d, v in detect_cpu().peak_flops_per_s.items() if v}
    sheet = (
        dataclasses.replace(m.spec, key="theoretical", peak_flops_per_s=theory) if theory else None
    )
    missing = {d: v for d, v in theory.items() if d not in m.spec.peak_flops_per_s}
    spec = m.spec
    if missing:
        spec = dataclasses.replace(spec, peak_flops_per_s={**missing, **spec.peak_flops_per_s})
        source += f"; theoretical peak for {', '.join(sorted(missing))} (not in the profile)"
    return dataclasses.replace(m, spec=spec, source=source, datasheet=sheet)
