"""`ceiling report`: measure this machine, run the analyses that make sense on it, write a page."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from ceiling.cli.app import app
from ceiling.cli.output import LIST_HELP, JsonOption, emit_json, joined, table
from ceiling.errors import InvalidInput
from ceiling.records import check_writable, write_json_atomic, write_text_atomic

DEFAULT_OUTPUT = "ceiling-report.html"
QUALIFYING_NOTES = ("measured on a busy machine", "measured above the theoretical peak")


@app.command()
def report(
    quick: Annotated[
        bool,
        typer.Option(
            "--quick/--full",
            help="Quick benchmarks and analyses (default, a few minutes at most) or the full ones.",
        ),
    ] = True,
    profile: Annotated[
        Path | None,
        typer.Option(
            "--profile",
            metavar="PATH",
            help="Use a saved machine profile instead of measuring now.",
        ),
    ] = None,
    output: Annotated[
        Path,
        typer.Option("--output", "-o", metavar="FILE", help="Where to write the HTML page."),
    ] = Path(DEFAULT_OUTPUT),
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only",
            metavar="KEYS",
            help=f"Run only these sections ({LIST_HELP} keys: machine, amdahl, roofline, "
            "overhead, mfu, scaling, decode, planner; trace with --trace).",
        ),
    ] = None,
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            metavar="PATH",
            help="A torch.profiler trace (file or folder of per-rank files) to explain too.",
        ),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Measure this machine and write one self-contained HTML page (and a JSON record)."""
    from ceiling.cli.app import require_torch

    require_torch()  # every measured section needs it: refuse before any section runs
    from ceiling.report import html
    from ceiling.report.sections import SECTIONS

    specs = _select(_with_trace(SECTIONS, trace), joined(only))
    output = _check_output(output)
    if profile is not None:
        if not profile.exists():  # anything else (a folder, a device) load_profile names
            raise InvalidInput(
                f"profile {str(profile)!r} does not exist (run `ceiling bench --quick`)"
            )
        from ceiling.hardware.profile import load_profile

        load_profile(profile)  # a malformed file is the user's to fix: one line, exit 2
    json_path = output.with_suffix(".json")

    profile_copy = output.with_name(output.stem + "-profile.json")
    if json_out:
        # stdout carries only the JSON: anything a library or a worker process prints while
        # the sections run goes to stderr instead
        with _stdout_to_stderr():
            rep = _run_with_progress(specs, quick, profile, profile_copy, trace)
    else:
        rep = _run_with_progress(specs, quick, profile, profile_copy, trace)
    kept = None
    if rep.interrupted and _more_complete_page(output, json_path, rep):
        # an interrupted run never replaces a page that holds more: it goes beside it
        kept = output
        output = output.with_name(output.stem + "-interrupted" + output.suffix)
        json_path = output.with_suffix(".json")
    write_text_atomic(html.render(rep, json_name=json_path.name), output)
    record = rep.to_json()
    record["html"] = str(output.resolve())
    write_json_atomic(record, json_path)

    if json_out:
        emit_json(record)
        _where(output, json_path, sys.stderr, kept)
    else:
        _summary(rep)
        _where(output, json_path, sys.stdout, kept)
    if rep.interrupted:
        raise typer.Exit(130)


@contextlib.contextmanager
def _stdout_to_stderr():
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no real file descriptor behind stdout: nothing to redirect
        yield
        return
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _with_trace(specs, trace: Path | None):
    """The trace section, after the MFU one, when the user gives a trace."""
    if trace is None:
        return list(specs)
    if not trace.exists():
        raise InvalidInput(f"trace {str(trace)!r} does not exist")
    from ceiling.report.sections import TRACE_SECTION

    keys = [s.key for s in specs]
    at = keys.index("mfu") + 1 if "mfu" in keys else len(keys)
    return [*specs[:at], TRACE_SECTION, *specs[at:]]


def _select(specs, only: str | None):
    if not only:
        return list(specs)
    keys = [k.strip() for k in only.split(",") if k.strip()]
    known = {s.key: s for s in specs}
    unknown = [k for k in keys if k not in known]
    if unknown or not keys:
        raise InvalidInput(
            f"unknown section {', '.join(map(repr, unknown)) or '(none given)'}; "
            f"sections are {', '.join(known)}"
        )
    return [s for s in specs if s.key in keys]


