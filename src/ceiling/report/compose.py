"""Compose the report: run each section in turn, collect what it found, keep going on failure.

A section is a function `run(ctx, out)` that fills a `SectionOutput` from the library's own
functions. It raises `Skip` (or a `CeilingError` such as UnsupportedOnDevice) when it cannot
run on this machine or in this build; the report then shows the section with the reason in
one line instead of dropping it. Anything else a section raises is recorded as `failed` with
the error, and the report goes on: one broken analysis must not cost the user the page.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import importlib
import io
import os
import platform
import socket
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ceiling.errors import CeilingError

REPORT_VERSION = 2


class Skip(Exception):
    """Raised by a section that cannot run here; the message is the one-line reason."""


@dataclass
class Figure:
    caption: str
    mime: str  # "image/svg+xml" or "image/png"
    data: bytes
    alt: str
    # how it reads at 100 % zoom on the page (render/legibility.py), for the JSON and tests
    legibility: dict[str, Any] = field(default_factory=dict)


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str | None = None
    # columns holding modelled or datasheet figures (shown hatched), the rest measured
    modelled: tuple[int, ...] = ()


@dataclass
class Highlight:
    """A key figure as people read it: a label and a formatted value.

    `kind` is "measured" (here, now) or "modelled" (a model or a datasheet), and a modelled
    figure carries its model's validated error (report/validated.py) when there is one."""

    label: str
    display: str
    kind: str = "measured"
    error: str | None = None


@dataclass
class SectionOutput:
    """What a section found. Key figures are raw SI numbers for JSON; highlights for people."""

    paragraphs: list[str] = field(default_factory=list)
    key_figures: dict[str, Any] = field(default_factory=dict)
    highlights: list[Highlight] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # paragraphs, tables and figures in the order the section wrote them, for the page
    blocks: list[tuple[str, Any]] = field(default_factory=list)
    # what the section speaks of: the user's work, or a demo said to be one
    subject: str | None = None
    demo: bool = False

    def about(self, subject: str, demo: bool) -> None:
        self.subject, self.demo = subject, demo
        self.key_figures["demo"] = demo

    def text(self, paragraph: str) -> None:
        self.paragraphs.append(paragraph)
        self.blocks.append(("text", paragraph))

    def note(self, line: str) -> None:
        """A caveat shown in small print under the section (noise, estimates, missing parts)."""
        self.notes.append(line)

    def key(
        self,
        name: str,
        value: Any,
        label: str | None = None,
        display: str | None = None,
        kind: str = "measured",
        error: str | None = None,
    ):
        """Record a key figure; with a label and display it is also shown at the section top."""
        self.key_figures[name] = value
        if label is not None and display is not None:
            self.highlights.append(Highlight(label, display, kind, error))

    def highlight(
        self, label: str, display: str, kind: str = "measured", error: str | None = None
    ) -> None:
        self.highlights.append(Highlight(label, display, kind, error))

    def table(
        self,
        title: str,
        columns: list[str],
        rows: Iterable[Iterable[Any]],
        note=None,
        modelled: Iterable[int] = (),
    ):
        """A table; `modelled`: indices of the columns that are modelled or datasheet."""
        cells = [[_cell(v) for v in r] for r in rows]
        t = Table(title, list(columns), cells, note=note, modelled=tuple(modelled))
        self.tables.append(t)
        self.blocks.append(("table", t))

    def figure(self, fig, caption: str, alt: str | None = None) -> None:
        """Embed a matplotlib figure as SVG; the figure is closed afterwards."""
        from ceiling.render import legibility

        checked = legibility.make_legible(fig)
        f = Figure(caption, "image/svg+xml", figure_svg(fig), alt or caption, checked)
        self.figures.append(f)
        self.blocks.append(("figure", f))


