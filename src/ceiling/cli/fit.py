"""`ceiling fit FILE`: fit your own scaling measurements (CSV or JSON, N and time or throughput)."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer

from ceiling.api.fit import TIME_UNITS
from ceiling.cli.app import app
from ceiling.cli.output import LIST_HELP, JsonOption, PlotOption, console, emit_json, joined
from ceiling.errors import InvalidInput, MalformedFile
from ceiling.records import MAX_READ_BYTES, read_text_file

# Accepted column names, compared case-insensitively.
N_NAMES = ("n", "workers", "load", "nodes", "gpus", "processes", "ranks", "threads", "devices")
TIME_NAMES = ("time", "time_s", "seconds", "secs", "t", "runtime", "runtime_s", "elapsed_s")
THROUGHPUT_NAMES = ("throughput", "x", "rate", "tput", "throughput_per_s", "ops_per_s")


def _pick(columns: list[str], names: tuple[str, ...]) -> str | None:
    lower = {c.strip().lower(): c for c in columns}
    for n in names:
        if n in lower:
            return lower[n]
    return None


def _rows_from_file(path: Path) -> tuple[list[dict[str, Any]], str | None]:
    """Rows as dicts, and the scaling mode if the file says so (a `ceiling scale` result)."""
    text = read_text_file(path, "CSV or JSON file of measurements")
    if path.suffix.lower() == ".json" or text.lstrip().startswith(("{", "[")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise MalformedFile(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from exc
        mode = data.get("mode") if isinstance(data, dict) else None
        if isinstance(data, dict) and "points" in data:
            data = data["points"]
        if isinstance(data, dict):  # columns: {"N": [...], "time": [...]}
            cols = list(data)
            if not all(isinstance(data[c], list) for c in cols):
                raise MalformedFile(f"{path}: expected a list of rows or a dict of columns")
            length = len(data[cols[0]]) if cols else 0
            if any(len(data[c]) != length for c in cols):
                raise MalformedFile(f"{path}: columns have different lengths")
            data = [{c: data[c][i] for c in cols} for i in range(length)]
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise MalformedFile(f"{path}: expected a list of objects like {{'N': 2, 'time': 1.3}}")
        return data, mode
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    limit = csv.field_size_limit()
    csv.field_size_limit(MAX_READ_BYTES)  # a long note column is data, not an error
    try:
        rows = list(csv.DictReader(lines, dialect=_dialect(lines)))
    except csv.Error as exc:
        raise MalformedFile(f"{path}: not readable as CSV ({exc})") from None
    finally:
        csv.field_size_limit(limit)
    return rows, None


def _dialect(lines: list[str]):
    """Comma by default; semicolons, tabs or spaces when the header is split by those."""
    header = lines[0] if lines else ""
    if "," in header:
        return csv.excel
    try:
        return csv.Sniffer().sniff(header, delimiters=";\t ")
    except csv.Error:
        return csv.excel


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:30]}… ({len(text)} characters)"


def read_measurements(path: Path) -> tuple[list[float], list[float], str, str | None]:
    """(Ns, values, "time" | "throughput", mode or None) from a CSV or JSON file."""
    rows, mode = _rows_from_file(path)
    if not rows:
        raise MalformedFile(f"{path}: no rows")
    columns = list(rows[0].keys())
    n_col = _pick(columns, N_NAMES)
    t_col = _pick(columns, TIME_NAMES)
    x_col = _pick(columns, THROUGHPUT_NAMES)
    if n_col is None or (t_col is None and x_col is None):
        raise MalformedFile(
            f"{path}: need a column N (or workers/load) and a column time (seconds) or "
            f"throughput; found columns {', '.join(map(str, columns))}"
        )
    measure, col = ("time", t_col) if t_col is not None else ("throughput", x_col)
    ns, values = [], []
    for i, r in enumerate(rows, start=2):
        try:
            n, value = float(r[n_col]), float(r[col])
        except (TypeError, ValueError, KeyError) as exc:
            raise MalformedFile(
                f"{path}: row {i}: {n_col}={_short(r.get(n_col))}, {col}={_short(r.get(col))} "
                "are not numbers"
            ) from exc
        if not (math.isfinite(n) and math.isfinite(value)):
            raise MalformedFile(
                f"{path}: row {i}: {n_col}={_short(r.get(n_col))}, {col}={_short(r.get(col))} "
                "are not finite numbers"
            )
        ns.append(n)
        values.append(value)
    return ns, values, measure, mode


@app.command()
def fit(
    file: Annotated[
        Path, typer.Argument(help="CSV or JSON with columns N and time or throughput.")
    ],
    mode: Annotated[
        str | None,
        typer.Option(
            help="strong (fixed problem; default) or weak (the problem grows with N). Only "
            "matters for times: weak-scaling throughput is N / time. Gustafson's law is "
            "fitted to weak scaling only."
        ),
    ] = None,
    weak: Annotated[
        bool, typer.Option("--weak", help="The same as --mode weak: the problem grows with N.")
    ] = False,
    time_unit: Annotated[
        str,
        typer.Option(
            "--time-unit",
            help=f"Unit of the file's times (throughputs: per this unit): {', '.join(TIME_UNITS)}. "
            "Times and limits are reported in it.",
        ),
    ] = "s",
    predict: Annotated[
        list[str] | None, typer.Option(help=f"Worker counts to predict, {LIST_HELP}.")
    ] = None,
    json_out: JsonOption = False,
    plot: PlotOption = None,
) -> None:
    """Fit speedup, efficiency, Karp–Flatt, Amdahl, Gustafson and the USL to measurements.

    Rows may repeat an N (the median is shown; every row is fitted). A `ceiling scale
    --json` result is accepted as it is.
    """
    from ceiling.api.fit import fit as fit_measurements
    from ceiling.api.fit import unit_seconds
    from ceiling.cli.scale import parse_counts
    from ceiling.report import scaling_summary

    if weak and mode not in (None, "weak"):
        raise InvalidInput(f"--weak and --mode {mode} disagree: give one")
    unit_seconds(time_unit)  # a bad unit is refused before the file is read
    ns, values, measure, file_mode = read_measurements(file)
    mode = "weak" if weak else mode or file_mode or "strong"
    predict = joined(predict)
    predict_ns = (
        [float(n) for n in parse_counts(predict, "predicted worker counts")] if predict else None
    )
    kw = {"times": values} if measure == "time" else {"throughputs": values}
    result = fit_measurements(
        ns, mode=mode, time_unit=time_unit, predict=predict_ns, source=str(file), **kw
    )
    if plot is not None:
        from ceiling.report import scaling_plot

        result = dataclasses.replace(result, plot=str(plot))
        scaling_plot.save_scaling_figure(
            result.record(), plot, title=f"{file.name} ({mode} scaling)"
        )
    summary = result.record()
    points = summary["points"]
    if json_out:
        emit_json(summary)
        return
    c = console()
    c.print(
        scaling_summary.points_table(
            points, f"{file.name}: {len(ns)} rows, {measure}, {mode} scaling"
        )
    )
    for t in scaling_summary.fit_tables(summary["fit"], time_unit, unit_seconds(time_unit)):
        c.print(t)
    for line in summary["limits"].values():
        c.print(f"limit: {line}")
    c.print(f"verdict: {result.verdict}")
    for w in result.warnings:
        c.print(f"warning: {w}")
    if plot:
        c.print(f"figure: {plot}")
