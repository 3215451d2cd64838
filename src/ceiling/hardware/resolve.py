"""Which device a command speaks of: the one rule every command follows.

1. `--spec NAME` (a catalog name, a driver name or a .toml file): that device's datasheet.
2. `--profile PATH`: the device measured in that profile (`ceiling bench` wrote it).
3. Neither: the saved machine profile (`$CEILING_PROFILE`, else the default path) when it
   exists; a command that runs work here (`--measure`, `profile`) falls back to this
   machine's datasheet or theoretical figures instead (measure/decode.local_ceiling).
`--spec` and `--profile` together are refused: one device per command, said the same way
everywhere. Among a profile's devices, the one of the kind the command runs on (`--device`,
default the GPU when the profile has one) is used. Every result carries `source`, saying
which of these it used.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ceiling.errors import InvalidInput, argument
from ceiling.hardware.profile import MeasuredDevice, default_profile_path, load_profile
from ceiling.text import shortened

BOTH_GIVEN = "give --spec or --profile, not both: --spec is a datasheet, --profile a measurement"


@dataclass(frozen=True)
class ResolvedDevice:
    """The device a command uses and where its figures come from."""

    spec: object  # a catalog DeviceSpec (for a profile: its measured peaks and bandwidth)
    source: str  # "datasheet spec h100-sxm" or "measured profile PATH"
    profile_path: Path | None = None
    measured: MeasuredDevice | None = None  # the profile's record, when one was used

    @property
    def from_profile(self) -> bool:
        return self.measured is not None


def check_one_device(spec: str | None, profile: str | Path | None) -> None:
    # every caller's device comes through here, typed or not (a notebook's spec=5)
    if spec is not None and not isinstance(spec, str):
        raise InvalidInput(
            f"{argument('spec')} must be a device name or a .toml file, got {shortened(spec)}"
        )
    if profile is not None and not isinstance(profile, str | os.PathLike):
        raise InvalidInput(
            f"{argument('profile')} must be the path of a machine profile, got {shortened(profile)}"
        )
    if spec is not None and profile is not None:
        raise InvalidInput(BOTH_GIVEN)


def resolve(
    spec: str | None = None, profile: str | Path | None = None, prefer: str = "cuda"
) -> ResolvedDevice:
    """Apply the rule above; without a spec or a profile the error says how to get one."""
    check_one_device(spec, profile)
    if spec is not None:
        from ceiling.hardware.catalog import get_spec

        s = get_spec(spec)
        return ResolvedDevice(s, f"datasheet spec {s.key}")
    path = Path(profile) if profile is not None else default_profile_path()
    if profile is None and not path.exists():
        raise InvalidInput(
            f"no device given and no machine profile at {path}: run `ceiling bench --quick` "
            "to measure this machine, or pass --spec NAME (e.g. --spec h100-sxm)"
        )
    measured = load_profile(path).device(prefer)
    return ResolvedDevice(measured.as_spec(), f"measured profile {path}", path, measured)


def resolve_device(
    spec: str | None = None, profile: str | Path | None = None, prefer: str = "cuda"
):
    """The DeviceSpec of `resolve` (the rule above)."""
    return resolve(spec, profile, prefer).spec
