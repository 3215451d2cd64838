"""A journal of measurements: each one appended as a JSON line and synced to disk as it
finishes, beside the file a run will write at its end. A full disk, a kill or a crash then
loses at most the measurement in progress; the run's own file replaces the journal when it is
written."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any

from ceiling.errors import NotSaved
from ceiling.records import jsonable


class Journal:
    """Appends `{"kind": ..., "row": ...}` lines to `path`; `kept` counts the lines on disk."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.kept = 0
        self._written: dict[str, int] = {}

    @classmethod
    def beside(cls, output: str | Path) -> Journal:
        """A new journal next to `output`, named for the run's start (UTC): an earlier run's
        journal is never overwritten."""
        out = Path(output)
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
        return cls(out.with_name(f"{out.name}.{stamp}.journal.jsonl"))

    def catch_up(self, rows_by_kind: dict[str, list[Any]]) -> None:
        """Append the rows of each kind not yet in the journal (lists only grow)."""
        for kind, rows in rows_by_kind.items():
            for row in rows[self._written.get(kind, 0) :]:
                shown = row.row() if hasattr(row, "row") else row
                self._append({"kind": kind, "row": jsonable(shown)})
                self._written[kind] = self._written.get(kind, 0) + 1

    def _append(self, entry: dict[str, Any]) -> None:
        line = (json.dumps(entry, allow_nan=False) + "\n").encode()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab", buffering=0) as f:
                _write_whole_or_nothing(f, line)
        except OSError as exc:
            why = f"cannot write {self.path}: {exc.strerror or exc}; the run stopped"
            raise self.not_saved(why) from None
        self.kept += 1

    def not_saved(self, why: str) -> NotSaved:
        """`why`, then what the journal kept and where, in one line."""
        if self.kept:
            kept = f"the {self.kept} finished measurement(s) are kept in {self.path}"
        else:
            kept = "no measurement had finished; nothing is kept"
        return NotSaved(f"{why}: {kept}")

    def remove(self) -> None:
        """The run's own file is written: the journal is no longer needed."""
        self.path.unlink(missing_ok=True)


def _write_whole_or_nothing(f, line: bytes) -> None:
    """`line` appended and synced, or (a full disk) the file cut back to where it was: the
    journal holds whole lines only."""
    end = f.seek(0, os.SEEK_END)
    try:
        view = memoryview(line)
        while view:  # unbuffered: a short write is continued, a refusal raised here
            view = view[f.write(view) :]
        os.fsync(f.fileno())
    except OSError:
        with contextlib.suppress(OSError):
            f.truncate(end)
        raise
