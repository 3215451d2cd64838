"""A result's notebook view: its JSON record as HTML tables (headline values, then each list
of rows) with its figure, and its rows as data frames. Every string is escaped; nothing here
runs scripts or loads anything."""

from __future__ import annotations

import base64
import html
from typing import TYPE_CHECKING, Any

from ceiling.errors import CeilingError
from ceiling.views import tables

if TYPE_CHECKING:  # pandas is optional: only to_pandas() imports it
    import pandas

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


def record_html(title: str, record: dict[str, Any], png: bytes | None = None) -> str:
    """A title, a table of the record's single values, the figure (`png`) when there is one,
    and one table per list of rows."""
    scalars = {k: v for k, v in record.items() if _is_scalar(v)}
    nested = {k: v for k, v in record.items() if isinstance(v, dict) and v}
    parts = [f"<div class='ceiling-result'><h4>{html.escape(title)}</h4>", _kv_table(scalars)]
    if png is not None:
        data = base64.b64encode(png).decode("ascii")
        parts.append(f"<img src='data:image/png;base64,{data}' alt='{html.escape(title)}'>")
    for key, value in nested.items():
        flat = {k: v for k, v in value.items() if _is_scalar(v)}
        if flat:
            parts.append(f"<p><b>{html.escape(key)}</b></p>" + _kv_table(flat))
    for key, value in record.items():
        if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
            parts.append(_rows_table(key, value))
    parts.append("</div>")
    return "".join(parts)


class NotebookViews:
    """What a notebook and a data frame make of a result that gives its JSON record
    (`record()`), a heading (`heading()`) and, where it draws one, a figure (`figure()`)."""

    def record(self) -> dict[str, Any]:  # pragma: no cover - every result defines it
        raise NotImplementedError

    def heading(self) -> str:  # pragma: no cover - every result defines it
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types (inf and nan become None), exactly the command's `--json`."""
        from ceiling.records import jsonable

        return jsonable(self.record())

    def _row_lists(self, record: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
        """The lists of rows in `record` by name, the main one first."""
        return tables.row_lists(record)

    def table_names(self) -> list[str]:
        """The names `table()` and `to_pandas()` take, the default first."""
        return list(self._tables())

    def table(self, name: str | None = None) -> list[dict[str, Any]]:
        """One table's rows as plain dicts: by default the main list of rows (a plan's
        plans, decode's rows per batch), or "summary", the single values as one row."""
        return tables.pick(self._tables(), name)

    def to_pandas(self, table: str | None = None) -> pandas.DataFrame:
        """`table(table)` as a pandas DataFrame; nested values become dotted columns."""
        return tables.data_frame(self.table(table))

    def _tables(self) -> dict[str, list[dict[str, Any]]]:
        record = self.to_dict()
        return tables.named_tables(record, self._row_lists(record))

    def _repr_png_(self) -> bytes | None:
        """The figure as PNG; None where the result draws none or cannot (too few points)."""
        draw = getattr(self, "figure", None)
        if draw is None:
            return None
        from ceiling.views.figure import png_bytes

        try:
            fig = draw()
        except CeilingError:
            return None
        return None if fig is None else png_bytes(fig)

    def _repr_html_(self) -> str:
        return self._html_view(self._repr_png_())

    def _html_view(self, png: bytes | None) -> str:
        """The notebook's HTML: the record's tables with the figure (`png`) among them."""
        return record_html(self.heading(), self.to_dict(), png)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        """HTML (tables and figure) and the figure as PNG, the figure drawn once."""

        def wanted(mime: str) -> bool:
            return (include is None or mime in include) and mime not in (exclude or ())

        png = self._repr_png_() if wanted("text/html") or wanted("image/png") else None
        bundle: dict[str, Any] = {}
        if wanted("text/html"):
            bundle["text/html"] = self._html_view(png)
        if png is not None and wanted("image/png"):
            bundle["image/png"] = png
        return bundle
