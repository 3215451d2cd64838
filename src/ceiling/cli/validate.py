"""`ceiling validate`: how far ceiling's predictions are from published runs, by regime."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ceiling.cli.app import app
from ceiling.cli.output import LIST_HELP, JsonOption, comma_list, console, emit_json

VALIDATE_HELP = """How far ceiling's predictions are from published runs, and how far to trust
them where you run.

Every published run of the validation corpus (training step times and throughput, decode
tokens/s, serving throughput and latency; one TOML file per source document, shipped with
ceiling) is predicted as a user would ask for it — `plan`, `decode` or `serve` with the
run's own arguments — and scored by regime (the kind of prediction and each of its features:
MoE, FP8, long context, FSDP, pipeline, device generation, a model under 1B parameters,
quantisation, tensor parallelism, online/offline): cases, sources, median and p90
|predicted / published − 1|, in-sample and leave-one-source-out (every constant chosen
from a source refit without it). The leave-one-source-out figures are the ones to trust:
they are what the error bands on every prediction show.

--runs FILE (or a folder of them) scores your own runs in the same format instead: add the
runs of your cluster to see how far ceiling is from them."""


@app.command(help=VALIDATE_HELP)
def validate(
    runs: Annotated[
        Path | None,
        typer.Option(
            "--runs",
            help="A corpus file (or a folder of them) of your own runs, in the same format.",
        ),
    ] = None,
    kinds: Annotated[
        list[str] | None,
        typer.Option(help=f"Only these kinds: training, decode, serving; {LIST_HELP}."),
    ] = None,
    rows: Annotated[
        bool, typer.Option("--rows", help="Also list every scored figure with its error.")
    ] = False,
    workers: Annotated[
        int | None,
        typer.Option(help="Processes predicting in parallel (default: the cores, at most 4)."),
    ] = None,
    write_bands: Annotated[
        bool,
        typer.Option(
            "--write-bands",
            help="Write the scored rows as the error bands ceiling ships (maintainers).",
            hidden=True,
        ),
    ] = False,
    json_out: JsonOption = False,
) -> None:
    from rich.progress import Progress

    from ceiling.api.validate import validate as run_validate
    from ceiling.cli.decode import _stderr_console

    progress = Progress(console=_stderr_console(), transient=True, disable=not sys.stderr.isatty())
    with progress:
        task = progress.add_task("predicting published runs", total=None)

        def advance(done: int, total: int, name: str) -> None:
            progress.update(task, completed=done, total=total)

        chosen = comma_list(kinds)
        result = run_validate(
            runs, kinds=",".join(chosen) if chosen else None, workers=workers, progress=advance
        )
    if write_bands:
        from ceiling.validation import bands

        print(f"wrote {bands.write(result.rows, constants=result.constants)}", file=sys.stderr)
    if json_out:
        emit_json(result.to_dict())
        return
    show(result, rows)


def _pct(x: float) -> str:
    return f"{x * 100:.1f} %" if x < 0.995 else f"{x * 100:.0f} %"


def _range(span) -> str:
    """ "20–26" (%), or a dash for a regime of one source."""
    if not span:
        return "—"
    lo, hi = (x * 100 for x in span)
    return f"{lo:.0f}–{hi:.0f}"


def show(result, with_rows: bool) -> None:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    con = console()
    con.print(f"{result.heading()} ({result.seconds:.0f} s)", style="bold")
    t = Table(title="|predicted / published − 1| by regime", title_justify="left",
              box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))  # fmt: skip
    for name, justify in (
        ("regime", "left"),
        ("cases", "right"),
        ("sources", "right"),
        ("median", "right"),
        ("p90", "right"),
        ("held\nout\nmedian", "right"),
        ("drop\none\nsource", "right"),
        ("held\nout\np90", "right"),
    ):
        t.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for g in result.regimes:
        base = " · " not in g.name
        t.add_row(
            Text(g.name, style="bold") if base else Text(f"  {g.name.split(' · ', 1)[1]}"),
            str(g.cases),
            str(g.sources),
            _pct(g.median_abs_error),
            _pct(g.p90_abs_error),
            _pct(g.loso_median_abs_error),
            _range(g.loso_median_range),
            _pct(g.loso_p90_abs_error),
        )
    con.print(t)
    con.print(
        "held-out: leave-one-source-out, each source scored with the constants chosen from it "
        "refit on the others (the figures to trust; the error bands use them); drop one source: "
        "the held-out median without each source's runs in turn, lowest to highest, in % (how "
        "much it rests on one source). Regimes with fewer than 3 runs give no band."
    )
    for c in result.constants:
        con.print(
            f"  fitted {c['name']} = {c['value']:.3g} (from {', '.join(c['sources']) or '—'}; "
            f"refit on every run {c['refit_on_every_run']:.3g}, prior {c['prior']:.3g})"
        )
    if result.refused:
        con.print(f"{len(result.refused)} runs refused by ceiling (not scored):")
        for r in result.refused:
            con.print(f"  {r['run']}: {r['reason']}")
    if with_rows:
        t = Table(title="every scored figure")
        for name in ("run", "regime", "metric", "published", "predicted", "error", "held-out"):
            t.add_column(name)
        for r in result.rows:
            t.add_row(
                r["run"],
                r["regime"],
                r["metric"],
                f"{r['published']:.4g}",
                f"{r['predicted']:.4g}",
                f"{r['error'] * 100:+.1f} %",
                f"{r['loso_error'] * 100:+.1f} %",
            )
        con.print(t)
