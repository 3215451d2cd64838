"""A result's notebook view: its JSON record as HTML tables (headline values, then each list
of rows). Every string is escaped; nothing here runs scripts or loads anything."""

from __future__ import annotations

import html
from typing import Any

MAX_ROWS = 50  # a notebook cell stays readable; to_dict() holds every row


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if value is None:
        return "—"
    if isinstance(value, (list, tuple)) and all(not isinstance(v, (dict, list)) for v in value):
        return ", ".join(_cell(v) for v in value)
    return str(value)


def _is_scalar(value: Any) -> bool:
    return not isinstance(value, (dict, list, tuple)) or (
        isinstance(value, (list, tuple)) and all(not isinstance(v, (dict, list)) for v in value)
    )


def _kv_table(items: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><th style='text-align:left'>{html.escape(str(k))}</th>"
        f"<td>{html.escape(_cell(v))}</td></tr>"
        for k, v in items.items()
    )
    return f"<table>{rows}</table>"


def _rows_table(name: str, rows: list[dict[str, Any]]) -> str:
    columns = [k for k in rows[0] if all(_is_scalar(r.get(k)) for r in rows)]
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(r.get(c)))}</td>" for c in columns) + "</tr>"
        for r in rows[:MAX_ROWS]
    )
    more = f"<p>… {len(rows) - MAX_ROWS} more rows in to_dict()</p>" if len(rows) > MAX_ROWS else ""
    caption = f"<caption style='text-align:left'><b>{html.escape(name)}</b></caption>"
    return f"<table>{caption}<tr>{head}</tr>{body}</table>{more}"


def record_html(title: str, record: dict[str, Any]) -> str:
    """A title, a table of the record's single values, and one table per list of rows."""
    scalars = {k: v for k, v in record.items() if _is_scalar(v)}
    nested = {k: v for k, v in record.items() if isinstance(v, dict) and v}
    parts = [f"<div class='ceiling-result'><h4>{html.escape(title)}</h4>", _kv_table(scalars)]
    for key, value in nested.items():
        flat = {k: v for k, v in value.items() if _is_scalar(v)}
        if flat:
            parts.append(f"<p><b>{html.escape(key)}</b></p>" + _kv_table(flat))
    for key, value in record.items():
        if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
            parts.append(_rows_table(key, value))
    parts.append("</div>")
    return "".join(parts)
