"""What every public function returns: a typed result that owns its JSON and its views."""

from __future__ import annotations

from typing import Any


class Result:
    """A typed result: `to_dict()` is the command's `--json` record, `_repr_html_()` its
    notebook view; results with a figure give it by `figure()` (a matplotlib Figure)."""

    title: str = "ceiling result"

    def record(self) -> dict[str, Any]:  # pragma: no cover - every result defines it
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types (inf and nan become None), exactly the command's `--json`."""
        from ceiling.records import jsonable

        return jsonable(self.record())

    def _repr_html_(self) -> str:
        from ceiling.report.notebook import record_html

        return record_html(self.heading(), self.to_dict())

    def heading(self) -> str:
        return self.title
