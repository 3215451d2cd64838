"""The device a command works on, by the one device rule every command follows
(`hardware/resolve.py`): a datasheet `spec`, else a measured `machine_profile`, else the
saved profile; both given is refused."""

from __future__ import annotations

from pathlib import Path

from ceiling.hardware.resolve import Machine


def check_one_device(spec: str | None, machine_profile: str | Path | None) -> None:
    """Refuse in one line a spec that is not a name, a profile that is not a path, or both."""
    from ceiling.hardware.resolve import check_one_device as check

    check(spec, machine_profile)


def device(spec: str | None = None, machine_profile: str | Path | None = None) -> Machine:
    """The device `spec` or `machine_profile` names (the profile's GPU where it has one), as
    `ceiling plan`, `decode` and `roofline` resolve it."""
    from ceiling.hardware.resolve import resolve

    return resolve(spec, machine_profile)


def profile_gpu(machine_profile: str | Path) -> Machine | None:
    """The profile's GPU when it has one the catalog knows (its links and node size are
    catalog data); None for a profile of CPUs only or of an unknown GPU."""
    from ceiling.hardware.resolve import profile_gpu as gpu

    return gpu(machine_profile)
