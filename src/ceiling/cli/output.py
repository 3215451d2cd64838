"""Shared rendering helpers for commands: JSON for scripts, rich tables for people."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from ceiling.records import jsonable

# Options shared by many commands, so their help reads the same everywhere.
JSON_HELP = "Print one JSON object on stdout instead of tables."
PLOT_HELP = "Write a figure to FILE (.png or .svg)."
JsonOption = Annotated[bool, typer.Option("--json", help=JSON_HELP)]
PlotOption = Annotated[Path | None, typer.Option("--plot", metavar="FILE", help=PLOT_HELP)]


def emit_json(obj: Any) -> None:
    json.dump(jsonable(obj), sys.stdout, indent=2)
    sys.stdout.write("\n")


def console():
    from rich.console import Console

    return Console(highlight=False)


def table(title: str | None, columns: list[str], rows: list[list[Any]], caption: str | None = None):
    """A rich Table; numeric columns are right-aligned."""
    from rich.table import Table

    t = Table(
        title=title,
        caption=caption,
        title_justify="left",
        caption_justify="left",
        min_width=len(title or "") + 4,
    )
    for i, col in enumerate(columns):
        numeric = bool(rows) and all(isinstance(r[i], (int, float)) for r in rows if r[i] != "")
        # fold, never "…": a narrow terminal or a pipe (80 columns) must not cut a figure
        t.add_column(col, justify="right" if numeric else "left", overflow="fold")
    for r in rows:
        t.add_row(*(v if isinstance(v, str) else f"{v}" for v in r))
    return t