@dataclass
class SectionResult:
    key: str
    title: str
    status: str
    reason: str | None
    elapsed_s: float
    output: SectionOutput
    # the machine's load while a measuring section ran (api/machine_load.py's record)
    load: dict[str, Any] | None = None

    @property
    def busy_reasons(self) -> list[str]:
        """Why the figures this section measured read low: other work shared the machine
        while it ran, or the profile it measured with was taken on a busy machine."""
        from ceiling.api.machine_load import busy_reasons

        saved = self.output.key_figures.get("busy_reasons") or []
        return list(dict.fromkeys([*busy_reasons(self.load), *saved]))

    def to_json(self) -> dict[str, Any]:
        o = self.output
        return {
            "key": self.key,
            "title": self.title,
            "status": self.status,
            "reason": self.reason,
            "load": self.load,
            "busy": bool(self.busy_reasons),
            "elapsed_s": round(self.elapsed_s, 3),
            "key_figures": o.key_figures,
            "subject": o.subject,
            "demo": o.demo,
            "highlights": [
                {"label": h.label, "value": h.display, "kind": h.kind, "error": h.error}
                for h in o.highlights
            ],
            "text": o.paragraphs,
            "tables": [
                {
                    "title": t.title,
                    "columns": t.columns,
                    "rows": t.rows,
                    "note": t.note,
                    "modelled_columns": [t.columns[i] for i in t.modelled],
                }
                for t in o.tables
            ],
            "figures": [
                {"caption": f.caption, "format": f.mime, "legibility": f.legibility}
                for f in o.figures
            ],
            "notes": o.notes,
        }


@dataclass(frozen=True)
class SectionSpec:
    key: str
    title: str
    run: Callable[[ReportContext, SectionOutput], None]
    # rough seconds in quick mode, so the progress bar moves at about the right pace
    weight_s: float = 1.0
    # it measures this machine: its load is recorded, and a busy run draws no verdict
    measures: bool = False


@dataclass
class Report:
    created: str
    mode: str
    host: str
    environment: dict[str, Any]
    sections: list[SectionResult]
    elapsed_s: float
    profile_source: str | None = None
    interrupted: bool = False
    # the findings that open the page (report/verdict.py) and the work the page speaks of
    verdict: list[dict[str, Any]] = field(default_factory=list)
    work: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "report_version": REPORT_VERSION,
            "work": self.work,
            "verdict": self.verdict,
            "created": self.created,
            "mode": self.mode,
            "host": self.host,
            "environment": self.environment,
            "profile_source": self.profile_source,
            "elapsed_s": round(self.elapsed_s, 3),
            "interrupted": self.interrupted,
            "sections": [s.to_json() for s in self.sections],
        }


class ReportContext:
    """What sections share: the mode, the machine profile (measured once), a progress hook."""

    def __init__(
        self,
        quick: bool = True,
        profile_path: str | Path | None = None,
        progress: Callable[[str], None] | None = None,
        save_profile_to: str | Path | None = None,
        trace_path: str | Path | None = None,
        work=None,
    ):
        from ceiling.report.work import ReportOptions

        # the user's work (model, cluster, trace) or the demos; see report/work.py
        self.work = work if work is not None else ReportOptions(quick=quick)
        self.quick = quick
        self.trace_path = Path(trace_path) if trace_path is not None else None  # user's trace
        self.save_profile_to = Path(save_profile_to) if save_profile_to is not None else None
        self.profile_path = Path(profile_path) if profile_path is not None else None
        self._progress = progress or (lambda _msg: None)
        self._profile: Any = None
        self._profile_error: BaseException | None = None
        self.profile_source: str | None = None
        self.profile_file: Path | None = None  # where the profile in use is saved
        self.measured_now = False  # no profile given or saved: measured by this report
        self.load_watch: Callable[[], Any] = _load_watch  # a fake machine's in tests

    @property
    def mode(self) -> str:
        return "quick" if self.quick else "full"

    def step(self, message: str) -> None:
        """Tell the progress display what the current section is doing now."""
        self._progress(message)

    def profile(self):
        """The machine profile: loaded from --profile, or measured now (once) and saved.

        Raises Skip when the measurement code is not part of this build.
        """
        return self.profile_result().profile

    def profile_result(self):
        """The `ceiling.api.machine_profile` result the profile came from (its overheads)."""
        if self._profile is not None:
            return self._profile
        if self._profile_error is not None:
            raise self._profile_error
        try:
            self._profile = self._load_or_measure()
        except BaseException as exc:
            self._profile_error = exc
            raise
        return self._profile

    def _load_or_measure(self):
        from ceiling.api.machine_profile import machine_profile, measure_profile

        # the one device rule (hardware/resolve.py): --profile, else the saved profile when
        # there is one; only without either is this machine measured now. A profile the user
        # measured before (perhaps a full one) is not overwritten by the report's quick one;
        # the report keeps its own copy next to the page.
        result = machine_profile(self.profile_path)
        if result is not None:
            self.step(f"loaded profile {result.path}")
        else:
            self.measured_now = True
            result = measure_profile(
                quick=self.quick, save=self.save_profile_to, progress=self.step
            )
        self.profile_source = result.source
        self.profile_file = result.path
        return result


