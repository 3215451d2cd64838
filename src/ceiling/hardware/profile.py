"""The machine profile: measured ceilings saved by `ceiling bench`, usable as a device spec.

A profile is a JSON file with a `method_version` (the timing method that produced it), the
environment it was measured in, and one record per device. Measured figures sit beside the
datasheet figures they should be compared with.
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ceiling.errors import InvalidInput, MalformedFile
from ceiling.files import name_is_usable, read_json
from ceiling.records import write_json_atomic

PROFILE_ENV = "CEILING_PROFILE"

# The way `ceiling bench` measures; bumped whenever it changes, so old results stay
# comparable. 2: at least two warm-up calls, the first not counted in the per-call estimate.
METHOD_VERSION = 2


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
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "ceiling" / f"profile-{socket.gethostname()}.json"


def load_profile(path: str | Path | None = None) -> MachineProfile:
    p = Path(path) if path is not None else default_profile_path()
    if name_is_usable(p) and not p.exists():
        raise InvalidInput(f"no machine profile at {p}; run `ceiling bench --quick` to measure one")
    data = read_json(p, "machine profile")
    if not isinstance(data, dict):
        raise MalformedFile(f"{p} is not a ceiling machine profile (not a JSON object)")
    return MachineProfile.from_json(data, where=str(p))


def save_profile(profile: MachineProfile, path: str | Path | None = None) -> Path:
    """Save atomically to `path` (default: default_profile_path()); returns the path."""
    return write_json_atomic(
        profile.to_json(), path if path is not None else default_profile_path()
    )
