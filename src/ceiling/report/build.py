"""The report as a library call: `build_report(options) -> ReportPage`.

The command line (`ceiling report`) and the Python API both call this; it checks the
options, chooses the sections, runs them and computes the verdict. Writing the page and
the JSON record is the caller's (`ReportPage.html()`, `ReportPage.to_json()`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ceiling.errors import InvalidInput
from ceiling.report.compose import Report, ReportContext, SectionSpec
from ceiling.report.work import ReportOptions


@dataclass
class ReportPage:
    report: Report
    options: ReportOptions

    @property
    def verdict(self) -> list[dict[str, Any]]:
        return self.report.verdict

    @property
    def interrupted(self) -> bool:
        return self.report.interrupted

    def to_json(self) -> dict[str, Any]:
        return self.report.to_json()

    def html(self, json_name: str | None = None) -> str:
        from ceiling.report import html

        return html.render(self.report, json_name=json_name)


def check_options(options: ReportOptions) -> None:
    """Refuse bad input in one line before any section runs."""
    if options.profile is not None:
        if not options.profile.exists():  # anything else (a folder, a device) load names
            raise InvalidInput(
                f"profile {str(options.profile)!r} does not exist (run `ceiling bench --quick`)"
            )
        from ceiling.api.machine_profile import machine_profile

        machine_profile(options.profile)  # a malformed file is the user's to fix: one line
    if options.trace is not None and not options.trace.exists():
        raise InvalidInput(f"trace {str(options.trace)!r} does not exist")
    if options.spec is not None:
        from ceiling.api.specs import specs

        specs(options.spec)  # an unknown device: one line now, not a skipped section
    if options.model is not None and not options.is_callable_model:
        from ceiling.report.work import transformer

        transformer(options.model)


def choose_sections(options: ReportOptions) -> list[SectionSpec]:
    from ceiling.report.sections import SECTIONS, TRACE_SECTION

    specs = list(SECTIONS)
    if options.trace is not None:  # the user's run goes first, after the machine card
        specs.insert(1, TRACE_SECTION)
    if not options.only:
        return specs
    known = {s.key: s for s in specs}
    unknown = [k for k in options.only if k not in known]
    if unknown:
        raise InvalidInput(
            f"unknown section {', '.join(map(repr, unknown))}; sections are {', '.join(known)}"
        )
    return [s for s in specs if s.key in options.only]


def build_report(
    options: ReportOptions,
    progress: Callable[[str], None] | None = None,
    on_start: Callable[[int, SectionSpec], None] | None = None,
    on_done: Callable[[int, Any], None] | None = None,
    specs: list[SectionSpec] | None = None,
) -> ReportPage:
    """Run the report's sections on `options` (the user's work, or demos) and the verdict."""
    from ceiling.report import compose, verdict

    check_options(options)
    specs = specs if specs is not None else choose_sections(options)
    ctx = ReportContext(
        quick=options.quick,
        profile_path=options.profile,
        progress=progress,
        save_profile_to=options.save_profile_to,
        trace_path=options.trace,
        work=options,
    )
    rep = compose.compose(specs, ctx, on_start=on_start, on_done=on_done)
    rep.verdict = [f.to_json() for f in verdict.findings(rep.sections)]
    rep.work = work_json(options)
    return ReportPage(rep, options)


def work_json(options: ReportOptions) -> dict[str, Any]:
    return {
        "model": options.model,
        "trace": str(options.trace) if options.trace else None,
        "spec": options.spec,
        "gpus": options.gpus,
        "seq": options.seq,
        "global_batch": options.global_batch,
        "demos": not options.any_work,
    }
