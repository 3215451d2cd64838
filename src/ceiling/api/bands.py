"""The error bands `ceiling validate` ships: each model's leave-one-source-out error on the
published runs of the validation corpus (`ceiling validate --write-bands` rewrites them)."""

from __future__ import annotations

from collections.abc import Iterable

from ceiling.model.accuracy import Band


def shipped_band(base: str, features: Iterable[str] = ()) -> Band:
    """The shipped band of regime family `base` ("training", "decode expected", "decode
    ceiling", "serving throughput", "serving latency") for a prediction with `features`."""
    from ceiling.validation.bands import band

    return band(base, tuple(features))


def shipped_rows() -> tuple[dict, ...]:
    """The shipped scored rows, one per published figure (as `ceiling validate --json`)."""
    from ceiling.validation.bands import rows

    return rows()
