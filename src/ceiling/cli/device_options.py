"""The device flags, the same in every command that prices work on a device.

The rule that combines them lives in `ceiling.hardware.resolve`: --spec, else --profile,
else the saved profile; the two together are refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

SpecOption = Annotated[
    str | None,
    typer.Option(
        "--spec",
        metavar="NAME",
        help="Device datasheet: a catalog name (`ceiling specs`), a driver name or a .toml "
        "file. Not with --profile.",
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
