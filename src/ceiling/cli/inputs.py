"""The command line's options for the inputs several commands share (`ceiling.inputs`).

`option(MODEL, str | None, "Default: ...")` is a typer option with the shared flag, short
flag, metavar and help, followed by what the command adds; `argument` the same as a
positional argument. Every command that takes one of these inputs builds it here, so it reads
the same in every `--help`.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ceiling.inputs import GLOBAL_BATCH, GPUS, MODEL, SEQ, TP, Input


def _help(shared: Input, more: str) -> str:
    return f"{shared.help} {more}".strip()


def option(shared: Input, kind: Any, more: str = "", **options: Any) -> Any:
    """An option for `shared`, its help followed by `more` (the command's default, say)."""
    if shared.metavar and "metavar" not in options:
        options["metavar"] = shared.metavar
    return Annotated[kind, typer.Option(*shared.flags, help=_help(shared, more), **options)]


def argument(shared: Input, kind: Any, more: str = "", **options: Any) -> Any:
    """A positional argument for `shared`, its help followed by `more`."""
    return Annotated[kind, typer.Argument(help=_help(shared, more), **options)]


ModelArg = argument(MODEL, str)
GpusOption = option(GPUS, str)
SeqOption = option(SEQ, int | None, "Default: min(the model's longest, 4096).")
GlobalBatchOption = option(GLOBAL_BATCH, str | None, "Default: about 4M tokens.")
TpOption = option(TP, int)
