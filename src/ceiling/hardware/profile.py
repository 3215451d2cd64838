"""The machine profile: measured ceilings saved by `ceiling bench`, usable as a device spec.

A profile is a JSON file with a `method_version` (the timing method that produced it), the
environment it was measured in, and one record per device. Measured figures sit beside the
datasheet figures they should be compared with.
"""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ceiling.errors import CeilingWarning, InvalidInput, MalformedFile
from ceiling.files import name_is_usable, read_json
from ceiling.records import write_json_atomic

PROFILE_ENV = "CEILING_PROFILE"

# The way `ceiling bench` measures; bumped whenever it changes, so old results stay
# comparable. 2: at least two warm-up calls, the first not counted in the per-call estimate.
# 3: torch's CPU matmul and numpy's BLAS in alternating rounds; the machine's load recorded.
METHOD_VERSION = 3


@dataclass(frozen=True)
class MeasuredDevice:
    """Measured ceilings of one device: best FLOP/s per dtype (dense) and bandwidth (bytes/s)."""

    name: str
    kind: str  # "cpu" | "cuda"
    peak_flops_per_s: dict[str, float]
    bandwidth_bytes_per_s: float | None
    datasheet_peak_flops_per_s: dict[str, float] = field(default_factory=dict)
    datasheet_bandwidth_bytes_per_s: float | None = None
    memory_bytes: float | None = None
    l2_bytes: float | None = None
    sms: int | None = None
    vendor: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in ("cpu", "cuda"):
            raise InvalidInput(f"device kind must be 'cpu' or 'cuda', got {self.kind!r}")
        for dtype, rate in self.peak_flops_per_s.items():
            if not rate > 0:
                raise InvalidInput(f"measured {dtype} FLOP/s must be > 0, got {rate}")
        if self.bandwidth_bytes_per_s is not None and not self.bandwidth_bytes_per_s > 0:
            raise InvalidInput(f"measured bandwidth must be > 0, got {self.bandwidth_bytes_per_s}")

    def as_spec(self):
        """This device as a catalog DeviceSpec whose peaks and bandwidth are the measured ones."""
        from ceiling.errors import UnsupportedOnDevice
        from ceiling.hardware.catalog import DeviceSpec

        if not self.peak_flops_per_s:
            raise UnsupportedOnDevice(
                f"the profile of {self.name} has no matmul measurement; run `ceiling bench --quick`"
            )
        if self.bandwidth_bytes_per_s is None:
            raise UnsupportedOnDevice(
                f"the profile of {self.name} has no bandwidth measurement; "
                "run `ceiling bench --quick`"
            )
        slug = "".join(c if c.isalnum() else "-" for c in self.name.lower()).strip("-")
        return DeviceSpec(
            key=f"measured-{slug}",
            name=f"{self.name} (measured)",
            vendor=self.vendor,
            kind="gpu" if self.kind == "cuda" else "cpu",
            driver_names=(self.name,),
            peak_flops_per_s=dict(self.peak_flops_per_s),
            memory_bytes=float(self.memory_bytes or 0.0),
            memory_bandwidth_bytes_per_s=float(self.bandwidth_bytes_per_s),
            link_bandwidth_bytes_per_s=None,
            l2_bytes=self.l2_bytes,
            sms=self.sms,
            sources={"all": "measured by `ceiling bench` on this machine"},
        )