def _check_output(output: Path) -> Path:
    if output.suffix.lower() not in (".html", ".htm"):
        raise InvalidInput(
            f"the report is an HTML page: --output must end in .html, got {str(output)!r}"
        )
    if not output.parent.exists():
        raise InvalidInput(f"folder {str(output.parent)!r} for the report does not exist")
    if output.is_dir():
        raise InvalidInput(f"{str(output)!r} is a folder, not a file name")
    # the page and its JSON record go to the same folder: it must take new files now
    check_writable(output, create_folders=False)
    return output


def _run_with_progress(
    specs, quick: bool, profile: Path | None, profile_copy: Path, trace: Path | None = None
):
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from ceiling.report import compose
    from ceiling.text import printable

    err = Console(stderr=True, highlight=False)
    total = sum(s.weight_s for s in specs)
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(bar_width=24),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    ) as bar:
        task = bar.add_task("report", total=total)
        state = {"prefix": ""}

        def step(message: str) -> None:
            bar.update(task, description=f"{state['prefix']} — {message}")

        def on_start(i, spec):
            state["prefix"] = f"[{i + 1}/{len(specs)}] {spec.title}"
            bar.update(task, description=state["prefix"])

        def on_done(i, res):
            bar.advance(task, specs[i].weight_s)
            mark = {
                "ok": "[green]ok[/]",
                "skipped": "[yellow]skipped[/]",
                "failed": "[red]failed[/]",
            }
            line = f"  {mark[res.status]}  {escape(res.title)} ({res.elapsed_s:.1f} s)"
            if res.reason:  # may quote a user's file or model name: text, not markup
                line += f" — {escape(printable(res.reason))}"
            bar.console.print(line, markup=True, highlight=False)

        ctx = compose.ReportContext(
            quick=quick,
            profile_path=profile,
            progress=step,
            save_profile_to=profile_copy,
            trace_path=trace,
        )
        rep = compose.compose(specs, ctx, on_start=on_start, on_done=on_done)
        bar.update(task, description=f"report done in {rep.elapsed_s:.0f} s", completed=total)
    return rep


def _summary(rep) -> None:
    from ceiling.cli.output import console

    rows = []
    for r in rep.sections:
        found = "; ".join(f"{h.label}: {h.display}" for h in r.output.highlights[:3])
        rows.append([r.title, r.status, found or (r.reason or "")])
    c = console()
    c.print(table(f"ceiling report ({rep.mode})", ["section", "status", "found"], rows))
    # caveats that qualify every number above are repeated here, not only on the page
    for r in rep.sections:
        for note in r.output.notes:
            if note.startswith(QUALIFYING_NOTES):
                c.print(f"note: {note}", highlight=False, markup=False)


def _finished(sections) -> int:
    return sum(1 for s in sections if s.get("status") == "ok")


def _more_complete_page(output: Path, json_path: Path, rep) -> bool:
    """Whether the page already at `output` holds at least as much as the interrupted `rep`:
    a page whose record cannot be read counts as complete (it is not ours to lose)."""
    if not output.exists():
        return False
    import json

    try:
        old = json.loads(json_path.read_text(encoding="utf-8"))
        old_sections = list(old["sections"])
        old_interrupted = bool(old.get("interrupted"))
    except (OSError, ValueError, KeyError, TypeError):
        return True
    new_ok = sum(1 for s in rep.sections if s.status == "ok")
    return not old_interrupted or _finished(old_sections) >= new_ok


def _where(output: Path, json_path: Path, stream, kept: Path | None = None) -> None:
    from ceiling.text import printable

    if kept is not None:
        print(
            f"interrupted: {printable(str(kept.resolve()))} (a more complete page) was kept; "
            "this partial page was written beside it",
            file=stream,
        )
    print(f"report: {printable(str(output.resolve()))}", file=stream)
    print(f"json:   {printable(str(json_path.resolve()))}", file=stream)
