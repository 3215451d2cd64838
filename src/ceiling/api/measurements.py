"""Reading your own scaling measurements: a CSV or JSON file of N and time or throughput
(a `ceiling scale --json` result is accepted as it is)."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from ceiling.errors import MalformedFile
from ceiling.files import SMALL_FILE_BYTES, parse_json, read_text

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
    text = read_text(path, "CSV or JSON file of measurements")
    if path.suffix.lower() == ".json" or text.lstrip().startswith(("{", "[")):
        data = parse_json(text, str(path))
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
    csv.field_size_limit(SMALL_FILE_BYTES)  # a long note column is data, not an error
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
