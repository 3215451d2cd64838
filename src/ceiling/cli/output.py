"""Shared rendering helpers for commands: JSON for scripts, rich tables for people."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ceiling.cli.inputs import option
from ceiling.inputs import JSON, PLOT
from ceiling.records import jsonable
from ceiling.render.terminal import console as console  # re-exported for the commands
from ceiling.render.terminal import table as table

# Options shared by many commands, declared once in ceiling.inputs.
JSON_HELP = JSON.help
PLOT_HELP = PLOT.help
JsonOption = option(JSON, bool)


def _checked_figure_path(path: Path | None) -> Path | None:
    """--plot is checked while the command line is read, so a bad path costs no work."""
    if path is not None:
        from ceiling.render.plots import check_figure_path

        check_figure_path(path)
    return path


PlotOption = option(PLOT, Path | None, callback=_checked_figure_path)


LIST_HELP = "comma-separated or repeated"


def comma_list(values: list[str] | str | None) -> list[str] | None:
    """The items of a list option, given as comma lists, repeated flags or both
    (`-n 8,64 -n 256`); None when the option was not given."""
    if values is None:
        return None
    if isinstance(values, str):
        values = [values]
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def joined(values: list[str] | None) -> str | None:
    """A list option as one comma list, for parsers that read one (None when not given)."""
    items = comma_list(values)
    return None if items is None else ",".join(items)


def emit_json(obj: Any) -> None:
    json.dump(jsonable(obj), sys.stdout, indent=2)
    sys.stdout.write("\n")


def figure_and_json(result: Any, plot: Path | None, json_out: bool) -> bool:
    """Write the result's figure to --plot when asked, and its JSON (naming the figure) on
    --json; True when the JSON was written and nothing else is to be shown."""
    if plot is not None:
        from ceiling.render import plots

        plots.save(result.figure(), plot)
    if json_out:
        emit_json({**result.to_dict(), "plot": str(plot) if plot else None})
    return json_out


@contextmanager
def rank_progress(label: str):
    """A progress bar on stderr (a terminal only) fed as `progress(done, total)`."""
    import sys

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        console=Console(file=sys.stderr),
        transient=True,
        disable=not sys.stderr.isatty(),
    ) as bar:
        task = bar.add_task(label, total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield progress