@dataclass(frozen=True)
class MachineProfile:
    method_version: int
    created: str  # ISO 8601, UTC
    host: str
    environment: dict[str, Any]
    devices: list[MeasuredDevice]

    def device(self, kind: str | None = None) -> MeasuredDevice:
        """The first device of `kind` ("cpu"/"cuda"), or the first device at all."""
        for d in self.devices:
            if kind is None or d.kind == kind:
                return d
        if not self.devices:
            raise MalformedFile("the profile lists no devices")
        return self.devices[0]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "profile") -> MachineProfile:
        """Read a profile; fields a newer ceiling added to a device record are ignored."""
        known = {f.name for f in fields(MeasuredDevice)}
        version = data.get("method_version")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise MalformedFile(
                f"{where} is not a ceiling machine profile: method_version must be a whole "
                f"number from 1 to {METHOD_VERSION}, got {version!r}"
            )
        if version > METHOD_VERSION:
            # a method this build does not know may measure differently: its numbers are
            # not comparable with this build's, so they are not used
            raise MalformedFile(
                f"{where} was measured by method {version}; this ceiling knows methods up to "
                f"{METHOD_VERSION}: update ceiling, or measure again with `ceiling bench --quick`"
            )
        try:
            devices = [
                MeasuredDevice(**{k: v for k, v in d.items() if k in known})
                for d in data["devices"]
            ]
            return cls(
                method_version=int(data["method_version"]),
                created=str(data["created"]),
                host=str(data["host"]),
                environment=dict(data.get("environment", {})),
                devices=devices,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise MalformedFile(
                f"{where} is not a ceiling machine profile ({type(exc).__name__}: {exc})"
            ) from None


def default_profile_path() -> Path:
    """$CEILING_PROFILE, else $XDG_CACHE_HOME (or ~/.cache)/ceiling/profile-<host>.json."""
    env = os.environ.get(PROFILE_ENV)
    if env:
        return Path(env).expanduser()
    from ceiling.records import cache_folder

    return cache_folder() / f"profile-{socket.gethostname()}.json"


def load_profile(path: str | Path | None = None) -> MachineProfile:
    """The profile at `path` (default: the saved one). The saved default profile is taken to
    describe this process, so it is checked against it (`stale_reasons`) and a mismatch is
    warned of once; a profile named explicitly may be another machine's on purpose."""
    p = Path(path) if path is not None else default_profile_path()
    if name_is_usable(p) and not p.exists():
        raise InvalidInput(f"no machine profile at {p}; run `ceiling bench --quick` to measure one")
    data = read_json(p, "machine profile")
    if not isinstance(data, dict):
        raise MalformedFile(f"{p} is not a ceiling machine profile (not a JSON object)")
    profile = MachineProfile.from_json(data, where=str(p))
    if p == default_profile_path():
        _warn_if_stale(profile, p)
    return profile


# A measurement that recorded no load window (older profiles) is busy when the 1-minute load
# average passed this share of the logical CPUs as it started.
BUSY_LOAD_SHARE = 0.75


def busy_reasons(environment: dict[str, Any]) -> list[str]:
    """Why the environment a measurement recorded says other work shared the machine: its
    load window (`hardware.load`), else the load average it started at."""
    from ceiling.hardware.load import record_busy

    if isinstance(environment.get("load"), dict):
        return record_busy(environment["load"])
    load, cpus = environment.get("load_average_1min"), environment.get("cpu_count")
    if not isinstance(load, int | float) or not isinstance(cpus, int) or cpus < 1:
        return []
    if load > BUSY_LOAD_SHARE * cpus:
        return [f"the load average was {load:.1f} on {cpus} logical CPUs"]
    return []


def measured_busy(environment: dict[str, Any]) -> bool:
    """Whether the environment a measurement recorded says other work shared the machine."""
    return bool(busy_reasons(environment))


def stale_reasons(device: MeasuredDevice, here: dict[str, Any]) -> list[str]:
    """Why `device`'s record may not describe the process whose facts are `here` (keys
    `device_name`, `torch`, `threads`), from the environment the measurement recorded; a
    fact missing on either side is not compared."""
    env = (device.extra or {}).get("environment") or {}
    reasons = []
    name, then = here.get("device_name"), env.get("device_name")
    if name and then and name != then:
        reasons.append(f"it measured {then}, not this {name}")
    for key, what in (("torch", "torch"), ("threads", "threads")):
        then, now = env.get(key), here.get(key)
        if then is not None and now is not None and then != now:
            reasons.append(f"{what} {then} then, {now} now")
    busy = busy_reasons(env)
    if busy:
        reasons.append(
            f"it was measured on a busy machine ({'; '.join(busy)}), so its ceilings read low"
        )
    return reasons


def this_process(kind: str) -> dict[str, Any]:
    """The facts of this process a profile is checked against, read without importing torch
    (the threads and a GPU's name only when torch is already loaded)."""
    import sys
    from importlib import metadata

    here: dict[str, Any] = {}
    with contextlib.suppress(metadata.PackageNotFoundError):
        here["torch"] = metadata.version("torch")
    torch = sys.modules.get("torch")
    if torch is not None:
        here["threads"] = torch.get_num_threads()
    if kind == "cpu":
        from ceiling.hardware.cpu import detect_cpu

        here["device_name"] = getattr(detect_cpu(), "model", None)
    elif torch is not None and torch.cuda.is_available():
        here["device_name"] = torch.cuda.get_device_name()
    return here


# (path, its modification time, device kind) already checked: the check reads the CPU's
# description, so a command that loads the default profile many times pays it once
_WARNED: set[tuple[str, int, str]] = set()


def _warn_if_stale(profile: MachineProfile, path: Path) -> None:
    import warnings

    try:
        written = path.stat().st_mtime_ns
    except OSError:
        return
    for device in profile.devices:
        key = (str(path), written, device.kind)
        if key in _WARNED:
            continue
        _WARNED.add(key)
        reasons = stale_reasons(device, this_process(device.kind))
        if reasons:
            warnings.warn(
                f"the saved profile {path} may not describe this machine's {device.kind}: "
                f"{'; '.join(reasons)}; `ceiling bench --quick` measures it again",
                CeilingWarning,
                stacklevel=3,
            )


def save_profile(profile: MachineProfile, path: str | Path | None = None) -> Path:
    """Save atomically to `path` (default: default_profile_path()); returns the path."""
    return write_json_atomic(
        profile.to_json(), path if path is not None else default_profile_path()
    )
