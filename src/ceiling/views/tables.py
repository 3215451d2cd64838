"""A result's rows as tables: each list of rows in its JSON record by name, as plain dicts or
as a pandas DataFrame (pandas is optional: only `data_frame` needs it)."""

from __future__ import annotations

from typing import Any

from ceiling.errors import InvalidInput, MissingDependency

SUMMARY = "summary"  # the record's single values as one row


def _is_rows(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(r, dict) for r in value)


def _is_single(value: Any) -> bool:
    return not isinstance(value, (dict, list, tuple))


def row_lists(record: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Every non-empty list of rows in `record` by its dotted name ("plans",
    "expected.rows"): the record's own first, then those inside its dicts."""
    found: dict[str, list[dict[str, Any]]] = {}
    level: list[tuple[str, dict[str, Any]]] = [("", record)]
    while level:
        deeper = []
        for prefix, mapping in level:
            for key, value in mapping.items():
                if _is_rows(value):
                    found[prefix + str(key)] = value
                elif isinstance(value, dict):
                    deeper.append((f"{prefix}{key}.", value))
        level = deeper
    return found


def named_tables(
    record: dict[str, Any], lists: dict[str, list[dict[str, Any]]]
) -> dict[str, list[dict[str, Any]]]:
    """`lists` and, last, the record's single values as the one-row "summary" table."""
    return {**lists, SUMMARY: [{k: v for k, v in record.items() if _is_single(v)}]}


def pick(tables: dict[str, list[dict[str, Any]]], name: str | None) -> list[dict[str, Any]]:
    """The rows of table `name`; by default the first (the record's main list of rows)."""
    if name is None:
        return next(iter(tables.values()))
    if name not in tables:
        raise InvalidInput(f"no table {name!r} in this result; its tables: {', '.join(tables)}")
    return tables[name]


def data_frame(rows: list[dict[str, Any]]) -> Any:
    """A pandas DataFrame of `rows`, nested values as dotted columns ("accuracy.p90")."""
    try:
        import pandas
    except ImportError:
        raise MissingDependency(
            "to_pandas() needs pandas, which is not installed: pip install pandas"
        ) from None
    return pandas.json_normalize(rows, sep=".")
