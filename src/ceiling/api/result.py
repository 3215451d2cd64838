"""What every public function returns: a typed result that owns its JSON and its views."""

from __future__ import annotations

from typing import Any

from ceiling.views.notebook import NotebookViews


class Result(NotebookViews):
    """A typed result: `to_dict()` is the command's `--json` record, a notebook shows its
    tables and figure, `to_pandas()` / `table()` give its rows; results with a figure give it
    by `figure()` (a matplotlib Figure)."""

    title: str = "ceiling result"

    def record(self) -> dict[str, Any]:  # pragma: no cover - every result defines it
        raise NotImplementedError

    def heading(self) -> str:
        return self.title
