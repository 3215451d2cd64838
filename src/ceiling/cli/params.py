"""Checks every number on the command line passes, whatever option it comes from.

Ranges that belong to one option are declared on it (`typer.Option(min=1)`, or a unit
parser from `ceiling.units` with its bounds); what holds for every number is enforced here,
once, on the whole command tree: no NaN or infinity (a float option's `min` lets them
through on some typer versions) and no integer beyond what a float holds exactly, which no
count, seed or size in ceiling can mean.
"""

from __future__ import annotations

import math
from typing import Any

from ceiling.errors import InvalidInput

# Said wherever a command takes MODULE:CALLABLE: naming it is running it.
RUNS_YOUR_CODE = (
    " A module:callable (or file.py:callable) is imported and run as Python, with your "
    "rights: name only code you trust."
)

# 2**53: the largest integer every later float arithmetic keeps exact.
LARGEST_INTEGER = 2**53


def _name(param: Any) -> str:
    opts = [o for o in getattr(param, "opts", []) if o.startswith("--")]
    return opts[0] if opts else str(getattr(param, "human_readable_name", param.name)).upper()


def check_number(value: Any, name: str) -> None:
    """Refuse NaN, infinities and integers too large to mean anything, naming the option."""
    if isinstance(value, bool):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput(f"{name} must be a finite number, got {value}")
    if isinstance(value, int) and abs(value) > LARGEST_INTEGER:
        raise InvalidInput(f"{name} must be at most {LARGEST_INTEGER:,} in size, got {value:,}")


def _checked(param: Any, original: Any):
    def callback(ctx: Any, p: Any, value: Any) -> Any:
        if original is not None:
            value = original(ctx, p, value)
        for item in value if isinstance(value, (list, tuple)) else [value]:
            check_number(item, _name(p))
        return value

    return callback


def check_numbers_everywhere(command: Any) -> Any:
    """Add the number check to every parameter of `command` and of its subcommands."""
    for param in getattr(command, "params", []):
        if not getattr(param, "_ceiling_checked", False):
            param.callback = _checked(param, param.callback)
            param._ceiling_checked = True
    for sub in getattr(command, "commands", {}).values():
        check_numbers_everywhere(sub)
    return command


def count_in_range(text: str, name: str, lo: int, hi: int, why: str = "") -> int:
    """A count given as text ('8', '8k', '1e6'), refused outside [lo, hi] with the range
    (and why the bound is there) in the message."""
    from ceiling.units import parse_count

    n = parse_count(text)
    if not lo <= n <= hi:
        reason = f" ({why})" if why else ""
        raise InvalidInput(f"{name} must be between {lo:,} and {hi:,}{reason}, got {text!r}")
    return n
