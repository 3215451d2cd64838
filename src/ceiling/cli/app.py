"""The `ceiling` command: one Typer app; each command lives in its own small module.

Command modules import torch, matplotlib and scipy inside their functions only, so that
`ceiling --help` and the calculators answer without loading them.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Annotated

import typer
import typer.main

from ceiling.errors import CeilingError, MissingDependency

# typer >= 0.29 vendors click and raises its own TyperException; older typer raises click's.
if hasattr(typer, "TyperException"):
    USAGE_ERRORS: tuple[type[Exception], ...] = (typer.TyperException,)
else:  # pragma: no cover - exercised only where an older typer is installed
    import click

    USAGE_ERRORS = (click.ClickException,)

app = typer.Typer(
    name="ceiling",
    help=(
        "How fast this machine really is, how far below that ceiling your work runs and why, "
        "and what more hardware would buy."
    ),
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

TORCH_MISSING = (
    "this command needs PyTorch, which is not installed: pip install torch (CUDA builds: "
    "https://pytorch.org/get-started)"
)


def require_torch() -> None:
    """Refuse in one line, before any work, when torch cannot be imported."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise MissingDependency(TORCH_MISSING) from None


def _show_version(value: bool) -> None:
    if value:
        from ceiling import __version__

        print(f"ceiling {__version__}")
        raise typer.Exit(0)


@app.callback(invoke_without_command=True)
def _root(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_show_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    # `ceiling` alone prints the help and succeeds (it is how people start)
    if ctx.invoked_subcommand is None:
        print(ctx.get_help())
        raise typer.Exit(0)


# Each module registers its commands on `app` when imported.
COMMAND_MODULES = [
    "ceiling.cli.laws",
    "ceiling.cli.info",
    "ceiling.cli.bench",
    "ceiling.cli.roofline",
    "ceiling.cli.report",
    "ceiling.cli.decode",
    "ceiling.cli.serve",
    "ceiling.cli.plan",
    "ceiling.cli.simulate",
    "ceiling.cli.profile",
    "ceiling.cli.step",
    "ceiling.cli.scale",
    "ceiling.cli.fit",
    "ceiling.cli.bench_comm",
    "ceiling.cli.repeat",
    "ceiling.cli.trace",
    "ceiling.cli.validate",
]

for _name in COMMAND_MODULES:
    importlib.import_module(_name)


def _warnings_as_lines() -> None:
    """ceiling's own warnings (a saved profile that may not fit this process) as one
    `warning:` line on stderr; other libraries' warnings as Python shows them."""
    import warnings

    from ceiling.errors import CeilingWarning

    shown = warnings.showwarning
    if getattr(shown, "_ceiling", False):
        return

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, CeilingWarning):
            print(f"warning: {message}", file=sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)

    show._ceiling = True  # type: ignore[attr-defined]
    warnings.showwarning = show
    warnings.simplefilter("always", CeilingWarning)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; user mistakes become one line on stderr and exit code 2."""
    from ceiling.cli import streams
    from ceiling.cli.argument_names import said_on_the_command_line
    from ceiling.cli.params import check_numbers_everywhere
    from ceiling.render.plots import take_unwritten

    take_unwritten()
    _warnings_as_lines()
    # Kineto writes "USDT: ... profiler_start/stop" to stderr each time a profile (--compile)
    # runs, at every log level below 6; 6 also hides its errors, which the command reports
    # itself. Read once per process, at the first profile; a level the user set is kept.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    argv = sys.argv[1:] if argv is None else argv
    command = None
    try:
        with streams.tolerant_terminal():
            command = check_numbers_everywhere(typer.main.get_command(app))
            rv = command.main(args=argv, prog_name="ceiling", standalone_mode=False)
            streams.flush_stdout()
    except CeilingError as exc:
        print(f"error: {said_on_the_command_line(exc, command, argv)}", file=sys.stderr)
        sys.exit(2)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "torch":
            raise
        print(f"error: {TORCH_MISSING}", file=sys.stderr)
        sys.exit(2)
    except USAGE_ERRORS as exc:  # usage errors: bad option, missing argument
        ctx = getattr(exc, "ctx", None)
        where = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        print(f"error: {exc.format_message()}{where}", file=sys.stderr)
        sys.exit(2)
    except (KeyboardInterrupt, typer.Abort):
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        streams.silence_stdout()
        sys.exit(0)
    except SystemExit as exc:
        # click answers a closed pipe (`ceiling specs --json | head`) with exit 1; a reader
        # that stops reading is not a failure of the command
        if isinstance(exc.__context__, BrokenPipeError):
            streams.silence_stdout()
            sys.exit(0)
        raise
    except OSError as exc:
        if not streams.is_output_failure(exc):
            raise
        streams.silence_stdout()
        print(f"error: cannot write the output: {exc.strerror or exc}", file=sys.stderr)
        sys.exit(2)
    unwritten = take_unwritten()
    if unwritten:  # the results are shown; only a figure is missing
        print(f"warning: {'; '.join(unwritten)}", file=sys.stderr)
        sys.exit(2)
    if rv == 130:  # typer turns Ctrl-C into this code, silently
        print("interrupted", file=sys.stderr)
    if isinstance(rv, int) and rv:
        sys.exit(rv)