def figure_svg(fig) -> bytes:
    """A matplotlib figure as SVG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    return buf.getvalue()


def _load_watch():
    from ceiling.api.machine_load import watch

    return watch()


def run_section(spec: SectionSpec, ctx: ReportContext) -> SectionResult:
    out = SectionOutput()
    t0 = time.perf_counter()
    status, reason = "ok", None
    watch = ctx.load_watch() if spec.measures else contextlib.nullcontext()
    try:
        with watch:
            spec.run(ctx, out)
    except Skip as exc:
        status, reason = "skipped", str(exc)
    except CeilingError as exc:
        # the library's own "cannot do that here" (no GPU, does not fit, ...) is a skip
        status, reason = "skipped", str(exc)
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        status = "failed"
        where = traceback.extract_tb(exc.__traceback__)[-1]
        reason = (
            f"{type(exc).__name__}: {exc} (at {Path(where.filename).name}:{where.lineno})".strip()
        )
    if status != "ok":
        # a section that stopped half way must not show half its numbers as if complete
        out = SectionOutput(notes=out.notes, subject=out.subject, demo=out.demo)
    load = watch.record.to_json() if spec.measures and watch.record else None
    result = SectionResult(
        spec.key, spec.title, status, _one_line(reason), time.perf_counter() - t0, out, load
    )
    if status == "ok" and load is not None:
        out.key_figures["load"] = load  # the page marks it busy; the verdict says what to do
    return result


def compose(
    specs: list[SectionSpec],
    ctx: ReportContext,
    on_start: Callable[[int, SectionSpec], None] | None = None,
    on_done: Callable[[int, SectionResult], None] | None = None,
) -> Report:
    """Run every section in order; never stops early except on Ctrl-C."""
    t0 = time.perf_counter()
    results = []
    interrupted = False
    for i, spec in enumerate(specs):
        if interrupted:
            reason = "not run: the report was interrupted (Ctrl-C)"
            results.append(
                SectionResult(spec.key, spec.title, "skipped", reason, 0.0, SectionOutput())
            )
            continue
        if on_start:
            on_start(i, spec)
        try:
            res = run_section(spec, ctx)
        except KeyboardInterrupt:
            # keep what finished: the page is still written, the rest marked as not run
            interrupted = True
            reason = "interrupted (Ctrl-C) while running"
            res = SectionResult(spec.key, spec.title, "skipped", reason, 0.0, SectionOutput())
        results.append(res)
        if on_done:
            on_done(i, res)
    return Report(
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        mode=ctx.mode,
        host=socket.gethostname(),
        environment=environment(),
        sections=results,
        elapsed_s=time.perf_counter() - t0,
        profile_source=ctx.profile_source,
        interrupted=interrupted,
    )


def environment() -> dict[str, Any]:
    """Library versions and the platform; torch only if it is already loaded or importable."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }
    for name in ("ceiling", "torch", "numpy", "scipy", "matplotlib"):
        try:
            mod = importlib.import_module(name)
            env[name] = getattr(mod, "__version__", "unknown")
        except ImportError:
            env[name] = None
    return env


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _one_line(s: str | None) -> str | None:
    if s is None:
        return None
    line = " ".join(s.split())
    return line if len(line) <= 300 else line[:297] + "..."
