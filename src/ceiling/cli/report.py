"""`ceiling report`: measure this machine, run the analyses that make sense on it, write a page."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer

from ceiling.cli.app import app
from ceiling.cli.inputs import GlobalBatchOption, SeqOption, option
from ceiling.cli.output import LIST_HELP, JsonOption, emit_json, joined, table
from ceiling.cli.params import RUNS_YOUR_CODE
from ceiling.errors import InvalidInput
from ceiling.inputs import GPUS, MACHINE_PROFILE, MODEL, SPEC
from ceiling.records import write_json_atomic, write_text_atomic

DEFAULT_OUTPUT = "ceiling-report.html"
QUALIFYING_NOTES = ("measured on a busy machine", "measured above the theoretical peak")


@app.command()
def report(
    quick: Annotated[
        bool,
        typer.Option(
            "--quick/--full",
            help="Quick benchmarks and analyses (default, under a minute on 2 cores) or the "
            "full ones.",
        ),
    ] = True,
    profile: option(
        MACHINE_PROFILE,
        Path | None,
        "Here: this machine (with no saved profile, measured now); its GPU is also the "
        "cluster's device.",
    ) = None,
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
    model: option(
        MODEL, str | None, "Or module:callable. Default: built-in demos." + RUNS_YOUR_CODE
    ) = None,
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            metavar="PATH",
            help="A torch.profiler trace (file or folder of per-rank files) to explain too.",
        ),
    ] = None,
    spec: option(
        SPEC, str | None, "The target cluster's device; default: the demo H100 SXM."
    ) = None,
    gpus: option(GPUS, str | None, "Default: 256.") = None,
    seq: SeqOption = None,
    global_batch: GlobalBatchOption = None,
    json_out: JsonOption = False,
) -> None:
    """Measure this machine (or read its saved profile) and write one self-contained HTML
    page (and a JSON record).

    With your work (--model, --trace, --spec/--profile with --gpus, --seq, --global-batch)
    every section speaks of it; without, sections use built-in demos, labelled as such."""
    with terminated_as_interrupted():
        _report(output, quick, only, profile, trace, model, spec, gpus, seq, global_batch, json_out)


@contextlib.contextmanager
def terminated_as_interrupted():
    """SIGTERM (`kill`, a scheduler's stop) ends the report as Ctrl-C does: the sections that
    finished are written, a more complete page already there is kept, the exit code is 130."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(_signum, _frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _report(output, quick, only, profile, trace, model, spec, gpus, seq, global_batch, json_out):
    from ceiling.cli.app import require_torch

    require_torch()  # every measured section needs it: refuse before any section runs
    from ceiling.api.plan import MAX_DEVICES, MAX_GLOBAL_BATCH
    from ceiling.report.build import check_options, choose_sections
    from ceiling.report.call import check_page
    from ceiling.report.work import ReportOptions

    output = check_page(output)
    json_path = output.with_suffix(".json")
    options = ReportOptions(
        quick=quick,
        profile=profile,
        trace=trace,
        model=model,
        spec=spec,
        gpus=_count(gpus, "--gpus", MAX_DEVICES),
        seq=seq,
        global_batch=_count(global_batch, "--global-batch", MAX_GLOBAL_BATCH),
        only=_keys(joined(only)),
        save_profile_to=output.with_name(output.stem + "-profile.json"),
    )
    check_options(options)
    specs = choose_sections(options)
    if json_out:
        # stdout carries only the JSON: anything a library or a worker process prints while
        # the sections run goes to stderr instead
        with _stdout_to_stderr():
            result = _run_with_progress(options, specs)
    else:
        result = _run_with_progress(options, specs)
    rep = result.report
    kept = None
    if rep.interrupted and _more_complete_page(output, json_path, rep):
        # an interrupted run never replaces a page that holds more: it goes beside it
        kept = output
        output = output.with_name(output.stem + "-interrupted" + output.suffix)
        json_path = output.with_suffix(".json")
    write_text_atomic(result.html(json_name=json_path.name), output)
    record = result.to_json()
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


def _count(text: str | None, what: str, hi: int) -> int | None:
    from ceiling.cli.params import count_in_range

    if text is None:
        return None
    return count_in_range(text, what, 1, hi, "more is beyond any cluster or training run")


def _keys(only: str | None) -> tuple[str, ...]:
    if only is None:
        return ()
    keys = tuple(k.strip() for k in only.split(",") if k.strip())
    if not keys:
        raise InvalidInput("unknown section '(none given)': --only needs section keys")
    return keys


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


def _run_with_progress(options, specs):
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from ceiling.report.build import build_report
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
            elif res.busy_reasons:
                line += f" — [yellow]busy machine[/]: {escape(res.busy_reasons[0])}"
            bar.console.print(line, markup=True, highlight=False)

        result = build_report(options, step, on_start, on_done, specs)
        rep = result.report
        bar.update(task, description=f"report done in {rep.elapsed_s:.0f} s", completed=total)
    return result


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
    from ceiling.errors import CeilingError
    from ceiling.files import read_json

    try:
        old = read_json(json_path, "report record")
        old_sections = list(old["sections"])
        old_interrupted = bool(old.get("interrupted"))
    except (CeilingError, KeyError, TypeError):
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
