"""Which device spec a command uses: a named catalog spec, else the measured profile."""

from __future__ import annotations

from pathlib import Path

from ceiling.errors import InvalidInput
from ceiling.hardware.profile import default_profile_path, load_profile


def resolve_device(
    spec: str | None = None, profile: str | Path | None = None, prefer: str = "cuda"
):
    """--spec wins; else the profile (given or default), its `prefer` device if it has one.

    Without either, the error tells the user how to get one.
    """
    if spec is not None:
        from ceiling.hardware.catalog import get_spec

        return get_spec(spec)
    path = Path(profile) if profile is not None else default_profile_path()
    if profile is None and not path.exists():
        raise InvalidInput(
            f"no device given and no machine profile at {path}: run `ceiling bench --quick` "
            "to measure this machine, or pass --spec NAME (e.g. --spec h100-sxm)"
        )
    return load_profile(path).device(prefer).as_spec()
