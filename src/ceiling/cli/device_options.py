"""The device flags, the same in every command that prices work on a device.

The rule that combines them lives in `ceiling.hardware.resolve`: --spec, else --profile,
else the saved profile; the two together are refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

# What --spec takes, said alike by every command that has it.
SPEC_FORMS = (
    "a catalog name (`ceiling specs`), a driver name, or FILE.toml (FILE.toml#KEY picks "
    "one of several devices in it)"
)
SpecOption = Annotated[
    str | None,
    typer.Option(
        "--spec",
        metavar="NAME",
        help=f"Device datasheet: {SPEC_FORMS}. Not with --profile.",
    ),
]
ProfileOption = Annotated[
    Path | None,
    typer.Option(
        "--profile",
        metavar="PATH",
        help="Device measured by `ceiling bench` (default: the saved profile). Not with --spec.",
    ),
]
