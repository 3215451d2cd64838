"""A quick report kept as data: every section's text, tables, key figures and figures (SVG),
so a test can build the page with today's renderer without measuring anything.

The snapshot is plain JSON (gzip), read back into the report's own dataclasses; nothing in it
runs. Made again, after a section changes, with

    PYTHONPATH=src python tests/report_snapshot.py

which runs `ceiling.report(quick=True)` once on this machine (a few minutes) and writes
tests/data/report/quick-report.json.gz.
"""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path
from typing import Any

from ceiling.report.compose import (
    Figure,
    Highlight,
    Report,
    SectionOutput,
    SectionResult,
    Table,
)

SNAPSHOT = Path(__file__).parent / "data" / "report" / "quick-report.json.gz"


def dump(report: Report) -> dict[str, Any]:
    return {
        "created": report.created,
        "mode": report.mode,
        "host": report.host,
        "environment": report.environment,
        "elapsed_s": report.elapsed_s,
        "profile_source": report.profile_source,
        "interrupted": report.interrupted,
        "verdict": report.verdict,
        "work": report.work,
        "sections": [_dump_section(s) for s in report.sections],
    }


def _dump_section(s: SectionResult) -> dict[str, Any]:
    o = s.output
    blocks = []
    for kind, block in o.blocks:
        where = {"text": o.paragraphs, "table": o.tables, "figure": o.figures}[kind]
        blocks.append([kind, next(i for i, b in enumerate(where) if b is block)])
    return {
        "key": s.key,
        "title": s.title,
        "status": s.status,
        "reason": s.reason,
        "elapsed_s": s.elapsed_s,
        "paragraphs": o.paragraphs,
        "key_figures": o.key_figures,
        "highlights": [vars(h) for h in o.highlights],
        "tables": [{**vars(t), "modelled": list(t.modelled)} for t in o.tables],
        "figures": [
            {**vars(f), "data": base64.b64encode(f.data).decode("ascii")} for f in o.figures
        ],
        "notes": o.notes,
        "blocks": blocks,
        "subject": o.subject,
        "demo": o.demo,
    }


def load(data: dict[str, Any]) -> Report:
    return Report(
        created=data["created"],
        mode=data["mode"],
        host=data["host"],
        environment=data["environment"],
        sections=[_load_section(s) for s in data["sections"]],
        elapsed_s=data["elapsed_s"],
        profile_source=data["profile_source"],
        interrupted=data["interrupted"],
        verdict=data["verdict"],
        work=data["work"],
    )


def _load_section(s: dict[str, Any]) -> SectionResult:
    tables = [Table(**{**t, "modelled": tuple(t["modelled"])}) for t in s["tables"]]
    figures = [Figure(**{**f, "data": base64.b64decode(f["data"])}) for f in s["figures"]]
    by_kind = {"text": s["paragraphs"], "table": tables, "figure": figures}
    output = SectionOutput(
        paragraphs=s["paragraphs"],
        key_figures=s["key_figures"],
        highlights=[Highlight(**h) for h in s["highlights"]],
        tables=tables,
        figures=figures,
        notes=s["notes"],
        blocks=[(kind, by_kind[kind][i]) for kind, i in s["blocks"]],
        subject=s["subject"],
        demo=s["demo"],
    )
    return SectionResult(s["key"], s["title"], s["status"], s["reason"], s["elapsed_s"], output)


def read(path: Path = SNAPSHOT) -> Report:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return load(json.load(f))


def write(report: Report, path: Path = SNAPSHOT) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(dump(report), indent=None, separators=(",", ":"))
    with gzip.GzipFile(path, "wb", mtime=0) as f:  # the same report, the same bytes
        f.write(text.encode("utf-8"))


if __name__ == "__main__":
    import os
    import tempfile

    import ceiling

    with tempfile.TemporaryDirectory() as folder:
        # the run would save a profile as the default one when none exists: keep it apart
        os.environ["CEILING_PROFILE"] = str(Path(folder) / "profile.json")
        result = ceiling.report(quick=True)
    write(result.built.report)
    print(f"{SNAPSHOT}: {len(result.sections)} sections, {SNAPSHOT.stat().st_size:,} bytes")
