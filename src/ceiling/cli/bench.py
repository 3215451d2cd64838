"""`ceiling bench`: measure this machine's ceilings (matmul, memory, overhead, transfer)."""

from __future__ import annotations

import typer

from ceiling.cli.app import app

bench_app = typer.Typer(
    name="bench",
    help="Measure this machine's real ceilings and save them as the machine profile.",
    no_args_is_help=False,
    invoke_without_command=True,
    rich_markup_mode=None,
)
app.add_typer(bench_app, name="bench")


@bench_app.callback()
def bench_all(ctx: typer.Context) -> None:
    """Run every benchmark (quick mode with --quick) and save the machine profile."""
    if ctx.invoked_subcommand is not None:
        return
