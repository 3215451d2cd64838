"""The whole report as a result: `ceiling.report(only=["amdahl", "roofline"])`.

Runs the same sections as `ceiling report` (quick mode by default) through the report's own
entry point and returns the record; with `output` it also writes the page and its JSON.
In a notebook the result shows the page itself.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ceiling.api.arguments import BadArgument, checked
from ceiling.api.result import Result
from ceiling.errors import InvalidInput


@dataclass
class ReportResult(Result):
    """The sections run (`built.report.sections`: status, figures, tables), the verdict, and
    where the page was written (`html_path`, None when not asked)."""

    built: Any  # report.build.ReportPage
    html_path: Path | None = None
    title = "ceiling report"

    @property
    def verdict(self) -> list[dict[str, Any]]:
        return self.built.verdict

    @property
    def sections(self) -> list[Any]:
        return self.built.report.sections

    def record(self) -> dict[str, Any]:
        out = self.built.to_json()
        if self.html_path is not None:
            out["html"] = str(self.html_path.resolve())
        return out

    def html(self) -> str:
        """The self-contained page (figures embedded, no network)."""
        return self.built.html()

    def _html_view(self, png: bytes | None) -> str:
        page = html.escape(self.html(), quote=True)
        return f'<iframe srcdoc="{page}" style="width:100%;height:720px;border:0"></iframe>'


def check_page(output: Path) -> Path:
    """The report's page path, refused now (not after the sections ran) unless it is an
    .html file in an existing folder that takes new files (the JSON record goes beside it)."""
    from ceiling.records import check_writable

    if output.suffix.lower() not in (".html", ".htm"):
        raise BadArgument(
            "output", f"must end in .html (the report is an HTML page), got {str(output)!r}"
        )
    if not output.parent.exists():
        raise InvalidInput(f"folder {str(output.parent)!r} for the report does not exist")
    if output.is_dir():
        raise InvalidInput(f"{str(output)!r} is a folder, not a file name")
    check_writable(output, create_folders=False)
    return output


@checked
def report(
    output: str | Path | None = None,
    *,
    quick: bool = True,
    only: str | Iterable[str] | None = None,
    machine_profile: str | Path | None = None,
    trace: str | Path | None = None,
    model: str | None = None,
    spec: str | None = None,
    gpus: int | None = None,
    seq: int | None = None,
    global_batch: int | None = None,
) -> ReportResult:
    """Measure this machine and run the analyses that make sense on it (`only`: section
    keys), about your work when given (`model`, `trace`, `spec` with `gpus`), else built-in
    demos; `machine_profile` is this machine's measured profile (default: the saved one when there
    is one, else it is measured now; not with `spec`). With `output`
    (a .html path) the page and its JSON record are written beside each other."""
    from ceiling.records import write_json_atomic, write_text_atomic
    from ceiling.report.build import build_report
    from ceiling.report.work import ReportOptions

    page = check_page(Path(output)) if output is not None else None
    options = ReportOptions(
        quick=quick,
        profile=Path(machine_profile) if machine_profile is not None else None,
        trace=Path(trace) if trace is not None else None,
        model=model,
        spec=spec,
        gpus=gpus,
        seq=seq,
        global_batch=global_batch,
        only=tuple(only.split(",") if isinstance(only, str) else only or ()),  # "a,b" too
    )
    built = build_report(options)
    result = ReportResult(built, page)
    if page is not None:
        json_path = page.with_suffix(".json")
        write_text_atomic(built.html(json_name=json_path.name), page)
        write_json_atomic(result.to_dict(), json_path)
    return result
