"""The device flags, the same in every command that prices work on a device.

The rule that combines them lives in `ceiling.hardware.resolve`: --spec, else --profile,
else the saved profile; the two together are refused.
"""

from __future__ import annotations

from pathlib import Path

from ceiling.cli.inputs import option
from ceiling.inputs import MACHINE_PROFILE, SPEC, SPEC_FORMS

__all__ = ["SPEC_FORMS", "ProfileOption", "SpecOption"]

SpecOption = option(SPEC, str | None)
ProfileOption = option(MACHINE_PROFILE, Path | None)
